"""Staleness emerges from the timing: each control's guarantee, checked on the event schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _sim import lags, simulate

from sandbox.system.cluster import Cluster, TrainResult
from sandbox.system.config import SystemConfig
from sandbox.system.workload import PolicyWorkload
from sandbox.tasks.bitstring import BitStringConfig, BitStringTask

HEAVY = {"kind": "pareto", "alpha": 1.5, "scale": 0.2}


@pytest.mark.component("staleness", "sync")
def test_sync_has_zero_staleness_and_waits_for_every_group():
    _, res = simulate(
        num_workers=6,
        generation_time=HEAVY,
        sync_delay={"kind": "exponential", "mean": 0.3},
        staleness={"kind": "sync"},
    )
    lag, consumed = lags(res)
    assert res.steps_done == 300 and len(consumed) == 300 * 4
    assert (lag == 0).all()


@pytest.mark.component("staleness", "fixed_lag")
@pytest.mark.parametrize("k", [0, 1, 3, 8])
def test_fixed_lag_is_exactly_k_after_warmup(k):
    _, res = simulate(num_workers=5, generation_time=HEAVY, staleness={"kind": "fixed_lag", "k": k})
    lag, consumed = lags(res)
    steps = np.array([j.consume_step for j in consumed])
    assert (lag[steps >= k] == k).all()
    assert (lag[steps < k] == steps[steps < k]).all()  # warm-up trains on version 0


@pytest.mark.component("staleness", "max_lag")
@pytest.mark.parametrize("enforcement", ["throttle", "drop"])
@pytest.mark.parametrize("k_max", [0, 2, 5])
def test_max_lag_never_exceeds_bound(enforcement, k_max):
    _, res = simulate(
        num_workers=12,
        worker_speeds=[1.0] * 10 + [0.2, 0.1],
        generation_time=HEAVY,
        sync_delay={"kind": "uniform", "low": 0.0, "high": 0.3},
        staleness={"kind": "max_lag", "k_max": k_max, "enforcement": enforcement},
    )
    lag, _ = lags(res)
    assert lag.max() <= k_max
    if k_max > 0 and enforcement == "drop":
        assert lag.max() == k_max  # the bound is reached, not just respected by idling
    dropped = [j for j in res.jobs if j.dropped_at is not None]
    assert res.dropped == len(dropped)
    assert all(j.dropped_at - j.head_version > k_max for j in dropped)


def test_throttle_admission_rarely_needs_drops_while_drop_mode_does():
    common = dict(num_workers=12, generation_time=HEAVY, staleness=None)
    common.pop("staleness")
    _, thr = simulate(**common, staleness={"kind": "max_lag", "k_max": 2, "enforcement": "throttle"})
    _, drp = simulate(**common, staleness={"kind": "max_lag", "k_max": 2, "enforcement": "drop", "queue_capacity": 40})
    assert thr.dropped < drp.dropped


@pytest.mark.component("staleness", "async_ratio")
@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 2.5])
def test_async_ratio_bounds_lag_by_ceil_alpha(alpha):
    _, res = simulate(num_workers=10, generation_time=HEAVY, staleness={"kind": "async_ratio", "alpha": alpha})
    lag, consumed = lags(res)
    assert lag.max() <= math.ceil(alpha)
    if alpha == 0.0:
        assert (lag == 0).all()
    frac = alpha - math.floor(alpha)
    if frac > 0:  # at most round(frac * B) groups per step from the oldest admissible version
        quota = round(frac * 4)
        by_step = {}
        for j in consumed:
            if j.consume_step - j.head_version == math.ceil(alpha):
                by_step[j.consume_step] = by_step.get(j.consume_step, 0) + 1
        assert max(by_step.values(), default=0) <= quota


class PerturbingTrainer:
    """Publishes a new weight tensor each step so versions are distinguishable."""

    def __init__(self, params):
        self.params = params

    def initial_weights(self):
        return self.params

    def train(self, step, jobs, now):
        self.params = {"logits": self.params["logits"] + 0.01}
        return TrainResult(weights=self.params, tokens=sum(j.payload.token_count for j in jobs))


def test_partial_rollouts_record_mixed_versions_per_token():
    task = BitStringTask(BitStringConfig(horizon=64, replicas=1))
    gen = torch.Generator().manual_seed(0)
    cfg = SystemConfig(
        num_workers=6,
        generation_time={"kind": "cost_model", "prefill": 0.0, "per_token": 0.05},
        train_time={"kind": "constant", "value": 0.3},
        staleness={"kind": "max_lag", "k_max": 3},
        partial_rollouts=True,
    )
    cluster = Cluster(
        cfg, PolicyWorkload(task, gen), PerturbingTrainer(task.init_params(gen)), 2, 4, seed=1, keep_payloads=True
    )
    res = cluster.run(40)
    consumed = [j for j in res.jobs if j.consume_step >= 0]
    mixed = [j for j in consumed if j.tail_version > j.head_version]
    assert len(mixed) > len(consumed) // 4
    for j in consumed:
        v = j.payload.token_versions[0]
        assert (v >= 0).all() and (v.diff(dim=-1) >= 0).all()  # versions only move forward along a response
        assert j.consume_step - j.head_version <= 3
        assert int(v.min()) == j.head_version and int(v.max()) == j.tail_version
    assert max(j.segments for j in consumed) >= 2


def test_partial_rollouts_need_cost_model_and_streaming_control():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="cost_model"):
        SystemConfig(partial_rollouts=True, staleness={"kind": "max_lag"})
    with pytest.raises(ValidationError, match="streaming"):
        SystemConfig(partial_rollouts=True, generation_time={"kind": "cost_model"}, staleness={"kind": "sync"})


def _roll_budget(alpha: float, B: int, v: int) -> int:
    """ROLL's RLVR admission budget at step ``v`` (alibaba/ROLL 8eb27cc, generate_scheduler.py ``advance_step``):
    ``ceil(alpha·B)`` prompts at the first step, ``B`` more at every step."""
    return math.ceil(alpha * B) + (v + 1) * B


def _roll_oldest_quota(alpha: float, B: int, G: int) -> int:
    """ROLL's take from the oldest admissible step for a fractional ``alpha`` (``get_batch``:
    ``int(expected_samples · (alpha mod 1))`` samples of ``B·G``), in groups of ``G``."""
    return int(B * G * (alpha % 1)) // G


@pytest.mark.component("staleness", "async_ratio")
@pytest.mark.parametrize("alpha,B", [(1.0, 512), (2.0, 4), (0.5, 512), (0.25, 4), (1.5, 64)])
def test_async_ratio_matches_rolls_budget_and_quota_when_alpha_b_is_whole(alpha, B):
    from sandbox.system.staleness.async_ratio import AsyncRatioControl, AsyncRatioControlConfig

    control = AsyncRatioControl(AsyncRatioControlConfig(alpha=alpha), B)
    for v in (0, 1, 7):
        budget = _roll_budget(alpha, B, v)
        control.consumed, control.running = 0, budget - 1  # one below ROLL's budget: admitted
        assert control.admit(v, 0) is not None
        control.running = budget  # at ROLL's budget: refused
        assert control.admit(v, 0) is None
    if alpha % 1:
        assert control.oldest_quota == _roll_oldest_quota(alpha, B, 16)
    else:
        assert control.oldest_quota is None
