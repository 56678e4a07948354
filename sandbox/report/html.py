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
import time
from pathlib import Path

import pandas as pd

from ..outputs import TIME_TO_TARGET, write_text
from .figures import Figure, reward_metric, sweep_figures

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
    from ..sweep import load_results, read_manifest, refresh
    from ..sweep.spec import display_keys

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
        rule = results["target_rule"].dropna().iloc[0] if "target_rule" in results and results["target_rule"].notna().any() else ""
        note = (f"<p>Time to target: {html.escape(str(results['target_metric'].dropna().iloc[0]))} {html.escape(rule)} "
                "(per configuration; docs/time_to_target.md). End-to-end speed-up = time to target of the synchronous "
                "baseline / this configuration's = throughput gain × sample-efficiency ratio; 95% percentile bootstrap "
                "intervals over seeds.</p>") if rule else ""
        sections.append(("Summary (mean over seeds)", note + _table(summary, set(keys) | {"note"})))
    sections.append(("Runs", _table(results[cols], set(keys) | {"id", "status", "error"})))
    scen = ""
    if (out / "sweep.toml").exists():
        scen += "<h3>Sweep file</h3>" + _pre((out / "sweep.toml").read_text())
    else:
        scen += "<h3>Sweep</h3>" + _pre(json.dumps({k: manifest[k] for k in ("axes", "seeds", "set")}, indent=2, default=str))
    if (out / "base.toml").exists():
        scen += "<h3>Resolved scenario of the first run (every default explicit)</h3>" + _pre((out / "base.toml").read_text())
    sections.append(("Scenario", scen))
    text = _page(f"Sweep: {manifest.get('name', out.name)}", sections, meta)
    write_text(path, text)
    return path


def _summary_by_combination(results: pd.DataFrame, keys: list[str], out: Path | None = None) -> pd.DataFrame | None:
    if not keys or results.empty:
        return None
    rcol, _, _ = reward_metric(results)
    metrics = [c for c in (rcol, "throughput_samples_per_s", "staleness_mean", "ess_ratio_mean", "grad_cos_mean") if c in results]
    ok = results[results.status != "failed"]
    if ok.empty:
        return None
    g = ok.groupby(keys, sort=False, dropna=False)
    summary = g[metrics].mean()
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
    in the order of :func:`sandbox.sweep.load_time_to_target` (one row per configuration, same order)."""
    from ..sweep.results import load_time_to_target

    table = load_time_to_target(out)
    if table.empty or len(table) != len(summary):
        return summary

    def interval(lo, hi) -> str:
        return "" if lo is None or pd.isna(lo) else f"{lo:.3g} to {hi:.3g}"

    summary = summary.copy()
    summary["time_to_target"] = table["time_to_target"].to_numpy()
    summary["time_to_target_ci"] = [interval(a, b) for a, b in zip(table.time_to_target_ci_low, table.time_to_target_ci_high)]
    summary["speedup_vs_sync"] = table["speedup_vs_sync"].to_numpy()
    summary["speedup_ci"] = [interval(a, b) for a, b in zip(table.speedup_ci_low, table.speedup_ci_high)]
    summary["throughput_gain_vs_sync"] = table["throughput_gain_vs_sync"].to_numpy()
    summary["sample_efficiency_vs_sync"] = table["sample_efficiency_vs_sync"].to_numpy()
    summary["note"] = [r.speedup_reason or ("synchronous baseline" if r.synchronous else f"vs {r.baseline}")
                       for r in table.itertuples()]
    return summary.rename(columns=TTT_COLUMNS)


# ------------------------------------------------------------------------------------------------
# report of `sandbox run` output
# ------------------------------------------------------------------------------------------------


def runs_report(out: Path, path: Path) -> Path:
    run_dirs = sorted({p.parent for p in out.rglob("summary.json")}, key=lambda p: (len(p.parts), str(p)))
    if not run_dirs:
        raise FileNotFoundError(f"{out}: no sweep.json and no run directory (summary.json) below it")
    sections = []
    rows = []
    for d in run_dirs:
        s = json.loads((d / "summary.json").read_text())
        rows.append({"run": str(d.relative_to(out)) if d != out else d.name, **{k: v for k, v in s.items() if not isinstance(v, (dict, list))}})
    table = pd.DataFrame(rows)
    sections.append(("Summary", _table(table, {"run", "title", "status"})))
    figs_html = []
    comparison = out / "comparison.png"
    if comparison.exists():
        figs_html.append(_figure_html(Figure("comparison", comparison, "Comparison of the variants", "Reward against simulated time and against learner steps.")))
    if (out / TIME_TO_TARGET).exists():
        figs_html.append(_figure_html(Figure(
            "time-to-target", out / TIME_TO_TARGET, "Time to target",
            "The headline metric against simulated time (each replica smoothed by a centred running mean, then averaged), "
            "the target (dashed) and each variant's time to reach it, with its end-to-end speed-up against the "
            "synchronous variant (docs/time_to_target.md).")))
    for d in run_dirs:
        label = str(d.relative_to(out)) if d != out else d.name
        for png in sorted((d / "figures").glob("*.png")):
            name = f"{label}-{png.stem}".replace("/", "-")
            figs_html.append(_figure_html(Figure(name, png, f"{label}: {png.stem.replace('_', ' ')}", "")))
    sections.append(("Figures", "".join(figs_html) or "<p>The runs wrote no figures (run.figures = false).</p>"))
    scen = ""
    for d in run_dirs:
        if (d / "scenario.toml").exists():
            label = str(d.relative_to(out)) if d != out else d.name
            scen += f"<h3>{html.escape(label)}</h3>" + _pre((d / "scenario.toml").read_text())
    sections.append(("Scenario", scen))
    title = rows[0].get("title") or out.name
    write_text(path, _page(f"Run: {title}", sections, f"{len(run_dirs)} run(s) in {html.escape(str(out))}; written {time.strftime('%Y-%m-%d %H:%M')}"))
    return path


def write_report(out: str | Path, path: str | Path | None = None) -> Path:
    """Write ``report.html`` for a sweep directory or a ``sandbox run`` output; returns its path."""
    out = Path(out)
    if not out.is_dir():
        raise FileNotFoundError(f"{out}: not a directory")
    path = Path(path) if path else out / "report.html"
    if (out / "sweep.json").exists():
        return sweep_report(out, path)
    return runs_report(out, path)
