"""Measure the LM context's selection again (:mod:`sandbox.claims.lm_selection`, module docstring):
``python -m sandbox.claims.lm_selection_measure`` prints the selection table, the choice, and whether the
measurement equals the recorded one (:data:`sandbox.claims.lm_selection.RECORDED`)."""

from __future__ import annotations

from sandbox.claims import _runs as R
from sandbox.claims.lm_selection import CANDIDATE_LRS, NULL_SEED, RECORDED, REPLICAS, SELECTION_SEED, Measured, table
from sandbox.claims.premise import first_evaluation


def measure(lrs=CANDIDATE_LRS, replicas: int = REPLICAS, workers: int = 2) -> list[Measured]:
    """Run the selection protocol (:mod:`sandbox.claims.lm_selection`): per learning rate, the synchronous LM run on the
    selection seed and on the null seed, ``replicas`` replicas each, ``workers`` runs at a time."""
    lm = R.LM  # every variant below sets its own learning rate and run seed
    variants = {
        (lr, seed): {**R.SYNC, "algorithm.optimizer.lr": lr, "run.seed": seed}
        for lr in lrs
        for seed in (SELECTION_SEED, NULL_SEED)
    }
    R.prefetch_replicas(variants.values(), replicas, False, lm, workers=workers)
    got = {key: R.runs(ov, replicas, False, lm) for key, ov in variants.items()}
    return [
        Measured(
            lr,
            first=tuple(first_evaluation(r) for r in got[lr, SELECTION_SEED]),
            final=tuple(r.final_reward() for r in got[lr, SELECTION_SEED]),
            null_final=tuple(r.final_reward() for r in got[lr, NULL_SEED]),
        )
        for lr in lrs
    ]


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    got = measure()
    print(table(got))
    print("same as RECORDED:", got == RECORDED)
