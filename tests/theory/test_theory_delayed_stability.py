"""T1: stability threshold of delayed GD, checked by independent numerics."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from theory import delayed_stability as ds

# docs/theory.md#t1 values, rounded to 5 decimals => tolerance half a unit in the last place.
TABLE = {
    0: 2.0,
    1: 1.0,
    2: 0.61803,
    3: 0.44504,
    4: 0.34730,
    5: 0.28463,
    8: 0.18454,
    10: 0.14946,
    16: 0.09516,
    32: 0.04833,
    64: 0.02435,
    128: 0.01222,
}


def max_root_modulus(a: float, tau: int) -> float:
    # np.roots on the characteristic polynomial z^(tau+1) - z^tau + a: independent of the companion matrix code
    coeffs = np.zeros(tau + 2)
    coeffs[0], coeffs[1], coeffs[-1] = 1.0, -1.0, a
    if tau == 0:
        coeffs = np.array([1.0, a - 1.0])
    return float(np.max(np.abs(np.roots(coeffs))))


@pytest.mark.parametrize("tau,value", TABLE.items())
def test_table_values(tau, value):
    assert ds.critical_step(tau) == pytest.approx(value, abs=5e-6)
    assert ds.oscillation_period(tau) == 4 * tau + 2


def test_large_tau_approximation():
    # a* = 2 sin(w/2) = w - w^3/24 + ...: relative error ~ w^2/24 < 2e-4 for tau >= 16
    for tau in (16, 32, 64, 128):
        w = np.pi / (2 * tau + 1)
        assert ds.critical_step(tau) == pytest.approx(w, rel=w**2 / 24 * 1.01)


@pytest.mark.parametrize("tau", [0, 1, 2, 3, 5, 8, 16, 32])
def test_bisection_on_root_modulus(tau):
    lo, hi = 1e-6, 2.5
    while hi - lo > 1e-11:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if max_root_modulus(mid, tau) < 1.0 else (lo, mid)
    # bisection tolerance 1e-9 from the spec; roots of a simple polynomial are accurate to ~1e-13
    assert ds.critical_step(tau) == pytest.approx(lo, abs=1e-9)


@pytest.mark.parametrize("tau", [1, 2, 4, 8])
def test_critical_roots_on_unit_circle(tau):
    a = ds.critical_step(tau)
    z = sp.Symbol("z")
    poly = sp.Poly(ds.characteristic_polynomial(tau).subs(ds.a_sym, a).subs(ds.z_sym, z), z)
    roots = np.array([complex(r) for r in poly.nroots(n=30)])
    on_circle = roots[np.abs(np.abs(roots) - 1) < 1e-9]
    assert sorted(np.round(np.abs(np.angle(on_circle)), 9)) == pytest.approx([ds.critical_frequency(tau)] * 2)
    assert np.max(np.abs(roots)) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("tau", [0, 1, 3, 8])
def test_companion_eigs_are_polynomial_roots(tau):
    a = 0.37 * ds.critical_step(tau)
    eig = np.sort_complex(np.linalg.eigvals(ds.companion_matrix(a, tau)))
    coeffs = [1.0, a - 1.0] if tau == 0 else [1.0, -1.0] + [0.0] * (tau - 1) + [a]
    assert eig == pytest.approx(np.sort_complex(np.roots(coeffs)), abs=1e-10)


@pytest.mark.parametrize("tau,below,above", [(1, 0.9487, 1.0488), (8, 0.9912, 1.0080), (128, 0.9994, 1.0005)])
def test_spectral_radius_table(tau, below, above):
    a = ds.critical_step(tau)
    # table values are 4-decimal roundings
    assert ds.spectral_radius(0.9 * a, tau) == pytest.approx(below, abs=5e-5)
    assert ds.spectral_radius(1.1 * a, tau) == pytest.approx(above, abs=5e-5)


@pytest.mark.parametrize("tau", [1, 8, 128])
def test_simulated_recursion(tau):
    a_star = ds.critical_step(tau)
    horizon = 200 * (2 * tau + 1)
    finals = {}
    for factor in (0.9, 1.1):
        a = factor * a_star
        hist = np.ones(tau + 1)  # ring buffer, x_{-j} = x_0 = 1
        x = 1.0
        for t in range(horizon):
            x = x - a * hist[(t - tau) % (tau + 1)]
            hist[(t + 1) % (tau + 1)] = x
        finals[factor] = abs(x)
    # spec: decay to ~1e-6 / growth to ~1e6 within 200 (2 tau + 1) steps; use 1e-3 / 1e3 for margin
    assert finals[0.9] < 1e-3
    assert finals[1.1] > 1e3


def test_multidimensional_eta_crit():
    lams = np.array([0.05, 0.3, 1.0])
    tau = 8
    eta_c = ds.critical_lr(tau, lams.max())
    assert eta_c == pytest.approx(0.18454, abs=5e-6)  # worked example
    rho = lambda eta: max(ds.spectral_radius(eta * l, tau) for l in lams)
    assert rho(0.999 * eta_c) < 1 < rho(1.001 * eta_c)
    assert ds.is_stable(0.999 * eta_c * lams.max(), tau) and not ds.is_stable(1.001 * eta_c * lams.max(), tau)


def test_unstable_mode_period():
    # just above a*, the dominant root's angle is close to w, i.e. period 4 tau + 2
    tau = 5
    eig = np.linalg.eigvals(ds.companion_matrix(1.0001 * ds.critical_step(tau), tau))
    top = eig[np.argmax(np.abs(eig))]
    assert 2 * np.pi / abs(np.angle(top)) == pytest.approx(4 * tau + 2, rel=1e-3)
