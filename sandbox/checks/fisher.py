"""T9 on a real policy: the ESS of a stale batch against the Fisher quadratic form of the actual
displacement, on the bit-string task.

Prediction (theory.staleness_divergence.fisher_quadratic_form, docs/theory.md#t9): with θ the learner's
logits at step t and θ' those of the version the fixed-lag-k control promises (max(0, t − k), not the one
the rollouts say they used), Q_t = Δθᵀ F(θ') Δθ = Σ_h p'_h(1 − p'_h)(θ_h − θ'_h)² (the sequence Fisher,
L times the per-token one). The H positions are independent Bernoullis, an exponential family, so

* exactly, Var_μ[log W] = Q_t (log W = Δθ·y − ΔA, Cov_μ y = F(θ')): the −log(ESS/N) of the lognormal
  idealisation (T8 item 7). Measured: the unbiased sample variance of log W_i over the N responses of the
  batch the learner really trained on, averaged over steps and replicas, against the average Q_t.
* to second order, −log(ESS/N) = log E_μ[W²] ≈ Q_t (T8 item 6). Measured: log of the average batch mean
  of W², against log of the average exp(Q_t); the exact T8 value is given in the note, so the
  approximation error can be read against the SE.

Residuals (measured − predicted) of different steps are martingale differences, so their SE is
std/√(steps·replicas); tolerance 4·SE (for the log series, the SE of the mean divided by the predicted
mean). Lags stay where E[W²] is not dominated by unseen tails (log E[W²] ≲ 0.3: T8 item 1, the sample
moment of heavy-tailed weights is biased low). The perturbation 1.1 scales both predictions.
"""

from __future__ import annotations

import math

import numpy as np

from sandbox.checks._sim import fixed_lag_bitstring_scenario, run_with_learner
from sandbox.checks.base import CheckResult, Point, sweeps
from sandbox.learner.trainer import PolicyLearner
from theory.importance_weights import bernoulli_fisher, bernoulli_second_moment
from theory.staleness_divergence import fisher_quadratic_form

QUICK = {"lags": [2, 8], "steps": 40, "replicas": 8}
FULL = {"lags": [1, 2, 4, 8], "steps": 120, "replicas": 8}
HORIZON, LR = 32, 0.08


class _LogWeightRecorder(PolicyLearner):
    """Keeps every version's logits and each batch's sequence log-weights log W_i (R, N)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.history: list[np.ndarray] = []
        self.log_w: list[np.ndarray] = []

    def compute_loss(self, step, jobs):
        self.history.append(self.params["logits"].detach().numpy().copy())
        loss, metrics, tokens = super().compute_loss(step, jobs)
        ro = self.last_batch
        log_w = ((self.task.logprobs(self.params, ro).detach() - ro.behaviour_logp) * ro.mask).sum(-1)
        self.log_w.append(log_w.double().numpy())
        return loss, metrics, tokens


def measure(k: int, steps: int, replicas: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Per step and replica after the warm-up: sample Var log W, batch mean W², the quadratic form Q
    against the nominal version, and the exact T8 log E[W²]."""
    scn = fixed_lag_bitstring_scenario(k, steps, replicas, HORIZON, LR, seed, "fisher check")
    learner = run_with_learner(scn, _LogWeightRecorder)
    out: dict[str, list] = {"var_log_w": [], "w2": [], "quad": [], "exact_log_w2": []}
    for t in range(min(k, steps // 2), steps):  # after the warm-up steps that reuse version 0
        theta, theta_b = learner.history[t], learner.history[max(0, t - k)]
        log_w = learner.log_w[t]
        out["var_log_w"].append(log_w.var(axis=-1, ddof=1))
        out["w2"].append(np.exp(2 * log_w).mean(-1))
        out["quad"].append(
            [fisher_quadratic_form(theta[r] - theta_b[r], bernoulli_fisher(theta_b[r])) for r in range(replicas)]
        )
        out["exact_log_w2"].append(np.log(bernoulli_second_moment(theta, theta_b)).sum(-1))
    return {key: np.concatenate([np.atleast_1d(np.asarray(v, dtype=float)) for v in vals]) for key, vals in out.items()}


@sweeps("k", "versions (fixed lag)")
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    cfg = QUICK if quick else FULL
    result = CheckResult(
        name="ess_fisher",
        claim="Var_μ log W = ΔθᵀF(θ')Δθ exactly (exponential family) and −log(ESS/N) = log E_μ[W²] ≈ ΔθᵀF(θ')Δθ, "
        "θ' the nominal version t − k",
        x_label="fixed lag k (versions)",
        y_label="−log(ESS/N): Var log W, log E[W²]",
        justification="4·SE of the step residuals (martingale differences across steps and replicas)",
        log_y=True,
    )
    for k in cfg["lags"]:
        m = measure(k, cfg["steps"], cfg["replicas"], seed=k)
        n = len(m["quad"])
        resid = m["var_log_w"] - m["quad"]
        se = float(resid.std(ddof=1) / math.sqrt(n))
        measured, predicted = float(m["var_log_w"].mean()), perturb * float(m["quad"].mean())
        result.points.append(
            Point(
                k,
                predicted,
                measured,
                se,
                4 * se,
                abs(measured - predicted) <= 4 * se,
                series="Var log W = ΔθᵀFΔθ (exact)",
            )
        )
        exp_q = np.exp(m["quad"])
        se_log = float((m["w2"] - exp_q).std(ddof=1) / math.sqrt(n) / exp_q.mean())
        measured, predicted = math.log(float(m["w2"].mean())), perturb * math.log(float(exp_q.mean()))
        exact = math.log(float(np.exp(m["exact_log_w2"]).mean()))
        result.points.append(
            Point(
                k,
                predicted,
                measured,
                se_log,
                4 * se_log,
                abs(measured - predicted) <= 4 * se_log,
                f"exact T8 log E[W²] = {exact:.4g} (second-order error {(exact - predicted / perturb) / se_log:+.1f} SE)",
                series="−log ESS/N ≈ ΔθᵀFΔθ (2nd order)",
            )
        )
    return result
