"""The outputs of ``sandbox preflight`` (:mod:`sandbox.preflight.questions`): ``preflight.md``, ``preflight.json``
and ``preflight.html`` (self-contained: figures as data URIs, no scripts), one section per question, each
verdict with its interval over seeds, the proxy task named and what does not transfer. Learning rates
are the proxy's, the user's point placed by the transfer rule (:mod:`sandbox.preflight.transfer`). Guide: ``docs/preflight.md``."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import numpy as np

from sandbox.base.outputs import write_text
from sandbox.report.html import _img, _page
from sandbox.run.plots import PALETTE, _save, plt

LM_PROXY = (
    "Proxy (Q1, Q2, Q5, Q6): the small LM of the shipped lm_mission scenario (a 2-layer transformer of about 1e5 "
    "parameters warm-started on 3-digit addition, responses of several lengths), trained with your objective, "
    "correction and optimizer kind, a batch of 8 prompts x your group size (at most 16), every sample exactly "
    "the bound old. Learning rates are the proxy's; your point is placed by the transfer rule below. What does "
    "not transfer: absolute times, and anything that depends on model size, sequence length or the task's "
    "difficulty beyond what the transfer rule states."
)
BITSTRING_PROXY = (
    "Proxy (Q1, Q2, Q5, Q6; --quick): the bit-string task (16-bit strings, a logistic policy per bit) of the "
    "shipped quickstart scenario, trained with your objective, correction, batch shape and optimizer kind. "
    "Its logit table starts at zero, so no transfer rule places your learning rate: the map is in multiples "
    "of the proxy's own rate. What does not transfer: absolute learning rates, absolute times, and anything "
    "that depends on model size, sequence length or the task's difficulty; on this proxy staleness costs "
    "little (the premise gate below says whether it does at your bound)."
)
SOURCES = (
    "Sources: Q1, Q2, Q5, Q6 from the {proxy}; Q3, Q4, Q7 from the timing model of `sandbox plan --gpus N` "
    "(no learning)."
)

#: Documented reasons a framework's staleness-0 asynchronous mode is not its synchronous trainer (docs/promotion.md).
STALENESS0: dict[str, list[str]] = {
    "common": [
        "the rollout engine's log-probabilities differ from the trainer's (engine mismatch, docs/engines.md), so "
        "π_θ/μ is not 1 even at staleness 0"
    ],
    "verl": [
        "verl's V1 sampler counts the versions a trajectory spans: a lag bound of 0 is max_off_policy_threshold = 1",
        "verl's async trainer samples each mini-batch separately (the synchronous trainer splits one batch)",
        "verl 0.9.1 recomputes old_log_prob unless bypass_mode = true; the sandbox's ratio is against μ (bypass)",
    ],
    "verl-vcpo": [
        "the fork's fully-async recipe counts versions spanned as verl does",
        "it averages per-response token means only (seq_mean_token_mean)",
    ],
    "trl": [
        "AsyncGRPOTrainer always weights by π_θ/μ clipped at its epsilon and resumes interrupted responses under "
        "new weights (in-flight updates); GRPOTrainer does neither"
    ],
    "openrlhf": [
        "OpenRLHF bounds rollout batches generated ahead (a queue), with no per-sample lag check",
        "it recomputes π_old on the consumed batch (ratio 1 against π_old)",
    ],
    "areal": [
        "AReaL always resumes interrupted responses under new weights (partial rollouts)",
        "it balances mini-batches by tokens",
    ],
    "prime-rl": ["prime-rl always resumes interrupted responses under new weights", "it never clips π_θ/μ"],
}


def _fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}g}"


def _mult(m) -> str:
    return "none of the map's" if m is None else f"×{m:g}"


def _ci(lo, hi) -> str:
    return f"[{_fmt(lo)}, {_fmt(hi)}]"


def q1_figure(res: dict, path: Path) -> Path:
    """Stability map: bound × proxy learning rate, coloured by verdict, collapse count per cell, your point
    ringed, the T1 overlay."""
    cells = res["Q1"]["cells"]
    bounds = sorted({c["bound"] for c in cells})
    lrs = sorted({c["lr"] for c in cells})
    colours = {"safe": PALETTE[2], "at risk": PALETTE[1], "unsafe": PALETTE[5]}
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for v, col in colours.items():
        sel = [c for c in cells if c["verdict"] == v]
        ax.scatter(
            [bounds.index(c["bound"]) for c in sel],
            [lrs.index(c["lr"]) for c in sel],
            s=900,
            marker="s",
            color=col,
            label=v,
        )
    for c in cells:
        mark = "?" if c.get("non_monotone") else ""
        ax.annotate(
            f"{c['collapsed']}/{c['seeds']}{mark}",
            (bounds.index(c["bound"]), lrs.index(c["lr"])),
            ha="center",
            va="center",
            fontsize=9,
            color="black",
        )
    th = res["Q1"]["theory_boundary"]
    if th:
        ys = [float(np.interp(math.log(m), [math.log(x) for x in lrs], range(len(lrs)))) for _, m in th]
        ax.plot(
            [bounds.index(k) for k, _ in th],
            ys,
            color=PALETTE[7],
            ls="--",
            label="T1 delayed-GD critical step (shape, anchored)",
        )
    u = res["Q1"]["at"]
    placed = res.get("transfer") is not None and res["transfer"].get("applicable")
    ax.scatter(
        [bounds.index(u["bound"])],
        [lrs.index(u["lr"])],
        s=1400,
        facecolors="none",
        edgecolors=PALETTE[0],
        linewidths=2,
        label="your point (transfer rule)" if placed else "your multiplier of the proxy's rate",
    )
    ax.set_xticks(range(len(bounds)), [("0 (sync)" if b == 0 else str(b)) for b in bounds])
    ax.set_yticks(range(len(lrs)), [f"{lr:.2g}" for lr in lrs])
    ax.set_xlim(-0.6, len(bounds) - 0.4)
    ax.set_ylim(-0.6, len(lrs) - 0.4)
    ax.set_xlabel("staleness bound (versions of lag, every sample at the bound)")
    ax.set_ylabel(f"proxy learning rate (the {'LM' if res['plan']['proxy'] == 'lm' else 'bit-string'} proxy's)")
    ax.set_title(
        "Q1: stability over staleness × learning rate (collapsed seeds / seeds; ? = non-monotone)", fontsize=10
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, markerscale=0.35)
    _save(fig, path, ("png",))
    return path


def q2_figure(res: dict, path: Path) -> Path:
    """ESS/N over steps (mean over seeds) for the user's correction and the alternatives."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, r in enumerate(res["Q2"]["rows"]):
        y = np.array(r["ess_curve"], dtype=float)
        ax.plot(
            np.arange(len(y)),
            y,
            color=PALETTE[i % 7],
            label=f"{r['correction']} ({r['verdict']}, {r['collapsed']}/{r['seeds']} collapsed)",
        )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("ESS / N (mean over seeds)")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Q2: corrections at your bound k={res['Q2']['bound']}, proxy lr {res['Q2']['lr']:.3g}")
    ax.legend(fontsize=8)
    _save(fig, path, ("png",))
    return path


def q5_figure(res: dict, path: Path) -> Path:
    """The mismatch and staleness parts of the per-token k3 KL over steps: the band over seeds."""
    q5 = res["Q5"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, name in enumerate(("mismatch/kl_k3", "staleness/kl_k3")):
        r = q5["sandbox_metrics"].get(name)
        if r is None:
            continue
        lo, hi = np.array(r["band_low"], float), np.array(r["band_high"], float)
        x = np.arange(len(lo))
        ax.fill_between(x, lo, hi, color=PALETTE[i], alpha=0.35, lw=0)
        ax.plot(x, 0.5 * (lo + hi), color=PALETTE[i], label=f"{name} (band: min-max over seeds)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("per-token k3 KL (nats)")
    proxy = "LM proxy" if q5.get("proxy") == "lm" else "bit-string proxy"
    ax.set_title(f"Q5: engine mismatch vs staleness gap at k={q5['bound']} ({q5['engine']['name']} engine, {proxy})")
    ax.legend(fontsize=8)
    _save(fig, path, ("png",))
    return path


def q3_figure(res: dict, path: Path) -> Path:
    """Left: responses trained per second against trainer GPUs, one line per concurrency, your bound
    (solid) and synchronous (dashed), 95% intervals over seeds. Right: the speed-up over synchronous as
    measured, without the length tail and without the sync cost (t-intervals)."""
    q3, q4 = res["Q3"], res["Q4"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 5.2), gridspec_kw={"width_ratios": [2, 1]})
    concs = sorted({r["concurrency"] for r in q3["rows"]})
    for i, c in enumerate(concs):
        for rows, ls, name in ((q3["rows"], "-", f"k={q3['bound']}"), (q3["rows_synchronous"], "--", "sync")):
            sel = sorted((r for r in rows if r["concurrency"] == c), key=lambda r: r["trainer_gpus"])
            x = [r["trainer_gpus"] for r in sel]
            y = np.array([r["samples_per_s"] for r in sel], float)
            lo = np.array([r["samples_per_s_low"] for r in sel], float)
            hi = np.array([r["samples_per_s_high"] for r in sel], float)
            ax.errorbar(
                x,
                y,
                yerr=[np.nan_to_num(y - lo), np.nan_to_num(hi - y)],
                color=PALETTE[i % 7],
                ls=ls,
                marker="o",
                ms=4,
                capsize=3,
                label=f"{name}, {c} sequences per engine",
            )
    b = q3["best"]
    ax.scatter(
        [b["trainer_gpus"]],
        [b["samples_per_s"]],
        s=220,
        facecolors="none",
        edgecolors="black",
        linewidths=1.5,
        label="best split",
        zorder=5,
    )
    ax.set_xticks(sorted({r["trainer_gpus"] for r in q3["rows"]}))
    ax.set_xlabel(f"trainer GPUs (of {q3['facts']['gpus']}; the rest serve rollouts)")
    ax.set_ylabel("responses trained per simulated second")
    ax.set_title(f"Q3: split of {q3['facts']['gpus']} × {q3['facts']['gpu']}, {q3['facts']['model']}")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    names = ("as measured", "no length tail", "no sync cost")
    vals = [q4["speedup"], q4["speedup_no_tail"], q4["speedup_no_sync_cost"]]
    for i, (n, v) in enumerate(zip(names, vals)):
        err = [
            [max(0.0, v[0] - v[1])] if math.isfinite(v[1]) else [0.0],
            [max(0.0, v[2] - v[0])] if math.isfinite(v[2]) else [0.0],
        ]
        bx.bar(i, v[0], color=PALETTE[[0, 2, 4][i]], yerr=err, capsize=4, label=n)
    bx.axhline(1.0, color="black", lw=0.8, ls=":")
    bx.set_xticks(range(3), names, fontsize=8)
    bx.set_ylabel("speed-up over synchronous (×, samples/s ratio)")
    bx.set_title("Q4: speed-up and what drives it")
    bx.legend(fontsize=7, loc="lower right")
    _save(fig, path, ("png",))
    return path


def _slower(r: dict) -> str:
    if not r.get("slower"):
        return ""
    if "slower_by" not in r:
        return "yes"
    by = r["slower_by"]
    return (
        f"yes (+{by:.0%} time)" if isinstance(by, float) and math.isfinite(by) and by > 0 else "yes (fewer seeds reach)"
    )


def _rng(r) -> str:
    return "-" if r is None else f"{_fmt(r[0])} to {_fmt(r[1])}"


def _q6_reasons(framework: str) -> list[str]:
    return STALENESS0.get(framework, []) + STALENESS0["common"]


def _transfer_md(res: dict) -> list[str]:
    t = res.get("transfer")
    if res["plan"]["proxy"] != "lm":
        return ["**Your point:** not placed: " + res["Q1"]["reason"] + ".", ""]
    if t is None:
        return ["**Your point:** not placed: your config sets no learning rate the importer read.", ""]
    head = [
        "**The transfer rule.** The per-step relative update size ‖Δθ‖/‖θ‖ is matched: for Adam about lr / RMS(θ) (docs/preflight.md#the-transfer-rule). "
        "Whether this rule holds is measured across LM widths by `sandbox claims --only transfer_rule` (docs/claims.md): "
        "the critical u agreed across three widths to the grid's factor 2, but their weight scales spanned only 1.9x, "
        "so that run could not tell u from lr; treat your point as a stated assumption.",
        "",
        "| | value | source |",
        "|---|---|---|",
        f"| your optimizer | {t['optimizer']} | the config |",
        f"| your learning rate | {t['user_lr']:.3g} | the config |",
        f"| RMS(θ) of your model's weight matrices | {t['user_rms']:.3g} | {t['user_rms_source']} |",
        f"| relative update size u = lr / RMS(θ) | {t['update_size']:.3g} | the rule |",
        f"| RMS(θ) of the proxy's weight matrices | {t['proxy_rms']:.3g} | measured on the proxy's base model |",
        f"| proxy learning rate of your point u × RMS(θ_proxy) | {t['proxy_lr']:.3g} | the rule"
        + (f", × --lr-mult {res['plan']['lr_multiplier']:g}" if res["plan"]["lr_multiplier"] != 1 else "")
        + " |",
        "",
    ]
    if not t["applicable"]:
        head += [f"Not applicable: {t['note']}.", ""]
    return head


def _premise_md(res: dict) -> list[str]:
    g = res["premise"]
    s = g["sync_gain"]
    out = [
        "**The premise gate.**",
        "",
        f"- **Does the proxy learn at your point?** {'yes' if g['learns'] else 'no'}: the synchronous run's gain over its "
        f"starting expected reward is {_fmt(s[0])} {_ci(s[1], s[2])} (95% interval over seeds; floor {g['learn_floor']:g}).",
    ]
    if g["bound"] == 0:
        out.append("- **Does your bound hurt?** Your run is synchronous (lag 0): there is no staleness to feel.")
    else:
        c = g["lag_cost"]
        out.append(
            f"- **Does lag {g['bound']} hurt at your point?** {'yes' if g['feels_lag'] else 'no'}: synchronous minus "
            f"uncorrected final reward {_fmt(c[0])} {_ci(c[1], c[2])} (95% interval; yes when it lies above 0 or at "
            "least half the seeds more collapse)."
        )
    out += ["", 'Q1 and Q2 are answered only when both hold; otherwise the answer is "cannot tell on this proxy".', ""]
    return out


def _q1_md(res: dict) -> list[str]:
    q1 = res["Q1"]
    u = q1["user_cell"]
    k = q1["at"]["bound"]
    if q1["verdict"] == "cannot tell":
        head = f"**Cannot tell on this proxy** at your bound (k={k}): {q1['reason']}."
    else:
        head = (
            f"**{q1['verdict']}: your point is {q1['position']} the region the proxy found safe at your bound (k={k})**; "
            f"the safe region shrinks {q1['shrink_note']} from synchronous training to your bound."
        )
    out = [
        "## Q1: safe staleness bound and learning rate",
        "",
        head,
        "",
        f"Your cell (k={k}, proxy lr {q1['at']['lr']:.3g}): {u['collapsed']}/{u['seeds']} seeds collapsed (rate 95% interval "
        f"{_ci(*u['collapse_interval'])}); final expected reward {_fmt(u['final_reward'])} {_ci(*u['final_reward_interval'])}. "
        f"Shrink of the safe region from sync to k={k}: {q1['shrink_note']}.",
        "",
    ]
    out += _transfer_md(res) + _premise_md(res)
    out += [
        "| bound | proxy lr | × proxy's | yours | verdict | collapsed | collapse rate 95% CI | final reward [95% CI] | gain [95% CI] | ESS/N | slower than sync |",
        "|---:|---:|---:|---|---|---:|---|---|---|---:|---|",
    ]
    for c in q1["cells"]:
        out.append(
            f"| {c['bound']} | {c['lr']:.3g} | {c['lr_multiplier']:.3g} | {'◉' if c['your_point'] else ''} | "
            f"{c['verdict']}{' (non-monotone)' if c.get('non_monotone') else ''} | {c['collapsed']}/{c['seeds']} | "
            f"{_ci(*c['collapse_interval'])} | {_fmt(c['final_reward'])} {_ci(*c['final_reward_interval'])} | "
            f"{_fmt(c['gain'])} {_ci(*c['gain_interval'])} | {_fmt(c['ess_mean'])} | {'yes' if c['slower_than_reference'] else ''} |"
        )
    if q1["non_monotone"]:
        out += [
            "",
            "Non-monotone cells (a larger learning rate safe where a smaller is not), read as the noise of "
            f"{u['seeds']} seeds:",
            "",
        ] + [f"- {n}" for n in q1["non_monotone"]]
    out += [
        "",
        "Verdicts: *safe* means no seed collapsed (diverged, or ended more than min(0.2, half its best) below its "
        "own best), nothing more; *slower than sync* marks a cell whose mean final reward is more than 0.1 below "
        "the synchronous cell at the same learning rate.",
        "",
        "Theory overlay: the delayed-gradient-descent critical step a*(τ) = 2 sin(π/(4τ+2)) (T1, docs/theory.md), "
        "its shape only, anchored at the largest safe rate of the smallest non-zero bound; Adam on a policy is not "
        "gradient descent on a quadratic. Figure: q1_stability.png.",
        "",
    ]
    return out


def render_md(res: dict, framework: str, source: str) -> str:
    p = res["plan"]
    q2, q6 = res["Q2"], res["Q6"]
    proxy = LM_PROXY if p["proxy"] == "lm" else BITSTRING_PROXY
    out = [
        f"# Preflight: {source} ({framework})",
        "",
        f"{p['runs']} runs, {p['seeds']} seeds each, {p['steps']} steps ({'--quick' if p['quick'] else 'default budget'}) "
        f"over {p['processes']} processes; estimated {p['estimated_s']:.0f} s, took {p['wall_s']:.0f} s. Your lag bound: "
        f"{p['user_bound']} versions; your correction: {p['user_correction']}."
        + (f" The plan's {p['note']}." if p.get("note") else ""),
        "",
        proxy,
        "",
        SOURCES.format(proxy="LM proxy" if p["proxy"] == "lm" else "bit-string proxy (--quick)"),
        "",
    ]
    out += _q1_md(res)
    out += [
        "## Q2: your correction against the alternatives",
        "",
        f"**Verdict for yours: {q2['verdict']}** at k={q2['bound']}, proxy lr {q2['lr']:.3g}"
        + (f" ({q2['reason']})" if q2.get("reason") else "")
        + ".",
        "",
        "| correction | verdict | collapsed | collapse rate 95% CI | final reward [95% CI] | mean ESS/N [95% CI] | time to target (sim s) [95% CI] | seeds reaching | slower |",
        "|---|---|---:|---|---|---|---|---:|---|",
    ]
    for r in q2["rows"]:
        e, t = r["ess_mean"], r["time_to_target"]
        out.append(
            f"| {r['correction']} | {r['verdict']} | {r['collapsed']}/{r['seeds']} | {_ci(*r['collapse_interval'])} | "
            f"{_fmt(r['final_reward'])} {_ci(*r['final_reward_interval'])} | {_fmt(e[0])} {_ci(e[1], e[2])} | "
            f"{_fmt(t[0])} {_ci(t[1], t[2])} | {r['reached']}/{r['seeds']} | {_slower(r)} |"
        )
    out += [
        "",
        "Time to target is in the proxy's simulated seconds (its own target rule, docs/time_to_target.md); compare "
        "the corrections with each other, not with your wall clock. *safe* means only that no seed collapsed; "
        f"*slower* marks a correction that reached the target on fewer seeds than the fastest "
        f"({q2['rows'][0].get('fastest', '-')}) or whose time-to-target interval lies wholly above the fastest's. "
        "Figure: q2_ess.png.",
        "",
        "## Q6: staleness-0 asynchronous vs synchronous",
        "",
        f"**In the sandbox: {'bitwise equal' if q6['bitwise_equal'] else 'NOT bitwise equal'}** over {q6['steps']} steps "
        f"(every metric of the async run with k_max = 0 against the synchronous run, same seeds"
        + ("" if q6["bitwise_equal"] else f"; differing: {', '.join(q6['differing_metrics'])}")
        + "). "
        "Documented reasons your framework's staleness-0 mode still differs from its synchronous trainer "
        "(docs/promotion.md):",
        "",
    ]
    out += [f"- {r}" for r in _q6_reasons(framework)]
    q5 = res["Q5"]
    lm = q5.get("proxy") == "lm"
    out += [
        "",
        "## Q5: expected mismatch and staleness gap in your framework's metrics",
        "",
        (
            ""
            if q5["staleness_gap"]
            else "Your run is synchronous (lag 0): there is no staleness gap, only the engine's mismatch. "
        )
        + f"Batch: {q5.get('batch', ['?', '?'])[0]} prompts x {q5.get('batch', ['?', '?'])[1]} responses.",
        "",
        f"**Ranges** over seeds of each seed's mean in the first and last quarter of {q5.get('steps', p['steps'])} steps at k={q5['bound']}, "
        f"proxy lr {q5['lr']:.3g}, engine {', '.join(f'{k}={v}' for k, v in q5['engine'].items())} (docs/engines.md). The staleness part is what your bound "
        "adds; the mismatch part's size is the engine model's, not a measurement of your engine: compare the trend "
        "(flat or growing over steps) and the ratio of the two parts with your logs, not the absolute values.",
        "",
        "| metric | first quarter | last quarter |",
        "|---|---|---|",
    ]
    rows = {**q5["framework_metrics"], **q5["sandbox_metrics"], **q5["length_buckets"]}
    if not q5["framework_metrics"]:
        out.insert(
            len(out) - 3,
            f"{framework} logs no named metric for this pair that the sandbox knows (docs/engines.md): "
            "the sandbox's own names are given.",
        )
    for name, r in rows.items():
        out.append(f"| `{name}` | {_rng(r['first_quarter'])} | {_rng(r['last_quarter'])} |")
    if lm:
        filled = [n for n, r in q5["length_buckets"].items() if r["last_quarter"] is not None]
        out += [
            "",
            f"Length buckets `mismatch/kl_k3_len1..4` are quarters of the longest response; on the LM proxy "
            f"{len(filled)} of 4 are filled ('-': no response of that length). Whether the mismatch grows with "
            "length is read across the filled buckets. Figure: q5_gap.png.",
        ]
    else:
        out += [
            "",
            "Length buckets `mismatch/kl_k3_len1..4` are quarters of the longest response; the bit-string proxy's "
            "responses all have one length, so only the last bucket is filled (the others are '-'): the length "
            "trend needs the LM proxy (the default budget, not --quick). Figure: q5_gap.png.",
        ]
    out += _system_md(res)
    return "\n".join(out) + "\n"


SYSTEM_PROXY = (
    "Source: the timing model of `sandbox plan --gpus N` (docs/plan.md#gpu-split), system only: "
    "continuous-batching engines and a trainer timed from the hardware table (docs/system.md#hardware), "
    "log-normal response lengths; not the learning proxy. What does not transfer: your engine's real "
    "step costs, your prompt lengths and your length distribution unless you give them; the model is "
    "the roofline reading of decoding and 40% MFU training."
)


def describe(control: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in control.items())


def _iv(v) -> str:
    return f"{_fmt(v[0])} {_ci(v[1], v[2])}"


def _system_md(res: dict) -> list[str]:
    q3, q4, q7 = res["Q3"], res["Q4"], res["Q7"]
    if "why" in q3:
        return sum((["", f"## {q}: not answered", "", res[q]["why"] + "."] for q in ("Q3", "Q4", "Q7")), [])
    f, b, bs = q3["facts"], q3["best"], q3["best_synchronous"]
    facts = "; ".join(
        f"{k} = {f[k]} ({f['source'].get(k, '')})"
        for k in ("gpus", "gpu", "model", "tp", "max_tokens", "length_median", "length_sigma")
    )
    sync_user = res["plan"]["user_bound"] == 0
    out = ["", "## Q3: trainer/rollout split and concurrency per engine", "", SYSTEM_PROXY, "", f"Facts: {facts}.", ""]
    if q3.get("note"):
        out += [f"The split runs were {q3['note']}.", ""]
    if sync_user:
        out += [
            f"Your config is synchronous: 'your bound' below is a bound of {q3['bound']} ({describe(q3['control'])}), "
            "what switching to the smallest asynchronous bound would give; the synchronous column is yours.",
            "",
        ]
    out += [
        f"**Best split at your bound (k={q3['bound']}, {q3['control'].get('kind')}"
        + (f", {q3['control']['enforcement']}" if "enforcement" in q3["control"] else "")
        + f"): {b['trainer_gpus']} trainer GPUs, {f['gpus'] - b['trainer_gpus']} for rollouts "
        f"({(f['gpus'] - b['trainer_gpus']) // f['tp']} engine(s) of {f['tp']} GPU(s)), {b['concurrency']} sequences per engine** — "
        f"{_fmt(b['samples_per_s'])} {_ci(b['samples_per_s_low'], b['samples_per_s_high'])} responses trained per second "
        f"over {q3['seeds']} seeds of {q3['steps']} steps."
    ]
    if "margin" in b:
        out.append(
            f"Ahead of the best split with another trainer count ({b['runner_up_trainer_gpus']} trainer GPUs, "
            f"{b['runner_up_concurrency']} per engine) by {_fmt(b['margin'])} {_ci(b['margin_low'], b['margin_high'])} "
            f"samples/s, paired by seed: "
            + (
                "distinguishable."
                if b["distinguishable"]
                else "NOT distinguishable with these seeds (the interval contains 0)."
            )
        )
    if q3.get("your_split"):
        u = q3["your_split"]
        out.append(
            f"Your split ({u['trainer_gpus']} trainer GPUs, best concurrency {u['concurrency']}): "
            f"{_fmt(u['samples_per_s'])} {_ci(u['samples_per_s_low'], u['samples_per_s_high'])} samples/s."
        )
    out += [
        "",
        "| trainer GPUs | engines | per engine | samples/s at your bound [95% CI] | lag mean | dropped | trainer busy |"
        " samples/s synchronous [95% CI] |",
        "|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    sync = {(r["trainer_gpus"], r["concurrency"]): r for r in q3["rows_synchronous"]}
    for r in q3["rows"]:
        s_ = sync.get((r["trainer_gpus"], r["concurrency"]))
        out.append(
            f"| {r['trainer_gpus']} | {r['engines']} | {r['concurrency']} | {_fmt(r['samples_per_s'])} "
            f"{_ci(r['samples_per_s_low'], r['samples_per_s_high'])} | {_fmt(r['lag_mean'])} | "
            f"{_fmt(r['dropped_fraction'])} | {_fmt(r['util_learner'])} | "
            + (
                f"{_fmt(s_['samples_per_s'])} {_ci(s_['samples_per_s_low'], s_['samples_per_s_high'])} |"
                if s_
                else "- |"
            )
        )
    out += ["", "Figure: q3_split.png (left panel)."]
    sp = q4["speedup"]
    tail = q4["speedup_no_tail"][0] - sp[0]
    sync_gain = q4["speedup_no_sync_cost"][0] - sp[0]
    drivers = []
    if math.isfinite(q4["tail_share"]):
        if q4["tail_share"] > 0.25:
            drivers.append(
                f"the length tail: without it the speed-up would be ×{_fmt(q4['speedup_no_tail'][0])}, so it "
                f"explains {q4['tail_share']:.0%} of the gain"
            )
        elif tail > 0:
            drivers.append(
                f"the length tail lowers it (without the tail ×{_fmt(q4['speedup_no_tail'][0])}): the synchronous "
                "trainer waits for the longest response, but the tail also idles the asynchronous engines"
            )
        else:
            drivers.append(
                f"the length tail is not what drives it (without the tail ×{_fmt(q4['speedup_no_tail'][0])})"
            )
    drivers.append(
        f"the sync cost {'barely matters' if abs(sync_gain) < 0.05 * max(sp[0], 1) else 'matters'} (without it "
        f"×{_fmt(q4['speedup_no_sync_cost'][0])}; one engine sync is {_fmt(q3['sync_time_s'])} s on this hardware)"
    )
    drivers.append("the rest is the overlap of generation with training that the bound allows")
    out += [
        "",
        "## Q4: expected end-to-end speed-up over synchronous",
        "",
        "Source: the timing model, as Q3.",
        "",
        f"**Speed-up ×{_fmt(sp[0])} {_ci(sp[1], sp[2])}** (per seed: the best split at your bound over the best "
        f"synchronous split, {bs['trainer_gpus']} trainer GPUs and {bs['concurrency']} per engine; t-interval over "
        f"{q3['seeds']} seeds, the splits chosen on the same seeds). What drives it: " + "; ".join(drivers) + ".",
        "",
        "| variant (same splits, same seeds) | speed-up [95% CI] |",
        "|---|---|",
        f"| as measured | {_iv(sp)} |",
        f"| every response the mean length, {q4['no_tail_length']:.0f} tokens (no tail) | {_iv(q4['speedup_no_tail'])} |",
        f"| no weight-sync cost | {_iv(q4['speedup_no_sync_cost'])} |",
        "",
        "Speed-up is in responses trained per second at equal hardware; it is not a time-to-accuracy ratio: "
        "staler samples may need more steps (Q1, Q2). Figure: q3_split.png (right panel).",
    ]
    sm, pm, w = q7["summary"], q7["problems"], q7["most_dropping"]
    wm = w["summary"]
    g = lambda d, k: _iv(d[k]) if k in d else "-"  # noqa: E731
    at = f"{w['trainer_gpus']} trainer GPUs, {w['concurrency']} per engine"
    none_dropped = "dropped_fraction" in wm and wm["dropped_fraction"][0] == 0
    out += [
        "",
        "## Q7: does dropping stale samples bias training toward short problems?",
        "",
        "Source: the timing model, as Q3 (drop_bias analysis of its runs, docs/system.md#drop-bias).",
        "",
        f"**On the best split: {q7['verdict']}** at your bound k={q7['bound']} with your stale-sample policy "
        f"({q7['control'].get('kind')}, enforcement {q7['enforcement']}): consumed/generated mean length − 1 = "
        f"{g(sm, 'length_bias')}, dropped fraction {g(sm, 'dropped_fraction')}. "
        + (
            f"**On the split of the grid that drops most ({at}): {w['verdict']}**, length bias {g(wm, 'length_bias')}, "
            f"dropped fraction {g(wm, 'dropped_fraction')}; there with problems whose lengths persist across epochs "
            f"(256 prompts): **{q7['problems_verdict']}**, length bias {g(pm, 'length_bias')}, Spearman(problem length, "
            f"problem dropped fraction) {g(pm, 'prompt_spearman')}."
            if none_dropped is False
            else "**No split of the grid dropped a group at your bound** in these runs (your control's admission cap, "
            "docs/plan.md#gpu-split, kept every group within the bound): what is trained on is what was generated, "
            "so the bias is zero here, exactly. It appears where the lag a group gathers while it is generated "
            "decides its fate (claim drop_bias: 12 rollout slots, 4 groups per step, k_max 1–4)."
        ),
        "",
        f"| measure (mean [95% CI] over seeds) | best split | {at} | {at}, 256 problems |",
        "|---|---|---|---|",
    ]
    for k, name in (
        ("dropped_fraction", "dropped groups / decided groups"),
        ("dropped_fraction_long", "dropped, long groups"),
        ("dropped_fraction_short", "dropped, short groups"),
        ("length_generated_mean", "mean length generated"),
        ("length_consumed_mean", "mean length consumed"),
        ("length_generated_p90", "p90 generated"),
        ("length_consumed_p90", "p90 consumed"),
        ("length_ks", "KS distance consumed vs generated"),
        ("length_bias", "length bias (consumed / generated − 1)"),
        ("prompt_spearman", "Spearman(problem length, dropped fraction)"),
        ("prompts_never_consumed", "problems never trained on"),
    ):
        out.append(f"| {name} | {g(sm, k)} | {g(wm, k)} | {g(pm, k)} |")
    zero = "dropped_fraction" in sm and sm["dropped_fraction"][0] == 0
    out += [
        "",
        "Verdict thresholds (claim drop_bias, docs/claims.md): biased when the mean is below −0.05 and the interval "
        "below 0, negligible when the interval lies in (−0.05, 0.05)."
        + (
            " Nothing was dropped on the best split, so there the consumed lengths are the generated ones."
            if zero and not none_dropped
            else ""
        )
        + (
            f" Where groups are dropped ({at}), long and short groups are dropped at "
            f"{_fmt(wm['dropped_fraction_long'][0])} and {_fmt(wm['dropped_fraction_short'][0])}: "
            + (
                "about the same rate, so the drops there come from waiting behind a busy trainer, which does not "
                "select by length."
                if abs(wm["dropped_fraction_long"][0] - wm["dropped_fraction_short"][0]) < 0.05
                else "the long ones more often: the lag a group gathers while it is generated selects by length."
            )
            if "dropped_fraction_long" in wm and wm["dropped_fraction"][0] > 0
            else ""
        )
        + (
            " '-' for long groups: at least half the groups' longest response is at the cut (the longest response "
            "allowed), so no group is above the median longest."
            if "dropped_fraction_long" not in sm and "dropped_fraction" in sm
            else ""
        )
        + " Difficulty is not measured here: a long problem stands in for a hard one.",
    ]
    return out


def render_html(md_text: str, figures: dict[str, Path], res: dict, title: str) -> str:
    """The page: each section's text (from the Markdown) with its figure embedded."""
    sections: list[tuple[str, str]] = []
    head, *parts = md_text.split("\n## ")
    intro = "".join(f"<p>{html.escape(line)}</p>" for line in head.splitlines()[1:] if line.strip())
    sections.append(("Proxy and plan", intro))
    for part in parts:
        name, _, body = part.partition("\n")
        blocks, table = [], []
        for line in body.splitlines() + [""]:
            if line.startswith("|"):
                if not set(line) <= set("|-: "):
                    table.append([c.strip() for c in line.strip("|").split("|")])
                continue
            if table:
                rows = "".join(
                    "<tr>"
                    + "".join(
                        f'<{"th" if i == 0 else "td"} class="text">{html.escape(c.replace("**", "").replace("`", ""))}'
                        f"</{'th' if i == 0 else 'td'}>"
                        for c in r
                    )
                    + "</tr>"
                    for i, r in enumerate(table)
                )
                blocks.append(f'<div class="scroll"><table>{rows}</table></div>')
                table = []
            if line.strip():
                text = html.escape(line.lstrip("- ")).replace("**", "").replace("`", "")
                blocks.append(f"<li>{text}</li>" if line.startswith("- ") else f"<p>{text}</p>")
        q = name.split(":")[0]
        if q in figures:
            blocks.append(
                f'<figure><img alt="{html.escape(name)}" src="{_img(figures[q])}"><figcaption>{html.escape(name)}'
                "</figcaption></figure>"
            )
        sections.append((name, "".join(blocks)))
    return _page(title, sections)


def write_outputs(stage: Path, res: dict, framework: str, source: str) -> list[str]:
    """preflight.md, preflight.json, preflight.html and the figures into ``stage``."""
    figs = {
        "Q1": q1_figure(res, stage / "q1_stability.png"),
        "Q2": q2_figure(res, stage / "q2_ess.png"),
        "Q5": q5_figure(res, stage / "q5_gap.png"),
    }
    if "why" not in res["Q3"]:
        figs["Q3"] = q3_figure(res, stage / "q3_split.png")
    md = render_md(res, framework, source)
    write_text(stage / "preflight.md", md)
    body = {
        **res,
        "framework": framework,
        "source": source,
        "proxy": LM_PROXY if res["plan"]["proxy"] == "lm" else BITSTRING_PROXY,
        "Q6": {**res["Q6"], "framework_reasons": _q6_reasons(framework)},
    }
    write_text(stage / "preflight.json", json.dumps(body, indent=1, default=float, allow_nan=True) + "\n")
    write_text(stage / "preflight.html", render_html(md, figs, res, f"Preflight: {Path(source).name} ({framework})"))
    return ["preflight.md", "preflight.json", "preflight.html", *(p.name for p in figs.values())]
