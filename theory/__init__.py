"""Symbolic and numeric predictions that the simulator is checked against.

Each module encodes one result of ``docs/theory.md`` (T1-T15): its statement and
assumptions (module docstring, with sources), sympy expressions, numeric
functions made from them, and a worked example as a doctest. The package imports
only numpy and sympy -- never ``sandbox``.

``RESULTS`` maps a short name to a :class:`Result` so a checker can list them:

>>> sorted(RESULTS)[:3]
['async_sgd_bound', 'delayed_stability', 'delayed_variance']
>>> RESULTS["delayed_stability"].section
'T1'
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from theory import (
    async_sgd_bound,
    delayed_stability,
    delayed_variance,
    engine_batching,
    gradient_cosine,
    importance_weights,
    littles_law,
    minibatch_lag,
    mismatch_ess,
    optimal_baseline,
    order_statistics,
    random_delay,
    split_batch,
    staleness_divergence,
)


@dataclass(frozen=True)
class Result:
    module: ModuleType
    section: str  # section of docs/theory.md (anchor #t1 ... #t15)
    kind: str  # exact | approx | rate | bound (defined at the top of docs/theory.md)
    description: str


RESULTS: dict[str, Result] = {
    "delayed_stability": Result(
        delayed_stability, "T1", "exact", "delayed GD on a quadratic is stable iff eta*lam < 2 sin(pi/(4 tau + 2))"
    ),
    "delayed_variance": Result(
        delayed_variance, "T2", "exact", "stationary variance and autocovariances of delayed SGD on a quadratic"
    ),
    "gradient_cosine": Result(
        gradient_cosine, "T3", "approx", "expected consecutive-gradient cosine of delayed SGD, sum N_i / sum D_i"
    ),
    "async_sgd_bound": Result(
        async_sgd_bound,
        "T5",
        "bound",
        "explicit bounded-staleness SGD bound (L-smooth, non-convex) and literature rate shapes",
    ),
    "order_statistics": Result(
        order_statistics, "T6", "exact", "order statistics of job times; synchronous straggler cost H_P"
    ),
    "littles_law": Result(
        littles_law, "T7", "exact", "L = lambda W on logged dispatch/consume times; mean staleness L/B"
    ),
    "importance_weights": Result(
        importance_weights, "T8", "exact", "IS second moments, ESS, chi2/KL, truncation and KL estimators"
    ),
    "staleness_divergence": Result(
        staleness_divergence, "T9", "approx", "divergence after k stale steps from update correlation S(k)"
    ),
    "optimal_baseline": Result(
        optimal_baseline, "T10", "exact", "variance-optimal baseline b* = E[W R]/E[W] and V(b) = V(b*) + E[W](b - b*)^2"
    ),
    "minibatch_lag": Result(
        minibatch_lag,
        "T11",
        "exact",
        "lag of optimizer step (e, j) of a batch taken in m mini-batches x E epochs: L + e*m + j",
    ),
    "mismatch_ess": Result(
        mismatch_ess,
        "T12",
        "exact",
        "sampler-learner mismatch: sequence ESS e^{-T s2} (log-normal), finite-N Kish ESS, "
        "logit noise -> per-token E[w^2]",
    ),
    "engine_batching": Result(
        engine_batching,
        "T13",
        "exact",
        "saturated continuous-batching engine: X(c) = c / (E[L](a + b c) + c P), W = c / X",
    ),
    "random_delay": Result(
        random_delay,
        "T14",
        "exact",
        "lag law of P memoryless workers (P(L_t = j) = q^(j-1)/P) and the mean path of delayed SGD at it",
    ),
    "split_batch": Result(
        split_batch,
        "T15",
        "exact",
        "synchronous step spread over W workers: B*p parts, E[T] = s (H_W + (m - W)/W), s H_m for m <= W",
    ),
}

__all__ = ["RESULTS", "Result"] + list(RESULTS)
