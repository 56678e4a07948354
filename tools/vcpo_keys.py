"""Regenerate the pinned VCPO-fork key list (``sandbox/frameworks/verl_vcpo/keys/verl_vcpo_c7f030f0.json``) that
``sandbox/frameworks/verl_vcpo/validation.py`` checks exports against.

A maintenance tool, not part of an export: it composes the fork's recipe config from a checkout of
mit-han-lab/vcpo at c7f030f0 and reads the enum choices from its sources (docs/promotion.md, the VCPO
fork validator)::

    python tools/vcpo_keys.py <checkout of mit-han-lab/vcpo at c7f030f0>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sandbox.export.validate.common import facts, flat, source_strings
from sandbox.frameworks.verl_vcpo.validation import CONFIG_DIR, CONFIG_NAME, KEYS_FILE, A, compose_fork

MEGATRON_OPTIMIZERS = ["adam", "sgd"]  # megatron-core's optimizer names (an external package, not in the fork)


def generate_key_list(checkout: Path) -> dict[str, Any]:
    """The pinned list from a checkout at the pinned commit: every key of the composed config with its default
    (interpolations kept as written) and the choices of the enum-valued keys the exporter writes."""
    checkout = Path(checkout)
    cfg = compose_fork(checkout, [])
    keys = flat(OmegaConf.to_container(cfg, resolve=False))
    f = facts("verl-vcpo")
    choices = {
        key: [None] * (key in f["nullable"]) + source_strings(checkout, spec) for key, spec in f["choices"].items()
    }
    choices[f"{A}.optim.optimizer"] = MEGATRON_OPTIMIZERS
    return {
        "source": "mit-han-lab/vcpo git c7f030f0",
        "config": f"{CONFIG_DIR}/{CONFIG_NAME}.yaml",
        "generated_by": "tools/vcpo_keys.py",
        "keys": keys,
        "choices": {k: sorted(set(c), key=lambda x: (x is not None, x or "")) for k, c in choices.items()},
    }


def main(argv: list[str] | None = None) -> int:
    """``python tools/vcpo_keys.py <checkout>``: rewrite the pinned key list from a checkout."""
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python tools/vcpo_keys.py <checkout of mit-han-lab/vcpo at c7f030f0>", file=sys.stderr)
        return 2
    KEYS_FILE.parent.mkdir(parents=True, exist_ok=True)
    KEYS_FILE.write_text(json.dumps(generate_key_list(Path(args[0])), indent=1, sort_keys=False) + "\n")
    print(f"wrote {KEYS_FILE}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
