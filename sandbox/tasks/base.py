"""The task interface: what is learned, and how the simulator samples from and trains it.

Two kinds share the simulator:

* :class:`PolicyTask` — an RL policy. Workers call :meth:`PolicyTask.new_group` then
  :meth:`PolicyTask.generate` with the weights of the version they hold (recording behaviour
  log-probs and token versions); the learner calls :meth:`PolicyTask.logprobs` under its current
  weights. Parameters are a ``dict[str, Tensor]`` whose tensors lead with the replica dimension.
* :class:`OracleTask` — a stochastic-gradient oracle (the delayed-SGD testbeds of
  ``docs/theory.md#t1`` to ``#t3``): a worker evaluates a noisy gradient at the weights it holds;
  the learner applies it.

Every task is one module holding its pydantic config next to its implementation, registered in
:data:`TASKS` (``@TASKS.register(XConfig)``); the scenario's ``[task]`` union, the name lists and
:func:`sandbox.tasks.make_task` are derived from the registry (``docs/tasks.md``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sandbox.base.lazy_torch import lazy_import
from sandbox.base.registry import Registry
from sandbox.tasks.rollouts import Rollouts

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())

Params = dict[str, "Tensor"]

TASKS: Registry = Registry("task", plugins="task")
"""Every task, keyed by its config's ``name`` (the TOML ``[task] name = ...``)."""


@dataclass(frozen=True)
class BudgetShape:
    """What the budget estimate (``sandbox/scenario/budget.py``) and ``sandbox plan`` need to know about a task
    config, declared by the task (:meth:`Task.budget_shape`) so that neither asks for it by name."""

    model: str
    """The cost model: ``"toy"`` (small policy tensors), ``"environment"`` (a gymnasium policy),
    ``"transformer"`` (an LM) or ``"oracle"`` (a gradient oracle: no tokens)."""
    T: int
    """Token slots per response (oracle: gradient entries per sample)."""
    T_field: str | None
    """The scenario field that sets ``T`` (named in the estimate's messages), if any."""
    params: int
    """Parameters per replica."""
    param_bytes: int = 4
    prompt_bytes: float = 0
    """Kept per response besides its tokens (the prompt, the observations)."""
    data_bytes: float = 0
    """Loaded once per process besides the runtime (the task's data)."""
    act_per_slot: float = 0.0
    """Extra learner bytes per token slot (network activations)."""
    exact_length: bool = True
    """Every response has exactly ``T`` tokens (False: ``T`` is an upper bound)."""
    exact_evaluation: bool = False
    """The evaluation is exact over ``T`` positions (its cost is counted: the bit-string task)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Cost-model parameters (``transformer``: P, V, d, L, ff, heads, seq; ``environment``: obs and the
    evaluated episode length ``episode_len``)."""
    note: str = ""
    """Said next to the estimate, e.g. that it is a conservative guess."""


UNKNOWN_T = 1024
UNKNOWN_PARAMS = 1_000_000


class Task(ABC):
    """Base of every task. Besides what the simulator calls, a task declares (classmethods on its
    config, each with a default so that a task declaring nothing still runs in every command):
    :meth:`budget_shape` (the memory and time estimate), :meth:`response_length` (``sandbox plan``),
    :meth:`needs_preload` / :meth:`preload`
    (shared work done once before a sweep's runs, e.g. the LM's warm start)."""

    kind: ClassVar[str]
    replicas: int
    default_threads: ClassVar[int | None] = None
    """torch intra-op threads during a run when ``run.threads`` is unset (None: torch's default).
    Toy tasks set 1: their tensors are tiny and extra threads only add overhead."""

    @classmethod
    def budget_shape(cls, cfg) -> BudgetShape:
        """The task's sizes for the budget estimate. Default: measured by building the task (its
        ``max_len`` and the parameters of :meth:`init_params` per replica) and charged as a toy policy
        task (an oracle: as the quadratic oracle), or, if it cannot be built, ``UNKNOWN_T`` tokens and
        ``UNKNOWN_PARAMS`` parameters; marked "unknown: estimated conservatively"."""
        oracle = issubclass(cls, OracleTask)
        note = f"unknown for task {getattr(cfg, 'name', cls.__name__)!r}: estimated conservatively"
        try:
            task = cls(cfg)
            params = task.init_params(torch.Generator().manual_seed(0))
            per_replica = sum(int(v[0].numel()) for v in params.values())
            T = per_replica if oracle else int(getattr(task, "max_len", UNKNOWN_T))
        except Exception:  # noqa: BLE001 - a guess is the honest answer when the task cannot be sized
            per_replica, T = UNKNOWN_PARAMS, UNKNOWN_T
        return BudgetShape(
            "oracle" if oracle else "toy",
            max(T, 1),
            None,
            max(per_replica, 1),
            8 if oracle else 4,
            exact_length=oracle,
            note=note,
        )

    @classmethod
    def response_length(cls, cfg) -> tuple[int | None, bool]:
        """(token slots per response, whether every response has exactly that many) for ``sandbox plan``;
        ``None`` for an oracle (no tokens). Default: from :meth:`budget_shape` (override when that is
        costly to compute, as the LM's exact parameter count is)."""
        shape = cls.budget_shape(cfg)
        return (None, True) if shape.model == "oracle" else (shape.T, shape.exact_length)

    @classmethod
    def response_length_hint(cls, cfg) -> str:
        """The length of this task's responses in words, for ``sandbox export``'s task row (the GPU run
        sets its own maximum response length). Default: from :meth:`response_length`."""
        T, exact = cls.response_length(cfg)
        if T is None:
            return "no tokens (a gradient oracle)"
        return f"{'exactly' if exact else 'up to'} {T} token{'' if T == 1 else 's'}"

    @classmethod
    def needs_preload(cls, cfg) -> bool:
        """Whether runs of ``cfg`` share work worth doing once up front (:meth:`preload`). Default no."""
        return False

    @classmethod
    def preload(cls, cfg) -> None:
        """Do the shared work for ``cfg`` (train or load a cached warm start). Default: nothing."""

    @abstractmethod
    def init_params(self, gen: torch.Generator) -> Params:
        """Initial learner weights, each tensor ``(R, ...)``."""

    def evaluate(self, params: Params) -> dict[str, Tensor]:
        """Task-level evaluation per replica (``(R,)`` tensors), e.g. exact expected reward."""
        return {}


class PolicyTask(Task):
    kind: ClassVar[str] = "policy"
    max_len: int
    fixed_length: ClassVar[bool] = False
    """Every response has exactly ``max_len`` tokens whatever the weights, and the task draws only
    through :mod:`sandbox.tasks.draws`: the cluster's timing then cannot depend on the policy, so
    each replica can run under its own schedule (``run.schedules = "independent"``)."""
    engine: Any = None
    """The rollout engine the task samples through (:mod:`sandbox.engines`, set by the runner); None or
    an exact engine: the task's own sampling code, unchanged (``docs/engines.md``)."""

    @classmethod
    def engine_features(cls, cfg) -> frozenset[str]:
        """What a rollout engine may ask of this task (``sandbox.engines.base``): none by default."""
        return frozenset()

    def sampling_engine(self):
        """The engine to sample through, or None when sampling is exact (the task's own code path)."""
        engine = self.engine
        return None if engine is None or engine.exact else engine

    @abstractmethod
    def new_group(self, group_size: int, gen: torch.Generator) -> Rollouts:
        """An empty group (width 0) of ``group_size`` responses to one prompt per replica."""

    @abstractmethod
    def generate(self, params: Params, group: Rollouts, gen: torch.Generator, version: int) -> Rollouts:
        """Continue every unfinished response of ``group`` to its end with ``params``."""

    def sample_group(self, params: Params, group_size: int, gen: torch.Generator, version: int) -> Rollouts:
        """A new group sampled to its end: ``generate(params, new_group(group_size, gen), gen, version)``.
        A task may override it with a shorter path that returns the same tensors and draws the same
        numbers from ``gen`` in the same order (the bandit: no empty group to extend)."""
        return self.generate(params, self.new_group(group_size, gen), gen, version)

    @abstractmethod
    def rewards(self, group: Rollouts, gen: torch.Generator) -> Tensor:
        """``(R, N)`` rewards of complete responses."""

    @abstractmethod
    def logprobs(self, params: Params, rollouts: Rollouts) -> Tensor:
        """``(R, N, T)`` log π(y_t|s_t) under ``params`` (differentiable; 0 on padding)."""

    def sequence_inputs(self, rollouts: Rollouts) -> tuple[Tensor, ...]:
        """Per-trajectory inputs of :meth:`sequence_logprob`, each with leading dims ``(R, N)``.
        Tasks whose log-probs need more than the tokens (an LM's prompt, a gym episode's
        observations) add them."""
        return (rollouts.tokens, rollouts.mask)

    @staticmethod
    def sequence_logprob(params: Params, trajectory) -> Tensor:
        """Scalar log π(y) of one trajectory (one item of :meth:`sequence_inputs`) under one
        replica's ``params``, written for ``torch.func`` (per-trajectory gradients for VCPO's OPOB)."""
        raise NotImplementedError


@dataclass
class GradientSample:
    """A stochastic gradient evaluated by a worker at the weights it held."""

    grad: Tensor
    """``(R, G, d...)`` one gradient per sample (G = group size)."""
    version: int
    loss_at_version: Tensor
    """``(R,)`` true objective at the evaluated weights."""

    @property
    def num_responses(self) -> int:
        return self.grad.shape[1]

    decode_steps = 0  # a gradient evaluation has no decode phase: cost models charge prefill only
    token_count = 0


class OracleTask(Task):
    kind: ClassVar[str] = "oracle"

    @abstractmethod
    def gradient(self, params: Params, n: int, gen: torch.Generator, version: int) -> GradientSample:
        """``n`` noisy gradients at ``params``."""

    @abstractmethod
    def surrogate(self, params: Params, grads: Tensor) -> Tensor:
        """``(R,)`` a loss whose autograd gradient w.r.t. ``params`` is the mean of ``grads``."""

    @abstractmethod
    def loss(self, params: Params) -> Tensor:
        """``(R,)`` true objective."""
