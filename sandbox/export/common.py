"""What every exporter shares: the scenario's leaves, the rows for fields that describe the
simulation or the user's own setup, the scale-dependent values, and the staleness bound in the
sandbox's canonical unit.

Canonical unit (``docs/promotion.md``): the sandbox publishes one weight version per optimizer step
and takes one optimizer step per consumed batch of ``groups_per_step × group_size`` responses. A
job's lag is the number of versions between the weights that generated it (its oldest token, with
partial rollouts) and the step that trains on it. Conversions to each framework's unit follow
:func:`versions_to_optimizer_steps` and :func:`versions_to_samples`.

Surrogate anchor: by default (``algorithm.proximal = "behaviour"``) the sandbox's learner has no
recomputed proximal policy, so every objective's ratio is ``r = π_θ/μ`` against the behaviour
(sampler) log-probabilities, "bypass mode" in verl's terms (``π_prox := μ``); corrections act on
``w = sg(π_θ)/μ``. ``"batch_start"`` recomputes ``π_prox`` once per batch (:func:`proximal_row`).

Mini-batches (``algorithm.minibatches`` = m, ``algorithm.epochs`` = E; docs/system.md#mini-batches):
a batch takes ``m·E`` optimizer steps and publishes one version, so the staleness bounds, which
count published versions, keep their values; each exporter maps m and E to its own keys or says
that it has none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..scenario import Scenario
from .base import Given, describe
from .mismatch import engine_row, exact_engine
from .plan import Plan

SKIP_TOP = ("title", "description", "variants")

# Two std guards ε (advantage = (R − mean)/(std + ε)) closer than this are both zero-division guards:
# the advantages differ by at most |Δε|/(std + ε) relative, below 1e-2 for any group whose reward std is
# at least 0.1 (a group of G <= 100 binary rewards that are not all equal has std >= 0.099). Exporters
# treat such a difference as the same behaviour and state the bound in the row.
STD_GUARD_TOLERANCE = 1e-3


def scenario_leaves(scn: Scenario) -> list[str]:
    """Dotted paths of every leaf of the resolved scenario (dicts flattened, lists of tables
    indexed as ``key[i].field``, other lists and empty lists are leaves). The exact rollout engine has
    none: it models no mismatch, so there is nothing to promote (:mod:`sandbox.export.mismatch`)."""
    data = scn.model_dump(mode="json", exclude=set(SKIP_TOP) | exact_engine(scn))
    out: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else k)
        elif isinstance(node, list) and node and all(isinstance(x, dict) for x in node):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")
        else:
            out.append(path)

    walk(data, "")
    return out


def value_at(scn: Scenario, dotted: str) -> Any:
    node: Any = scn.model_dump(mode="json")
    for part in dotted.replace("[", ".[").split("."):
        if part.startswith("["):
            node = node[int(part[1:-1])]
        else:
            node = node[part]
    return node


# ------------------------------------------------------------------------------------------------
# staleness in the canonical unit
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Staleness:
    """The scenario's staleness control, read in the canonical unit (versions = optimizer steps)."""

    kind: str  # sync | fixed_lag | max_lag | async_ratio
    bound: int  # maximum lag in versions (async_ratio: ceil(alpha); alpha is finite, validated at load)
    enforcement: str | None  # throttle (admission) | drop (at dequeue) | None
    alpha: float | None = None


def staleness_of(scn: Scenario) -> Staleness:
    s = scn.system.staleness
    if s.kind == "sync":
        return Staleness("sync", 0, None)
    if s.kind == "fixed_lag":
        return Staleness("fixed_lag", s.k, None)
    if s.kind == "max_lag":
        return Staleness("max_lag", s.k_max, s.enforcement)
    return Staleness("async_ratio", math.ceil(s.alpha), "drop", alpha=s.alpha)


def versions_to_optimizer_steps(k: int, steps_per_version: int = 1) -> int:
    """Lag in optimizer steps of a lag of ``k`` published versions (frameworks publish a version
    every ``steps_per_version`` optimizer steps)."""
    return k * steps_per_version


def versions_to_samples(k: int, steps_per_version: int, samples_per_step: int) -> int:
    """Lag in trained samples (PipelineRL's unit) of a lag of ``k`` versions."""
    return k * steps_per_version * samples_per_step


ANCHOR_WORDS = {
    "behaviour": "the rollout log-probs μ in every mini-batch (bypass mode)",
    "batch_start": "π_old recomputed once per batch with the weights at its start (decoupled mode)",
}


def proximal_row(plan: Plan, scn: Scenario, anchor: str, where: str) -> None:
    """The row of ``algorithm.proximal`` (docs/system.md#mini-batches) for a written config whose
    surrogate ratio is anchored at ``anchor`` (``"behaviour"`` or ``"batch_start"``; ``where`` names
    the framework's mechanism). With one optimizer step per batch, ``batch_start`` is the weights
    being trained: the ratio is 1 in value, and the exporter's other rows say when that reproduces
    the sandbox's bypass loss."""
    a = scn.algorithm
    if a.proximal == anchor:
        plan.implicit("algorithm.proximal", a.proximal, f"the ratio is anchored at {ANCHOR_WORDS[anchor]}: {where}")
    elif anchor == "batch_start" and a.updates_per_batch == 1:
        plan.implicit("algorithm.proximal", a.proximal,
                      f"one optimizer step per batch: π_old ({where}) is the weights being trained, so the ratio is 1 "
                      "in value; the objective and correction rows say where this is the sandbox's bypass loss")
    else:
        plan.no_equivalent("algorithm.proximal", a.proximal,
                           f"the written config anchors the ratio at {ANCHOR_WORDS[anchor]} ({where}), the scenario at "
                           f"{ANCHOR_WORDS[a.proximal]}. Instead: re-run the scenario with algorithm.proximal = "
                           f"\"{anchor}\" and check that the conclusion holds")


def no_minibatch_rows(plan: Plan, scn: Scenario, why: str, instead: str) -> None:
    """Rows of ``algorithm.minibatches`` and ``algorithm.epochs`` for a target that takes exactly one
    optimizer step per batch: implicit at 1, no equivalent otherwise."""
    a = scn.algorithm
    for field, value in (("minibatches", a.minibatches), ("epochs", a.epochs)):
        if value == 1:
            plan.implicit(f"algorithm.{field}", value, why)
        else:
            plan.no_equivalent(f"algorithm.{field}", value, f"{why}. Instead: {instead}")


MINIBATCH_INSTEAD = (
    "export a scenario with algorithm.minibatches = algorithm.epochs = 1 and groups_per_step / minibatches groups "
    "per step (the same optimizer-step size on fresh data) after checking in the sandbox that the conclusion holds"
)


FIXED_LAG_INSTEAD = (
    "a fixed lag replays every batch exactly k versions old, the controlled setting of the GAC and VCPO "
    "papers; production frameworks only bound the lag. Instead: export the scenario with "
    "system.staleness = {{kind = \"max_lag\", k_max = {k}}} (lag at most {k}) and check in the sandbox that "
    "the conclusion holds under that control (sandbox run ... --set 'system.staleness={{kind=\"max_lag\",k_max={k}}}')"
)


def fixed_lag_gap(plan: Plan, scn: Scenario, extra: str = "") -> None:
    k = scn.system.staleness.k
    plan.no_equivalent("system.staleness", describe(scn.system.staleness.model_dump()),
                       FIXED_LAG_INSTEAD.format(k=k) + (f". {extra}" if extra else ""))


# ------------------------------------------------------------------------------------------------
# rows every exporter ends with
# ------------------------------------------------------------------------------------------------


def response_length_hint(scn: Scenario) -> str:
    t = scn.task
    if t.name == "bitstring":
        return f"{t.horizon} tokens (bit-string horizon)"
    if t.name == "lm":
        return "a few characters (synthetic arithmetic answers)"
    if t.name == "gym":
        return "episodes of up to the environment's step limit"
    return "one token (a bandit arm)"


def unmapped_stabilizer_note(stabilizer, framework: str, where: str) -> str:
    """What to do with a registered stabilizer an exporter has no specific knowledge of: no framework
    has a key for it, so the sandbox's own component must run in the trainer."""
    return (f"{framework} has no key for the sandbox's `{stabilizer.name}` stabilizer "
            f"(docs/methods/stabilizers.md#{stabilizer.name}). Instead: its torch component "
            f"(sandbox.algorithms: {type(stabilizer).__name__} in a StabilizedOptimizer) placed {where}")


def scale_rows(plan: Plan, scn: Scenario, given: Given, lr_key: str | None, clip_key: str | None,
               framework_lr_default: Any = None, framework_clip_default: Any = None) -> None:
    """The learning rate and the gradient-norm clip: tuned for a toy of ~1e5 parameters, they do not
    transfer to an LLM; written only when given on the export command line."""
    opt = scn.algorithm.optimizer
    dflt = f" (the framework default {describe(framework_lr_default)} applies)" if framework_lr_default is not None else ""
    plan.scale(
        "algorithm.optimizer.lr", opt.lr, lr_key, given.lr,
        f"from the toy scenario ({opt.lr:g}): set it for your model with --lr{dflt}" if given.lr is None else
        f"toy value was {opt.lr:g}",
    )
    if opt.grad_clip is None and given.grad_clip is None:
        plan.scale("algorithm.optimizer.grad_clip", None, None, None,
                   "no gradient clipping in the toy run; keep your framework's clip for the model"
                   + (f" (default {describe(framework_clip_default)})" if framework_clip_default is not None else ""))
    else:
        plan.scale(
            "algorithm.optimizer.grad_clip", opt.grad_clip, clip_key, given.grad_clip,
            "gradient norms scale with the model: set it with --set algorithm.optimizer.grad_clip=..."
            + (f" (framework default {describe(framework_clip_default)})" if framework_clip_default is not None else "")
            if given.grad_clip is None else f"toy value was {describe(opt.grad_clip)}",
        )


def finish(plan: Plan, scn: Scenario) -> None:
    """Rows for every field the exporter did not cover itself: the task, the timing model of the
    simulated cluster, the run settings, empty stabilizer lists."""
    leaves = scenario_leaves(scn)
    covered = lambda src: not plan.uncovered([src])  # noqa: E731

    if not covered("task"):
        plan.sandbox_only("task", scn.task.name,
                          f"the toy task and its policy ({scn.task.name}) are not exported: the GPU run trains your "
                          f"model on your data. Set your maximum response length there (sandbox responses: "
                          f"{response_length_hint(scn)})")
    if not covered("system.num_workers"):
        plan.setup("system.num_workers", scn.system.num_workers,
                   "rollout workers generating concurrently: size your inference fleet (engines x concurrency) "
                   "so that generation keeps up; the staleness you measured depends on this ratio")
    for key, what in (
        ("system.worker_speeds", "per-worker speed multipliers (heterogeneous workers)"),
        ("system.generation_time", "the delay model of one rollout job"),
        ("system.train_time", "the delay model of one learner step"),
        ("system.sync_delay", "the weight-sync delay model"),
    ):
        if not covered(key):
            plan.sandbox_only(key, describe(value_at(scn, key)),
                              f"{what}: the real cluster's timing replaces it (compare with the framework's "
                              "logged generation and step times to calibrate the scenario)")
    if not covered("run"):
        plan.sandbox_only("run", f"steps = {scn.run.steps}, seed = {scn.run.seed}",
                          "length, seeds, evaluation and outputs of the simulation: set total training steps, "
                          "seeds and logging for the GPU run")
    if not covered("algorithm.stabilizers") and not scn.algorithm.stabilizers:
        plan.implicit("algorithm.stabilizers", [], "no optimizer-level stabilizer (GAC, VCPO LR) requested")
    if not covered("engine"):
        engine_row(plan, scn)
    missing = plan.uncovered(leaves)
    if missing:
        raise AssertionError(f"exporter bug: {plan.framework} left scenario fields without a row: {missing}")
