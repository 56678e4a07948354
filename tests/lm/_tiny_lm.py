"""The tiny LM scenario the LM batching tests share: 2 replicas of a 1-layer d = 16 model sorting 2-4 tokens,
3 workers, 3 groups of 4 a step, GRPO with Adam (seconds per run)."""

from __future__ import annotations

from sandbox.scenario.api import validate_scenario

WORKERS = GROUPS_PER_STEP = 3


def tiny_lm_scenario(staleness: dict, steps: int = 3, **system):
    """The scenario with ``system.staleness = staleness`` and any other ``system`` keys given."""
    return validate_scenario(
        {
            "task": {
                "name": "lm",
                "replicas": 2,
                "problem": {"kind": "sort", "min_len": 2, "max_len": 4},
                "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                "warmstart": {"enabled": False},
                "train_size": 32,
                "eval_size": 4,
                "eval_samples": 1,
            },
            "system": {"num_workers": WORKERS, "staleness": staleness, **system},
            "algorithm": {
                "group_size": 4,
                "groups_per_step": GROUPS_PER_STEP,
                "objective": {"name": "grpo"},
                "optimizer": {"name": "adam", "lr": 0.01},
            },
            "run": {"steps": steps, "seed": 2, "figures": False},
        }
    )
