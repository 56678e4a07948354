"""Cost of GAC and of OPOB per optimizer step relative to a plain step of the same model.

Two models, measured in the same run: a tiny causal transformer (2 layers, d = 64) over a batch of
sampled sequences, and a softmax bandit. Per model:

* plain: GRPO + sequence TIS loss, backward, Adam step;
* gac:   the same step through ``StabilizedOptimizer`` with ``GACConfig()`` (one reference buffer,
         three reductions, plus the wrapper's bookkeeping);
* vcpo_lr: the same with the ESS learning-rate rule (parameter snapshot + rescale);
* opob:  plain step plus exact per-trajectory gradient norms (``torch.func.vmap(grad)``) and the OPOB
         baseline;
* opob_ghost: the same with ghost norms (``sandbox.algorithms.ghost_norms``: one batched
         forward and backward, no per-sample gradients; the bandit's parameter has no rule and falls back
         to the exact path) in a separate forward and backward;
* opob_ghost_shared: ghost norms recorded on the training forward itself
         (``sandbox.algorithms.ghost_norms.GhostNormRecorder``): one extra backward, no extra forward.

Every variant is timed in each of ``--rounds`` interleaved rounds (robust to load from other processes);
the table gives the min and the median over rounds and each variant's ratio to ``plain`` (min/min and
median/median).

    python benchmarks/bench_stabilizers.py [--steps 10] [--rounds 5] [--device cpu|cuda]
        [--cases transformer,bandit] [--variants gac,vcpo_lr,opob,opob_ghost,opob_ghost_shared]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from torch import nn
from torch.func import functional_call

from sandbox.algorithms import (
    GACConfig,
    GRPOConfig,
    PolicyLossInput,
    StabilizedOptimizer,
    StepContext,
    TISConfig,
    VCPOLRConfig,
    build_policy_loss,
    build_stabilizers,
    per_sequence_grad_sq_norms,
)
from sandbox.algorithms.ghost_norms import GhostNormRecorder, ghost_sequence_grad_sq_norms


class TinyTransformer(nn.Module):
    """2-layer pre-norm causal transformer, written out so that torch.func can vmap over it."""

    def __init__(self, vocab=32, d=64, layers=2, heads=4, max_len=32):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(max_len, d) * 0.02)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                dict(
                    ln1=nn.LayerNorm(d),
                    qkv=nn.Linear(d, 3 * d),
                    proj=nn.Linear(d, d),
                    ln2=nn.LayerNorm(d),
                    fc1=nn.Linear(d, 4 * d),
                    fc2=nn.Linear(4 * d, d),
                )
            )
            for _ in range(layers)
        )
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., T) -> (..., T, V)
        t = x.shape[-1]
        h = self.tok(x) + self.pos[:t]
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        for b in self.blocks:
            q, k, v = b["qkv"](b["ln1"](h)).chunk(3, dim=-1)
            split = lambda z: z.reshape(*z.shape[:-1], self.heads, -1).transpose(-3, -2)
            q, k, v = split(q), split(k), split(v)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            att = att.masked_fill(~causal, float("-inf")).softmax(-1)
            y = (att @ v).transpose(-3, -2).reshape(h.shape)
            h = h + b["proj"](y)
            h = h + b["fc2"](torch.relu(b["fc1"](b["ln2"](h))))
        return self.head(self.ln(h))


def token_logp(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)


def make_transformer_case(device, n=32, t=24, vocab=32):
    torch.manual_seed(0)
    model = TinyTransformer(vocab=vocab).to(device)
    x = torch.randint(0, vocab, (n, t), device=device)
    y = torch.roll(x, -1, dims=-1)
    with torch.no_grad():
        behaviour = token_logp(model(x), y) + 0.05 * torch.randn(n, t, device=device)

    def logp_fn():
        return token_logp(model(x), y)

    def seq_logprob(params, xy):
        xi, yi = xy
        return token_logp(functional_call(model, params, (xi,)), yi).sum()

    def batch_logprob(params, xy):
        xb, yb = xy
        return token_logp(functional_call(model, params, (xb,)), yb).sum(-1)

    def grad_norms():
        params = {k: v.detach() for k, v in model.named_parameters()}
        return per_sequence_grad_sq_norms(seq_logprob, params, (x, y), chunk_size=16)

    def ghost_norms():
        params = {k: v.detach() for k, v in model.named_parameters()}
        return ghost_sequence_grad_sq_norms(batch_logprob, params, (x, y), seq_logprob)

    def shared_forward():  # the training forward, recorded: the norms cost one extra backward
        with GhostNormRecorder(dict(model.named_parameters()), (x, y), seq_logprob) as rec:
            logp = logp_fn()
        return logp, rec.sq_norms(logp.sum(-1), retain_graph=True)

    norms = {"exact": grad_norms, "ghost": ghost_norms, "ghost_shared": shared_forward}
    return list(model.parameters()), logp_fn, behaviour, norms, (n, t)


def make_bandit_case(device, n=256, arms=100):
    torch.manual_seed(0)
    logits = torch.zeros(arms, device=device, requires_grad=True)
    a = torch.randint(0, arms, (n, 1), device=device)
    behaviour = torch.log_softmax(torch.randn(arms, device=device) * 0.1, -1)[a]

    def logp_fn():
        return torch.log_softmax(logits, -1)[a]

    def seq_logprob(params, ai):
        return torch.log_softmax(params["logits"], -1)[ai].sum()

    def batch_logprob(params, ab):
        return torch.log_softmax(params["logits"], -1)[ab].sum(-1)

    def grad_norms():
        return per_sequence_grad_sq_norms(seq_logprob, {"logits": logits.detach()}, a)

    def ghost_norms():
        return ghost_sequence_grad_sq_norms(batch_logprob, {"logits": logits.detach()}, a, seq_logprob)

    def shared_forward():
        with GhostNormRecorder({"logits": logits}, a, seq_logprob) as rec:
            logp = logp_fn()
        return logp, rec.sq_norms(logp.sum(-1), retain_graph=True)

    norms = {"exact": grad_norms, "ghost": ghost_norms, "ghost_shared": shared_forward}
    return [logits], logp_fn, behaviour, norms, (n, 1)


def time_steps(step, steps, device) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


VARIANTS = ("gac", "vcpo_lr", "opob", "opob_ghost", "opob_ghost_shared")


def bench(case, steps, device, rounds=5, group_size=8, variants=VARIANTS) -> dict[str, list[float]]:
    params, logp_fn, behaviour, grad_norms, (n, t) = case
    g = torch.Generator().manual_seed(1)
    rewards = torch.randint(0, 2, (n,), generator=g).float().to(device)
    mask = torch.ones(n, t, device=device)
    plain_loss = build_policy_loss(GRPOConfig(), TISConfig(level="sequence"))
    opob_loss = build_policy_loss(GRPOConfig(baseline="opob"), TISConfig(level="sequence"))

    def make_step(stabs, loss_fn, with_norms):
        opt = torch.optim.Adam(params, lr=1e-4)
        wrapped = StabilizedOptimizer(opt, params, build_stabilizers(stabs)) if stabs else None

        def step():
            if with_norms == "ghost_shared":
                logp, norms = grad_norms[with_norms]()
                extras = {"seq_grad_sq_norms": norms}
            else:
                extras = {"seq_grad_sq_norms": grad_norms[with_norms]()} if with_norms else {}
                logp = logp_fn()
            out = loss_fn(PolicyLossInput(logp, behaviour, mask, rewards, group_size, extras=extras))
            opt.zero_grad()
            out.loss.sum().backward()
            if wrapped is None:
                opt.step()
            else:
                wrapped.step(StepContext(ess_ratio=out.metrics["is/ess_ratio"]))

        return step

    makers = {
        "gac": lambda: make_step([GACConfig()], plain_loss, None),
        "vcpo_lr": lambda: make_step([VCPOLRConfig(rho_ref=2.0)], plain_loss, None),
        "opob": lambda: make_step([], opob_loss, "exact"),
        "opob_ghost": lambda: make_step([], opob_loss, "ghost"),
        "opob_ghost_shared": lambda: make_step([], opob_loss, "ghost_shared"),
    }
    variants = {"plain": make_step([], plain_loss, None), **{k: makers[k]() for k in variants}}
    for step in variants.values():  # warm-up (allocations, optimizer state, GAC reference)
        for _ in range(3):
            step()
    # interleaved rounds, median per variant: robust to load from other processes
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for k, step in variants.items():
            times[k].append(time_steps(step, steps, device))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10, help="steps per timing round")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", default="transformer,bandit", help="comma-separated: transformer, bandit")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {','.join(VARIANTS)}")
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS)) + sorted(set(args.cases.split(",")) - {"transformer", "bandit"})
    if unknown:
        ap.error(f"unknown --variants/--cases entries {unknown}")
    builders = {
        "transformer": ("tiny transformer (2x64, N=32, T=24)", make_transformer_case),
        "bandit": ("softmax bandit (100 arms, N=256)", make_bandit_case),
    }
    print(
        f"device={args.device} torch={torch.__version__} threads={torch.get_num_threads()} "
        f"steps={args.steps} per round x {args.rounds} interleaved rounds"
    )
    for key in args.cases.split(","):
        name, build = builders[key]
        r = bench(build(args.device), args.steps, args.device, args.rounds, variants=variants)
        lo, med = min(r["plain"]), statistics.median(r["plain"])
        print(f"\n{name}: plain step min {lo * 1e3:.2f} ms, median {med * 1e3:.2f} ms")
        for k in variants:
            k_lo, k_med = min(r[k]), statistics.median(r[k])
            print(
                f"  {k:17s} min {k_lo * 1e3:8.2f} ms (x{k_lo / lo:5.2f})   median {k_med * 1e3:8.2f} ms (x{k_med / med:5.2f})"
            )


if __name__ == "__main__":
    main()
