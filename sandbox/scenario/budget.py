"""The memory and the time a scenario needs, estimated from its fields before anything is allocated.

:func:`run_scenario <sandbox.run.runner.run_scenario>` calls :func:`check_budget` first and refuses a
scenario whose estimated peak memory exceeds the memory available (:class:`BudgetError`: the
estimate, the available memory and the fields that drive the estimate); ``force=True`` (``sandbox
run --force``, ``sandbox sweep --force``) skips the refusal. ``sandbox run`` also prints a warning
when the estimated wall time of its runs exceeds :data:`WARN_SECONDS`; ``sandbox sweep`` checks
every run, and the largest ones together when they run in parallel, before writing anything.

Memory is the growth of the running process, summed over parts that can be alive together:

* **rollouts alive**: the simulator releases a group's rollouts once the learner has trained on
  them or the control dropped them (:mod:`sandbox.system.cluster`), so the groups in memory at
  once are the batch being trained (``B``) plus those the staleness control lets run ahead, queued
  or generating (``B`` for ``sync``, ``(k + 1)·B`` for ``fixed_lag`` and throttled ``max_lag``,
  the queue capacity for ``max_lag`` with ``enforcement = "drop"``, ``(ceil(alpha) + 1)·B`` for
  ``async_ratio``: what each control declares, ``ControlConfig.ahead_groups``; a control declaring
  nothing is charged one group per worker plus a batch, and the estimate says so), whatever
  ``run.steps``, and never more than the schedule can produce: ``W``
  in flight, ``B`` queued and twice the expected excess of generation over consumption over the
  run (:func:`_producible_ahead`; ``async_ratio`` ``α = 1e6`` was charged 171.8 GiB for a run that
  grew 105 MiB, now 136 MiB; a learner-bound run whose queue grows to ~3,000 groups: 366 MiB
  estimated for 185 MiB measured). A group holds ``replicas x group_size`` responses of
  ``T`` token slots (``T`` = the bit-string horizon, 1 for the bandit, the LM's response budget,
  the gym step limit) of :data:`TOKEN_BYTES` each, plus the prompt or observations per response;
  the oracle's holds ``dim`` float64 entries. The job records themselves stay (per-step records).
  When a group's tensors fall in glibc's heap-served range the freed rollouts stay resident anyway
  and are counted as before, for every group of the run (:func:`_allocator_keeps_freed`).
* **learner step**: the batch is concatenated and differentiated at once: :data:`LEARN_BYTES` per
  token slot of the batch, plus the activations of the LM and gym networks; one group being
  generated (:data:`GEN_BYTES` per token slot, plus the LM's KV cache).
* **weights**: :data:`WEIGHT_COPIES` copies of the parameters plus one snapshot per version the
  weight store keeps (``k + 2`` for ``fixed_lag``, 2 otherwise); VCPO's OPOB baseline adds one
  gradient per trajectory. For the gradient oracle, the freed copies the allocator keeps
  (:func:`_fragmentation_copies`).
* **records**: per step, the metrics row, the per-replica arrays and the event log.
* **workers** (:data:`WORKER_BYTES` each) and the **runtime** the first run of a process loads
  (lazy imports, torch's first allocations, the task's data).

The task's sizes (token slots per response, parameters, cost model) are what the task declares
(``Task.budget_shape``); a task declaring nothing is built and measured, and its terms say
"unknown: estimated conservatively". No part of the estimate asks for a component by name.

Time is ``steps x per-step work`` with the ``*_S`` constants below, measured on the development
machine (2 shared cores, one torch thread): a fixed cost per step, a cost per token slot generated
and trained on, a cost per worker wake-up (every idle worker wakes at each of the
``groups_per_step + 3`` signals of a step, which is what makes a million workers slow), the copies
of the weights, for the LM a cost per forward call and layer plus its floating-point work, for gym
a cost per environment step. The warm start of the LM task (trained once, then cached) is not
counted.

Calibration: peak RSS growth of a fresh process (``VmHWM`` after ``clear_refs``) and wall time,
against the estimate (estimate / measured):

=================================================  ===========  ==========
runs                                               memory       time
=================================================  ===========  ==========
shipped scenarios (first variant of each)          1.1x-1.9x    0.4x-2.7x
bit-string, 1000 and 10000 replicas                1.3x-1.5x    1.0x-1.5x
bit-string, horizon 1024-4096 x group 64-512       1.4x-1.7x    0.9x-3.2x
quadratic oracle, dim 2,000-200,000                1.1x-2.4x    0.9x-1.5x
quadratic oracle, 500 replicas x 2500 steps        2.6x         2.6x
LM, d_model 512 x 8 layers (25M parameters)        1.3x         1.1x-1.4x
gym (CartPole, FrozenLake 8x8)                     1.2x-1.8x    1.7x-2.4x
=================================================  ===========  ==========

So the memory estimate is an upper bound within 1x-3x of the measured peak (looser for controls
that drop groups; the table was measured while the simulator kept every group's rollouts: now that it
frees them, the bit-string rows with large groups measure up to 4.6x, since glibc keeps only part
of the freed blocks resident, see :func:`_allocator_keeps_freed`), and the time estimate is within about 0.5x-3x on this machine (the low end is
the machine being busy; other machines differ by their speed).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.base.errors import ScenarioError

if TYPE_CHECKING:
    from sandbox.scenario.api import Scenario

KiB, MiB, GiB = 2**10, 2**20, 2**30

# -- memory constants (bytes) ----------------------------------------------------------------------
TOKEN_BYTES = 32
"""Kept per token slot: 20 B of data (int64 token, float32 behaviour log-prob, int64 version) and the
allocator's overhead between kept and freed tensors (measured 26 B per slot over a long run)."""
RESPONSE_BYTES = 16
"""Kept per response: int64 length, bool ended, float32 reward."""
GROUP_BYTES = 6 * KiB
"""Kept per group besides its data: the job record and the tensors' headers (measured 5 KiB)."""
LEARN_BYTES = 200
"""Transient per token slot of a learner batch (measured 140-190 B on the bit-string task)."""
GEN_BYTES = 80
"""Transient per token slot of the group being generated (random draws, copies, masks)."""
WEIGHT_COPIES = 16
"""Copies of the parameters besides the stored versions: master, gradient, two Adam moments, the
learner's pre-step copy, update, flat gradient, previous gradient, clipping and norms, the step's
snapshot, the task's module and its initial state (a 25M-parameter LM peaked at 1.7 GiB: about 15)."""
STEP_BYTES = 48 * KiB
"""Kept per learner step: metrics row, job records, event log (measured 30-55 KiB)."""
REPLICA_METRIC_BYTES = 16
"""Kept per replica, step and per-replica metric: float64, twice (the rows and the stacked arrays).
The policy tasks record 30-37 such metrics (:data:`REPLICA_METRICS`), the oracle 16."""
REPLICA_METRICS = {"policy": 40, "oracle": 16}
WORKER_BYTES = 2 * KiB
"""Per simulated worker: its simpy process (measured about 0.9 KiB)."""
ENV_BYTES = 64 * KiB
"""Per gymnasium environment in the task's pool (one per response of a group)."""
RUNTIME_BYTES = {"toy": 128 * MiB, "oracle": 128 * MiB, "environment": 160 * MiB, "transformer": 256 * MiB}
"""What the first run of a process loads (lazy imports, torch's first allocations, the task's
data; measured 92 MiB for the toy tasks, about 150 MiB for the LM)."""

# -- time constants (seconds, on the development machine) -----------------------------------------
START_S = 2.0
"""Lazy imports and building the task."""
STEP_S = 10e-3
"""Fixed cost of one learner step (metrics, optimizer, bookkeeping; measured 5-14 ms)."""
ORACLE_STEP_S = 4e-3
"""The same for the gradient oracle, which has no policy loss (measured 2-5 ms)."""
TOKEN_S = 0.5e-6
"""Per token slot generated and trained on (measured 0.45-0.5 us on the bit-string task)."""
WAKE_S = 4e-6
"""Per wake-up of a waiting worker (measured 3-4 us)."""
LM_CALL_S = 0.5e-3
"""Per LM forward call (sampling, masks, Python), plus :data:`LM_LAYER_S` per layer (measured
1.5 ms per decode position with 2 layers)."""
LM_LAYER_S = 0.5e-3
LM_STEP_S = 25e-3
"""Per LM learner step besides its forward and backward (policy loss, optimizer, metrics; measured 36 ms
in all with 2 layers)."""
LM_SCORE_S = 100e-6
"""Per response decoded to text and scored (rewards, evaluation)."""
LM_FLOPS = 20e9
"""Floating-point operations per second of the LM's matrix products on one thread (matmul peak
measured 50 GFLOP/s)."""
ENV_STEP_S = 150e-6
"""Per gymnasium step (the environment, the observation encoding, the policy's share). Every
CartPole episode is charged the step limit (an upper bound), a FrozenLake one twice the number of
states (episodes end at a hole or the goal)."""
COPY_S_PER_BYTE = 1e-9
"""Per byte of the weight copies of a learner step (copies and fresh pages; measured 1.2 ns)."""

SCHEDULE_BYTES = 64
"""Per group of a recorded schedule under ``run.schedules = "independent"`` (two operations and
four job arrays, ``sandbox/system/schedule.py``)."""
SCHEDULE_S = 35e-6
"""Per group of a replica's schedule simulated before the replay (measured 35 us on the bandit, 4 workers)."""
REPLAY_S = 20e-6
"""Per replica and group of the replay: the replica's own draws (one small torch call each) and its
share of the wave's bookkeeping (measured 17-27 us on the bandit)."""

WARN_SECONDS = 600.0
"""``sandbox run`` warns when the estimated wall time exceeds this (10 minutes)."""


@dataclass(frozen=True)
class Term:
    """One part of an estimate: its size and the fields whose product drives it."""

    what: str
    amount: float  # bytes or seconds
    factors: tuple[tuple[str, float], ...] = ()
    unit: str = ""  # what one unit of the product is and costs, e.g. "token slots x 32 B"

    def formula(self) -> str:
        parts = [f"{k}={_num(v)}" for k, v in self.factors]
        product = " x ".join(parts) if len(parts) < 2 else f"({' x '.join(parts)})"
        return " ".join(p for p in (product, self.unit) if p)


@dataclass
class Budget:
    """Estimated peak memory growth (bytes) and wall time (seconds) of one run."""

    memory: float
    seconds: float
    memory_terms: list[Term] = field(default_factory=list)
    time_terms: list[Term] = field(default_factory=list)

    def main_memory(self) -> Term:
        return max(self.memory_terms, key=lambda t: t.amount)

    def main_time(self) -> Term:
        return max(self.time_terms, key=lambda t: t.amount)

    def describe_time(self) -> str:
        t = self.main_time()
        return f"about {format_seconds(self.seconds)} (mostly {t.what}: {t.formula()})"


class BudgetError(ScenarioError):
    """A scenario whose estimated memory exceeds the available memory."""

    def __init__(self, budget: Budget, available: float, flag: str = "force=True", label: str = ""):
        self.budget = budget
        self.available = available
        t = budget.main_memory()
        who = f"run '{label}'" if label else "this run"
        message = (
            f"{who} needs about {format_bytes(budget.memory)} of memory but {format_bytes(available)} is available "
            f"(mostly {t.what}: {t.formula()}); {'reduce these fields' if t.factors else 'free some memory'}, "
            f"or pass {flag} to run anyway"
        )
        self.problems = [message]
        self.source = "scenario"
        ValueError.__init__(self, message)


# -- shapes ----------------------------------------------------------------------------------------


@dataclass
class _Shape:
    kind: str  # the task's cost model: toy | environment | transformer | oracle
    T: int  # token slots per response (oracle: gradient entries per sample)
    T_field: str | None
    prompt_bytes: float  # per response
    params: int  # per replica
    param_bytes: int
    runtime: float
    act_per_slot: float = 0.0  # extra learner bytes per token slot (network activations)
    details: dict = field(default_factory=dict)
    exact_evaluation: bool = False
    note: str = ""


def _shape(task) -> _Shape:
    """The task's declared sizes (``Task.budget_shape``; a task declaring none is built and measured,
    or guessed, and its terms say so)."""
    from sandbox.tasks import (
        TASKS,
    )  # the task registry (every task module) loads when a scenario is estimated, not at import

    d = TASKS.entry_for(task).impl.budget_shape(task)
    runtime = RUNTIME_BYTES.get(d.model, max(RUNTIME_BYTES.values())) + d.data_bytes
    return _Shape(
        d.model,
        d.T,
        d.T_field,
        d.prompt_bytes,
        d.params,
        d.param_bytes,
        runtime,
        d.act_per_slot,
        dict(d.details),
        d.exact_evaluation,
        d.note,
    )


def _kept_versions(staleness) -> int:
    """Weight snapshots kept at once: the control's declaration (``ControlConfig.kept_versions``)."""
    return staleness.kept_versions()


def _ahead_groups(scn) -> tuple[float, str]:
    """Groups the staleness control lets run ahead of the learner, queued or in flight: the control's
    declaration (``ControlConfig.ahead_groups``; ``docs/system.md#staleness-controls``), capped by what
    the schedule can produce (:func:`_producible_ahead`)."""
    admitted, what = scn.system.staleness.ahead_groups(scn.algorithm.groups_per_step, scn.system.num_workers)
    cap = _producible_ahead(scn)
    if cap < admitted:
        return cap, f"{what}, as many as the workers can generate (AHEAD_MARGIN x the expected excess)"
    return admitted, what


AHEAD_MARGIN = 2.0
"""Safety factor on the expected excess of generation over consumption in :func:`_producible_ahead`
(the durations are random: a queue in a learner-bound run fluctuates around its mean growth)."""


def _producible_ahead(scn) -> float:
    """Groups that can be ahead of the learner (queued or generating) however permissive the
    control: ``W`` in flight and ``B`` queued, plus, when the workers generate faster than the learner
    consumes, ``AHEAD_MARGIN`` times the expected excess over the run, ``λ·D − batches·B`` (``λ`` =
    the workers' speeds / the mean generation time of a response of ``T`` tokens, ``D`` = batches x
    the mean learner step + weight sync). A control bound of a million batches (``async_ratio``
    ``α = 1e6``, which its description says never binds) is so capped at what the run can hold.
    Infinite when a mean duration is zero (the workers then fill whatever the control admits)."""
    system, alg, B = scn.system, scn.algorithm, scn.algorithm.groups_per_step
    W = system.num_workers
    try:
        T = _shape(scn.task).T
        gen = float(system.generation_time.expected(T))
        tokens = B * alg.group_size * T / max(alg.minibatches, 1)
        step = alg.minibatches * alg.epochs * float(system.train_time.expected(tokens * alg.epochs)) + float(
            system.sync_delay.expected()
        )
    except (ValueError, OverflowError, ZeroDivisionError, TypeError):
        return math.inf
    if not (gen > 0 and math.isfinite(gen) and math.isfinite(step)):
        return math.inf
    batches = _batches(scn)
    rate = sum(system.speeds()) / gen  # groups per simulated second
    excess = max(rate * batches * step - batches * B, 0.0)
    return float(W + B + math.ceil(AHEAD_MARGIN * excess))


def _batches(scn) -> int:
    """Batches the learner consumes: ``run.steps`` counts optimizer steps, and a batch takes
    ``algorithm.minibatches x epochs`` of them (docs/system.md#mini-batches)."""
    return math.ceil(scn.run.steps / (scn.algorithm.minibatches * scn.algorithm.epochs))


def _extra_groups(scn) -> float:
    """Groups generated besides the consumed ones (work, not memory): those run ahead when the run
    ends and, for the controls that drop over-stale groups, at most one queue's worth of dropped
    groups per consumed batch."""
    st, W = scn.system.staleness, scn.system.num_workers
    ahead, _ = _ahead_groups(scn)
    if st.drops_stale():
        return ahead + _batches(scn) * min(ahead, W)
    return ahead


# -- the estimate ----------------------------------------------------------------------------------


def estimate(scn: Scenario) -> Budget:
    """Memory and time of one run of ``scn`` (no tensor is allocated)."""
    task, alg, run, system = scn.task, scn.algorithm, scn.run, scn.system
    sh = _shape(task)
    R, G, B, W, steps, T = task.replicas, alg.group_size, alg.groups_per_step, system.num_workers, run.steps, sh.T
    fR = (("task.replicas", R),) if R > 1 else ()
    fT = ((sh.T_field, T),) if sh.T_field else ()
    ahead, ahead_what = _ahead_groups(scn)
    batches = _batches(scn)
    groups = batches * B + _extra_groups(scn)  # generated over the run
    opob = _needs_sequence_grads(alg.objective) and sh.kind != "oracle"

    mem: list[Term] = [Term("the runtime a first run loads", sh.runtime, (), format_bytes(sh.runtime))]
    if sh.kind == "oracle":
        per_group = R * G * T * 8 + R * 8 + GROUP_BYTES
        unit = "gradient entries x 8 B"
    else:
        per_group = R * G * (T * TOKEN_BYTES + RESPONSE_BYTES + sh.prompt_bytes) + GROUP_BYTES
        unit = f"token slots x {TOKEN_BYTES} B" + (" (+ observations)" if sh.kind == "environment" else "")
    note = f"; {sh.note}" if sh.note else ""
    mem.append(
        Term(
            f"rollouts alive at once (the batch being trained + {ahead_what}{note})",
            (B + ahead) * per_group,
            (("groups (algorithm.groups_per_step + ahead)", B + ahead), *fR, ("algorithm.group_size", G), *fT),
            unit,
        )
    )
    if _allocator_keeps_freed(R * G * T * 8):  # the largest tensor of a group: int64 tokens, float64 gradients
        mem.append(
            Term(
                "freed rollouts the allocator keeps (glibc, 128 KiB-32 MiB blocks)",
                max(groups - B - ahead, 0) * per_group,
                (
                    ("batches (run.steps / minibatches x epochs)", batches),
                    ("algorithm.groups_per_step", B),
                    *fR,
                    ("algorithm.group_size", G),
                    *fT,
                ),
                unit,
            )
        )
    slots = B * R * G * T
    if sh.kind == "oracle":
        learn, gen = slots * 8 * 3, R * G * T * 8 * 3
    else:
        learn = slots * (LEARN_BYTES + sh.act_per_slot) + B * R * G * sh.prompt_bytes
        gen = R * G * T * GEN_BYTES
        if sh.kind == "transformer":
            lm = sh.details
            gen += (
                G * (lm["L"] * 2 * lm["seq"] * lm["d"] + lm["P"] * lm["V"] + lm["seq"] * lm["heads"] * lm["L"]) * 4 * 2
            )
    mem.append(
        Term(
            "one learner step and one generation",
            learn + gen,
            (("algorithm.groups_per_step", B), *fR, ("algorithm.group_size", G), *fT),
            f"token slots x {LEARN_BYTES} B" if sh.kind != "oracle" else "gradient entries x 8 B x 3",
        )
    )
    copies = WEIGHT_COPIES + _kept_versions(system.staleness)
    copy = R * sh.params * sh.param_bytes
    weights = copy * copies + (B * G * copy * 2 if opob else 0)
    wf: tuple = (*fR, ("parameters", sh.params))
    if opob:
        wf = (("algorithm.groups_per_step", B), ("algorithm.group_size", G), *wf)
    mem.append(
        Term(
            "weights, optimizer state and stored versions",
            weights,
            wf,
            f"entries x {sh.param_bytes} B x {copies} copies",
        )
    )
    leak = _fragmentation_copies(copy) * copy * steps if sh.kind == "oracle" else 0.0
    if leak:
        mem.append(
            Term(
                "freed weight-sized copies the allocator keeps (glibc, 128 KiB-32 MiB blocks)",
                leak,
                (("run.steps", steps), *fR, ("parameters", sh.params)),
                f"entries x {sh.param_bytes} B x up to {WEIGHT_COPIES}",
            )
        )
    independent = run.schedules == "independent"
    if independent:  # docs/system.md#independent-schedules
        ring = (_kept_versions(system.staleness) + 2) * copy
        mem.append(
            Term(
                "independent schedules: one recorded schedule per replica, groups in flight, the versions kept",
                R * groups * SCHEDULE_BYTES + R * W * G * T * TOKEN_BYTES + ring,
                (
                    *fR,
                    ("groups generated (batches x algorithm.groups_per_step + ahead)", groups),
                    ("system.num_workers", W),
                ),
                f"x {SCHEDULE_BYTES} B per group + in-flight token slots x {TOKEN_BYTES} B",
            )
        )
    per_replica = REPLICA_METRICS["oracle" if sh.kind == "oracle" else "policy"] * REPLICA_METRIC_BYTES
    mem.append(
        Term(
            "per-step records (metrics, per-replica arrays, events)",
            steps * (STEP_BYTES + R * per_replica),
            (("run.steps", steps), *fR),
            f"x {per_replica} B" if R > 1 else f"steps x {format_bytes(STEP_BYTES)}",
        )
    )
    envs = R * max(G, sh.details.get("eval_episodes", 0)) * ENV_BYTES if sh.kind == "environment" else 0
    workers = W * WORKER_BYTES + envs
    mem.append(Term("simulated workers", workers, (("system.num_workers", W),), f"x {format_bytes(WORKER_BYTES)} each"))

    secs: list[Term] = [Term("start-up", START_S)]
    step_s = ORACLE_STEP_S if sh.kind == "oracle" else STEP_S
    secs.append(Term("per-step overhead", steps * step_s, (("run.steps", steps),), f"steps x {step_s * 1e3:g} ms"))
    wakes = batches * W * (B + 3)
    secs.append(
        Term(
            "waking waiting workers",
            wakes * WAKE_S,
            (
                ("batches (run.steps / minibatches x epochs)", batches),
                ("system.num_workers", W),
                ("signals per batch (algorithm.groups_per_step + 3)", B + 3),
            ),
            f"wake-ups x {WAKE_S * 1e6:g} us",
        )
    )
    if independent:
        procs = max(min(run.processes, R), 1)
        secs.append(
            Term(
                "independent schedules: simulating the other replicas' schedules (over run.processes), drawing per replica",
                (R - 1) * groups * SCHEDULE_S / procs + R * groups * REPLAY_S,
                (
                    *fR,
                    ("groups generated (batches x algorithm.groups_per_step + ahead)", groups),
                    ("run.processes", procs),
                ),
                f"groups x ({SCHEDULE_S * 1e6:g} us per schedule / processes + {REPLAY_S * 1e6:g} us per replica)",
            )
        )
    secs.append(
        Term(
            "copying the weights",
            steps * copy * WEIGHT_COPIES * COPY_S_PER_BYTE,
            (("run.steps", steps), *fR, ("parameters", sh.params)),
            f"entries x {sh.param_bytes} B x {WEIGHT_COPIES} copies x {COPY_S_PER_BYTE * 1e9:g} ns per byte",
        )
    )
    work_f = (
        ("batches (run.steps / minibatches x epochs)", batches),
        ("algorithm.groups_per_step", B),
        *fR,
        ("algorithm.group_size", G),
        *fT,
    )
    evals = math.ceil(steps / run.eval_every)
    if sh.kind == "transformer":
        secs.append(
            Term(
                "LM generation, training and evaluation",
                _lm_seconds(scn, sh, groups),
                work_f,
                "forward calls and FLOPs",
            )
        )
    elif sh.kind == "environment":
        replay = 2 if system.partial_rollouts else 1
        L = sh.details.get("episode_len", T)  # e.g. lake episodes end at a hole or the goal
        env_steps = groups * R * G * L * replay + evals * R * sh.details.get("eval_episodes", 0) * L
        secs.append(Term("environment steps", env_steps * ENV_STEP_S, work_f, f"steps x {ENV_STEP_S * 1e6:g} us"))
    else:
        per_slot = TOKEN_S / 10 if sh.kind == "oracle" else TOKEN_S  # the oracle's work is one vectorised op
        secs.append(
            Term(
                f"generating and training on token slots{note}",
                groups * R * G * T * per_slot,
                work_f,
                f"token slots x {per_slot * 1e6:g} us",
            )
        )
        if sh.exact_evaluation:  # exact evaluation: H passes over (R, H) tensors (the bit-string task)
            secs.append(
                Term(
                    "exact evaluations",
                    evals * T * (20e-6 + R * T * 1e-9),
                    (("run.steps / run.eval_every", evals), *fT),
                )
            )
    return Budget(
        memory=float(sum(t.amount for t in mem)),
        seconds=float(sum(t.amount for t in secs)),
        memory_terms=mem,
        time_terms=secs,
    )


def _needs_sequence_grads(objective) -> bool:
    return (
        getattr(objective, "baseline", None) in ("opob", "optimal") or getattr(objective, "advantage", None) == "opob"
    )


def _allocator_keeps_freed(block: float) -> bool:
    """Whether the rollouts the simulator frees stay resident anyway: glibc serves blocks between
    its initial mmap threshold (128 KiB) and the threshold's ceiling (32 MiB) from the heap once a
    freed block has raised the threshold, and the small long-lived objects allocated afterwards
    (job records, metrics rows) land in the freed blocks, so the heap keeps growing. Measured
    (peak RSS growth, released vs kept): quadratic oracle with 640 KiB gradients, 371 vs 391 MiB
    after 400 steps; bit-string with 1 MiB token tensors, 397 vs 1828 MiB after 200 steps; bit-string
    with 64 KiB token tensors (below the threshold), 61 vs 235 MiB after 400 steps. Counted whole (an
    upper bound); ``malloc_trim`` returns it (31 MiB left in the first two cases), at a cost per step."""
    return 128 * KiB <= block <= 32 * MiB


def _fragmentation_copies(block: float) -> float:
    """Weight-sized copies per learner step that stay resident after being freed, for the gradient
    oracle, whose kept payload (one gradient per job) is itself weight-sized. glibc serves blocks
    between its initial mmap threshold (128 KiB) and the threshold's ceiling (32 MiB) from the heap
    once a freed block has raised the threshold, and the heap cannot shrink below the gradients kept
    in between: measured 1.2 copies per step at 0.6 MiB, 2.8 at 1.9 MiB, 4.6-9.3 at 6 MiB. The policy
    tasks, whose kept payloads are token tensors, showed no such growth (LM weights up to 100 MiB)."""
    if block < 128 * KiB or block > 32 * MiB:
        return 0.0
    return min(float(WEIGHT_COPIES), 2 * block / MiB)


def _lm_seconds(scn, sh: _Shape, groups: float) -> float:
    task, alg, run = scn.task, scn.algorithm, scn.run
    lm, T, G, B = sh.details, sh.T, alg.group_size, alg.groups_per_step
    flops_tok = 2 * sh.params + 2 * lm["L"] * lm["seq"] * lm["d"]
    call = LM_CALL_S + LM_LAYER_S * lm["L"]
    # generation: one prefill and T decode calls per group (partial rollouts re-encode: x2), rewards
    replay = 2 if scn.system.partial_rollouts else 1
    gen = groups * (replay * ((T + 1) * call + G * lm["seq"] * flops_tok / LM_FLOPS) + G * LM_SCORE_S)
    # training: forward + backward over each optimizer step's mini-batch of B / minibatches groups
    # (x3); per-trajectory gradients for OPOB (x4)
    opob = _needs_sequence_grads(alg.objective)
    per_step = B / alg.minibatches
    train_flops = 3 * per_step * G * lm["seq"] * flops_tok * (4 if opob else 1)
    train = run.steps * (LM_STEP_S + 3 * call + train_flops / LM_FLOPS + (per_step * G * call if opob else 0))
    # evaluation: greedy + sampled decodes of the held-out prompts every eval_every steps
    evals = math.ceil(run.steps / run.eval_every)
    decodes = 1 + task.eval_samples
    batches = math.ceil(task.eval_size / task.eval_batch) * decodes
    prompts = task.eval_size * decodes
    ev = evals * (batches * (T + 1) * call + prompts * (lm["seq"] * flops_tok / LM_FLOPS + LM_SCORE_S))
    return gen + train + ev


# -- available memory ------------------------------------------------------------------------------


def available_memory() -> int | None:
    """Bytes this process may still allocate: ``MemAvailable`` of ``/proc/meminfo`` (or the
    free physical pages), lowered to the room left under a cgroup memory limit; None if unknown."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = None
    room = _cgroup_room()
    if room is not None:
        avail = room if avail is None else min(avail, room)
    return avail


def _cgroup_room() -> int | None:
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),  # v1
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 2**60:
            return None
        return max(int(limit) - usage, 0)
    return None


# -- checks ----------------------------------------------------------------------------------------


def check_budget(
    scn: Scenario, force: bool = False, available: int | None = None, flag: str = "force=True", label: str = ""
) -> Budget:
    """The estimate of ``scn``; raises :class:`BudgetError` when it exceeds ``available`` (default:
    :func:`available_memory`) unless ``force``. ``flag`` names the override in the message."""
    budget = estimate(scn)
    if not force:
        avail = available_memory() if available is None else available
        if avail is not None and budget.memory > avail:
            raise BudgetError(budget, avail, flag, label)
    return budget


def check_parallel(
    budgets: dict[str, Budget], workers: int, available: int | None = None, flag: str = "--force"
) -> None:
    """Refuse runs that cannot fit one at a time, or ``workers`` at a time (the largest together)."""
    avail = available_memory() if available is None else available
    if avail is None or not budgets:
        return
    for label, b in budgets.items():
        if b.memory > avail:
            raise BudgetError(b, avail, flag, label)
    largest = sorted((b.memory for b in budgets.values()), reverse=True)[: max(workers, 1)]
    if sum(largest) > avail:
        fit, total = 0, 0.0
        for m in largest:
            if total + m > avail:
                break
            fit, total = fit + 1, total + m
        message = (
            f"{len(largest)} runs in parallel need about {format_bytes(sum(largest))} of memory but "
            f"{format_bytes(avail)} is available; pass --workers {max(fit, 1)} (or fewer), or {flag} to run anyway"
        )
        raise ScenarioError([message], "sweep")


# -- formatting ------------------------------------------------------------------------------------


def _num(v: float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def format_bytes(n: float) -> str:
    n = float(min(n, 1e300))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if unit == "B" else (f"{n:.1f} {unit}" if n < 10**6 else f"{n:.2g} {unit}")
        n /= 1024
    return f"{n:.3g} EiB"  # pragma: no cover


def format_seconds(s: float) -> str:
    s = float(min(s, 1e300))
    if s < 120:
        return f"{s:.0f} s"
    if s < 2 * 3600:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    if s < 2 * 365 * 86400:
        return f"{s / 86400:.0f} days"
    return f"{s / (365 * 86400):.3g} years"
