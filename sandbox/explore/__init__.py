"""``sandbox explore``: an interactive, self-contained HTML page of precomputed staleness runs.

:mod:`.grid` says which runs (and refuses a grid over its time budget), :mod:`.data` runs them and
reduces each to the arrays the page draws, :mod:`.page` writes the page (:mod:`.texts` holds its
words, ``explorer.js`` its drawing code).
"""

from __future__ import annotations

from pathlib import Path

from .grid import QUICK, Grid, GridError, check_grid, estimate_grid


def build_explorer(out_dir: str | Path, grid: Grid | None = None) -> Path:
    """Run ``grid`` (default :class:`Grid`) and write ``out_dir/explorer.html``; returns its path."""
    from .data import compute
    from .page import write_page

    return write_page(compute(grid or Grid()), out_dir)


__all__ = ["Grid", "GridError", "QUICK", "build_explorer", "check_grid", "estimate_grid"]
