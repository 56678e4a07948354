"""Small-LM speed: sampling tokens/s with the KV cache vs without, and a learner step's time split.

    python benchmarks/bench_lm.py [--backend builtin|hf] [--hf-model-type llama] [--device cuda --dtype bfloat16]
                                  [--d-model 64 --layers 2 --heads 4 --ff 128] [--batch 64 --new 32]

Both backends run through the LM task's real path (``LMTask.forward_fn``: ``functional_call`` over
the learner's parameters copied to ``--device`` / ``--dtype``); ``--backend hf`` builds a transformers
causal LM of ``--hf-model-type`` with hidden size ``--d-model``, ``--layers`` layers, ``--heads``
heads and MLP width ``--ff`` (default 4 x d_model) from its config (nothing downloaded).

1. Sampling: ``B`` sequences decode ``new`` tokens after a ``prompt``-token context with the KV cache
   (prefill once, one token per step; the hf model's own ``DynamicCache``) and without it (the whole
   sequence recomputed every step). Same generator, so both produce the same tokens; the ratio is
   the cache speed-up.
2. Learner step (the GRPO loss, Adam): forward (log-probs + loss), backward, optimizer step; printed
   as ms and shares.

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
    ap.add_argument("--backend", choices=["builtin", "hf"], default="builtin")
    ap.add_argument(
        "--hf-model-type", default="llama", help="transformers model_type for --backend hf (llama, gpt2, qwen2, ...)"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=None, help="MLP width (default 4 x d_model)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)

    from sandbox.models import sample
    from sandbox.tasks.lm import LMTask, LMTaskConfig

    ff = a.ff or 4 * a.d_model
    positions = max(a.prompt, a.new) + a.new  # room for the sampling context and for the task's own prompts
    if a.backend == "hf":
        model = {
            "backend": "hf",
            "config": {
                "model_type": a.hf_model_type,
                "hidden_size": a.d_model,
                "num_hidden_layers": a.layers,
                "num_attention_heads": a.heads,
                ("n_inner" if a.hf_model_type == "gpt2" else "intermediate_size"): ff,
                "max_position_embeddings": positions,
            },
        }
    else:
        model = {"d_model": a.d_model, "n_layers": a.layers, "n_heads": a.heads, "d_ff": ff, "max_seq_len": positions}
    task = LMTask(
        LMTaskConfig.model_validate(
            dict(
                problem=dict(kind="sort", min_len=a.new // 2, max_len=a.new - 2),
                model=model,
                max_new_tokens=a.new,
                warmstart=dict(enabled=False),
                train_size=256,
                eval_size=8,
                device=a.device,
                dtype=a.dtype,
                threads=a.threads,
            )
        )
    )
    params = task.init_params(torch.Generator().manual_seed(0))
    fwd = task.forward_fn(task._single(params, detach=True))
    V = task.tokenizer.vocab_size
    ctx = torch.randint(2, V, (a.batch, a.prompt), generator=torch.Generator().manual_seed(1)).to(dev)
    eos = -1  # never stops: every row decodes the full budget
    n_params = sum(v.numel() for v in params.values())
    arch = f"hf:{a.hf_model_type}" if a.backend == "hf" else "builtin"
    print(
        f"backend={arch} device={dev} dtype={a.dtype} threads={torch.get_num_threads()} params={n_params} "
        f"batch={a.batch} prompt={a.prompt} new={a.new}"
    )

    res = {}
    for cache in (True, False):
        t = _timeit(
            lambda: sample(fwd, ctx, a.new, eos, 1.0, torch.Generator().manual_seed(2), use_cache=cache), a.reps, sync
        )
        res[cache] = a.batch * a.new / t
    same = torch.equal(
        sample(fwd, ctx, a.new, eos, 1.0, torch.Generator().manual_seed(2), True)[0],
        sample(fwd, ctx, a.new, eos, 1.0, torch.Generator().manual_seed(2), False)[0],
    )
    print(f"sampling  with KV cache: {res[True]:10.0f} tok/s")
    print(f"sampling without cache : {res[False]:10.0f} tok/s")
    print(f"KV-cache speed-up      : {res[True] / res[False]:10.2f}x   (same tokens: {same})")

    # -- learner step through the LM task's real path -------------------------------------------------
    from sandbox.algorithms import GRPOConfig, NoCorrectionConfig, PolicyLossInput, build_policy_loss

    params = {k: v.requires_grad_(True) for k, v in params.items()}
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
    print(
        f"learner step on {ro.num_responses} responses x {ro.width} tokens (mean length {ro.lengths.float().mean():.1f}):"
    )
    for name, t in (("forward", t_f), ("backward", t_b), ("optimizer", t_o)):
        print(f"  {name:9s} {t * 1e3:8.2f} ms  {t / total:6.1%}")
    print(f"  total     {total * 1e3:8.2f} ms   backward/forward = {t_b / t_f:.2f}x")


if __name__ == "__main__":
    main()
