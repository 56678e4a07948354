"""The public names of :mod:`sandbox.importers` (its ``__init__`` stays light, so that the command module loads without them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.frameworks.areal import importer as areal
from sandbox.frameworks.importing import ConfigImportError, Mapper, Row, Settings
from sandbox.frameworks.openrlhf import importer as openrlhf
from sandbox.frameworks.prime_rl import importer as prime_rl
from sandbox.frameworks.trl import importer as trl
from sandbox.frameworks.verl import importer as verl
from sandbox.frameworks.verl_vcpo import importer as verl_vcpo
from sandbox.importers.build import PROXIES, Imported, build, read_cluster, render_import_md


@dataclass(frozen=True)
class Importer:
    """One framework: how its files are read, and the mapper that consumes their keys."""

    name: str
    title: str
    formats: str
    read: Callable[[str], Settings]
    map: Callable[[Mapper], None]


def _importers() -> dict[str, Importer]:
    out = [
        Importer(
            "verl",
            "verl 0.9.1 (main_ppo, one-step-off and fully-async entry points)",
            "launch script, Hydra override list (key=value lines) or YAML",
            verl.read_verl,
            verl.map_verl,
        ),
        Importer(
            "verl-vcpo",
            "the VCPO fork of verl (mit-han-lab/vcpo c7f030f0, fully-async recipe)",
            "Hydra override list or YAML",
            verl_vcpo.read_vcpo,
            verl_vcpo.map_vcpo,
        ),
        Importer(
            "trl",
            "TRL 1.16 (GRPOConfig or AsyncGRPOConfig)",
            "keyword arguments as JSON or YAML, a script's GRPOConfig(...) call, or launch flags",
            trl.read_trl,
            trl.map_trl,
        ),
        Importer(
            "openrlhf",
            "OpenRLHF 0.11 (openrlhf.cli.train_ppo_ray)",
            "launch script (ray job submit -- python3 -m ...) or flag list",
            openrlhf.read_openrlhf,
            openrlhf.map_openrlhf,
        ),
        Importer(
            "areal",
            "AReaL 1.0 (GRPO config of areal/api/cli_args.py)",
            "YAML (${...} resolved with OmegaConf)",
            areal.read_areal,
            areal.map_areal,
        ),
        Importer(
            "prime-rl",
            "prime-rl (git 559b4477, rl.toml)",
            "TOML ([trainer], [orchestrator])",
            prime_rl.read_prime_rl,
            prime_rl.map_prime_rl,
        ),
    ]
    return {i.name: i for i in out}


IMPORTERS: dict[str, Importer] = _importers()

#: launcher options that count the processes (one per GPU) the framework runs on
_PROCESS_OPTS = {"accelerate launch": ("--num_processes",), "torchrun": ("--nproc_per_node", "--nproc-per-node")}


def launcher_rows(settings: Settings) -> list[Row]:
    """Rows for the launcher options that are cluster facts (``accelerate launch --num_processes 8``)."""
    rows = []
    for launcher, opts in _PROCESS_OPTS.items():
        words = settings.launcher_args.get(launcher, [])
        for i, w in enumerate(words):
            name, eq, val = w.partition("=")
            if name in opts:
                val = val if eq else (words[i + 1] if i + 1 < len(words) else "")
                if val.isdigit():
                    rows.append(
                        Row(
                            "ignored",
                            f"({launcher} {opts[0]})",
                            int(val),
                            None,
                            None,
                            "processes (GPUs) the launcher starts: a cluster fact (Q3/Q4/Q7 of sandbox preflight)",
                        )
                    )
    return rows


def import_config(
    path: str | Path,
    framework: str,
    proxy: str = "bitstring",
    cluster: dict[str, Any] | None = None,
    entry: str | None = None,
) -> Imported:
    """Read ``path`` as ``framework``'s config and build the scenario; :class:`ConfigImportError` (one line
    naming the file and the line or key) for an unknown framework, an unreadable or malformed file."""
    if framework not in IMPORTERS:
        raise ConfigImportError(f"--framework: unknown framework {framework!r}; expected one of {', '.join(IMPORTERS)}")
    imp = IMPORTERS[framework]
    settings = imp.read(str(path))
    settings.entry_override = entry
    if entry is not None and framework != "trl":
        settings.entry, settings.entry_line = entry, 0
    m = Mapper(settings, framework)
    imp.map(m)
    m.finish()
    m.rows += launcher_rows(settings)
    out = build(framework, str(path), m.rows, m.fields, proxy, cluster)
    out.notes = list(settings.notes)
    out.entry = settings.entry_override or settings.entry
    return out


__all__ = [
    "ConfigImportError",
    "IMPORTERS",
    "Imported",
    "Importer",
    "PROXIES",
    "import_config",
    "read_cluster",
    "render_import_md",
]
