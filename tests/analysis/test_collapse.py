"""Collapsed replicas (docs/time_to_target.md#collapse): diverged, or a dead end below the reward floor."""

from __future__ import annotations

import numpy as np

from sandbox.analysis.collapse import FLOOR, WINDOW, collapsed


def _arrays(finals, grads, steps=40):
    R = len(finals)
    reward = np.tile(np.linspace(0.2, 0.5, steps)[:, None], (1, R))
    reward[-5:] = finals
    grad = np.full((steps, R), 0.3)
    grad[-WINDOW:] = grads
    return {"eval/expected_reward": reward, "grad/norm": grad}


def test_dead_ends_below_the_floor_collapse_and_solved_replicas_do_not():
    # the explorer cell: replicas ending at [0.001, 1.0, 0.0], two of them with a zero gradient
    arrays = _arrays([0.001, 1.0, 0.0], [0.0, 0.0, 0.0])
    assert collapsed([-1, -1, -1], arrays) == [True, False, True]
    # still learning (non-zero gradient) near zero reward: not collapsed; diverged: collapsed
    arrays = _arrays([0.001, 0.5, FLOOR + 0.01], [0.2, 0.0, 0.0])
    assert collapsed([-1, 7, -1], arrays) == [False, True, False]
    # the keys of replicas.npz work too, and a run without per-replica arrays counts divergence only
    npz = {k.replace("/", "__"): v for k, v in _arrays([0.0], [0.0]).items()}
    assert collapsed([-1], npz) == [True] and collapsed([-1, 3], {}) == [False, True]
