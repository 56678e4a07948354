"""The growth rule of divergence (``docs/time_to_target.md#divergence``).

The learner marks a replica diverged while it trains when its loss or a gradient is not finite,
``|loss| > run.max_loss`` or its weight norm exceeds ``run.max_param_norm`` (hard limits: the
replica is frozen from that step on). A loss can also grow by orders of magnitude without meeting
any of them within the run (delayed SGD just past its stability threshold grows by a few percent
per step). When the headline metric is a loss (``eval/loss``), the run's summary therefore also
marks a replica diverged when

    tail mean  >  run.max_loss_growth × min(smoothed loss before the tail)

where the tail is the last 10 % of the replica's measured values (the summary's final value) and
the smoothed loss is the centred running mean of ``run.target.window`` steps used for the
time-to-target. The minimum *before the tail* (not the first value, which is far above the
minimum when the loss first falls by orders of magnitude and then grows back; not the overall
minimum, which a fast-converging loss reaches in its tail) is what the loss came down to. The
replica's divergence step is the first measured step after that minimum whose loss exceeds the
factor times the minimum (there is one, since the tail's mean does). The recorded metrics are not
changed; the rule only decides the status (docs/time_to_target.md)."""

from __future__ import annotations

import numpy as np

from sandbox.analysis.time_to_target import smooth

DEFAULT_MAX_LOSS_GROWTH = 10.0
TAIL_FRACTION = 0.1  # the summary's final value: the mean of the last 10 % of the measured values


def growth_divergence(steps: np.ndarray, values: np.ndarray, factor: float, window: float) -> tuple[list[int], str]:
    """Per replica (columns of ``values``, NaN where not measured), the step at which its loss
    diverged by the growth rule (-1: it did not), and the reasons in words (empty when none)."""
    steps = np.asarray(steps, dtype=float)
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    at, why = [], []
    for r in range(values.shape[1]):
        rows = np.flatnonzero(np.isfinite(values[:, r]))
        n = rows.size
        tail = max(1, int(n * TAIL_FRACTION))
        if n - tail < 1:  # nothing before the tail to compare with
            at.append(-1)
            continue
        y = values[rows, r]
        z = smooth(steps[rows], y, window)
        i_min = int(np.argmin(z[: n - tail]))
        low, end = float(z[i_min]), float(y[n - tail :].mean())
        if not (low > 0 and end > factor * low):
            at.append(-1)
            continue
        above = np.flatnonzero(y[i_min + 1 :] > factor * low)
        step = int(steps[rows[i_min + 1 + above[0]]])
        at.append(step)
        why.append(
            f"replica {r}: loss came down to {low:.3g} (step {int(steps[rows[i_min]])}) and ended at {end:.3g}, "
            f"{end / low:.3g}× that (run.max_loss_growth = {factor:g}); above {factor:g}× from step {step}"
        )
    return at, "; ".join(why)


__all__ = ["DEFAULT_MAX_LOSS_GROWTH", "growth_divergence"]
