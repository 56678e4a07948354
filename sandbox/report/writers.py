"""The metric writers moved to :mod:`sandbox.run.writers` (a part of the run layer: the runner streams
its rows to them, and the run layer imports nothing from the reports). This old path stays an alias
of the very same module object, so ``sandbox.report.writers.REGISTRY`` and monkeypatches on it keep
working."""

import sys

from sandbox.run import writers as _writers

sys.modules[__name__] = _writers
