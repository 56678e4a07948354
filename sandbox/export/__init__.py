"""``sandbox export``: a scenario's algorithm and staleness settings written as the configuration of
a GPU framework (verl, the VCPO fork of verl, TRL, OpenRLHF, AReaL, prime-rl), per framework version,
with a PROMOTION.md that says key by key what was mapped, converted, left to the user or has no
equivalent. Guide: ``docs/promotion.md``.

>>> from sandbox.export import export_scenario                    # doctest: +SKIP
>>> exp = export_scenario(scn, "verl", allow_partial=True)        # doctest: +SKIP
>>> exp.plan.settings["trainer.v1.sampler.max_off_policy_threshold"]   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..scenario import Scenario
from ..tasks import TASKS, OracleTask
from .base import EXPORTERS, Exporter, Given, Version, get_exporter, register
from .common import finish
from .engine import build_plan
from .plan import ExportError, ExportRefused, Plan, Row
from .promotion import render_promotion, write_export


@dataclass
class Export:
    """A finished export: the plan, the native files plus PROMOTION.md, and the launch command."""

    plan: Plan
    files: dict[str, str]
    launch: str
    provenance: str
    manifest: dict = field(default_factory=dict)

    def write(self, out: str | Path) -> list[Path]:
        return write_export(Path(out), self.files, self.manifest)


def export_scenario(scn: Scenario, framework: str, version: str | None = None, given: Given | None = None,
                    allow_partial: bool = False, provenance: str = "a scenario") -> Export:
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
    manifest = {"framework": plan.framework, "version": plan.version, "release": plan.release, "target": plan.target,
                "source": provenance, "partial": bool(gaps), "counts": plan.counts(), "settings": plan.settings,
                "rows": [asdict(r) for r in plan.rows]}
    return Export(plan=plan, files=files, launch=launch, provenance=provenance, manifest=manifest)


__all__ = ["EXPORTERS", "Export", "ExportError", "ExportRefused", "Exporter", "Given", "Plan", "Row", "Version",
           "export_scenario", "get_exporter", "register"]
