"""T11: the per-token lag of mini-batch updates (``algorithm.minibatches`` = m, ``epochs`` = E).

Prediction (theory.minibatch_lag): optimizer step (e, j) of a batch trains on tokens of lag
``S·ℓ + e·m + j`` (``S = m·E``), ℓ the batch lag of the schedule, which counts published versions
(one per batch). Measurement: the learner's ``staleness/token_mean`` on the bit-string task, run
through the whole simulator (the cluster stamps published versions on the tokens, the learner
counts optimizer steps).

* ``fixed lag``: ``fixed_lag`` with k = 1 batch, prediction from the config alone: the mean over
  batches of step s = e·m + j is ``S·k + s`` (the batches before the k-th reuse version 0 and are
  left out).
* ``max_lag``: ``max_lag`` (k_max = 2) with exponential generation times, so ℓ varies from group to
  group; the step-weighted mean over the run is ``S·ℓ̄ + (S − 1)/2`` with ℓ̄ the mean batch lag of
  the consumed groups read from the jobs table (the schedule's own record, not the learner's).

Tolerance: the prediction is a counting identity given the schedule (every token of a step has the
stated lag; the bit-string responses have equal lengths, so token- and step-weighted means agree):
no sampling error enters, and 1e-9 covers float rounding. ``learner_cls`` substitutes a learner (the
tests inject one that does not advance its version within a batch, which this check must reject).
"""

from __future__ import annotations

import numpy as np

from sandbox.checks.base import CheckResult, Point, sweeps
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import validate_scenario
from theory.minibatch_lag import fixed_lag_mean, step_lag

TOL = 1e-9


def scenario(m: int, epochs: int, staleness: dict, generation: dict, steps: int, seed: int = 0):
    return validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 4, "replicas": 1},
            "system": {
                "num_workers": 4,
                "generation_time": generation,
                "staleness": staleness,
                "train_time": {"kind": "constant", "value": 0.25},
            },
            "algorithm": {"group_size": 2, "groups_per_step": 4, "minibatches": m, "epochs": epochs},
            "run": {"steps": steps, "seed": seed, "figures": False, "record_events": False, "eval_every": steps},
        },
        "minibatch lag check",
    )


@sweeps("s", "optimizer steps into the batch")
def run(quick: bool = False, perturb: float = 1.0, learner_cls=None) -> CheckResult:
    batches = 4 if quick else 40
    result = CheckResult(
        name="minibatch_lag",
        claim="optimizer step (e, j) of a batch with lag ℓ trains on tokens of lag S·ℓ + e·m + j (S = m·E)",
        x_label="optimizer step s = e·m + j within the batch (max_lag: the mean over the batch's steps)",
        y_label="per-token lag (optimizer steps)",
        justification=f"exact counting identity given the schedule: float rounding only ({TOL:g})",
    )
    k = 1
    for m, E in [(4, 1), (2, 2)]:
        S = m * E
        res = run_scenario(
            scenario(m, E, {"kind": "fixed_lag", "k": k}, {"kind": "constant", "value": 1.0}, batches * S),
            learner_cls=learner_cls,
        )
        lag = res.metrics["staleness/token_mean"].to_numpy().reshape(batches, S)[k:]  # (batches after warm-up, S)
        for s in range(S):
            predicted = perturb * step_lag(S * k, m, s // m, s % m)
            measured = float(lag[:, s].mean())
            result.points.append(
                Point(
                    s,
                    predicted,
                    measured,
                    0.0,
                    TOL,
                    abs(measured - predicted) <= TOL,
                    series=f"fixed lag k = {k}, m = {m}, E = {E}",
                )
            )
    for m, E in [(1, 1), (2, 1), (4, 1), (2, 2)]:
        S = m * E
        res = run_scenario(
            scenario(
                m, E, {"kind": "max_lag", "k_max": 2}, {"kind": "exponential", "mean": 1.0}, batches * S, seed=S + E
            ),
            learner_cls=learner_cls,
        )
        jobs = res.jobs[res.jobs.consume_step >= 0]
        batch_lag = float((jobs.consume_step - jobs.head_version).mean())
        predicted = perturb * (fixed_lag_mean(0, m, E) + S * batch_lag)
        measured = float(np.mean(res.metrics["staleness/token_mean"]))
        result.points.append(
            Point(
                (S - 1) / 2,
                predicted,
                measured,
                0.0,
                TOL,
                abs(measured - predicted) <= TOL,
                note=f"m = {m}, E = {E}, ℓ̄ = {batch_lag:.3f}",
                series=f"max_lag k_max = 2, m = {m}, E = {E}, mean over the steps",
            )
        )
    return result
