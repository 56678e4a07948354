"""logit_noise: hand values and the per-token log-ratio distribution against its formula
(``sandbox/engines/logit_noise.py``, ``docs/engines.md#logit_noise``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _common import engine

from sandbox.run.runner import prepare_run
from sandbox.scenario.api import validate_scenario

N = 400_000


def _delta(cfg: dict, z: torch.Tensor, seed: int = 1) -> torch.Tensor:
    d = engine(cfg).draw(z, torch.Generator().manual_seed(seed))
    return (d.version_logp - d.reported_logp).double()


def _var_and_se(x: torch.Tensor) -> tuple[float, float]:
    """Sample variance and its standard error sqrt(Var[(x − x̄)²] / n)."""
    c = (x - x.mean()) ** 2
    return float(c.mean()), float(c.std() / math.sqrt(x.numel()))


@pytest.mark.component("engine", "logit_noise")
def test_scale_zero_is_the_exact_distribution():
    """σ = 0: the reported log-prob is the trainer's to the bit and tokens follow softmax(z) (chi-square
    within 5 standard deviations of its mean for K − 1 degrees of freedom)."""
    p = torch.tensor([0.5, 0.25, 0.15, 0.1])
    z = p.log().expand(N, 4)
    d = engine({"name": "logit_noise", "scale": 0.0}).draw(z, torch.Generator().manual_seed(0))
    assert torch.equal(d.reported_logp, d.version_logp)
    assert torch.allclose(d.version_logp, p.log()[d.tokens], atol=1e-6)
    counts = torch.bincount(d.tokens, minlength=4).double()
    chi2 = float(((counts - N * p) ** 2 / (N * p)).sum())
    assert chi2 < 3 + 5 * math.sqrt(2 * 3), chi2


@pytest.mark.component("engine", "logit_noise")
def test_first_order_variance_of_the_log_ratio():
    """K = 10 uniform logits, σ = 0.05: Var[log π_v(y) − log q(y)] = σ²(1 − Σπ²) = σ²(1 − 1/K) to first
    order; the next order shifts it by a relative O(σ²) ≈ 0.05 % (measured −0.8 % at σ = 0.2), well
    under the tolerance of 4 standard errors (about 0.9 % with N = 400,000). Doubling σ is 300 % off."""
    sigma, K = 0.05, 10
    var, se = _var_and_se(_delta({"name": "logit_noise", "scale": sigma}, torch.zeros(N, K)))
    pred = sigma**2 * (1 - 1 / K)
    assert abs(var - pred) < 4 * se, (var, pred, se)
    wrong = (2 * sigma) ** 2 * (1 - 1 / K)
    assert abs(var - wrong) > 20 * se


def _two_class_moments(theta: float, sigma: float) -> tuple[float, float]:
    """Exact mean and variance of δ = log π(y) − log q(y) for logits (0, θ) + ε, ε ~ N(0, σ² I), y ~ q:
    η = ε₁ − ε₀ ~ N(0, 2σ²), q₁ = sigmoid(θ + η), a one-dimensional Gauss–Hermite integral."""
    x, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / w.sum()
    eta = math.sqrt(2) * sigma * x
    ls = lambda t: -np.logaddexp(0.0, -t)  # noqa: E731  log sigmoid
    q1 = np.exp(ls(theta + eta))
    d1 = ls(theta) - ls(theta + eta)
    d0 = ls(-theta) - ls(-theta - eta)
    m1 = float((w * (q1 * d1 + (1 - q1) * d0)).sum())
    m2 = float((w * (q1 * d1**2 + (1 - q1) * d0**2)).sum())
    return m1, m2 - m1**2


@pytest.mark.component("engine", "logit_noise")
def test_two_class_log_ratio_matches_the_gaussian_integral():
    """The bit-string task's case (logits (0, θ)), far from first order (σ = 0.5): mean and variance of
    the measured log-ratio within 4 standard errors of the exact integral."""
    theta, sigma = 1.3, 0.5
    z = torch.tensor([0.0, theta]).expand(N, 2)
    delta = _delta({"name": "logit_noise", "scale": sigma}, z)
    mean, var = _two_class_moments(theta, sigma)
    got_var, se_var = _var_and_se(delta)
    se_mean = float(delta.std()) / math.sqrt(N)
    assert abs(float(delta.mean()) - mean) < 4 * se_mean, (float(delta.mean()), mean, se_mean)
    assert abs(got_var - var) < 4 * se_var, (got_var, var, se_var)
    assert abs(got_var - _two_class_moments(theta, 2 * sigma)[1]) > 20 * se_var  # a doubled σ is detected


@pytest.mark.component("engine", "logit_noise")
def test_scale_formula_hand_values():
    """s = (scale + drift·v)(1 + position_slope·t)(1 − π(k))^prob_power at hand-picked points."""
    e = engine({"name": "logit_noise", "scale": 0.1, "drift": 0.01, "position_slope": 0.5, "prob_power": 2.0})
    logp = torch.tensor([[0.75, 0.25]]).log()
    s = e.scale(logp, 10, 2)  # (0.1 + 0.1) · (1 + 1) · (0.25², 0.75²)
    assert torch.allclose(s, torch.tensor([[0.4 * 0.0625, 0.4 * 0.5625]]))
    s = e.scale(torch.zeros(2, 1, 3), torch.tensor([0, 5]), torch.tensor([0, 1, 2]))  # per-replica versions
    want = torch.tensor([[1.0, 1.5, 2.0], [1.0, 1.5, 2.0]]) * torch.tensor([[0.1], [0.15]])
    # prob_power with π = 1 (log 0) gives factor 0
    assert torch.allclose(s[:, 0, :], torch.zeros(2, 3))
    e2 = engine({"name": "logit_noise", "scale": 0.1, "drift": 0.01, "position_slope": 0.5})
    assert torch.allclose(
        e2.scale(torch.zeros(2, 1, 3, 1), torch.tensor([0, 5]), torch.tensor([0, 1, 2]))[:, 0, :, 0], want
    )


def test_student_t_noise_has_its_standard_deviation():
    """ξ = g / sqrt(χ²_ν/ν): std sqrt(ν/(ν − 2)) = sqrt(5/3) for ν = 5 (4 standard errors)."""
    e = engine({"name": "logit_noise", "scale": 1.0, "tail": "student_t", "dof": 5})
    xi = e.noise((N, 1), torch.Generator().manual_seed(2)).double().flatten()
    var, se = _var_and_se(xi)
    assert abs(var - 5 / 3) < 4 * se, (var, se)
    kurt = float(((xi - xi.mean()) ** 4).mean() / var**2)
    assert kurt > 4.0  # heavy tails (Gaussian: 3; Student-t ν = 5: 9)


def _gap_per_step(drift: float) -> np.ndarray:
    raw = {
        "task": {"name": "bitstring", "horizon": 8, "replicas": 4, "init_logit": 1.0},
        "engine": {"name": "logit_noise", "scale": 0.05, "drift": drift},
        "algorithm": {"optimizer": {"name": "sgd", "lr": 1e-30}},  # lr must be > 0: 1 + 1e-30·g == 1 in float32
        "run": {"steps": 40, "eval_every": 40, "record_events": False},
    }
    scn = validate_scenario(raw, "test")
    _, learner, cluster = prepare_run(scn)
    res = cluster.run(40)
    assert torch.all(learner.params["logits"] == 1.0)  # the weights never moved: learning rate zero in effect
    return np.array([float(np.mean(np.asarray(r["mismatch/kl_k3"]))) for r in res.rows])


@pytest.mark.component("engine", "logit_noise")
def test_drift_grows_the_gap_at_learning_rate_zero():
    """lr ≈ 0 (the weights never move): with drift the scale is (0.05 + 0.01 v), so the k3 KL (∝ s²)
    of the last 10 steps is several times that of the first 10; without drift it stays put."""
    drifting, static = _gap_per_step(0.01), _gap_per_step(0.0)
    assert drifting[-10:].mean() > 3 * drifting[:10].mean()
    assert 0.5 < static[-10:].mean() / static[:10].mean() < 2.0
