"""Continuous-batching inference engine (``docs/system.md#continuous_batching``): generation time
from an engine that steps a batch of sequences, as vLLM and SGLang do.

Rollout workers are grouped into engines of ``workers_per_engine`` workers (worker ``w`` uses engine
``w // workers_per_engine``); a worker's group (``algorithm.group_size`` sequences) is submitted to its
engine and the worker waits until its last sequence ends. The engine is one simpy process:

* a decode step with ``n`` sequences in flight costs ``a + b·n`` seconds (``step_base``,
  ``step_per_sequence``: memory-bound decode, weights read once per step and each sequence's KV
  cache once; ``sandbox.system.hardware`` derives them from a GPU and a model), and at least
  ``step_floor`` seconds: ``max(f, a + b·n)``, the host's per-step work (kernel launches, scheduling)
  overlapping the GPU's, so a step is bound by whichever is longer (an engine run in eager mode,
  without CUDA graphs, launches every kernel of every layer from Python each step; off by default,
  ``docs/system.md#step_floor``);
* a sequence of ``L`` response tokens lives through ``L`` decode steps after its prefill, which costs
  ``prefill_per_token · prompt_tokens`` and runs as its own step before the next decode step (the
  prefills of the sequences admitted together add up);
* admission is first come, first served, at step boundaries, while the sequences in flight are at
  most ``max_sequences`` and their KV reservations (``prompt_tokens + L`` each: the sequence's full
  length, known to the simulator, so nothing is ever pre-empted) fit ``kv_capacity_tokens``;
  waiting sequences queue;
* the engine holds one weight version; when the next waiting group was admitted (by the staleness
  control) with a newer version, the engine syncs (``sync_time`` seconds) to exactly that version:
  ``drain``: it admits nothing until the sequences in flight end under their old version, then
  syncs; ``abort``: the groups in flight are aborted at the step boundary, their tokens thrown away,
  and they are regenerated from their first token under the new version (queued ahead of the rest);
  ``partial``: the sequences in flight pause for the sync and resume under the new version (the
  group's ``tail_version`` is the newest version that decoded part of it). With ``mixed_versions``
  (opt-in; the LM task) the content follows the timing: at the sync every group of an older version in
  the engine (in flight or queued) is cut, sequence by sequence, at the tokens it has decoded
  (``length − remaining``; 0 for a sequence not admitted yet; its whole length for one that has ended)
  and handed to the cluster's ``resume`` hook, which samples the rest under the new weights (tokens
  stamped with the new version, behaviour log-probs of the new weights) and returns the new lengths;
  the sequences go on with ``new length − decoded`` steps left.

Between two changes of the batch (a sequence ends, a group arrives, a sync) every step costs the
same, so the process jumps over them at once; an arrival in the middle is admitted at the next
step boundary, ``t0 + j·(a + b·n)``. Nothing is random in the engine itself: with the same lengths
it gives the same times, bitwise.

Lengths: with ``length_median`` set, each sequence's response length is drawn from the system's
timing stream, ``round(median · exp(σ z))`` cut to ``[1, max_tokens]`` (a timing-only run; log-normal
lengths as in ``docs/theory.md#t6``); otherwise the workload's own lengths (the group's ``lengths``
when the payload has one per sequence, else every sequence ``decode_steps`` long). Structure
(docs/system.md#structured-lengths; every knob off by default, and then the draws are exactly the
plain model's):

* ``prompts = P``: a dataset of P prompts; job ``j`` (one group) answers prompt ``order_e[j mod P]`` of
  epoch ``e = ⌊j / P⌋`` (``order_e`` a permutation drawn from ``numpy.random.default_rng([prompt_seed,
  e])``, a data loader's shuffle), and prompt ``i`` has its own median ``median · exp(prompt_sigma ·
  z_i)``, ``z_i`` from ``default_rng([prompt_seed, 2³²])``: fixed for the whole run, whatever the run
  seed, so a prompt's lengths persist across epochs (within a prompt ``σ = length_sigma``; over
  prompts the log length has variance ``prompt_sigma² + length_sigma²``);
* ``length_trend = g``: the median of a group generated with weight version ``v`` is multiplied by
  ``1 + g·v`` (responses growing during training, as in DeepSeek-R1's RL runs, arXiv 2501.12948
  figure 3, where the mean length grows about linearly with the steps);
* ``tail_alpha = α``: each length is multiplied by a Pareto factor ``u^(−1/α) / 2^(1/α)`` (``u``
  uniform on (0, 1]; median 1, so the median length is kept) for a power-law right tail
  ``P(L > x) ∝ x^(−α)`` beyond the log-normal's, cut by ``max_tokens``.

Out of the engine (``sample``/``expected``, e.g. budgets and plans): the time of one sequence alone
on an idle engine, ``prefill_per_token · prompt_tokens + tokens · (a + b)``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from functools import lru_cache
from heapq import heappop, heappush
from typing import Any, ClassVar, Literal

import numpy as np
import simpy
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandbox.system.delays.base import DELAYS, Delay
from sandbox.system.hardware import (
    GPUS,
    MODELS,
    decode_step_costs,
    mean_context,
    prefill_seconds_per_token,
    sync_seconds,
)

SYNC_MODES = ("drain", "abort", "partial")

_BITS = 40
_MASK = (1 << _BITS) - 1
"""A sequence in flight is on the engine's end heap as one int, ``end · 2^40 + admission number``: the pair
``(end, number)`` in the same order (numbers stay below 2^40), cheaper to compare than a tuple."""


class EngineHardware(BaseModel):
    """Derives an engine's ``step_base``, ``step_per_sequence``, ``prefill_per_token`` and ``sync_time``
    from the hardware table (``sandbox.system.hardware``; docs/system.md#hardware) where they are not
    given: the one timing model of ``sandbox plan``, ``sandbox preflight`` and the published-speed-up
    claims."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    gpu: Literal[tuple(GPUS)] = Field("H100", description=f"Accelerator ({', '.join(GPUS)}).")  # type: ignore[valid-type]
    model: Literal[tuple(MODELS)] = Field("qwen2.5-7b", description=f"Model ({', '.join(MODELS)}).")  # type: ignore[valid-type]
    gpus: int = Field(1, ge=1, description="GPUs per engine (tensor parallel): their bandwidths add up.")
    context_tokens: float | None = Field(
        None,
        gt=0,
        description="Mean cached tokens per sequence in flight (sizes b); None = from the length model "
        "(prompt_tokens + E[L'^2] / 2E[L'], sandbox.system.hardware.mean_context), or 1000 without one (an assumption).",
    )


DEFAULT_CONTEXT_TOKENS = 1000.0
"""Mean cached tokens per sequence of an engine without a length model: an assumption."""


def engine_context(data: dict) -> float:
    """The mean context of an engine's raw fields: :func:`sandbox.system.hardware.mean_context` of its
    length model (``length_median``, ``length_sigma``, ``max_tokens``, ``prompt_tokens``), or
    :data:`DEFAULT_CONTEXT_TOKENS` plus the prompt without a length model."""
    prompt = float(data.get("prompt_tokens") or 0)
    median = data.get("length_median")
    if median is None:
        return DEFAULT_CONTEXT_TOKENS + prompt
    cut = data.get("max_tokens")
    return mean_context(float(median), float(data.get("length_sigma") or 0.0), float(cut) if cut else math.inf, prompt)


class ContinuousBatchingDelay(Delay):
    """An inference engine with continuous batching: a decode step costs ``a + b·n`` for ``n``
    sequences in flight, capped by the KV cache; weight syncs drain, abort or keep in-flight work
    (docs/system.md#continuous_batching)."""

    kind: Literal["continuous_batching"] = "continuous_batching"
    step_base: float = Field(
        0.01, ge=0, description="a: seconds of a decode step independent of the batch (weights read)."
    )
    step_per_sequence: float = Field(
        0.0001, ge=0, description="b: extra seconds of a decode step per sequence in flight (KV read)."
    )
    step_floor: float = Field(
        0.0,
        ge=0,
        description="f: least seconds of a decode step, max(f, a + b·n) (host-side launch overhead, e.g. an engine "
        "without CUDA graphs); 0 = none.",
    )
    prefill_per_token: float = Field(0.0, ge=0, description="Seconds of prefill per prompt token.")
    prompt_tokens: int = Field(0, ge=0, description="Prompt tokens per sequence (prefill and KV reservation).")
    max_sequences: int | None = Field(
        None, ge=1, description="Most sequences in flight per engine (vLLM max_num_seqs); None = no cap."
    )
    kv_capacity_tokens: int | None = Field(
        None,
        ge=1,
        description="KV-cache capacity per engine in tokens; each sequence reserves prompt_tokens + its length. None = unlimited.",
    )
    workers_per_engine: int = Field(1, ge=1, description="Rollout workers (groups in flight) sharing one engine.")
    sync: Literal["drain", "abort", "partial"] = Field(
        "drain",
        description="On a newer weight version: drain (finish in-flight under old weights), abort (regenerate), partial (resume).",
    )
    sync_time: float = Field(0.0, ge=0, description="Seconds the engine pauses to load new weights.")
    length_median: float | None = Field(
        None,
        gt=0,
        description="Median response length in tokens of the length model (timing-only runs); None = the workload's lengths.",
    )
    length_sigma: float = Field(
        0.0, ge=0, description="σ of log response length of the length model (0 = every response the median)."
    )
    max_tokens: int | None = Field(None, ge=1, description="Longest response of the length model, tokens (the cut).")
    prompts: int | None = Field(
        None,
        ge=1,
        description="Prompts of the length model's dataset, each with its own median that persists across epochs; None = no prompts.",
    )
    prompt_sigma: float = Field(0.0, ge=0, description="σ of log median over the prompts (with prompts set).")
    prompt_seed: int = Field(
        0, ge=0, description="Seed of the prompts' medians and of each epoch's order (fixed across run seeds)."
    )
    length_trend: float = Field(
        0.0, ge=0, description="Growth of the median per weight version: median · (1 + length_trend · version)."
    )
    tail_alpha: float | None = Field(
        None,
        gt=0,
        description="Pareto shape α of a power-law factor on each length (median kept); None = no extra tail.",
    )

    mixed_versions: bool = Field(
        False,
        description="With sync = 'partial' (LM task, one replica): sequences in flight at a sync continue their "
        "remaining tokens under the new weights, each token stamped with the version that sampled it; off: the "
        "tokens stay those of the admitted version (timing only).",
    )

    hardware: EngineHardware | None = Field(
        None, description="Derive step_base, step_per_sequence and sync_time (those not set) from a GPU and a model."
    )

    engine_model: ClassVar[bool] = True
    """The cluster runs generation on :class:`Engine` processes instead of drawing a duration."""

    @model_validator(mode="before")
    @classmethod
    def _from_hardware(cls, data):
        if isinstance(data, dict) and data.get("hardware") is not None:
            hw = EngineHardware.model_validate(data["hardware"])
            context = hw.context_tokens if hw.context_tokens is not None else engine_context(data)
            a, b = decode_step_costs(hw.gpu, hw.model, hw.gpus, context)
            derived = {
                "step_base": a,
                "step_per_sequence": b,
                "sync_time": sync_seconds(hw.gpu, hw.model),
                "prefill_per_token": prefill_seconds_per_token(hw.gpu, hw.model, hw.gpus),
            }
            data = {**derived, **data}
        return data

    @model_validator(mode="after")
    def _fits(self):
        shaped = [name for name in ("prompts", "tail_alpha") if getattr(self, name) is not None]
        shaped += [name for name in ("prompt_sigma", "length_trend") if getattr(self, name) > 0]
        if self.length_median is None and (self.length_sigma > 0 or self.max_tokens is not None or shaped):
            raise ValueError(
                "length_sigma, max_tokens, prompts, prompt_sigma, length_trend and tail_alpha shape the "
                "length model: set length_median too"
            )
        if self.mixed_versions:
            if self.sync != "partial":
                raise ValueError(
                    f"mixed_versions: resumes sequences under new weights, which needs sync = 'partial' "
                    f"(got sync = '{self.sync}')"
                )
            if self.length_median is not None:
                raise ValueError(
                    "mixed_versions: the resumed sequences' lengths are the workload's, so leave "
                    "length_median unset (the length model is for timing-only runs)"
                )
            if self.kv_capacity_tokens is not None:
                raise ValueError(
                    "mixed_versions: a resumed sequence's length changes at the sync, so its KV reservation "
                    "(prompt_tokens + length) is not known at admission; leave kv_capacity_tokens unset"
                )
        if self.prompt_sigma > 0 and self.prompts is None:
            raise ValueError("prompt_sigma: the prompts' medians need prompts (the dataset size) set")
        if self.kv_capacity_tokens is not None:
            longest = self.max_tokens if self.max_tokens is not None else None
            if self.prompt_tokens + 1 > self.kv_capacity_tokens or (
                longest is not None and self.prompt_tokens + longest > self.kv_capacity_tokens
            ):
                need = self.prompt_tokens + (longest or 1)
                raise ValueError(
                    f"kv_capacity_tokens = {self.kv_capacity_tokens} cannot hold one sequence "
                    f"(prompt_tokens + max_tokens = {need}): raise it or shorten the sequences"
                )
        return self

    def _mean_for_check(self) -> float:
        return max(self.prefill_per_token * self.prompt_tokens + self.step_cost(1), 1.0)

    def sample(self, rng, tokens=0):
        return self.expected(tokens)

    def expected(self, tokens=0.0):
        return self.prefill_per_token * self.prompt_tokens + tokens * self.step_cost(1)

    def step_cost(self, n: int) -> float:
        """``max(f, a + b·n)``: one decode step with ``n`` sequences in flight."""
        cost = self.step_base + self.step_per_sequence * n
        return cost if cost >= self.step_floor else self.step_floor

    def prompt_of(self, job_id: int) -> int:
        """The prompt job ``job_id`` answers: ``order_e[job_id mod P]`` of epoch ``e = ⌊job_id / P⌋``."""
        P = self.prompts
        return int(_epoch_order(self.prompt_seed, job_id // P, P)[job_id % P])

    def median_for(self, job_id: int = 0, version: int = 0) -> float:
        """The median length of a group (module docstring, Lengths): the prompt's median times the trend."""
        median = self.length_median
        if self.prompts is not None and self.prompt_sigma > 0:
            median *= math.exp(
                self.prompt_sigma * float(_prompt_z(self.prompt_seed, self.prompts)[self.prompt_of(job_id)])
            )
        if self.length_trend > 0:
            median *= 1.0 + self.length_trend * version
        return median

    def lengths(
        self, rng: np.random.Generator, payload: Any, group_size: int, job_id: int = 0, version: int = 0
    ) -> list[int]:
        """The response length of each sequence of a group (module docstring, Lengths)."""
        if self.length_median is not None and self.tail_alpha is None:
            # the expression below without the tail, its last steps on Python floats: the same IEEE products, and
            # rounding half to even (round, np.rint) commutes with the cut to [1, max_tokens] (integers): the same
            # lengths, without four array operations per group
            sigma, cut = self.length_sigma, self.max_tokens if self.max_tokens is not None else math.inf
            median = self.median_for(job_id, version)
            scales = np.exp(sigma * rng.standard_normal(group_size)).tolist() if sigma > 0 else [1.0] * group_size
            return [round(1.0 if v < 1.0 else cut if v > cut else v) for v in [median * s for s in scales]]
        if self.length_median is not None:
            z = rng.standard_normal(group_size) if self.length_sigma > 0 else np.zeros(group_size)
            if self.tail_alpha is not None:
                u = 1.0 - rng.random(group_size)  # (0, 1]
                tail = u ** (-1.0 / self.tail_alpha) / 2.0 ** (1.0 / self.tail_alpha)
            else:
                tail = 1.0
            out = np.rint(self.median_for(job_id, version) * np.exp(self.length_sigma * z) * tail)
            # np.clip(out, 1, cut), as its two ufuncs (np.clip's dispatch costs more than they do)
            out = np.minimum(np.maximum(out, 1), self.max_tokens if self.max_tokens is not None else np.inf)
            return [int(v) for v in out.tolist()]
        own = getattr(payload, "lengths", None)
        if own is not None and hasattr(own, "reshape"):
            flat = [int(v) for v in np.asarray(own.reshape(-1).tolist() if hasattr(own, "tolist") else own)]
            if len(flat) == group_size:
                return flat
        return [int(payload.decode_steps)] * group_size

    def build_engines(
        self, env: simpy.Environment, num_workers: int, resample: Callable, resume: Callable | None = None
    ) -> list[Engine]:
        """One :class:`Engine` per ``workers_per_engine`` workers (the last may have fewer)."""
        count = -(-num_workers // self.workers_per_engine)
        return [Engine(env, self, i, resample, resume) for i in range(count)]


@lru_cache(maxsize=64)
def _epoch_order(seed: int, epoch: int, prompts: int) -> np.ndarray:
    """The order of the prompts in ``epoch``: a permutation from ``default_rng([seed, epoch])``."""
    return np.random.default_rng([seed, epoch]).permutation(prompts)


@lru_cache(maxsize=16)
def _prompt_z(seed: int, prompts: int) -> np.ndarray:
    """Each prompt's standard-normal ``z_i`` of its log median, from ``default_rng([seed, 1 << 32])``."""
    return np.random.default_rng([seed, 1 << 32]).standard_normal(prompts)


class Request:
    """A group in an engine: its sequences' lengths, the version it is generated with, and the
    event its worker waits for."""

    __slots__ = ("job", "lengths", "version", "done", "weights", "left", "next_seq")

    def __init__(self, job: Any, lengths: list[int], version: int, done: simpy.Event, weights: Any = None):
        self.job, self.lengths, self.version, self.done, self.weights = job, lengths, version, done, weights
        self.left = len(lengths)  # sequences not yet ended
        self.next_seq = 0  # the first sequence not yet admitted


class Engine:
    """One inference engine (module docstring): a simpy process stepping its batch.

    ``resample(job, version, weights)`` is the cluster's hook for ``sync = "abort"``: it regenerates an
    aborted group's payload with ``weights`` of ``version`` and returns its new sequence lengths.
    ``resume(job, version, weights, positions)`` is its hook for ``mixed_versions``: it cuts the group's
    sequences at ``positions`` (tokens decoded so far), continues them with ``weights`` of ``version`` and
    returns their new lengths."""

    def __init__(
        self,
        env: simpy.Environment,
        cfg: ContinuousBatchingDelay,
        index: int,
        resample: Callable,
        resume: Callable | None = None,
    ):
        self.env, self.cfg, self.index, self.resample, self.resume = env, cfg, index, resample, resume
        self.version = 0
        self.waiting: deque[Request] = deque()
        self.running: dict[int, list] = {}  # admission number -> [request, end, KV reserved, sequence index]
        self.decoded = 0  # decode steps taken so far: a sequence in flight has ``end - decoded`` tokens left
        self._ends: list[
            int
        ] = []  # min-heap of (end, admission number) as ``end << _BITS | number``, stale entries skipped
        self._admitted = 0  # admissions so far (the next admission number)
        self.kv_used = 0
        self.syncs = 0
        self.steps = 0
        self.busy = 0.0  # seconds spent in decode or prefill steps
        self._wake = env.event()
        self.process = env.process(self._run())  # simpy's Process; the heap loop's process number

    def misfit(self, lengths: list[int]) -> str | None:
        """Why a group can never run on this engine (a sequence larger than the KV cache), or None."""
        cfg = self.cfg
        longest = max(lengths, default=0)
        if cfg.kv_capacity_tokens is not None and cfg.prompt_tokens + longest > cfg.kv_capacity_tokens:
            return (
                f"system.generation_time.kv_capacity_tokens: a sequence of {longest} tokens plus prompt_tokens = "
                f"{cfg.prompt_tokens} does not fit the KV cache ({cfg.kv_capacity_tokens} tokens): it could never run"
            )
        return None

    def submit(self, job: Any, lengths: list[int], version: int, weights: Any = None) -> simpy.Event:
        """Queue a group generated with ``weights`` of ``version``; the returned event fires when its last
        sequence ends (check :meth:`misfit` first)."""
        done = self.env.event()
        self.waiting.append(Request(job, list(lengths), version, done, weights))
        if not self._wake.triggered:
            self._wake.succeed()
        return done

    # -- the process ------------------------------------------------------------------------------
    def _admit(self) -> int:
        """Admit waiting sequences in order while they fit; returns how many were admitted."""
        cfg, waiting, running, ends = self.cfg, self.waiting, self.running, self._ends
        most, capacity, prompt = cfg.max_sequences, cfg.kv_capacity_tokens, cfg.prompt_tokens
        admitted = 0
        while waiting:
            req = waiting[0]
            if req.version > self.version:
                break  # needs a sync first
            if most is not None and len(running) >= most:
                break
            length = req.lengths[req.next_seq]
            kv = prompt + length
            if capacity is not None and self.kv_used + kv > capacity:
                break
            self.kv_used += kv
            req.next_seq += 1
            end = self.decoded + (
                length if length > 0 else 0
            )  # an empty response ends at admission (after its prefill)
            number = self._admitted
            self._admitted += 1
            running[number] = [req, end, kv, req.next_seq - 1]
            heappush(ends, (end << _BITS) | number)
            admitted += 1
            if req.next_seq == len(req.lengths):
                waiting.popleft()
        return admitted

    def _least_left(self) -> int:
        """The fewest tokens any sequence in flight has left (the top of the end heap, stale entries dropped:
        a sequence that left the batch or whose end changed at a sync)."""
        ends, running = self._ends, self.running
        while True:
            key = ends[0]
            entry = running.get(key & _MASK)
            if entry is not None and entry[1] == key >> _BITS:
                return entry[1] - self.decoded
            heappop(ends)

    def _finish_ended(self) -> None:
        """Every sequence with no token left leaves the batch, in admission order; a group whose last
        sequence ended wakes its worker."""
        ends, running, decoded = self._ends, self.running, self.decoded
        limit = (decoded + 1) << _BITS  # the keys of the sequences that end by ``decoded``
        ended = []
        while ends and ends[0] < limit:
            key = heappop(ends)
            number = key & _MASK
            entry = running.get(number)
            if entry is not None and entry[1] == key >> _BITS:
                ended.append(number)
        if len(ended) > 1:  # in admission order; a sequence re-timed at a sync to the same end has two entries
            ended = sorted(set(ended))
        for number in ended:
            entry = running.pop(number)
            self.kv_used -= entry[2]
            req = entry[0]
            req.left -= 1
            if req.left == 0:
                req.done.succeed()

    def _rearm(self) -> None:
        if self._wake.triggered:
            self._wake = self.env.event()

    def _sync_needed(self) -> bool:
        return bool(self.waiting) and self.waiting[0].version > self.version

    def _do_sync(self):
        """Sync to the version the next waiting group was admitted with (mode: module docstring)."""
        cfg, head = self.cfg, self.waiting[0]
        target, weights = head.version, head.weights
        if cfg.sync == "abort" and self.running:
            aborted: list[Request] = []
            for req, _, kv, _ in self.running.values():
                self.kv_used -= kv
                if req not in aborted:
                    aborted.append(req)
            self.running.clear()
            self._ends.clear()
            for req in reversed(aborted):  # regenerated first, in their order, under the new version
                # sequences of the group still waiting for admission leave the queue too
                if req in self.waiting:
                    self.waiting.remove(req)
                lengths = self.resample(req.job, target, weights)
                self.waiting.appendleft(Request(req.job, lengths, target, req.done, weights))
        if cfg.sync_time > 0:
            yield self.env.timeout(cfg.sync_time)
        self.version = target
        self.syncs += 1
        if cfg.sync == "partial" and cfg.mixed_versions and self.resume is not None:
            self._resume_older(target, weights)
        elif cfg.sync == "partial":
            for entry in self.running.values():
                job = entry[0].job
                if job.tail_version < target:
                    job.tail_version = target
                    job.segments += 1

    def _resume_older(self, target: int, weights: Any) -> None:
        """``mixed_versions``: every group of a version older than ``target`` in the engine, in flight first
        (in admission order) then queued, is cut at the tokens each sequence has decoded and continued under
        ``weights`` (module docstring); the sequences keep their place with their new remaining steps."""
        reqs: list[Request] = []
        for entry in self.running.values():
            if entry[0] not in reqs:
                reqs.append(entry[0])
        reqs += [req for req in self.waiting if req not in reqs]
        decoded = self.decoded
        for req in reqs:
            if req.version >= target:
                continue
            entries = {entry[3]: (number, entry) for number, entry in self.running.items() if entry[0] is req}
            positions = []
            for i, length in enumerate(req.lengths):
                if i >= req.next_seq:
                    positions.append(0)  # not admitted yet: all its tokens under the new weights
                elif i in entries:
                    positions.append(length - (entries[i][1][1] - decoded))
                else:
                    positions.append(length)  # ended: kept whole
            lengths = [int(v) for v in self.resume(req.job, target, weights, positions)]
            for i, (number, entry) in entries.items():
                entry[1] = decoded + lengths[i] - positions[i]
                heappush(self._ends, (entry[1] << _BITS) | number)
                kv = self.cfg.prompt_tokens + lengths[i]
                self.kv_used += kv - entry[2]
                entry[2] = kv
            req.lengths, req.version, req.weights = lengths, target, weights

    def _run(self):
        env, cfg, waiting = self.env, self.cfg, self.waiting
        drain = cfg.sync == "drain"
        # the model's own methods, bound once: a fast path never inlines a copy of them (a subclass, or a
        # planted bug in tests/checks, changes what every engine runs)
        step_cost, sync_needed = cfg.step_cost, self._sync_needed
        prefill_each = cfg.prefill_per_token * cfg.prompt_tokens
        while True:
            sync = sync_needed()
            if sync and (not drain or not self.running):
                yield from self._do_sync()
                continue
            admitted = self._admit() if waiting and not sync else 0
            running = self.running
            if not running:
                self._rearm()
                yield self._wake
                continue
            prefill = prefill_each * admitted
            cost = step_cost(len(running))
            k = self._least_left()
            start = env.now + prefill
            self._rearm()
            if k <= 0:  # only sequences that end at their prefill
                if prefill > 0:
                    yield env.timeout(prefill)
                    self.busy += prefill
                self._finish_ended()
                continue
            finish = env.timeout(prefill + k * cost)
            yield finish | self._wake
            if finish.processed or cost <= 0:  # zero-cost steps: all k end at the prefill's end
                j = k
                if not finish.processed:
                    yield finish
            else:  # an arrival: go on to the next step boundary, then re-plan
                t = env.now
                j = 0 if t <= start else min(k, math.ceil((t - start) / cost))
                if j > 0 and start + (j - 1) * cost >= t:
                    j -= 1
                target = start + j * cost
                if target > env.now:
                    yield env.timeout(target - env.now)
            self.busy += prefill + j * cost
            self.steps += j
            self.decoded += j  # every sequence in flight decoded j tokens
            self._finish_ended()


DELAYS.register(ContinuousBatchingDelay, ContinuousBatchingDelay)
