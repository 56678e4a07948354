"""``run.metrics`` (docs/system.md#metric-levels): ``lean`` computes a subset of the standard metrics
and changes nothing else, bit for bit: every metric it keeps, the per-replica arrays, the jobs (so
the rewards and the schedule) and the final weights equal the standard run's; ``full`` adds its two
diagnostics and equals ``standard`` on every standard metric; the figures of a lean run are the
standard run's, byte for byte (so :data:`~sandbox.learner.metric_levels.FIGURE_METRICS` holds every
metric they read)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from sandbox.learner.metric_levels import ALWAYS, FULL_EXTRA, MetricSet, metric_set
from sandbox.run.runner import _result, prepare_run, write_run_dir
from sandbox.scenario.api import ScenarioError, validate_scenario


def bitstring(**algorithm):
    return {
        "task": {"name": "bitstring", "horizon": 6, "replicas": 3},
        "system": {"num_workers": 6, "staleness": {"kind": "max_lag", "k_max": 3}},
        "algorithm": {"group_size": 4, "groups_per_step": 2, **algorithm},
        "run": {"steps": 8, "seed": 3, "figures": False, "eval_every": 2},
    }


def quadratic(stabilizers=()):
    return {
        "task": {"name": "quadratic", "dim": 20, "replicas": 4, "noise_std": 0.05},
        "system": {
            "num_workers": 3,
            "generation_time": {"kind": "constant", "value": 1.0},
            "train_time": {"kind": "constant", "value": 0.0},
            "staleness": {"kind": "fixed_lag", "k": 2},
        },
        "algorithm": {
            "group_size": 1,
            "groups_per_step": 1,
            "optimizer": {"name": "sgd", "lr": 0.5},
            "stabilizers": list(stabilizers),
        },
        "run": {"steps": 30, "seed": 2, "figures": False, "eval_every": 1},
    }


CASES = {
    # the plain step (no stabilizer, no clipping): lean skips its constant metrics
    "plain": bitstring(),
    # clipping, GAC and VCPO's LR rule (which reads is/ess_ratio) through the stabilized step
    "stabilized": bitstring(
        objective={"name": "ppo"},
        correction={"name": "tis", "level": "token", "C": 2.0},
        optimizer={"name": "adam", "lr": 0.05, "grad_clip": 0.5},
        stabilizers=[{"name": "gac"}, {"name": "vcpo_lr"}],
    ),
    # decoupled PPO with the batch-start proximal policy, two mini-batches of one group
    "minibatches": bitstring(
        objective={"name": "ppo"}, correction={"name": "decoupled_ppo"}, proximal="batch_start", minibatches=2, epochs=2
    ),
    # the gradient oracle with GAC (the gac_boundary check's setting)
    "oracle": quadratic([{"name": "gac"}]),
}


def with_level(data: dict, level: str, **run) -> dict:
    return {**data, "run": {**data["run"], "metrics": level, **run}}


def simulate(data: dict):
    scn = validate_scenario(data)
    _, learner, cluster = prepare_run(scn)
    res = cluster.run(scn.run.steps)
    return _result(scn, res, learner), learner


def assert_same_column(a: pd.Series | np.ndarray, b, name: str) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, name
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{name}: not the same bits"


@pytest.mark.parametrize("case", sorted(CASES))
def test_lean_keeps_the_standard_bits_and_changes_nothing_else(case):
    std, std_learner = simulate(with_level(CASES[case], "standard"))
    lean, lean_learner = simulate(with_level(CASES[case], "lean"))
    assert std.status == lean.status
    kept = list(lean.metrics.columns)
    assert set(kept) < set(std.metrics.columns)  # a strict subset ...
    oracle_has_no_reward = {"reward/mean"} if case == "oracle" else set()
    assert ALWAYS - oracle_has_no_reward <= set(kept)
    assert "grad/cos_prev" not in kept and "update/norm" not in kept  # ... without the costly ones
    for name in kept:
        assert_same_column(std.metrics[name], lean.metrics[name], name)
    assert set(lean.replica_metrics) <= set(std.replica_metrics)
    for name, values in lean.replica_metrics.items():
        assert_same_column(std.replica_metrics[name], values, f"replica {name}")
    pd.testing.assert_frame_equal(std.jobs, lean.jobs)  # the schedule, versions, lengths and rewards
    for k in std_learner.names:
        assert torch.equal(std_learner.params[k], lean_learner.params[k]), k
    assert np.array_equal(std.diverged_at, lean.diverged_at)


def test_lean_computes_what_a_stabilizer_reads():
    lean, _ = simulate(with_level(CASES["stabilized"], "lean"))
    assert "is/ess_ratio" in lean.metrics  # vcpo_lr reads it
    assert "is/chi2" in lean.metrics  # computed with it (one pass); the rest of the monitors are not
    assert "staleness/mean" not in lean.metrics and "adv/std" not in lean.metrics
    plain, _ = simulate(with_level(CASES["plain"], "lean"))
    assert not any(c.startswith(("is/", "staleness/", "adv/")) for c in plain.metrics)


@pytest.mark.parametrize("case", ["stabilized", "oracle"])
def test_full_adds_its_diagnostics_and_keeps_every_standard_number(case):
    std, std_learner = simulate(with_level(CASES[case], "standard"))
    full, full_learner = simulate(with_level(CASES[case], "full"))
    assert set(full.metrics.columns) == set(std.metrics.columns) | FULL_EXTRA
    for name in std.metrics.columns:
        assert_same_column(std.metrics[name], full.metrics[name], name)
    for k in std_learner.names:
        assert torch.equal(std_learner.params[k], full_learner.params[k]), k


def test_full_diagnostics_by_hand_on_plain_sgd():
    """Plain SGD steps by −η·g: the update is anti-parallel to the raw gradient (cosine 1 up to
    rounding) and its relative size is η‖g‖/‖θ‖ with the step's own gradient and weight norms."""
    full, _ = simulate(with_level(quadratic(), "full"))
    m = full.replica_metrics
    lr = 0.5
    assert np.allclose(m["update/cos_grad"], 1.0, rtol=0, atol=1e-6)
    # param/norm is measured after the step, update/relative = ‖Δθ‖ / ‖θ_after‖
    assert np.allclose(m["update/relative"], lr * m["grad/norm"] / m["param/norm"], rtol=1e-5, atol=0)
    assert np.allclose(m["update/norm"], lr * m["grad/norm"], rtol=1e-5, atol=0)


def test_lean_figures_are_the_standard_figures_byte_for_byte(tmp_path):
    data = bitstring(correction={"name": "tis", "level": "token", "C": 2.0})
    outs = {}
    for level in ("standard", "lean"):
        res, _ = simulate(with_level(data, level, figures=True))
        assert "grad/cos_prev" in res.metrics and "is/ess_ratio" in res.metrics  # read by the figures
        outs[level] = tmp_path / level
        write_run_dir(res, outs[level], label="lean-vs-standard")
    figures = sorted(p.relative_to(outs["standard"]) for p in (outs["standard"] / "figures").rglob("*.png"))
    assert len(figures) >= 4
    for rel in figures:
        assert (outs["standard"] / rel).read_bytes() == (outs["lean"] / rel).read_bytes(), rel


def test_metric_set_answers_by_level():
    assert MetricSet("standard").wants("grad/cos_prev") and not MetricSet("standard").wants("update/cos_grad")
    assert MetricSet("full").wants("update/cos_grad")
    lean = metric_set("lean")
    assert lean.wants("loss") and not lean.wants("grad/cos_prev") and not lean.wants_any("is/")
    with_figures = metric_set("lean", figures=True)
    assert with_figures.wants("grad/cos_prev") and with_figures.wants("mismatch/kl_k3")
    with pytest.raises(ValueError, match="run.metrics"):
        MetricSet("thin")


def test_a_bad_level_is_refused_naming_the_field():
    with pytest.raises(ScenarioError, match=r"run\.metrics"):
        validate_scenario(with_level(bitstring(), "thin"))


def test_lean_run_reaches_the_same_headline():
    """The summary (time-to-target, final reward) reads only what lean keeps."""
    std, _ = simulate(with_level(CASES["plain"], "standard"))
    lean, _ = simulate(with_level(CASES["plain"], "lean"))
    for key in ("final_reward", "final_expected_reward", "sim_time", "status", "diverged_at"):
        a, b = std.summary[key], lean.summary[key]
        assert a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)), key
