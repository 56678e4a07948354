"""The floor of rows 1 and 11: a standalone prototype of the lean bandit run that keeps its irreducible work,
timed in one process, interleaved, against the two bare loops of ``bench_learner.py`` and the sandbox run.

The prototype (:func:`floor_bandit`) is the issue-48 audit's construction: what a lean ``sandbox`` run of the
row-1 bandit must do however it is written, and nothing else —

* a heap event loop (``heapq``, events ordered by (time, sequence)) of 4 workers and a learner under the
  synchronous control: a worker samples its group with the weights of the version it holds, finishes
  ``generation_time = 1.0`` later and draws its rewards; the learner consumes 4 groups, trains for
  ``train_time = 0.2`` and publishes a copy of the weights; the waiting workers resume in order;
* per-group sampling (``torch.multinomial`` of 8 arms from the published softmax) and per-group rewards,
  the same draws from the same stream in the same order as both bare loops and the sandbox;
* a job record per group (worker, version, start, end, consumed-at step) and an event log (time, kind, worker);
* REINFORCE with the group-mean baseline on the concatenated batch, backward, ``torch.optim.Adam``;
* the divergence test on the loss, the gradient norm and the weight norm (Python floats), a copy of the
  weights before the step to restore from;
* a 22-column metrics row per step (the lean run's columns: time, step, the system columns, the baseline
  mean, reward mean, loss parts, gradient and weight norms, rate, evaluation, alive), and evaluation every
  10 steps and at the last step.

Its loss is the bare loops' ``−mean(Â · log π)``, so its final expected reward equals theirs to the bit (the
sandbox's seq-mean-token-sum differs from that ``mean`` in the last bit: bench_learner.py). The ratio
prototype / group-by-group bare loop is the floor that the sandbox's lean run is compared with.

Usage: python benchmarks/bench_bandit_floor.py [--steps 500] [--repeats 5]
"""

from __future__ import annotations

import argparse
import heapq
import math
import os
import statistics

import torch
from _timing import interleaved
from bench_learner import (
    ARMS,
    GROUP_SIZE,
    GROUPS,
    LR,
    bandit_scenario,
    bare_bandit,
    bare_bandit_batched,
    sandbox_bandit,
)

GENERATION_TIME, TRAIN_TIME, EVAL_EVERY = 1.0, 0.2, 10
MAX_LOSS, MAX_PARAM_NORM = 1e8, 1e6


def floor_bandit(steps: int, sampling_seed: int) -> float:
    """The lean run's irreducible work (module docstring); returns the final expected reward."""
    means = torch.linspace(0.1, 0.9, ARMS)
    logits = torch.zeros(1, ARMS, requires_grad=True)
    opt = torch.optim.Adam([logits], lr=LR)
    gen = torch.Generator().manual_seed(sampling_seed)
    published = (0, logits.detach().clone())  # (version, weights) the workers sample with
    events: list[tuple] = []  # (time, sequence, kind, worker)
    seq = 0
    for w in range(GROUPS):
        heapq.heappush(events, (0.0, seq, "start", w))
        seq += 1
    holding: dict[int, tuple] = {}  # worker -> (version, start, actions, logp)
    buffer: list[tuple] = []  # finished groups: (worker, version, actions, logp, rewards, job index)
    waiting: list[int] = []
    jobs: list[list] = []  # worker, version, start, end, consumed at
    log: list[tuple] = []
    rows: list[list[float]] = []
    evaluation = [math.nan, math.nan]
    step, learner_busy = 0, False
    while events and step < steps:
        now, _, kind, w = heapq.heappop(events)
        if kind == "start":
            version, weights = published
            if version < step:  # synchronous control: only the current weights may sample
                waiting.append(w)
                continue
            with torch.no_grad():
                logp_all = torch.log_softmax(weights, -1)
                actions = torch.multinomial(logp_all.exp(), GROUP_SIZE, replacement=True, generator=gen)
            holding[w] = (version, now, actions, logp_all.gather(-1, actions))
            log.append((now, "dispatch", w))
            heapq.heappush(events, (now + GENERATION_TIME, seq, "finish", w))
            seq += 1
        elif kind == "finish":
            version, start, actions, logp = holding.pop(w)
            rewards = (torch.rand(1, GROUP_SIZE, generator=gen) < means[actions]).float()
            jobs.append([w, version, start, now, -1])
            buffer.append((w, version, actions, logp, rewards, len(jobs) - 1))
            log.append((now, "finish", w))
            waiting.append(w)
            if len(buffer) >= GROUPS and not learner_busy:
                learner_busy = True
                heapq.heappush(events, (now + TRAIN_TIME, seq, "train", -1))
                seq += 1
        else:  # train: consume the batch, one Adam step, publish
            batch, buffer[:] = buffer[:GROUPS], buffer[GROUPS:]
            actions = torch.cat([b[2] for b in batch], 1)
            rewards = torch.cat([b[4] for b in batch], 1)
            groups = rewards.view(1, GROUPS, GROUP_SIZE)
            baseline = groups.mean(-1, keepdim=True)
            adv = (groups - baseline).view(1, -1)
            logp = torch.log_softmax(logits, -1).gather(-1, actions)
            loss = -(adv * logp).mean()
            before = logits.detach().clone()
            opt.zero_grad()
            loss.backward()
            grad_norm = float(torch.linalg.vector_norm(logits.grad))
            for group in opt.param_groups:
                group["lr"] = LR
            opt.step()
            loss_value = loss.item()
            param_norm = float(torch.linalg.vector_norm(logits.detach()))
            if not (abs(loss_value) <= MAX_LOSS and param_norm <= MAX_PARAM_NORM and math.isfinite(grad_norm)):
                with torch.no_grad():
                    logits.copy_(before)
            if step % EVAL_EVERY == 0 or step == steps - 1:
                with torch.no_grad():
                    pi = torch.softmax(logits, -1)
                    evaluation = [float((pi * means).sum()), float(pi[0, -1])]
            for b in batch:
                jobs[b[5]][4] = step
            reward_mean = rewards.mean().item()
            rows.append(
                [now, float(step), TRAIN_TIME, 0.0, 0.0, float(len(buffer)), GROUPS * GROUP_SIZE / TRAIN_TIME]
                + [float(GROUPS * GROUP_SIZE), float(GROUPS * GROUP_SIZE), 1.0, 1.0]
                + [baseline.mean().item(), reward_mean, loss_value, loss_value, loss_value, grad_norm, param_norm, LR]
                + evaluation
                + [1.0]
            )
            log.append((now, "train", -1))
            step += 1
            learner_busy = False
            published = (step, logits.detach().clone())
            for w in waiting:
                heapq.heappush(events, (now, seq, "start", w))
                seq += 1
            waiting.clear()
    assert len(rows[-1]) == 22
    with torch.no_grad():
        return float(torch.softmax(logits, -1) @ means)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    steps = args.steps
    seed = bandit_scenario(steps).run.seeds()["sampling"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rewards = {
            "bare": bare_bandit(steps, seed),
            "bare_batch": bare_bandit_batched(steps, seed),
            "floor": floor_bandit(steps, seed),
            "lean": sandbox_bandit(steps, "lean"),
        }
        load = [os.getloadavg()[0]]
        times = interleaved(
            {
                "bare": lambda: bare_bandit(steps, seed),
                "bare_batch": lambda: bare_bandit_batched(steps, seed),
                "floor": lambda: floor_bandit(steps, seed),
                "lean": lambda: sandbox_bandit(steps, "lean"),
            },
            args.repeats,
        )
        load.append(os.getloadavg()[0])
    finally:
        torch.set_num_threads(threads)
    print(
        f"softmax bandit K={ARMS}, {GROUPS}x{GROUP_SIZE}, {steps} steps, {args.repeats} interleaved repeats, load {load[0]:.1f} -> {load[1]:.1f}"
    )
    print("  final expected reward: " + ", ".join(f"{k} {v.hex()}" for k, v in rewards.items()))
    for name, ts in times.items():
        print(f"  {name:10s} min {min(ts):7.3f} s  median {statistics.median(ts):7.3f} s")
    for name in ("floor", "lean"):
        for base in ("bare", "bare_batch"):
            paired = [a / b for a, b in zip(times[name], times[base])]
            print(
                f"  {name}/{base}: min-vs-min {min(times[name]) / min(times[base]):5.2f}x, "
                f"median of paired {statistics.median(paired):5.2f}x"
            )
    paired = [a / b for a, b in zip(times["lean"], times["floor"])]
    print(
        f"  lean/floor: min-vs-min {min(times['lean']) / min(times['floor']):5.2f}x, median of paired {statistics.median(paired):5.2f}x"
    )


if __name__ == "__main__":
    main()
