"""prime-rl git 559b4477 export table; the mapping and its upstream sources: docs/promotion.md#mapping-tables-by-framework-version."""

from __future__ import annotations

from typing import Any, ClassVar

import tomli_w

from sandbox.algorithms import OBJECTIVES
from sandbox.algorithms.objectives.base import OPOB_KNOBS
from sandbox.export.base import Exporter, Given, Version, describe, nested, register
from sandbox.export.common import (
    MINIBATCH_INSTEAD,
    OBJ,
    scale_rows,
    sources,
    staleness_of,
    values,
)
from sandbox.export.engine import stabilizer_rows
from sandbox.export.mismatch import exact_engine
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table
from sandbox.frameworks.prime_rl import rules
from sandbox.frameworks.prime_rl.config_names import OFF_MASK
from sandbox.scenario.api import Scenario

T = Table("prime_rl")

AT = "prime-rl 559b4477"
CUSTOM_LOSS = T.note("custom_loss")
ADAM_EPS = 1e-8  # torch AdamW default; prime-rl passes no eps (src/prime_rl/trainer/optim/__init__.py)


NOTES = [
    T.note("notes.one_optimizer_step"),
    T.note("notes.prime_rl_always"),
    T.note("notes.batches_are_filled"),
    T.note("notes.prime_rl_docs"),
    T.note("notes.launch_sh_holds"),
]


# ------------------------------------------------------------------------------------------------
# objective
# ------------------------------------------------------------------------------------------------

_RATIO_OBJECTIVES = tuple(n for n in OBJECTIVES if OBJECTIVES[n].impl.ratio_clip)  # the PPO-clip surrogates
_AGG_TEXT = T.section("agg_text")


class _ObjectiveRows:
    """One row per knob of the scenario's objective."""

    def __init__(self, plan: ExportPlan, scn: Scenario):
        self.plan, self.scn, self.obj = plan, scn, scn.algorithm.objective
        self.done: set[str] = set()

    def row(
        self, kind: str, knobs: tuple[str, ...], note: str, target: str | None = None, target_value: Any = None
    ) -> None:
        value = getattr(self.obj, knobs[0]) if len(knobs) == 1 else values(*knobs, obj=self.obj)
        if kind == "converted":
            self.plan.converted(sources(OBJ, *knobs), value, target, target_value, note)
        else:  # implicit or no_equivalent
            getattr(self.plan, kind)(
                sources(OBJ, *knobs),
                describe(value) if kind == "no_equivalent" and isinstance(value, dict) else value,
                note,
            )
        self.done.update(knobs)

    def unused(self, knobs: tuple[str, ...], why: str) -> None:
        knobs = tuple(k for k in knobs if k in type(self.obj).model_fields and k not in self.done)
        if knobs:
            self.row("implicit", knobs, why)

    def aggregation(self) -> None:
        o = self.obj
        max_len = ("max_len",) if "max_len" in type(o).model_fields else ()
        if o.aggregation == "token_mean":
            self.row("implicit", ("aggregation",), T.note("aggregation.prime_rl_divides"))
        else:
            knobs = ("aggregation",) + (max_len if o.aggregation == "seq_mean_token_sum_norm" else ())
            self.row(
                "no_equivalent",
                knobs,
                T.note("aggregation.prime_rl_s", aggregation=o.aggregation, text=_AGG_TEXT[o.aggregation]),
            )
        self.unused(max_len, T.note("aggregation.used_only_aggregation"))

    def _rloo(self, knobs: tuple[str, ...]) -> None:
        """RLOO's advantage is GRPO's centred one times g/(g−1): written as adv_tau (times the DPPO-mask's own)."""
        g, c = self.scn.algorithm.group_size, self.scn.algorithm.correction
        base = c.adv_tau if c.name == "dppo_mask" else 1.0
        self.row(
            "converted",
            knobs,
            T.note("rloo", g=g, g_1=g - 1, base=base),
            target="trainer.loss.adv_tau",
            target_value=base * (g / (g - 1)),
        )

    def advantage(self) -> None:
        opob = tuple(k for k in OPOB_KNOBS if k in type(self.obj).model_fields)
        rules.advantage(
            self.plan,
            o=self.obj,
            row=self.row,
            unused=self.unused,
            rloo=self._rloo,
            centred=lambda knobs, what: self.row("implicit", knobs, T.note("centred", what=what)),
            std=lambda knobs: self.row("no_equivalent", knobs, T.note("std")),
            opob=lambda knobs: self.row("no_equivalent", knobs + opob, T.note("opob")),
        )
        self.unused(OPOB_KNOBS, T.note("advantage.used_only_opob"))


def _objective_rows(plan: ExportPlan, scn: Scenario, bound: int | None) -> None:
    obj = scn.algorithm.objective
    if obj.name in ("gspo", "cispo", "tba"):
        T.row(
            plan,
            "objective.no_equivalent.note_from_code",
            describe(obj.model_dump()),
            note={
                "gspo": T.note("why.gspo", CUSTOM_LOSS=CUSTOM_LOSS),
                "cispo": T.note("why.cispo", CUSTOM_LOSS=CUSTOM_LOSS),
                "tba": T.note("why.tba"),
            }[obj.name],
        )
        return
    rows = _ObjectiveRows(plan, scn)
    rules.surrogate(plan, o=obj, row=rows.row, on_policy=bound == 0, exact=bool(exact_engine(scn)), custom=CUSTOM_LOSS)
    if obj.name in _RATIO_OBJECTIVES:
        rules.clip(plan, o=obj, row=rows.row, custom=CUSTOM_LOSS)
    rows.advantage()
    rows.aggregation()
    missing = [k for k in type(obj).model_fields if k not in rows.done]
    if missing:
        raise AssertionError(f"exporter bug: prime-rl objective {obj.name} knobs without a row: {missing}")


# ------------------------------------------------------------------------------------------------
# correction (the rl loss) and stabilizers
# ------------------------------------------------------------------------------------------------

_CORRECTION_GAPS = T.section("correction_gaps")
_CORRECTION_IMPOSSIBLE = T.section("correction_impossible")


def _switch_off_dppo(plan: ExportPlan, scn: Scenario, why: str) -> None:
    T.row(plan, "pinned.type.prime_rl_s", "default", why=why)
    T.row(plan, "pinned.dppo_mask_low", OFF_MASK)
    T.row(plan, "pinned.dppo_mask_high", OFF_MASK)
    T.row(plan, "pinned.kl_tau", 0.0)
    if "trainer.loss.adv_tau" not in plan.settings:
        T.row(plan, "pinned.adv_tau", 1.0)


STABILIZERS = T.section("stabilizers")
STABILIZER_HOOK = T.note("stabilizer_hook")


# ------------------------------------------------------------------------------------------------
# files
# ------------------------------------------------------------------------------------------------


def _ordered(node: Any) -> Any:
    """Nested tables with sections and keys sorted, each table's ``type`` first."""
    return (
        {k: _ordered(node[k]) for k in sorted(node, key=lambda k: (k != "type", k))} if isinstance(node, dict) else node
    )


@register
class PrimeRLExporter(Exporter):
    """prime-rl at git 559b4477: ``rl.toml`` (``[trainer]``, ``[orchestrator]``) and ``launch.sh``."""

    name = "prime-rl"
    title = T.note("title")
    versions = (Version("559b4477", "559b4477", T.note("versions")),)
    components = property(lambda self: T.components(correction=[*_CORRECTION_GAPS, *_CORRECTION_IMPOSSIBLE]))
    expresses: ClassVar[dict[str, str]] = T.section("expresses")

    def plan(self, scn: Scenario, version: Version, given: Given) -> ExportPlan:
        plan, st, cfg, c = (
            self.new_plan(version, T.note("plan")),
            staleness_of(scn),
            scn.system.staleness,
            scn.algorithm.correction,
        )
        rules.staleness(
            plan,
            scn=scn,
            st=st,
            cfg=cfg,
            full=describe(cfg.model_dump()),
            partial=lambda plan, on, bound: rules.partial_rollouts(plan, on=on, bound=bound),
        )
        rules.batch(plan, scn=scn, a=scn.algorithm, where=AT.split()[-1], instead=MINIBATCH_INSTEAD)
        _objective_rows(plan, scn, st.bound)  # orchestrator.max_off_policy_steps = the bound
        if not rules.correction(plan, scn=scn, c=c, off=_switch_off_dppo, settings=plan.settings):
            note = rules.correction_gap(
                c=c, impossible=_CORRECTION_IMPOSSIBLE, gaps=_CORRECTION_GAPS, at=AT, custom=CUSTOM_LOSS
            )
            T.row(plan, "correction", describe(c.model_dump()), note=note)
            _switch_off_dppo(plan, scn, T.note("correction_rows.dppo_mask_kl.2", name=c.name))
        stabilizer_rows(plan, scn, STABILIZERS, "prime-rl", STABILIZER_HOOK)
        rules.optimizer(plan, o=scn.algorithm.optimizer, adam_eps=ADAM_EPS)
        rules.schedule(plan, o=scn.algorithm.optimizer, steps=scn.run.steps)
        scale_rows(
            plan,
            scn,
            given,
            "trainer.optim.lr",
            "trainer.optim.max_norm",
            framework_lr_default=1e-6,
            framework_clip_default=1.0,
        )
        T.row(plan, "pinned.type.advantage_r_group", "grpo")
        T.row(plan, "pinned.filter_zero_advantages", False)
        plan.metrics.update(T.section("metrics"))
        plan.notes.extend(NOTES)
        return plan

    def files(self, plan: ExportPlan) -> dict[str, str]:
        decays = (
            plan.settings.get("trainer.scheduler.type") == "cosine"
            or plan.settings.get("trainer.scheduler.decay_steps", 0) > 0
        )
        note = " (the learning-rate schedule decays over it)" if decays else ""
        return {
            "rl.toml": T.text("rl_toml_header") + "\n" + tomli_w.dumps(_ordered(nested(plan.settings))),
            "launch.sh": T.text("launch_sh").format(max_steps_note=note),
        }

    def launch(self, plan: ExportPlan, files: dict[str, str]) -> str:
        return (
            "# from the export directory, with a prime-rl checkout at 559b4477:\n"
            "PRIME_RL_DIR=/path/to/prime-rl MODEL=<model> ENV_ID=<taskset id> MAX_STEPS=<steps> bash launch.sh"
        )
