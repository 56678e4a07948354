"""What every exporter shares: the scenario's leaves, the rows for fields that describe the
simulation or the user's own setup, the scale-dependent values, and the staleness bound in the
sandbox's canonical unit.

Canonical unit (``docs/promotion.md``): the sandbox publishes one weight version per optimizer step
and takes one optimizer step per consumed batch of ``groups_per_step × group_size`` responses. A
job's lag is the number of versions between the weights that generated it (its oldest token, with
partial rollouts) and the step that trains on it; every exporter writes one version per trainer step,
so ``versions_to_optimizer_steps(k) = k · steps_per_version`` (docs/promotion.md) is the identity.

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

from sandbox.export.base import Given, describe
from sandbox.export.mismatch import engine_row, exact_engine
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table
from sandbox.scenario.api import Scenario
from sandbox.tasks import TASKS

T = Table("common")

# Two std guards ε (advantage = (R − mean)/(std + ε)) closer than this are both zero-division guards:
# the advantages differ by at most |Δε|/(std + ε) relative, below 1e-2 for any group whose reward std is
# at least 0.1 (a group of G <= 100 binary rewards that are not all equal has std >= 0.099). Exporters
# treat such a difference as the same behaviour and state the bound in the row.
STD_GUARD_TOLERANCE = 1e-3


def scenario_leaves(scn: Scenario) -> list[str]:
    """Dotted paths of every leaf of the resolved scenario (dicts flattened, lists of tables
    indexed as ``key[i].field``, other lists and empty lists are leaves). The exact rollout engine has
    none: it models no mismatch, so there is nothing to promote (:mod:`sandbox.export.mismatch`)."""
    data = scn.model_dump(mode="json", exclude={"title", "description", "variants"} | exact_engine(scn))
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


OBJ = "algorithm.objective"


def sources(prefix: str, *names: str) -> str:
    """Several scenario fields as one row's source: ``prefix.a + prefix.b``."""
    return " + ".join(f"{prefix}.{n}" for n in names)


def values(*names: str, obj: Any) -> dict[str, Any]:
    return {n: getattr(obj, n) for n in names}


def baseline_knobs(baseline: str) -> tuple[list[str], list[str]]:
    """The REINFORCE knobs (docs/methods/objectives.md#reinforce) ``baseline`` reads (``constant``:
    ``constant_baseline``; ``ema``: ``ema_decay``, ``ema_init``) and those it leaves unused, each in field order."""
    used = {"constant": ["constant_baseline"], "ema": ["ema_decay", "ema_init"]}.get(baseline, [])
    return used, [k for k in ("constant_baseline", "ema_decay", "ema_init") if k not in used]


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


ANCHOR_WORDS = {
    "behaviour": T.note("anchor_words.behaviour"),
    "batch_start": T.note("anchor_words.batch_start"),
}


def proximal_row(plan: ExportPlan, scn: Scenario, anchor: str, where: str) -> None:
    """The row of ``algorithm.proximal`` (docs/system.md#mini-batches) for a written config whose
    surrogate ratio is anchored at ``anchor`` (``"behaviour"`` or ``"batch_start"``; ``where`` names
    the framework's mechanism). With one optimizer step per batch, ``batch_start`` is the weights
    being trained: the ratio is 1 in value, and the exporter's other rows say when that reproduces
    the sandbox's bypass loss."""
    a = scn.algorithm
    if a.proximal == anchor:
        T.row(plan, "proximal.implicit.ratio_anchored", a.proximal, anchor_words=ANCHOR_WORDS[anchor], where=where)
    elif anchor == "batch_start" and a.updates_per_batch == 1:
        T.row(plan, "proximal.implicit.one_optimizer_step", a.proximal, where=where)
    else:
        T.row(
            plan,
            "proximal.no_equivalent",
            a.proximal,
            anchor_words=ANCHOR_WORDS[anchor],
            where=where,
            scenario_anchor_words=ANCHOR_WORDS[a.proximal],
            anchor=anchor,
        )


def no_minibatch_rows(plan: ExportPlan, scn: Scenario, why: str, instead: str) -> None:
    """Rows of ``algorithm.minibatches`` and ``algorithm.epochs`` for a target that takes exactly one
    optimizer step per batch: implicit at 1, no equivalent otherwise."""
    a = scn.algorithm
    for field, value in (("minibatches", a.minibatches), ("epochs", a.epochs)):
        if value == 1:
            T.row(plan, "no_minibatch_rows.implicit", value, field=field, note=why)
        else:
            T.row(plan, "no_minibatch_rows.no_equivalent", value, field=field, why=why, instead=instead)


MINIBATCH_INSTEAD = T.note("minibatch_instead")


def fixed_lag_gap(plan: ExportPlan, scn: Scenario, extra: str = "") -> None:
    k = scn.system.staleness.k
    T.row(
        plan,
        "staleness.fixed_lag_gap",
        describe(scn.system.staleness.model_dump()),
        k=k,
        extra=f". {extra}" if extra else "",
    )


# ------------------------------------------------------------------------------------------------
# rows every exporter ends with
# ------------------------------------------------------------------------------------------------


def response_length_hint(scn: Scenario) -> str:
    """What the task says of its responses' length (``Task.response_length_hint``)."""
    return TASKS.entry_for(scn.task).impl.response_length_hint(scn.task)


def scale_rows(
    plan: ExportPlan,
    scn: Scenario,
    given: Given,
    lr_key: str | None,
    clip_key: str | None,
    framework_lr_default: Any = None,
    framework_clip_default: Any = None,
) -> None:
    """The learning rate and the gradient-norm clip: tuned for a toy of ~1e5 parameters, they do not
    transfer to an LLM; written only when given on the export command line."""
    opt = scn.algorithm.optimizer
    dflt = T.note("dflt", describe=describe(framework_lr_default)) if framework_lr_default is not None else ""
    T.row(
        plan,
        "optimizer.lr",
        opt.lr,
        given.lr,
        target=lr_key,
        note=T.note("scale_rows.note.toy_scenario_set", lr=opt.lr, dflt=dflt)
        if given.lr is None
        else f"toy value was {opt.lr:g}",
    )
    if opt.grad_clip is None and given.grad_clip is None:
        T.row(
            plan,
            "optimizer.grad_clip.scale.gradient_clipping_toy",
            None,
            None,
            note=f" (default {describe(framework_clip_default)})" if framework_clip_default is not None else "",
        )
    else:
        T.row(
            plan,
            "optimizer.grad_clip.scale.note_from_code",
            opt.grad_clip,
            given.grad_clip,
            target=clip_key,
            note=T.note("scale_rows.note.gradient_norms_scale")
            + (f" (framework default {describe(framework_clip_default)})" if framework_clip_default is not None else "")
            if given.grad_clip is None
            else f"toy value was {describe(opt.grad_clip)}",
        )


def finish(plan: ExportPlan, scn: Scenario) -> None:
    """Rows for every field the exporter did not cover itself: the task, the timing model of the
    simulated cluster, the run settings, empty stabilizer lists."""
    leaves = scenario_leaves(scn)
    covered = lambda src: not plan.uncovered([src])  # noqa: E731

    if not covered("task"):
        T.row(plan, "task", scn.task.name, name=scn.task.name, response_length_hint=response_length_hint(scn))
    if not covered("system.num_workers"):
        T.row(plan, "num_workers.setup.size_inference_fleet", scn.system.num_workers)
    system = scn.system.model_dump(mode="json")
    for field, what in (
        ("worker_speeds", T.note("finish.per_worker_speed")),
        ("generation_time", T.note("finish.delay_model_one")),
        ("train_time", T.note("finish.delay_model_one.2")),
        ("sync_delay", "the weight-sync delay model"),
    ):
        if not covered(f"system.{field}"):
            T.row(plan, "finish.sandbox_only", describe(system[field]), source=f"system.{field}", what=what)
    if not covered("run"):
        T.row(plan, "run", f"steps = {scn.run.steps}, seed = {scn.run.seed}")
    if not covered("algorithm.stabilizers") and not scn.algorithm.stabilizers:
        T.row(plan, "stabilizers", [])
    if not covered("engine"):
        engine_row(plan, scn)
    missing = plan.uncovered(leaves)
    if missing:
        raise AssertionError(f"exporter bug: {plan.framework} left scenario fields without a row: {missing}")
