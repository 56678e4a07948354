"""Drop bias (docs/system.md#drop-bias): do the groups a staleness control drops differ in length from
those the learner trains on?

A control that drops over-stale groups (``max_lag`` with ``enforcement = "drop"``, ``drops_stale()``)
drops a group when ``step − head_version > k_max`` at dequeue. When generation time grows with the
response length (an inference engine, ``system.generation_time.kind = "continuous_batching"``), a long
group is in flight for more learner steps, so it is staler when it arrives and is dropped more often:
the learner then sees a length distribution shifted toward short responses (the
same selection as the length bias of synchronous batching that waits for the longest response, seen
from the other side).

From a run's jobs table and the per-sequence lengths the engine decoded
(:attr:`sandbox.system.cluster.ClusterResult.lengths`), over the *decided* groups (consumed or dropped;
the few still buffered when the run ends have no fate yet and are left out):

* ``generated``: every response of a decided group; ``consumed``: those of the consumed groups;
  ``dropped``: those of the dropped groups;
* ``length_{generated,consumed,dropped}_mean`` and the quantiles ``_p50``, ``_p90``, ``_p99``
  (``numpy.quantile`` with ``method = "inverted_cdf"``: a length that occurred);
* ``length_bias = mean consumed / mean generated − 1`` (negative: training sees shorter responses
  than were generated);
* ``length_ks``: the Kolmogorov–Smirnov distance ``sup_x |F_consumed(x) − F_generated(x)|`` between the
  two empirical CDFs of response length (0 when nothing is dropped);
* ``dropped_fraction``: dropped groups / decided groups; ``dropped_fraction_long`` and
  ``dropped_fraction_short``: the same among groups whose longest response is above / at most the
  median of the decided groups' longest responses.

With prompts (``prompt_of``: job id → prompt, the engine's ``prompts`` of
docs/system.md#structured-lengths, where a prompt's length persists across epochs), the same selection
acts on *problems*: ``prompt_spearman`` is the Spearman rank correlation, over the prompts with at
least one decided group, between a prompt's mean response length and the dropped fraction of its
groups (positive: the long problems are the ones the learner sees less), and
``prompts_never_consumed`` the fraction of those prompts none of whose groups was trained on.

Pure function of the records: no randomness, the same records give the same numbers bitwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

QUANTILES = (0.5, 0.9, 0.99)


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """``sup_x |F_a(x) − F_b(x)|`` of the two empirical CDFs (evaluated at every observed value, where
    the supremum of two step functions is reached); NaN when either sample is empty."""
    if a.size == 0 or b.size == 0:
        return math.nan
    a, b = np.sort(a), np.sort(b)
    xs = np.union1d(a, b)
    fa = np.searchsorted(a, xs, side="right") / a.size
    fb = np.searchsorted(b, xs, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


def _stats(prefix: str, values: np.ndarray) -> dict[str, float]:
    out = {f"{prefix}_mean": float(values.mean()) if values.size else math.nan}
    for q in QUANTILES:
        key = f"{prefix}_p{int(round(q * 100))}"
        out[key] = float(np.quantile(values, q, method="inverted_cdf")) if values.size else math.nan
    return out


def drop_bias(
    jobs: pd.DataFrame, lengths: Mapping[int, Sequence[int]], prompt_of: Callable[[int], int] | None = None
) -> dict[str, float | int]:
    """The drop-bias summary (module docstring) of one run. ``jobs``: the jobs table (columns ``job``,
    ``consume_step``, ``dropped_at``); ``lengths``: job id → its sequences' lengths. A decided job
    without lengths is an error naming it (the lengths come from an engine run)."""
    consumed_ids = jobs.loc[jobs.consume_step >= 0, "job"].to_numpy()
    dropped_ids = jobs.loc[jobs.dropped_at >= 0, "job"].to_numpy()
    missing = [int(j) for j in np.concatenate([consumed_ids, dropped_ids]) if int(j) not in lengths]
    if missing:
        raise ValueError(
            f"lengths: no response lengths for job(s) {missing[:5]} (drop bias needs an engine run: "
            "system.generation_time.kind = 'continuous_batching')"
        )

    def flat(ids) -> np.ndarray:
        return np.array([v for j in ids for v in lengths[int(j)]], dtype=np.float64)

    cons, drop = flat(consumed_ids), flat(dropped_ids)
    gen = np.concatenate([cons, drop])
    longest = {int(j): max(lengths[int(j)]) for j in np.concatenate([consumed_ids, dropped_ids])}
    decided = len(longest)
    out: dict[str, float | int] = {
        "groups_decided": decided,
        "groups_dropped": int(dropped_ids.size),
        "dropped_fraction": dropped_ids.size / decided if decided else math.nan,
    }
    if decided:
        cut = float(np.median(np.array(list(longest.values()), dtype=np.float64)))
        is_dropped = set(int(j) for j in dropped_ids)
        long_ids = [j for j, m in longest.items() if m > cut]
        short_ids = [j for j, m in longest.items() if m <= cut]
        frac = lambda ids: sum(j in is_dropped for j in ids) / len(ids) if ids else math.nan  # noqa: E731
        out["dropped_fraction_long"], out["dropped_fraction_short"] = frac(long_ids), frac(short_ids)
    else:
        out["dropped_fraction_long"] = out["dropped_fraction_short"] = math.nan
    out.update(_stats("length_generated", gen))
    out.update(_stats("length_consumed", cons))
    out.update(_stats("length_dropped", drop))
    g, c = out["length_generated_mean"], out["length_consumed_mean"]
    out["length_bias"] = c / g - 1 if gen.size and cons.size and g > 0 else math.nan
    out["length_ks"] = ks_distance(cons, gen)
    if prompt_of is not None:
        out.update(_by_prompt(consumed_ids, dropped_ids, lengths, prompt_of))
    return out


def _by_prompt(consumed_ids, dropped_ids, lengths, prompt_of) -> dict[str, float]:
    """``prompt_spearman`` and ``prompts_never_consumed`` (module docstring)."""
    tokens: dict[int, list[int]] = {}
    groups: dict[int, list[int]] = {}  # prompt -> [decided, dropped, consumed]
    for ids, dropped in ((consumed_ids, False), (dropped_ids, True)):
        for j in ids:
            p = prompt_of(int(j))
            tokens.setdefault(p, []).extend(lengths[int(j)])
            g = groups.setdefault(p, [0, 0, 0])
            g[0] += 1
            g[1 if dropped else 2] += 1
    prompts = sorted(groups)
    if len(prompts) < 3:
        return {"prompt_spearman": math.nan, "prompts_never_consumed": math.nan}
    mean_len = np.array([np.mean(tokens[p]) for p in prompts])
    frac = np.array([groups[p][1] / groups[p][0] for p in prompts])
    rho = float(stats.spearmanr(mean_len, frac).statistic) if np.ptp(frac) > 0 and np.ptp(mean_len) > 0 else math.nan
    return {"prompt_spearman": rho, "prompts_never_consumed": float(np.mean([groups[p][2] == 0 for p in prompts]))}
