// The staleness explorer: draws the precomputed runs embedded in #data as SVG (no library).
// Written for `sandbox explore` (sandbox/explore/page.py); every chart is redrawn from the data of
// the selected grid point when a control changes.
"use strict";
(function () {
  const ALL = JSON.parse(document.getElementById("data").textContent);
  let DATA = ALL.tasks[0];  // the selected task's grid
  const SELFTEST = location.hash === "#selftest";
  const LINKED = location.hash;  // read before the first drawing rewrites it
  const PAL = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"];
  const SYNC = "#000000";
  const SHORT = {none: "no correction", tis: "TIS", vcpo: "VCPO", gac: "GAC", m2po: "M2PO", staleness_lr: "staleness LR"};  // legend labels
  const NS = "http://www.w3.org/2000/svg";
  const W = 560, H = 320, M = {l: 62, r: 16, t: 30, b: 46};  // M.t grows with the legend rows (frame)
  const $ = (id) => document.getElementById(id);
  const state = {};

  function el(tag, attrs, parent, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  // A number with d significant digits, trailing zeros of the fraction dropped (100 stays 100).
  function fmt(v, d) {
    if (v === null || v === undefined) return "n/a";
    v = Number(v);
    if (Math.abs(v) >= Math.pow(10, d || 3)) return String(Math.round(v));
    let s = v.toPrecision(d || 3);
    if (s.indexOf("e") < 0 && s.indexOf(".") >= 0) s = s.replace(/0+$/, "").replace(/\.$/, "");
    return s;
  }
  function ticks(lo, hi, n) {
    const span = hi - lo || 1, raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((s) => s * mag).find((s) => span / s <= n) || mag * 10;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(10));
    return out;
  }
  // decades on a log10 axis: every one, or every other when there are more than 6
  function logTicks(yr) {
    const lo = Math.ceil(yr[0]), hi = Math.floor(yr[1]), every = hi - lo > 6 ? 2 : 1, out = [];
    for (let v = lo; v <= hi; v += every) out.push(v);
    return out;
  }
  function extent(series, key, fixed) {
    if (fixed) return fixed;
    let lo = Infinity, hi = -Infinity;
    for (const s of series) for (const v of s[key]) if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (!isFinite(lo)) return [0, 1];
    if (lo === hi) { lo -= 0.5; hi += 0.5; }
    return [Math.min(lo, 0), hi];
  }
  // A path through (x, y); a null y ends the segment (an undefined value is a gap, not a zero).
  function pathD(xs, ys, sx, sy) {
    let d = "", pen = false;
    for (let i = 0; i < xs.length; i++) {
      if (ys[i] === null || xs[i] === null) { pen = false; continue; }
      d += (pen ? "L" : "M") + sx(xs[i]).toFixed(1) + " " + sy(ys[i]).toFixed(1);
      // an isolated value (gaps on both sides) is drawn as a dot: a zero-length segment with round caps
      if (!pen && (i + 1 >= xs.length || ys[i + 1] === null || xs[i + 1] === null)) d += "l0.01 0";
      pen = true;
    }
    return d;
  }
  function frame(svg, o) {
    svg.innerHTML = "";
    M.t = 30 + 15 * (o.legendRows || 0);
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const xr = o.xr, yr = o.yr;
    const sx = (x) => M.l + (x - xr[0]) / (xr[1] - xr[0] || 1) * (W - M.l - M.r);
    const sy = (y) => H - M.b - (y - yr[0]) / (yr[1] - yr[0] || 1) * (H - M.t - M.b);
    el("text", {x: W / 2, y: 18, "text-anchor": "middle", class: "title"}, svg, o.title);
    const g = el("g", {class: "axes"}, svg);
    for (const t of (o.xticks || ticks(xr[0], xr[1], 6))) {
      el("line", {x1: sx(t), x2: sx(t), y1: M.t, y2: H - M.b, class: "grid"}, g);
      el("text", {x: sx(t), y: H - M.b + 15, "text-anchor": "middle"}, g, fmt(t));
    }
    for (const t of (o.ylog ? logTicks(yr) : ticks(yr[0], yr[1], 5))) {
      el("line", {x1: M.l, x2: W - M.r, y1: sy(t), y2: sy(t), class: "grid"}, g);
      el("text", {x: M.l - 6, y: sy(t) + 4, "text-anchor": "end"}, g, o.ylog ? fmt(Math.pow(10, t), 2) : fmt(t));
    }
    el("rect", {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, class: "box"}, g);
    el("text", {x: (M.l + W - M.r) / 2, y: H - 8, "text-anchor": "middle", class: "label"}, g, o.xlabel);
    el("text", {x: 14, y: (M.t + H - M.b) / 2, "text-anchor": "middle", class: "label",
                transform: `rotate(-90 14 ${(M.t + H - M.b) / 2})`}, g, o.ylabel);
    return {sx, sy};
  }
  // Legends sit between the title and the plot, in rows, so they never cover data.
  const itemWidth = (it) => 34 + 6.4 * it.label.length;
  function legendRows(items) {
    let rows = items.length ? 1 : 0, x = M.l;
    for (const it of items) { if (x + itemWidth(it) > W - M.r && x > M.l) { rows++; x = M.l; } x += itemWidth(it); }
    return rows;
  }
  function legend(svg, items) {
    const g = el("g", {class: "legend"}, svg);
    let x = M.l, y = 38;
    for (const it of items) {
      if (x + itemWidth(it) > W - M.r && x > M.l) { x = M.l; y += 15; }
      el("line", {x1: x, x2: x + 22, y1: y - 4, y2: y - 4, stroke: it.color, "stroke-width": it.width || 2.2,
                  "stroke-dasharray": it.dash || ""}, g);
      el("text", {x: x + 27, y: y}, g, it.label);
      x += itemWidth(it);
    }
  }
  function lineChart(svg, o) {
    const xr = extent(o.series, "x", o.xr), yr = extent(o.series, "y", o.yr);
    const items = o.series.filter((s) => !s.nolegend);
    const {sx, sy} = frame(svg, Object.assign({}, o, {xr, yr, legendRows: legendRows(items)}));
    if (o.hline) {
      el("line", {x1: M.l, x2: W - M.r, y1: sy(o.hline.y), y2: sy(o.hline.y), stroke: PAL[5], "stroke-dasharray": "2 4",
                  "stroke-width": 1.5, class: "target"}, svg);
      el("text", {x: M.l + 6, y: sy(o.hline.y) - 4}, svg, o.hline.label);
    }
    for (const s of o.series) {
      el("path", {d: pathD(s.x, s.y, sx, sy), fill: "none", stroke: s.color, "stroke-width": s.width || 2.2,
                  "stroke-dasharray": s.dash || "", "stroke-linecap": "round", opacity: s.opacity || 1, class: "series", "data-series": s.id || s.label}, svg);
    }
    legend(svg, items);
    return {sx, sy, xr, yr, t: M.t};
  }

  const runKey = (s, method, sync) => [s.tail, s.engine, sync ? "sync" : DATA.axes.lags[s.lag], DATA.axes.lrs[s.lr],
    sync ? "none" : method].map(String).join("|");
  const methodColor = (m) => PAL[DATA.axes.methods.indexOf(m) % 7];
  function lrKey(v) { return String(Number(v)); }

  // the score as drawn: the quadratic's loss on a log10 axis (a diverged run is 1000x its start)
  const scoreY = (arr) => DATA.score.log ? arr.map((v) => v === null || !(v > 0) ? null : Math.log10(v)) : arr;
  function series(run, xs, ys, extra) { return Object.assign({x: run[xs], y: ys === "reward" ? scoreY(run[ys]) : run[ys]}, extra); }
  // every replica of a run as a thin line (the mean hides a collapsed one)
  const replicaLines = (run, xs, color, id) => run.rep_reward.map((r, i) => ({x: run[xs], y: scoreY(r), color: color, width: 0.9,
    opacity: 0.5, nolegend: true, id: `${id}-replica-${i}`}));
  const targetText = () => `${DATA.score.higher ? "≥" : "≤"} ${DATA.score.target}`;

  function draw() {
    const t0 = performance.now();
    const key = runKey(state, state.method, false), refKey = runKey(state, "none", true);
    const run = DATA.runs[key], ref = DATA.runs[refKey];
    const label = DATA.labels.methods[state.method];
    const short = (m) => SHORT[m] || m;
    const lag = DATA.axes.lags[state.lag];
    const others = state.all ? DATA.axes.methods.filter((m) => m !== state.method).map((m) => {
      const r = DATA.runs[runKey(state, m, false)];
      return {run: r, m};
    }) : [];
    const main = {color: methodColor(state.method), label: `async k_max=${lag}: ${short(state.method)}`, id: "async"};
    const sync = {color: SYNC, dash: "6 4", label: "synchronous reference", id: "sync"};
    const faded = (o, xs, ys) => series(o.run, xs, ys, {color: methodColor(o.m), width: 1.3, opacity: 0.8,
                                                          label: `async: ${short(o.m)}`, id: o.m, nolegend: true});
    const sc = DATA.score, ylab = sc.log ? `${sc.label} (log scale)` : `${sc.label} (exact)`;
    const yrS = sc.log ? undefined : [0, 1.02], legPos = sc.log ? "tr" : "br";
    const hline = {y: sc.log ? Math.log10(sc.target) : sc.target, label: `target ${targetText()}`};
    lineChart($("c-reward-time"), {title: `${sc.label} vs simulated time (thin: each replica)`, xlabel: "simulated time (s)",
      ylabel: ylab, yr: yrS, legend: legPos, ylog: sc.log, hline: hline,
      series: replicaLines(ref, "eval_time", "#777", "sync").concat(replicaLines(run, "eval_time", main.color, "async"),
        [series(ref, "eval_time", "reward", sync)], others.map((o) => faded(o, "eval_time", "reward")),
        [series(run, "eval_time", "reward", main)])});
    CROSS["c-reward-step"] = lineChart($("c-reward-step"), {title: `${sc.label} vs learner step`, xlabel: "learner step (optimizer updates)",
      ylabel: ylab, yr: yrS, legend: legPos, ylog: sc.log, hline: hline,
      series: replicaLines(run, "eval_step", main.color, "async").concat([series(ref, "eval_step", "reward", sync)],
        others.map((o) => faded(o, "eval_step", "reward")), [series(run, "eval_step", "reward", main)])});
    // with the overlay on, one colour key for all charts instead of crowded legends
    const keyEl = $("method-key");
    keyEl.innerHTML = "";
    keyEl.hidden = !state.all;
    if (state.all) {
      keyEl.appendChild(document.createTextNode("Thin lines, by colour: "));
      for (const m of DATA.axes.methods) {
        const sw = document.createElement("span");
        sw.className = "swatch";
        sw.style.background = methodColor(m);
        keyEl.appendChild(sw);
        keyEl.appendChild(document.createTextNode(` ${DATA.labels.methods[m]}${m === state.method ? " (selected, thick)" : ""}   `));
      }
    }
    drawHist(run, lag, null);
    drawPhase();
    const essSeries = [series(ref, "step", "ess", sync)].concat(others.map((o) => faded(o, "step", "ess")),
      [series(run, "step", "ess", main)]);
    const pred = DATA.theory.ess_init[state.engine];
    let predNote = "";
    if (pred) {
      const n = Math.min(6, run.step.length);
      essSeries.push({x: [0, run.step[n - 1]], y: [pred.expected_kish, pred.expected_kish], color: PAL[5], dash: "2 3",
        width: 3, label: "T12: engine mismatch at init", id: "t12"});
      predNote = ` Theory T12 predicts E[ESS/N] = ${fmt(pred.expected_kish)} at the initial policy from the engine's noise alone` +
        ` (population value ${fmt(pred.population)}; N = ${pred.n}); the synchronous run's first step measures ${fmt(ref.ess[0])}` +
        ` (the mean of ${DATA.setup.replicas} replicas' single batches: expect a spread of about ±0.1).`;
    }
    CROSS["c-ess"] = lineChart($("c-ess"), {title: "ESS / N of the importance weights", xlabel: "learner step", ylabel: "ESS / N",
      yr: [0, 1.02], series: essSeries, legend: "br"});
    CROSS["c-cos"] = lineChart($("c-cos"), {title: "cosine of consecutive gradients", xlabel: "learner step",
      ylabel: "cos(g_t, g_{t-1})", yr: [-1, 1], legend: "bl",
      series: [series(ref, "step", "cos", sync)].concat(others.map((o) => faded(o, "step", "cos")),
        [series(run, "step", "cos", main)])});
    const T = timelineSpan(run);  // both timelines over the asynchronous run's window
    if (replay.timer) clearInterval(replay.timer);
    replay.timer = null; replay.t = null; replay.T = T;
    drawTimeline(run, "c-timeline", "alt-timeline", `asynchronous (k_max = ${lag}): the first ${T} s`, T, null);
    drawTimeline(ref, "c-timeline-sync", "alt-timeline-sync", `synchronous reference: the same ${T} s`, T, null);
    $("replay-clock").textContent = "whole window"; $("replay-play").textContent = "Play the event log";
    drawTheory(lag, run.headline.staleness_mean);
    const h = run.headline, rh = ref.headline;
    drawHeadline(run, ref, lag, label);
    const setNum = (id, v) => { const e = $(id); e.textContent = fmt(v, 4); e.setAttribute("data-value", v === null ? "" : v); };
    setNum("n-final", h.final_reward); setNum("n-time", h.sim_time); setNum("n-ess", h.ess_mean);
    setNum("n-stale", h.staleness_mean); setNum("n-cos", h.cos_mean);
    setNum("r-final", rh.final_reward); setNum("r-time", rh.sim_time); setNum("r-ess", rh.ess_mean);
    setNum("r-stale", rh.staleness_mean); setNum("r-cos", rh.cos_mean);
    const meanOf = (xs) => { const v = xs.filter((x) => x !== null); return v.length === xs.length ? v.reduce((a, b) => a + b, 0) / v.length : null; };
    setNum("n-ttt", meanOf(run.ttt)); setNum("r-ttt", meanOf(ref.ttt));
    setNum("n-collapsed", run.collapsed.filter(Boolean).length); setNum("r-collapsed", ref.collapsed.filter(Boolean).length);
    for (const [k, f] of [["lrscale", "lr_scale"], ["clip", "clip_frac"], ["mask", "mask_frac"], ["skip", "skipped_frac"], ["proj", "projected_frac"], ["dropped", "dropped"]]) {
      setNum(`n-${k}`, h[f]); setNum(`r-${k}`, rh[f]);
    }
    $("ttt-label").textContent = `time to ${sc.label} ${targetText()} (s, mean of replicas)`;
    $("final-label").textContent = `final ${sc.label}`;
    $("n-run").textContent = key;
    $("alt-reward").textContent = `Asynchronous run (${label}, k_max = ${lag}): final ${sc.label} ${fmt(h.final_reward)} after ` +
      `${fmt(h.sim_time)} simulated seconds; the synchronous reference reaches ${fmt(rh.final_reward)} after ${fmt(rh.sim_time)} s ` +
      `for the same ${DATA.setup.steps} learner steps (${fmt(rh.sim_time / h.sim_time)}x the time).`;
    const reach = (r) => { const i = r.reward.findIndex((v) => v !== null && (sc.higher ? v >= sc.target : v <= sc.target)); return i < 0 ? null : r.eval_step[i]; };
    const sa = reach(run), sr = reach(ref);
    $("alt-reward-step").textContent = `Mean ${sc.label} ${targetText()} first reached at learner step ${sa === null ? "never (within the run)" : sa}` +
      ` asynchronously, ${sr === null ? "never (within the run)" : sr} synchronously.`;
    const total = run.hist.reduce((a, b) => a + b[1], 0);
    $("alt-hist").textContent = `Consumed groups by lag: ` + run.hist.map((b) => `${b[0]}: ${b[1]}`).join(", ") +
      ` (${total} groups, mean ${fmt(h.staleness_mean)} versions).`;
    $("alt-ess").textContent = h.ess_mean === null ? "This task has no importance weights (its gradients are not sampled responses): no ESS." :
      `Mean ESS/N ${fmt(h.ess_mean)} (synchronous: ${fmt(rh.ess_mean)}).` + predNote;
    $("alt-cos").textContent = `Mean cosine ${fmt(h.cos_mean)} over ${h.cos_defined} steps where it is defined ` +
      `(synchronous: ${fmt(rh.cos_mean)} over ${rh.cos_defined}); the other steps had a zero gradient (all rewards of every group equal) and are gaps.`;
    const ms = performance.now() - t0;
    document.body.setAttribute("data-redraw-ms", ms.toFixed(1));
  }

  // lag at consumption -> colour (viridis bins; grey: not consumed within the run, or not yet in a replay)
  const LAG_BINS = [[0, 0, "#fde725"], [1, 1, "#90d743"], [2, 2, "#35b779"], [3, 4, "#21918c"], [5, 8, "#31688e"], [9, 1e9, "#443983"]];
  const lagColor = (k) => k < 0 ? "#bbbbbb" : LAG_BINS.find((b) => k >= b[0] && k <= b[1])[2];

  // The histogram of the whole run, or during a replay of the groups consumed by the replay's clock.
  function drawHist(run, lag, tReplay) {
    const svg = $("c-hist");
    let hist = run.hist, title = "staleness of the consumed rollouts (whole run)";
    if (tReplay !== null && tReplay !== undefined) {
      const c = {};
      const seen = new Set();
      for (const g of run.gen) {
        if (g[4] < 0 || g[5] === null || g[5] > tReplay) continue;
        const id = g.slice(1, 4).join();  // a group split over workers counts once
        if (seen.has(id)) continue;
        seen.add(id); c[g[4]] = (c[g[4]] || 0) + 1;
      }
      hist = Object.keys(c).map(Number).sort((a, b) => a - b).map((k) => [k, c[k]]);
      title = `groups consumed by t = ${fmt(tReplay)} s (replay)`;
    }
    const kmax = Math.max(lag, ...run.hist.map((b) => b[0]));
    const total = hist.reduce((a, b) => a + b[1], 0) || 1;
    const top = Math.max(...hist.map((b) => b[1] / total), 0.05);
    const {sx, sy} = frame(svg, {title: title, xlabel: "lag (policy versions behind the learner)",
      ylabel: "fraction of consumed groups", xr: [-0.5, kmax + 0.5], yr: [0, Math.min(1, top * 1.1)],
      xticks: ticks(0, kmax, 8).filter((t) => Number.isInteger(t))});
    const bw = Math.max(2, (sx(1) - sx(0)) * 0.8);
    for (const [k, c] of hist) {
      const r = el("rect", {x: sx(k) - bw / 2, y: sy(c / total), width: bw, height: sy(0) - sy(c / total),
                  fill: lagColor(k), stroke: "#333", "stroke-width": 0.5, class: "bar", "data-lag": k, "data-count": c}, svg);
      el("title", {}, r, `lag ${k}: ${c} groups (hover: outlines them on the timeline)`);
      r.addEventListener("mouseenter", () => highlightLag(k));
      r.addEventListener("mouseleave", () => highlightLag(null));
    }
    el("line", {x1: sx(lag), x2: sx(lag), y1: M.t, y2: H - M.b, stroke: SYNC, "stroke-dasharray": "4 3"}, svg);
    el("text", {x: sx(lag) - 4, y: M.t + 12, "text-anchor": "end"}, svg, `bound k_max = ${lag}`);
    return total;
  }
  // hovering a histogram bar: the timeline's groups of that lag stay, the others fade
  function highlightLag(k) {
    for (const id of ["c-timeline", "c-timeline-sync"]) {
      const svg = $(id);
      svg.classList.toggle("hl", k !== null);
      for (const r of svg.querySelectorAll("rect.gen")) r.classList.toggle("on", k !== null && +r.getAttribute("data-lag") === k);
    }
  }

  function timelineSpan(run) {
    return +Math.min(DATA.setup.timeline_seconds, Math.max(1, ...run.gen.map((g) => g[2] || 0), ...run.train.map((t) => t[1]))).toPrecision(3);
  }
  // The event log drawn up to time `upTo` (the whole window when not replaying): each bar one group
  // generating on a worker, coloured by the lag it is consumed at; × a group the lag bound dropped.
  function drawTimeline(run, svgId, altId, title, T, upTo) {
    const svg = $(svgId);
    const workers = DATA.setup.workers, now = upTo === null || upTo === undefined ? T : upTo;
    const {sx, sy} = frame(svg, {title: title, xlabel: "simulated time (s)",
      ylabel: "worker (top: learner)", xr: [0, T], yr: [-0.8, workers + 1.8], legendRows: 1});
    const h = Math.max(2, (sy(0) - sy(1)) * 0.7);
    let inflight = 0;
    for (const [w, s, e, v, lag, ct] of run.gen) {
      if (s >= now) continue;
      const end = e === null ? now : Math.min(e, now);
      if (e === null || e > now) inflight++;
      const known = lag >= 0 && ct !== null && ct <= now;  // consumed by the replay's clock
      const r = el("rect", {x: sx(s), y: sy(w) - h / 2, width: Math.max(0.8, sx(end) - sx(s)), height: h,
                  fill: known ? lagColor(lag) : "#bbbbbb", stroke: "#fff", "stroke-width": 0.3, class: "gen", "data-lag": known ? lag : -1}, svg);
      el("title", {}, r, `worker ${w}: ${fmt(s)}-${e === null ? "after the window" : fmt(e)} s, policy version ${v}, ` +
        (lag >= 0 ? `consumed at lag ${lag}` : "not consumed within the run"));
    }
    let drops = 0;
    for (const [w, t] of run.drops) {
      if (t > now) continue;
      drops++;
      el("text", {x: sx(t), y: sy(w) + 4, "text-anchor": "middle", class: "drop", fill: "#D55E00", "font-weight": "bold"}, svg, "×");
    }
    for (const [s, e] of run.train) {
      if (s >= now) continue;
      el("rect", {x: sx(s), y: sy(workers + 1) - h / 2, width: Math.max(0.8, sx(Math.min(e, now)) - sx(s)), height: h,
                  fill: PAL[5], class: "train"}, svg);
    }
    if (now < T) el("line", {x1: sx(now), x2: sx(now), y1: M.t, y2: H - M.b, stroke: "#000", "stroke-width": 1.5, class: "clock"}, svg);
    // the lag key under the plot area (not over the data)
    LAG_BINS.concat([[-1, -1, "#bbbbbb"]]).forEach((b, i) => {
      const x = M.l + i * 66, y = 38;
      el("rect", {x: x, y: y - 8, width: 12, height: 8, fill: b[2]}, svg);
      el("text", {x: x + 15, y: y, style: "font-size:10px"}, svg, b[0] < 0 ? "not yet" : b[0] === b[1] ? `lag ${b[0]}` : b[1] > 99 ? `${b[0]}+` : `${b[0]}-${b[1]}`);
    });
    const finished = run.gen.filter((g) => g[2] !== null && g[2] <= now).length;
    const steps = run.train.filter((t) => t[1] <= now).length;
    const busy = run.gen.reduce((a, g) => a + Math.max(0, Math.min(g[2] === null ? now : g[2], now) - Math.min(g[1], now)), 0) / (workers * now || 1);
    $(altId).textContent = `By ${fmt(now)} s: ${finished} generations finished, ${inflight} still generating, ` +
      `${steps} learner steps, ${drops} groups dropped by the lag bound (×; ${run.headline.dropped} over the whole run); ` +
      `workers busy ${fmt(100 * busy)}% of the time.`;
  }

  // Replay of the event log: the two timelines and the histogram up to a moving clock.
  const replay = {t: null, timer: null, T: 1};
  function drawReplay() {
    const run = DATA.runs[runKey(state, state.method, false)], ref = DATA.runs[runKey(state, "none", true)];
    const lag = DATA.axes.lags[state.lag];
    drawTimeline(run, "c-timeline", "alt-timeline", `asynchronous (k_max = ${lag}): the first ${replay.T} s`, replay.T, replay.t);
    drawTimeline(ref, "c-timeline-sync", "alt-timeline-sync", `synchronous reference: the same ${replay.T} s`, replay.T, replay.t);
    drawHist(run, lag, replay.t);
    $("replay-clock").textContent = replay.t === null ? "whole window" : `t = ${fmt(replay.t)} s`;
    $("replay-play").textContent = replay.timer ? "Pause the replay" : "Play the event log";
  }
  function replayStep() {
    replay.t = replay.t === null ? 0 : Math.min(replay.T, replay.t + replay.T / 40);
    if (replay.t >= replay.T && replay.timer) { clearInterval(replay.timer); replay.timer = null; }
    drawReplay();
  }
  function replayPlay() {
    if (replay.timer) { clearInterval(replay.timer); replay.timer = null; drawReplay(); return; }
    if (replay.t === null || replay.t >= replay.T) replay.t = 0;
    replay.timer = setInterval(replayStep, 100);
    drawReplay();
  }
  function replayReset() {
    if (replay.timer) clearInterval(replay.timer);
    replay.timer = null; replay.t = null; drawReplay();
  }

  // The phase map: time to target per (lag bound, learning rate) for the selected method, tail and
  // engine, as a speed-up over the synchronous reference; T1's boundary at each column's mean lag.
  function drawPhase() {
    const svg = $("c-phase"), ax = DATA.axes, sc = DATA.score;
    const lrs = ax.lrs, nl = ax.lags.length, top = Math.max(...lrs) * 1.2;
    const {sx, sy} = frame(svg, {title: `time to ${sc.label} ${targetText()}: ${SHORT[state.method]} vs synchronous`,
      xlabel: "lag bound k_max (realised mean lag below)", ylabel: "learning rate", xr: [-0.5, nl - 0.5], yr: [0, top],
      xticks: [], legendRows: DATA.task === "quadratic" ? 1 : 0});
    const mid = lrs.map((v, j) => [j ? (lrs[j - 1] + v) / 2 : 0, j < lrs.length - 1 ? (v + lrs[j + 1]) / 2 : top]);
    const bound = [];
    let cells = 0;
    ax.lags.forEach((k, i) => {
      let meanLag = null;
      lrs.forEach((lr, j) => {
        const st = Object.assign({}, state, {lag: i, lr: j});
        const run = DATA.runs[runKey(st, state.method, false)], ref = DATA.runs[runKey(st, "none", true)];
        if (!run || !ref) return;
        if (j === state.lr) meanLag = run.headline.staleness_mean;
        const sp = run.ttt.map((t, r) => t !== null && ref.ttt[r] !== null ? ref.ttt[r] / t : null).filter((x) => x !== null);
        const col = run.collapsed.filter(Boolean).length, R = run.ttt.length;
        const mean = sp.length ? sp.reduce((a, b) => a + b, 0) / sp.length : null;
        const fill = mean === null ? "#f4a582" : mean >= 1 ? (mean >= 2 ? "#1a9850" : "#91cf60") : "#fee08b";
        const x0 = sx(i - 0.48), x1 = sx(i + 0.48), y0 = sy(mid[j][1]), y1 = sy(mid[j][0]);
        const r = el("rect", {x: x0, y: y0 + 1, width: x1 - x0, height: y1 - y0 - 2, fill: fill, class: "cell",
          stroke: i === state.lag && j === state.lr ? "#000" : "none", "stroke-width": 3, "data-lag": k, "data-lr": lr,
          "data-speedup": mean === null ? "" : mean, "data-collapsed": col, style: "cursor:pointer"}, svg);
        el("title", {}, r, `k_max ${k}, lr ${lr}: ` + (mean === null ? "target never reached" : `${fmt(mean)}× the synchronous speed to target`) +
          `; ${col} of ${R} replicas collapsed (click to select)`);
        r.addEventListener("click", () => applyTour({lag: k, lr: lr}, false));
        el("text", {x: (x0 + x1) / 2, y: (y0 + y1) / 2 + 4, "text-anchor": "middle", style: "pointer-events:none"}, svg,
          (mean === null ? "never" : `${fmt(mean, 2)}×`) + (col ? `  ${col}/${R} ✗` : ""));
        cells++;
      });
      el("text", {x: sx(i), y: H - M.b + 15, "text-anchor": "middle"}, svg, `${k} (${meanLag === null ? "?" : fmt(meanLag, 2)})`);
      if (meanLag !== null) bound.push([i, critical(meanLag)]);
    });
    if (DATA.task === "quadratic" && bound.length) {  // λ_max = 1: lr* = 2 sin(π / (4 k̄ + 2))
      const d = bound.map((b, n) => `${n ? "L" : "M"}${sx(b[0] - 0.5 * (n === 0)).toFixed(1)} ${sy(Math.min(b[1], top)).toFixed(1)}` +
        `L${sx(b[0] + (n === bound.length - 1 ? 0.5 : 0)).toFixed(1)} ${sy(Math.min(b[1], top)).toFixed(1)}`).join("");
      el("path", {d: d, fill: "none", stroke: "#000", "stroke-width": 2.5, "stroke-dasharray": "7 4", class: "series", "data-series": "t1-boundary"}, svg);
      legend(svg, [{color: "#000", dash: "7 4", label: "T1 lr* for a fixed delay = the mean lag"}]);
    }
    $("alt-phase").textContent = `${cells} runs. Green: faster to the target than the synchronous reference (dark: over 2×); ` +
      `yellow: slower; orange: never reached; ✗: collapsed replicas.` + (DATA.task === "quadratic" ?
      " The dashed line is T1 for a fixed delay equal to each column's mean lag (λ_max = 1); the delays here vary from group to group, and in these runs it marks where instability begins, not a sharp edge." :
      " The bit-string uses Adam on a non-quadratic loss: T1 gives no boundary here.");
  }

  // A crosshair at one learner step, shared by the charts whose x axis is the learner step.
  const CROSS = {};
  function crosshair(step) {
    for (const id in CROSS) {
      const svg = $(id), c = CROSS[id];
      for (const n of svg.querySelectorAll(".crosshair")) n.remove();
      if (step === null || step < c.xr[0] || step > c.xr[1]) continue;
      const x = M.l + (step - c.xr[0]) / (c.xr[1] - c.xr[0] || 1) * (W - M.l - M.r);
      el("line", {x1: x, x2: x, y1: c.t, y2: H - M.b, stroke: "#000", "stroke-width": 1, class: "crosshair"}, svg);
      el("text", {x: x + 4, y: c.t + 12, class: "crosshair"}, svg, `step ${step}`);
    }
  }
  function wireCrosshair() {
    for (const id in CROSS) {
      const svg = $(id);
      svg.addEventListener("pointermove", (ev) => {
        const pt = svg.createSVGPoint(); pt.x = ev.clientX; pt.y = ev.clientY;
        const p = pt.matrixTransform(svg.getScreenCTM().inverse()), c = CROSS[id];
        crosshair(Math.round(c.xr[0] + (p.x - M.l) / (W - M.l - M.r) * (c.xr[1] - c.xr[0])));
      });
      svg.addEventListener("pointerleave", () => crosshair(null));
    }
  }

  // T1 at the realised mean lag of the run (not at the bound k_max: the bound is rarely reached)
  const critical = (k) => 2 * Math.sin(Math.PI / (4 * k + 2));
  function drawTheory(lag, meanLag) {
    const pts = DATA.theory.critical_step;
    const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
    const quad = DATA.task === "quadratic", lr = DATA.axes.lrs[state.lr];
    const {sx, sy} = lineChart($("c-theory"), {title: "delayed SGD: largest stable step (theory T1)",
      xlabel: "delay k (versions)", ylabel: "critical step lr* x λ_max", yr: [0, 2.05], legend: "tr",
      series: [{x: xs, y: ys, color: PAL[2], label: "2 sin(π / (4k + 2))", id: "t1"}]});
    const k = meanLag === null ? lag : meanLag, v = critical(k);
    el("line", {x1: sx(lag), x2: sx(lag), y1: M.t, y2: H - M.b, stroke: "#999", "stroke-dasharray": "4 3"}, $("c-theory"));
    el("text", {x: sx(lag) - 4, y: H - M.b - 6, "text-anchor": "end"}, $("c-theory"), `bound k_max = ${lag}`);
    el("circle", {cx: sx(k), cy: sy(v), r: 6, fill: methodColor(state.method), class: "marker"}, $("c-theory"));
    el("text", {x: sx(k) + 8, y: sy(v) - 10}, $("c-theory"), `mean lag ${fmt(k)}: ${fmt(v)}`);
    let note = "";
    if (quad) {  // λ_max = 1: the run's own step on the same axes
      const above = lr > v;
      el("circle", {cx: sx(k), cy: sy(Math.min(lr, 2.04)), r: 6, fill: "none", stroke: above ? PAL[5] : PAL[2], "stroke-width": 3,
                    class: "marker"}, $("c-theory"));
      el("text", {x: sx(k) + 8, y: sy(Math.min(lr, 2.04)) + 4}, $("c-theory"), `this run: lr·λ_max = ${lr}${above ? " (above T1)" : ""}`);
      note = ` This run's lr·λ_max = ${lr} is ${above ? "above" : "below"} it (λ_max = 1); T1 is for a fixed delay, ` +
        `the delays here vary around the mean, and in these runs a step a little above the curve still converges` +
        `${state.method === "staleness_lr" ? "; the staleness-aware LR divides each step by its lag" : ""}.`;
    } else {
      note = " The bit-string runs use Adam on a non-quadratic loss: this is the mechanism, not a prediction of their threshold.";
    }
    $("alt-theory").textContent = `At the realised mean lag ${fmt(k)} (bound ${lag}) gradient descent on a quadratic is stable ` +
      `only for lr·λ_max < ${fmt(v)} (${fmt(2 / v)}x smaller than without delay).` + note;
  }

  // The headline: time to target against the synchronous reference, replica by replica (same seeds).
  function drawHeadline(run, ref, lag, label) {
    const sc = DATA.score, R = run.ttt.length;
    const list = (xs) => xs.map((t) => t === null ? "never" : fmt(t)).join(", ");
    const sp = run.ttt.map((t, i) => t !== null && ref.ttt[i] !== null ? ref.ttt[i] / t : null).filter((x) => x !== null);
    const col = run.collapsed.filter(Boolean).length;
    let speed;
    if (sp.length) {
      const mean = sp.reduce((a, b) => a + b, 0) / sp.length;
      speed = `<strong id="hl-speedup" data-value="${mean}">${mean >= 1 ? `${fmt(mean)}× faster` : `slower (${fmt(mean)}× the speed)`}</strong> ` +
        `to the target than the synchronous reference ` +
        `(range ${fmt(Math.min(...sp))}–${fmt(Math.max(...sp))}× over the ${sp.length} of ${R} replicas where both reach it; ` +
        `the replicas share one timing schedule, so the range is the learning's spread, not the timing's)`;
    } else {
      speed = `<strong id="hl-speedup" data-value="">no speed-up</strong>: ` +
        (run.ttt.every((t) => t === null) ? "the asynchronous run never reaches the target" : "the synchronous reference never reaches the target");
    }
    const h = run.headline, acts = [];
    if (h.lr_scale !== null && Math.abs(h.lr_scale - 1) > 1e-3) acts.push(`mean LR scale ${fmt(h.lr_scale)}`);
    if (h.clip_frac) acts.push(`clipped ${fmt(100 * h.clip_frac)}% of weights`);
    if (h.mask_frac) acts.push(`masked ${fmt(100 * h.mask_frac)}% of tokens`);
    if (h.skipped_frac) acts.push(`skipped ${fmt(100 * h.skipped_frac)}% of steps`);
    if (h.projected_frac) acts.push(`projected ${fmt(100 * h.projected_frac)}% of steps`);
    const did = state.method === "none" ? "" : ` What ${SHORT[state.method]} did: ${acts.length ? acts.join(", ") : "nothing measurable"}.`;
    $("headline").innerHTML = `<b>${DATA.task_label}.</b> Asynchronous, ${label}, k_max = ${lag}, lr = ${DATA.axes.lrs[state.lr]}: ` +
      `${sc.label} ${targetText()} after ${list(run.ttt)} s (replicas) against ${list(ref.ttt)} s synchronously: ${speed}. ` +
      `<span id="hl-collapsed" data-value="${col}">${col} of ${R} replicas collapsed</span> (diverged, or on a reward task a dead policy: final reward below 0.05 with a zero gradient; ` +
      `final ${sc.label} per replica ${run.rep_reward.map((r) => fmt(r[r.length - 1])).join(", ")}). ` +
      `${h.dropped} groups dropped by the lag bound.` + did;
  }

  function readControls() {
    state.tail = $("ctl-tail").value;
    state.engine = !$("engine-row").hidden && $("ctl-engine").checked ? DATA.axes.engines[1] : DATA.axes.engines[0];
    state.lag = +$("ctl-lag").value;
    state.lr = +$("ctl-lr").value;
    state.method = $("ctl-method").value;
    state.all = $("ctl-all").checked;
    $("out-lag").textContent = DATA.axes.lags[state.lag];
    $("out-lr").textContent = DATA.axes.lrs[state.lr];
    // the sliders move over indices: tell assistive technology the value they stand for
    $("ctl-lag").setAttribute("aria-valuetext", `k_max ${DATA.axes.lags[state.lag]}`);
    $("ctl-lr").setAttribute("aria-valuetext", `learning rate ${DATA.axes.lrs[state.lr]}`);
  }
  function update() { readControls(); draw(); writeHash(); }
  // The URL hash names the selection, so a link reopens it (read back by fromHash).
  function writeHash() {
    if (SELFTEST) return;
    const p = new URLSearchParams({task: DATA.task, tail: state.tail, lag: DATA.axes.lags[state.lag], lr: DATA.axes.lrs[state.lr],
      method: state.method, engine: state.engine === DATA.axes.engines[0] ? "0" : "1", all: state.all ? "1" : "0"});
    history.replaceState(null, "", "#" + p.toString());
  }

  const opt = (sel, values, labels) => { sel.innerHTML = ""; for (const v of values) { const o = document.createElement("option");
    o.value = v; o.textContent = labels ? labels[v] : v; sel.appendChild(o); } };
  // Switch the controls to a task's grid (each task has its own lags, learning rates and methods).
  function selectTask(name) {
    DATA = ALL.tasks.find((t) => t.task === name) || ALL.tasks[0];
    const ax = DATA.axes;
    $("ctl-task").value = DATA.task;
    opt($("ctl-tail"), ax.tails, DATA.labels.tails);
    opt($("ctl-method"), ax.methods, DATA.labels.methods);
    $("ctl-lag").max = ax.lags.length - 1;
    $("ctl-lr").max = ax.lrs.length - 1;
    $("ctl-lag").value = ax.lags.length - 1;  // start where staleness shows
    $("ctl-lr").value = DATA.task === "quadratic" ? ax.lrs.length - 1 : Math.floor(ax.lrs.length / 2);
    $("engine-row").hidden = ax.engines.length < 2;
    $("ctl-engine").checked = false;
    if (ax.engines.length >= 2) $("engine-label").textContent = DATA.labels.engines[ax.engines[1]];
    const s = DATA.setup;
    $("setup").textContent = `${DATA.task_label}: ${s.workers} rollout workers, ${s.groups_per_step} groups of ${s.group_size} per ` +
      `learner step, training ${s.train_time} s per step, ${s.steps} steps, ${s.replicas} independent replicas (seed ${s.seed}); ` +
      `${Object.keys(DATA.runs).length} precomputed runs.`;
  }

  function setup() {
    opt($("ctl-task"), ALL.tasks.map((t) => t.task), Object.fromEntries(ALL.tasks.map((t) => [t.task, t.task_label])));
    $("task-row").hidden = ALL.tasks.length < 2;
    $("ctl-task").addEventListener("change", () => { selectTask($("ctl-task").value); update(); });
    selectTask(ALL.tasks[0].task);
    $("replay-play").addEventListener("click", replayPlay);
    $("replay-step").addEventListener("click", () => { if (replay.timer) { clearInterval(replay.timer); replay.timer = null; } replayStep(); });
    $("replay-reset").addEventListener("click", replayReset);
    for (const id of ["ctl-tail", "ctl-engine", "ctl-lag", "ctl-lr", "ctl-method", "ctl-all"]) {
      if ($(id)) { $(id).addEventListener("input", update); $(id).addEventListener("change", update); }
    }
    for (const b of document.querySelectorAll("button[data-set]")) b.addEventListener("click", () => applyTour(JSON.parse(b.dataset.set)));
    update();
  }

  // A guided-tour step: move the controls to the nearest available values.
  function applyTour(s, scroll) {
    if (s.task && s.task !== DATA.task) selectTask(s.task);
    const ax = DATA.axes;
    const nearest = (arr, v) => arr.reduce((bi, x, i) => Math.abs(x - v) < Math.abs(arr[bi] - v) ? i : bi, 0);
    if (s.tail && ax.tails.includes(s.tail)) $("ctl-tail").value = s.tail;
    if (s.method && ax.methods.includes(s.method)) $("ctl-method").value = s.method;
    if (s.lag !== undefined) $("ctl-lag").value = nearest(ax.lags, s.lag);
    if (s.lr !== undefined) $("ctl-lr").value = nearest(ax.lrs, s.lr);
    if (s.engine !== undefined && $("ctl-engine")) $("ctl-engine").checked = s.engine;
    if (s.all !== undefined) $("ctl-all").checked = s.all;
    update();
    for (const f of document.querySelectorAll("figure.highlight")) f.classList.remove("highlight");
    const target = s.focus && $(s.focus) ? $(s.focus).closest("figure") : null;
    if (target) target.classList.add("highlight");
    if (scroll !== false) {
      // below the sticky control bar: scroll the chart the step talks about into view
      const top = (target || $("controls")).getBoundingClientRect().top + window.scrollY - (target ? $("controls").offsetHeight + 8 : 0);
      window.scrollTo({top: Math.max(0, top), behavior: "instant"});
    }
  }

  // #selftest: move every control, record whether the drawn paths changed, write the result into the DOM.
  function selftest() {
    const snap = () => [...document.querySelectorAll("svg.chart")].map((s) =>
      [...s.querySelectorAll("path.series, rect.bar, rect.gen, circle.marker")].map((p) =>
        p.getAttribute("d") || [p.getAttribute("y"), p.getAttribute("height"), p.getAttribute("x"), p.getAttribute("cx")].join(",")).join(";"));
    const result = {controls: {}, numbers: {}, errors: window.__errors || [], load_ms: window.__loadMs};
    const ctl = [["ctl-tail", (e) => { e.selectedIndex = (e.selectedIndex + 1) % e.options.length; }],
                 ["ctl-engine", (e) => { e.checked = !e.checked; }],
                 ["ctl-lag", (e) => { e.value = (+e.value + 1) % (+e.max + 1); }],
                 ["ctl-lr", (e) => { e.value = (+e.value + 1) % (+e.max + 1); }],
                 ["ctl-method", (e) => { e.selectedIndex = (e.selectedIndex + 1) % e.options.length; }],
                 ["ctl-all", (e) => { e.checked = !e.checked; }]];
    for (const [id, move] of ctl) {
      const e = $(id);
      if (!e) continue;
      const before = snap(), keyBefore = $("n-run").textContent, saved = [e.value, e.checked];
      move(e); e.dispatchEvent(new Event("input"));
      const after = snap();
      result.controls[id] = {changed: before.map((b, i) => b !== after[i]).filter(Boolean).length,
                             charts: before.length, from: keyBefore, to: $("n-run").textContent,
                             ms: +document.body.getAttribute("data-redraw-ms")};
      e.value = saved[0]; e.checked = saved[1]; update();
    }
    // every control is labelled and takes the keyboard focus
    result.a11y = {};
    for (const [id] of ctl) {
      const e = $(id);
      if (!e) continue;
      e.focus();
      result.a11y[id] = {label: e.labels ? [...e.labels].map((l) => l.textContent.trim()).join(" ") : "",
                         focusable: document.activeElement === e};
    }
    // every guided-tour step lands on a precomputed run
    result.tours = [...document.querySelectorAll("button[data-set]")].map((b) => {
      b.click();
      return $("n-run").textContent;
    });
    for (const [id] of ctl) { const e = $(id); if (e) { e.value = e.defaultValue; e.checked = e.defaultChecked; } }
    $("ctl-tail").selectedIndex = 0; $("ctl-method").selectedIndex = 0;
    update();
    result.run = $("n-run").textContent;
    for (const n of document.querySelectorAll("[data-value]")) result.numbers[n.id] = n.getAttribute("data-value");
    const out = $("selftest");
    out.textContent = JSON.stringify(result);
    out.hidden = false;
    document.body.setAttribute("data-selftest", "done");
  }

  // A link can carry a setting: explorer.html#tail=heavy&lag=16&lr=1&method=gac&engine=1&all=1
  function fromHash() {
    if (LINKED.indexOf("=") < 0) return;
    const s = {};
    for (const [k, v] of new URLSearchParams(LINKED.slice(1))) {
      if (k === "lag" || k === "lr") s[k] = +v;
      else if (k === "focus") continue;
      else if (k === "engine" || k === "all") s[k] = v === "1";
      else s[k] = v;
    }
    applyTour(s, false);
  }

  setup();
  wireCrosshair();
  if (!SELFTEST) fromHash();
  window.__loadMs = +performance.now().toFixed(1);  // navigation start to the first drawing
  if (location.hash === "#selftest") selftest();
})();
