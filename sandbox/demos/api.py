"""The public names of :mod:`sandbox.demos` (its ``__init__`` stays light, so that the command module loads without them)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

# name -> (module, one-line description)
_REGISTRY: dict[str, tuple[str, str]] = {
    "delayed_instability": (
        "delayed_instability",
        "delayed SGD diverges past lr* = 2 sin(pi/(4k+2))/lambda: measured stability map vs theory",
    ),
    "stale_alignment": (
        "stale_alignment",
        "cosine of consecutive gradients: slightly negative when synchronous, positive and rising when stale",
    ),
    "ess_collapse": (
        "ess_collapse",
        "effective sample size of sequence-level importance weights collapses with lag and response length",
    ),
    "stabilizers": (
        "stabilizers",
        "the same stale run with TIS, M2PO, GAC and VCPO's ESS learning rate: what each one does",
    ),
    "stragglers": (
        "stragglers",
        "synchronous stragglers against asynchronous throughput with long-tailed generation times",
    ),
}


def _function(module: str) -> Callable[[Path, bool], Path]:
    def run(out_dir: Path, tiny: bool = False) -> Path:
        mod = importlib.import_module(f"{__package__}.{module}")
        return mod.main(mod.Config(out=str(out_dir), tiny=tiny))

    run.__package__ = module
    return run


# name -> (function(out_dir, tiny) -> figure path, one-line description)
DEMOS: dict[str, tuple[Callable[[Path, bool], Path], str]] = {
    name: (_function(module), desc) for name, (module, desc) in _REGISTRY.items()
}


def run_demo(name: str, out_dir: str | Path = "runs/demos", tiny: bool = False) -> Path:
    """Run one demo; prints its explanation and returns the path of its figure."""
    if name not in DEMOS:
        raise KeyError(f"unknown demo {name!r}; available: {', '.join(DEMOS)}")
    return DEMOS[name][0](Path(out_dir), tiny)


def example_path(name: str) -> Path:
    """The standalone copy of a demo under ``examples/`` (in a source checkout)."""
    return Path(__file__).resolve().parents[2] / "examples" / f"demo_{name}.py"


__all__ = ["DEMOS", "run_demo", "example_path"]
