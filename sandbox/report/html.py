"""``sandbox report DIR``: one self-contained HTML page (figures embedded as data URIs, inline CSS,
no scripts, no network) that opens in any browser offline.

DIR may be a sweep directory (``sweep.json``: the sweep's figures, the base scenario, the sweep
file and the table of runs) or the output of ``sandbox run`` (one run directory, or one per
variant: their figures, scenarios and summaries).
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import time
from pathlib import Path

import pandas as pd

from sandbox.base.outputs import TIME_TO_TARGET, write_text
from sandbox.base.readfile import TOML_LIMIT, InputFileError, read_json, read_text, read_toml_text
from sandbox.report.figures import Figure, reward_metric, sweep_figures

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; line-height: 1.45; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
.meta { color: #666; font-size: 0.9em; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #444; } figcaption b { color: #222; }
table { border-collapse: collapse; font-size: 0.8em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: right; vertical-align: top; }
th { background: #f4f4f4; position: sticky; top: 0; } td.text, th.text { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
.scroll { max-height: 32em; overflow: auto; border: 1px solid #eee; }
pre { background: #f7f7f7; padding: 0.8em; overflow: auto; font-size: 0.8em; border: 1px solid #eee; }
.status-diverged { color: #b35c00; font-weight: bold; } .status-failed { color: #c00; font-weight: bold; }
nav a { margin-right: 1em; }
"""


def _img(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"data:image/png;base64,{data}"


def _figure_html(fig: Figure) -> str:
    return (
        f'<figure id="fig-{html.escape(fig.name)}"><img alt="{html.escape(fig.title)}" src="{_img(fig.path)}">'
        f"<figcaption><b>{html.escape(fig.title)}.</b> {html.escape(fig.caption)}</figcaption></figure>"
    )


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.4g}"
    return str(v)


def _table(df: pd.DataFrame, text_cols: set[str] | None = None) -> str:
    text_cols = text_cols or set()
    head = "".join(f'<th class="{"text" if c in text_cols else ""}">{html.escape(str(c))}</th>' for c in df.columns)
    body = []
    for _, row in df.iterrows():
        cells = []
        for c in df.columns:
            v = row[c]
            cls = "text" if c in text_cols or isinstance(v, str) else ""
            if c == "status" and isinstance(v, str):
                cls += f" status-{v}"
            cells.append(f'<td class="{cls.strip()}">{html.escape(_fmt(v))}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _page(title: str, sections: list[tuple[str, str]], meta: str = "") -> str:
    nav = "".join(f'<a href="#{sid}">{html.escape(name)}</a>' for name, sid in [(s[0], _sid(s[0])) for s in sections])
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{meta}</p>' if meta else "",
        f"<nav>{nav}</nav>",
    ]
    for name, content in sections:
        parts.append(f'<h2 id="{_sid(name)}">{html.escape(name)}</h2>{content}')
    parts.append("</body></html>")
    return "\n".join(parts)


def _sid(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-")


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


# ------------------------------------------------------------------------------------------------
# sweep report
# ------------------------------------------------------------------------------------------------

RUN_COLUMNS = [
    "status",
    "final_expected_reward",
    "final_reward",
    "final_loss",
    "throughput_samples_per_s",
    "time_to_target",
    "steps_to_target",
    "speedup_vs_sync",
    "staleness_mean",
    "staleness_max",
    "ess_ratio_mean",
    "grad_cos_mean",
    "diverged_replicas",
    "replicas",
    "steps_done",
    "sim_time",
    "wall_s",
    "error",
]


def sweep_report(out: Path, path: Path) -> Path:
    from sandbox.sweep.api import load_results, read_manifest, refresh
    from sandbox.sweep.spec import display_keys

    manifest = read_manifest(out)
    refresh(out)  # the tables reflect exactly what is on disk
    results = load_results(out)
    figs = sweep_figures(out, out / "figures")
    keys = [k for k in display_keys(manifest["axes"]) if k in results.columns]
    cols = ["id", *keys, "seed"] + [c for c in RUN_COLUMNS if c in results.columns and results[c].notna().any()]
    counts = results.status.value_counts().to_dict() if len(results) else {}
    meta = (
        f"{len(results)} runs ({', '.join(f'{n} {s}' for s, n in counts.items())}); "
        f"axes: {html.escape(' x '.join('+'.join(g) for g in manifest['axes']) or 'none')}; "
        f"seeds: {html.escape(str(manifest.get('seeds')))}; written {time.strftime('%Y-%m-%d %H:%M')}"
    )
    sections = []
    if manifest.get("description"):
        sections.append(("About", f"<p>{html.escape(manifest['description'])}</p>"))
    sections.append(("Figures", "".join(_figure_html(f) for f in figs) or "<p>No finished runs yet.</p>"))
    summary = _summary_by_combination(results, keys, out)
    if summary is not None:
        rule = (
            results["target_rule"].dropna().iloc[0]
            if "target_rule" in results and results["target_rule"].notna().any()
            else ""
        )
        note = (
            (
                f"<p>Time to target: {html.escape(str(results['target_metric'].dropna().iloc[0]))} {html.escape(rule)} "
                "(per configuration; docs/time_to_target.md). End-to-end speed-up = time to target of the synchronous "
                "baseline / this configuration's = throughput gain × sample-efficiency ratio; 95% percentile bootstrap "
                "intervals over seeds.</p>"
            )
            if rule
            else ""
        )
        sections.append(("Summary (mean ± std over seeds)", note + _table(summary, set(keys) | {"note"})))
    sections.append(("Runs", _table(results[cols], set(keys) | {"id", "status", "error"})))
    scen = ""
    if (out / "sweep.toml").exists():
        scen += "<h3>Sweep file</h3>" + _pre(read_text(out / "sweep.toml", TOML_LIMIT, "sweep file"))
    else:
        scen += "<h3>Sweep</h3>" + _pre(
            json.dumps({k: manifest[k] for k in ("axes", "seeds", "set")}, indent=2, default=str)
        )
    if (out / "base.toml").exists():
        scen += "<h3>Resolved scenario of the first run (every default explicit)</h3>" + _pre(
            read_text(out / "base.toml", TOML_LIMIT, "scenario file")
        )
    sections.append(("Scenario", scen))
    text = _page(f"Sweep: {manifest.get('name', out.name)}", sections, meta)
    write_text(path, text)
    return path


def _summary_by_combination(results: pd.DataFrame, keys: list[str], out: Path | None = None) -> pd.DataFrame | None:
    if not keys or results.empty:
        return None
    rcol, _, _ = reward_metric(results)
    metrics = [
        c
        for c in (rcol, "throughput_samples_per_s", "staleness_mean", "ess_ratio_mean", "grad_cos_mean")
        if c in results
    ]
    ok = results[results.status != "failed"]
    if ok.empty:
        return None
    g = ok.groupby(keys, sort=False, dropna=False)
    mean, std = g[metrics].mean(), g[metrics].std(ddof=1)
    summary = pd.DataFrame(index=mean.index)
    for c in metrics:  # mean ± sample standard deviation over seeds (the mean alone with one seed)
        summary[f"{c} (mean ± std)"] = [
            _fmt(m) if pd.isna(s) else f"{m:.4g} ± {s:.2g}" for m, s in zip(mean[c], std[c])
        ]
    summary.insert(0, "runs", g.size())
    summary.insert(1, "diverged", g["status"].apply(lambda s: int((s == "diverged").sum())))
    summary = summary.reset_index()
    if out is not None:
        summary = _with_time_to_target(summary, out)
    return summary


TTT_COLUMNS = {
    "time_to_target": "time to target (s)",
    "time_to_target_ci": "95% CI (s)",
    "speedup_vs_sync": "end-to-end speed-up vs sync",
    "speedup_ci": "95% CI",
    "throughput_gain_vs_sync": "throughput gain",
    "sample_efficiency_vs_sync": "sample-efficiency ratio",
    "note": "note",
}


def _with_time_to_target(summary: pd.DataFrame, out: Path) -> pd.DataFrame:
    """The configuration table with the time-to-target and speed-up columns (docs/time_to_target.md),
    in the order of :func:`sandbox.sweep.api.load_time_to_target` (one row per configuration, same order)."""
    from sandbox.sweep.results import load_time_to_target

    table = load_time_to_target(out)
    if table.empty or len(table) != len(summary):
        return summary

    def interval(lo, hi) -> str:
        return "" if lo is None or pd.isna(lo) else f"{lo:.3g} to {hi:.3g}"

    summary = summary.copy()
    summary["time_to_target"] = table["time_to_target"].to_numpy()
    summary["time_to_target_ci"] = [
        interval(a, b) for a, b in zip(table.time_to_target_ci_low, table.time_to_target_ci_high)
    ]
    summary["speedup_vs_sync"] = table["speedup_vs_sync"].to_numpy()
    summary["speedup_ci"] = [interval(a, b) for a, b in zip(table.speedup_ci_low, table.speedup_ci_high)]
    summary["throughput_gain_vs_sync"] = table["throughput_gain_vs_sync"].to_numpy()
    summary["sample_efficiency_vs_sync"] = table["sample_efficiency_vs_sync"].to_numpy()
    summary["note"] = [
        (r.speedup_reason or ("synchronous baseline" if r.synchronous else f"vs {r.baseline}"))
        + ("; intervals over replicas of one timing schedule" if getattr(r, "one_schedule", False) else "")
        for r in table.itertuples()
    ]
    return summary.rename(columns=TTT_COLUMNS)


# ------------------------------------------------------------------------------------------------
# report of `sandbox run` output
# ------------------------------------------------------------------------------------------------


#: What each per-run figure shows (its caption in the run report).
RUN_FIGURE_CAPTIONS = {
    "learning_curves": (
        "Learning curve",
        "The headline metric against simulated time (left) and learner steps (right): thick, the mean over the "
        "run's replicas; thin, each replica (on its own clock under independent schedules); the title counts "
        "the collapsed ones.",
    ),
    "staleness_hist": (
        "Staleness of consumed groups",
        "How many versions old each consumed rollout group was (0 = generated by the weights it trains).",
    ),
    "diagnostics": (
        "Diagnostics per learner step",
        "ESS / N of the sequence importance weights (1 = on-policy), "
        "cosine of consecutive gradients, gradient norm (log axis; zero gradients counted, not drawn) "
        "and the mean lag of the batch.",
    ),
    "timeline": (
        "Timeline",
        "Each worker's jobs coloured by their lag when consumed, hatched when dropped, and the "
        "learner's training steps; the first quarter of the run.",
    ),
}
#: ESS / N below this level is called out in the generated summary (half the batch effectively lost).
ESS_ALERT = 0.5


REPORT_MAX_DEPTH = 4
REPORT_MAX_DIRS = 20_000
"""How far below DIR ``sandbox report`` looks for run directories (``summary.json``): a run's variants
are one level down, a folder of runs two or three; ``sandbox report /`` is refused instead of walking
the whole file system."""


def _summary_dirs(out: Path) -> set[Path]:
    """The directories holding a ``summary.json`` at most :data:`REPORT_MAX_DEPTH` levels below
    ``out`` (no link followed, hidden directories skipped); :class:`InputFileError` past
    :data:`REPORT_MAX_DIRS` directories."""
    found, seen = set(), 0
    for dirpath, dirnames, filenames in os.walk(out):
        seen += 1
        if seen > REPORT_MAX_DIRS:
            raise InputFileError(
                f"{out}: over {REPORT_MAX_DIRS:,} directories below it; expected the output of "
                "`sandbox run` or a sweep directory"
            )
        if "summary.json" in filenames:
            found.add(Path(dirpath))
        if len(Path(dirpath).relative_to(out).parts) >= REPORT_MAX_DEPTH:
            dirnames[:] = []
        else:
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    return found


def _run_dirs(out: Path) -> list[Path]:
    """The run directories below ``out``, the synchronous baseline first (the variant the others'
    speed-up is measured against), then by name."""
    dirs = sorted(_summary_dirs(out), key=lambda p: (len(p.parts), str(p)))
    summaries = {d: _summary(d) for d in dirs}
    baselines = {s.get("speedup_baseline") for s in summaries.values()} - {None, ""}
    return sorted(dirs, key=lambda d: (d.name not in baselines, len(d.parts), str(d)))


def _summary(d: Path) -> dict:
    """A run's ``summary.json``; a damaged one is an :class:`InputFileError` naming the file."""
    s = read_json(d / "summary.json", "run summary")
    if not isinstance(s, dict):
        raise InputFileError(
            f"{d / 'summary.json'}: expected a JSON object (a run summary); the file is damaged: "
            "run again to rewrite it"
        )
    return s


def _replica_spread(d: Path, metric: str) -> tuple[float, float, int] | None:
    """Mean and standard deviation over replicas of the last 10% of steps of ``metric``."""
    import numpy as np

    try:
        with np.load(d / "replicas.npz") as z:
            key = metric.replace("/", "__")
            if key not in z.files:
                return None
            arr = z[key]
    except (OSError, ValueError):
        return None
    if arr.ndim != 2 or arr.shape[0] == 0:
        return None
    tail = arr[-max(1, arr.shape[0] // 10) :]
    per_replica = np.nanmean(tail, axis=0)
    per_replica = per_replica[np.isfinite(per_replica)]
    if per_replica.size == 0:
        return None
    return (
        float(per_replica.mean()),
        float(per_replica.std(ddof=1)) if per_replica.size > 1 else 0.0,
        int(per_replica.size),
    )


def _pm(mean: float, std: float) -> str:
    return f"{mean:.4g} ± {std:.2g}"


def _generated_summary(entries: list[tuple[str, Path, dict]]) -> str:
    """Sentences written from the measurements: fastest variant end to end, divergence, ESS alerts."""
    lines = []
    timed = [
        (label, s)
        for label, _, s in entries
        if s.get("speedup_vs_sync") is not None and label != s.get("speedup_baseline")
    ]
    if timed:
        label, s = max(timed, key=lambda x: x[1]["speedup_vs_sync"])
        base = s.get("speedup_baseline")
        verb = "faster" if s["speedup_vs_sync"] >= 1 else "slower"
        factor = s["speedup_vs_sync"] if s["speedup_vs_sync"] >= 1 else 1 / s["speedup_vs_sync"]
        gain = s.get("throughput_gain_vs_sync")
        extra = f", with {gain:.3g}× the samples per second" if gain else ""
        low, high = s.get("speedup_ci_low"), s.get("speedup_ci_high")
        ci = (
            f"95% CI {low:.3g}–{high:.3g}× of speed-up"
            if low is not None and high is not None
            else "no confidence interval: it needs two or more replicas"
        )
        lines.append(
            f"Fastest to the target ({html.escape(str(s.get('target_rule', '')))}): <b>{html.escape(label)}</b>, "
            f"{factor:.3g}× {verb} end to end than <b>{html.escape(str(base))}</b> "
            f"({ci}){extra}."
        )
    missed = [
        (label, s) for label, _, s in entries if s.get("time_to_target") is None and s.get("target_level") is not None
    ]
    for label, s in missed:
        lines.append(
            f"<b>{html.escape(label)}</b> did not reach the target: {html.escape(s.get('time_to_target_reason') or 'not reached')}."
        )
    for label, _, s in entries:
        if s.get("diverged_replicas"):
            first = min((x for x in s.get("diverged_at", []) if x >= 0), default=None)
            lines.append(
                f"<b>{html.escape(label)}</b> diverged in {s['diverged_replicas']} of {s['replicas']} replicas"
                + (f" (first at step {first})." if first is not None else ".")
            )
    for label, d, _ in entries:
        try:
            m = pd.read_parquet(d / "metrics.parquet", columns=["step", "is/ess_ratio"])
        except Exception:  # no ESS logged (the quadratic oracle) or an unreadable table
            continue
        ess = m["is/ess_ratio"].dropna()
        if len(ess) and ess.min() < ESS_ALERT:
            below = m.loc[ess.index[ess < ESS_ALERT], "step"]
            lines.append(
                f"<b>{html.escape(label)}</b>: ESS / N fell below {ESS_ALERT} at step {int(below.iloc[0])} "
                f"(minimum {ess.min():.3g}; {len(below)} of {len(ess)} steps below)."
            )
    if not lines:
        lines.append(
            "No variant diverged and ESS / N stayed above "
            f"{ESS_ALERT} everywhere; no time-to-target comparison was recorded."
        )
    items = "".join(f"<li>{line}</li>" for line in lines)
    return (
        '<p class="meta">Generated from the measurements in this directory (summary.json and metrics.parquet '
        f"of each run), not written by a person.</p><ul>{items}</ul>"
    )


def runs_report(out: Path, path: Path) -> Path:
    run_dirs = _run_dirs(out)
    if not run_dirs:
        raise FileNotFoundError(f"{out}: no sweep.json and no run directory (summary.json) below it")
    entries = []
    rows = []
    for d in run_dirs:
        s = _summary(d)
        label = str(d.relative_to(out)) if d != out else d.name
        entries.append((label, d, s))
        metric = s.get("target_metric") or (
            "eval/expected_reward" if not _nan(s.get("final_expected_reward")) else "reward/mean"
        )
        spread = _replica_spread(d, metric)
        ttt = s.get("time_to_target_replicas") or []
        ttt = [t for t in ttt if t is not None]
        speed = s.get("speedup_vs_sync")
        rows.append(
            {
                "run": label,
                "status": s.get("status"),
                f"final {metric} (mean ± std over replicas)": _pm(*spread[:2])
                if spread
                else _fmt(s.get("final_reward")),
                "time to target (s, mean ± std)": (
                    _pm(float(pd.Series(ttt).mean()), float(pd.Series(ttt).std(ddof=1)) if len(ttt) > 1 else 0.0)
                    if ttt
                    else ("not reached" if s.get("target_level") is not None else "-")
                ),
                "end to end vs sync [95% CI]": (
                    f"{speed:.3g}× [{s['speedup_ci_low']:.3g}, {s['speedup_ci_high']:.3g}]"
                    if speed is not None
                    and s.get("speedup_ci_low") is not None
                    and s.get("speedup_ci_high") is not None
                    else f"{speed:.3g}×"
                    if speed is not None
                    else "-"
                ),
                "throughput (samples/s)": s.get("throughput_samples_per_s"),
                "staleness mean / max": f"{_fmt(s.get('staleness_mean'))} / {s.get('staleness_max')}",
                "ESS/N mean": s.get("ess_ratio_mean"),
                "grad cos mean": s.get("grad_cos_mean"),
                "diverged replicas": f"{s.get('diverged_replicas', 0)} / {s.get('replicas')}",
            }
        )
    table = pd.DataFrame(rows)
    first_scenario = run_dirs[0] / "scenario.toml"
    sections = []
    description = ""
    if first_scenario.exists():
        try:
            description = str(read_toml_text(first_scenario, "scenario file").get("description", ""))
        except InputFileError:
            description = ""
    if description:
        sections.append(("About", f"<p>{html.escape(description)}</p>"))
    sections.append(("What this shows", _generated_summary(entries)))
    note = (
        '<p class="meta">The synchronous baseline comes first. ± is the standard deviation over the run\'s '
        "replicas (independent policies trained under the same schedule); the speed-up interval is a bootstrap "
        "over replicas (docs/time_to_target.md).</p>"
    )
    sections.append(
        (
            "Summary",
            note + _table(table, set(table.columns) - {"throughput (samples/s)", "ESS/N mean", "grad cos mean"}),
        )
    )
    figs_html = []
    comparison = out / "comparison.png"
    if comparison.exists():
        figs_html.append(
            _figure_html(
                Figure(
                    "comparison",
                    comparison,
                    "Comparison of the variants",
                    "Reward against simulated time and against learner steps; ESS / N, "
                    "consecutive-gradient cosine and gradient norm per step (rolling means).",
                )
            )
        )
    ttt_fig = out / TIME_TO_TARGET
    if ttt_fig.exists():
        figs_html.append(
            _figure_html(
                Figure(
                    "time-to-target",
                    ttt_fig,
                    "Time to target",
                    "The headline metric against simulated time, the target as a dashed line "
                    "and each variant's crossing marked.",
                )
            )
        )
    for label, d, _ in entries:
        for png in sorted((d / "figures").glob("*.png")):
            name = f"{label}-{png.stem}".replace("/", "-")
            title, caption = RUN_FIGURE_CAPTIONS.get(png.stem, (png.stem.replace("_", " "), ""))
            figs_html.append(_figure_html(Figure(name, png, f"{label}: {title}", caption)))
    sections.append(("Figures", "".join(figs_html) or "<p>The runs wrote no figures (run.figures = false).</p>"))
    scen = ""
    for label, d, _ in entries:
        if (d / "scenario.toml").exists():
            scen += f"<h3>{html.escape(label)}</h3>" + _pre(read_text(d / "scenario.toml", TOML_LIMIT, "scenario file"))
    sections.append(("Scenario", scen))
    title = entries[0][2].get("title") or out.name
    write_text(
        path,
        _page(
            f"Run: {title}",
            sections,
            f"{len(run_dirs)} run(s) in {html.escape(str(out))}; written {time.strftime('%Y-%m-%d %H:%M')}",
        ),
    )
    return path


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def write_report(out: str | Path, path: str | Path | None = None) -> Path:
    """Write ``report.html`` for a sweep directory or a ``sandbox run`` output; returns its path."""
    out = Path(out)
    if not out.is_dir():
        raise FileNotFoundError(f"{out}: not a directory")
    path = Path(path) if path else out / "report.html"
    written = sweep_report(out, path) if (out / "sweep.json").exists() else runs_report(out, path)
    if (out / "explorer.html").is_file():  # `sandbox explore --out` the same directory: link to it
        _link_explorer(written, out / "explorer.html")
    return written


def _link_explorer(report: Path, explorer: Path) -> None:
    """Insert a link to the interactive explorer (``sandbox explore``) under the report's title."""
    href = html.escape(Path(os.path.relpath(explorer.resolve(), report.resolve().parent)).as_posix())
    text = report.read_text(encoding="utf-8")
    link = (
        f'<p class="meta"><a href="{href}">Interactive staleness explorer</a> '
        "(precomputed runs; move the lag, learning rate and method)</p>"
    )
    report.write_text(text.replace("</h1>", "</h1>\n" + link, 1), encoding="utf-8")
