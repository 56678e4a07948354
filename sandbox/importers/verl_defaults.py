"""verl 0.9.1's own defaults, per entry point: the config each ``@hydra.main`` composes (``ppo_trainer``
for ``verl.trainer.main_ppo``, ``one_step_off_ppo_trainer`` for the one-step-off entry point,
``fully_async_ppo_trainer`` for the fully-async one, and their Megatron twins), composed with Hydra
from the released wheel's config tree and stored flat in ``defaults/verl-0.9.1.json`` (the importer
needs no wheel at run time; ``python -m sandbox.importers.verl_defaults`` rewrites the file from the
wheel, and ``tests/importers`` checks the stored file equals a fresh compose).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

VERSION = "0.9.1"
STORE = Path(__file__).with_name("defaults") / f"verl-{VERSION}.json"

#: config name -> directory of the wheel holding it
CONFIGS: dict[str, str] = {
    "ppo_trainer": "verl/trainer/config",
    "ppo_megatron_trainer": "verl/trainer/config",
    "one_step_off_ppo_trainer": "verl/experimental/one_step_off_policy/config",
    "one_step_off_ppo_megatron_trainer": "verl/experimental/one_step_off_policy/config",
    "fully_async_ppo_trainer": "verl/experimental/fully_async_policy/config",
    "fully_async_ppo_megatron_trainer": "verl/experimental/fully_async_policy/config",
}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(tree, dict) and tree:
        for k, v in tree.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    out[prefix[:-1]] = tree
    return out


def compose(wheel: Path, config_name: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """``config_name`` of the unpacked wheel composed by Hydra (as the entry point's ``@hydra.main`` does,
    with ``overrides``), unresolved interpolations kept as text; flat ``{dotted key: value}``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    # the recipe configs name verl's tree by a path relative to the repository root: give it absolutely
    search = f"hydra.searchpath=[file://{wheel / 'verl/trainer/config'}]"
    with initialize_config_dir(config_dir=str(wheel / CONFIGS[config_name]), version_base=None):
        cfg = hydra_compose(config_name=config_name, overrides=[search] + list(overrides or []))
    GlobalHydra.instance().clear()
    tree = OmegaConf.to_container(cfg, resolve=False)
    tree.pop("hydra", None)
    return flatten(tree)


@cache
def stored() -> dict[str, dict[str, Any]]:
    return json.loads(STORE.read_text())


def defaults(config_name: str) -> dict[str, Any]:
    """The stored defaults of ``config_name`` (one of :data:`CONFIGS`)."""
    return stored()[config_name]


def main() -> None:
    from sandbox.export.validate.wheels import unpacked_wheel

    wheel = unpacked_wheel("verl", VERSION)
    data = {name: compose(wheel, name) for name in CONFIGS}
    STORE.parent.mkdir(exist_ok=True)
    STORE.write_text(json.dumps(data, indent=0, sort_keys=True, default=str) + "\n")
    print(f"wrote {STORE} ({sum(map(len, data.values()))} keys)")


if __name__ == "__main__":
    main()
