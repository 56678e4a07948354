"""The learner's OWN importance ratios, held against predictions computed from the weights alone (T8 items
5–7 with T12 items 4–5; docs/theory.md#t8, #t12).

Every correction (TIS, MIS, IcePop, M2PO, VCPO) acts on the ratio the learner forms, ``w = π_θ(y)/μ(y)``
with ``μ`` the log-prob the engine reported. These checks read that ratio where the learner forms it: the
policy loss's recording hook (:attr:`sandbox.algorithms.policy_loss.PolicyLoss.recorder`) hands over the
correction's context (``log ρ = log π_θ − log μ`` per token, ``log w`` of the decoupled mode) and its
result (IcePop's token mask). The prediction never reads the rollouts: it takes the learner's weights at
each step (recorded before the step) and at the version the configuration says the batch was sampled with
(fixed lag ``k``: version ``max(0, t − k)``), and the engine's configured noise.

Setting: the bit-string task (``H = 32`` independent Bernoulli positions) sampled through the
``logit_noise`` engine (scale ``s`` on both softmax entries: log-odds noise ``σ_z = √2·s``), trained by
GRPO with Adam at a fixed lag ``k`` on a deterministic schedule, IcePop band ``[α, β]``.

* ``learner_ess``: the unnormalised mean of ``W² = Π_t w_t²`` over the learner's batch (an unbiased estimate
  of ``E_μ[W²] = 1/(population ESS/N)``) against ``Π_t m₂(θ_t, θ_{v,t}, σ_z)`` (T12 item 5: T8's
  exponential-family moment under logit noise, by quadrature).
* ``learner_mask``: the fraction of tokens IcePop's mask drops against ``P_μ(w ∉ [α, β])`` (T12 item 5).
* ``learner_prox``: mini-batch steps with ``proximal = "batch_start"`` (exact engine, m = 4 mini-batches):
  the decoupled weight ``π_prox/μ`` the learner forms at step ``(b, j)`` against T8's exact
  ``E_μ[W²] = Π_t exp(A(2θ_prox − θ_v) − 2A(θ_prox) + A(θ_v))`` with ``θ_prox`` the weights at the start of
  batch ``b`` and ``θ_v`` those of the published version it was sampled with (docs/system.md#mini-batches).
  At lag 0 the prediction is exactly 1 (``π_prox = μ``).

Statistics: the residuals (measured − predicted) of different (step, replica) pairs are martingale
differences (each step's prediction is fixed by the weights before the step), so their SE is
``std/√n``; tolerance 4·SE (+1e-6 for float32 rounding). ``learner_prox`` takes the SE the hypothesis
predicts instead, ``√(Σ_i (E[W⁴] − E[W²]²)/N)/n`` with T8's exact ``E[W⁴]``: at lag 0 it is 0 (``W ≡ 1``), so a
proximal policy that is not the batch's first weights is rejected however small its effect.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sandbox.checks._sim import run_with_learner
from sandbox.checks.base import CheckResult, Point, sweeps
from sandbox.learner.trainer import PolicyLearner
from sandbox.scenario.api import validate_scenario
from theory.importance_weights import bernoulli_second_moment, bernoulli_weight_moment
from theory.mismatch_ess import (
    bernoulli_stale_noise_band_fraction,
    bernoulli_stale_noise_second_moment,
)

HORIZON, LR, SCALE = 32, 0.08, 0.2
SIGMA_Z = math.sqrt(2.0) * SCALE
"""Log-odds noise of the bit-string's two-entry softmax with scale ``s`` on each entry (T12 item 4)."""
BAND = (0.8, 1.25)
"""IcePop's ``[α, β]``: narrow enough that the mismatch alone masks about a tenth of the tokens."""
QUICK = {"lags": [0, 4], "steps": 30, "replicas": 4}
FULL = {"lags": [0, 1, 4, 8], "steps": 80, "replicas": 8}
PROX_QUICK = {"lags": [0, 1], "batches": 10, "replicas": 4}
PROX_FULL = {"lags": [0, 1, 2], "batches": 30, "replicas": 8}
MINIBATCHES = 4
FLOAT_TOL = 1e-6


def scenario(k: int, steps: int, replicas: int, seed: int = 0, *, engine: bool = True, minibatches: int = 1):
    """Bit-string (``H`` = 32, threshold 0.7, init logit −0.3), fixed lag ``k`` (8 workers, 1 s generation,
    0.1 s training), 4 groups of 16 per batch, Adam; with ``engine``: the ``logit_noise`` engine and IcePop;
    with ``minibatches`` > 1: that many optimizer steps per batch, ``proximal = "batch_start"`` (decoupled mode)."""
    algorithm = {"group_size": 16, "groups_per_step": 4, "optimizer": {"name": "adam", "lr": LR}}
    if engine:
        algorithm["correction"] = {"name": "icepop", "alpha": BAND[0], "beta": BAND[1]}
    if minibatches > 1:
        algorithm.update(minibatches=minibatches, proximal="batch_start")
    spec = {
        "task": {"name": "bitstring", "horizon": HORIZON, "threshold": 0.7, "init_logit": -0.3, "replicas": replicas},
        "system": {
            "num_workers": 8,
            "generation_time": {"kind": "constant", "value": 1.0},
            "train_time": {"kind": "constant", "value": 0.1},
            "staleness": {"kind": "fixed_lag", "k": k},
        },
        "algorithm": algorithm,
        "run": {
            "steps": steps,
            "seed": seed,
            "figures": False,
            "record_events": False,
            "eval_every": steps,
            "metrics": "lean",
        },
    }
    if engine:
        spec["engine"] = {"name": "logit_noise", "scale": SCALE}
    return validate_scenario(spec, "learner ratio check")


class _RecordingLearner(PolicyLearner):
    """Records the weights before every optimizer step and, through the policy loss's recorder, the
    learner's own per-sequence ``Σ_t log ρ_t`` and ``Σ_t log w_t`` and the correction's token mask."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.history: list[torch.Tensor] = []
        self.records: list[dict] = []
        self._step = 0
        self.policy_loss.recorder = self._record

    def compute_loss(self, step, jobs, context=None):
        self.history.append(self.params["logits"].detach().clone())
        self._step = step
        return super().compute_loss(step, jobs, context)

    def _record(self, ctx, corr):
        fmask = ctx.fmask.detach().double()
        tokens = fmask.sum((-2, -1))
        masked = (
            torch.full_like(tokens, math.nan)
            if corr.mask is None
            else (((corr.mask.detach() <= 0).double() * fmask).sum((-2, -1)) / tokens)
        )
        self.records.append(
            {
                "step": self._step,
                "log_seq_rho": (ctx.log_rho.detach().double() * fmask).sum(-1).numpy(),  # (R, N)
                "log_seq_w": (ctx.log_w.detach().double() * fmask).sum(-1).numpy(),
                "masked": masked.numpy(),
            }
        )


def _run(k: int, steps: int, replicas: int, seed: int, **kw) -> _RecordingLearner:
    return run_with_learner(scenario(k, steps, replicas, seed, **kw), _RecordingLearner)


def residual_point(
    x: float, measured: np.ndarray, predicted: np.ndarray, perturb: float, series: str, note: str = ""
) -> Point:
    """Mean of ``measured`` vs mean of ``perturb·predicted`` over (step, replica) pairs, 4·SE of the residuals."""
    m, p = np.ravel(measured), np.ravel(predicted)
    resid = m - p
    se = float(resid.std(ddof=1) / math.sqrt(resid.size)) if resid.size > 1 else math.inf
    mean_m, mean_p = float(m.mean()), perturb * float(p.mean())
    tol = 4 * se + FLOAT_TOL
    return Point(x, mean_p, mean_m, se, tol, bool(np.isfinite(mean_m) and abs(mean_m - mean_p) <= tol), note, series)


def measure_noise_run(k: int, steps: int, replicas: int):
    """``(measured W², predicted E[W²], measured masked fraction, predicted masked fraction)``, each ``(steps, R)``,
    of a fixed-lag-k run through the logit-noise engine."""
    learner = _run(k, steps, replicas, seed=100 + k)
    w2, w2_pred, frac, frac_pred = [], [], [], []
    for rec in learner.records:
        t = rec["step"]
        theta = learner.history[t].double().numpy()[:, :HORIZON]
        theta_v = learner.history[max(0, t - k)].double().numpy()[:, :HORIZON]  # the nominal version
        w2.append(np.exp(2 * rec["log_seq_rho"]).mean(-1))
        w2_pred.append(np.prod(bernoulli_stale_noise_second_moment(theta, theta_v, SIGMA_Z), -1))
        frac.append(rec["masked"])
        frac_pred.append(np.mean(bernoulli_stale_noise_band_fraction(theta, theta_v, SIGMA_Z, *BAND), -1))
    return tuple(np.array(a) for a in (w2, w2_pred, frac, frac_pred))


@sweeps("k", "versions (fixed lag)")
def run_ess(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    cfg = QUICK if quick else FULL
    result = CheckResult(
        name="learner_ess",
        claim="the learner's own sequence weights W = Π π_θ/μ: E_μ[W²] = Π_t m₂(θ_t, θ_v, σ_z) (T8 + T12 item 5)",
        x_label="fixed lag k (versions)",
        y_label="E_μ[W²] of the learner's sequence ratios = 1 / population ESS fraction",
        justification="4·SE of the (step, replica) residuals (martingale differences)",
        log_y=True,
    )
    for k in cfg["lags"]:
        w2, pred, _, _ = measure_noise_run(k, cfg["steps"], cfg["replicas"])
        result.points.append(
            residual_point(
                k, w2, pred, perturb, "E[W²], logit-noise engine", f"population ESS/N = {1 / pred.mean():.3f}"
            )
        )
    return result


@sweeps("k", "versions (fixed lag)")
def run_mask(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    cfg = QUICK if quick else FULL
    result = CheckResult(
        name="learner_mask",
        claim=f"IcePop's mask drops the tokens whose ratio π_θ/μ leaves [{BAND[0]}, {BAND[1]}]: "
        "fraction = P_μ(w ∉ band) (T12 item 5)",
        x_label="fixed lag k (versions)",
        y_label="fraction of tokens masked by the learner's IcePop",
        justification="4·SE of the (step, replica) residuals (martingale differences)",
    )
    for k in cfg["lags"]:
        _, _, frac, pred = measure_noise_run(k, cfg["steps"], cfg["replicas"])
        result.points.append(residual_point(k, frac, pred, perturb, "masked fraction, logit-noise engine"))
    return result


def measure_prox_run(k: int, batches: int, replicas: int):
    """Per mini-batch step: (measured mean W_prox², predicted E[W_prox²], predicted variance of that mean, step
    index j within the batch)."""
    learner = _run(k, batches * MINIBATCHES, replicas, seed=200 + k, engine=False, minibatches=MINIBATCHES)
    w2, pred, var, js = [], [], [], []
    for rec in learner.records:
        t = rec["step"]
        b, j = divmod(t, MINIBATCHES)
        theta_prox = learner.history[MINIBATCHES * b].double().numpy()
        theta_v = learner.history[MINIBATCHES * max(0, b - k)].double().numpy()
        w2.append(np.exp(2 * rec["log_seq_w"]).mean(-1))
        m2 = np.prod(bernoulli_second_moment(theta_prox, theta_v), -1)
        m4 = np.prod(bernoulli_weight_moment(theta_prox, theta_v, 4), -1)
        pred.append(m2)
        var.append((m4 - m2 * m2) / rec["log_seq_w"].shape[-1])
        js.append(j)
    return np.array(w2), np.array(pred), np.array(var), np.array(js)


@sweeps("k", "versions (fixed lag)")
def run_prox(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    cfg = PROX_QUICK if quick else PROX_FULL
    result = CheckResult(
        name="learner_prox",
        claim="mini-batch steps, proximal = batch_start: the learner's π_prox/μ has E_μ[W²] of the weights at the "
        "start of the batch vs the sampled version (T8; 1 exactly at lag 0)",
        x_label="fixed lag k (batches)",
        y_label="E_μ[W²] of the learner's decoupled weights π_prox/μ",
        justification="4·SE of the (step, replica) residuals + 1e-6 (float32; lag 0 is exact)",
        log_y=True,
    )
    for k in cfg["lags"]:
        w2, pred, var, js = measure_prox_run(k, cfg["batches"], cfg["replicas"])
        later = js > 0  # steps after the first of their batch: the ones where the proximal weights matter
        m, p = float(w2[later].mean()), perturb * float(pred[later].mean())
        se = float(np.sqrt(np.maximum(var[later], 0.0).sum()) / later.sum())
        tol = 4 * se + FLOAT_TOL
        result.points.append(
            Point(
                k, p, m, se, tol, bool(np.isfinite(m) and abs(m - p) <= tol), series=f"steps j = 1..{MINIBATCHES - 1}"
            )
        )
    return result
