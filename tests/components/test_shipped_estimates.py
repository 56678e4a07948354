"""Moving the knowledge about components into the components changed no number: the budget estimate
(memory, time, every term and its formula) and the plan's facts (bound field, control label, response
tokens, drops, on-policy detection) of every shipped scenario are those of the commit before."""

from __future__ import annotations

import json

from shipped_estimates import GOLDEN, shipped_facts


def test_every_shipped_scenario_estimates_as_before():
    want = json.loads(GOLDEN.read_text())
    got = json.loads(json.dumps(shipped_facts(), sort_keys=True))
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key] == want[key], key
