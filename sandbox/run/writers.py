"""Optional metric writers: TensorBoard event files and Weights & Biases (offline mode).

Asked for in the scenario with ``run.writers = ["files", "tensorboard", "wandb"]``. The run
directory (``files``) is always written; the others are extra views of the same per-step metrics,
**streamed while the run goes**: each writer is opened when the simulation starts and is handed
every metrics row as the learner produces it (one row per optimizer step), then the summary and
the scenario when the run ends. The parquet files of the run directory are still written at the
end, atomically, as before (docs/index.md#trackers).

* ``tensorboard``: event files in ``<run>/tensorboard/`` (``tensorboard --logdir <run>``): every
  numeric metric as a scalar against the learner step, and again in two more tag families against the
  other x-axes (:func:`x_axes`): ``vs_samples/<metric>`` (step = samples consumed) and
  ``vs_sim_ms/<metric>`` (step = simulated milliseconds; TensorBoard steps are integers); flushed at the
  first row and then at most every :data:`FLUSH_SECONDS`, so a running TensorBoard shows the run; the
  summary under ``summary/``, the resolved scenario as text. Needs the ``tensorboard`` package (extra
  ``[tensorboard]``).
* ``wandb``: a W&B run in ``<run>/wandb/``, offline unless ``run.wandb.mode`` or ``WANDB_MODE`` says
  otherwise (upload an offline run later with ``wandb sync``): metrics logged per step as they come, with
  ``sim/time_s`` and ``sim/samples`` beside them, declared with ``define_metric`` so that every metric is
  plotted against simulated time by default and samples can be picked as the x-axis; the scenario as
  the run config, the summary as the run summary. Mode, project, entity, tags and group come from
  ``run.wandb`` (:class:`sandbox.scenario.model.WandbConfig`), else the ``WANDB_*`` environment variables,
  else offline / ``async-rl-sandbox`` / the scenario's or sweep's name (:func:`wandb_settings`). Needs
  the ``wandb`` package (extra ``[wandb]``). The run is named by :func:`run_name` (the variant, else the
  scenario's ``title``, else the run's directory).

A writer that is asked for but not installed is an error raised before the simulation starts,
naming the install command. Writers are looked up in :data:`REGISTRY` (name -> :class:`WriterSpec`);
the tests register a fake one there the same way.
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sandbox.base.outputs import is_transient_dir

WRITERS = ("files", "tensorboard", "wandb")
FLUSH_SECONDS = 2.0
"""TensorBoard event files are flushed at the first row and then at most this often (and at the end)."""


class WriterUnavailable(RuntimeError):
    """A writer was asked for in ``run.writers`` but its package is not installed."""


class StreamWriter(Protocol):
    """One tracker of one run: :meth:`log` per metrics row while the run goes, then :meth:`finish`
    with the result (summary, status) or :meth:`abort` when the run raised."""

    def log(self, row: dict) -> None: ...

    def finish(self, result) -> None: ...

    def abort(self) -> None: ...


@dataclass(frozen=True)
class Tracking:
    """How the trackers see one run: ``directory`` (where the run's files go: the stage), ``name``
    (the run's name) and ``group`` (the scenario or sweep it belongs to; "" = none)."""

    directory: Path
    name: str
    group: str = ""


@dataclass(frozen=True)
class WriterSpec:
    """A writer: the package it needs (None: none) and the factory ``(scenario, tracking) -> StreamWriter``."""

    package: str | None
    factory: Callable[..., StreamWriter]


def install_hint(name: str) -> str:
    return f'pip install -c constraints-cpu.txt -e ".[{name}]"'


def check_writers(names) -> None:
    """Raise :class:`WriterUnavailable` if a requested writer's package is missing."""
    missing = []
    for n in names:
        spec = REGISTRY.get(n)
        if spec is not None and spec.package is not None and importlib.util.find_spec(spec.package) is None:
            missing.append((n, spec.package))
    if missing:
        lines = [
            f"run.writers asks for '{n}' but the {pkg} package is not installed: {install_hint(n)}"
            for n, pkg in missing
        ]
        raise WriterUnavailable("; ".join(lines) + " (or remove it from run.writers)")


def _scalars(row: dict) -> dict[str, float]:
    out = {}
    for k, v in row.items():
        if k in ("step",) or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        v = float(v)
        if math.isfinite(v):
            out[k] = v
    return out


def _summary_scalars(summary: dict) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in summary.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
    }


def x_axes(row: dict) -> dict[str, float]:
    """The extra x-axes of a metrics row: ``sim/time_s`` (simulated seconds, the row's ``time``) and
    ``sim/samples`` (samples consumed so far = round(``throughput/samples_per_s`` × ``time``), the count
    sandbox.analysis.time_to_target recovers the same way); absent when the row lacks them."""
    out = {}
    t = row.get("time")
    if isinstance(t, (int, float)) and math.isfinite(float(t)):
        out["sim/time_s"] = float(t)
        rate = row.get("throughput/samples_per_s")
        if isinstance(rate, (int, float)) and math.isfinite(float(rate)):
            out["sim/samples"] = float(round(float(rate) * float(t)))
    return out


class TensorBoardWriter:
    """Event files under ``<run>/tensorboard``, written as the rows come."""

    def __init__(self, scenario, tracking: Tracking):
        from torch.utils.tensorboard import SummaryWriter

        self.scenario = scenario
        self.log_dir = Path(tracking.directory) / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.log_dir), flush_secs=3600)  # flushed here, see log()
        self._flushed: float | None = None

    def log(self, row: dict) -> None:
        step = int(row.get("step", 0))
        scalars = _scalars(row)
        axes = x_axes(row)
        for k, v in scalars.items():
            self.writer.add_scalar(k, v, global_step=step)
        for k, v in scalars.items():  # the second tag families: the same values against samples and simulated time
            if "sim/samples" in axes:
                self.writer.add_scalar(f"vs_samples/{k}", v, global_step=int(axes["sim/samples"]))
            if "sim/time_s" in axes:
                self.writer.add_scalar(f"vs_sim_ms/{k}", v, global_step=int(round(axes["sim/time_s"] * 1000)))
        now = time.monotonic()
        if self._flushed is None or now - self._flushed >= FLUSH_SECONDS:
            self.writer.flush()
            self._flushed = now

    def finish(self, result) -> None:
        from sandbox.scenario.api import dump_scenario

        try:
            for k, v in _summary_scalars(result.summary).items():
                self.writer.add_scalar(f"summary/{k}", v, global_step=0)
            self.writer.add_text("scenario", "```toml\n" + dump_scenario(result.scenario) + "\n```", global_step=0)
            self.writer.add_text("status", str(result.status), global_step=0)
        finally:
            self.writer.close()

    def abort(self) -> None:
        self.writer.close()


def run_name(scenario, out: str | Path, label: str = "") -> str:
    """The name a run shows in W&B: the variant's name (``label``) when the run is one variant of a
    scenario, else the scenario's ``title``, else the name of the directory the run ends up in. Runs
    are written into staging directories (``<dir>/.staging-*``, possibly nested: a run of ``sandbox
    run`` inside the command's own stage) that are moved into place once complete
    (:class:`sandbox.base.outputs.StagedDir`), so those path components are skipped."""
    if label:
        return label
    if scenario.title:
        return scenario.title
    parts = [p for p in Path(out).absolute().parts if not is_transient_dir(p)]
    return parts[-1] if parts and parts[-1] != Path(parts[-1]).anchor else "run"


def wandb_settings(scenario, tracking: Tracking, environ=None) -> dict:
    """``wandb.init``'s mode, project, entity, tags and group: ``run.wandb``'s field when set, else W&B's
    environment variable (``WANDB_MODE``, ``WANDB_PROJECT``, ``WANDB_ENTITY``, ``WANDB_TAGS`` comma-separated,
    ``WANDB_RUN_GROUP``), else offline, :attr:`WandbWriter.project`, W&B's default entity, no tags and the
    tracking group (the scenario's or sweep's name)."""
    env = os.environ if environ is None else environ
    cfg = getattr(scenario.run, "wandb", None)
    given = (lambda name: getattr(cfg, name, None)) if cfg is not None else (lambda name: None)
    tags = given("tags")
    if tags is None and env.get("WANDB_TAGS"):
        tags = [t.strip() for t in env["WANDB_TAGS"].split(",") if t.strip()]
    mode = given("mode") or env.get("WANDB_MODE") or "offline"
    if mode not in ("offline", "online", "disabled"):
        raise ValueError(f"WANDB_MODE={mode!r}: expected offline, online or disabled")
    return {
        "mode": mode,
        "project": given("project") or env.get("WANDB_PROJECT") or WandbWriter.project,
        "entity": given("entity") or env.get("WANDB_ENTITY") or None,
        "tags": tags or None,
        "group": given("group") or env.get("WANDB_RUN_GROUP") or tracking.group or None,
    }


class WandbWriter:
    """A W&B run under ``<run>/wandb`` (offline by default: ``wandb sync`` uploads it later), logged per row
    with the simulated time and samples as x-axes (module docstring)."""

    project = "async-rl-sandbox"

    def __init__(self, scenario, tracking: Tracking):
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self.run = wandb.init(
            dir=str(tracking.directory),
            name=tracking.name,
            config=scenario.model_dump(mode="json", exclude={"variants"}),
            reinit=True,  # runs of one process follow each other (wandb>=0.16 takes True)
            **wandb_settings(scenario, tracking),
        )
        define = getattr(self.run, "define_metric", None)
        if define is not None:  # wandb >= 0.12: every metric against simulated time; samples as a second x-axis
            define("sim/time_s")
            define("sim/samples")
            define("*", step_metric="sim/time_s")

    def log(self, row: dict) -> None:
        self.run.log({**_scalars(row), **x_axes(row)}, step=int(row.get("step", 0)))

    def finish(self, result) -> None:
        try:
            self.run.summary.update({**_summary_scalars(result.summary), "status": result.status})
        finally:
            self.run.finish()

    def abort(self) -> None:
        self.run.finish(exit_code=1)


REGISTRY: dict[str, WriterSpec] = {
    "tensorboard": WriterSpec("tensorboard", TensorBoardWriter),
    "wandb": WriterSpec("wandb", WandbWriter),
}
"""The writers besides ``files``, by the name ``run.writers`` uses."""


class Writers:
    """The trackers of one run, opened before it simulates: :meth:`log` is the per-step hook
    (every writer gets the row as it is produced), :meth:`finish` / :meth:`abort` close them."""

    def __init__(self, scenario, tracking: Tracking):
        check_writers(scenario.run.writers)
        self.open: list[StreamWriter] = []
        try:
            for name in dict.fromkeys(scenario.run.writers):
                spec = REGISTRY.get(name)
                if spec is not None:
                    self.open.append(spec.factory(scenario, tracking))
        except BaseException:
            self.abort()
            raise

    def log(self, row: dict) -> None:
        for w in self.open:
            w.log(row)

    def finish(self, result) -> None:
        while self.open:
            self.open.pop(0).finish(result)

    def abort(self) -> None:
        while self.open:
            try:
                self.open.pop(0).abort()
            except Exception:  # noqa: BLE001 - the run's own error is the one to report
                pass


def wants_trackers(scenario) -> bool:
    """Whether ``run.writers`` asks for anything besides the run directory."""
    return bool(set(scenario.run.writers) - {"files"})


__all__ = [
    "FLUSH_SECONDS",
    "REGISTRY",
    "WRITERS",
    "StreamWriter",
    "TensorBoardWriter",
    "Tracking",
    "WandbWriter",
    "WriterSpec",
    "WriterUnavailable",
    "Writers",
    "check_writers",
    "install_hint",
    "run_name",
    "wandb_settings",
    "wants_trackers",
    "x_axes",
]
