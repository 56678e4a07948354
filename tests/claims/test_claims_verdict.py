"""Verdict logic of sandbox.claims.base on hand values."""

import math

import pytest

from sandbox.claims.base import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, Row, t_interval, verdict


def test_greater_than_threshold():
    assert verdict(0.2, 0.5, 0.1, ">") == REPRODUCED
    assert verdict(-0.3, 0.05, 0.1, ">") == NOT_REPRODUCED
    assert verdict(0.0, 0.3, 0.1, ">") == INCONCLUSIVE


def test_less_than_threshold():
    assert verdict(-0.5, -0.1, 0.0, "<") == REPRODUCED
    assert verdict(0.1, 0.4, 0.0, "<") == NOT_REPRODUCED
    assert verdict(-0.1, 0.1, 0.0, "<") == INCONCLUSIVE


def test_within_band():
    assert verdict(0.95, 1.05, (0.9, 1.1), "within") == REPRODUCED
    assert verdict(0.5, 0.6, (0.9, 1.1), "within") == NOT_REPRODUCED
    assert verdict(1.2, 1.3, (0.9, 1.1), "within") == NOT_REPRODUCED
    assert verdict(0.85, 0.95, (0.9, 1.1), "within") == INCONCLUSIVE


def test_no_interval_is_inconclusive_and_bad_direction_is_refused():
    assert verdict(math.nan, math.nan, 0.0, ">") == INCONCLUSIVE
    with pytest.raises(ValueError, match="direction"):
        verdict(0.0, 1.0, 0.0, ">=")


def test_t_interval_hand_values():
    # mean 2, s = 1, n = 3: half width t_{0.975,2} · 1/√3 = 4.302653 / 1.732051 = 2.484138
    mean, low, high = t_interval([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert low == pytest.approx(2.0 - 2.484138, abs=1e-5)
    assert high == pytest.approx(2.0 + 2.484138, abs=1e-5)
    m, lo, hi = t_interval([1.0, math.nan])
    assert m == 1.0 and math.isnan(lo) and math.isnan(hi)


def test_row_computes_its_verdict_and_forced_inconclusive():
    assert Row("x", "s", [1.0, 1.1, 0.9], 0.5, ">").verdict == REPRODUCED
    assert Row("x", "s", [-1.0, -1.1, -0.9], 0.5, ">").verdict == NOT_REPRODUCED
    assert Row("x", "s", [1.0, 1.1, 0.9], 0.5, ">", forced_inconclusive=True).verdict == INCONCLUSIVE
    row = Row("x", "s", [1.0, math.nan], 0.5, ">")
    assert row.verdict == INCONCLUSIVE and row.seeds == 1 and "no interval" in row.note


def test_bar_figure_names_bars_on_the_axis_and_one_legend_entry_per_kind(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from sandbox.claims import report
    from sandbox.claims.base import ClaimResult, Curve

    assert report._split_label("AReaL (published)") == ("AReaL", "published")
    assert report._split_label("verl one_step_off (FSDP2) (predicted)") == ("verl one_step_off (FSDP2)", "predicted")
    assert report._split_label("sync") == ("sync", "")
    result = ClaimResult(
        name="x", paper="p", definition="", settings={}, x_label="setup", y_label="speed-up (x)", kind="bars"
    )
    for i, name in enumerate(("A", "B (FSDP2)")):
        result.curves.append(Curve(f"{name} (predicted)", [float(i)], [2.0], [1.9], [2.1]))
        result.curves.append(Curve(f"{name} (published)", [float(i)], [2.5]))
    seen = {}
    monkeypatch.setattr(plt, "close", lambda fig: seen.setdefault("fig", fig))
    report.figure(result, tmp_path / "x.png")
    ax = seen["fig"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["A", "B (FSDP2)"]
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["predicted (mean, 95% CI)", "published"]
    assert (tmp_path / "x.png").exists() and (tmp_path / "x.svg").exists()


def test_p_value_matches_the_verdict_and_holm_hand_values():
    """The one-sided p-value is the test the verdict makes: reproduced exactly when p < 0.025 (issue 34's
    multiple-comparison note rests on it); Holm's step-down on hand values."""
    from sandbox.claims.base import ALPHA, holm, p_value

    # x̄ = 1, s = 0.1, n = 3, threshold 0.5: t = 0.5/(0.1/√3) = 8.660, P(T_2 ≥ 8.660) = 0.006536
    assert p_value([1.0, 1.1, 0.9], 0.5, ">") == pytest.approx(0.006536, abs=2e-6)
    assert p_value([1.0, 1.1, 0.9], 0.5, "<") == pytest.approx(1 - 0.006536, abs=2e-6)
    assert p_value([1.0, 1.0], 0.5, ">") == 0.0 and p_value([1.0, 1.0], 1.0, ">") == 1.0
    assert math.isnan(p_value([1.0, math.nan], 0.5, ">"))
    for values, threshold, direction in [
        ([0.2, 0.3, 0.25], 0.1, ">"),
        ([0.0, 0.3, 0.12], 0.1, ">"),
        ([0.95, 1.0, 1.02], (0.9, 1.1), "within"),
        ([0.8, 1.0, 1.1], (0.9, 1.1), "within"),
        ([-0.2, -0.1, -0.15], 0.0, "<"),
        ([-0.2, 0.1, -0.05], 0.0, "<"),
    ]:
        row = Row("x", "s", values, threshold, direction)
        assert (row.verdict == REPRODUCED) == (row.p_value < ALPHA), (values, row.p_value, row.verdict)
    # m = 4 at α = 0.025: thresholds 0.00625, 0.00833, 0.0125, 0.025
    assert holm([0.005, 0.02, 0.008, math.nan, 0.3]) == [True, False, True, False, False]
    assert holm([0.007, 0.001]) == [True, True]  # m = 2: 0.001 ≤ 0.0125, then 0.007 ≤ 0.025
    assert holm([0.03, 0.001]) == [False, True]
