"""Run a scenario's variants over several seeds and draw the mission figure.

``sandbox run scenarios/lm_mission.toml`` runs every variant once (one seed) with the standard
comparison table and ``comparison.png`` (reward only). This module adds what a claim about
stabilizers needs: several seeds, the diagnostics beside the reward in ONE figure, and the controls.

    python -m sandbox.tasks.lm.mission scenarios/lm_mission.toml --seeds 0 1 2 --jobs 2

writes ``runs/lm_mission/<variant>/seed<k>/`` (full run directories), ``mission.png`` (held-out
reward, train reward, ESS ratio, consecutive-gradient cosine, gradient norm and LR per variant: mean
over seeds with a min-max band), ``mission.json`` and ``mission.md`` (final held-out reward and
greedy accuracy per variant, mean ± std and min-max over seeds, wall time, GAC projection frequency,
VCPO's mean LR multiplier).

Control ``vcpo_const_lr`` (added when a variant is named ``vcpo``): the VCPO variant without its ESS
LR rule, at a constant LR equal to the mean effective LR that VCPO used in the same seed, so the
effect of *adapting* the rate is separated from the effect of a *smaller* rate.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

PANELS = [
    ("eval/expected_reward", "held-out reward (sampled)"),
    ("reward/mean", "train reward (EMA)"),
    ("is/ess_ratio", "ESS / N, sequence weights (EMA)"),
    ("grad/cos_prev", "cos(g_t, g_{t-1}) (EMA)"),
    ("grad/norm", "gradient norm (EMA)"),
    ("lr", "learning rate"),
]
SMOOTH = {"reward/mean", "is/ess_ratio", "grad/cos_prev", "grad/norm"}


def _run_one(args) -> dict:
    scn_json, out_dir = args
    from sandbox.runner import run_scenario
    from sandbox.scenario.model import Scenario

    scn = Scenario.model_validate_json(scn_json)
    t0 = time.perf_counter()
    res = run_scenario(scn, out_dir)
    return {"metrics": res.metrics, "summary": res.summary, "wall_s": time.perf_counter() - t0}


def _with_seed(scn, seed: int):
    return scn.model_copy(update={"run": scn.run.model_copy(update={"seed": seed})}, deep=True)


def _final(m: pd.DataFrame, col: str, frac: float = 0.2) -> float:
    if col not in m:
        return math.nan
    s = m[col].dropna()
    if s.empty:
        return math.nan
    n = max(1, int(math.ceil(len(s) * frac)))
    return float(s.iloc[-n:].mean())


def run_mission(path: str, seeds: list[int], out: Path, jobs: int = 2, sets: list[str] | None = None, control: bool = True):
    from sandbox.scenario import load_scenario, variant_scenarios

    scn, raw = load_scenario(path, sets or [])
    variants = variant_scenarios(scn, raw)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}

    def submit(pool, label, vscn):
        futs = [pool.submit(_run_one, (_with_seed(vscn, s).model_dump_json(), str(out / label / f"seed{s}"))) for s in seeds]
        return futs

    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futs = {label: submit(pool, label, v) for label, v in variants.items()}
        for label, fs in futs.items():
            results[label] = [f.result() for f in fs]
            print(f"  {label}: done ({time.perf_counter() - t0:.0f}s)", flush=True)
        if control and "vcpo" in variants:
            base = variants["vcpo"]
            fs = []
            for s, r in zip(seeds, results["vcpo"]):
                lr_mean = float(r["metrics"]["lr"].mean())
                stabs = [st for st in base.algorithm.stabilizers if st.name != "vcpo_lr"]
                opt = base.algorithm.optimizer.model_copy(update={"lr": lr_mean})
                alg = base.algorithm.model_copy(update={"stabilizers": stabs, "optimizer": opt})
                c = _with_seed(base.model_copy(update={"algorithm": alg, "title": "vcpo_const_lr"}), s)
                fs.append(pool.submit(_run_one, (c.model_dump_json(), str(out / "vcpo_const_lr" / f"seed{s}"))))
            results["vcpo_const_lr"] = [f.result() for f in fs]
            print(f"  vcpo_const_lr: done ({time.perf_counter() - t0:.0f}s)", flush=True)
    table = summarize(results, seeds)
    (out / "mission.json").write_text(json.dumps(table, indent=2))
    (out / "mission.md").write_text(markdown(table, scn.title))
    mission_figure(results, out / "mission.png", scn.title)
    return results, table


def summarize(results: dict[str, list[dict]], seeds: list[int]) -> dict:
    table = {}
    for label, runs in results.items():
        row = {}
        for col, key in (("eval/expected_reward", "heldout_reward"), ("eval/accuracy", "greedy_accuracy"), ("reward/mean", "train_reward")):
            vals = np.array([_final(r["metrics"], col) for r in runs])
            row[key] = {"mean": float(np.nanmean(vals)), "std": float(np.nanstd(vals)), "min": float(np.nanmin(vals)),
                        "max": float(np.nanmax(vals)), "per_seed": vals.tolist()}
        first = [_first(r["metrics"], "eval/expected_reward") for r in runs]
        row["initial_heldout_reward"] = float(np.nanmean(first))
        for col, key in (("is/ess_ratio", "ess_ratio_mean"), ("grad/cos_prev", "grad_cos_mean"), ("grad/norm", "grad_norm_mean"),
                         ("gac/projected", "gac_projected_frac"), ("lr/scale", "lr_scale_mean"), ("lr", "lr_mean")):
            vals = [float(r["metrics"][col].mean()) for r in runs if col in r["metrics"]]
            row[key] = float(np.mean(vals)) if vals else None
        row["wall_s_mean"] = float(np.mean([r["wall_s"] for r in runs]))
        row["status"] = [r["summary"]["status"] for r in runs]
        row["seeds"] = list(seeds)
        table[label] = row
    return table


def _first(m: pd.DataFrame, col: str) -> float:
    if col not in m:
        return math.nan
    s = m[col].dropna()
    return float(s.iloc[0]) if len(s) else math.nan


def markdown(table: dict, title: str) -> str:
    lines = [f"# {title}", "", "| variant | held-out reward (final) | greedy accuracy | ESS/N | cos(g_t,g_t-1) | grad norm | GAC proj. | LR | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda d: f"{d['mean']:.3f} ± {d['std']:.3f} [{d['min']:.3f}, {d['max']:.3f}]"  # noqa: E731
    opt = lambda x, f=".3f": "-" if x is None else format(x, f)  # noqa: E731
    for label, r in table.items():
        lines.append(
            f"| {label} | {fmt(r['heldout_reward'])} | {fmt(r['greedy_accuracy'])} | {opt(r['ess_ratio_mean'])} | "
            f"{opt(r['grad_cos_mean'])} | {opt(r['grad_norm_mean'])} | {opt(r['gac_projected_frac'], '.2f')} | "
            f"{opt(r['lr_mean'], '.2e')} | {r['wall_s_mean']:.0f} |"
        )
    first = next(iter(table.values()))
    lines += ["", f"Initial held-out reward (base model after step 0): {first['initial_heldout_reward']:.3f}. "
              "Final = mean of the last 20% of evaluations; ± is the std over seeds, [min, max] the range."]
    return "\n".join(lines) + "\n"


def mission_figure(results: dict[str, list[dict]], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, runs) in enumerate(results.items()):
        c = colors[i % len(colors)]
        for ax, (col, name) in zip(axes.flat, PANELS):
            curves = []
            for r in runs:
                m = r["metrics"]
                if col not in m:
                    continue
                d = m[["step", col]].dropna()
                y = d[col].ewm(alpha=0.1).mean() if col in SMOOTH else d[col]
                curves.append(pd.Series(y.to_numpy(), index=d.step.to_numpy()))
            if not curves:
                continue
            df = pd.concat(curves, axis=1)
            ax.plot(df.index, df.mean(axis=1), color=c, label=label, lw=1.6)
            if df.shape[1] > 1:
                ax.fill_between(df.index, df.min(axis=1), df.max(axis=1), color=c, alpha=0.15, lw=0)
            ax.set_title(name, fontsize=10)
            ax.set_xlabel("learner step")
            ax.grid(alpha=0.3)
    axes.flat[-1].set_yscale("log")
    axes.flat[0].legend(fontsize=8)
    n = len(next(iter(results.values())))
    fig.suptitle(f"{title} — mean over {n} seed(s), band = min..max", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--jobs", type=int, default=2, help="parallel processes")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="dotted.key=value override")
    ap.add_argument("--no-control", action="store_true", help="skip the VCPO constant-LR control")
    a = ap.parse_args(argv)
    out = a.out or Path("runs") / Path(a.scenario).stem
    _, table = run_mission(a.scenario, a.seeds, out, a.jobs, a.sets, control=not a.no_control)
    print(markdown(table, str(a.scenario)))
    print(f"figure: {out / 'mission.png'}")


if __name__ == "__main__":
    main()
