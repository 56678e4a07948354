"""Small helpers to build and run simulator scenarios for the checks."""

from __future__ import annotations

from contextlib import contextmanager

from sandbox.run.runner import RunResult, prepare_run, run_scenario
from sandbox.scenario.api import Scenario, validate_scenario


def delayed_quadratic_scenario(
    *,
    lr: float,
    tau: int,
    steps: int,
    eigenvalues: list[float] | None = None,
    dim: int = 1,
    eig_min: float = 0.01,
    eig_max: float = 1.0,
    noise_std: float = 0.0,
    replicas: int = 1,
    replica_scales: list[float] | None = None,
    x0: float | None = None,
    seed: int = 0,
    max_loss: float = 1e12,
    stabilizers: list | None = None,
    eval_every: int = 1,
    metrics: str = "lean",
) -> Scenario:
    """Delayed SGD x_{t+1} = x_t − η g(x_{t−τ}) as the simulator produces it: a fixed-lag
    cluster (τ+1 workers with equal durations, instantaneous training) feeding one noisy gradient
    per step to an SGD learner. ``metrics``: ``run.metrics`` (lean by default: the checks read the
    evaluations and the stabilizers' own metrics, which lean keeps with the same bits; docs/system.md#metric-levels)."""
    task = {
        "name": "quadratic",
        "dim": dim,
        "eig_min": eig_min,
        "eig_max": eig_max,
        "noise_std": noise_std,
        "replicas": replicas,
    }
    if eigenvalues is not None:
        task.update(eigenvalues=eigenvalues, dim=len(eigenvalues))
    if replica_scales is not None:
        task["replica_scales"] = replica_scales
    if x0 is not None:
        task["x0"] = x0
    return validate_scenario(
        {
            "task": task,
            "system": {
                "num_workers": tau + 1,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.0},
                "staleness": {"kind": "fixed_lag", "k": tau},
            },
            "algorithm": {
                "group_size": 1,
                "groups_per_step": 1,
                "optimizer": {"name": "sgd", "lr": lr},
                "stabilizers": stabilizers or [],
            },
            "run": {
                "steps": steps,
                "seed": seed,
                "figures": False,
                "record_events": False,
                "eval_every": eval_every,
                "max_loss": max_loss,
                "metrics": metrics,
            },
        },
        "check scenario",
    )


def fixed_lag_bitstring_scenario(
    k: int, steps: int, replicas: int, horizon: int, lr: float, seed: int = 0, context: str = "check scenario"
) -> Scenario:
    """The bit-string task (threshold 0.7, init logit −0.3) trained by GRPO with Adam at a fixed lag
    ``k`` on a deterministic schedule (8 workers, constant 1 s generation, 0.1 s training; 4 groups of
    16 per step): the stale-policy setting of the ESS checks (docs/theory.md#t8, #t9). Lean metrics: the
    checks record what they read in their own learners (docs/system.md#metric-levels)."""
    return validate_scenario(
        {
            "task": {
                "name": "bitstring",
                "horizon": horizon,
                "threshold": 0.7,
                "init_logit": -0.3,
                "replicas": replicas,
            },
            "system": {
                "num_workers": 8,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.1},
                "staleness": {"kind": "fixed_lag", "k": k},
            },
            "algorithm": {"group_size": 16, "groups_per_step": 4, "optimizer": {"name": "adam", "lr": lr}},
            "run": {
                "steps": steps,
                "seed": seed,
                "figures": False,
                "record_events": False,
                "eval_every": steps,
                "metrics": "lean",
            },
        },
        context,
    )


_reused: dict | None = None
"""While :func:`reuse_runs` is active: the runs made so far, keyed by their full input (scenario and learner
class); ``None`` otherwise (every call simulates)."""


@contextmanager
def reuse_runs():
    """Within this block a run with the same input as an earlier run of the block returns that run's result
    instead of simulating again (runs are deterministic on CPU: the same scenario gives the same bits).
    :meth:`sandbox.checks.base.Check.run_perturbed` uses it so that a check judged under several
    perturbations of its prediction simulates once; a check that let the prediction into its simulation
    input would change the key and simulate again. The results are dropped when the block ends, so a
    change to the simulator (a test's injected bug) is never hidden by an earlier block's runs."""
    global _reused
    outer, _reused = _reused, {} if _reused is None else _reused
    try:
        yield
    finally:
        _reused = outer


def _memo(key, compute):
    if _reused is None:
        return compute()
    if key not in _reused:
        _reused[key] = compute()
    return _reused[key]


def delayed_quadratic(**kw) -> RunResult:
    """Run :func:`delayed_quadratic_scenario` and return its result."""
    scn = delayed_quadratic_scenario(**kw)
    return _memo(("run", scn.model_dump_json()), lambda: run_scenario(scn))


def run_with_learner(scn: Scenario, learner_cls):
    """Run ``scn`` with an instrumented learner class and return that learner (checks read what
    it recorded)."""

    def compute():
        _, learner, cluster = prepare_run(scn, learner_cls=learner_cls)
        cluster.run(scn.run.steps)
        return learner

    return _memo(("learner", scn.model_dump_json(), learner_cls), compute)
