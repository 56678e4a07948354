"""Study: a systematic training–inference mismatch on long LM responses (docs/engines.md#mismatch-that-emerges).

The sampler and the trainer hold the same weights; the sampler computes with fewer bits (the
``precision`` engine: a bfloat16 / float16 forward; the ``quantized`` engine: round-to-nearest integer
weights and a bfloat16 forward), the trainer in float32. Nothing is drawn per sample: the two disagree
the same way whenever the same context comes back. The task is the LM reversing a digit string of 8 to
32 digits (responses of 9 to 34 tokens, exact-match reward), from a supervised base model (cached).

Three parts, each a table in ``report.md`` (and ``results.json``, ``mismatch_emerges.png``):

A. **Magnitude and growth with length** at the base model: per-token k3 KL ``mean_t(ρ − 1 − log ρ)``,
   ``ρ = π_v/μ``; mean and max token-probability gap ``|π_v(y) − μ(y)|``; per response the log-ratio
   sum ``S = Σ_t log(π_v/μ)`` and its k3 ``e^S − 1 − S``, by response-length bucket; and the fraction
   of top-1 router decisions that flip between the sampler's precision and float32 on a
   mixture-of-experts variant of the LM (at initialization: the cached base model is dense).
B. **Growth with training**: ``mismatch/kl_k3`` and ``mismatch/prob_gap_mean`` (the learner's metrics,
   docs/engines.md#metrics) over the steps of synchronous uncorrected training, first vs last quarter.
C. **Rescue search**: synchronous REINFORCE (group-normalised advantages, seq-mean-token-mean, ``--groups``
   prompts (default 8) × 8 responses per step, Adam at ``--lr``, bypass mode: the correction weighs π_θ/μ, which at
   staleness 0 is the mismatch ratio) with an exact engine, and with each engine of
   ``--rescue-engines`` uncorrected and with token TIS (C = 2), token MIS ([0, 2]) and IcePop ([0.5, 5]).
   Per replica the final expected reward (held-out, sampled, mean of the last half of the
   evaluations); differences are paired by replica index (the same base model; the replicas' draws
   differ between variants), given as the mean with a 95% t-interval over replicas and the smallest
   replica (a mean never hides a collapsed replica). Degradation: uncorrected − exact has its interval
   below 0; rescue: correction − uncorrected has its interval above 0.

Run:  python examples/study_mismatch_emerges.py [--out runs/mismatch_emerges] [--jobs 3] [--quick]
(defaults: 32 steps, 4 replicas, lr 5e-4, 8 prompts per step, engines int4 and int3 in part C: a
setting where the exact run learns, chosen on seed 1 before any correction ran; ``--from-results``
re-renders.)
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.func import functional_call  # noqa: E402

from sandbox.analysis.intervals import t_interval  # noqa: E402
from sandbox.base.processes import forked_map  # noqa: E402
from sandbox.run.runner import _result, prepare_run  # noqa: E402
from sandbox.scenario.api import validate_scenario  # noqa: E402

TASK = {
    "name": "lm",
    "problem": {"kind": "reverse", "min_len": 8, "max_len": 32},
    "eval_size": 64,
    "eval_samples": 2,
    "warmstart": {"dev_size": 64, "eval_every": 25, "target_accuracy": 0.3},
}
"""The long-response context: 9 to 34 tokens per response; the base model (greedy held-out accuracy
~0.75, sampled expected reward ~0.05 at temperature 1: errors compound over the response) is trained
once and cached (about 5 minutes on one core)."""

ENGINES = {
    "exact": None,
    "fp16": {"name": "precision", "dtype": "float16"},
    "bf16": {"name": "precision", "dtype": "bfloat16"},
    "int8": {"name": "quantized", "bits": 8},
    "int4": {"name": "quantized", "bits": 4},
    "int3": {"name": "quantized", "bits": 3},
}
CORRECTIONS = {
    "none": {"name": "none"},
    "TIS token C=2": {"name": "tis", "level": "token", "C": 2.0},
    "MIS token [0, 2]": {"name": "mis", "level": "token", "C": 2.0},
    "IcePop [0.5, 5]": {"name": "icepop", "alpha": 0.5, "beta": 5.0},
}
LENGTH_EDGES = (9, 16, 22, 28, 35)
"""Response-length buckets [9, 16), [16, 22), [22, 28), [28, 35) tokens (end token included)."""


def scenario(
    engine: str,
    correction: str = "none",
    steps: int = 1,
    replicas: int = 1,
    lr: float = 5e-4,
    eval_every: int = 1,
    seed: int = 0,
    groups: int = 8,
) -> dict:
    scn = {
        "title": f"mismatch_emerges {engine} {correction}",
        "task": {**TASK, "replicas": replicas},
        "system": {
            "num_workers": 8,
            "generation_time": {"kind": "constant", "value": 1.0},
            "train_time": {"kind": "constant", "value": 0.2},
            "staleness": {"kind": "sync"},
        },
        "algorithm": {
            "group_size": 8,
            "groups_per_step": groups,
            "proximal": "behaviour",
            "objective": {
                "name": "reinforce",
                "baseline": "group_mean",
                "normalize_std": True,
                "aggregation": "seq_mean_token_mean",
            },
            "correction": CORRECTIONS[correction],
            "optimizer": {"name": "adam", "lr": lr},
        },
        "run": {"steps": steps, "seed": seed, "eval_every": eval_every, "figures": False, "record_events": False},
    }
    if ENGINES[engine] is not None:
        scn["engine"] = ENGINES[engine]
    return scn


# -- A: magnitude vs length at the base model -----------------------------------------------------
def magnitudes(engine: str, groups: int, seed: int = 0) -> dict:
    """Per-token and per-response mismatch of ``groups`` groups of 8 responses from the base model."""
    scn = validate_scenario(scenario(engine))
    task, _, _ = prepare_run(scn)
    params = task.init_params(torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(seed)
    lengths, sums, k3_tok, gap_tok, pos_tok = [], [], [], [], []
    with torch.no_grad():
        for _ in range(groups):
            g = task.new_group(8, gen)
            g = task.generate(params, g, gen, 0)
            m = g.mask[0].bool()
            d = (g.sampler_logp[0] - g.behaviour_logp[0]) * m
            gap = (g.sampler_logp[0].exp() - g.behaviour_logp[0].exp()).abs()
            k3 = d.exp() - 1 - d
            for i in range(d.shape[0]):
                n = int(m[i].sum())
                lengths.append(n)
                sums.append(float(d[i, :n].sum()))
                k3_tok.append(k3[i, :n].numpy())
                gap_tok.append(gap[i, :n].numpy())
                pos_tok.append(np.arange(n))
    L, S = np.array(lengths), np.array(sums)
    all_k3, all_gap = np.concatenate(k3_tok), np.concatenate(gap_tok)
    out = {
        "engine": engine,
        "responses": len(L),
        "tokens": int(all_k3.size),
        "k3": float(all_k3.mean()),
        "gap_mean": float(all_gap.mean()),
        "gap_max": float(all_gap.max()),
        "seq_abs_logratio": float(np.abs(S).mean()),
        "buckets": [],
    }
    for lo, hi in zip(LENGTH_EDGES, LENGTH_EDGES[1:]):
        sel = (L >= lo) & (L < hi)
        if not sel.any():
            out["buckets"].append({"lengths": [lo, hi - 1], "responses": 0})
            continue
        idx = np.flatnonzero(sel)
        k3b = np.concatenate([k3_tok[i] for i in idx])
        gapb = np.concatenate([gap_tok[i] for i in idx])
        Sb = S[sel]
        out["buckets"].append(
            {
                "lengths": [lo, hi - 1],
                "responses": int(sel.sum()),
                "k3": float(k3b.mean()),
                "gap_mean": float(gapb.mean()),
                "gap_max": float(gapb.max()),
                "seq_logratio_mean": float(Sb.mean()),
                "seq_abs_logratio": float(np.abs(Sb).mean()),
                "seq_k3": float(np.mean(np.expm1(Sb) - Sb)),
            }
        )
    return out


ROUTER_EXPERTS = 4
"""Experts per block of the mixture-of-experts variant in :func:`router_flips` (top-1 routing)."""


def router_flips(engine: str, groups: int, seed: int = 0) -> dict:
    """Fraction of top-1 router decisions that differ between the sampler's precision and the trainer's
    float32, on the same token sequences (teacher-forced; the router's input carries every upstream
    difference). The LM variant has ``ROUTER_EXPERTS`` experts per block and is at its initialization
    (the cached base model is dense): a router of small random logits, not a trained one."""
    scn = scenario(engine)
    scn["task"] = {**scn["task"], "model": {"experts": ROUTER_EXPERTS}, "warmstart": {"enabled": False}}
    task, _, _ = prepare_run(validate_scenario(scn))
    params = task.init_params(torch.Generator().manual_seed(0))
    single = task._single(params, detach=True)
    sampler, dt = task.sampling_engine().sampler_weights(single)
    gen = torch.Generator().manual_seed(seed)
    routers = [blk.moe.router for blk in task.model.blocks]
    choices: list[torch.Tensor] = []
    hooks = [r.register_forward_hook(lambda m, i, o: choices.append(o.float().argmax(-1))) for r in routers]
    flips = total = 0
    try:
        with torch.no_grad():
            for _ in range(groups):
                g = task.generate(params, task.new_group(8, gen), gen, 0)
                seq = torch.cat([g.prompts[0], g.tokens[0]], -1)
                keep = torch.cat([torch.ones_like(g.prompts[0]), g.mask[0].long()], -1).bool()
                choices.clear()
                functional_call(task.model, single, (seq,))
                functional_call(task.model, sampler, (seq,))
                half = len(routers)
                for exact, low in zip(choices[:half], choices[half:]):
                    flips += int(((exact != low) & keep).sum())
                    total += int(keep.sum())
    finally:
        for h in hooks:
            h.remove()
    return {"engine": engine, "experts": ROUTER_EXPERTS, "decisions": total, "flip_fraction": flips / total}


# -- B and C: training runs ------------------------------------------------------------------------
def train(
    engine: str,
    correction: str,
    steps: int,
    replicas: int,
    lr: float,
    eval_every: int,
    seed: int = 0,
    groups: int = 8,
) -> dict:
    """One synchronous run of ``replicas`` independent learners (the replicas of one run: paired across
    variants, the same base model and prompt draws); per replica its final expected reward (mean of the
    last half of its evaluations) and per step the mismatch metrics (mean over replicas)."""
    scn = validate_scenario(scenario(engine, correction, steps, replicas, lr, eval_every, seed, groups))
    task, learner, cluster = prepare_run(scn)
    res = _result(scn, cluster.run(scn.run.steps), learner)
    rep = res.replica_metrics
    ev = rep["eval/expected_reward"]
    at = np.flatnonzero(np.isfinite(ev).all(1))
    rows = ev[at]
    tail = rows[len(rows) // 2 :]
    out = {
        "engine": engine,
        "correction": correction,
        "final": tail.mean(0).tolist(),
        "first_eval": rows[0].tolist(),
        "curve": rows.tolist(),
        "eval_rows": at.tolist(),
        "diverged_at": [int(x) for x in res.diverged_at],
    }
    for k in ("mismatch/kl_k3", "mismatch/prob_gap_mean", "mismatch/prob_gap_max", "reward/mean"):
        if k in rep:
            out[k] = np.nanmean(rep[k], 1).tolist()
    return out


def interval(values) -> tuple[float, float, float]:
    return t_interval(np.asarray(values, dtype=float))


def fmt(x: float, digits: int = 3) -> str:
    return "—" if not math.isfinite(x) else f"{x:.{digits}g}"


def flips(m: dict) -> str:
    r = m.get("router")
    return "—" if r is None else f"{100 * r['flip_fraction']:.2g}% of {r['decisions']}"


def report(mags: list[dict], runs: dict, cfg: argparse.Namespace) -> str:
    lines = [
        f"# Mismatch that emerges ({'quick' if cfg.quick else 'full'}: {cfg.steps} steps, {cfg.replicas} "
        f"replicas, lr {cfg.lr:g}, {cfg.groups} prompts per step, seed {cfg.seed})",
        "",
        "## A. Magnitude and growth with length (base model)",
        "",
        "| engine | per-token k3 | mean abs dp | max abs dp | mean abs S | "
        + " | ".join(f"len {b['lengths'][0]}-{b['lengths'][1]}: k3 / abs S" for b in mags[0]["buckets"])
        + f" | router flips ({ROUTER_EXPERTS}-expert MoE variant at init) |",
        "|---|---|---|---|---|" + "---|" * (len(mags[0]["buckets"]) + 1),
    ]
    for m in mags:
        cells = [f"{fmt(b.get('k3', math.nan))} / {fmt(b.get('seq_abs_logratio', math.nan))}" for b in m["buckets"]]
        lines.append(
            f"| {m['engine']} | {fmt(m['k3'])} | {fmt(m['gap_mean'])} | {fmt(m['gap_max'])} | "
            f"{fmt(m['seq_abs_logratio'])} | " + " | ".join(cells) + f" | {flips(m)} |"
        )
    lines += [
        "",
        "## B. Growth with training (uncorrected, mean over replicas)",
        "",
        "| engine | k3 first quarter | k3 last quarter | last / first | mean abs dp first | mean abs dp last |",
        "|---|---|---|---|---|---|",
    ]
    for (eng, cor), r in runs.items():
        if cor != "none" or eng == "exact":
            continue
        k3, gap = np.array(r["mismatch/kl_k3"]), np.array(r["mismatch/prob_gap_mean"])
        q = max(1, len(k3) // 4)
        lines.append(
            f"| {eng} | {fmt(np.nanmean(k3[:q]))} | {fmt(np.nanmean(k3[-q:]))} | "
            f"{fmt(np.nanmean(k3[-q:]) / np.nanmean(k3[:q]))} | {fmt(np.nanmean(gap[:q]))} | "
            f"{fmt(np.nanmean(gap[-q:]))} |"
        )
    ref = np.array(runs[("exact", "none")]["final"])
    lines += [
        "",
        "## C. Rescue search (final held-out expected reward per replica)",
        "",
        f"Exact engine: first evaluation (after one update) {fmt(float(np.mean(runs[('exact', 'none')]['first_eval'])))}, final "
        f"{fmt(float(ref.mean()))} (replicas {', '.join(fmt(x) for x in ref)}).",
        "",
        "| engine | correction | final reward mean [95% CI] | smallest replica | vs exact: diff [95% CI] | "
        "vs uncorrected: diff [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    for (eng, cor), r in runs.items():
        if eng == "exact":
            continue
        f = np.array(r["final"])
        unc = np.array(runs[(eng, "none")]["final"])
        m, lo, hi = interval(f)
        d, dlo, dhi = interval(f - ref)
        c = "—" if cor == "none" else "{} [{}, {}]".format(*map(fmt, interval(f - unc)))
        lines.append(
            f"| {eng} | {cor} | {fmt(m)} [{fmt(lo)}, {fmt(hi)}] | {fmt(float(f.min()))} | "
            f"{fmt(d)} [{fmt(dlo)}, {fmt(dhi)}] | {c} |"
        )
    return "\n".join(lines) + "\n"


COLORS = {
    "exact": "black",
    "fp16": "tab:blue",
    "bf16": "tab:orange",
    "int8": "tab:green",
    "int4": "tab:red",
    "int3": "tab:purple",
}
STYLES = dict(zip(CORRECTIONS, ("-", "--", ":", "-.")))


def figure(mags: list[dict], runs: dict, every: int, steps: int, path: Path) -> None:
    """The three panels; part C at the evaluations' learner steps (the first after one update)."""
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.6))
    for m in mags:
        b = [b for b in m["buckets"] if b.get("responses")]
        mid = [0.5 * (x["lengths"][0] + x["lengths"][1]) for x in b]
        ax[0].plot(mid, [x["seq_abs_logratio"] for x in b], "o-", color=COLORS[m["engine"]], label=m["engine"])
    ax[0].set(
        xlabel="response length (tokens)",
        ylabel="mean |Σ_t log π_v/μ| per response (nats)",
        yscale="log",
        title="A. Per-response log-ratio vs length (base model)",
    )
    for (eng, cor), r in runs.items():
        if cor == "none" and eng != "exact":
            k3 = r["mismatch/kl_k3"]
            ax[1].plot(np.arange(1, len(k3) + 1), k3, color=COLORS[eng], label=eng)
    ax[1].set(
        xlabel="learner step",
        ylabel="per-token k3 KL (nats)",
        yscale="log",
        title="B. Mismatch over training (uncorrected)",
    )
    for (eng, cor), r in runs.items():
        curve = np.array(r["curve"]).mean(1)
        rows = r.get("eval_rows", [min(every * i, steps - 1) for i in range(len(curve))])
        x = np.asarray(rows) + 1  # row i evaluates the weights after i + 1 updates
        ax[2].plot(x, curve, color=COLORS[eng], ls=STYLES[cor], label=f"{eng}, {cor}")
    ax[2].set(
        xlabel="learner step (updates before the evaluation)",
        ylabel="held-out expected reward (mean over replicas)",
        title="C. Learning with and without corrections",
    )
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/mismatch_emerges", help="output directory (created)")
    ap.add_argument("--quick", action="store_true", help="fewer responses, steps and engines (a smoke run)")
    ap.add_argument("--steps", type=int, default=None, help="learner steps per run (default 12, quick 4)")
    ap.add_argument("--replicas", type=int, default=None, help="independent learners per run (default 4, quick 2)")
    ap.add_argument("--lr", type=float, default=5e-4, help="Adam learning rate")
    ap.add_argument("--groups", type=int, default=None, help="prompts (groups of 8 responses) per step (default 8)")
    ap.add_argument("--seed", type=int, default=0, help="run seed of the training runs (the replicas' draws)")
    ap.add_argument("--rescue-engines", default=None, help="engines of part C, comma-separated (default int4,int3)")
    ap.add_argument("--jobs", type=int, default=2, help="training runs simulated at once, in forked processes")
    ap.add_argument("--from-results", default=None, help="re-render report.md and the figure from a results.json")
    cfg = ap.parse_args(argv)
    if cfg.from_results:
        saved = json.loads(Path(cfg.from_results).read_text())
        cfg.groups, cfg.seed = 4, 0  # results saved before these options existed used these
        for k, v in saved["config"].items():
            setattr(cfg, k, v)
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        runs = {(r["engine"], r["correction"]): r for r in saved["runs"]}
        text = report(saved["magnitudes"], runs, cfg)
        (out / "report.md").write_text(text)
        figure(saved["magnitudes"], runs, max(1, cfg.steps // 4), cfg.steps, out / "mismatch_emerges.png")
        print(text)
        return 0
    for flag in ("steps", "replicas", "jobs", "groups"):
        if getattr(cfg, flag) is not None and getattr(cfg, flag) < 1:
            ap.error(f"--{flag}: expected a positive integer, got {getattr(cfg, flag)}")
    if not cfg.lr > 0:
        ap.error(f"--lr: expected a positive learning rate, got {cfg.lr}")
    cfg.steps = cfg.steps or (4 if cfg.quick else 32)
    cfg.groups = cfg.groups or 8
    cfg.replicas = cfg.replicas or (2 if cfg.quick else 4)
    rescue = (cfg.rescue_engines or "int4,int3").split(",")
    for e in rescue:
        if e not in ENGINES or e == "exact":
            ap.error(f"--rescue-engines: {e!r} is not one of {', '.join(k for k in ENGINES if k != 'exact')}")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    groups = 4 if cfg.quick else 32
    mags = []
    for e in ENGINES:
        if e != "exact":
            mags.append({**magnitudes(e, groups), "router": router_flips(e, max(2, groups // 4))})
            print(f"{e}: k3 {mags[-1]['k3']:.3g} ({time.perf_counter() - t0:.0f} s)", flush=True)
    every = max(1, cfg.steps // 4)
    specs = [("exact", "none")] + [
        (e, c) for e in dict.fromkeys(["bf16", *rescue]) for c in (CORRECTIONS if e in rescue else ["none"])
    ]
    runs = {}
    for i in range(0, len(specs), cfg.jobs):  # each run depends on its settings only: any order, any process
        chunk = specs[i : i + cfg.jobs]
        done = forked_map(
            [
                lambda e=e, c=c: train(e, c, cfg.steps, cfg.replicas, cfg.lr, every, cfg.seed, cfg.groups)
                for e, c in chunk
            ]
        )
        for (e, c), r in zip(chunk, done):
            runs[(e, c)] = r
            print(f"{e}, {c}: final {np.round(r['final'], 3)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    text = report(mags, runs, cfg)
    (out / "report.md").write_text(text)
    config = {
        "quick": cfg.quick,
        "steps": cfg.steps,
        "replicas": cfg.replicas,
        "lr": cfg.lr,
        "groups": cfg.groups,
        "seed": cfg.seed,
    }
    saved = {"config": config, "magnitudes": mags, "runs": list(runs.values()), "seconds": time.perf_counter() - t0}
    (out / "results.json").write_text(json.dumps(saved, indent=1))
    figure(mags, runs, every, cfg.steps, out / "mismatch_emerges.png")
    print(text)
    print(f"wrote {out}/report.md, results.json, mismatch_emerges.png ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
