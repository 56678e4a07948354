"""The preflight's lag bound comes from what each staleness control declares, not from its name."""

import pytest

from sandbox.preflight.questions import user_bound
from sandbox.system.staleness import CONTROLS


@pytest.mark.parametrize(
    "table, expected",
    [
        ({"kind": "sync"}, 0),
        ({"kind": "fixed_lag", "k": 0}, 0),
        ({"kind": "fixed_lag", "k": 3}, 3),
        ({"kind": "max_lag", "k_max": 4}, 4),
        ({"kind": "stream_sync", "sync_every": 1}, 0),  # every batch on-policy: synchronous
        ({"kind": "stream_sync", "sync_every": 4}, 1),  # no lag bound: the smallest bound the map centres on
        ({"kind": "async_ratio", "alpha": 2.0}, 1),  # a ratio, not a lag in versions
    ],
)
def test_user_bound_per_control(table, expected):
    assert user_bound(table) == expected


def test_every_registered_control_gives_a_bound():
    for name in CONTROLS.names():
        assert user_bound({"kind": name}) >= 0, name
