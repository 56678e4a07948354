"""``sandbox check``: predictions from ``theory/`` held against simulations in the sandbox.

Each check sweeps its free variable, compares prediction and measurement point by point within a
tolerance justified by the sampling error, and can fail (``perturbation`` is a distortion of the
prediction that the check must reject; the tests run every check with it), and each must fail under a
simulator bug it exists to catch (``tests/checks/test_checks_injected_bugs.py``; the planted-bug
harness ``tests/checks/test_planted_bugs.py`` plants each bug of ``tests/checks/planted_bugs.py`` and shows
that every bug fails some check and every check fails under some bug). ``learner_ess``, ``learner_mask``,
``learner_prox`` and ``vcpo_lr_scale`` read the importance ratios, masks and learning-rate scale the learner
itself formed (the policy loss's recorder, its per-replica metrics) rather than recomputing them from the
rollouts. T7 (Little's law) and
T10 (the OPOB variance identity) have no check: the first compared an identity computed from the
simulator's own log, the second never ran the simulator, so neither could catch a simulator bug; both
are unit tests (``tests/system/test_queueing_laws.py``, ``tests/algorithms/test_alg_opob_variance.py``;
docs/theory.md#t7, #t10).
"""


def __getattr__(name: str):
    """The package's public names (``from sandbox.checks import ...``), read from :mod:`.api` on first use, so
    that importing a module of this folder (a command module) loads nothing heavy. A submodule's name and a
    dunder are left to the import system (``from sandbox.checks import <submodule>`` loads only that module)."""
    import importlib
    import importlib.util

    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(f"{__name__}.api"), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
