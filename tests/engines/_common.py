"""Helpers of the engine tests: a tiny LM task with an engine, and a stream."""

from __future__ import annotations

import torch

from sandbox.engines import make_engine
from sandbox.scenario.api import validate_scenario

TINY_LM = {
    "name": "lm",
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
    "warmstart": {"enabled": False},
    "train_size": 16,
    "eval_size": 4,
    "eval_samples": 1,
}


def lm_task(engine: dict, model: dict | None = None, **task):
    """The LM task of a validated scenario with ``engine``, its engine set as the runner sets it."""
    from sandbox.tasks import make_task

    cfg = dict(TINY_LM, **task)
    if model:
        cfg["model"] = dict(cfg["model"], **model)
    scn = validate_scenario({"task": cfg, "engine": engine}, "test")
    t = make_task(scn.task)
    t.engine = make_engine(scn.engine)
    return t, t.init_params(torch.Generator().manual_seed(0))


def engine(cfg: dict):
    from sandbox.engines import ENGINES

    entry = ENGINES[cfg["name"]]
    return entry.impl(entry.config(**cfg))
