"""AReaL 1.0.4 export table; the mapping and its upstream sources: docs/promotion.md#mapping-tables-by-framework-version."""

from __future__ import annotations

import json
import math
import re
from typing import Any, ClassVar

from sandbox.algorithms.objectives.base import OPOB_KNOBS
from sandbox.export.base import Exporter, Given, Version, describe, nested, register
from sandbox.export.common import OBJ, baseline_knobs, scale_rows, sources, values
from sandbox.export.engine import stabilizer_rows
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table
from sandbox.frameworks.areal import rules
from sandbox.frameworks.areal.config_names import CONFIG_FILE
from sandbox.scenario.api import Scenario

T = Table("areal")

LAUNCH_FILE = "launch.sh"

RATIO_CLIP_OBJECTIVES = ("grpo", "dr_grpo", "rloo", "ppo", "dapo", "gspo")
SANDBOX_COMPONENTS = T.note("sandbox_components")

# Keys AReaL requires that describe the user's run, not the scenario: filled by launch.sh
# (``???`` = AReaL's "must be set") or wired as AReaL's own example configs do.
USER_KEYS: tuple[tuple[str, str], ...] = (
    ("experiment_name", "???"),
    ("trial_name", "???"),
    ("tokenizer_path", "${actor.path}"),
    ("train_dataset.path", "???"),
    ("train_dataset.type", "rl"),
    ("actor.path", "???"),
    ("actor.backend", "???"),
    ("actor.experiment_name", "${experiment_name}"),
    ("actor.trial_name", "${trial_name}"),
    ("rollout.backend", "???"),
) + tuple(
    (f"{section}.{field}", value)
    for section in ("saver", "evaluator", "stats_logger", "recover")
    for field, value in (
        ("experiment_name", "${experiment_name}"),
        ("trial_name", "${trial_name}"),
        ("fileroot", "${cluster.fileroot}"),
    )
)


_INSTEAD = "Instead: " + SANDBOX_COMPONENTS + " as a custom AReaL actor loss"
CORRECTION_GAPS = T.section("correction_gaps")
STABILIZERS = T.section("stabilizers")


@register
class ArealExporter(Exporter):
    """AReaL's GRPO trainer (inclusionAI/AReaL, ``areal`` on PyPI)."""

    name = "areal"
    title = "AReaL (inclusionAI/AReaL)"
    versions = (Version("1.0", "1.0.4", "areal 1.0.4 wheel"),)
    components = property(lambda self: T.components(correction=[*CORRECTION_GAPS]))
    expresses: ClassVar[dict[str, str]] = T.section("expresses")

    # ------------------------------------------------------------------------------------------
    def plan(self, scn: Scenario, version: Version, given: Given) -> ExportPlan:
        plan = self.new_plan(version, T.note("plan.areal_grpo_trainer"))
        a, st, o = scn.algorithm, scn.system.staleness, scn.algorithm.optimizer
        rules.batch(plan, a=a)
        rules.staleness(plan, scn=scn, st=st, B=a.groups_per_step, full=describe(st.model_dump()))
        rules.partial_rollouts(plan, on=scn.system.partial_rollouts, streaming=st.kind != "sync")
        loss = _LossMapping(plan, scn)
        loss.run()
        # after the loss rows: what several mini-batches do to the loss route, the epochs (no key) and the ratio anchor
        rules.minibatches(plan, scn=scn, a=a, decoupled=loss.decoupled)
        stabilizer_rows(plan, scn, STABILIZERS, "AReaL", T.note("plan.between_backward_step"))
        rules.optimizer(plan, o=o, steps=scn.run.steps, proportion=warmup_proportion(o.warmup_steps, scn.run.steps))
        scale_rows(
            plan,
            scn,
            given,
            "actor.optimizer.lr",
            "actor.optimizer.gradient_clipping",
            framework_lr_default=1e-3,
            framework_clip_default=1.0,
        )
        T.row(plan, "num_workers", scn.system.num_workers, num_workers=scn.system.num_workers)
        corr = scn.algorithm.correction.name  # AReaL's logged names: stats_tracker keys, areal/trainer/ppo/actor.py
        plan.metrics.update(
            rules.metrics(
                corr=corr,
                stabilizers=bool(scn.algorithm.stabilizers),
                weighted=corr in ("tis", "mis", "icepop", "geo_mis", "decoupled_ppo")
                or scn.algorithm.objective.name == "cispo",
            )
        )
        plan.notes += [
            T.note("notes.areal_config_yaml_holds"),
            T.note("mode.export_uses_areal") if loss.decoupled else T.note("mode.export_uses_bypass"),
            T.note("notes.rewards_areal_computes"),
        ]
        return plan

    def files(self, plan: ExportPlan) -> dict[str, str]:
        # launch.sh: placeholders the script refuses to run with, then AReaL's entry point
        return {CONFIG_FILE: render_yaml(plan), LAUNCH_FILE: T.text("launch_sh").format(release=plan.release)}

    def launch(self, plan: ExportPlan, files: dict[str, str]) -> str:
        return "# fill in the <placeholders> at the top of launch.sh (or export those variables), then:\nbash launch.sh"


def warmup_proportion(warmup_steps: int, total_steps: int) -> float:
    """The smallest float ``p`` with ``int(p · total_steps) == warmup_steps`` near ``warmup_steps/total_steps``
    (AReaL truncates ``p · total_train_steps`` to an int)."""
    if warmup_steps == 0:
        return 0.0
    p = warmup_steps / total_steps
    while int(p * total_steps) < warmup_steps:
        p = math.nextafter(p, math.inf)
    return p


# ------------------------------------------------------------------------------------------------
# objective and correction
# ------------------------------------------------------------------------------------------------


class _LossMapping:
    """Rows for ``algorithm.objective`` and ``algorithm.correction``, which share AReaL's loss mode.

    Order of decisions: the objective may claim ``actor.rejection_sampling`` (CISPO's clipped weight);
    the correction then maps to ``rejection_sampling`` or ``m2_threshold`` if the slot is free and the
    semantics match; decoupled mode is needed by REINFORCE, CISPO and every mapped correction; only
    then are the objective's clip rows written (they are inert in decoupled mode)."""

    def __init__(self, plan: ExportPlan, scn: Scenario):
        self.plan, self.scn, self.obj, self.corr = plan, scn, scn.algorithm.objective, scn.algorithm.correction
        self.G, self.decoupled = scn.algorithm.group_size, False
        self.rs_owner: str | None = None

    def run(self) -> None:
        obj, plan = self.obj, self.plan
        if obj.name == "tba":
            T.row(plan, "objective.no_equivalent", describe(obj.model_dump()))
            T.row(plan, "correction.implicit.tba_runs_without", self.corr.name)
            self._nearest_reward_norm("objective (TBA)", mean=True, std=True, difference=T.note("run.difference"))
            rules.pin_mode(plan, decoupled=self.decoupled)
            return
        self.decoupled = obj.name in ("reinforce", "cispo")
        if obj.name == "cispo":  # CISPO's clipped weight claims actor.rejection_sampling
            self.rs_owner = "objective" if obj.eps_high > 0 else None
            rules.cispo(plan, o=obj)
        self._correction()
        rules.objective_name(plan, o=obj)
        if obj.name in RATIO_CLIP_OBJECTIVES:
            rules.clip(plan, o=obj, decoupled=self.decoupled, dual=getattr(obj, "dual_clip_c", None))
        self._advantage()
        self._aggregation()
        rules.pin_mode(plan, decoupled=self.decoupled)

    # -- objective ------------------------------------------------------------------------------
    def _aggregation(self) -> None:
        obj = self.obj
        dr = obj.name == "dr_grpo"
        rules.aggregation(
            self.plan,
            o=obj,
            value=values("aggregation", "max_len", obj=obj) if dr else obj.aggregation,
            src=sources(OBJ, "aggregation", *(["max_len"] if dr else [])),
        )

    # -- advantages ------------------------------------------------------------------------------
    def _advantage(self) -> None:
        plan, opob = self.plan, dict(o=self.obj, unused_opob=self._unused_opob, opob_gap=self._opob_gap)
        rest = lambda std, leave1out, eps_source=None: rules.reward_norm_rest(
            plan, o=self.obj, G=self.G, std=std, leave1out=leave1out, eps_source=eps_source
        )
        rules.advantage(
            plan,
            G=self.G,
            reinforce=self._reinforce_baseline,
            rest=rest,
            **opob,
            grpo=lambda: rules.grpo(plan, G=self.G, **opob),
            knob=lambda: rules.advantage_knob(plan, rest=rest, **opob),
        )

    def _reinforce_baseline(self) -> None:
        obj, plan, kind = self.obj, self.plan, self.obj.baseline
        used, unused = baseline_knobs(kind)
        for knob in unused:
            T.row(plan, "objective.implicit.2", getattr(obj, knob), knob=knob, kind=kind)
        self._unused_opob(kind)
        rules.reinforce_baseline(
            plan,
            o=obj,
            kind=kind,
            norm=obj.normalize_std,
            G=self.G,
            opob_gap=self._opob_gap,
            src=sources(OBJ, "baseline", "normalize_std", *used),
            nearest=self._nearest_reward_norm,
        )

    def _unused_opob(self, kind: str) -> None:
        if kind != "opob" and hasattr(self.obj, "opob_weight"):
            self.plan.implicit(
                sources(OBJ, *OPOB_KNOBS), values(*OPOB_KNOBS, obj=self.obj), f"OPOB knobs, unused with {kind}"
            )

    def _opob_gap(self, source: str, std: bool, eps: float = 1e-6, unbiased: bool = True) -> None:
        source = " + ".join([source, sources(OBJ, *OPOB_KNOBS)])
        self.plan.no_equivalent(
            source,
            values(*(s.strip().rsplit(".", 1)[1] for s in source.split("+")), obj=self.obj),
            T.note("opob_gap") + SANDBOX_COMPONENTS + " in a custom AReaL actor",
        )
        self._nearest_reward_norm(
            "OPOB baseline", mean=True, std=std, eps=eps, unbiased=unbiased, difference=T.note("opob_gap.difference")
        )

    def _nearest_reward_norm(
        self,
        what: str,
        mean: bool,
        std: bool,
        difference: str,
        eps: float = 1e-6,
        unbiased: bool = True,
        leave1out: bool = False,
    ) -> None:
        """Write the group normalisation nearest to the scenario's advantage when the advantage itself has no
        equivalent (its row says so). AReaL 1.0.4 defaults ``actor.reward_norm`` and ``actor.adv_norm`` to None
        (``areal/api/cli_args.py``, ``PPOActorConfig``): left unwritten, the run would train on raw, uncentred
        rewards, a different algorithm from the one the scenario's objective describes (group centring, std
        scaling as the objective says)."""
        rules.nearest_reward_norm(
            self.plan,
            what=what,
            mean=mean,
            std=std,
            difference=difference,
            eps=eps,
            unbiased=unbiased,
            leave1out=leave1out,
            G=self.G,
        )

    # -- correction ------------------------------------------------------------------------------
    def _correction(self) -> None:
        """The correction's rows, unless the correction_gap rule says why it cannot be written."""
        c, obj, plan = self.corr, self.obj, self.plan
        cap = {
            "tis": "cap",
            "mis": "C",
            "icepop": "beta",
            "geo_mis": "hi",
            "decoupled_ppo": "behave_imp_weight_cap",
        }.get(c.name)
        if c.name == "none":
            T.row(
                plan,
                "correction.implicit.correction_actor_rejection_sampling",
                "none",
                note=T.note("correction.note") if self.decoupled and self.rs_owner is None else "",
            )
        elif gap := rules.correction_gap(
            c=c,
            obj=obj,
            instead=_INSTEAD,
            components=SANDBOX_COMPONENTS,
            gaps=CORRECTION_GAPS,
            slot=T.note("slot") if self.rs_owner else None,
            cap=None if cap is None else getattr(c, cap),
        ):
            T.row(plan, "correction.no_equivalent.2", describe(c.model_dump()), note=gap)
        elif c.name == "m2po_mask":
            self.decoupled = True
            weight_needed = obj.name in RATIO_CLIP_OBJECTIVES or (obj.name == "reinforce" and c.behaviour_weight)
            if weight_needed and obj.name != "cispo":
                self.rs_owner = "correction"
            rules.m2po(plan, c=c, o=obj, weight_needed=weight_needed)
        else:
            self.decoupled, self.rs_owner = True, "correction"
            rules.correction(plan, c=c, lower=self._lower)

    def _lower(self, source: str, value: float, what: str) -> None:
        if value > 0:
            self.plan.as_is(source, value, "actor.rejection_sampling.lower", what)
        else:
            self.plan.converted(source, value, "actor.rejection_sampling.lower", None, T.note("lower", what=what))


# ------------------------------------------------------------------------------------------------
# files
# ------------------------------------------------------------------------------------------------

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "none", "~"}


def yaml_scalar(value: Any) -> str:
    """One YAML scalar that OmegaConf reads back as ``value`` (floats keep a dot so every YAML loader
    reads them as floats)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        if math.isnan(value):
            return ".nan"
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    text = str(value)
    if text == "???" or (_PLAIN.match(text) and text.lower() not in _YAML_WORDS):
        return text
    return json.dumps(text)


def _emit(tree: dict, indent: int, out: list[str]) -> None:
    for key, item in tree.items():
        pad = "  " * indent
        if isinstance(item, dict):
            out.append(f"{pad}{key}:")
            _emit(item, indent + 1, out)
        else:
            value, comment = item
            line = f"{pad}{key}: {yaml_scalar(value)}"
            out.append(f"{line}  # {comment}" if comment else line)


def render_yaml(plan: ExportPlan) -> str:
    """``areal_config.yaml``: the plan's keys nested as AReaL's dataclasses, each commented with its
    scenario source, plus the keys any AReaL run requires (commented "your run")."""
    why: dict[str, str] = {}
    for r in plan.rows:
        if r.target is not None and r.target not in why:
            why[r.target] = f"{r.source} ({r.kind})" if r.source else r.kind
    lines = [
        f"# AReaL {plan.release} GRPO config written by `sandbox export` ({plan.framework} {plan.version}).",
        '# Only the keys the export maps or pins, plus those any AReaL run requires ("your run");',
        "# AReaL fills the rest from its defaults (areal/api/cli_args.py). PROMOTION.md explains each key.",
    ]
    pairs = [(k, v, why.get(k, "")) for k, v in plan.settings.items()]
    pairs += [
        (k, v, "your run: set by launch.sh" if v == "???" else "your run")
        for k, v in USER_KEYS
        if k not in plan.settings
    ]
    _emit(nested({k: (v, c) for k, v, c in pairs}), 0, lines)
    return "\n".join(lines) + "\n"
