"""Time-to-target and the end-to-end speed-up against synchronous training
(``docs/time_to_target.md``).

**The curve.** A run's headline metric (the first one it logs of ``eval/expected_reward``,
``reward/mean``, ``eval/loss``, the same choice as the summary's final value) is read *per
replica* at the learner steps where it was measured. It is smoothed by a centred running mean:
the smoothed value at step ``s_i`` is the mean of the replica's measured values at the steps
``s_j`` with ``|s_j − s_i| ≤ window / 2`` (``run.target.window``, in learner steps; a centred
window adds no lag, so sync and async runs, whose steps last different times, are smoothed alike).
Steps after a replica diverged are left out.

**Reaching the target.** A replica reaches the target level ``L`` at the first smoothed point at
or above ``L`` (at or below for a loss). Between that point and the previous one, the simulated
time, the learner steps, the samples and the tokens are interpolated linearly with the fraction
``(L − z_{i−1}) / (z_i − z_{i−1})`` of the way the smoothed value travels; a replica whose first
point already meets ``L`` reaches it there. A replica that diverged (the learner's hard limits or
the growth rule of :mod:`sandbox.analysis.divergence`) reaches no target. A run's time-to-target is
the mean over its replicas, defined only when every replica reaches ``L`` (otherwise ``None`` with
the reason, and the per-replica values stay listed).

**The target.** ``run.target.reward`` is an absolute level; otherwise ``L = f × R_ref`` with
``f = run.target.fraction_of_sync`` (0.9 when unset) and ``R_ref`` the final value (the tail mean
over the last 10 % of its measured values) of the worst (seed, replica) unit of the synchronous
baseline, so that a converged baseline's every unit ends beyond the level by the margin ``1 − f``;
with no synchronous baseline, the same of the best configuration that did not diverge (for a single
run: its own). For a loss (lower is better) ``L = R_ref / f``, and "worst" is the highest. A
reference with a diverged unit defines no target. A run is *synchronous* when
``system.staleness.kind = "sync"``, or ``"fixed_lag"`` with ``k = 0`` (``docs/system.md#fixed_lag``).

**The speed-up.** Against the synchronous baseline ``s``, variant ``v`` is
``S = T̄_s / T̄_v`` faster end to end, ``T̄`` the mean time-to-target over all (seed, replica)
units. With ``N̄`` the mean samples trained on until the target, ``S = G × E`` exactly, where
``G = (N̄_v / T̄_v) / (N̄_s / T̄_s)`` is the throughput gain up to the target and
``E = N̄_s / N̄_v`` the sample-efficiency ratio. The interval is a percentile bootstrap
(``BOOTSTRAP_RESAMPLES`` draws from ``numpy.random.default_rng(BOOTSTRAP_SEED)``, so it is
reproducible): with at least two seeds per arm, seeds are resampled as clusters (all replicas of
a seed together, since they share one timing schedule); otherwise replicas are resampled. Draws are
paired (the same indices in both arms) when both arms have the same seeds (common random numbers,
the sandbox's convention for variants and sweep configurations); with one seed, replica ``i`` of
one arm is paired with replica ``i`` of the other. Efron & Tibshirani, *An Introduction to the
Bootstrap* (1993), ch. 13 (percentile intervals) and the cluster bootstrap of Davison & Hinkley,
*Bootstrap Methods and their Application* (1997), §3.8.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sandbox.base.readfile import read_json, read_toml_text
from sandbox.scenario.target_config import DEFAULT_FRACTION, DEFAULT_WINDOW, TargetConfig  # noqa: F401 (re-exported: the scenario's config, public here too)
from sandbox.system.staleness import CONTROLS

if TYPE_CHECKING:  # pandas is imported lazily: loading a scenario (which holds TargetConfig) does not need it
    import pandas as pd

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
CI_LEVEL = 0.95

HEADLINE = (
    ("eval/expected_reward", "final_expected_reward", True),
    ("reward/mean", "final_reward", True),
    ("eval/loss", "final_loss", False),
)
"""(metric column, summary field of its final value, higher is better), in order of preference."""

_COUNTS = (  # cumulative counters, recovered from the per-second throughput columns × time
    ("samples", "throughput/samples_per_s"),
    ("generated", "throughput/generated_per_s"),
    ("tokens", "throughput/tokens_per_s"),
)

REPLICA_KEYS = frozenset({"time", *(c for c, _, _ in HEADLINE), *(c for _, c in _COUNTS)})
"""The per-replica arrays :meth:`Curves.build` reads (the headline metric, and the clock and counters
of independent schedules)."""


def is_synchronous(staleness: Any) -> bool:
    """``system.staleness`` (a model or its dict) trains on-policy (``sync``, or ``fixed_lag`` with k = 0):
    what the control declares (``ControlConfig.is_synchronous``). A dict that is no valid control is not."""
    if hasattr(staleness, "is_synchronous"):
        return bool(staleness.is_synchronous())
    data = dict(staleness or {})
    if data.get("kind") not in CONTROLS:
        return False
    try:
        return bool(CONTROLS[data["kind"]].config.model_validate(data).is_synchronous())
    except ValueError:
        return False


# ------------------------------------------------------------------------------------------------
# one run's curves
# ------------------------------------------------------------------------------------------------


@dataclass
class Curves:
    """A run's headline metric per replica, with its clock and cumulative counters per learner step."""

    metric: str
    higher_is_better: bool
    step: np.ndarray  # (n,) learner step of each row (0-based)
    time: np.ndarray  # (n,) simulated time at the end of the step (s)
    counts: dict[str, np.ndarray]  # samples / generated / tokens, (n,) each, cumulative
    values: np.ndarray  # (n, R), NaN where not measured or after divergence
    final: float  # the summary's final value of the metric (tail mean)
    synchronous: bool = False
    target: TargetConfig = field(default_factory=TargetConfig)
    seed: int = 0
    replica_time: np.ndarray | None = None
    """``(n, R)`` each replica's own clock when the replicas ran under independent schedules
    (docs/system.md#independent-schedules); ``None``: they share :attr:`time`."""
    replica_counts: dict[str, np.ndarray] | None = None
    diverged_at: np.ndarray | None = None
    """``(R,)`` the step each replica diverged at (-1: it did not; hard limits or the growth rule,
    ``docs/time_to_target.md#divergence``); None: none did."""

    def clock(self, r: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Replica ``r``'s clock and cumulative counters (its own under independent schedules)."""
        if self.replica_time is None:
            return self.time, self.counts
        return self.replica_time[:, r], {k: v[:, r] for k, v in self.replica_counts.items()}

    @property
    def replicas(self) -> int:
        return int(self.values.shape[1])

    def diverged(self, r: int) -> int:
        """The step replica ``r`` diverged at, -1 when it did not."""
        return -1 if self.diverged_at is None else int(self.diverged_at[r])

    @property
    def diverged_replicas(self) -> int:
        return sum(self.diverged(r) >= 0 for r in range(self.replicas))

    def unit_finals(self) -> list[float]:
        """Each replica's final value: the mean of the last 10 % of its measured values (the
        summary's final value, per replica; NaN when it measured nothing)."""
        out = []
        for r in range(self.replicas):
            y = self.values[:, r]
            y = y[np.isfinite(y)]
            out.append(float(y[-max(1, int(len(y) * 0.1)) :].mean()) if len(y) else math.nan)
        return out

    def reference(self) -> float:
        """The worst replica's final value (the lowest reward, the highest loss): what a target
        taken from this run is a fraction of (``docs/time_to_target.md#the-target``)."""
        vals = [v for v in self.unit_finals() if math.isfinite(v)]
        if not vals:
            return math.nan
        return float(min(vals) if self.higher_is_better else max(vals))

    @property
    def has_tokens(self) -> bool:
        return bool(np.nanmax(self.counts["tokens"], initial=0.0) > 0)

    @classmethod
    def build(
        cls,
        metrics: pd.DataFrame,
        replica: dict[str, np.ndarray],
        summary: dict,
        diverged_at: Iterable[int],
        synchronous: bool,
        target: TargetConfig,
        seed: int,
    ) -> Curves | None:
        """From a run's metrics table, per-replica arrays (``{metric: (steps, R)}``) and summary;
        None when the run logged none of the headline metrics."""
        metric, final_key, higher = next(
            ((c, f, h) for c, f, h in HEADLINE if c in metrics and metrics[c].notna().any()), (None, None, True)
        )
        if metric is None or not len(metrics):
            return None
        step = metrics["step"].to_numpy(dtype=float)
        time = metrics["time"].to_numpy(dtype=float)
        counts = {
            name: np.rint(metrics[col].to_numpy(dtype=float) * time) if col in metrics else np.zeros_like(time)
            for name, col in _COUNTS
        }
        vals = replica.get(metric)
        if vals is None or vals.shape[0] != len(step):
            vals = metrics[metric].to_numpy(dtype=float)[:, None]
        vals = np.array(vals, dtype=float, copy=True)
        div = np.full(vals.shape[1], -1)
        for r, at in enumerate(list(diverged_at)[: vals.shape[1]]):
            if at is not None and at >= 0:
                div[r] = int(at)
                vals[step >= at, r] = np.nan  # the step that diverged and after: frozen or non-finite weights
        final = summary.get(final_key)
        final = float(final) if final is not None else math.nan
        replica_time = replica_counts = None
        own = replica.get("time")
        if own is not None and own.shape == vals.shape:  # independent schedules: one clock per replica
            replica_time = np.asarray(own, dtype=float)
            replica_counts = {
                name: np.rint(replica[col] * replica_time)
                if col in replica and replica[col].shape == vals.shape
                else np.zeros_like(replica_time)
                for name, col in _COUNTS
            }
        return cls(
            metric,
            higher,
            step,
            time,
            counts,
            vals,
            final,
            synchronous,
            target,
            seed,
            replica_time,
            replica_counts,
            div if (div >= 0).any() else None,
        )

    @classmethod
    def from_result(cls, result) -> Curves | None:
        """From a :class:`sandbox.run.runner.RunResult`."""
        scn = result.scenario
        diverged_at = (result.summary or {}).get("diverged_at", result.diverged_at)  # with the growth rule's
        return cls.build(
            result.metrics,
            result.replica_metrics,
            result.summary,
            diverged_at,
            is_synchronous(scn.system.staleness),
            scn.run.target,
            scn.run.seed,
        )

    @classmethod
    def from_run_dir(cls, path: str | Path) -> Curves | None:
        """From a run directory (``metrics.parquet``, ``replicas.npz``, ``summary.json``,
        ``scenario.toml``); reads only the columns and the array it needs, writes nothing."""
        import pandas as pd

        path = Path(path)
        summary = read_json(path / "summary.json", "run summary")  # bounded, regular files only (sandbox.base.readfile)
        scenario = read_toml_text(path / "scenario.toml", "resolved scenario")
        run = scenario.get("run", {})
        target = TargetConfig.model_validate(run.get("target", {}))
        metrics = pd.read_parquet(path / "metrics.parquet")
        keep = ["step", "time", *(c for _, c in _COUNTS), *(c for c, _, _ in HEADLINE)]
        metrics = metrics[[c for c in keep if c in metrics]]
        replica: dict[str, np.ndarray] = {}
        if (path / "replicas.npz").exists():
            with np.load(path / "replicas.npz") as npz:
                for c in [c for c, _, _ in HEADLINE] + ["time"] + [c for _, c in _COUNTS]:
                    key = c.replace("/", "__")
                    if key in npz.files:
                        replica[c] = npz[key]
        return cls.build(
            metrics,
            replica,
            summary,
            summary.get("diverged_at", []),
            is_synchronous(scenario.get("system", {}).get("staleness", {})),
            target,
            int(run.get("seed", 0)),
        )


# ------------------------------------------------------------------------------------------------
# smoothing and crossing
# ------------------------------------------------------------------------------------------------


def smooth(steps: np.ndarray, values: np.ndarray, window: float) -> np.ndarray:
    """Centred running mean: ``z_i = mean{values_j : |steps_j − steps_i| ≤ window/2}`` (``steps``
    sorted, no NaN)."""
    steps = np.asarray(steps, dtype=float)
    values = np.asarray(values, dtype=float)
    half = window / 2
    lo = np.searchsorted(steps, steps - half, side="left")
    hi = np.searchsorted(steps, steps + half, side="right")
    cs = np.concatenate([[0.0], np.cumsum(values)])
    return (cs[hi] - cs[lo]) / (hi - lo)


def first_crossing(z: np.ndarray, level: float, higher_is_better: bool = True) -> tuple[int, float] | None:
    """``(i, frac)``: the curve ``z`` first meets ``level`` at point ``i``, ``frac`` of the way
    from point ``i − 1`` (``frac = 1`` at point 0); None when it never does."""
    z = np.asarray(z, dtype=float)
    met = z >= level if higher_is_better else z <= level
    if not met.any():
        return None
    i = int(np.argmax(met))
    if i == 0:
        return 0, 1.0
    return i, float((level - z[i - 1]) / (z[i] - z[i - 1]))


@dataclass
class Reach:
    """When one replica reached the target (``None`` fields and a reason when it did not)."""

    time: float | None
    steps: float | None  # learner steps completed (step index + 1), interpolated
    samples: float | None  # samples trained on
    generated: float | None  # samples generated (dropped ones included)
    tokens: float | None  # tokens trained on
    best: float  # best smoothed value of the replica
    end_time: float  # time of the replica's last measured point
    reason: str = ""
    diverged: bool = False

    @property
    def reached(self) -> bool:
        return self.time is not None


def replica_reaches(curves: Curves, level: float, window: float | None = None) -> list[Reach]:
    """Per replica: the smoothed curve's first crossing of ``level`` (module docstring)."""
    window = curves.target.window if window is None else window
    out = []
    for r in range(curves.replicas):
        y = curves.values[:, r]
        rows = np.flatnonzero(np.isfinite(y))
        if curves.diverged(r) >= 0:  # a diverged replica reaches no target, not even one it crossed before diverging
            end = float(curves.clock(r)[0][rows[-1]]) if rows.size else math.nan
            out.append(
                Reach(
                    None,
                    None,
                    None,
                    None,
                    None,
                    math.nan,
                    end,
                    f"replica {r} diverged at step {curves.diverged(r)}",
                    diverged=True,
                )
            )
            continue
        if rows.size == 0:
            out.append(
                Reach(None, None, None, None, None, math.nan, math.nan, f"replica {r} has no finite {curves.metric}")
            )
            continue
        z = smooth(curves.step[rows], y[rows], window)
        best = float(z.max() if curves.higher_is_better else z.min())
        time, counts = curves.clock(r)
        end_time = float(time[rows[-1]])
        hit = first_crossing(z, level, curves.higher_is_better)
        if hit is None:
            why = f"never within {int(curves.step[rows[-1]]) + 1} steps ({end_time:.3g} s)"
            out.append(
                Reach(
                    None,
                    None,
                    None,
                    None,
                    None,
                    best,
                    end_time,
                    f"replica {r} {why}; best smoothed {curves.metric} {best:.3g}",
                )
            )
            continue
        i, frac = hit
        a, b = rows[max(i - 1, 0)], rows[i]

        def at(arr: np.ndarray) -> float:
            return float(arr[a] + frac * (arr[b] - arr[a])) if i > 0 else float(arr[b])

        out.append(
            Reach(
                at(time),
                at(curves.step + 1),
                at(counts["samples"]),
                at(counts["generated"]),
                at(counts["tokens"]) if curves.has_tokens else None,
                best,
                end_time,
            )
        )
    return out


# ------------------------------------------------------------------------------------------------
# the target level
# ------------------------------------------------------------------------------------------------


def target_level(
    target: TargetConfig, higher_is_better: bool, reference: float | None, reference_name: str
) -> tuple[float | None, str]:
    """``(level, rule)``: the level and how it was set, or ``(None, reason)``. ``reference_name``
    names where the reference final value comes from (e.g. "this synchronous run")."""
    if target.reward is not None:
        return float(target.reward), f"{'≥' if higher_is_better else '≤'} {target.reward:g} (run.target.reward)"
    f = target.fraction
    if reference is None or not math.isfinite(reference):
        return None, f"no final value of {reference_name} to take {f:g} of"
    if higher_is_better:
        if reference <= 0:
            return None, (
                f"{f:g} × {reference:.3g} (the final value of {reference_name}) is not a target: "
                "the final value is not positive; set run.target.reward"
            )
        return f * reference, f"≥ {f:g} × {reference:.3g}, the final value of {reference_name}"
    if reference <= 0:
        return None, (
            f"{reference:.3g} (the final value of {reference_name}) / {f:g} is not a target: the final loss "
            "is not positive; set run.target.reward"
        )
    return reference / f, f"≤ {reference:.3g} / {f:g}, the final value of {reference_name} over the fraction"


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return float(np.mean(vals)) if vals and len(vals) == len(xs) else None


def run_fields(curves: Curves | None, level: float | None, rule: str) -> dict[str, Any]:
    """The time-to-target fields of one run (``summary.json``, one row of ``results.parquet``)."""
    out: dict[str, Any] = {
        "target_metric": curves.metric if curves else None,
        "target_level": level,
        "target_rule": rule,
        "target_window_steps": curves.target.window if curves else None,
        "target_reached_replicas": 0,
        "time_to_target": None,
        "steps_to_target": None,
        "samples_to_target": None,
        "generated_samples_to_target": None,
        "tokens_to_target": None,
        "time_to_target_replicas": [],
        "time_to_target_reason": "",
    }
    if curves is None:
        out["time_to_target_reason"] = "the run logged none of " + ", ".join(c for c, _, _ in HEADLINE)
        return out
    if level is None:
        out["time_to_target_reason"] = rule
        return out
    reaches = replica_reaches(curves, level)
    out["target_reached_replicas"] = sum(r.reached for r in reaches)
    out["time_to_target_replicas"] = [r.time for r in reaches]
    if all(r.reached for r in reaches):
        out["time_to_target"] = _mean([r.time for r in reaches])
        out["steps_to_target"] = _mean([r.steps for r in reaches])
        out["samples_to_target"] = _mean([r.samples for r in reaches])
        out["generated_samples_to_target"] = _mean([r.generated for r in reaches])
        out["tokens_to_target"] = _mean([r.tokens for r in reaches]) if curves.has_tokens else None
    else:
        missed = [r.reason for r in reaches if not r.reached]
        out["time_to_target_reason"] = (
            f"{len(missed)} of {len(reaches)} replicas never reached {level:.4g}: "
            + "; ".join(missed[:3])
            + (f"; ... ({len(missed) - 3} more)" if len(missed) > 3 else "")
        )
    return out


def standalone_fields(curves: Curves | None) -> dict[str, Any]:
    """A run on its own (``summary.json``): an absolute target, or the fraction of its own final
    value when it is synchronous or has nothing to be compared with (variants and sweeps recompute
    the fields against their synchronous baseline)."""
    if curves is None:
        return run_fields(None, None, "")
    name = "this synchronous run" if curves.synchronous else "this run (no synchronous run to compare with)"
    level, rule = reference_level(curves.target, curves.higher_is_better, [curves], name)
    return run_fields(curves, level, rule)


def reference_level(
    target: TargetConfig, higher_is_better: bool, runs: list[Curves], name: str
) -> tuple[float | None, str]:
    """``(level, rule)`` from the reference ``runs`` (one configuration, all its seeds): an
    absolute ``run.target.reward``, else the fraction of the worst (seed, replica) unit's final
    value; no level when a unit of the reference diverged (``docs/time_to_target.md#the-target``)."""
    if target.reward is not None:
        return target_level(target, higher_is_better, None, name)
    units = sum(c.replicas for c in runs)
    diverged = sum(c.diverged_replicas for c in runs)
    if diverged:
        return None, (
            f"no target: {name} diverged ({diverged} of {units} replicas), and a diverged run defines no "
            "target (docs/time_to_target.md#the-target)"
        )
    vals = [c.reference() for c in runs if math.isfinite(c.reference())]
    ref = (min(vals) if higher_is_better else max(vals)) if vals else None
    if units > 1:
        name = f"{name}, its worst of {units} replicas"
    return target_level(target, higher_is_better, ref, name)


# ------------------------------------------------------------------------------------------------
# configurations and the speed-up
# ------------------------------------------------------------------------------------------------


@dataclass
class Arm:
    """The runs of one configuration (a variant, or a sweep's combination of swept values), all seeds."""

    label: str
    runs: list[Curves]
    run_ids: list[str] = field(default_factory=list)

    @property
    def synchronous(self) -> bool:
        return bool(self.runs) and all(c.synchronous for c in self.runs)

    @property
    def final(self) -> float:
        vals = [c.final for c in self.runs if math.isfinite(c.final)]
        return float(np.mean(vals)) if vals else math.nan

    @property
    def diverged(self) -> bool:
        """Some replica of some run of the configuration diverged."""
        return any(c.diverged_replicas for c in self.runs)

    @property
    def reference(self) -> float:
        """The worst (seed, replica) unit's final value (:meth:`Curves.reference`)."""
        vals = [c.reference() for c in self.runs if math.isfinite(c.reference())]
        if not vals:
            return math.nan
        return float(min(vals) if self.runs[0].higher_is_better else max(vals))

    def clusters(self, level: float) -> dict[int, list[Reach]]:
        out: dict[int, list[Reach]] = {}
        for c in self.runs:
            out.setdefault(c.seed, []).extend(replica_reaches(c, level))
        return out


@dataclass
class Speedup:
    """End-to-end speed-up of a configuration against its synchronous baseline (module docstring);
    ``value`` None with a ``reason`` when undefined (no bound is claimed then: docs/time_to_target.md)."""

    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    throughput_gain: float | None = None
    sample_efficiency: float | None = None
    time_sync: float | None = None
    time_variant: float | None = None
    reason: str = ""
    units: int = 0
    interval: str = ""

    def fields(self) -> dict[str, Any]:
        return {
            "speedup_vs_sync": self.value,
            "speedup_ci_low": self.ci_low,
            "speedup_ci_high": self.ci_high,
            "throughput_gain_vs_sync": self.throughput_gain,
            "sample_efficiency_vs_sync": self.sample_efficiency,
            "speedup_reason": self.reason,
        }

    @property
    def significant(self) -> bool:
        """The 95 % interval excludes 1 (False without an interval)."""
        return self.ci_low is not None and self.ci_high is not None and not (self.ci_low <= 1.0 <= self.ci_high)


def _cluster_arrays(clusters: dict[int, list[Reach]], by_seed: bool) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """(ids, per-cluster sum of times, of samples, unit counts): clusters are seeds or single replicas."""
    ids, t, n, k = [], [], [], []
    for seed, reaches in clusters.items():
        groups = [reaches] if by_seed else [[r] for r in reaches]
        for j, g in enumerate(groups):
            ids.append(seed if by_seed else (seed, j))
            t.append(sum(r.time for r in g))
            n.append(sum(r.samples for r in g))
            k.append(len(g))
    return ids, np.array(t, dtype=float), np.array(n, dtype=float), np.array(k, dtype=float)


def bootstrap_ratio(
    sync: dict[int, list[Reach]],
    variant: dict[int, list[Reach]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = CI_LEVEL,
) -> tuple[float | None, float | None, str]:
    """Percentile interval of ``mean T_sync / mean T_variant`` (every unit reached; module docstring)."""
    by_seed = len(sync) >= 2 and len(variant) >= 2
    ids_s, ts, _, ks = _cluster_arrays(sync, by_seed)
    ids_v, tv, _, kv = _cluster_arrays(variant, by_seed)
    if len(ids_s) < 2 and len(ids_v) < 2:
        return None, None, "one seed and one replica per arm: no interval"
    paired = ids_s == ids_v
    rng = np.random.default_rng(seed)
    draw_s = rng.integers(0, len(ids_s), size=(resamples, len(ids_s)))
    draw_v = draw_s if paired else rng.integers(0, len(ids_v), size=(resamples, len(ids_v)))
    ratio = (ts[draw_s].sum(1) / ks[draw_s].sum(1)) / (tv[draw_v].sum(1) / kv[draw_v].sum(1))
    lo, hi = np.quantile(ratio, [(1 - level) / 2, 1 - (1 - level) / 2])
    what = "seeds" if by_seed else "replicas"
    return (
        float(lo),
        float(hi),
        f"{level:.0%} percentile bootstrap over {what}{', paired' if paired else ''} ({resamples} draws)",
    )


def bootstrap_mean(
    clusters: dict[int, list[Reach]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = CI_LEVEL,
) -> tuple[float | None, float | None]:
    """Percentile interval of the mean time-to-target of one configuration (seeds resampled as
    clusters when there are at least two, replicas otherwise; every unit reached)."""
    ids, t, _, k = _cluster_arrays(clusters, len(clusters) >= 2)
    if len(ids) < 2:
        return None, None
    draw = np.random.default_rng(seed).integers(0, len(ids), size=(resamples, len(ids)))
    lo, hi = np.quantile(t[draw].sum(1) / k[draw].sum(1), [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def speedup(sync: dict[int, list[Reach]], variant: dict[int, list[Reach]]) -> Speedup:
    """End-to-end speed-up of ``variant`` against ``sync`` (per seed: the replicas' reaches)."""
    all_s = [r for rs in sync.values() for r in rs]
    all_v = [r for rs in variant.values() for r in rs]
    out = Speedup(units=len(all_v))
    if not all_s or not all_v:
        out.reason = "no finished run in one of the two configurations"
        return out
    miss_s = [r for r in all_s if not r.reached]
    miss_v = [r for r in all_v if not r.reached]

    def units(miss: list[Reach], total: int, arm: dict) -> str:
        div = sum(r.diverged for r in miss)
        return (
            f"{len(miss)} of {total} replicas"
            + (f" over {len(arm)} seeds" if len(arm) > 1 else "")
            + " never reached the target"
            + (f", {div} diverged" if div else "")
        )

    # A unit that never reached the target has no time to average: no speed-up, and no bound is
    # claimed either (the run's length is an arbitrary stopping point, not a measurement).
    if miss_v and not miss_s:
        out.reason = units(miss_v, len(all_v), variant)
        out.time_sync = float(np.mean([r.time for r in all_s]))
        return out
    if miss_s:
        out.reason = "the synchronous baseline: " + units(miss_s, len(all_s), sync)
        if not miss_v:
            out.time_variant = float(np.mean([r.time for r in all_v]))
        return out
    t_s = float(np.mean([r.time for r in all_s]))
    t_v = float(np.mean([r.time for r in all_v]))
    n_s = float(np.mean([r.samples for r in all_s]))
    n_v = float(np.mean([r.samples for r in all_v]))
    out.time_sync, out.time_variant = t_s, t_v
    out.value = t_s / t_v
    if n_s > 0 and n_v > 0:
        out.throughput_gain = (n_v / t_v) / (n_s / t_s)
        out.sample_efficiency = n_s / n_v
    out.ci_low, out.ci_high, out.interval = bootstrap_ratio(sync, variant)
    return out


@dataclass
class Comparison:
    """Configurations compared against their synchronous baselines under one target rule each."""

    arms: list[Arm]
    baseline: dict[str, str | None]  # arm label -> the label of its synchronous baseline
    levels: dict[str, tuple[float | None, str]] = field(default_factory=dict)  # label -> (level, rule)
    reaches: dict[str, dict[int, list[Reach]]] = field(default_factory=dict)
    speedups: dict[str, Speedup] = field(default_factory=dict)

    def arm(self, label: str) -> Arm:
        return next(a for a in self.arms if a.label == label)

    def run_fields(self, label: str, curves: Curves) -> dict[str, Any]:
        level, rule = self.levels[label]
        return run_fields(curves, level, rule)

    def variant_fields(self, label: str) -> dict[str, Any]:
        """The fields of a one-run configuration (a variant of ``sandbox run``) for its summary.json:
        its time-to-target against the common target, and its speed-up against the baseline."""
        arm = self.arm(label)
        out = run_fields(arm.runs[0] if arm.runs else None, *self.levels.get(label, (None, "")))
        out.update(self.speedups.get(label, Speedup(reason="no synchronous baseline to compare with")).fields())
        out["speedup_baseline"] = self.baseline.get(label) or ""
        return out

    def config_fields(self, label: str) -> dict[str, Any]:
        """Per configuration: mean time-to-target over all its units with its interval, and the speed-up."""
        level, rule = self.levels[label]
        arm = self.arm(label)
        units = [r for rs in self.reaches.get(label, {}).values() for r in rs]
        reached = [r for r in units if r.reached]
        row: dict[str, Any] = {
            "configuration": label,
            "runs": len(arm.runs),
            "synchronous": arm.synchronous,
            "baseline": self.baseline.get(label) or "",
            "target_metric": arm.runs[0].metric if arm.runs else None,
            "target_level": level,
            "target_rule": rule,
            "final": arm.final,
            "reached_units": f"{len(reached)}/{len(units)}",
            "time_to_target": None,
            "time_to_target_ci_low": None,
            "time_to_target_ci_high": None,
            "steps_to_target": None,
            "samples_to_target": None,
        }
        if units and len(reached) == len(units):
            row["time_to_target"] = float(np.mean([r.time for r in units]))
            row["steps_to_target"] = float(np.mean([r.steps for r in units]))
            row["samples_to_target"] = float(np.mean([r.samples for r in units]))
            lo, hi = bootstrap_mean(self.reaches[label])
            row["time_to_target_ci_low"], row["time_to_target_ci_high"] = lo, hi
        sp = self.speedups.get(label, Speedup(reason="no synchronous baseline to compare with"))
        row.update(sp.fields())
        # the intervals resample replicas of one timing schedule only (they hold the learning's randomness, not the timing's)
        row["one_schedule"] = bool(arm.runs) and one_schedule(self, label, self.baseline.get(label) or label)
        return row


def compare(arms: list[Arm], baseline: dict[str, str | None], kind: str = "configuration") -> Comparison:
    """Target levels, reaches and speed-ups of ``arms``; ``baseline`` maps each label to its
    synchronous baseline's label (itself for a synchronous arm, None when it has none); ``kind``
    names an arm in the rule texts ("configuration", "variant")."""
    comp = Comparison(arms, baseline)
    by_label = {a.label: a for a in arms}
    finished = [a for a in arms if a.runs]
    for arm in finished:
        target, higher = arm.runs[0].target, arm.runs[0].higher_is_better
        base = baseline.get(arm.label)
        if base is not None and by_label[base].runs:
            ref_arm = by_label[base]
            name = f"the synchronous {kind} '{base}'"
            if len(ref_arm.runs) > 1:
                name += f" ({len(ref_arm.runs)} runs)"
        else:  # the best configuration that did not diverge, judged by its worst unit
            pool = [
                a
                for a in finished
                if a.runs[0].metric == arm.runs[0].metric and not a.diverged and math.isfinite(a.reference)
            ]
            ref_arm = (max if higher else min)(pool, key=lambda a: a.reference) if pool else arm
            name = (
                f"the best {kind} '{ref_arm.label}' (no synchronous run to compare with)"
                if len(finished) > 1
                else "this run (no synchronous run to compare with)"
            )
        comp.levels[arm.label] = reference_level(target, higher, ref_arm.runs, name)
        level = comp.levels[arm.label][0]
        comp.reaches[arm.label] = arm.clusters(level) if level is not None else {}
    for arm in finished:
        base = baseline.get(arm.label)
        level = comp.levels[arm.label][0]
        if base is None or not by_label[base].runs:
            comp.speedups[arm.label] = Speedup(reason="no synchronous baseline to compare with")
        elif level is None:
            comp.speedups[arm.label] = Speedup(reason=comp.levels[arm.label][1])
        elif by_label[base].runs[0].metric != arm.runs[0].metric:
            comp.speedups[arm.label] = Speedup(
                reason=f"the baseline logs {by_label[base].runs[0].metric}, this configuration {arm.runs[0].metric}"
            )
        else:
            same = comp.levels.get(base, (None, ""))[0] == level
            base_reach = comp.reaches[base] if same else by_label[base].clusters(level)
            comp.speedups[arm.label] = speedup(base_reach, comp.reaches[arm.label])
    return comp


# ------------------------------------------------------------------------------------------------
# `sandbox run` with variants
# ------------------------------------------------------------------------------------------------


def compare_variants(results: dict[str, Any]) -> Comparison:
    """The variants of one ``sandbox run`` (``{label: RunResult}``): the baseline of every variant
    is the first synchronous one (none when no variant is synchronous)."""
    arms = []
    for label, res in results.items():
        c = Curves.from_result(res)
        arms.append(Arm(label, [c] if c is not None else []))
    sync = next((a.label for a in arms if a.synchronous), None)
    return compare(arms, {a.label: sync for a in arms}, kind="variant")


def one_schedule(comp: Comparison, label: str, base: str) -> bool:
    """Whether the interval between ``label`` and ``base`` resamples replicas that all ran under one
    timing schedule (one seed per arm and ``run.schedules = "shared"``): it then holds the learning's
    randomness only, not the timing's, and the sentence says so (docs/time_to_target.md#intervals)."""
    runs = comp.arm(label).runs + comp.arm(base).runs
    seeds = {c.seed for c in comp.arm(label).runs}
    return bool(runs) and len(seeds) < 2 and all(c.replica_time is None for c in runs)


def describe(comp: Comparison, label: str, throughput_ratio: float | None = None) -> str:
    """One sentence in plain words: how fast ``label`` reaches the target against its synchronous
    baseline, and how that splits into samples per second and samples needed. No speed-up is
    stated without a target every unit of both arms reached, no bound is stated in its place, and
    an interval that contains 1 reads "no significant difference" (docs/time_to_target.md).
    ``throughput_ratio``: samples per second against the baseline over the whole run (the figure
    of the run table); without it, the gain up to the target (``Speedup.throughput_gain``)."""
    base = comp.baseline.get(label)
    level, rule = comp.levels.get(label, (None, ""))
    sp = comp.speedups.get(label)
    if level is None:
        return f"{label}: {rule if rule.startswith('no target') else f'no target ({rule})'}; no speed-up is claimed"
    arm = comp.arm(label)
    higher = arm.runs[0].higher_is_better if arm.runs else True
    # a reward reads "reaches 0.9"; a loss names itself: "reaches eval/loss ≤ 0.573"
    lv = f"{level:.3g}" if higher else f"{arm.runs[0].metric} ≤ {level:.3g}"
    if base is None or sp is None:
        units = [r for rs in comp.reaches.get(label, {}).values() for r in rs]
        if units and all(r.reached for r in units):
            return (
                f"{label} reaches {lv} in {np.mean([r.time for r in units]):.3g} s (no synchronous run to compare with)"
            )
        return f"{label} does not reach {lv} in every replica (no synchronous run to compare with)"
    if base == label:
        if sp.time_sync is None:
            return f"{label} (the synchronous baseline): {sp.reason}"
        return f"{label} (the synchronous baseline) reaches {lv} in {sp.time_sync:.3g} s"
    gain = throughput_ratio if throughput_ratio is not None and math.isfinite(throughput_ratio) else sp.throughput_gain
    rate = f"{gain:.2g}× {'more' if gain > 1 else 'as many'} samples per second" if gain is not None else ""
    if sp.value is None:
        if sp.time_sync is not None:  # the variant missed, the baseline reached it
            return (
                f"{label} does not reach {lv} ({sp.reason}) while synchronous training reaches it in "
                f"{sp.time_sync:.3g} s: no end-to-end speed-up is claimed"
            )
        return f"{label}: no end-to-end speed-up ({sp.reason})"
    scope = " over replicas of one timing schedule" if one_schedule(comp, label, base) else ""
    if sp.ci_low is not None and not sp.significant:
        faster = "no significant difference"
        ci = f" ({sp.value:.2f}×, 95% CI {sp.ci_low:.2f}–{sp.ci_high:.2f}×{scope})"
    elif sp.value >= 1:
        faster = f"{sp.value:.2f}× faster"
        ci = f" (95% CI {sp.ci_low:.2f}–{sp.ci_high:.2f}×{scope})" if sp.ci_low is not None else ""
    else:  # the interval in the same "slower" units as the estimate
        faster = f"{1 / sp.value:.2f}× slower"
        ci = f" (95% CI {1 / sp.ci_high:.2f}–{1 / sp.ci_low:.2f}×{scope})" if sp.ci_low is not None else ""
    text = (
        f"{label} reaches {lv} in {sp.time_variant:.3g} s vs {sp.time_sync:.3g} s synchronous: {faster} end to end{ci}"
    )
    if rate:
        text += f", although it trains on {rate}" if gain > 1 and gain > sp.value else f"; it trains on {rate}"
    if sp.sample_efficiency is not None:
        text += f": it needs {1 / sp.sample_efficiency:.3g}× as many samples to get there"
    return text


# ------------------------------------------------------------------------------------------------
# sweeps
# ------------------------------------------------------------------------------------------------

_CACHE: dict[str, tuple[float, Curves | None]] = {}


def _curves_cached(path: Path) -> Curves | None:
    """Curves of a finished run directory, re-read only when its summary.json changed."""
    key = str(path.resolve())
    try:
        stamp = (path / "summary.json").stat().st_mtime_ns
    except OSError:
        return None
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        c = Curves.from_run_dir(path)
    except (OSError, ValueError, KeyError) as exc:  # an unreadable run is reported, never fatal to the table
        raise _Unreadable(f"{path.name}: {exc}") from None
    _CACHE[key] = (stamp, c)
    return c


class _Unreadable(Exception):
    pass


def _mode_groups(keys_by_group: list[list[str]], df: pd.DataFrame, sync: pd.Series) -> list[int]:
    """Axis groups whose value decides whether a run is synchronous: some value of the group holds
    only synchronous runs and another only asynchronous ones."""
    found = []
    for gi, keys in enumerate(keys_by_group):
        keys = [k for k in keys if k in df]
        if not keys:
            continue
        per_value = sync.groupby([df[k].astype(str) for k in keys], sort=False).agg(["all", "any"])
        if per_value["all"].any() and (~per_value["any"]).any():
            found.append(gi)
    return found


def sweep_comparison(
    results: pd.DataFrame, out: str | Path, axes: list[list[str]], run_dir
) -> tuple[pd.DataFrame, pd.DataFrame, Comparison | None]:
    """Time-to-target of every finished run of a sweep against its configuration's target, and
    the speed-up of every configuration against its synchronous baseline.

    A configuration is one combination of the swept values (seeds pooled). Its baseline is the
    synchronous configuration with the same values of every axis group that does not decide
    synchronicity (the groups where one value is all synchronous and another all asynchronous);
    the first such configuration in sweep order when several match. Returns (per-run columns
    indexed like ``results``, one row per configuration, the :class:`Comparison`: None when no
    run is finished). ``run_dir(out, id)`` is a run's directory."""
    import pandas as pd

    out = Path(out)
    keys = [k for g in axes for k in g if k in results.columns]
    done_mask = (
        results["status"].isin(["completed", "diverged"])
        if "status" in results
        else pd.Series(False, index=results.index)
    )
    curves: dict[Any, Curves | None] = {}
    unreadable: dict[Any, str] = {}
    for idx in results.index[done_mask]:
        try:
            curves[idx] = _curves_cached(run_dir(out, results.at[idx, "id"]))
        except _Unreadable as exc:
            unreadable[idx] = str(exc)
    ok = [i for i in results.index if curves.get(i) is not None]
    if not ok:
        return pd.DataFrame(index=results.index), pd.DataFrame(), None
    df = results.loc[ok]
    label_keys = _display(axes, keys)
    groups = list(df.groupby([df[k].astype(str) for k in keys], sort=False)) if keys else [((), df)]
    arms, members, values = [], {}, {}
    for vals, g in groups:
        vals = vals if isinstance(vals, tuple) else (vals,)
        label = _label(keys, vals, label_keys) if keys else "all runs"
        arms.append(Arm(label, [curves[i] for i in g.index], list(g["id"])))
        members[label] = list(g.index)
        values[label] = dict(zip(keys, vals))
    sync = pd.Series({i: curves[i].synchronous for i in ok})
    modes = _mode_groups(axes, df, sync)
    fixed = [k for gi, g in enumerate(axes) if gi not in modes for k in g if k in keys]
    baseline: dict[str, str | None] = {}
    for arm in arms:
        if arm.synchronous:
            baseline[arm.label] = arm.label
            continue
        match = [b for b in arms if b.synchronous and all(values[b.label][k] == values[arm.label][k] for k in fixed)]
        baseline[arm.label] = match[0].label if match else None
    comp = compare(arms, baseline)
    rows, cells = [], {}
    for arm in arms:
        cfg = comp.config_fields(arm.label)
        rows.append(cfg)
        for i in members[arm.label]:
            fields = comp.run_fields(arm.label, curves[i])
            fields.update({k: cfg[k] for k in Speedup().fields()})
            fields["speedup_baseline"] = cfg["baseline"]
            cells[i] = {k: json.dumps(v) if isinstance(v, list) else v for k, v in fields.items()}
    for i, why in unreadable.items():
        cells[i] = {"time_to_target_reason": f"unreadable run directory ({why})"}
    per_run = pd.DataFrame.from_dict(cells, orient="index").reindex(results.index)
    return per_run, pd.DataFrame(rows), comp


def _display(axes: list[list[str]], keys: list[str]) -> list[str]:
    out = []
    for g in axes:
        labels = [k for k in g if "." not in k and k in keys]
        out.extend(labels or [k for k in g if k in keys])
    return out


def _label(keys: list[str], vals: tuple, shown: list[str]) -> str:
    pairs = [(k, v) for k, v in zip(keys, vals) if k in shown]
    if len(pairs) == 1:
        return str(pairs[0][1])
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in pairs)


def plot_series(curves: Curves) -> tuple[np.ndarray, np.ndarray]:
    """(time, replica-mean of the smoothed per-replica curves) at the rows where every replica has
    a value: what the time-to-target figure draws for one run."""
    rows = np.flatnonzero(np.isfinite(curves.values).all(axis=1))
    if rows.size == 0:
        return np.array([]), np.array([])
    z = np.stack(
        [smooth(curves.step[rows], curves.values[rows, r], curves.target.window) for r in range(curves.replicas)], 1
    )
    return curves.time[rows], z.mean(axis=1)


def replica_series(curves: Curves) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per replica with a value, ``(r, its own clock, its smoothed curve)`` at the rows where it has
    one (up to its divergence): the thin lines the time-to-target figure draws under the mean."""
    out = []
    for r in range(curves.replicas):
        rows = np.flatnonzero(np.isfinite(curves.values[:, r]))
        if rows.size:
            z = smooth(curves.step[rows], curves.values[rows, r], curves.target.window)
            out.append((r, curves.clock(r)[0][rows], z))
    return out


__all__ = [
    "Arm",
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "Comparison",
    "Curves",
    "DEFAULT_FRACTION",
    "DEFAULT_WINDOW",
    "Reach",
    "Speedup",
    "TargetConfig",
    "bootstrap_mean",
    "bootstrap_ratio",
    "compare",
    "compare_variants",
    "describe",
    "first_crossing",
    "is_synchronous",
    "plot_series",
    "replica_series",
    "reference_level",
    "replica_reaches",
    "run_fields",
    "smooth",
    "speedup",
    "standalone_fields",
    "sweep_comparison",
    "target_level",
]
