"""T10. Variance-optimal constant baseline for an importance-weighted policy gradient.

Setup: one-sample estimator ``g(b) = w (R - b) psi`` with ``y ~ mu``,
``psi = grad log pi_theta(y)``, exact weight ``w = pi_theta(y) / mu(y)`` and a
constant ``b``. Because ``E_mu[w psi] = sum_y grad pi_theta(y) = 0`` the mean
``E g(b)`` does not depend on ``b``. With ``W = w**2 |psi|**2`` the total variance
(trace of the covariance) is

    V(b) = E_mu[W (R - b)**2] - |E g|**2,

a quadratic in ``b`` minimised at

    b* = E_mu[W R] / E_mu[W]     (VCPO's OPOB, arXiv 2602.17616; with w = 1 the
                                  classical variance-optimal scalar baseline, Weaver & Tao 2001),

and for every constant ``b`` exactly ``V(b) = V(b*) + E_mu[W] (b - b*)**2``.
OPOB equals the mean baseline iff all ``W`` are equal. A batch plug-in ``b``
depends on the batch, which adds an ``O(1/B)`` bias (leave-one-out removes it).

Worked example (single-step softmax over 3 actions, gradient w.r.t. logits):

>>> ex = enumerate_softmax([0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [1.0, 0.0, 0.5])
>>> [round(float(v), 5) for v in ex.W]
[0.59375, 0.43875, 0.98]
>>> round(ex.b_star, 5)
0.5509
>>> [round(ex.variance(b), 5) for b in (0.0, 0.6, 0.5, ex.b_star)]
[0.2137, 0.03034, 0.03045, 0.02887]
>>> [round(float(v), 10) for v in ex.mean_grad]
[0.2, -0.18, -0.02]
>>> sp.simplify(variance_identity_expr())
0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp


def optimal_baseline_expr() -> tuple[sp.Expr, sp.Symbol]:
    """``b*`` from ``dV/db = 0`` for ``V(b) = E[W (R - b)**2] - |E g|**2`` (symbols ``EW, EWR``).

    Returns ``(b*, b)``; ``V`` is written with the moments ``EW = E[W]``,
    ``EWR = E[W R]``, ``EWR2 = E[W R**2]`` and ``G2 = |E g|**2``.
    """
    b, EW, EWR, EWR2, G2 = sp.symbols("b EW EWR EWR2 G2", real=True)
    V = EWR2 - 2 * b * EWR + b**2 * EW - G2
    (sol,) = sp.solve(sp.diff(V, b), b)
    return sol, b


def variance_identity_expr() -> sp.Expr:
    """``V(b) - V(b*) - E[W] (b - b*)**2``; simplifies to 0 (exact identity)."""
    b, EW, EWR, EWR2, G2 = sp.symbols("b EW EWR EWR2 G2", real=True)
    V = lambda x: EWR2 - 2 * x * EWR + x**2 * EW - G2  # noqa: E731
    bs, _ = optimal_baseline_expr()
    return V(b) - V(bs) - EW * (b - bs) ** 2


def optimal_baseline(W, R, prob=None) -> float:
    """``b* = E[W R] / E[W]`` under ``prob`` (uniform over samples if None)."""
    W, R = np.asarray(W, float), np.asarray(R, float)
    p = np.full(W.shape, 1.0 / W.size) if prob is None else np.asarray(prob, float)
    return float(np.sum(p * W * R) / np.sum(p * W))


def softmax_score_sq_norms(pi) -> np.ndarray:
    """``|psi_a|**2 = |e_a - pi|**2 = 1 - 2 pi_a + sum pi**2`` (gradient w.r.t. logits)."""
    pi = np.asarray(pi, float)
    return 1.0 - 2.0 * pi + np.sum(pi**2)


@dataclass(frozen=True)
class SoftmaxEnumeration:
    """Exact quantities of the one-step softmax estimator, by enumeration over actions."""

    pi: np.ndarray
    mu: np.ndarray
    R: np.ndarray
    w: np.ndarray
    psi: np.ndarray  # psi[a] = e_a - pi
    W: np.ndarray
    b_star: float
    mean_grad: np.ndarray

    def variance(self, b: float) -> float:
        """``V(b) = E_mu[W (R - b)**2] - |E g|**2`` (trace of the covariance)."""
        return float(np.sum(self.mu * self.W * (self.R - b) ** 2) - self.mean_grad @ self.mean_grad)

    def excess_variance(self, b: float) -> float:
        """``E_mu[W] (b - b*)**2``, equal to ``V(b) - V(b*)``."""
        return float(np.sum(self.mu * self.W) * (b - self.b_star) ** 2)

    def estimator(self, actions, b) -> np.ndarray:
        """Samples of ``g(b) = w (R - b) psi`` for sampled ``actions`` (``b`` scalar or per sample)."""
        a = np.asarray(actions)
        coef = self.w[a] * (self.R[a] - np.asarray(b, float))
        return coef[..., None] * self.psi[a]


def enumerate_softmax(pi, mu, R) -> SoftmaxEnumeration:
    """Exact enumeration for learner ``pi``, behaviour ``mu`` and rewards ``R`` (one step)."""
    pi, mu, R = (np.asarray(v, float) for v in (pi, mu, R))
    psi = np.eye(pi.size) - pi[None, :]
    w = pi / mu
    W = w**2 * np.sum(psi**2, axis=1)
    mean_grad = np.sum((mu * w * R)[:, None] * psi, axis=0)
    return SoftmaxEnumeration(pi, mu, R, w, psi, W, optimal_baseline(W, R, mu), mean_grad)
