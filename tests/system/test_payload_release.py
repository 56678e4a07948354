"""The cluster frees a job's rollouts once the learner has trained on them or the control dropped
them: the payloads alive at the end of a run do not grow with run.steps, every consumed or dropped
job keeps only its sample count (what the jobs table reads), and the numbers are unchanged."""

from __future__ import annotations

import weakref

import pandas as pd
import pytest

from sandbox.run.runner import prepare_run, run_scenario
from sandbox.scenario.api import validate_scenario
from sandbox.system.cluster import ReleasedPayload

B = 2


def _scenario(steps: int, staleness: dict, workers: int = 4):
    return validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 16, "replicas": 2},
            "system": {
                "num_workers": workers,
                "generation_time": {"kind": "exponential", "mean": 1.0},
                "staleness": staleness,
            },
            "algorithm": {"group_size": 4, "groups_per_step": B},
            "run": {"steps": steps, "figures": False, "eval_every": 100},
        }
    )


def _run_tracking(scn, keep: bool = False):
    """Run ``scn``; return the cluster's result and a weak reference to every payload produced."""
    _, _, cluster = prepare_run(scn)
    cluster.keep_payloads = keep
    refs = []
    finish = cluster.workload.finish

    def tracked(payload):
        out = finish(payload)
        refs.append(weakref.ref(out))
        return out

    cluster.workload.finish = tracked
    return cluster.run(scn.run.steps), refs


STALENESS = [
    {"kind": "sync"},
    {"kind": "fixed_lag", "k": 2},
    {"kind": "max_lag", "k_max": 1, "enforcement": "drop", "queue_capacity": 6},
]


@pytest.mark.parametrize("staleness", STALENESS, ids=lambda s: s["kind"] + ("_drop" if "enforcement" in s else ""))
def test_alive_payloads_do_not_grow_with_steps(staleness):
    alive = {}
    for steps in (10, 40):
        res, refs = _run_tracking(_scenario(steps, staleness, workers=6))
        assert len(refs) >= steps * B  # every consumed group was produced and tracked
        alive[steps] = sum(r() is not None for r in refs)
        for job in res.jobs:
            if job.consume_step >= 0 or job.dropped_at is not None:
                assert isinstance(job.payload, ReleasedPayload) and job.payload.num_responses == job.num_samples > 0
    bound = 6 + B  # at most one group per worker generating or queued, plus the learner's last batch
    assert alive[10] <= bound and alive[40] <= bound, alive
    if staleness.get("enforcement") == "drop":
        assert any(j.dropped_at is not None for j in res.jobs)  # dropped jobs were released too


def test_keep_payloads_keeps_them_all():
    """The opposite setting (tests that inspect rollouts after the run): the count grows with steps,
    which is what the bound above would catch."""
    res, refs = _run_tracking(_scenario(40, {"kind": "fixed_lag", "k": 2}), keep=True)
    consumed = [j for j in res.jobs if j.consume_step >= 0]
    assert sum(r() is not None for r in refs) >= len(consumed) == 40 * B
    assert not any(isinstance(j.payload, ReleasedPayload) for j in res.jobs)


def test_released_payloads_change_no_number():
    scn = _scenario(30, {"kind": "max_lag", "k_max": 1, "enforcement": "drop", "queue_capacity": 6}, workers=6)
    released = run_scenario(scn, force=True)
    _, _, cluster = prepare_run(scn)
    cluster.keep_payloads = True
    kept = cluster.run(scn.run.steps)
    assert released.jobs.samples.tolist() == [j.num_samples if j.payload is not None else 0 for j in kept.jobs]
    assert released.summary["dropped"] > 0
    pd.testing.assert_frame_equal(pd.DataFrame(kept.rows), released.metrics, check_exact=True)
