"""T12 on the simulator: the sequence ESS that training–inference mismatch alone leaves, over lengths.

Setting: the bit-string task sampled through the ``logit_noise`` engine (Gaussian, scale ``s``) at
staleness 0 (``fixed_lag`` k = 0: every batch comes from the learner's current version), response
length ``T`` = the task's horizon. Each bit is the two-entry softmax over ``(0, θ_t)`` with independent
noise of scale ``s_k = s·(1 + slope·t)·(1 − π(k))^power`` on each entry (``sandbox.engines.logit_noise``),
so the log-odds noise is exactly ``N(0, s₀² + s₁²)`` and the per-token ``m₂ = E_μ[w²]`` is the Gaussian
integral of ``theory.mismatch_ess.bernoulli_logit_noise`` (docs/theory.md#t12, item 4). Tokens are
independent, so ``E[W²] = Π_t m₂(θ_t, σ_t)`` and ``E W = 1`` (items 1, 3).

Measured: the mismatch weight of every response ``W = exp Σ_t (log π_v(y_t) − log μ(y_t))``, with
``log π_v`` the trainer's exact log-prob at the sampling version (``Rollouts.sampler_logp``) and ``log μ``
what the engine reported; the pooled Kish fraction ``(Σ W)² / (M Σ W²)`` over all ``M`` responses the
learner consumed. Predicted: the population value ``1 / mean E[W²]`` (the pooled ratio of means
converges to it, and with ``M`` ≥ 8,192 responses and ``log E[W²] ≤ 0.7`` the finite-sample bias of
item 2 is below 0.3%, a tenth of the tolerance). Two series:

* ``frozen, p = ½``: ``init_logit = 0`` and SGD with a learning rate of 1e-9 (the schema wants one
  > 0; the logits move by less than 1e-8): the prediction comes from the configuration alone,
  ``m₂(0, √2·s)^{−T}``, whatever the simulator does;
* ``learning``: Adam, heterogeneous initial logits and a probability-dependent scale
  (``prob_power = 1``) with ``position_slope``: the prediction takes the logits of the version that
  sampled each batch (recorded by the learner) and the configured ``T``.

The SE is a bootstrap over the independent replicas (docs/theory.md conventions); tolerance 4·SE.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sandbox.checks._sim import run_with_learner
from sandbox.checks.base import CheckResult, Point, sweeps
from sandbox.learner.trainer import PolicyLearner
from sandbox.scenario.api import validate_scenario
from theory.mismatch_ess import bernoulli_logit_noise, two_logit_noise_sigma

SCALE = 0.1
"""``engine.scale``: per-token ``log m₂ ≈ s²/2`` at ``p = ½``, so ``log E[W²] ≈ 0.64`` at ``T = 128``."""
LEARNING = {"lr": 0.05, "init_logit": -0.3, "init_logit_std": 1.0, "prob_power": 1.0, "position_slope": 0.01}
QUICK = {"horizons": [8, 32, 128], "learning_horizons": [16, 64], "steps": 8, "replicas": 32}
FULL = {"horizons": [4, 8, 16, 32, 64, 128], "learning_horizons": [16, 64], "steps": 16, "replicas": 32}
SERIES = ("frozen, p = ½", "learning")
FROZEN_LR = 1e-9


def scenario(
    horizon: int,
    steps: int,
    replicas: int,
    *,
    lr: float = FROZEN_LR,
    init_logit: float = 0.0,
    init_logit_std: float = 0.0,
    prob_power: float = 0.0,
    position_slope: float = 0.0,
    seed: int = 0,
):
    """Bit-string, ``logit_noise`` engine, fixed lag 0 (staleness 0), 4 groups of 16 per step."""
    engine = {"name": "logit_noise", "scale": SCALE}
    if prob_power:
        engine["prob_power"] = prob_power
    if position_slope:
        engine["position_slope"] = position_slope
    return validate_scenario(
        {
            "task": {
                "name": "bitstring",
                "horizon": horizon,
                "threshold": 0.7,
                "init_logit": init_logit,
                "init_logit_std": init_logit_std,
                "replicas": replicas,
            },
            "engine": engine,
            "system": {
                "num_workers": 4,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.1},
                "staleness": {"kind": "fixed_lag", "k": 0},
            },
            "algorithm": {
                "group_size": 16,
                "groups_per_step": 4,
                "optimizer": {"name": "adam" if lr > FROZEN_LR else "sgd", "lr": lr},
            },
            "run": {
                "steps": steps,
                "seed": seed,
                "figures": False,
                "record_events": False,
                "eval_every": steps,
                "metrics": "lean",
            },  # the check records what it reads in its own learner
        },
        "mismatch_ess check",
    )


class _RecordingLearner(PolicyLearner):
    """Keeps every version's logits and, per batch, each replica's Σ W, Σ W², response count and versions."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.history: list[torch.Tensor] = []
        self.records: list[tuple[np.ndarray, np.ndarray, int, np.ndarray]] = []

    def compute_loss(self, step, jobs, context=None):
        self.history.append(self.params["logits"].detach().clone())
        out = super().compute_loss(step, jobs, context)
        ro = self.last_batch
        mask = ro.mask.to(torch.float64)
        log_w = ((ro.sampler_logp.double() - ro.behaviour_logp.double()) * mask).sum(-1)  # (R, N)
        w = torch.exp(log_w)
        self.records.append(
            (w.sum(-1).numpy(), (w * w).sum(-1).numpy(), int(w.shape[-1]), ro.oldest_version()[:, 0].numpy().copy())
        )
        return out


def predicted_second_moment(theta: np.ndarray, horizon: int, prob_power: float, position_slope: float) -> np.ndarray:
    """``E[W²] = Π_{t<T} m₂(θ_t, σ_t)`` per replica for logits ``theta (R, ≥T)``, the engine's scales on the
    two entries (``s₁ = s·(1 + slope·t)(1 − p)^power`` for the 1, ``s₀`` with ``p`` for the 0) combined
    on the log-odds (docs/theory.md#t12, item 4)."""
    th = np.asarray(theta, float)[:, :horizon]
    if th.shape[1] != horizon:
        raise ValueError(f"the learner has {th.shape[1]} positions, the scenario {horizon}")
    p = 1 / (1 + np.exp(-th))
    base = SCALE * (1 + position_slope * np.arange(horizon))
    s1, s0 = base * (1 - p) ** prob_power, base * p**prob_power
    m2 = np.asarray(bernoulli_logit_noise(th, two_logit_noise_sigma(s0, s1))["second_moment"], float)
    return np.exp(np.log(m2).sum(-1))


def measure(horizon: int, steps: int, replicas: int, learning: bool, seed: int):
    """``(Σ_t ΣW per replica, Σ_t ΣW² per replica, responses per replica, mean predicted E[W²] per replica)``."""
    knobs = LEARNING if learning else {}
    scn = scenario(horizon, steps, replicas, seed=seed, **knobs)
    learner = run_with_learner(scn, _RecordingLearner)  # runs scn.run.steps = steps
    s1 = np.sum([r[0] for r in learner.records], 0)
    s2 = np.sum([r[1] for r in learner.records], 0)
    n = sum(r[2] for r in learner.records)
    if not learning:  # from the configuration alone
        return s1, s2, n, np.full(replicas, predicted_second_moment(np.zeros((1, horizon)), horizon, 0.0, 0.0)[0])
    pp, slope = knobs["prob_power"], knobs["position_slope"]
    pred = np.zeros(replicas)
    for _, _, count, versions in learner.records:
        theta = torch.stack([learner.history[int(v)][r] for r, v in enumerate(versions)]).numpy()
        pred += count * predicted_second_moment(theta, horizon, pp, slope)
    return s1, s2, n, pred / n


def pooled_ess(s1, s2, n, n_boot: int = 1000, seed: int = 0) -> tuple[float, float]:
    """``(Σ W)² / (M Σ W²)`` pooled over replicas and its bootstrap SE over replicas."""
    s1, s2 = np.asarray(s1, float), np.asarray(s2, float)
    R = len(s1)
    est = float(s1.sum() ** 2 / (R * n * s2.sum()))
    idx = np.random.default_rng(seed).integers(0, R, (n_boot, R))
    boots = s1[idx].sum(1) ** 2 / (R * n * s2[idx].sum(1))
    return est, float(boots.std(ddof=1))


@sweeps("T", "tokens (response length)")
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    cfg = QUICK if quick else FULL
    result = CheckResult(
        name="mismatch_ess",
        claim="mismatch alone (logit-noise engine, staleness 0): sequence ESS/N = 1/Π_t E_μ[w_t²], "
        "E_μ[w²] from the engine's scale (T12)",
        x_label="response length T (tokens)",
        y_label="sequence ESS/N of the mismatch weights π_v/μ (pooled Kish)",
        justification="4·SE, SE by bootstrap over the independent replicas of the pooled ratio of means; "
        "finite-sample bias (T12 item 2) < 0.3% at these sizes",
        log_y=True,  # the log-normal law e^{-T s2} is a straight line
    )
    for learning, horizons in ((False, cfg["horizons"]), (True, cfg["learning_horizons"])):
        for T in horizons:
            s1, s2, n, m2 = measure(T, cfg["steps"], cfg["replicas"], learning, seed=T)
            measured, se = pooled_ess(s1, s2, n, seed=T)
            pred = perturb / float(m2.mean())
            tol = 4 * se + 1e-12
            shift = (1.0 - pred) / se if se > 0 else math.inf
            result.points.append(
                Point(
                    T,
                    pred,
                    measured,
                    se,
                    tol,
                    abs(measured - pred) <= tol,
                    note=f"{cfg['replicas']} replicas × {n} responses; an exact engine would sit {shift:.0f} SE off",
                    series=SERIES[learning],
                )
            )
    return result
