"""``sandbox export``: a scenario's algorithm and staleness settings written as the configuration of
a GPU framework (verl, the VCPO fork of verl, TRL, OpenRLHF, AReaL, prime-rl), per framework version,
with a PROMOTION.md that says key by key what was mapped, converted, left to the user or has no
equivalent. Guide: ``docs/promotion.md``.

>>> from sandbox.export import export_scenario                    # doctest: +SKIP
>>> exp = export_scenario(scn, "verl", allow_partial=True)        # doctest: +SKIP
>>> exp.plan.settings["trainer.v1.sampler.max_off_policy_threshold"]   # doctest: +SKIP
"""

from sandbox.base.lazy_api import api_getattr

__getattr__ = api_getattr(__name__)
