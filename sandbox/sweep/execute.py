"""Running a sweep: local processes (default) or a Ray cluster, resumable, failure-tolerant.

Each run writes ``<out>/runs/<id>/`` through :func:`sandbox.run.runner.run_scenario`; its
``summary.json`` (written last, atomically) marks it finished, so a re-run after an interruption
skips it. A run that raises writes ``error.json`` (the traceback) and the sweep goes on; it is not
retried unless asked (``retry_failed``). A diverged run is an ordinary result (status ``diverged``).

A run whose process dies (killed, out of memory, a lost Ray node) is a fault of the machine, not
a result of the run. On Ray the task is retried up to ``[sweep] retries`` times (Ray's
``max_retries``, which retries only such system failures, never a run that raised). On the local
process pool a dead worker breaks the pool without naming its run, so the runs in flight then are
run again one at a time, each up to ``retries + 1`` times (:func:`_run_pool`). When the tries are
spent the run is recorded as failed (``error.json`` with ``worker_died``, the reason in the results
table) and the sweep goes on; the next invocation of the sweep runs it again without
``retry_failed``.

Only the sweep's command writes the sweep directory, holding its lock: a worker (a pool process or a
Ray task) writes its run into a pending directory (``runs/.pending-<id>-*``, or on Ray a temporary
directory whose files it returns), and the command moves the result into ``runs/<id>``
(:func:`land`). The workers die with the command (:mod:`sandbox.base.processes`), and a result that a
worker finishes after its command is gone is never moved in; the next invocation removes it. A run
directory, ``runs/`` or the lock file that is a symbolic link is refused (the sweep writes only into
directories it created), and so is an existing ``--out`` that is not a sweep's directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sandbox.base.outputs import (
    OutputError,
    atomic_write,
    check_out_path,
    commit_run,
    is_transient_dir,
    open_dir,
    output_lock,
    own_dir,
    plain_name,
    remove_orphans,
    safe_name,
    user_path,
    write_json,
    write_text,
    write_text_at,
)
from sandbox.base.processes import _alive, bind_to, pool_context, terminate_as_interrupt
from sandbox.sweep.results import (
    MANIFEST,
    METRICS,
    RESULTS,
    RUNS,
    result_row,
    run_dir,
    run_state,
    worker_died,
    write_manifest,
    write_metrics,
    write_results,
)
from sandbox.sweep.spec import RunSpec, SweepSpec, load_sweep, value_label

RAY_HINT = 'the Ray backend needs the optional extra: pip install -c constraints-cpu.txt -e ".[ray]"'


class SweepError(RuntimeError):
    """A sweep that cannot be run as asked (e.g. a missing backend)."""


# ------------------------------------------------------------------------------------------------
# one run (executed in a worker process, a Ray task or in-process)
# ------------------------------------------------------------------------------------------------


def _init_worker() -> None:
    """Worker processes: one intra-op thread (torch reductions are much slower with more on
    small tensors, and the runs already fill the cores)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


def _pool_worker(command: int) -> None:
    """Initializer of the pool's worker processes: one torch thread (:func:`_init_worker`), and the
    process dies with the sweep's command ``command`` (:func:`sandbox.base.processes.bind_to`)."""
    bind_to(command)
    _init_worker()


def execute_run(rid: str, data: dict, out_dir: str, meta: dict, root: str | Path | None = None) -> dict:
    """Run one scenario into ``out_dir`` (in this process): written into a pending directory beside
    it (:func:`execute_pending`), then moved into place (:func:`sandbox.base.outputs.commit_run`, reaching
    ``out_dir`` from ``root``, default its parent, without following a link); never raises for a
    failure of the run itself."""
    out = Path(out_dir)
    rec = execute_pending(rid, data, str(out.parent), meta)
    land(rec, out, Path(root) if root is not None else out.parent)
    return rec


def execute_pending(rid: str, data: dict, runs_dir: str, meta: dict) -> dict:
    """What a worker process runs: the run written into a new directory
    ``<runs_dir>/.pending-<rid>-*/<rid>`` (the record's ``pending``), which only the sweep's command,
    holding the sweep's lock, moves into ``runs/<rid>`` (:func:`land`): a worker whose sweep is gone
    (killed) lands nothing, and the next invocation removes what it left. Never raises for a failure
    of the run itself (``error.json``)."""
    _init_worker()
    root = Path(runs_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = _pending_dir(root, rid)
    rec = _execute_into(rid, data, tmp / rid, meta)
    rec["pending"] = str(tmp / rid)
    return rec


def _pending_dir(runs: Path, rid: str) -> Path:
    """A new ``<runs>/.pending-<rid>-<random>`` directory (as :func:`tempfile.mkdtemp`), created
    through a descriptor of ``runs`` opened without following a link: a ``runs/`` replaced by a
    link while the sweep runs gets no directory of ours behind it (:class:`OutputError`)."""
    import secrets

    try:
        fd = os.open(runs, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise OutputError(
            f"--out: {runs} is not a directory the sweep created (a symbolic link?): {exc.strerror or exc}; remove it"
        ) from None
    try:
        for _ in range(100):
            name = f".pending-{rid}-{secrets.token_hex(4)}"
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                continue
            return runs / name
        raise OutputError(f"--out: cannot create a pending directory in {runs}")
    finally:
        os.close(fd)


def land(rec: dict, out: Path, root: Path) -> None:
    """Move a record's pending run directory (if any) into ``out``, its run directory, reached from
    ``root`` (the sweep's directory) without following a link (:func:`sandbox.base.outputs.commit_run`)."""
    pending = rec.pop("pending", None)
    if pending is None:
        return
    src = Path(pending)
    try:
        commit_run(src, out, root=root)
    finally:
        if is_transient_dir(src.parent.name):
            shutil.rmtree(src.parent, ignore_errors=True)


def _execute_into(rid: str, data: dict, out: Path, meta: dict) -> dict:
    """Run one scenario into the new directory ``out`` (its parent exists: it is not created through
    a link swapped in meanwhile)."""
    out.mkdir(exist_ok=True)
    write_json(out / "run.json", meta)
    t0 = time.perf_counter()
    try:
        from sandbox.run.runner import run_scenario
        from sandbox.scenario.load import validate_scenario

        scn = validate_scenario(data, f"run {rid}")
        # the sweep checked every run's memory when planning; trackers: the run named by its values, grouped by sweep
        res = run_scenario(scn, out, force=True, name=tracker_name(rid, meta), group=str(meta.get("sweep", "")))
        wall = time.perf_counter() - t0
        write_json(out / "timing.json", {"wall_s": wall, "pid": os.getpid()})
        return {"id": rid, "state": "done", "status": res.summary.get("status", res.status), "wall_s": wall}
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
        wall = time.perf_counter() - t0
        err = {"id": rid, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(), "wall_s": wall}
        write_json(out / "error.json", err)
        return {"id": rid, "state": "failed", "status": "failed", "error": err["error"], "wall_s": wall}


def tracker_name(rid: str, meta: dict) -> str:
    """The name of a sweep run in W&B: its swept values and seed (``variant=vcpo seed=1``), else its id."""
    parts = [f"{k.split('.')[-1]}={value_label(v)}" for k, v in (meta.get("params") or {}).items()]
    if meta.get("seed") is not None:
        parts.append(f"seed={meta['seed']}")
    return " ".join(parts) or rid


SCRATCH = re.compile(r"^sandbox-(?P<rid>.+)-(?P<pid>\d+)-[A-Za-z0-9_]{8}$")
"""The temporary directories of :func:`execute_run_packed`: ``sandbox-<run id>-<pid>-<random>``."""


def execute_run_packed(rid: str, data: dict, meta: dict) -> dict:
    """For remote workers without a shared filesystem: run into a temporary directory named after
    the run (the name writers such as W&B see) and return the files' bytes, which the driver unpacks
    into the run directory. The directory is named with the worker's pid, so that the directories of
    killed workers are found and removed (:func:`remove_scratch`): by each later task on the same
    machine, and by the driver when a worker dies and when the sweep ends."""
    remove_scratch()
    tmp = Path(tempfile.mkdtemp(prefix=f"sandbox-{rid}-{os.getpid()}-"))
    try:
        run = tmp / rid
        rec = _execute_into(rid, data, run, meta)
        files = {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}
        rec["files"] = files
        return rec
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_scratch(root: str | Path | None = None) -> int:
    """Remove the temporary directories of :func:`execute_run_packed` left by worker processes that
    no longer run (killed), in ``root`` (default: the temporary directory); only this user's, only
    directories (never a link). Returns how many."""
    root = Path(root or tempfile.gettempdir())
    n = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    uid = os.getuid() if hasattr(os, "getuid") else None
    for e in entries:
        m = SCRATCH.match(e.name)
        if not m:
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if not e.is_dir(follow_symlinks=False) or (uid is not None and st.st_uid != uid):
            continue
        pid = int(m.group("pid"))
        if pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(e.path, ignore_errors=True)
        n += 1
    return n


def _unpack(files: dict[str, bytes], out: Path) -> None:
    """Write returned files atomically; the completion markers last. Only plain relative paths
    inside ``out`` (a returned name is data, not a path to trust)."""
    last = ("summary.json", "error.json")
    for name in sorted(files, key=lambda n: n in last):
        parts = Path(name).parts
        if Path(name).is_absolute() or not parts or not all(plain_name(p) for p in parts):
            raise SweepError(f"a worker returned the file name {name!r}, which is not inside its run directory")
        atomic_write(out.joinpath(*parts), lambda p, b=files[name]: p.write_bytes(b))


# ------------------------------------------------------------------------------------------------
# the sweep
# ------------------------------------------------------------------------------------------------


@dataclass
class SweepOutcome:
    out: Path
    results: pd.DataFrame
    ran: int  # runs computed in this call
    skipped: int  # finished before this call
    failed: int  # runs with an error (this call or earlier)
    wall_s: float


def default_out(spec: SweepSpec) -> Path:
    """``[sweep] out`` (a relative path, checked when the file is read; ``~`` is expanded as in
    ``--out``: :func:`sandbox.base.outputs.user_path`) or ``runs/sweeps/<name>`` with the name made a safe
    directory name (:func:`sandbox.base.outputs.safe_name`)."""
    return user_path(spec.out) if spec.out else Path("runs") / "sweeps" / safe_name(spec.name)


def manifest_of(spec: SweepSpec) -> dict:
    return {
        "name": spec.name,
        "source": spec.source,
        "description": spec.description,
        "axes": spec.axes,
        "seeds": spec.seeds,
        "set": spec.set,
        "runs": [{"id": r.id, "params": r.params, "seed": r.seed} for r in spec.runs],
    }


def _meta(run: RunSpec, spec: SweepSpec) -> dict:
    return {"id": run.id, "sweep": spec.name, "params": run.params, "seed": run.seed, "overrides": run.overrides}


def run_sweep(
    spec: SweepSpec | str | Path,
    out: str | Path | None = None,
    *,
    workers: int | None = None,
    backend: str | None = None,
    address: str | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    console=None,
    on_result: Callable[[dict], None] | None = None,
    force: bool = False,
    retries: int | None = None,
) -> SweepOutcome:
    """Run every unfinished run of a sweep and write the results tables.

    ``workers``: parallel runs (default ``[sweep] workers`` or one per core; 1 runs in this process).
    ``backend``: ``local`` (process pool) or ``ray`` (``address`` of a cluster, else a local one).
    ``retry_failed``: also run again the runs that raised (runs whose process died always are).
    ``force``: skip the planning-time memory check (:func:`check_memory`).
    ``retries``: times a run is retried when its worker process dies (Ray's max_retries; on the local pool, alone; default
    ``[sweep] retries``, 2).
    """
    if not isinstance(spec, SweepSpec):
        spec = load_sweep(spec)
    out = user_path(out) if out is not None else default_out(spec)
    if not force:
        check_memory(spec, workers or spec.workers or os.cpu_count() or 1, backend or spec.backend, address)
    check_sweep_dir(out)
    with output_lock(out):  # a second process on the same directory is refused (OutputError)
        # what an interrupted sweep left: temporary files of its own files, anything in runs/
        remove_orphans(
            out, recursive=False, names=(MANIFEST, RESULTS, METRICS, "sweep.toml", "base.toml", "report.html")
        )
        check_run_dirs(out, spec)
        remove_orphans(out / RUNS)
        return _run_sweep(
            spec,
            out,
            workers,
            backend,
            address,
            retry_failed,
            progress,
            console,
            on_result,
            spec.retries if retries is None else retries,
        )


SWEEP_FILES = (MANIFEST, RESULTS, METRICS, RUNS, "sweep.toml", "base.toml", "report.html")


def check_sweep_dir(out: Path) -> None:
    """A sweep writes into a directory of its own: missing, empty, or one a sweep wrote (its
    ``sweep.json``, or only files of a sweep). Anything else is refused (:class:`OutputError`) before
    a file is written there (e.g. ``--out /`` or a home directory)."""
    check_out_path(out)
    try:
        names = sorted(n for n in os.listdir(out) if not n.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return  # missing (created by the lock), or a file (refused by the lock, naming it)
    except OSError as exc:
        raise OutputError(f"--out: cannot read {out} ({exc.strerror or exc})") from None
    if MANIFEST in names:
        return
    foreign = [n for n in names if n not in SWEEP_FILES]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OutputError(
            f"--out: {out} holds files that are not part of a sandbox sweep ({shown}); choose an empty "
            "or new directory, or remove them"
        )


def check_run_dirs(out: Path, spec: SweepSpec) -> None:
    """The sweep writes into ``<out>/runs`` and ``<out>/runs/<id>``: each must be a real directory
    of the sweep's, not a symbolic link planted there (writing through it would write elsewhere):
    :class:`sandbox.base.outputs.OutputError` naming it, before anything is written."""
    runs = own_dir(out / RUNS)
    for r in spec.runs:
        path = runs / r.id
        if os.path.islink(path) or (os.path.lexists(path) and not path.is_dir()):
            raise OutputError(
                f"--out: {path} is {'a symbolic link' if os.path.islink(path) else 'not a directory'}; "
                "the sandbox writes only into run directories it created: remove it"
            )


def _run_sweep(
    spec: SweepSpec, out: Path, workers, backend, address, retry_failed, progress, console, on_result, retries: int
) -> SweepOutcome:
    backend = backend or spec.backend
    workers = workers or spec.workers or os.cpu_count() or 1
    write_manifest(out, manifest_of(spec))
    if spec.text:
        write_text(out / "sweep.toml", spec.text)
    if spec.runs:
        from sandbox.scenario.load import dump_scenario

        write_text(out / "base.toml", dump_scenario(spec.runs[0].scenario()))

    entries = {r.id: {"id": r.id, "params": r.params, "seed": r.seed} for r in spec.runs}
    rows = {rid: result_row(e, out) for rid, e in entries.items()}
    todo, skipped = [], 0
    for r in spec.runs:
        state = run_state(run_dir(out, r.id))
        if state == "done" or (state == "failed" and not retry_failed and not worker_died(run_dir(out, r.id))):
            skipped += 1
        else:
            todo.append(r)
    write_results(out, list(rows.values()))

    t0 = time.perf_counter()
    ran = 0
    counts = {"completed": 0, "diverged": 0, "failed": 0}
    for row in rows.values():
        if row["status"] in counts:
            counts[row["status"]] += 1

    from rich.console import Console

    from sandbox.base import progress as shown

    console = console or Console()

    def info() -> str:
        done = f"{skipped} done before  " if skipped else ""
        return f"{done}ok {counts['completed']}  diverged {counts['diverged']}  failed {counts['failed']}"

    def finished(rec: dict) -> None:
        nonlocal ran
        ran += 1
        rid = rec["id"]
        rows[rid] = result_row(entries[rid], out)
        status = rows[rid]["status"]
        if status in counts:
            counts[status] += 1
        write_results(out, list(rows.values()))
        bar.advance(info=info())
        if status == "failed" and progress:
            console.print(f"[red]run {rid} failed[/red] ({_params_text(entries[rid])}): {rows[rid]['error']}")
        if on_result:
            on_result(rows[rid])

    # ETA: the runs of this call weighted by their estimated time (sandbox.scenario.budget); the finished ones count as done
    with shown.session(shown.enabled(not progress)), _sigterm_as_interrupt():
        if todo and backend == "local":
            warm_start(todo)  # before the runs' task, whose ETA it would skew
        bar_cm = shown.task(f"sweep {spec.name}: runs", weights=[_seconds(r) for r in todo], unit="runs")
        bar = bar_cm.__enter__()
        try:
            bar.update(info=info())
            with _sigterm_as_interrupt():
                if not todo:
                    pass
                elif backend == "ray":
                    _run_ray(spec, todo, out, workers, address, finished, retries)
                elif backend == "local":
                    if workers == 1:
                        _run_inline(spec, todo, out, finished)
                    else:
                        _run_pool(spec, todo, out, workers, finished, retries)
                else:
                    raise SweepError(f"unknown backend {backend!r}; expected local or ray")
        finally:
            remove_orphans(out / RUNS, recursive=False)  # pending directories of workers stopped or killed meanwhile
            write_results(out, [result_row(e, out) for e in entries.values()])
            write_metrics(out, list(entries))
            bar_cm.__exit__(None, None, None)
    results = pd.read_parquet(out / RESULTS)
    return SweepOutcome(
        out=out,
        results=results,
        ran=ran,
        skipped=skipped,
        failed=int((results.status == "failed").sum()) if len(results) else 0,
        wall_s=time.perf_counter() - t0,
    )


def _seconds(run: RunSpec) -> float:
    """A run's estimated wall time (:func:`sandbox.scenario.budget.estimate`), the weight of its progress unit; 1 if it
    cannot be estimated."""
    try:
        from sandbox.scenario.budget import estimate

        return max(float(estimate(run.scenario()).seconds), 1e-3)
    except Exception:  # noqa: BLE001 - the estimate only weighs the ETA
        return 1.0


def warm_start(todo: list[RunSpec]) -> int:
    """Train (or find cached) the LM base model of every distinct LM task among ``todo`` here, before
    the runs start, so that the worker processes load it from the cache instead of each training it
    at once, and the warm start is shown as a labelled phase of the sweep (sandbox.base.progress). The
    base model depends on the task config only (sandbox.tasks.lm.warmstart), so the runs' numbers
    are unchanged. A task that cannot be built is left to its run, which records the error.
    Returns the number of base models trained or loaded."""
    import json

    from sandbox.tasks import TASKS  # the task registry (every task module): a sweep without runs to do never loads it

    seen: set[str] = set()
    for r in todo:
        try:
            cfg = r.scenario().task
            impl = TASKS.entry_for(cfg).impl
            if not impl.needs_preload(cfg):  # the task's declaration (Task.needs_preload)
                continue
            key = json.dumps(cfg.model_dump(mode="json"), sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            impl.preload(cfg)
        except Exception:  # noqa: BLE001 - the run itself reports it
            continue
    return len(seen)


def check_memory(spec: SweepSpec, workers: int, backend: str = "local", address: str | None = None) -> None:
    """Refuse the sweep before anything is written (SweepError) when a run's estimated memory
    exceeds the available memory, or the largest runs together do when ``workers`` run at once
    (:mod:`sandbox.scenario.budget`). Runs sent to a Ray cluster at ``address`` run elsewhere: not checked."""
    if backend == "ray" and address:
        return
    from sandbox.scenario.budget import check_parallel, estimate
    from sandbox.scenario.load import ScenarioError

    budgets = {
        f"{r.id} ({_params_text({'params': r.params, 'seed': r.seed})})": estimate(r.scenario()) for r in spec.runs
    }
    try:
        check_parallel(budgets, min(workers, len(spec.runs)))
    except ScenarioError as exc:
        raise SweepError(str(exc)) from None


def _params_text(entry: dict) -> str:
    parts = [f"{k}={v}" for k, v in entry["params"].items()]
    return ", ".join(parts + [f"seed={entry['seed']}"])


_sigterm_as_interrupt = terminate_as_interrupt  # SIGTERM stops the runs as Ctrl-C does (sandbox.base.processes)


def _run_inline(spec: SweepSpec, todo: list[RunSpec], out: Path, finished) -> None:
    import torch

    threads = torch.get_num_threads()
    try:
        for r in todo:
            finished(execute_run(r.id, r.data, str(run_dir(out, r.id)), _meta(r, spec), root=out))
    finally:
        torch.set_num_threads(threads)


def _run_pool(spec: SweepSpec, todo: list[RunSpec], out: Path, workers: int, finished, retries: int = 0) -> None:
    """Runs on a pool of ``workers`` processes, at most one queued run per worker, so that the runs
    submitted and unfinished are the ones in flight. A worker process that dies breaks the whole
    pool (:class:`BrokenProcessPool` for every unfinished run) without saying which run killed it:
    the runs in flight then are suspects, and each runs again alone in a fresh one-process pool,
    where a death names its run; the other runs go on in a fresh pool. A suspect whose process dies
    alone ``retries + 1`` times is recorded as failed (``error.json`` with ``worker_died``, as on
    Ray), and the next invocation of the sweep runs it again."""
    queue = list(todo)
    while queue:
        before = len(queue)
        suspects, queue = _pool_pass(spec, queue, out, workers, finished)
        if not suspects and len(queue) == before:
            raise SweepError(
                "the worker processes die before running anything (out of memory, or they cannot start); "
                "finished runs are kept, run the sweep again to resume"
            )
        for r in suspects:
            _run_alone(spec, r, out, finished, retries)


def _pool_pass(
    spec: SweepSpec, queue: list[RunSpec], out: Path, workers: int, finished
) -> tuple[list[RunSpec], list[RunSpec]]:
    """Run ``queue`` on one pool until it is done or the pool breaks; returns (the runs in flight
    when it broke, the runs not yet submitted)."""
    ex = ProcessPoolExecutor(
        max_workers=min(workers, len(queue)),
        mp_context=pool_context(),
        initializer=_pool_worker,
        initargs=(os.getpid(),),
    )
    waiting = list(queue)
    runs = str(out / RUNS)

    def landed(rec: dict) -> None:
        land(
            rec, run_dir(out, rec["id"]), out
        )  # here, holding the sweep's lock: the worker only wrote a pending directory
        finished(rec)

    pending: dict[Any, RunSpec] = {}

    def submit() -> bool:
        """Fill the free workers; False when the pool turns out broken."""
        while waiting and len(pending) < workers:
            r = waiting[0]
            try:
                fut = ex.submit(execute_pending, r.id, r.data, runs, _meta(r, spec))
            except BrokenProcessPool:
                return False
            pending[fut] = waiting.pop(0)
        return True

    try:
        broken = not submit()
        while pending or broken:
            done = wait(list(pending), return_when=FIRST_COMPLETED)[0] if not broken else set()
            for fut in done:
                try:
                    rec = fut.result()
                except BrokenProcessPool:
                    broken = True
                    continue
                landed(rec)
                del pending[fut]
            if broken:
                _stop_pool(ex)
                for fut in [
                    f for f in pending if f.done() and not f.cancelled() and f.exception() is None
                ]:  # finished before the break
                    landed(fut.result())
                    del pending[fut]
                return list(pending.values()), waiting
            broken = not submit()
    except BaseException:
        for fut in pending:
            fut.cancel()
        _stop_pool(ex)
        raise
    ex.shutdown(wait=True)
    return [], []


def _run_alone(spec: SweepSpec, r: RunSpec, out: Path, finished, retries: int) -> None:
    """A run that was in flight when a pool broke, alone in a one-process pool, up to ``retries + 1``
    times while its process dies."""
    last: BaseException | None = None
    for _ in range(retries + 1):
        ex = ProcessPoolExecutor(
            max_workers=1, mp_context=pool_context(), initializer=_pool_worker, initargs=(os.getpid(),)
        )
        try:
            rec = ex.submit(execute_pending, r.id, r.data, str(out / RUNS), _meta(r, spec)).result()
        except BrokenProcessPool as exc:
            last = exc
            _stop_pool(ex)
            continue
        except BaseException:
            _stop_pool(ex)
            raise
        ex.shutdown(wait=True)
        land(rec, run_dir(out, r.id), out)
        finished(rec)
        return
    _record_failure(run_dir(out, r.id), _worker_death(last, r.id, retries), out)
    finished({"id": r.id, "state": "failed"})


def _record_failure(path: Path, err: dict, root: Path) -> None:
    """``error.json`` of a run that did not return (its worker died), written by the sweep into the
    run's own directory, reached from ``root`` (the sweep's directory) without following a link and
    written relative to it (:func:`sandbox.base.outputs.open_dir`); a stale summary goes."""
    fd = open_dir(root, path)
    try:
        try:
            os.unlink("summary.json", dir_fd=fd)  # a link there is removed, never its target
        except FileNotFoundError:
            pass
        write_text_at(
            fd, "error.json", json.dumps(err, indent=2, default=str, allow_nan=True) + "\n", path / "error.json"
        )
    finally:
        os.close(fd)


def _stop_pool(ex: ProcessPoolExecutor) -> None:
    """Shut a pool down now: cancel what is queued, terminate and reap its worker processes."""
    procs = list((getattr(ex, "_processes", None) or {}).values())  # the pool's own workers
    ex.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)


def ray_init_args(workers: int, address: str | None) -> dict:
    """``ray.init`` keyword arguments of the backend: a cluster at ``address``, else a local one with
    ``workers`` CPUs; one intra-op thread per worker (the runs already fill the cores), no dashboard,
    worker output not forwarded (each run's result is in its directory)."""
    env = {"env_vars": {"OMP_NUM_THREADS": "1"}}
    if address:
        return {"address": address, "runtime_env": env, "log_to_driver": False}
    return {"num_cpus": workers, "runtime_env": env, "include_dashboard": False, "log_to_driver": False}


def _worker_death(exc: BaseException, rid: str, retries: int) -> dict:
    """``error.json`` of a run whose worker process died on every try."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return {
        "id": rid,
        "error": (
            f"the worker process running it died on each of {retries + 1} tries ({type(exc).__name__}: {first}); "
            "the next run of this sweep runs it again"
        ),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "worker_died": True,
        "tries": retries + 1,
    }


def _run_ray(
    spec: SweepSpec, todo: list[RunSpec], out: Path, workers: int, address: str | None, finished, retries: int = 0
) -> None:
    """One Ray task per run (``num_cpus=1``). ``retries``: Ray's ``max_retries``, the times a task
    is resubmitted when its worker process dies (Ray 2.x task fault tolerance: system failures
    only; a run that raises is returned as a failed record, not retried)."""
    try:
        import ray
        from ray.exceptions import RayTaskError
    except ImportError:
        raise SweepError(RAY_HINT) from None
    started = False
    if not ray.is_initialized():
        try:
            ray.init(**ray_init_args(workers, address))
        except Exception as exc:  # noqa: BLE001 - e.g. no cluster at --address
            where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
            raise SweepError(f"--backend ray: could not start or reach {where} ({type(exc).__name__}: {exc})") from None
        started = True
    refs: dict[Any, RunSpec] = {}
    try:
        remote = ray.remote(num_cpus=1, max_retries=retries)(execute_run_packed)
        for r in todo:
            refs[remote.remote(r.id, r.data, _meta(r, spec))] = r
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                r = refs.pop(ref)
                path = run_dir(out, r.id)
                try:
                    rec = ray.get(ref)
                except RayTaskError as exc:  # raised outside execute_run (e.g. packing the files): the run failed
                    err = {"id": r.id, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
                    _record_failure(path, err, out)
                    finished({"id": r.id, "state": "failed"})
                    continue
                except Exception as exc:  # noqa: BLE001 - the worker died on every try: recorded, run again on resume
                    remove_scratch()  # what the dead worker left in the temporary directory (a local cluster)
                    _record_failure(path, _worker_death(exc, r.id, retries), out)
                    finished({"id": r.id, "state": "failed"})
                    continue
                pending = _pending_dir(out / RUNS, r.id) / r.id
                _unpack(rec.pop("files", {}), pending)
                rec["pending"] = str(pending)
                land(rec, path, out)
                finished(rec)
    except BaseException:
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001
                pass
        raise
    finally:
        if started:
            ray.shutdown()
        remove_scratch()  # of workers killed on this machine (a local cluster, or a driver on a node)


__all__ = ["SweepError", "SweepOutcome", "run_sweep", "execute_run", "default_out", "RESULTS", "METRICS"]
