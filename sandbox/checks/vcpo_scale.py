"""VCPO's learning-rate rule as the learner applies it: the step it takes against the ESS of the ratios it
should read (VCPO, Huang et al. arXiv 2602.17616; docs/methods/stabilizers.md#vcpo_lr).

Rule: the update of a step is scaled by ``s = sqrt(min(1, ρ_ess / ρ_ref))`` (``ρ_ref = 1``), ``ρ_ess`` the batch
Kish fraction ``(Σ W)² / (N Σ W²)`` of the unclipped sequence weights ``W = π_θ(y)/μ(y)``.

Measured, end to end: with plain SGD (no momentum, no weight decay) a step moves the weights by
``−η·s·g``, so the scale the learner really applied is ``‖Δθ‖ / (η‖g‖)`` (``update/norm`` and the raw
``grad/norm`` of the learner's per-replica metrics). Predicted, independently of the learner's loss code:
``W`` of every consumed response computed here from the learner's weights before the step (the bit-string's
``log π_θ(y) = Σ_t y_t log σ(θ_t) + (1 − y_t) log σ(−θ_t)``) and the ``μ`` the engine reported (the rollouts as the
system delivered them), then the rule. Setting: the bit-string task through the ``logit_noise`` engine at a
fixed lag ``k`` (the ESS falls with both), 4 groups of 16 per step.

Tolerance: an identity given the batch; float32 rounding of the ratios, norms and update only (1e-3 on ``s``,
about a hundred times the rounding of Σ over 2,048 float32 log-probs). The point shows the mean over steps and
replicas; it passes only when every (step, replica) is within the tolerance.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sandbox.checks._sim import run_with_learner
from sandbox.checks.base import CheckResult, Point, sweeps
from sandbox.learner.trainer import PolicyLearner
from sandbox.scenario.api import validate_scenario
from sandbox.tasks.rollouts import Rollouts

HORIZON, LR, SCALE, TOL = 32, 0.5, 0.2, 1e-3
QUICK = {"lags": [0, 4], "steps": 12, "replicas": 4}
FULL = {"lags": [0, 1, 4, 8], "steps": 40, "replicas": 8}


def scenario(k: int, steps: int, replicas: int, seed: int = 0):
    """Bit-string (H = 32, threshold 0.5 from p = ½: about half the responses are rewarded, so nearly every
    group has a gradient), ``logit_noise`` engine (scale 0.2), fixed lag ``k``, SGD with ``vcpo_lr``; standard
    metrics (the check reads ``update/norm``)."""
    return validate_scenario(
        {
            "task": {
                "name": "bitstring",
                "horizon": HORIZON,
                "threshold": 0.5,
                "init_logit": 0.0,
                "replicas": replicas,
            },
            "engine": {"name": "logit_noise", "scale": SCALE},
            "system": {
                "num_workers": 8,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.1},
                "staleness": {"kind": "fixed_lag", "k": k},
            },
            "algorithm": {
                "group_size": 16,
                "groups_per_step": 4,
                "optimizer": {"name": "sgd", "lr": LR},
                "stabilizers": [{"name": "vcpo_lr"}],
            },
            "run": {"steps": steps, "seed": seed, "figures": False, "record_events": False, "eval_every": steps},
        },
        "vcpo_lr_scale check",
    )


class _RecordingLearner(PolicyLearner):
    """Keeps the weights before each step and the rollouts each step consumed, as the system delivered them."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.history: list[torch.Tensor] = []
        self.batches: list[Rollouts] = []

    def compute_loss(self, step, jobs, context=None):
        self.history.append(self.params["logits"].detach().clone())
        self.batches.append(Rollouts.cat([j.payload for j in jobs]))
        return super().compute_loss(step, jobs, context)


def predicted_scale(theta: torch.Tensor, ro: Rollouts) -> np.ndarray:
    """``sqrt(min(1, Kish ESS/N))`` per replica of ``W = π_θ/μ`` computed from the weights ``theta (R, H)``."""
    th = theta.double()[:, None, : ro.width]
    y = ro.tokens.double()
    mask = ro.mask.double()
    logp = (y * torch.nn.functional.logsigmoid(th) + (1 - y) * torch.nn.functional.logsigmoid(-th)) * mask
    log_w = ((logp - ro.behaviour_logp.double()) * mask).sum(-1)  # (R, N)
    w = torch.exp(log_w - log_w.amax(-1, keepdim=True))  # the Kish fraction is scale-free
    ess = w.sum(-1) ** 2 / (w.shape[-1] * (w * w).sum(-1))
    return torch.sqrt(ess.clamp(max=1.0)).numpy()


def measure(k: int, steps: int, replicas: int):
    """``(applied scale, predicted scale)``, each ``(steps, R)``."""
    learner = run_with_learner(scenario(k, steps, replicas, seed=300 + k), _RecordingLearner)
    cols = learner.replica_rows.arrays()
    grad = cols["grad/norm"]
    with np.errstate(invalid="ignore", divide="ignore"):
        applied = np.where(grad > 0, cols["update/norm"] / (LR * grad), np.nan)  # a zero gradient shows no scale
    predicted = np.stack([predicted_scale(theta, ro) for theta, ro in zip(learner.history, learner.batches)])
    return applied[: len(predicted)], predicted


@sweeps("k", "versions (fixed lag)")
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    cfg = QUICK if quick else FULL
    result = CheckResult(
        name="vcpo_lr_scale",
        claim="VCPO scales each step by sqrt(min(1, ESS/N)) of the batch's sequence weights π_θ/μ: the applied "
        "‖Δθ‖/(η‖g‖) equals the rule at the ESS computed from the weights and the reported μ",
        x_label="fixed lag k (versions)",
        y_label="learning-rate scale s (mean over steps and replicas)",
        justification=f"identity given the batch: float32 rounding only ({TOL:g} on every step and replica)",
    )
    for k in cfg["lags"]:
        applied, predicted = measure(k, cfg["steps"], cfg["replicas"])
        seen = np.isfinite(applied)  # (step, replica) pairs whose gradient is not zero (a group-uniform batch)
        off = np.abs(applied[seen] - perturb * predicted[seen])
        worst = float(off.max()) if off.size else math.inf
        ok = bool(seen.mean() >= 0.5 and worst <= TOL)
        result.points.append(
            Point(
                k,
                perturb * float(predicted[seen].mean()),
                float(applied[seen].mean()),
                0.0,
                TOL,
                ok,
                note=f"largest step gap {worst:.2e} over {int(seen.sum())} of {seen.size} steps × replicas "
                "(the rest had a zero gradient)",
                series="applied scale",
            )
        )
    return result
