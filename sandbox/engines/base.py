"""The rollout-engine interface (``docs/engines.md``).

A policy task samples its tokens through the engine it is given (``task.engine``; the runner sets it
from the scenario's ``[engine]`` section). The engine receives the logits ``z`` of the trainer's
distribution at the sampling version (``π_v = softmax(z)``, the LM's ``z`` already divided by the
task's temperature) and returns, per drawn token,

* the token, drawn from the ENGINE's distribution ``q`` (which differs from ``π_v`` unless the engine
  is exact),
* the log-prob the engine REPORTS (``behaviour_logp``, what a framework reads from vLLM/SGLang as μ),
* the exact fp32 log-prob ``log π_v(y)`` of the trainer at the sampling version (``version_logp``).

With them the learner splits its ratio ``log π_θ − log μ`` into a mismatch part
``log π_v − log μ`` and a staleness part ``log π_θ − log π_v`` (``docs/engines.md#metrics``).

The ``exact`` engine draws nothing and is never called: a task checks :attr:`Engine.exact` and then
runs its own sampling code unchanged, so every number of a scenario without an engine is bitwise
today's. Engines draw from the task's sampling stream (``torch.Generator`` or
:class:`sandbox.tasks.draws.RowGenerators`, whose leading dimension is the replica one) and only
through :mod:`sandbox.tasks.draws`, so a run stays deterministic, and replicas under independent
schedules draw what their separate runs draw.

A task says which engine features it supports (``PolicyTask.engine_features``); an engine declares
what it needs (:attr:`Engine.needs`): ``"logits"`` (the task hands its per-token logits to
:meth:`Engine.draw`: bandit, bit-string, LM), ``"forward"`` (the engine evaluates the task's network
itself at another precision: the LM) and ``"experts"`` (the network has a mixture-of-experts layer:
the LM with ``task.model.experts > 0``). :func:`check_engine_task` turns a mismatch into a load-time
error naming ``engine.name`` and the task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from sandbox.base.lazy_torch import lazy_import
from sandbox.base.registry import Registry
from sandbox.tasks import draws

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())

ENGINES: Registry = Registry("engine", plugins="engine")
"""Every rollout engine, keyed by its config's ``name`` (the TOML ``[engine] name = ...``)."""


def tiny_lm_check_settings(**model: object) -> dict:
    """The scenario overrides under which the component checker runs an engine that needs the LM task: a
    one-layer LM of width 16, no warm start, 16 training and 4 held-out prompts (``model``: extra model keys)."""
    return {
        "task": {
            "name": "lm",
            "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, **model},
            "warmstart": {"enabled": False},
            "train_size": 16,
            "eval_size": 4,
            "eval_samples": 1,
        }
    }


class EngineBase(BaseModel):
    """Base of every engine config: unknown keys and non-finite numbers are refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    needs: ClassVar[frozenset[str]] = frozenset({"logits"})
    """Task features the engine needs (module docstring); every engine samples through :meth:`Engine.draw`,
    so the task must hand it its logits at least."""
    check_settings: ClassVar[dict] = {}

    def task_problem(self, task_cfg: Any) -> str | None:
        """A further reason the engine cannot run with ``task_cfg`` (a sentence naming the field), or None."""
        return None


@dataclass
class Draw:
    """What an engine returns for one draw of tokens (shapes: the logits' leading dims)."""

    tokens: Tensor
    """int64 tokens drawn from the engine's distribution q."""
    reported_logp: Tensor
    """float32 log μ(y): what the engine reports (the behaviour log-prob)."""
    version_logp: Tensor
    """float32 log π_v(y): the trainer's exact log-prob at the sampling version."""


class Engine:
    """Base of every engine implementation. ``exact`` engines are never called (module docstring)."""

    exact: ClassVar[bool] = False
    cfg: EngineBase

    def __init__(self, cfg: EngineBase):
        self.cfg = cfg
        self.flips = 0
        """Router decisions the engine flipped (``routing``), for checks."""
        self.decisions = 0
        """Router decisions the sampler made (``routing``)."""

    @property
    def needs(self) -> frozenset[str]:
        return type(self.cfg).needs

    def draw(self, z: Tensor, gen, version: int | Tensor = 0, position: int | Tensor = 0) -> Draw:
        """Draw one token per row of ``z (..., K)`` (the trainer's logits at version ``version``; the
        leading dimension is the replica one when ``gen`` is per-replica) at response position(s)
        ``position``. Default: sample from ``softmax(z)`` and report it (no mismatch)."""
        logp = torch.log_softmax(z.float(), -1)
        tok = categorical(logp, gen)
        lp = logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
        return Draw(tok, lp, lp)

    # -- LM hooks (engines that need "forward" or "experts") ------------------------------------
    def sampler_weights(self, single: dict[str, Tensor]) -> tuple[dict[str, Tensor], torch.dtype | None]:
        """The weights the sampler's forward uses and its compute dtype (None: the task's). Default: as given."""
        return single, None

    def router_flip(self, gen) -> Any:
        """The router perturbation the sampler's forward applies (None: none)."""
        return None


def categorical(logp: Tensor, gen) -> Tensor:
    """One index per row of ``logp (..., K)`` (log-probabilities, normalised) by inversion of the CDF
    with one uniform per row from :func:`sandbox.tasks.draws.rand` (per-replica streams supported):
    ``y = #{k : F_k <= u · F_K}`` with ``F`` the cumulative sum (scaled by its total ``F_K``, so rounding
    never picks an entry of probability 0: the chosen ``y`` has ``F_{y−1} <= u F_K < F_y``)."""
    u = draws.rand(tuple(logp.shape[:-1]), gen).to(logp.device)
    cdf = logp.exp().cumsum(-1)
    return (cdf <= u.unsqueeze(-1) * cdf[..., -1:]).sum(-1)


def check_engine_task(engine_cfg: EngineBase, task_cfg: Any, features: frozenset[str]) -> str | None:
    """Why ``engine_cfg`` cannot run with the task ``task_cfg`` whose implementation supports ``features``
    (a sentence naming ``engine.name`` and the task), or None."""
    name = engine_cfg.name  # type: ignore[attr-defined]
    missing = sorted(type(engine_cfg).needs - features)
    if missing:
        what = {
            "logits": "hands its sampling logits to the engine",
            "forward": "has a network the engine can evaluate at another precision (the lm task)",
            "experts": "has a mixture-of-experts layer (the lm task with task.model.experts > 0)",
        }
        need = "; ".join(what.get(m, m) for m in missing)
        return (
            f"engine.name: {name!r} needs a task that {need}; task {task_cfg.name!r} does not (docs/engines.md#{name})"
        )
    return engine_cfg.task_problem(task_cfg)
