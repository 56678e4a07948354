"""Small-LM speed: sampling tokens/s with the KV cache vs without, and a learner step's time split.

    python benchmarks/bench_lm.py [--device cuda] [--d-model 64 --layers 2] [--batch 64 --new 32]

1. Sampling: ``B`` sequences decode ``new`` tokens after a ``prompt``-token context with the KV cache
   (prefill once, one token per step) and without it (the whole sequence recomputed every step).
   Same generator, so both produce the same tokens; the ratio is cache speed-up.
2. Learner step (the LM task's real path: ``functional_call`` over the learner's parameters, the
   GRPO loss, Adam): forward (log-probs + loss), backward, optimizer step; printed as ms and shares.

Numbers depend on the machine and on its load (``torch.get_num_threads()`` is printed).
"""

from __future__ import annotations

import argparse
import time

import torch


def _timeit(fn, reps: int, sync) -> float:
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    dtype = getattr(torch, a.dtype)
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)

    from sandbox.models import Transformer, TransformerConfig, sample

    cfg = TransformerConfig(d_model=a.d_model, n_layers=a.layers, n_heads=a.heads, vocab_size=20, max_seq_len=a.prompt + a.new)
    model = Transformer(cfg)
    model.reset_parameters(torch.Generator().manual_seed(0))
    model = model.to(dev, dtype).eval()
    ctx = torch.randint(2, 20, (a.batch, a.prompt), generator=torch.Generator().manual_seed(1)).to(dev)
    eos = -1  # never stops: every row decodes the full budget
    n_params = sum(p.numel() for p in model.parameters())
    print(f"device={dev} dtype={a.dtype} threads={torch.get_num_threads()} params={n_params} "
          f"batch={a.batch} prompt={a.prompt} new={a.new}")

    res = {}
    for cache in (True, False):
        t = _timeit(lambda: sample(model, ctx, a.new, eos, 1.0, torch.Generator().manual_seed(2), use_cache=cache), a.reps, sync)
        res[cache] = a.batch * a.new / t
    same = torch.equal(
        sample(model, ctx, a.new, eos, 1.0, torch.Generator().manual_seed(2), True)[0],
        sample(model, ctx, a.new, eos, 1.0, torch.Generator().manual_seed(2), False)[0],
    )
    print(f"sampling  with KV cache: {res[True]:10.0f} tok/s")
    print(f"sampling without cache : {res[False]:10.0f} tok/s")
    print(f"KV-cache speed-up      : {res[True] / res[False]:10.2f}x   (same tokens: {same})")

    # -- learner step through the LM task's real path -------------------------------------------------
    from sandbox.algorithms import GRPOConfig, NoCorrectionConfig, PolicyLossInput, build_policy_loss
    from sandbox.tasks.lm import LMTask, LMTaskConfig

    task = LMTask(LMTaskConfig(
        problem=dict(kind="sort", min_len=a.new // 2, max_len=a.new - 2), model=dict(d_model=a.d_model, n_layers=a.layers, n_heads=a.heads),
        warmstart=dict(enabled=False), train_size=256, eval_size=8, device=a.device, dtype=a.dtype, threads=a.threads,
    ))
    params = {k: v.requires_grad_(True) for k, v in task.init_params(torch.Generator().manual_seed(0)).items()}
    gen = torch.Generator().manual_seed(3)
    from sandbox.tasks.rollouts import Rollouts

    G = 8
    ro = Rollouts.cat([task.generate(params, task.new_group(G, gen), gen, 0) for _ in range(max(a.batch // G, 1))])
    ro.rewards = torch.rand(ro.lengths.shape, generator=gen).round()
    loss_fn = build_policy_loss(GRPOConfig(), NoCorrectionConfig())
    opt = torch.optim.Adam(list(params.values()), lr=1e-4)
    holder = {}

    def fwd():
        lp = task.logprobs(params, ro)
        holder["loss"] = loss_fn(PolicyLossInput(lp, ro.behaviour_logp, ro.mask, ro.rewards, G)).loss.sum()

    def bwd():
        opt.zero_grad()
        fwd()
        holder["loss"].backward()

    t_f = _timeit(fwd, a.reps * 2, sync)
    t_fb = _timeit(bwd, a.reps * 2, sync)
    t_o = _timeit(opt.step, a.reps * 2, sync)
    t_b = max(t_fb - t_f, 0.0)
    total = t_f + t_b + t_o
    print(f"learner step on {ro.num_responses} responses x {ro.width} tokens (mean length {ro.lengths.float().mean():.1f}):")
    for name, t in (("forward", t_f), ("backward", t_b), ("optimizer", t_o)):
        print(f"  {name:9s} {t * 1e3:8.2f} ms  {t / total:6.1%}")
    print(f"  total     {total * 1e3:8.2f} ms   backward/forward = {t_b / t_f:.2f}x")


if __name__ == "__main__":
    main()
