"""``sandbox import CONFIG --framework F``: a GPU framework's config read back as a scenario (the inverse
of :mod:`sandbox.export`), with IMPORT.md listing key by key what was mapped, converted, cannot be
represented or is unknown. One module per framework (a reader and a mapper), the engine in
:mod:`.common`, the scenario and IMPORT.md in :mod:`.build`. Guide: ``docs/import.md``.

>>> from sandbox.importers import import_config                      # doctest: +SKIP
>>> imp = import_config("overrides.txt", "verl")                     # doctest: +SKIP
>>> imp.scenario.system.staleness.k_max                              # doctest: +SKIP
"""

from sandbox.base.lazy_api import api_getattr

__getattr__ = api_getattr(__name__)
