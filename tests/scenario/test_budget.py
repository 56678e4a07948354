"""Issue 12, bugs 4 and 9: a scenario's memory and time are estimated before anything is allocated.
What cannot fit is refused with the estimate, the available memory, the fields that drive it and
the override flag; a very long run is announced; no shipped scenario is refused or warned about."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.run.runner import prepare_run, run_scenario
from sandbox.scenario import budget
from sandbox.scenario.api import load_scenario, validate_scenario, variant_scenarios
from sandbox.scenario.budget import WARN_SECONDS, BudgetError, check_budget, estimate
from sandbox.sweep.api import SweepError, load_sweep, parse_sweep, run_sweep
from sandbox.sweep.execute import check_memory

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.toml")) + sorted((ROOT / "scenarios" / "published").glob("*.toml"))
SWEEPS = sorted((ROOT / "scenarios" / "sweeps").glob("*.toml"))
GiB = 2**30
HUGE = ["task.horizon=4096", "algorithm.group_size=100000"]  # bug 4: a raw allocator RuntimeError before


def variants(path: Path = ROOT / "scenarios" / "sync.toml", *sets: str) -> dict:
    scn, raw = load_scenario(path, list(sets))
    return variant_scenarios(scn, raw)


def one(*sets: str, path: Path = ROOT / "scenarios" / "sync.toml"):
    return next(iter(variants(path, *sets).values()))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenarios_are_neither_refused_nor_warned_about(path):
    runs = variants(path)
    budgets = [check_budget(v) for v in runs.values()]  # this machine's memory: no refusal
    assert all(b.memory < 1 * GiB for b in budgets), [budget.format_bytes(b.memory) for b in budgets]
    assert sum(b.seconds for b in budgets) < WARN_SECONDS  # what `sandbox run` compares (all variants)


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_shipped_sweeps_pass_the_planning_check(path):
    check_memory(load_sweep(path), workers=4)


def test_bug4_refusal_names_fields_estimate_available_memory_and_override():
    scn = one(*HUGE)
    with pytest.raises(BudgetError) as info:
        check_budget(scn, available=16 * GiB, flag="--force")
    msg = str(info.value)
    for part in (
        "algorithm.group_size=100000",
        "task.horizon=4096",
        "GiB of memory",
        "16.0 GiB is available",
        "--force",
    ):
        assert part in msg, msg
    assert info.value.available == 16 * GiB and info.value.budget.memory > 100 * GiB
    # run_scenario refuses before building anything (the old code died in the allocator)
    with pytest.raises(BudgetError, match="force=True"):
        run_scenario(scn)


@pytest.mark.parametrize(
    "sets, refused, field",
    [
        (["run.steps=1000000000"], True, "run.steps=1000000000"),
        (["task.replicas=100000"], True, "task.replicas=100000"),
        # shared: independent schedules (the quickstart's) record one schedule per replica, which a million workers fill
        (["system.num_workers=1000000", "run.schedules=shared"], False, "system.num_workers=1000000"),
    ],
)
def test_bug9_absurd_sizes_are_refused_or_announced(sets, refused, field):
    scn = one(*sets, path=ROOT / "scenarios" / "quickstart.toml")
    b = estimate(scn)
    assert b.seconds > WARN_SECONDS
    if refused:
        with pytest.raises(BudgetError, match=field):
            check_budget(scn, available=16 * GiB)
    else:  # a million idle workers fit in memory, but every step wakes them all: a long run, announced
        assert check_budget(scn, available=16 * GiB).seconds > WARN_SECONDS
        assert field in b.main_time().formula()


def test_cli_refuses_without_traceback_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app, ["run", str(ROOT / "scenarios" / "sync.toml"), "--out", str(out), *[a for s in HUGE for a in ("--set", s)]]
    )
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)
    text = " ".join(res.output.split())
    assert (
        text.startswith("error: this run needs about") and "--force" in text and "algorithm.group_size=100000" in text
    )
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_cli_force_overrides_the_refusal_and_long_runs_are_announced(tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "available_memory", lambda: 2**20)  # 1 MiB: nothing fits
    args = ["run", str(ROOT / "scenarios" / "sync.toml"), "--set", "run.steps=2", "--set", "run.figures=false", "-q"]
    refused = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2 and "1.0 MiB is available" in refused.output and not (tmp_path / "a").exists()
    monkeypatch.setattr(budget, "WARN_SECONDS", 0.0)
    forced = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b"), "--force"])
    assert forced.exit_code == 0, forced.output
    assert "warning: this run may take about" in " ".join(forced.output.split())
    assert (tmp_path / "b" / "summary.json").exists()


def test_sweep_refuses_at_planning_time_and_names_the_run(tmp_path, monkeypatch):
    raw = {
        "base": {
            "task": {"name": "bitstring", "horizon": 4096},
            "algorithm": {"group_size": 100000},
            "run": {"steps": 2},
        },
        "grid": {"algorithm.optimizer.lr": [0.1, 0.2]},
    }
    with pytest.raises(SweepError, match=r"run '[0-9a-f]{12} \(algorithm.optimizer.lr=0.1, seed=0\)' needs about"):
        run_sweep(parse_sweep(raw), tmp_path / "sw", workers=1, progress=False)
    assert not (tmp_path / "sw").exists()
    res = CliRunner().invoke(app, ["sweep", str(_write_sweep(tmp_path, raw)), "--out", str(tmp_path / "sw"), "-q"])
    assert res.exit_code == 2 and "--force" in res.output and not (tmp_path / "sw").exists(), res.output
    # runs that fit one at a time but not all at once: the message says how many workers fit
    small = {"base": {"run": {"steps": 2}}, "grid": {"algorithm.optimizer.lr": [0.1, 0.2, 0.3]}}
    spec = parse_sweep(small)
    one_run = estimate(spec.runs[0].scenario()).memory
    monkeypatch.setattr(budget, "available_memory", lambda: int(2.5 * one_run))
    with pytest.raises(SweepError, match="--workers 2"):
        check_memory(spec, workers=3)
    check_memory(spec, workers=2)


def _write_sweep(tmp_path: Path, raw: dict) -> Path:
    import tomli_w

    path = tmp_path / "huge.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


# -- the estimate against known tensor sizes ---------------------------------------------------------


def _payload_bytes(payload) -> int:
    tensors = [
        getattr(payload, k, None)
        for k in ("tokens", "behaviour_logp", "token_versions", "lengths", "ended", "rewards", "prompts", "grad")
    ]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


@pytest.mark.parametrize(
    "sets",
    [
        ["system.staleness={kind='sync'}"],
        ["system.staleness={kind='fixed_lag',k=2}"],
        ["system.staleness={kind='max_lag',k_max=1,enforcement='drop',queue_capacity=6}", "system.num_workers=6"],
        ["system.staleness={kind='async_ratio',alpha=1.5}", "system.num_workers=6"],
    ],
    ids=["sync", "fixed_lag", "max_lag_drop", "async_ratio"],
)
def test_alive_rollouts_term_bounds_the_real_tensors(sets):
    """Rollouts are released once trained on or dropped: the estimate is at least the bytes the
    payloads alive at once hold (measured as each step starts training, the peak), and at most 4x
    those bytes (the estimate charges 32 B per token slot for 20 B of data, and one group of run-ahead
    more than the controls keep at that moment)."""
    scn = one(
        "task.horizon=128",
        "algorithm.group_size=32",
        "task.replicas=2",
        "algorithm.groups_per_step=2",
        "run.steps=6",
        "run.eval_every=100",
        "run.figures=false",
        *sets,
    )
    _, _, cluster = prepare_run(scn)
    peak = _track_alive_payload_bytes(cluster)
    cluster.run(scn.run.steps)
    term = next(t for t in estimate(scn).memory_terms if t.what.startswith("rollouts alive"))
    assert 0 < peak[0] <= term.amount, (peak[0], term.amount)
    assert term.amount <= 4 * peak[0], (peak[0], term.amount)


def _track_alive_payload_bytes(cluster) -> list[int]:
    """``[peak]``: the largest sum of payload bytes alive when a learner step starts training."""
    peak = [0]
    train = cluster.trainer.train

    def measured(step, jobs, now):
        peak[0] = max(peak[0], sum(_payload_bytes(j.payload) for j in cluster.jobs))
        return train(step, jobs, now)

    cluster.trainer.train = measured
    return peak


def test_quadratic_gradients_and_weights_match_their_tensors():
    scn = validate_scenario(
        {
            "task": {"name": "quadratic", "dim": 5000, "replicas": 3},
            "run": {"steps": 5, "figures": False},
            "algorithm": {"group_size": 2, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": 0.1}},
        }
    )
    _, learner, cluster = prepare_run(scn)
    peak = _track_alive_payload_bytes(cluster)
    cluster.run(5)
    b = estimate(scn)
    term = next(t for t in b.memory_terms if t.what.startswith("rollouts alive"))
    assert peak[0] <= term.amount <= 3 * peak[0]
    weights = next(t for t in b.memory_terms if t.what.startswith("weights"))
    one_copy = sum(p.numel() * p.element_size() for p in learner.plist)
    assert weights.amount == one_copy * (budget.WEIGHT_COPIES + 2)


def test_lm_and_gym_parameter_counts_are_exact():
    from sandbox.tasks.lm.task import LMTask

    scn = validate_scenario(
        {
            "task": {
                "name": "lm",
                "model": {"d_model": 32, "n_layers": 3, "n_heads": 2, "tie_embeddings": False},
                "warmstart": {"enabled": False},
                "train_size": 50,
                "eval_size": 10,
            }
        }
    )
    task = LMTask(scn.task)
    assert budget._shape(scn.task).params == sum(p.numel() for p in task.model.parameters())
    pytest.importorskip("gymnasium")
    from sandbox.tasks.gym_tasks import GymTask

    for env in ("CartPole-v1", "FrozenLake-v1"):
        cfg = validate_scenario({"task": {"name": "gym", "env": env, "hidden": 7, "map_name": "8x8"}}).task
        params = GymTask(cfg).init_params(torch.Generator().manual_seed(0))
        assert budget._shape(cfg).params == sum(v[0].numel() for v in params.values())


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to reset the peak RSS")
def test_estimate_bounds_the_measured_peak_memory_of_a_run():
    """Peak RSS growth of a data-heavy run in this process stays under the estimate. (Only the upper
    bound is checked here: memory this process freed earlier makes the growth smaller than in a fresh
    process. The calibration in sandbox/scenario/budget.py measured fresh processes: 1.1x-2.4x.)"""
    scn = one(
        "task.horizon=1024",
        "algorithm.group_size=128",
        "algorithm.groups_per_step=2",
        "run.steps=2",
        "system.num_workers=2",
        "run.figures=false",
    )

    def status(key: str) -> int:
        return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key))

    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) restarts from the current RSS
    before = status("VmRSS:")
    run_scenario(scn)
    growth = status("VmHWM:") - before
    assert growth <= estimate(scn).memory, (growth, estimate(scn).memory)


def test_minibatches_count_consumed_batches_not_optimizer_steps():
    """``run.steps`` counts optimizer steps; with minibatches x epochs = S a batch of
    groups_per_step groups feeds S of them, so generation work is steps / S batches."""
    base = ["run.steps=64", "algorithm.groups_per_step=4"]
    terms = {}
    for m, e in ((1, 1), (4, 1), (2, 2)):
        b = estimate(one(*base, f"algorithm.minibatches={m}", f"algorithm.epochs={e}"))
        terms[m, e] = {t.what: t.amount for t in b.time_terms}
    gen = "generating and training on token slots"
    ahead = one(*base).algorithm.groups_per_step  # sync: the next step's groups run ahead
    per_group = terms[1, 1][gen] / (64 * 4 + ahead)
    assert terms[4, 1][gen] == pytest.approx(per_group * (16 * 4 + ahead))
    assert terms[2, 2][gen] == pytest.approx(per_group * (16 * 4 + ahead))


def test_independent_schedules_are_charged_per_replica():
    """Each replica's schedule is simulated and each replica draws on its own: time and memory grow
    with R beyond what the shared schedule costs."""
    from sandbox.scenario.api import validate_scenario
    from sandbox.scenario.budget import estimate

    def scn(schedules, replicas):
        return validate_scenario(
            {
                "task": {"name": "bandit", "replicas": replicas},
                "system": {"staleness": {"kind": "max_lag", "k_max": 2}},
                "run": {"steps": 500, "schedules": schedules},
            }
        )

    shared, own = estimate(scn("shared", 1000)), estimate(scn("independent", 1000))
    extra = own.seconds - shared.seconds
    assert extra > 30  # 1000 replicas x ~2,000 groups x (35 + 20) us
    assert any("independent schedules" in t.what for t in own.memory_terms)
    assert estimate(scn("independent", 10)).seconds - estimate(scn("shared", 10)).seconds < extra / 50


# -- the estimate against fresh processes' measured peaks (issue 28) ------------------------------------

_PEAK = """
import json, sys
from pathlib import Path
def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key))
from sandbox.scenario.load import load_scenario
from sandbox.run.runner import run_scenario
from sandbox.scenario.budget import estimate
scn, _ = load_scenario(sys.argv[1], sys.argv[2:])
Path("/proc/self/clear_refs").write_text("5")
before = status("VmRSS:")
run_scenario(scn)
e = estimate(scn)
runtime = next(t.amount for t in e.memory_terms if t.what == "the runtime a first run loads")
print(json.dumps({"growth": status("VmHWM:") - before, "estimate": e.memory, "runtime": runtime}))
"""

# learner-bound: 32 workers at 0.1 s a group outpace a learner at 0.5 s a step, so a permissive ratio
# lets the queue grow over the whole run (about 3,000 groups of 16 x 128 token slots)
LEARNER_BOUND = [
    "run.figures=false",
    "system.num_workers=32",
    "system.generation_time={kind='exponential',mean=0.1}",
    "system.train_time={kind='constant',value=0.5}",
    "task.horizon=128",
    "algorithm.group_size=16",
    "algorithm.groups_per_step=2",
    "task.replicas=1",
    "run.steps=10",
    "run.eval_every=100",
]


def _peak(*sets: str) -> dict:
    import json
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-c", _PEAK, str(ROOT / "scenarios" / "sync.toml"), *sets],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def first_run_growth() -> int:
    """The peak RSS growth of a one-step run in the same harness: what a process's first run loads (lazy imports,
    torch's first allocations), whatever the run's length; it varies by a few MB with the machine."""
    return _peak("system.staleness={kind='async_ratio',alpha=1}", *LEARNER_BOUND, "run.steps=1")["growth"]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to reset the peak RSS")
@pytest.mark.parametrize("alpha", ["1", "4", "1e6"])
def test_async_ratio_estimate_is_within_3x_of_the_measured_peak(alpha, first_run_growth):
    """α = 1e6 was refused at 171.8 GiB for a run that peaked at 451 MB: the queue term is now capped
    by what the workers can generate over the run (budget._producible_ahead). The estimate bounds the
    peak RSS growth of a fresh process from above; its data terms (all but the runtime term) are within 5x of the
    growth beyond a first run's (within 3x on the simpy cluster they were calibrated on)."""
    m = _peak(f"system.staleness={{kind='async_ratio',alpha={alpha}}}", *LEARNER_BOUND)
    assert m["growth"] <= m["estimate"], m
    # the runtime term is a constant of the machine's lazy loading (measured 23-27 MB here, 128 MiB assumed): the
    # upper bound holds the data terms to the data growth (at least 1 MiB, below which the growth is noise)
    data_estimate, data_growth = m["estimate"] - m["runtime"], max(m["growth"] - first_run_growth, 2**20)
    assert data_estimate <= 5 * data_growth, (m, first_run_growth)


def test_a_ratio_that_never_binds_is_estimated_like_one_that_binds_at_the_run_length():
    """The field's description: a ratio at or above run.steps never binds; so its estimate cannot be
    orders of magnitude above that of α = run.steps (it was 171.8 GiB against 136 MiB on the quickstart)."""
    base = ["run.figures=false"]
    huge = estimate(one("system.staleness={kind='async_ratio',alpha=1e6}", *base))
    at_steps = estimate(one("system.staleness={kind='async_ratio',alpha=120}", *base))
    assert huge.memory <= 1.01 * at_steps.memory and huge.seconds <= 1.01 * at_steps.seconds
    assert huge.memory < 1 * GiB
