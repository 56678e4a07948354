"""The public names of :mod:`sandbox.export` (its ``__init__`` stays light, so that the command module loads without them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandbox.export.base import EXPORTERS, Exporter, Given, Version, get_exporter, register
from sandbox.export.common import finish
from sandbox.export.engine import build_plan
from sandbox.export.plan import ExportError, ExportPlan, ExportRefused, Row
from sandbox.export.promotion import render_promotion, write_export
from sandbox.scenario.api import Scenario
from sandbox.tasks import TASKS, OracleTask


@dataclass
class Export:
    """A finished export: the plan, the native files plus PROMOTION.md, and the launch command."""

    plan: ExportPlan
    files: dict[str, str]
    launch: str
    provenance: str
    manifest: dict = field(default_factory=dict)

    def write(self, out: str | Path) -> list[Path]:
        return write_export(Path(out), self.files, self.manifest)


def export_scenario(
    scn: Scenario,
    framework: str,
    version: str | None = None,
    given: Given | None = None,
    allow_partial: bool = False,
    provenance: str = "a scenario",
) -> Export:
    """Map ``scn`` to ``framework``; raises :class:`ExportRefused` when settings have no equivalent
    and ``allow_partial`` is off, :class:`ExportError` for an unknown framework or version, or a
    scenario that cannot be promoted at all."""
    if issubclass(TASKS[scn.task.name].impl, OracleTask):
        policy = ", ".join(n for n in TASKS.names() if not issubclass(TASKS[n].impl, OracleTask))
        raise ExportError(
            f"task.name: the {scn.task.name} gradient oracle has no policy, objective or rollouts, so there is "
            f"nothing to promote; expected a policy task ({policy})"
        )
    exporter = get_exporter(framework)
    ver = exporter.resolve_version(version)
    plan = build_plan(exporter, scn, ver, given or Given())
    finish(plan, scn)
    gaps = plan.gaps()
    if gaps and not allow_partial:
        raise ExportRefused(framework, gaps)
    native = exporter.files(plan)
    launch = exporter.launch(plan, native)
    files = {**native, "PROMOTION.md": render_promotion(plan, native, launch, provenance, exporter.title)}
    manifest = {
        "framework": plan.framework,
        "version": plan.version,
        "release": plan.release,
        "target": plan.target,
        "source": provenance,
        "partial": bool(gaps),
        "counts": plan.counts(),
        "settings": plan.settings,
        "rows": [asdict(r) for r in plan.rows],
    }
    return Export(plan=plan, files=files, launch=launch, provenance=provenance, manifest=manifest)


__all__ = [
    "EXPORTERS",
    "Export",
    "ExportError",
    "ExportRefused",
    "Exporter",
    "Given",
    "ExportPlan",
    "Row",
    "Version",
    "export_scenario",
    "get_exporter",
    "register",
]
