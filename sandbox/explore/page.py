"""The explorer's page: one self-contained HTML file (data as JSON, the drawing code inline, no
server, no CDN, no library). The bytes depend only on the data: no timestamp, sorted JSON keys."""

from __future__ import annotations

import html
import json
from importlib import resources
from pathlib import Path

from sandbox.explore.texts import INTRO, PANELS, TOUR_DEFAULTS, TOURS

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1220px;padding:0 18px 40px;color:#1a1a1a;line-height:1.45}
h1{font-size:1.5rem;margin:18px 0 4px}h2{font-size:1.15rem;margin:22px 0 6px}
#controls{position:sticky;top:0;background:#fff;border:1px solid #bbb;border-radius:6px;padding:8px 12px;z-index:2;
 display:flex;flex-wrap:wrap;gap:10px 26px;align-items:center}
#controls label{font-weight:600;margin-right:6px}#controls output{font-variant-numeric:tabular-nums;min-width:2.5em;display:inline-block}
input[type=range]{width:130px;vertical-align:middle}select,input,button{font-size:0.95rem}
:focus-visible{outline:3px solid #D55E00;outline-offset:2px}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(520px,100%),1fr));gap:14px}
figure.highlight{outline:4px solid #D55E00;outline-offset:2px}
#headline{background:#fff7e6;border:1px solid #e6c07a;border-radius:6px;padding:8px 12px;margin:10px 0}
.table-wrap{overflow-x:auto}
@media (max-width:600px){body{padding:0 8px 30px}#controls{gap:2px 10px;padding:4px 6px;font-size:0.82rem}
 #controls label{margin-right:3px}input[type=range]{width:84px}select{max-width:150px;font-size:0.82rem}
 table.numbers{font-size:0.8rem}table.numbers td,table.numbers th{padding:2px 4px}}
figure{margin:0;border:1px solid #ddd;border-radius:6px;padding:8px}figcaption{font-size:0.9rem}
svg.chart{width:100%;height:auto;display:block}
svg text{font-size:12px;fill:#222}svg .title{font-size:14px;font-weight:600}svg .label{font-size:12.5px}
svg .grid{stroke:#e4e4e4}svg.hl rect.gen:not(.on){opacity:0.12}
.replay{grid-column:1/-1;display:flex;flex-wrap:wrap;gap:6px;align-items:center}svg .box{fill:none;stroke:#888}svg .legend-bg{fill:#fff;opacity:0.85}
.alt{font-size:0.9rem;background:#f4f4f4;padding:4px 8px;border-radius:4px}
table.numbers{border-collapse:collapse;font-size:0.92rem}table.numbers td,table.numbers th{border:1px solid #ccc;padding:3px 9px;text-align:right}
table.numbers th{background:#f0f0f0}.tour li{margin:3px 0}.tour button{margin-right:6px}
.swatch{display:inline-block;width:22px;height:4px;vertical-align:middle;margin-left:8px}
code{background:#f2f2f2;padding:0 3px;border-radius:3px}#selftest{white-space:pre-wrap;font-size:11px}
"""

ERRORS = (
    "<script>window.__errors=[];window.addEventListener('error',e=>window.__errors.push(String(e.message)));</script>"
)


def _figure(cid: str, alt_id: str, panel: str) -> str:
    title, text = PANELS[panel]
    return (
        f'<figure><svg class="chart" id="{cid}" role="img" aria-label="{html.escape(title)}" '
        f'aria-describedby="{alt_id}"></svg><figcaption><p>{text}</p>'
        f'<p class="alt" id="{alt_id}" aria-live="polite"></p></figcaption></figure>'
    )


def _tours() -> str:
    """The tours as ordered lists; each step's button is named by what it shows and carries its
    settings (every control, plus the chart to scroll to and highlight)."""
    parts = []
    for name, (intro, steps) in TOURS.items():
        items = "".join(
            f"<li><button type=\"button\" data-set='{html.escape(json.dumps({**TOUR_DEFAULTS, **s, 'focus': focus}, sort_keys=True))}'>"
            f"{html.escape(button)}</button> {text}</li>"
            for button, text, s, focus in steps
        )
        parts.append(f'<section class="tour"><h3>{html.escape(name)}</h3><p>{intro}</p><ol>{items}</ol></section>')
    return "".join(parts)


def render(data: dict) -> str:
    """The page's HTML for the explorer's data (:func:`sandbox.explore.data.compute_page`, or one task's)."""
    if "tasks" not in data:  # one task's grid (:func:`sandbox.explore.data.compute`)
        data = {"tasks": [data]}
    js = resources.files(__package__).joinpath("explorer.js").read_text(encoding="utf-8")
    payload = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    numbers = "".join(
        f'<tr><th scope="row"{label[1]}>{label[0]}</th><td id="n-{k}"></td><td id="r-{k}"></td></tr>'
        for k, label in (
            ("ttt", ("time to target", ' id="ttt-label"')),
            ("final", ("final score", ' id="final-label"')),
            ("collapsed", ("collapsed replicas", "")),
            ("time", ("simulated time (s)", "")),
            ("ess", ("mean ESS / N", "")),
            ("stale", ("mean lag (versions)", "")),
            ("cos", ("mean gradient cosine", "")),
            ("lrscale", ("mean LR scale (method)", "")),
            ("clip", ("fraction clipped (method)", "")),
            ("mask", ("fraction masked (method)", "")),
            ("skip", ("fraction of steps skipped", "")),
            ("proj", ("fraction of steps projected (GAC)", "")),
            ("dropped", ("groups dropped by the lag bound", "")),
        )
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Staleness explorer: asynchronous RL in the simulator</title>{ERRORS}<style>{CSS}</style></head>
<body>
<h1>Staleness explorer</h1>
<p>{INTRO}</p>
<p><small><span id="setup"></span> Written by <code>sandbox explore</code>; works offline.</small></p>
<form id="controls" aria-label="choose a run" onsubmit="return false">
 <span id="task-row"><label for="ctl-task">task</label><select id="ctl-task"></select></span>
 <span><label for="ctl-tail">delay tail</label><select id="ctl-tail"></select></span>
 <span><label for="ctl-lag">lag bound k_max</label><input type="range" id="ctl-lag" min="0" step="1" value="0"
   aria-describedby="out-lag"> <output id="out-lag" for="ctl-lag"></output></span>
 <span><label for="ctl-lr">learning rate</label><input type="range" id="ctl-lr" min="0" step="1" value="0"
   aria-describedby="out-lr"> <output id="out-lr" for="ctl-lr"></output></span>
 <span><label for="ctl-method">method</label><select id="ctl-method"></select></span>
 <span id="engine-row"><input type="checkbox" id="ctl-engine"> <label for="ctl-engine">engine mismatch: <span id="engine-label"></span></label></span>
 <span><input type="checkbox" id="ctl-all"> <label for="ctl-all">overlay the other methods</label></span>
</form>
<p id="headline" aria-live="polite"></p>
<h2>The selected run in numbers</h2>
<div class="table-wrap"><table class="numbers"><caption>run <code id="n-run"></code></caption>
<tr><th></th><th scope="col">asynchronous (selected)</th><th scope="col">synchronous reference</th></tr>{numbers}</table></div>
<h2>What the learner sees</h2>
<p id="method-key" class="alt" hidden></p>
<div class="grid2">
{_figure("c-reward-time", "alt-reward", "reward_time")}
{_figure("c-reward-step", "alt-reward-step", "reward_step")}
{_figure("c-phase", "alt-phase", "phase")}
{_figure("c-theory", "alt-theory", "theory")}
{_figure("c-ess", "alt-ess", "ess")}
{_figure("c-cos", "alt-cos", "cos")}
<div id="replay" class="replay" role="group" aria-label="replay of the event log"><button type="button" id="replay-play">Play the event log</button>
 <button type="button" id="replay-step">Step the replay forward</button> <button type="button" id="replay-reset">Show the whole window</button>
 <output id="replay-clock">whole window</output> <small>(the two timelines and the histogram follow the clock)</small></div>
{_figure("c-timeline", "alt-timeline", "timeline")}
{_figure("c-hist", "alt-hist", "hist")}
{_figure("c-timeline-sync", "alt-timeline-sync", "timeline_sync")}
</div>
<h2>What to try</h2>
<p>Each button moves the controls, scrolls to the chart it talks about and outlines it.</p>
{_tours()}
<pre id="selftest" hidden></pre>
<script type="application/json" id="data">{payload}</script>
<script>{js}</script>
</body></html>
"""


def write_page(data: dict, out_dir: str | Path) -> Path:
    """Write ``out_dir/explorer.html`` and return its path."""
    path = Path(out_dir) / "explorer.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(data), encoding="utf-8")
    return path
