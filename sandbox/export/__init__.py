"""``sandbox export``: a scenario's algorithm and staleness settings written as the configuration of
a GPU framework (verl, the VCPO fork of verl, TRL, OpenRLHF, AReaL, prime-rl), per framework version,
with a PROMOTION.md that says key by key what was mapped, converted, left to the user or has no
equivalent. Guide: ``docs/promotion.md``.

>>> from sandbox.export import export_scenario                    # doctest: +SKIP
>>> exp = export_scenario(scn, "verl", allow_partial=True)        # doctest: +SKIP
>>> exp.plan.settings["trainer.v1.sampler.max_off_policy_threshold"]   # doctest: +SKIP
"""


def __getattr__(name: str):
    """The package's public names (``from sandbox.export import ...``), read from :mod:`.api` on first use, so
    that importing a module of this folder (a command module) loads nothing heavy. A submodule's name and a
    dunder are left to the import system (``from sandbox.export import <submodule>`` loads only that module)."""
    import importlib
    import importlib.util

    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(f"{__name__}.api"), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
