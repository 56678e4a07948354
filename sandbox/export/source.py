"""What to export: a scenario file (one variant, ``--set`` overrides) or a finished run or sweep
directory (a run picked by id, by variant, or as the best configuration by a summary metric: over seeds
for a sweep, whose speed-up and time-to-target fields are the sweep's per configuration,
:func:`sandbox.sweep.results.with_time_to_target`). The rules: docs/promotion.md, "Inputs"."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from sandbox.base.outputs import safe_name
from sandbox.base.readfile import read_json
from sandbox.export.plan import ExportError
from sandbox.scenario.api import Scenario, ScenarioError
from sandbox.scenario.load import apply_overrides, blame_overrides, parse_overrides, read_toml, validate_scenario
from sandbox.scenario.shipped import display_name, resolve_scenario_path


@dataclass
class Source:
    scenario: Scenario
    provenance: str  # one paragraph for PROMOTION.md
    label: str  # short name used for the default output directory
    overrides: dict  # dotted key -> value given with --set


METRIC_ALIASES = {"speedup": "speedup_vs_sync"}
"""Short names accepted by ``--best``."""

COMPARISON_FIELDS = (
    "speedup_vs_sync",
    "speedup_ci_low",
    "speedup_ci_high",
    "throughput_gain_vs_sync",
    "sample_efficiency_vs_sync",
    "time_to_target",
    "steps_to_target",
    "samples_to_target",
    "generated_samples_to_target",
    "tokens_to_target",
)
"""Numeric summary fields that compare a run with others (docs/time_to_target.md): a sweep recomputes
them per configuration, and a run without a value for them (target not reached, no synchronous
baseline) is left out of the ranking with its reason."""


def resolve(
    path: Path,
    variant: str | None = None,
    run_id: str | None = None,
    best: str | None = None,
    lowest: bool = False,
    overrides: list[str] | None = None,
) -> Source:
    """Resolve the export input; every user mistake is an :class:`ExportError` with one line."""
    try:
        return _resolve(
            path, variant, run_id, METRIC_ALIASES.get(best, best) if best else best, lowest, parse_overrides(overrides)
        )
    except ScenarioError as exc:
        raise ExportError(str(exc).replace("\n", " ")) from None


def _resolve(path: Path, variant: str | None, run_id: str | None, best: str | None, lowest: bool, ov: dict) -> Source:
    path = resolve_scenario_path(path)  # a path, else a shipped scenario's name (sandbox.scenario.shipped)
    if not path.exists():
        raise ExportError(
            f"{path}: no such file or directory; expected a scenario TOML, a run directory, a sweep directory "
            "or the name of a shipped scenario (e.g. quickstart, max_lag, published/verl_fully_async)"
        )
    if path.is_file():
        if run_id or best:
            raise ExportError(
                "--run/--best select a run of a sweep or run directory; for a scenario file use --variant"
            )
        return _from_scenario_file(path, variant, ov)
    if (path / "sweep.json").exists():
        if variant:
            raise ExportError(
                "--variant applies to scenario files and multi-variant run directories; for a sweep use --run ID or --best METRIC"
            )
        return _from_sweep(path, run_id, best, lowest, ov)
    children = sorted(p.parent for p in path.glob("*/scenario.toml"))
    # a multi-variant run also keeps the whole scenario on top (scenario.toml, no summary.json): its variants are the runs
    if (path / "scenario.toml").exists() and not (children and not (path / "summary.json").exists()):
        if variant or run_id or best:
            raise ExportError(f"{path} is a single run; --variant/--run/--best are not needed")
        return _from_run_dir(path, ov, f"run directory `{path}`")
    if children:
        return _from_variant_runs(path, children, variant, run_id, best, lowest, ov)
    raise ExportError(
        f"{path}: not a run or sweep directory (no scenario.toml, */scenario.toml or sweep.json); "
        "expected a scenario TOML, the output of `sandbox run`, or the output of `sandbox sweep`"
    )


def _from_scenario_file(path: Path, variant: str | None, ov: dict) -> Source:
    """``--set`` overrides apply on top of the chosen variant (the variant's own overrides first)."""
    raw = read_toml(path)
    if "sweep" in raw or "base" in raw:
        raise ExportError(
            f"{path} is a sweep file; run it with `sandbox sweep` and export from its directory (--best or --run)"
        )
    names = list(validate_scenario(raw, str(path)).variants)
    if names and variant is None:
        raise ExportError(f"--variant: {path.name} has variants {', '.join(names)}; choose one")
    base = {k: v for k, v in raw.items() if k != "variants"}
    if variant is not None:
        variant = _pick_variant(variant, names, "variant", path.name)
        base = apply_overrides(base, raw["variants"][variant])
    chosen = _validated(base, ov, f"{display_name(path)} variant '{variant}'" if variant else display_name(path))
    where = f"scenario `{display_name(path)}`" + (f", variant `{variant}`" if variant else "")
    label = (
        f"{path.stem}-{safe_name(variant)}" if variant else path.stem
    )  # a directory name (promote/<label>-<framework>)
    return Source(chosen, where + _overrides_text(ov), label, ov)


def _validated(raw: dict, ov: dict, label: str) -> Scenario:
    """``raw`` with the ``--set`` overrides, validated; a problem the overrides cause is blamed on them
    (:func:`sandbox.scenario.load.blame_overrides`)."""
    try:
        return validate_scenario(apply_overrides(raw, ov), label)
    except ScenarioError as exc:
        raise blame_overrides(exc, raw, ov, ov, label) from None


def _pick_variant(asked: str, names: list[str], kind: str, where: str) -> str:
    """The variant that ``asked`` names among ``names`` (a scenario file's variant names, or a run
    directory's variant directories): by its name or by its directory name. A variant's directory
    is its name made safe (:func:`sandbox.base.outputs.safe_name`: ``"a/b"`` becomes ``a-b``), distinct
    per variant, so a run directory accepts the variant's original name as well as the directory's."""
    if asked in names:
        return asked
    matches = [n for n in names if safe_name(n) == safe_name(asked)] if safe_name(asked) else []
    if len(matches) == 1:
        return matches[0]
    raise ExportError(f"--variant: no {kind} {asked!r} in {where}; expected one of {', '.join(names) or '(none)'}")


def _overrides_text(ov: dict) -> str:
    return (" with overrides " + ", ".join(f"`{k}={v}`" for k, v in ov.items())) if ov else ""


def _from_run_dir(run: Path, ov: dict, where: str, label: str | None = None) -> Source:
    """``label`` names the default output directory (``promote/<label>-<framework>``): by default the
    run directory's own name; a variant or sweep run passes its parent's name with it, so two run
    directories with the same variants never share a default folder."""
    scn = _validated(read_toml(run / "scenario.toml"), ov, str(run / "scenario.toml"))
    status = "finished" if (run / "summary.json").exists() else "did not finish (no summary.json)"
    return Source(
        scn, f"{where} (resolved scenario.toml; the run {status}){_overrides_text(ov)}", label or run.name, ov
    )


def _summary(run: Path) -> dict | None:
    """A run's ``summary.json``; None when it is missing or damaged (not a JSON object)."""
    try:
        summary = read_json(run / "summary.json", "run summary")  # bounded, regular files only
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def _metric(summary: dict | None, metric: str) -> float:
    v = (summary or {}).get(metric)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _rank(
    groups: dict[str, list[str]], summaries: dict[str, dict | None], best: str, lowest: bool, out: Path, where: str
) -> list[tuple[float, int, int, str]]:
    """``(mean, completed runs, diverged runs, group)`` of every group of runs (ids) with a value for
    ``best`` among its completed runs, best first (ties in ``groups``' order)."""
    done = [s for s in summaries.values() if s is not None]
    _check_metric(best, done, out)
    scored = []
    for key, members in groups.items():
        ss = [summaries[m] or {} for m in members]
        vals = [v for s in ss if s.get("status") == "completed" and not math.isnan(v := _metric(s, best))]
        if vals:
            scored.append((sum(vals) / len(vals), len(vals), sum(s.get("status") == "diverged" for s in ss), key))
    if not scored:
        raise ExportError(f"--best: no completed run {where} has a value for {best!r}{_why_missing(best, done)}")
    return sorted(scored, key=lambda t: t[0], reverse=not lowest)


def _from_variant_runs(out: Path, runs: list[Path], variant, run_id, best, lowest, ov) -> Source:
    names = [r.name for r in runs]
    pick = variant or run_id
    if pick:
        pick = _pick_variant(pick, names, "run", str(out))
        return _from_run_dir(out / pick, ov, f"run directory `{out / pick}`", f"{out.name}-{pick}")
    if not best:
        raise ExportError(f"{out} holds runs {', '.join(names)}: choose one with --variant NAME or --best METRIC")
    scored = _rank({n: [n] for n in names}, {r.name: _summary(r) for r in runs}, best, lowest, out, f"in {out}")
    winner = scored[0][3]
    src = _from_run_dir(out / winner, ov, f"run `{out / winner}`", f"{out.name}-{winner}")
    src.provenance += (
        f". Chosen by {'lowest' if lowest else 'highest'} `{best}` among the completed runs: "
        + ", ".join(f"{n} {v:.4g}" for v, _, _, n in scored)
    )
    return src


def _why_missing(metric: str, summaries) -> str:
    """Why the runs have no value for a comparison field (their ``speedup_reason`` or
    ``time_to_target_reason``), for the error message; empty for other metrics."""
    if metric not in COMPARISON_FIELDS:
        return ""
    field = (
        "speedup_reason"
        if metric.startswith(("speedup", "throughput_gain", "sample_efficiency"))
        else "time_to_target_reason"
    )
    reasons = list(dict.fromkeys(str(s.get(field)) for s in summaries if s.get(field)))
    return f" ({'; '.join(reasons[:3])})" if reasons else ""


def _check_metric(metric: str, summaries: list[dict], where: Path) -> None:
    if metric in COMPARISON_FIELDS and any(metric in s for s in summaries):
        return  # known, even where no run has a value (the ranking says why)
    available = list(
        dict.fromkeys(
            k for s in summaries for k, v in s.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        )
    )
    if metric not in available:
        raise ExportError(
            f"--best: unknown metric {metric!r} in {where}; expected one of {', '.join(available) or '(no finished runs)'}"
        )


def _from_sweep(out: Path, run_id: str | None, best: str | None, lowest: bool, ov: dict) -> Source:
    from sandbox.sweep.results import param_columns, read_manifest, run_dir
    from sandbox.sweep.spec import value_label

    try:
        manifest = read_manifest(out)
        entries = manifest["runs"]
    except (FileNotFoundError, KeyError, TypeError) as exc:
        raise ExportError(f"{out}: unreadable sweep manifest ({exc})") from None
    ids = [e["id"] for e in entries]
    if run_id:
        if run_id not in ids:
            raise ExportError(
                f"--run: no run {run_id!r} in sweep {out}; expected one of {', '.join(ids[:12])}{' ...' if len(ids) > 12 else ''}"
            )
        if not (run_dir(out, run_id) / "scenario.toml").exists():
            raise ExportError(f"--run: run {run_id} of {out} has no resolved scenario.toml (it has not run yet)")
        return _from_run_dir(run_dir(out, run_id), ov, f"run `{run_id}` of sweep `{out}`", f"{out.name}-{run_id}")
    if not best:
        raise ExportError(f"{out} is a sweep of {len(ids)} runs: choose one with --run ID or --best METRIC")
    summaries = {e["id"]: _summary(run_dir(out, e["id"])) for e in entries}
    if best in COMPARISON_FIELDS:
        summaries = _with_sweep_comparison(out, entries, summaries)
    keys = param_columns(out)
    groups: dict[str, list[dict]] = {}
    for e in entries:
        groups.setdefault(json.dumps({k: e["params"].get(k) for k in keys}, sort_keys=True, default=str), []).append(e)
    scored = _rank(
        {g: [m["id"] for m in ms] for g, ms in groups.items()}, summaries, best, lowest, out, f"of sweep {out}"
    )
    mean, n, diverged, top = scored[0]
    chosen = next(m for m in groups[top] if (run_dir(out, m["id"]) / "scenario.toml").exists())

    def label(g):
        return ", ".join(f"{k}={value_label(groups[g][0]['params'].get(k))}" for k in keys)

    ranking = "; ".join(
        f"{label(g)}: {m:.4g} over {k} seed(s)" + (f", {d} diverged" if d else "") for m, k, d, g in scored[:5]
    )
    src = _from_run_dir(
        run_dir(out, chosen["id"]), ov, f"run `{chosen['id']}` of sweep `{out}`", f"{out.name}-{chosen['id']}"
    )
    src.provenance += (
        f". Chosen by {'lowest' if lowest else 'highest'} mean `{best}` over seeds ({label(top)}: "
        f"{mean:.4g} over {n} completed seed(s)"
        + (f", {diverged} diverged" if diverged else "")
        + f"). Top configurations: {ranking}"
    )
    return src


def _with_sweep_comparison(out: Path, entries: list[dict], summaries: dict) -> dict:
    """``summaries`` with the comparison fields replaced by the sweep's (:data:`COMPARISON_FIELDS`)."""
    import pandas as pd

    from sandbox.sweep.results import result_row, results_frame, with_time_to_target

    df = with_time_to_target(results_frame([result_row(e, out) for e in entries]), out)
    fields = [k for k in (*COMPARISON_FIELDS, "speedup_reason", "time_to_target_reason") if k in df.columns]
    plain = lambda v: (
        None if v is None or (not isinstance(v, str) and pd.isna(v)) else (v if isinstance(v, str) else float(v))
    )
    return {
        **summaries,
        **{
            row["id"]: {**summaries[row["id"]], **{k: plain(row[k]) for k in fields}}
            for _, row in df.iterrows()
            if summaries.get(row["id"]) is not None
        },
    }
