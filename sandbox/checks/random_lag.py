"""T14: a lag that comes from the timing, and delayed SGD at that lag (docs/theory.md#t14).

The other learning checks impose the lag (a fixed-lag control); here it arises from the delay
distributions. ``P`` identical workers with exponential generation times (mean 1 s) feed the learner
one job per step under ``max_lag`` with a bound no run reaches (k_max = 10⁶), training and sync take
no time. Prediction (theory.random_delay, exact): the lag of step t has P(L_t = j) = q^{j−1}/P for
1 ≤ j < t and P(L_t = t) = q^{t−1} (q = 1 − 1/P), so E[L_t] = P(1 − q^t); and noise-free delayed SGD
x_{t+1} = x_t − a x_{t−L_t} on a one-dimensional quadratic (λ = 1, a = η = 0.3, x₀ = 1) has mean path
m_t = E[x_t] with m_{t+1} = m_t − a Σ_j P(L_t = j) m_{t−j}. Both predictions use only the configuration
(the delay law, P and a), never the run's log.

Measurement: n independent runs (seeds ``1000·P + i``: each its own schedule) of T = 40 steps. Per run,
the mean over steps of the learner's ``staleness/mean`` (series "mean lag") and of x_t, read from the
learner before each step's update (series "mean path"); each is averaged over the runs and compared
with the average over the same steps of E[L_t] and m_t. Runs are independent, so the SE is the
across-run standard deviation / √n; tolerance 4·SE (+1e-12 for rounding).

What each series catches (``tests/checks/test_checks_injected_bugs.py`` injects each bug): a simulator
that ignores the delay distributions (every job taking its mean time) fails both; one that ignores the
lag (gradients at the newest weights while the versions are stamped correctly) passes "mean lag" and
fails "mean path"; one whose weights are a version older than stamped (lag off by one) fails "mean path".
"""

from __future__ import annotations

import math

import numpy as np

from sandbox.checks._sim import run_with_learner
from sandbox.checks.base import CheckResult, Point, mean_se, sweeps
from sandbox.learner.trainer import OracleLearner
from sandbox.scenario.api import Scenario, validate_scenario
from theory.random_delay import mean_lag, mean_path

A, STEPS, K_MAX = 0.3, 40, 1_000_000
QUICK = {"workers": [2, 4], "runs": 40}
FULL = {"workers": [2, 4, 8, 16], "runs": 200}


class _PathLearner(OracleLearner):
    """Records x_t (the weights before each step's update) of a one-dimensional, one-replica run."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.path: list[float] = []
        self.lags: list[float] = []

    def compute_loss(self, step, jobs, context=None):
        self.path.append(float(self.params["x"].detach()[0, 0]))
        loss, metrics, tokens = super().compute_loss(step, jobs, context)
        self.lags.append(float(metrics["staleness/mean"][0]))
        return loss, metrics, tokens


def scenario(workers: int, seed: int, steps: int = STEPS) -> Scenario:
    """P exponential workers, one job per step, no admission limit, instantaneous training; noise-free SGD
    on f(x) = x²/2 from x₀ = 1 at η = a."""
    return validate_scenario(
        {
            "task": {"name": "quadratic", "dim": 1, "eigenvalues": [1.0], "noise_std": 0.0, "x0": 1.0, "replicas": 1},
            "system": {
                "num_workers": workers,
                "generation_time": {"kind": "exponential", "mean": 1.0},
                "train_time": {"kind": "constant", "value": 0.0},
                "sync_delay": {"kind": "constant", "value": 0.0},
                "staleness": {"kind": "max_lag", "k_max": K_MAX},
            },
            "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": A}},
            "run": {"steps": steps, "seed": seed, "figures": False, "record_events": False, "eval_every": steps},
        },
        "random_lag check scenario",
    )


def measure(workers: int, runs: int, steps: int = STEPS) -> tuple[np.ndarray, np.ndarray]:
    """Per run: (mean lag over the steps, mean x_t over the steps)."""
    lags, paths = [], []
    for i in range(runs):
        learner = run_with_learner(scenario(workers, 1000 * workers + i, steps), _PathLearner)
        lags.append(float(np.mean(learner.lags)))
        paths.append(float(np.mean(learner.path)))
    return np.array(lags), np.array(paths)


@sweeps("P", "workers", series={"mean lag": "mean lag (timing)", "mean path": "mean path (learning)"})
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    cfg = QUICK if quick else FULL
    runs = cfg["runs"]
    result = CheckResult(
        name="random_lag",
        claim="P memoryless workers give P(L_t = j) = q^(j−1)/P (E L_t = P(1 − q^t)); delayed SGD at that lag has "
        "E x_{t+1} = E x_t − a Σ_j P(L_t = j) E x_{t−j} (exact)",
        x_label="workers P (exponential generation, one job per step)",
        y_label=f"mean over {STEPS} steps: lag (versions) / E x_t (a = {A:g})",
        justification=f"4·SE across {runs} independent runs (each its own schedule)",
        log_x=True,
    )
    for P in cfg["workers"]:
        lags, paths = measure(P, runs)
        predicted_lag = perturb * float(np.mean([mean_lag(P, t) for t in range(STEPS)]))
        predicted_path = perturb * float(mean_path(A, P, STEPS).mean())
        for series, values, predicted in (("mean lag", lags, predicted_lag), ("mean path", paths, predicted_path)):
            measured, se = mean_se(values)
            tol = 4 * se + 1e-12
            result.points.append(
                Point(
                    P,
                    predicted,
                    measured,
                    se,
                    tol,
                    bool(math.isfinite(measured) and abs(measured - predicted) <= tol),
                    series=series,
                )
            )
    return result
