"""The planted-bug harness: every simulator bug of ``planted_bugs.py`` makes at least one ``sandbox check``
fail (quick settings), and every registered check fails under at least one of the bugs.

``CATCHES`` names, per bug, the checks that catch it and, where useful for speed, the quick settings
restricted to the sweep points that carry the assertion (a subset of the quick points, so the same check
passes there without the bug: ``tests/checks/test_checks.py``). Each row runs the check with the bug
planted and asserts that it fails; the table test asserts that the rows cover every bug and every check.
Reproduce the mutation × check table of the closing note with ``python tests/checks/planted_bugs.py``.
"""

from __future__ import annotations

import pytest
from planted_bugs import PLANTED

from sandbox.checks.api import CHECKS


def catch(bug: str, check: str, restrict: dict | None = None, slow: bool = False):
    """One row: ``bug`` planted, ``check`` at its quick settings with ``restrict`` = ``{(module, attribute):
    value}`` replacing parts of them."""
    marks = [pytest.mark.slow] if slow else []
    return pytest.param(bug, check, restrict or {}, marks=marks, id=f"{bug}-{check}")


CATCHES = [
    catch("learner_ignores_lag", "minibatch_lag"),
    catch("learner_ignores_lag", "critical_lr", slow=True),
    catch("learner_ignores_lag", "delayed_variance", slow=True),
    catch("learner_ignores_lag", "gradient_cosine", slow=True),
    catch("learner_ignores_lag", "staleness_divergence", slow=True),
    catch(
        "learner_ignores_lag",
        "async_sgd_bound",
        {("bound", "QUICK"): {"taus": [8], "steps": 600, "replicas": 1024}},
        slow=True,
    ),
    catch(
        "learner_ignores_lag",
        "gac_boundary",
        {("gac", "QUICK"): {"dim": 20, "steps": 400, "spacing": 0.02, "per_point": 2}},
        slow=True,
    ),
    catch("learner_ignores_lag", "random_lag", {("random_lag", "QUICK"): {"workers": [4], "runs": 20}}, slow=True),
    catch("workers_get_newest_weights", "ess_vs_lag", {("ess", "QUICK"): {"lags": [8], "steps": 40, "replicas": 4}}),
    catch("workers_get_newest_weights", "ess_fisher", {("fisher", "QUICK"): {"lags": [8], "steps": 40, "replicas": 8}}),
    catch("learner_ratio_forced_to_one", "vcpo_lr_scale"),
    catch(
        "learner_ratio_forced_to_one",
        "learner_ess",
        {("learner_ratio", "QUICK"): {"lags": [0], "steps": 30, "replicas": 4}},
    ),
    catch(
        "learner_ignores_mu", "learner_mask", {("learner_ratio", "QUICK"): {"lags": [0], "steps": 30, "replicas": 4}}
    ),
    catch("learner_ignores_mu", "vcpo_lr_scale"),
    catch("delays_at_their_mean", "straggler_cost"),
    catch("delays_at_their_mean", "split_sync_step"),
    catch("delays_at_their_mean", "random_lag", {("random_lag", "QUICK"): {"workers": [4], "runs": 20}}, slow=True),
    catch("kv_cap_ignored", "kv_throughput"),
    catch(
        "engine_reports_trainer_logp",
        "mismatch_ess",
        {("mismatch_ess", "QUICK"): {"horizons": [32], "learning_horizons": [16], "steps": 8, "replicas": 32}},
    ),
    catch(
        "engine_reports_trainer_logp",
        "learner_mask",
        {("learner_ratio", "QUICK"): {"lags": [0], "steps": 30, "replicas": 4}},
    ),
    catch(
        "minibatch_proximal_at_current_weights",
        "learner_prox",
        {("learner_ratio", "PROX_QUICK"): {"lags": [0], "batches": 10, "replicas": 4}},
    ),
    catch("engine_ignores_its_batch", "engine_batching"),
]


def _rows():
    return [tuple(p.values[:2]) for p in CATCHES]


def test_every_bug_is_caught_and_every_check_catches():
    rows = _rows()
    assert {bug for bug, _ in rows} == set(PLANTED), "a planted bug without a catching check (or a typo)"
    assert {check for _, check in rows} == set(CHECKS), "a registered check that no planted bug fails"
    assert len(rows) == len(set(rows))


@pytest.mark.parametrize("bug, check, restrict", CATCHES)
def test_planted_bug_fails_the_check(monkeypatch, bug, check, restrict):
    import importlib

    for (module, attribute), value in restrict.items():
        monkeypatch.setattr(importlib.import_module(f"sandbox.checks.{module}"), attribute, value)
    PLANTED[bug](monkeypatch)
    result = CHECKS[check].run(quick=True)
    assert not result.passed, (
        f"{check} passes with {bug} planted: {[(p.series, p.x, p.predicted, p.measured) for p in result.points]}"
    )
