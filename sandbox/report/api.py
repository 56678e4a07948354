"""The public names of :mod:`sandbox.report` (its ``__init__`` stays light, so that the command module loads without them)."""

from __future__ import annotations

from sandbox.report.figures import Figure, sweep_figures
from sandbox.report.html import write_report

__all__ = ["Figure", "sweep_figures", "write_report"]
