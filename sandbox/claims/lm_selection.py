"""How the LM context of the learning claims is chosen: the learning rate at which synchronous training
learns most, measured on selection run seeds disjoint from the claims' seeds, before any claim row.

Protocol (``scenarios/lm_mission.toml`` with the claims' LM settings, :data:`._runs.LM`: 100 steps,
evaluation every 10 steps, no correction; ``task.replicas`` = :data:`REPLICAS`): for every candidate
learning rate in :data:`CANDIDATE_LRS`, the synchronous run on the selection seed :data:`SELECTION_SEED`
and the same run on the null seed :data:`NULL_SEED` (same run, other sampling seed). Per replica:

* sync gain = final expected reward (mean of the last 10% of evaluations, the step-99 one) − the run's
  first evaluation (step 0, after one optimizer step of size ~lr: the base model within the evaluation's
  noise; a frozen run at lr 1e-12 gives 0.189 on both selection replicas);
* null difference = final reward (null seed) − final reward (selection seed), replica by replica.

:func:`choose` takes the candidate with the largest mean sync gain on the selection seed; the margin of
a "matches sync" row is :data:`MARGIN_FRACTION` × that gain (so the gain is 3× the margin, the rule of
docs/claims.md#contexts-and-the-premise), and the choice is refused when that margin is not above the
noise floor (the largest |null difference| of the chosen learning rate): a margin inside the reseeding
noise would let "matches" pass on noise. :data:`RECORDED` holds the measurement that chose the shipped
context; ``python -m sandbox.claims.lm_selection_measure`` measures it again (about 6 LM runs of 2 replicas)
and prints the table and the choice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SELECTION_SEED = 100
NULL_SEED = 101
"""Selection seeds: disjoint from the claims' LM run seeds (0, and 1 for the claims' null rows)."""
CANDIDATE_LRS = (1e-4, 3e-4, 1e-3)
REPLICAS = 2
MARGIN_FRACTION = 1 / 3
"""margin = gain / 3: the synchronous gain is at least 3× the margin of a "matches sync" row."""


@dataclass(frozen=True)
class Measured:
    """One candidate learning rate: per replica, the first and final evaluation of the synchronous run
    on the selection seed, and the final evaluation on the null seed."""

    lr: float
    first: tuple[float, ...]
    final: tuple[float, ...]
    null_final: tuple[float, ...]

    @property
    def gains(self) -> np.ndarray:
        return np.asarray(self.final) - np.asarray(self.first)

    @property
    def gain(self) -> float:
        return float(self.gains.mean())

    @property
    def noise_floor(self) -> float:
        """Largest |final reward (null seed) − final reward (selection seed)| over the replicas."""
        return float(np.abs(np.asarray(self.null_final) - np.asarray(self.final)).max())


@dataclass(frozen=True)
class Selection:
    lr: float
    gain: float
    margin: float
    noise_floor: float


def choose(measured: list[Measured]) -> Selection:
    """The candidate with the largest mean sync gain, its margin = :data:`MARGIN_FRACTION` × gain; a
    ``ValueError`` when that margin is not above the candidate's noise floor (no learning rate where the
    synchronous run learns clearly above the reseeding noise)."""
    if not measured:
        raise ValueError("measured: expected at least one candidate learning rate, got none")
    best = max(measured, key=lambda m: m.gain)
    margin = MARGIN_FRACTION * best.gain
    if not margin > best.noise_floor:
        raise ValueError(
            f"selection: the largest sync gain {best.gain:.3f} (lr {best.lr:g}) gives a margin {margin:.3f} that is not "
            f"above the reseeding noise floor {best.noise_floor:.3f}: the synchronous run does not clearly learn"
        )
    return Selection(best.lr, best.gain, margin, best.noise_floor)


RECORDED = [
    Measured(1e-4, first=(0.1875, 0.189453125), final=(0.25390625, 0.24609375), null_final=(0.259765625, 0.263671875)),
    Measured(3e-4, first=(0.185546875, 0.1875), final=(0.26171875, 0.259765625), null_final=(0.26953125, 0.283203125)),
    Measured(1e-3, first=(0.17578125, 0.185546875), final=(0.212890625, 0.189453125), null_final=(0.234375, 0.2109375)),
]
"""The selection measurement (:func:`measure`, 2 replicas, 100 steps) that chose the shipped LM context:
lr 3e-4 (sync gain +0.074: +0.076 and +0.072 per replica; margin 0.025 above the noise floor 0.023). At 1e-3,
the learning rate of the claims before, the synchronous run gains +0.037 and +0.004: its margin (0.007) is not
above its noise floor (0.021). Measured again when each LM group came to draw from its own sampling stream
(other draws, the same choice; the measurement before: gain +0.079, margin 0.026, noise floor 0.018)."""


def table(measured: list[Measured]) -> str:
    """The selection table (markdown) with the choice under it."""
    lines = [
        "| lr | sync first evaluation | sync final | sync gain | null seed final | noise floor |",
        "|---|---|---|---|---|---|",
    ]
    for m in measured:
        f = lambda xs: ", ".join(f"{x:.3f}" for x in xs)  # noqa: E731
        lines.append(
            f"| {m.lr:g} | {f(m.first)} | {f(m.final)} | {f(m.gains)} (mean {m.gain:+.3f}) | {f(m.null_final)} | {m.noise_floor:.3f} |"
        )
    try:
        s = choose(measured)
        lines += [
            "",
            f"chosen: lr {s.lr:g}, sync gain {s.gain:+.3f}, margin {s.margin:.3f} (> noise floor {s.noise_floor:.3f})",
        ]
    except ValueError as e:
        lines += ["", f"no choice: {e}"]
    return "\n".join(lines)
