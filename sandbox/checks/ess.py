"""T8 (exact) on a real learning run: the second moment of the sequence importance weights,
and hence the population ESS/N = 1/E_μ[W²], as a function of the lag.

Prediction: for the bit-string policy the H positions are independent Bernoullis (an exponential
family, A(θ) = log(1 + e^θ)), so for learner weights θ and behaviour weights θ' (the version the
schedule actually used) E_μ[W²] = Π_t exp(A(2θ_t − θ'_t) − 2A(θ_t) + A(θ'_t)) (docs/theory.md#t8, items 5 and 7).
Measurement: the unnormalised batch mean (1/N)Σ_i W_i² of the weights the learner really saw,
averaged over steps (an unbiased estimate of the averaged prediction, whatever the step's
weights). The residuals (measured − predicted) of different steps are martingale differences, so
their SE is std/√steps. Tolerance 4·SE. Points: fixed lag k = 0..16 on the same task and seed.

Because that prediction uses the version the schedule actually consumed, it would also pass if the
system consumed the wrong version. The companion series "consumed lag" holds the schedule to the
control's nominal lag (docs/system.md#fixed_lag): step t must consume version max(0, t − k) exactly, in
every replica (measured: the mean of t − v_t after the warm-up; it passes only when no step of any
replica is off, tolerance 0: the schedule is deterministic).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sandbox.checks._sim import fixed_lag_bitstring_scenario, run_with_learner
from sandbox.checks.base import CheckResult, Point, sweeps
from sandbox.learner.trainer import PolicyLearner


def bernoulli_second_moment(theta: torch.Tensor, theta_b: torch.Tensor) -> torch.Tensor:
    """E_{y∼q}[(p/q)²] per position for Bernoulli(σ(θ)) target and Bernoulli(σ(θ')) behaviour."""
    A = torch.nn.functional.softplus
    return torch.exp(A(2 * theta - theta_b) - 2 * A(theta) + A(theta_b))


class _RecordingLearner(PolicyLearner):
    """Keeps every version's weights and each batch's unnormalised Σ W²/N and versions."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.history: list[torch.Tensor] = []
        self.records: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.consumed: list[np.ndarray] = []

    def compute_loss(self, step, jobs):
        self.history.append(self.params["logits"].detach().clone())
        loss, metrics, tokens = super().compute_loss(step, jobs)
        ro = self.last_batch
        log_w = ((self.task.logprobs(self.params, ro).detach() - ro.behaviour_logp) * ro.mask).sum(-1)  # (R, N)
        versions = ro.oldest_version()  # (R, N): one version per response under fixed lag
        self.records.append((step, torch.exp(2 * log_w).mean(-1).numpy(), versions[:, 0].numpy()))
        self.consumed.append(versions.numpy().copy())
        return loss, metrics, tokens


QUICK = {"lags": [0, 2, 8], "steps": 40, "replicas": 4}
FULL = {"lags": [0, 1, 2, 4, 8, 16], "steps": 120, "replicas": 8}


def measure(k: int, steps: int, replicas: int, horizon: int, lr: float, seed: int = 0):
    """``(measured W², predicted W², consumed versions (steps, R))`` of a fixed-lag-k learning run."""
    scn = fixed_lag_bitstring_scenario(k, steps, replicas, horizon, lr, seed, "ess check")
    learner = run_with_learner(scn, _RecordingLearner)
    measured, predicted = [], []
    for step, w2, versions in learner.records:
        theta = learner.history[step]
        pred = []
        for r in range(replicas):
            theta_b = learner.history[int(versions[r])][r]
            pred.append(float(bernoulli_second_moment(theta[r], theta_b).prod()))
        measured.append(w2)
        predicted.append(np.array(pred))
    return np.concatenate(measured), np.concatenate(predicted), np.stack(learner.consumed)


def lag_point(k: int, consumed: np.ndarray, perturb: float) -> Point:
    """The companion assertion: step t consumed version max(0, t − k) in every response of every replica
    (``consumed``: (steps, R, N) versions)."""
    t = np.arange(consumed.shape[0])[:, None, None]
    off = int((consumed != np.maximum(0, t - k)).sum())
    first = min(k, consumed.shape[0] - 1)  # after the warm-up steps that reuse version 0
    lag = float((t[first:] - consumed[first:]).mean())
    predicted = perturb * k
    return Point(
        k,
        predicted,
        lag,
        0.0,
        0.0,
        off == 0 and lag == predicted,
        f"{off} of {consumed.size} consumed responses off the nominal version",
        series="consumed lag",
    )


@sweeps("k", "versions (fixed lag)")
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    cfg = QUICK if quick else FULL
    lags, steps, replicas = cfg["lags"], cfg["steps"], cfg["replicas"]
    result = CheckResult(
        name="ess_vs_lag",
        claim="E_μ[W²] of sequence weights = Π_t E[w_t²] (exact, exponential family); ESS/N → 1/E[W²]",
        x_label="fixed lag k (versions)",
        y_label="E_μ[W²] (sequence, unclipped) = 1 / population ESS ratio; consumed lag t − v_t",
        justification="4·SE of the step residuals (martingale differences across steps and replicas); consumed "
        "lag: exact (every step consumes version max(0, t − k))",
        log_y=True,
    )
    for k in lags:
        m, p, consumed = measure(k, steps, replicas, horizon=32, lr=0.08, seed=k)
        keep = slice(min(k, steps // 2) * replicas, None)  # after the warm-up steps that reuse version 0
        m, p = m[keep], p[keep]
        resid = m - p
        se = float(resid.std(ddof=1) / math.sqrt(len(resid))) if len(resid) > 1 else math.inf
        measured, pred = float(m.mean()), perturb * float(p.mean())
        tol = 4 * se + 1e-9
        result.points.append(
            Point(k, pred, measured, se, tol, abs(measured - pred) <= tol, series="E[W²] from the consumed version")
        )
        result.points.append(lag_point(k, consumed, perturb))
    return result
