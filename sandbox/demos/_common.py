"""What every demo script shares: its command line (from its ``Config`` dataclass) and saving
its one figure."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from sandbox.run.plots import _save  # Okabe-Ito colour cycle, PNG + SVG


def config_from_argv(config_cls, argv=None):
    """``--field VALUE`` for every scalar field of the dataclass (``--tiny`` for booleans);
    unknown arguments are an error, not silently ignored."""
    parser = argparse.ArgumentParser(description=(config_cls.__module__ or "demo") + " (teaching demo)")
    for f in dataclasses.fields(config_cls):
        default = f.default
        if isinstance(default, bool):
            parser.add_argument(f"--{f.name}", action="store_true", default=default)
        elif isinstance(default, (int, float, str)):
            parser.add_argument(f"--{f.name}", type=type(default), default=default, help=f"(default: {default})")
    return config_cls(**vars(parser.parse_args(argv)))


def save_figure(fig, out: str | Path, name: str) -> Path:
    """Save ``fig`` as ``out/name.png`` (and ``name.svg`` beside it), close it, print and return the
    PNG's path."""
    fig.tight_layout()
    path = Path(out) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    _save(fig, path)
    print(f"  figure: {path}")
    return path
