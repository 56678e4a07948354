"""An LM ``sandbox run`` against a bare nanoGPT-style torch loop doing the same RL steps.

    python benchmarks/bench_lm_bare.py [--steps 6] [--repeats 3] [--profile]

Both sides: ``scenarios/lm_mission.toml``'s sync variant (3-digit addition, the cached warm-started
2-layer d=64 transformer, 8 prompts x 8 responses per step, KV-cache sampling at temperature 1,
group-normalised REINFORCE with the seq-mean-token-mean loss, Adam lr 3e-4 with clipping at 1.0), for
``--steps`` steps. The sandbox side's evaluation is cut to 8 held-out prompts and no sampled reward
(``task.eval_size = 8``, ``eval_samples = 0``; evaluated at the first and last step), so both sides
do the same learning work. The bare loop is what a nanoGPT-style script does: the same
:class:`~sandbox.models.transformer_nn.Transformer` called directly, one batch of all 64 responses decoded
with :func:`~sandbox.models.transformer.sample` (the same KV-cache sampler), the same verifier, the loss
written out, ``clip_grad_norm_`` and ``torch.optim.Adam``. The two are timed interleaved (bare, sandbox,
bare, ...), min and median over ``--repeats``; the ratio is sandbox / bare.

``--profile``: cProfile of one sandbox run (cumulative time): where the difference goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _timing import interleaved  # noqa: E402

from sandbox.models.transformer import sample, sequence_logprobs  # noqa: E402
from sandbox.models.transformer_nn import Transformer  # noqa: E402
from sandbox.run.runner import run_scenario  # noqa: E402
from sandbox.scenario.api import load_scenario  # noqa: E402
from sandbox.tasks import make_task  # noqa: E402
from sandbox.tasks.lm import load_or_train  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "lm_mission.toml"


def scenario(steps: int):
    scn, _ = load_scenario(
        SCENARIO,
        {
            "run.steps": steps,
            "run.eval_every": steps,
            "run.figures": False,
            "system.staleness": {"kind": "sync"},
            "task.eval_size": 8,
            "task.eval_samples": 0,
        },
    )
    return scn


def bare_loop(
    task, state: dict, steps: int, B: int, G: int, lr: float, clip: float, seed: int = 0, per_group: bool = False
) -> float:
    """``steps`` RL steps on the LM, nanoGPT style; returns the mean reward (a check that it learns
    from something). ``per_group``: decode each prompt's G responses in their own batch, as the
    simulator's workers do (one group per worker), instead of all B x G at once."""
    model = Transformer(task.model_cfg)
    model.load_state_dict(state, strict=False)
    model.eval()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    T, eos = task.cfg.temperature, task.tokenizer.eos_id
    total = 0.0
    for _ in range(steps):
        idx = torch.randint(task.train_ids.shape[0], (B,), generator=gen)
        ctx = task.train_ids[idx].repeat_interleave(G, 0)
        if per_group:
            parts = [sample(model, ctx[b * G : (b + 1) * G], task.max_new, eos, T, gen) for b in range(B)]
            S = max(p[0].shape[1] for p in parts)
            toks = torch.cat([torch.nn.functional.pad(p[0], (0, S - p[0].shape[1])) for p in parts])
            lens = torch.cat([p[2] for p in parts])
            hit = torch.cat([p[3] for p in parts])
        else:
            toks, _, lens, hit = sample(model, ctx, task.max_new, eos, T, gen)
        rewards = torch.zeros(B * G)
        for n in range(B * G):
            if bool(hit[n]):
                rewards[n] = task.problem.score(task.train_prompts[int(idx[n // G])], task.tokenizer.decode(toks[n]))
        total += float(rewards.mean())
        r = rewards.view(B, G)
        adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).view(-1)
        logp = sequence_logprobs(model, ctx, toks, T)
        mask = (torch.arange(toks.shape[1]) < lens.unsqueeze(1)).float()
        loss = -((adv.unsqueeze(1) * logp * mask).sum(1) / lens.clamp_min(1)).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return total / max(steps, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--per-group", action="store_true", help="also time the bare loop decoding group by group")
    args = ap.parse_args()
    scn = scenario(args.steps)
    task = make_task(scn.task)
    state, _ = load_or_train(task)
    alg = scn.algorithm
    B, G, lr, clip = alg.groups_per_step, alg.group_size, alg.optimizer.lr, alg.optimizer.grad_clip
    run_scenario(scn)  # warm-up: imports, caches
    print(
        f"LM run vs bare loop, {SCENARIO.name} (sync), {args.steps} steps of {B} x {G} responses; torch threads "
        f"{torch.get_num_threads()}, load average before {os.getloadavg()}"
    )
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run_scenario(scn)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(45)
        print(out.getvalue())
        return
    print(f"  bare loop mean reward {bare_loop(task, state, args.steps, B, G, lr, clip):.3f}")
    fns = {"bare": lambda: bare_loop(task, state, args.steps, B, G, lr, clip)}
    if args.per_group:
        fns["bare per group"] = lambda: bare_loop(task, state, args.steps, B, G, lr, clip, per_group=True)
    fns["sandbox"] = lambda: run_scenario(scn)
    times = interleaved(fns, args.repeats)
    b, s = times["bare"], times["sandbox"]
    paired = statistics.median(x / y for x, y in zip(s, b))
    print(f"  bare loop      min {min(b):7.2f} s   median {statistics.median(b):7.2f} s")
    if args.per_group:
        g = times["bare per group"]
        print(
            f"  bare per group min {min(g):7.2f} s   median {statistics.median(g):7.2f} s   "
            f"(sandbox / it: {min(s) / min(g):5.2f}x min/min)"
        )
    print(f"  sandbox run    min {min(s):7.2f} s   median {statistics.median(s):7.2f} s")
    print(f"  ratio sandbox/bare: {min(s) / min(b):5.2f}x (min/min), {paired:5.2f}x (median paired)")
    print(f"  load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
