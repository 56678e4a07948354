"""What a cluster keeps per step once the rollouts are released (issue 28: memory grew linearly with
run length). A consumed or dropped job keeps a pointer to one shared released record, the event log
is columnar (41 B an event), and the numbers and tables are the same as with a list of tuples."""

from __future__ import annotations

import pandas as pd

from sandbox.run.runner import EVENT_COLUMNS, prepare_run
from sandbox.scenario.api import validate_scenario
from sandbox.system.cluster import EventLog, ReleasedPayload, released


def _scenario(steps: int):
    return validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 16, "replicas": 2},
            "system": {
                "num_workers": 6,
                "generation_time": {"kind": "exponential", "mean": 1.0},
                "staleness": {"kind": "max_lag", "k_max": 1, "enforcement": "drop", "queue_capacity": 6},
            },
            "algorithm": {"group_size": 4, "groups_per_step": 2},
            "run": {"steps": steps, "figures": False, "eval_every": 100},
        }
    )


def test_released_jobs_share_one_record_per_count():
    _, _, cluster = prepare_run(_scenario(30))
    res = cluster.run(30)
    done = [j for j in res.jobs if j.consume_step >= 0 or j.dropped_at is not None]
    assert done and all(j.payload is released(j.num_samples) for j in done)
    assert len({id(j.payload) for j in done}) == len({j.num_samples for j in done})
    assert released(4) == ReleasedPayload(4)


def test_event_log_reads_as_the_list_of_tuples_it_replaces():
    _, _, cluster = prepare_run(_scenario(20))
    res = cluster.run(20)
    log = res.events
    assert isinstance(log, EventLog) and len(log) > 20
    as_list = list(log)
    assert log == as_list and as_list == [log[i] for i in range(len(log))] and log[-1] == as_list[-1]
    assert log[2:5] == as_list[2:5]
    assert all(
        isinstance(t[0], float) and isinstance(t[1], str) and all(isinstance(x, int) for x in t[2:]) for t in as_list
    )
    pd.testing.assert_frame_equal(
        pd.DataFrame(log, columns=EVENT_COLUMNS), pd.DataFrame(as_list, columns=EVENT_COLUMNS)
    )
    assert not EventLog() and pd.DataFrame(EventLog(), columns=EVENT_COLUMNS).empty
    assert sum(a.itemsize for a in (log.time, log.kind, log.worker, log.job, log.version, log.step)) == 41
