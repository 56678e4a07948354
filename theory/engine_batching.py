"""T13. Throughput of an inference engine with continuous batching, by Little's law.

Setting (``docs/system.md#continuous_batching``). An engine decodes its sequences in flight in
steps; a step with ``n`` sequences costs ``a + b·n`` seconds (memory-bound decode: the weights are
read once per step, each sequence's KV cache once). A sequence of ``L`` response tokens lives
through ``L`` decode steps after a prefill of ``P`` seconds that holds the whole engine. The engine
is *saturated* at concurrency ``c``: a sequence that ends is replaced at the same step boundary
(``c`` closed-loop clients, each submitting its next request as soon as the last one ends), so every
decode step runs exactly ``c`` sequences. Lengths are i.i.d. with mean ``E[L]``.

Statement [exact in the long run]. Over a long horizon in which ``N`` sequences complete, the
decode steps produce ``c`` tokens each, so they number ``N·E[L]/c`` (up to the sequences in flight
at the ends), and the horizon is ``T = (N·E[L]/c)·(a + b·c) + N·P``. Hence the throughput

    X(c) = N / T = c / (E[L]·(a + b·c) + c·P)   sequences per second,

and by Little's law (``L = λW``, Little 1961, with ``c`` in the system) the mean time from
submission to the last token is

    W(c) = c / X(c) = E[L]·(a + b·c) + c·P.

``X`` grows with ``c`` and saturates at ``1/(E[L]·b + P)``: batching pays as long as ``b·c`` is
small against ``a``; the per-sequence latency grows linearly in ``c``. Ignoring batching (charging
``a + b`` per step whatever ``c``) predicts ``c / (E[L]·(a + b) + c·P)`` instead, off by the factor
``(a + b·c)/(a + b)`` in the decode term.

Staleness [exact in expectation, stationary]. If the learner trains in zero time on batches of
``B`` groups of one sequence each (it consumes as soon as ``B`` have finished), the pipeline holds
the ``c`` sequences in flight plus the buffer, whose count cycles through ``0, …, B − 1``: its time
average is ``(B − 1)/2`` for a stationary completion process. With T7 (``docs/theory.md#t7``) the
mean dispatch-to-consume time, in learner steps, is

    E[s̃] = (c + (B − 1)/2) / B,

the same for any ``a``, ``b``: batching sets the seconds (``W`` and the step period ``B/X``), not
the staleness in steps.

Lengths of the sandbox's length model: ``round(m·e^{σZ})`` cut to ``[1, max]``, whose mean
:func:`rounded_lognormal_mean` sums exactly over the integers.

KV-cache limit [exact given the mean occupancy]. With a KV cache of ``K`` tokens, each sequence
reserving ``P_tok + L`` tokens (prompt and response) for its whole life, and more work waiting than
fits, the engine runs as many sequences as their reservations allow. Count time in decode steps: a
sequence lives ``L`` steps and holds ``P_tok + L`` tokens during them, so with ``λ`` sequences ending per
step Little's law gives ``n̄ = λ·E[L]`` sequences and ``K̄ = λ·E[(P_tok + L)·L]`` reserved tokens on
average over steps; hence

    n̄ = K̄·E[L] / (P_tok·E[L] + E[L²]),

the long sequences being over-represented in flight (size bias). Steps with ``n`` sequences cost
``a + b·n`` and produce ``n`` tokens, so ``X = n̄ / (E[L](a + b·n̄))`` exactly (the cost is linear in
``n``). FCFS admission leaves less than one waiting reservation free: ``K − (P_tok + L_max) < K̄ ≤ K``,
which brackets ``X`` (:func:`kv_limited_throughput` at both ends). An engine that ignored its cap would
run every waiting sequence at once.

Assumptions: the engine stays saturated (no admission throttling, no KV-cache or sequence cap below
``c``, weight syncs that neither drain nor pause, i.e. ``sync = "partial"`` with ``sync_time = 0``);
lengths independent of the order of service. Sources: Little, Operations Research 9(3), 1961;
the step-cost model is the memory-bound reading of decoding (Pope et al. 2022, arXiv 2211.05102);
continuous batching as in Orca (Yu et al., OSDI 2022) and vLLM (Kwon et al., SOSP 2023).

Worked example: ``a = 10 ms``, ``b = 1 ms``, ``E[L] = 100`` tokens, no prefill: one sequence alone
takes 1.1 s (0.91 per s); 64 in flight take 7.4 s each but complete 8.65 per second, 9.5 times as
many; the bound is 10 per second.

>>> round(engine_throughput(1, 0.01, 0.001, 100.0), 4), round(engine_throughput(64, 0.01, 0.001, 100.0), 4)
(0.9091, 8.6486)
>>> round(engine_latency(64, 0.01, 0.001, 100.0), 3), engine_throughput_limit(0.001, 100.0)
(7.4, 10.0)
>>> mean_staleness_saturated(8, 4)
2.375
>>> rounded_lognormal_mean(5.0, 0.0), round(rounded_lognormal_mean(100.0, 0.5), 2)
(5.0, 113.31)
>>> round(kv_limited_concurrency(8000, 100.0, 12500.0), 2), round(kv_limited_throughput(8000, 0.01, 0.0001, 100.0, 12500.0), 3)
(64.0, 39.024)
>>> throughput_expr()
c/(E_L*(a + b*c) + P*c)
"""

from __future__ import annotations

import math

import sympy as sp

c_sym, a_sym, b_sym, EL_sym, P_sym = sp.symbols("c a b E_L P", positive=True)


def throughput_expr() -> sp.Expr:
    """``X(c) = c / (E[L](a + b c) + c P)``."""
    return c_sym / (EL_sym * (a_sym + b_sym * c_sym) + c_sym * P_sym)


def engine_throughput(c: float, a: float, b: float, mean_length: float, prefill: float = 0.0) -> float:
    """Sequences per second of one engine saturated at concurrency ``c``."""
    return c / (mean_length * (a + b * c) + c * prefill)


def engine_latency(c: float, a: float, b: float, mean_length: float, prefill: float = 0.0) -> float:
    """Mean submission-to-last-token time ``W = c / X``."""
    return mean_length * (a + b * c) + c * prefill


def engine_throughput_limit(b: float, mean_length: float, prefill: float = 0.0) -> float:
    """``lim_{c→∞} X(c) = 1 / (E[L] b + P)``."""
    return 1.0 / (mean_length * b + prefill)


def mean_staleness_saturated(c: float, B: int) -> float:
    """``E[s̃] = (c + (B − 1)/2) / B`` learner steps (zero-time learner, groups of one sequence)."""
    return (c + (B - 1) / 2) / B


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def rounded_lognormal_mean(
    median: float, sigma: float, max_tokens: int | None = None, tail: float = 1e-15, power: int = 1
) -> float:
    """``E[min(max(round(m e^{σZ}), 1), max)**power]`` (the mean for ``power = 1``), summed exactly over the
    integers (until the remaining probability is below ``tail``)."""
    if sigma == 0:
        v = max(round(median), 1)
        return float(min(v, max_tokens) if max_tokens is not None else v) ** power
    mu = math.log(median)

    def cdf(x: float) -> float:  # P(m e^{σZ} < x)
        return 0.0 if x <= 0 else _phi((math.log(x) - mu) / sigma)

    total = 1.0 * cdf(1.5)  # rounds to 0 or 1, cut to 1
    k = 2
    while True:
        if max_tokens is not None and k >= max_tokens:
            total += max_tokens**power * (1.0 - cdf(max_tokens - 0.5))
            return total
        lo, hi = cdf(k - 0.5), cdf(k + 0.5)
        total += k**power * (hi - lo)
        if 1.0 - hi < tail and k > median:
            return total
        k += 1


def kv_limited_concurrency(
    kv_tokens: float, mean_length: float, mean_square_length: float, prompt_tokens: int = 0
) -> float:
    """``n̄ = K̄·E[L]/E[(P + L)·L]`` sequences in flight when the KV cache holds ``K̄`` reserved tokens on
    average over decode steps (KV limit; ``E[(P + L)·L] = P·E[L] + E[L²]``)."""
    return kv_tokens * mean_length / (prompt_tokens * mean_length + mean_square_length)


def kv_limited_throughput(
    kv_tokens: float, a: float, b: float, mean_length: float, mean_square_length: float, prompt_tokens: int = 0
) -> float:
    """``X = n̄ / (E[L](a + b·n̄))`` with ``n̄`` of :func:`kv_limited_concurrency` (no prefill time)."""
    n = kv_limited_concurrency(kv_tokens, mean_length, mean_square_length, prompt_tokens)
    return engine_throughput(n, a, b, mean_length)
