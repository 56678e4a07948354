"""The learner step's bookkeeping: the learner/behaviour monitors it reports, the plain optimizer
step it takes when no stabilizer or clipping is configured, and the per-step conversion of the
metrics to numpy with the means over the live replicas (docs/system.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sandbox.algorithms.diagnostics import is_metrics
from sandbox.learner.trainer import IS_METRIC_KEYS, PolicyLearner, _alive_mean, _metrics_to_numpy, _np
from sandbox.run.runner import prepare_run
from sandbox.scenario.api import validate_scenario


def scenario(correction=None, proximal="behaviour", optimizer=None, stabilizers=(), steps=6):
    return validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 6, "replicas": 3},
            "system": {"num_workers": 6, "staleness": {"kind": "max_lag", "k_max": 3}},
            "algorithm": {
                "group_size": 4,
                "groups_per_step": 2,
                "proximal": proximal,
                "correction": correction or {"name": "none"},
                "optimizer": optimizer or {"name": "adam"},
                "stabilizers": list(stabilizers),
            },
            "run": {"steps": steps, "seed": 1, "figures": False, "eval_every": 2},
        }
    )


class Checking(PolicyLearner):
    """Recomputes the monitors from the consumed batch and the weights of the step."""

    checked = 0

    def compute_loss(self, step, jobs, context=None):
        loss, metrics, tokens = super().compute_loss(step, jobs, context)
        ro = self.last_batch
        with torch.no_grad():
            logp = self.task.logprobs(self.params, ro)
        expected = is_metrics(logp - ro.behaviour_logp, ro.mask)
        for k in IS_METRIC_KEYS:
            assert torch.equal(metrics[k], expected[k]), k
        lag = step - ro.oldest_version()
        assert torch.equal(self._sample_lag, lag.double())
        Checking.checked += 1
        return loss, metrics, tokens


@pytest.mark.parametrize(
    "correction,proximal",
    [
        (None, "behaviour"),
        ({"name": "tis", "level": "sequence"}, "behaviour"),
        ({"name": "decoupled_ppo"}, "batch_start"),
    ],
)
def test_monitors_are_those_of_the_unclipped_ratio_whatever_the_correction(correction, proximal):
    Checking.checked = 0
    scn = scenario(correction, proximal)
    _, learner, cluster = prepare_run(scn, learner_cls=Checking)
    cluster.run(scn.run.steps)
    assert Checking.checked == scn.run.steps
    lags = learner.replica_rows[-1]["staleness/max"]
    assert np.all(lags >= 1)  # asynchronous: the ratios really differ from 1


def _run_rows(scn, plain: bool):
    _, learner, cluster = prepare_run(scn)
    assert learner._plain  # nothing configured: the wrapper is skipped by default
    learner._plain = plain
    res = cluster.run(scn.run.steps)
    return res.rows, learner


def test_plain_step_matches_the_stabilized_wrapper_bit_for_bit():
    scn = scenario(steps=8)
    rows_plain, plain = _run_rows(scn, True)
    rows_wrapped, wrapped = _run_rows(scn, False)
    assert list(rows_plain[0]) == list(rows_wrapped[0])  # same metrics, same order
    for a, b in zip(rows_plain, rows_wrapped):
        assert np.array_equal(np.array(list(a.values())), np.array(list(b.values())), equal_nan=True)
    assert torch.equal(plain.params["logits"], wrapped.params["logits"])
    for k in ("grad/norm_clipped", "lr/scale", "step/skipped"):
        assert k in rows_plain[0]


def test_a_clip_or_a_stabilizer_takes_the_wrapper():
    _, learner, _ = prepare_run(scenario(optimizer={"name": "adam", "grad_clip": 1.0}))
    assert not learner._plain
    _, learner, _ = prepare_run(scenario(stabilizers=[{"name": "grad_norm_skip"}]))
    assert not learner._plain


def test_metrics_to_numpy_equals_the_per_metric_conversion():
    R = 4
    gen = torch.Generator().manual_seed(0)
    metrics = {
        "f32": torch.randn(R, generator=gen),
        "f64": torch.randn(R, generator=gen, dtype=torch.float64) * 1e-3,
        "bf16": torch.randn(R, generator=gen).to(torch.bfloat16),
        "nan": torch.tensor([1.0, math.nan, 3.0, math.inf]),
        "all_nan": torch.full((R,), math.nan),
        "int": torch.arange(R),
        "bool": torch.tensor([True, False, True, True]),
        "scalar": torch.tensor(2.5),
        "py": 0.125,
        "grad": torch.randn(R, generator=gen, requires_grad=True) * 2,
    }
    for alive in (np.ones(R, bool), np.array([True, False, True, True])):
        arrays, row = _metrics_to_numpy(dict(metrics), R, alive)
        assert list(arrays) == list(metrics) and list(row) == list(metrics)
        for k, v in metrics.items():
            ref = _np(v)
            assert arrays[k].dtype == ref.dtype and arrays[k].tobytes() == ref.tobytes(), k
            want = _alive_mean(ref, alive)
            assert (math.isnan(want) and math.isnan(row[k])) or np.float64(row[k]).tobytes() == np.float64(
                want
            ).tobytes(), k
    _, row = _metrics_to_numpy({"x": torch.tensor([1.0, 2.0, 4.0, 8.0])}, R, np.array([False, True, False, True]))
    assert row["x"] == 5.0  # the mean over the live replicas only


@pytest.mark.parametrize("R,live", [(29, 17), (300, 290), (300, 300), (5, 0)])
def test_metrics_to_numpy_means_over_live_replicas_are_the_per_metric_bits(R, live):
    """Many replicas, some frozen (a stability map after divergences): the live columns are averaged
    together, with the bits of the per-metric mean (pairwise sums of more than 8 and 128 values)."""
    gen = torch.Generator().manual_seed(R + live)
    alive = np.zeros(R, bool)
    alive[torch.randperm(R, generator=gen)[:live].numpy()] = True
    metrics = {f"m{i}": torch.randn(R, generator=gen, dtype=torch.float64) * 10.0 ** (i - 3) for i in range(7)}
    metrics["f32"] = torch.randn(R, generator=gen)
    dead_nan = torch.randn(R, generator=gen)
    dead_nan[torch.from_numpy(~alive)] = math.nan  # non-finite on frozen replicas only: still the fast row
    metrics["dead_nan"] = dead_nan
    live_inf = torch.randn(R, generator=gen)
    live_inf[0] = math.inf
    metrics["live_inf"] = live_inf
    _, row = _metrics_to_numpy(dict(metrics), R, alive)
    for k, v in metrics.items():
        want = _alive_mean(_np(v), alive)
        assert (math.isnan(want) and math.isnan(row[k])) or np.float64(row[k]).tobytes() == np.float64(
            want
        ).tobytes(), k


def test_an_undefined_cosine_is_missing_never_zero():
    """``grad/cos_prev`` is NaN where there is no previous gradient or either gradient is zero (issue 34):
    a missing value that means over steps skip, never a forced 0 that they would count."""
    from sandbox.learner.diagnostics import cosine

    a = torch.tensor([[1.0, 0.0], [0.0, 0.0], [3.0, 4.0], [1.0, 1.0]], dtype=torch.float64)
    b = torch.tensor([[0.0, 2.0], [1.0, 0.0], [0.0, 0.0], [-2.0, -2.0]], dtype=torch.float64)
    c = cosine(a, b)
    assert c[0].item() == 0.0 and c[3].item() == pytest.approx(-1.0)  # a defined cosine of 0 stays 0
    assert math.isnan(c[1].item()) and math.isnan(c[2].item())
    # in a learning run: the synchronous bit-string run converges, its GRPO gradient is then zero, and
    # every such step (and the step after it) logs NaN, while every defined step is a finite cosine
    scn = validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 4, "replicas": 1},
            "system": {"num_workers": 4, "staleness": {"kind": "sync"}},
            "algorithm": {"group_size": 4, "groups_per_step": 2, "optimizer": {"name": "adam", "lr": 0.5}},
            "run": {"steps": 40, "seed": 0, "figures": False},
        }
    )
    from sandbox.run.runner import run_scenario

    m = run_scenario(scn).metrics
    norm, cos = m["grad/norm"].to_numpy(), m["grad/cos_prev"].to_numpy()
    defined = (norm > 0) & (np.concatenate([[0.0], norm[:-1]]) > 0)
    assert (norm == 0).sum() > 0 and defined.sum() > 0  # the run has both kinds of step
    assert np.isnan(cos[~defined]).all() and np.isfinite(cos[defined]).all()
