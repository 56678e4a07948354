"""``sandbox check`` runs its checks in worker processes (``--processes``, default 2): each check's numbers
are those of a run in this process, in any order, and the results come back in the checks' order."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from sandbox.checks import report
from sandbox.checks.api import CHECKS
from sandbox.checks.report import run_checks
from sandbox.cli import app

NAMES = ("straggler_cost", "learner_prox", "minibatch_lag", "vcpo_lr_scale", "ess_fisher")

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="worker processes are forked")


def _numbers(results):
    return [{k: v for k, v in r.to_dict().items() if k != "seconds"} for r, _ in results]


@pytest.mark.parametrize("perturb", [False, True])
def test_checks_in_worker_processes_give_the_numbers_of_one_process(perturb):
    one = run_checks({n: CHECKS[n] for n in NAMES}, True, perturb)
    seen = []
    two = run_checks(
        {n: CHECKS[n] for n in reversed(NAMES)}, True, perturb, lambda c, r, s: seen.append(c.name), processes=2
    )
    assert seen == list(reversed(NAMES))  # on_done in the checks' order
    assert [r.name for r, _ in two] == list(reversed(NAMES))
    assert _numbers(two)[::-1] == _numbers(one)
    assert not report._POOL_CHECKS  # the pool's list is emptied with it


def test_a_check_that_raises_in_a_worker_raises_here(monkeypatch):
    class Broken:
        name, perturbation = "broken", 1.0

        def run(self, quick, perturb):
            raise ValueError("broken check")

    with pytest.raises(ValueError, match="broken check"):
        run_checks({"straggler_cost": CHECKS["straggler_cost"], "broken": Broken()}, True, processes=2)
    assert not report._POOL_CHECKS


def test_the_command_reports_the_same_table_with_one_or_two_processes(tmp_path):
    outs = []
    for j in ("1", "2"):
        res = CliRunner().invoke(app, ["check", *NAMES[:3], "--quick", "-q", "-j", j])
        assert res.exit_code == 0, res.output
        outs.append([line for line in res.output.splitlines() if "PASS" not in line and "FAIL" not in line])
    assert outs[0] == outs[1]
    res = CliRunner().invoke(app, ["check", NAMES[0], "--quick", "-j", "0"])
    assert res.exit_code != 0 and "processes" in res.output.lower()
