"""A mission: a scenario's variants over several seeds, run as a sweep, and the mission figure.

``sandbox run scenarios/lm_mission.toml`` runs every variant once (one seed) with the standard
comparison table and ``comparison.png`` (reward only). This module adds what a claim about
stabilizers needs: several seeds, the diagnostics beside the reward in ONE figure, and the controls.

    sandbox mission lm_mission --seeds 3 -j 2

The runs are a sweep (:func:`sandbox.sweep.api.run_sweep`: variant x seed, local processes, resumable,
a failed run recorded and the others kept), so ``<out>`` (default ``runs/<scenario stem>``) is a sweep
directory: ``runs/<id>/`` (full run directories), ``results.parquet``, ``metrics.parquet``. The mission
adds ``mission.png`` (held-out reward, train reward, ESS ratio, consecutive-gradient cosine,
gradient norm and LR per variant: mean over seeds with a min-max band), ``mission.json`` and
``mission.md`` (final held-out reward and greedy accuracy per variant, mean ± std and min-max over
seeds, wall time, GAC projection frequency, VCPO's mean LR multiplier).

Control ``vcpo_const_lr`` (added when a variant is named ``vcpo``; its own sweep in
``<out>/vcpo_const_lr/``): the VCPO variant without its ESS LR rule, at a constant LR equal to the
mean effective LR that VCPO used in the same seed, so the effect of *adapting* the rate is separated
from the effect of a *smaller* rate (VCPO, arXiv 2602.17616; ``docs/methods/stabilizers.md#vcpo_lr``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from sandbox.base import progress as progress_display  # `progress` is run_mission's flag
from sandbox.base.readfile import read_own_json
from sandbox.scenario.load import apply_overrides, load_scenario
from sandbox.sweep.execute import run_sweep
from sandbox.sweep.results import run_dir, run_state
from sandbox.sweep.spec import RunSpec, SweepSpec, parse_sweep

PANELS = [
    ("eval/expected_reward", "held-out reward (sampled)"),
    ("reward/mean", "train reward (EMA)"),
    ("is/ess_ratio", "ESS / N, sequence weights (EMA)"),
    ("grad/cos_prev", "cos(g_t, g_{t-1}) (EMA)"),
    ("grad/norm", "gradient norm (EMA)"),
    ("lr", "learning rate"),
]
SMOOTH = {"reward/mean", "is/ess_ratio", "grad/cos_prev", "grad/norm"}
CONTROL = "vcpo_const_lr"


def _read_json(path: Path) -> dict:
    try:  # bounded, no link followed: a FIFO or /dev/zero planted there is no file of ours
        return read_own_json(path)
    except ValueError:
        return {}


def _outcome(out: Path, run: RunSpec) -> dict:
    """What the mission tables need of one finished sweep run: its metrics, summary and wall time
    (a failed run: empty metrics, status ``failed``)."""
    path = run_dir(out, run.id)
    if run_state(path) != "done":
        return {"metrics": pd.DataFrame(), "summary": {"status": "failed"}, "wall_s": math.nan, "seed": run.seed}
    wall = _read_json(path / "timing.json").get("wall_s", math.nan)
    metrics = pd.read_parquet(path / "metrics.parquet")
    return {"metrics": metrics, "summary": _read_json(path / "summary.json"), "wall_s": wall, "seed": run.seed}


def _by_label(spec: SweepSpec, out: Path, label_of) -> dict[str, list[dict]]:
    """Outcomes grouped by label, in the sweep's order (seeds in the order given)."""
    results: dict[str, list[dict]] = {}
    for run in spec.runs:
        results.setdefault(label_of(run), []).append(_outcome(out, run))
    return results


def _final(m: pd.DataFrame, col: str, frac: float = 0.2) -> float:
    if col not in m:
        return math.nan
    s = m[col].dropna()
    if s.empty:
        return math.nan
    n = max(1, int(math.ceil(len(s) * frac)))
    return float(s.iloc[-n:].mean())


def control_sweep(base: dict, vcpo_runs: list[dict]) -> SweepSpec | None:
    """The constant-LR control of the ``vcpo`` variant: ``base`` (the variant's scenario data) without
    the ``vcpo_lr`` stabilizer, one run per finished VCPO seed at that seed's mean LR."""
    done = [r for r in vcpo_runs if "lr" in r["metrics"]]
    if not done:
        return None
    stabilizers = [st for st in base.get("algorithm", {}).get("stabilizers", []) if st.get("name") != "vcpo_lr"]
    raw = {
        "base": base,
        "sweep": {"name": CONTROL},
        "set": {"algorithm.stabilizers": stabilizers, "title": CONTROL},
        "zip": [
            {
                "run.seed": [r["seed"] for r in done],
                "algorithm.optimizer.lr": [float(r["metrics"]["lr"].mean()) for r in done],
            }
        ],
    }
    return parse_sweep(raw, source=f"{CONTROL} control", default_name=CONTROL)


def run_mission(
    path: str,
    seeds: list[int],
    out: Path,
    jobs: int = 2,
    sets: list[str] | None = None,
    control: bool = True,
    progress: bool = True,
):
    """Run every variant of the scenario at ``path`` for every seed (``jobs`` parallel processes),
    then the VCPO constant-LR control, and write ``mission.json``, ``mission.md`` and ``mission.png``."""
    scn, raw = load_scenario(path, sets or [])
    spec = parse_sweep({"base": raw, "seeds": list(seeds)}, source=str(path), default_name=Path(path).stem)
    out = Path(out)
    run_sweep(spec, out, workers=jobs, progress=progress)
    results = _by_label(spec, out, lambda run: run.params.get("variant", ""))
    if control and "vcpo" in results:
        base = apply_overrides({k: v for k, v in raw.items() if k != "variants"}, scn.variants["vcpo"])
        ctl = control_sweep(base, results["vcpo"])
        if ctl is not None:
            run_sweep(ctl, out / CONTROL, workers=jobs, progress=progress)
            results[CONTROL] = _by_label(ctl, out / CONTROL, lambda run: CONTROL)[CONTROL]
    with progress_display.phase("figures: mission.png, mission.json, mission.md"):
        table = summarize(results, seeds)
        (out / "mission.json").write_text(json.dumps(table, indent=2))
        (out / "mission.md").write_text(markdown(table, scn.title))
        mission_figure(results, out / "mission.png", scn.title)
    return results, table


def _over_seeds(stat, values) -> float:
    """``stat`` of the finite values (NaN when none: every run of the variant failed)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return float(stat(v)) if v.size else math.nan


def summarize(results: dict[str, list[dict]], seeds: list[int]) -> dict:
    table = {}
    for label, runs in results.items():
        row = {}
        for col, key in (
            ("eval/expected_reward", "heldout_reward"),
            ("eval/accuracy", "greedy_accuracy"),
            ("reward/mean", "train_reward"),
        ):
            vals = np.array([_final(r["metrics"], col) for r in runs])
            row[key] = {
                "mean": _over_seeds(np.mean, vals),
                "std": _over_seeds(np.std, vals),
                "min": _over_seeds(np.min, vals),
                "max": _over_seeds(np.max, vals),
                "per_seed": vals.tolist(),
            }
        first = [_first(r["metrics"], "eval/expected_reward") for r in runs]
        row["initial_heldout_reward"] = _over_seeds(np.mean, first)
        for col, key in (
            ("is/ess_ratio", "ess_ratio_mean"),
            ("grad/cos_prev", "grad_cos_mean"),
            ("grad/norm", "grad_norm_mean"),
            ("gac/projected", "gac_projected_frac"),
            ("lr/scale", "lr_scale_mean"),
            ("lr", "lr_mean"),
        ):
            vals = [float(r["metrics"][col].mean()) for r in runs if col in r["metrics"]]
            row[key] = float(np.mean(vals)) if vals else None
        row["wall_s_mean"] = _over_seeds(np.mean, [r["wall_s"] for r in runs])
        row["status"] = [r["summary"]["status"] for r in runs]
        row["seeds"] = [r.get("seed", s) for r, s in zip(runs, seeds)]  # a control skips failed seeds
        table[label] = row
    return table


def _first(m: pd.DataFrame, col: str) -> float:
    if col not in m:
        return math.nan
    s = m[col].dropna()
    return float(s.iloc[0]) if len(s) else math.nan


def markdown(table: dict, title: str) -> str:
    lines = [
        f"# {title}",
        "",
        "| variant | held-out reward (final) | greedy accuracy | ESS/N | cos(g_t,g_t-1) | grad norm | GAC proj. | LR | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    fmt = lambda d: f"{d['mean']:.3f} ± {d['std']:.3f} [{d['min']:.3f}, {d['max']:.3f}]"  # noqa: E731
    opt = lambda x, f=".3f": "-" if x is None else format(x, f)  # noqa: E731
    for label, r in table.items():
        lines.append(
            f"| {label} | {fmt(r['heldout_reward'])} | {fmt(r['greedy_accuracy'])} | {opt(r['ess_ratio_mean'])} | "
            f"{opt(r['grad_cos_mean'])} | {opt(r['grad_norm_mean'])} | {opt(r['gac_projected_frac'], '.2f')} | "
            f"{opt(r['lr_mean'], '.2e')} | {r['wall_s_mean']:.0f} |"
        )
    first = next(iter(table.values()))
    lines += [
        "",
        f"Initial held-out reward (base model after step 0): {first['initial_heldout_reward']:.3f}. "
        "Final = mean of the last 20% of evaluations; ± is the std over seeds, [min, max] the range.",
    ]
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
    ap.add_argument("--jobs", type=int, default=2, help="parallel processes (1: in this process)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="dotted.key=value override")
    ap.add_argument("--no-control", action="store_true", help="skip the VCPO constant-LR control")
    a = ap.parse_args(argv)
    import sys

    sys.stderr.write(
        "warning: python -m sandbox.sweep.mission is deprecated and will be removed in the next release; "
        "use sandbox mission SCENARIO --seeds N -j N (seeds 0 ... N-1)\n"
    )
    out = a.out or Path("runs") / Path(a.scenario).stem
    # the phases on stderr when it is a terminal: the warm start, the runs with an ETA, the control, the figure
    with progress_display.session(progress_display.enabled()):
        _, table = run_mission(a.scenario, a.seeds, out, a.jobs, a.sets, control=not a.no_control)
    print(markdown(table, str(a.scenario)))
    print(f"figure: {out / 'mission.png'}")


if __name__ == "__main__":
    main()
