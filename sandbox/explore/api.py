"""The public names of :mod:`sandbox.explore` (its ``__init__`` stays light, so that the command module loads without them)."""

from __future__ import annotations

from pathlib import Path

from sandbox.explore.grid import DEFAULT_PAGE, QUADRATIC, QUICK, QUICK_PAGE, Grid, GridError, check_grid, estimate_grid


def build_explorer(out_dir: str | Path, grids: Grid | tuple[Grid, ...] | None = None) -> Path:
    """Run ``grids`` (default :data:`DEFAULT_PAGE`: the quadratic, then the bit-string) and write
    ``out_dir/explorer.html``; returns its path. Every grid is checked against its budget before it runs."""
    from sandbox.explore.data import compute_page
    from sandbox.explore.page import write_page

    grids = DEFAULT_PAGE if grids is None else (grids,) if isinstance(grids, Grid) else tuple(grids)
    return write_page(compute_page(grids), out_dir)


__all__ = [
    "DEFAULT_PAGE",
    "Grid",
    "GridError",
    "QUADRATIC",
    "QUICK",
    "QUICK_PAGE",
    "build_explorer",
    "check_grid",
    "estimate_grid",
]
