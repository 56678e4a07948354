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

from sandbox.base.lazy_api import api_getattr

__getattr__ = api_getattr(__name__)
