"""The export engine: runs a framework's table of mappings over a scenario and guarantees a row for
every scenario leaf, whatever components the scenario uses.

A framework (one module, loaded only when asked for: :data:`~sandbox.export.base.EXPORTERS` is lazy)
declares in :attr:`Exporter.components` the components its table maps, per family. A component of a
family the framework's table does not name either carries its own mapping (a ``export_mappings``
class attribute of its config: ``{framework: function(plan, source, cfg)}``) or falls to the engine's
"no equivalent" row naming it. For an objective, correction or staleness control the framework's table
is applied with the family's *neutral* component in its place (GRPO, no correction, a synchronous
control), so the written configuration stays a runnable one: the stand-in's rows are replaced by the
component's own mapping, or by the "no equivalent" row with the stand-in's keys listed as pinned.
Stabilizers go through the framework's stabilizer table (:func:`stabilizer_rows`); delay models are
"sandbox only" everywhere. Nothing the exporters do not know can crash an export.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.algorithms.corrections.base import CORRECTIONS
from sandbox.algorithms.objectives.base import OBJECTIVES
from sandbox.export.base import describe
from sandbox.export.plan import ExportPlan, Row
from sandbox.export.table import Table
from sandbox.scenario.api import Scenario
from sandbox.system.staleness.base import CONTROLS

T = Table("common")


@dataclass(frozen=True)
class Slot:
    """Where a family's component sits in a scenario, and the component written in its place when a
    framework does not know it."""

    family: str
    registry: Any  # the family's registry (the neutral component's config is built from it)
    section: str  # "algorithm" or "system"
    field: str
    key: str  # the config's discriminator field (name or kind)
    neutral: str
    docs: str
    instead: str  # what else the user can do, after "add a mapping"

    @property
    def source(self) -> str:
        return f"{self.section}.{self.field}"


SLOTS: tuple[Slot, ...] = (
    Slot(
        "objective",
        OBJECTIVES,
        "algorithm",
        "objective",
        "name",
        "grpo",
        "docs/methods/objectives.md",
        T.note("slots.run_sandbox_s"),
    ),
    Slot(
        "correction",
        CORRECTIONS,
        "algorithm",
        "correction",
        "name",
        "none",
        "docs/methods/corrections.md",
        T.note("slots.run_sandbox_s"),
    ),
    Slot(
        "staleness control",
        CONTROLS,
        "system",
        "staleness",
        "kind",
        "sync",
        "docs/system.md",
        T.note("slots.check_conclusion_sandbox"),
    ),
)

KNOWN: dict[str, frozenset[str]] = T.components()
"""The components every exporter's table maps (or explains as a gap with what to do instead), from common.toml's
[components]; an exporter's table narrows or extends it (:meth:`~sandbox.export.table.Table.components`)."""


def _under(row: Row, source: str) -> bool:
    return any(s.strip() == source or s.strip().startswith(source + ".") for s in row.source.split("+"))


def unknown_slots(scn: Scenario, components: dict[str, frozenset[str]]) -> list[tuple[Slot, Any]]:
    """The scenario's components the framework's table does not name."""
    out = []
    for slot in SLOTS:
        cfg = getattr(getattr(scn, slot.section), slot.field)
        if getattr(cfg, slot.key) not in components.get(slot.family, KNOWN[slot.family]):
            out.append((slot, cfg))
    return out


def with_neutral(scn: Scenario, unknown: list[tuple[Slot, Any]]) -> Scenario:
    """``scn`` with the neutral component of each unknown slot (not re-validated: the pairing rules of the
    unknown component do not apply to its stand-in)."""
    for slot, _ in unknown:
        section = getattr(scn, slot.section).model_copy(update={slot.field: slot.registry[slot.neutral].config()})
        scn = scn.model_copy(update={slot.section: section})
    return scn


def report_unknown(plan: ExportPlan, scn: Scenario, unknown: list[tuple[Slot, Any]]) -> None:
    """Replace the stand-in's rows by the component's own mapping or by one "no equivalent" row naming
    it; the keys the stand-in wrote stay, as pinned rows."""
    for slot, cfg in unknown:
        name = getattr(cfg, slot.key)
        own: Callable[[ExportPlan, str, Any], None] | None = (getattr(type(cfg), "export_mappings", None) or {}).get(
            plan.framework
        )
        kept, pins = [], []
        for row in plan.rows:
            if not _under(row, slot.source):
                kept.append(row)
            elif own is not None and row.target is not None:
                del plan.settings[row.target]
            elif row.target is not None:
                pins.append(
                    Row(
                        "pinned",
                        "",
                        None,
                        row.target,
                        row.target_value,
                        T.note("report_unknown", family=slot.family, neutral=slot.neutral, name=name, note=row.note),
                    )
                )
        plan.rows = kept + pins
        if own is not None:
            own(plan, slot.source, cfg)
            continue
        T.row(
            plan,
            "report_unknown.no_equivalent",
            describe(cfg.model_dump()),
            source=slot.source,
            framework=plan.framework,
            family=slot.family,
            name=name,
            docs=slot.docs,
            instead=slot.instead,
            neutral=slot.neutral,
        )


def build_plan(exporter, scn: Scenario, version, given) -> ExportPlan:
    """The exporter's plan of ``scn``, with every component its table does not name reported by the engine."""
    unknown = unknown_slots(scn, getattr(exporter, "components", {}))
    plan = exporter.plan(with_neutral(scn, unknown), version, given)
    report_unknown(plan, scn, unknown)
    return plan


# ------------------------------------------------------------------------------------------------
# component tables: name -> the framework's mapping (a function) or the reason it has none (a note)
# ------------------------------------------------------------------------------------------------


def stabilizer_rows(plan: ExportPlan, scn: Scenario, table: dict[str, Any], framework: str, where: str) -> None:
    """One row per optimizer-level stabilizer from the framework's stabilizer table: a function writes the mapping
    (``fn(plan, source, cfg)``), a string is the "no equivalent" note. A stabilizer the table does not name uses the
    mapping it carries for this framework (``export_mappings``), else it has no framework key, so the sandbox's own
    component must run in the trainer (``where``)."""
    for i, s in enumerate(scn.algorithm.stabilizers):
        source, entry = f"algorithm.stabilizers[{i}]", table.get(s.name)
        if entry is None:
            entry = (getattr(type(s), "export_mappings", None) or {}).get(
                plan.framework,
                T.note(
                    "unmapped_stabilizer_note", framework=framework, name=s.name, name__=type(s).__name__, where=where
                ),
            )
        if callable(entry):
            entry(plan, source, s)
        else:
            T.row(plan, "opob_gap.no_equivalent", describe(s.model_dump()), source=source, note=entry)
