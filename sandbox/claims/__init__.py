"""``sandbox claims``: each paper's claim as an experiment with a verdict over seeds (docs/claims.md).

A claim runs its scenario once per seed, reduces each run to a statistic, and gives the mean with a
95% t-interval and a verdict against the claim's threshold (:mod:`.base`)."""

from sandbox.base.lazy_api import api_getattr

__getattr__ = api_getattr(__name__)
