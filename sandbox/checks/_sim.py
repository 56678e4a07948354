"""Small helpers to build and run simulator scenarios for the checks."""

from __future__ import annotations

from ..runner import RunResult, run_scenario
from ..scenario import validate_scenario


def delayed_quadratic(
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
) -> RunResult:
    """Delayed SGD x_{t+1} = x_t − η g(x_{t−τ}) as the simulator produces it: a fixed-lag
    cluster (τ+1 workers with equal durations, instantaneous training) feeding one noisy gradient
    per step to an SGD learner."""
    task = {"name": "quadratic", "dim": dim, "eig_min": eig_min, "eig_max": eig_max, "noise_std": noise_std, "replicas": replicas}
    if eigenvalues is not None:
        task.update(eigenvalues=eigenvalues, dim=len(eigenvalues))
    if replica_scales is not None:
        task["replica_scales"] = replica_scales
    if x0 is not None:
        task["x0"] = x0
    scn = validate_scenario(
        {
            "task": task,
            "system": {
                "num_workers": tau + 1,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.0},
                "staleness": {"kind": "fixed_lag", "k": tau},
            },
            "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": lr}},
            "run": {"steps": steps, "seed": seed, "figures": False, "record_events": False, "eval_every": 1, "max_loss": max_loss},
        },
        "check scenario",
    )
    return run_scenario(scn)
