"""Training–inference mismatch claims: the rollout engine as a source of off-policyness on
its own and together with staleness. Context: the bit-string task of ``scenarios/fixed_lag.toml``
(:mod:`._runs`) sampled through the ``logit_noise`` engine (docs/engines.md#logit_noise): Gaussian
noise of scale σ on the two logits (0, θ_t) of every bit, so the per-token mismatch log-ratio has
variance ≈ σ²/2 at θ = 0 and k3 KL ≈ σ²/4 (docs/theory.md#t12); σ = 0.1 gives the published dense
magnitude (k3 ~2.5e-3 per token), σ = 1 and 3 are 60× and 180× larger. "AUC" is the mean over the
run's evaluations of the exact expected reward (``eval/expected_reward``): how fast the policy learns.

* ``mismatch_corrections``: at staleness 0 (``sync``) in decoupled mode (``algorithm.proximal =
  "batch_start"``: the surrogate's ratio is π_θ/π_prox, nothing corrects π_prox/μ unless a correction
  does: verl's recomputed ``old_log_prob`` without rollout correction), H = 128, threshold 0.6, lr 0.05.
  Premise rows: AUC(engine) − AUC(exact) < −0.02 at H = 128 for σ = 0.1, 1, 3 and at H = 32 for σ = 3
  (long vs short responses). Correction rows at H = 128, σ = 3: AUC(correction) − AUC(uncorrected) > 0
  for token TIS (C = 2), token MIS (band [0, 2]), IcePop ([0.5, 5]), Geo-RS (``geo_mis``: verl's
  [0.999, 1.001] and a wide [0.8, 1.25]) > 0.02 (the minimum effect); they are ``not testable here``
  (interval and p-value still shown, out of the Holm family) when the σ = 3 premise is not reproduced.
  Null row: AUC of the uncorrected σ = 3 run on other sampling seeds − AUC of it, in [−0.02, 0.02].
* ``mismatch_sync``: staleness 0 plus mismatch against synchronous training with an exact engine
  (the ``methods_bitstring`` settings: H = 32, lr 0.3, bypass mode, no correction): the per-seed
  mean absolute difference of the expected-reward curves minus that of the synchronous run on other
  sampling seeds (reseeding alone moves the curve too) > 0.02 (it differs from sync more than reseeding
  does), and the AUC difference, reported with its CI against a ±0.02 band (how much), for σ = 0.1 and
  0.3. Null row: AUC of sync on other sampling seeds − AUC of sync, in [−0.02, 0.02].
* ``mismatch_staleness``: the same settings at lag 16 and σ = 0.3: does the staleness correction
  (sequence TIS, C = 8, as in ``methods_bitstring``) survive added mismatch (final reward with
  mismatch − without > −0.05; also at σ = 1), and does VCPO's ESS rule (``vcpo_lr`` + sequence TIS)
  react to mismatch as to lag: ESS/N (``is/ess_ratio``, mean over steps) and its learning-rate scale
  (``lr/scale``) fall by more than 0.05 (the minimum effect) under mismatch only (sync + σ) as under lag
  only (lag 16, exact), and fall further with both. Null rows: ESS/N and lr/scale of the synchronous
  exact VCPO run on other sampling seeds − of it, in [−0.05, 0.05].
* ``mismatch_drift``: a drifting engine (σ = 0.05 + 0.002 v, v the sampling version) against a static
  one (σ = 0.05) at learning rate 1e-9 (the policy does not move), synchronous: the growth of
  ``mismatch/kl_k3`` = mean of its last quarter of steps / mean of its first quarter; drifting > 1.5,
  static within [0.8, 1.25] (the k3 mean of a quarter has a relative standard error of about 0.01 to
  0.02: ~1,000 tokens per step with a per-token relative spread of ~1.4, 10 to 25 steps).
"""

from __future__ import annotations

import math
import re

import numpy as np

from sandbox.claims import _runs as R
from sandbox.claims.base import NOT_TESTABLE, REPRODUCED, ClaimResult, Curve, Row, seed_curve, t_interval
from sandbox.claims.null import against, null_row

MARGIN = 0.02
"""An AUC difference smaller than this is 'no degradation' (about the seed-to-seed spread of AUC / 2)."""
SURVIVE = 0.05
"""A staleness correction survives added mismatch when its final reward drops by less than this (as the VCPO claim's margin)."""
MIN_EFFECT = 0.05
"""Minimum fall of ESS/N or of VCPO's lr scale (5% of the unit)."""


def _definition(name: str) -> str:
    """The module docstring's context paragraph and the bullet of claim ``name``."""
    context, bullets = __doc__.split("\n\n", 1)
    items = re.split(r"\n(?=\* ``)", bullets.strip())
    return context.strip() + "\n\n" + next(b for b in items if b.startswith(f"* ``{name}``")).strip()


def noise(sigma: float, drift: float = 0.0) -> dict:
    eng = {"name": "logit_noise", "scale": sigma}
    if drift:
        eng["drift"] = drift
    return {"engine": eng}


LONG = {
    "task.horizon": 128,
    "task.threshold": 0.6,
    "algorithm.optimizer.lr": 0.05,
    "algorithm.proximal": "batch_start",
    **R.SYNC,
}
SHORT = {**LONG, "task.horizon": 32}
SIGMAS = (0.1, 1.0, 3.0)
CORRECTIONS = {
    "TIS token C=2": {"name": "tis", "level": "token", "C": 2.0},
    "MIS token [0, 2]": {"name": "mis", "level": "token", "C": 2.0},
    "IcePop [0.5, 5]": {"name": "icepop", "alpha": 0.5, "beta": 5.0},
    "Geo-RS [0.999, 1.001]": {"name": "geo_mis", "lo": 0.999, "hi": 1.001},
    "Geo-RS [0.8, 1.25]": {"name": "geo_mis", "lo": 0.8, "hi": 1.25},
}
PREMISE_SIGMA = 3.0


def auc(run: R.Run) -> float:
    """Mean over the run's evaluations of the exact expected reward."""
    return run.mean("eval/expected_reward")


def _bar(result: ClaimResult, i: int, label: str, values: np.ndarray) -> None:
    m, lo, hi = t_interval(values)
    result.curves.append(
        Curve(
            label,
            [float(i)],
            [m],
            [lo if math.isfinite(lo) else m],
            [hi if math.isfinite(hi) else m],
            [[float(v)] for v in values],
        )
    )


def corrections(quick: bool = False, seeds: int = R.FULL_SEEDS) -> ClaimResult:
    variants = {
        "exact, H=128": LONG,
        **{f"σ={s:g}, H=128": {**LONG, **noise(s)} for s in SIGMAS},
        "exact, H=32": SHORT,
        f"σ={PREMISE_SIGMA:g}, H=32": {**SHORT, **noise(PREMISE_SIGMA)},
    }
    variants.update(
        {
            f"{name}, σ={PREMISE_SIGMA:g}": {**LONG, **noise(PREMISE_SIGMA), "algorithm.correction": c}
            for name, c in CORRECTIONS.items()
        }
    )
    R.prefetch([(ov, s) for ov in variants.values() for s in range(seeds)], quick)
    a = {name: R.per_seed(ov, seeds, quick, auc) for name, ov in variants.items()}
    k3 = {
        s: np.nanmean(R.per_seed({**LONG, **noise(s)}, seeds, quick, lambda r: r.mean("mismatch/kl_k3")))
        for s in SIGMAS
    }
    result = ClaimResult(
        name="mismatch_corrections",
        paper="TIS (Yao, Liu et al. 2025), MIS/Geo-RS (Liu, Li et al. 2025), IcePop (arXiv 2510.18855)",
        definition=_definition("mismatch_corrections"),
        settings={name: R.settings(ov, quick) for name, ov in variants.items()},
        x_label="variant (staleness 0, decoupled mode; bit-string, logit_noise engine)",
        y_label="AUC: mean expected reward over the run",
        kind="bars",
    )
    rows = []
    for s in SIGMAS:
        rows.append(
            Row(
                f"mismatch σ={s:g} degrades uncorrected training, H=128",
                "AUC(σ) − AUC(exact)",
                a[f"σ={s:g}, H=128"] - a["exact, H=128"],
                -MARGIN,
                "<",
                note=f"k3 KL {k3[s]:.2g}/token",
            )
        )
    rows.append(
        Row(
            f"mismatch σ={PREMISE_SIGMA:g} degrades uncorrected training, H=32",
            "AUC(σ) − AUC(exact)",
            a[f"σ={PREMISE_SIGMA:g}, H=32"] - a["exact, H=32"],
            -MARGIN,
            "<",
        )
    )
    uncorrected = variants[f"σ={PREMISE_SIGMA:g}, H=128"]
    null = null_row(
        f"uncorrected σ={PREMISE_SIGMA:g} reseeded",
        "AUC(uncorrected, other sampling seed) − AUC(uncorrected)",
        R.null_per_seed(uncorrected, seeds, quick, auc) - a[f"σ={PREMISE_SIGMA:g}, H=128"],
        MARGIN,
        "",
    )
    rows = [against(r, null, beats=True) for r in rows]
    gate = rows[SIGMAS.index(PREMISE_SIGMA)]
    premise = gate.verdict == REPRODUCED
    for name in CORRECTIONS:
        rows.append(
            against(
                Row(
                    f"{name} restores it (σ={PREMISE_SIGMA:g}, H=128)",
                    "AUC(correction) − AUC(uncorrected)",
                    a[f"{name}, σ={PREMISE_SIGMA:g}"] - a[f"σ={PREMISE_SIGMA:g}, H=128"],
                    MARGIN,
                    ">",
                    note=f"minimum effect {MARGIN:g}"
                    if premise
                    else f"premise '{gate.label}' {gate.verdict}: not testable here",
                    cap="" if premise else NOT_TESTABLE,
                ),
                null,
                beats=True,
            )
        )
    result.rows = rows + [null]
    for i, name in enumerate(variants):
        _bar(result, i, name, a[name])
    return result


SYNC_CTX = R.SYNC
SYNC_SIGMAS = (0.1, 0.3)


def curve_distance(a: R.Run, b: R.Run) -> float:
    """Mean over the common evaluations of |expected reward of ``b`` − of ``a``|."""
    e0, e1 = a.metrics["eval/expected_reward"], b.metrics["eval/expected_reward"]
    n = min(len(e0), len(e1))
    return float(np.nanmean(np.abs(e1[:n] - e0[:n])))


def sync(quick: bool = False, seeds: int = R.FULL_SEEDS) -> ClaimResult:
    variants = {
        "sync, exact engine": SYNC_CTX,
        **{f"staleness 0, σ={s:g}": {**SYNC_CTX, **noise(s)} for s in SYNC_SIGMAS},
    }
    R.prefetch([(ov, s) for ov in variants.values() for s in range(seeds)], quick)
    runs = {name: R.runs(ov, seeds, quick) for name, ov in variants.items()}
    result = ClaimResult(
        name="mismatch_sync",
        paper="a users' question: does staleness 0 with an inference engine reproduce synchronous training (mismatch as in Yao, Liu et al. 2025, TIS)",
        definition=_definition("mismatch_sync"),
        settings={name: R.settings(ov, quick) for name, ov in variants.items()},
        y_label="expected reward (exact; 5-step mean of evaluations)",
    )
    ref = runs["sync, exact engine"]
    reseeded = R.null_runs(SYNC_CTX, seeds, quick)
    null = null_row(
        "sync reseeded",
        "AUC(sync, other sampling seed) − AUC(sync)",
        R.with_collapse(reseeded, auc) - R.with_collapse(ref, auc),
        MARGIN,
        "",
    )
    floor = R.paired_with_collapse(ref, reseeded, curve_distance)
    for s in SYNC_SIGMAS:
        mis = runs[f"staleness 0, σ={s:g}"]
        diff = R.paired_with_collapse(ref, mis, curve_distance)
        k3 = np.nanmean([r.mean("mismatch/kl_k3") for r in mis])
        result.rows.append(
            Row(
                f"σ={s:g}: differs from sync more than reseeding",
                "mean |Δ expected reward|: (σ vs sync) − (reseeded vs sync)",
                diff - floor,
                MARGIN,
                ">",
                note=f"k3 KL {k3:.2g}/token; minimum effect {MARGIN:g}; reseeding alone: {np.nanmean(floor):.3g}",
            )
        )
        result.rows.append(
            against(
                Row(
                    f"σ={s:g}: how much (AUC gap within ±{MARGIN:g})",
                    "AUC(staleness 0 + mismatch) − AUC(sync)",
                    R.with_collapse(mis, auc) - R.with_collapse(ref, auc),
                    (-MARGIN, MARGIN),
                    "within",
                ),
                null,
                beats=False,
            )
        )
    result.rows.append(null)
    for name, rs in runs.items():
        n = min(len(r.steps) for r in rs)
        ev = np.array([r.metrics["eval/expected_reward"][:n] for r in rs])
        keep = np.isfinite(ev).any(0)
        per = np.array([R.smooth(row[keep]) for row in ev])
        result.curves.append(seed_curve(name, rs[0].steps[:n][keep].tolist(), per, bounds=(0.0, 1.0)))
    return result


STALE_SIGMA = 0.3


def staleness(quick: bool = False, seeds: int = R.FULL_SEEDS) -> ClaimResult:
    mis = noise(STALE_SIGMA)
    tis = {
        "lag 16 + TIS, exact": {**R.lag(16), **R.TIS},
        f"lag 16 + TIS, σ={STALE_SIGMA:g}": {**R.lag(16), **R.TIS, **mis},
        "lag 16 + TIS, σ=1": {**R.lag(16), **R.TIS, **noise(1.0)},
    }
    vcpo = {
        "sync, exact": {**R.SYNC, **R.VCPO},
        f"mismatch only (sync, σ={STALE_SIGMA:g})": {**R.SYNC, **R.VCPO, **mis},
        "lag only (lag 16, exact)": {**R.lag(16), **R.VCPO},
        f"lag 16 + σ={STALE_SIGMA:g}": {**R.lag(16), **R.VCPO, **mis},
    }
    R.prefetch([(ov, s) for ov in [*tis.values(), *vcpo.values()] for s in range(seeds)], quick)
    reward = {name: R.per_seed(ov, seeds, quick, R.Run.final_reward) for name, ov in tis.items()}
    ess = {name: R.per_seed(ov, seeds, quick, lambda r: r.mean("is/ess_ratio")) for name, ov in vcpo.items()}
    scale = {name: R.per_seed(ov, seeds, quick, lambda r: r.mean("lr/scale")) for name, ov in vcpo.items()}
    names = list(vcpo)
    result = ClaimResult(
        name="mismatch_staleness",
        paper="TIS (staleness-tuned, C = 8) and VCPO (arXiv 2602.17616) under added mismatch",
        definition=_definition("mismatch_staleness"),
        settings={name: R.settings(ov, quick) for name, ov in {**tis, **vcpo}.items()},
        x_label="VCPO (vcpo_lr + sequence TIS): quantity, mean over steps",
        y_label="mean over steps (95% CI over seeds)",
        kind="grouped",
        x_ticks=["ESS/N (is/ess_ratio)", "VCPO lr scale (lr/scale)"],
    )
    e, s = ess, scale
    reseeded = R.null_runs(vcpo[names[0]], seeds, quick)
    ess_null = null_row(
        "ESS/N reseeded (sync, exact)",
        "ESS/N: other sampling seed − sync exact",
        R.with_collapse(reseeded, lambda r: r.mean("is/ess_ratio")) - e[names[0]],
        MIN_EFFECT,
        "",
    )
    scale_null = null_row(
        "lr/scale reseeded (sync, exact)",
        "lr/scale: other sampling seed − sync exact",
        R.with_collapse(reseeded, lambda r: r.mean("lr/scale")) - s[names[0]],
        MIN_EFFECT,
        "",
    )
    effect = f"minimum effect {MIN_EFFECT:g}"
    result.rows = [
        Row(
            f"TIS (C=8) survives added mismatch σ={STALE_SIGMA:g} at lag 16",
            "final reward: with − without mismatch",
            reward[f"lag 16 + TIS, σ={STALE_SIGMA:g}"] - reward["lag 16 + TIS, exact"],
            -SURVIVE,
            ">",
        ),
        Row(
            "TIS (C=8) survives added mismatch σ=1 at lag 16",
            "final reward: with − without mismatch",
            reward["lag 16 + TIS, σ=1"] - reward["lag 16 + TIS, exact"],
            -SURVIVE,
            ">",
        ),
        *(
            against(Row(label, stat, values, MIN_EFFECT, ">", note=effect), ess_null, beats=True)
            for label, stat, values in (
                ("ESS/N falls under mismatch only", "ESS/N: sync exact − mismatch only", e[names[0]] - e[names[1]]),
                ("ESS/N falls under lag only", "ESS/N: sync exact − lag only", e[names[0]] - e[names[2]]),
                ("ESS/N falls further with both", "ESS/N: lag only − lag + mismatch", e[names[2]] - e[names[3]]),
            )
        ),
        *(
            against(Row(label, stat, values, MIN_EFFECT, ">", note=effect), scale_null, beats=True)
            for label, stat, values in (
                ("VCPO lr scale reacts to mismatch only", "1 − lr/scale (mismatch only)", 1.0 - s[names[1]]),
                ("VCPO lr scale reacts to lag only", "1 − lr/scale (lag only)", 1.0 - s[names[2]]),
                (
                    "VCPO lr scale falls further with both",
                    "lr/scale: lag only − lag + mismatch",
                    s[names[2]] - s[names[3]],
                ),
            )
        ),
        ess_null,
        scale_null,
    ]
    for name in names:
        ms, ls, hs = zip(*(t_interval(v) for v in (ess[name], scale[name])))
        fix = lambda lo, m: [x if math.isfinite(x) else y for x, y in zip(lo, m)]  # noqa: E731
        seeds = [[float(e), float(v)] for e, v in zip(ess[name], scale[name])]
        result.curves.append(Curve(name, [0.0, 1.0], list(ms), fix(ls, ms), fix(hs, ms), seeds))
    return result


DRIFT = (0.05, 0.002)
DRIFT_LR = 1e-9


def growth(run: R.Run) -> float:
    """Mean ``mismatch/kl_k3`` of the last quarter of the steps / that of the first quarter."""
    k3 = run.metrics["mismatch/kl_k3"]
    q = max(1, len(k3) // 4)
    return float(np.nanmean(k3[-q:]) / np.nanmean(k3[:q]))


def drift(quick: bool = False, seeds: int = R.FULL_SEEDS) -> ClaimResult:
    base = {**R.SYNC, "algorithm.optimizer.lr": DRIFT_LR}
    variants = {
        f"drifting (σ = {DRIFT[0]:g} + {DRIFT[1]:g} v)": {**base, **noise(*DRIFT)},
        f"static (σ = {DRIFT[0]:g})": {**base, **noise(DRIFT[0])},
    }
    R.prefetch([(ov, s) for ov in variants.values() for s in range(seeds)], quick)
    g = {name: R.per_seed(ov, seeds, quick, growth) for name, ov in variants.items()}
    d, st = list(variants)
    result = ClaimResult(
        name="mismatch_drift",
        paper="Zhang, Li et al., 'Beyond Precision' (Dec 2025): the gap grows during training, even at lr 0",
        definition=_definition("mismatch_drift"),
        settings={name: R.settings(ov, quick) for name, ov in variants.items()},
        y_label="per-token k3 KL, mismatch part (mismatch/kl_k3, 5-step mean)",
    )
    result.rows = [
        Row("drifting engine: the gap grows at lr 1e-9", "k3 last quarter / first quarter", g[d], 1.5, ">"),
        Row(
            "static engine: the gap stays flat at lr 1e-9",
            "k3 last quarter / first quarter",
            g[st],
            (0.8, 1.25),
            "within",
        ),
    ]
    for name, ov in variants.items():
        rs = R.runs(ov, seeds, quick)
        n = min(len(r.steps) for r in rs)
        per = np.array([R.smooth(r.metrics["mismatch/kl_k3"][:n]) for r in rs])
        result.curves.append(seed_curve(name, rs[0].steps[:n].tolist(), per))
    return result
