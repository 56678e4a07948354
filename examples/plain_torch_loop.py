"""The algorithms library in a plain torch training loop: no simulator, no scenario files.

A tiny autoregressive tabular policy (logits indexed by position and previous token) learns to emit a
target string. Samples come from a copy of the weights that is ``LAG`` optimizer steps old, so the
stored behaviour log-probs are stale. The update is VCPO-style: GRPO groups with the OPOB baseline
(exact per-trajectory gradient norms via torch.func), sequence TIS (C = 8) with PPO clipping disabled,
ESS-driven LR control, and GAC on top. Runs in a few seconds on a CPU:

    python examples/plain_torch_loop.py
"""

from __future__ import annotations

import collections
import time

import torch

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

T, V = 6, 5  # response length, vocabulary
GROUPS, G = 4, 8  # prompts per batch, responses per prompt
LAG, STEPS = 4, 150
TARGET = torch.tensor([1, 3, 0, 4, 2, 1])


def token_logits(table: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Logits for every position of ``y`` (..., T): row ``table[t, previous token]`` (BOS = index V)."""
    prev = torch.cat([torch.full_like(y[..., :1], V), y[..., :-1]], dim=-1)
    return table[torch.arange(T), prev]  # (..., T, V)


def token_logp(table: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(token_logits(table, y), -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)


def seq_logprob(params: dict, y: torch.Tensor) -> torch.Tensor:
    """Σ_t log π(y_t | y_<t) for ONE response; what per_sequence_grad_sq_norms differentiates."""
    return token_logp(params["table"], y).sum()


@torch.no_grad()
def sample(table: torch.Tensor, n: int) -> torch.Tensor:
    y = torch.zeros(n, T, dtype=torch.long)
    prev = torch.full((n,), V)
    for t in range(T):
        y[:, t] = torch.distributions.Categorical(logits=table[t, prev]).sample()
        prev = y[:, t]
    return y


def gac_text(metrics: dict[str, torch.Tensor]) -> str:
    """GAC's cosine between this gradient and its stale reference, and whether it projected (GAC has no
    reference at the first step, so nothing to report there)."""
    if "gac/cos_ref" not in metrics:
        return "gac: no reference gradient yet"
    return f"gac cos {metrics['gac/cos_ref'].item():+.3f} projected {metrics['gac/projected'].item():.0f}"


def main() -> None:
    torch.manual_seed(0)
    table = torch.zeros(T, V + 1, V, requires_grad=True)
    loss_fn = build_policy_loss(
        GRPOConfig(baseline="opob", eps_low=1.0, eps_high=1e9),  # VCPO: PPO clipping disabled
        TISConfig(level="sequence", C=8.0),
    )
    opt = StabilizedOptimizer(
        torch.optim.Adam([table], lr=0.05),
        [table],
        build_stabilizers([VCPOLRConfig(rho_ref=1.0), GACConfig(c_thr=0.3)]),
        max_grad_norm=1.0,
    )
    stale = collections.deque([table.detach().clone()], maxlen=LAG + 1)
    mask = torch.ones(GROUPS * G, T)
    t0 = time.perf_counter()
    for step in range(STEPS):
        behaviour = stale[0]  # weights LAG steps old (fewer at the start)
        y = sample(behaviour, GROUPS * G)
        rewards = (y == TARGET).float().mean(-1)
        inp = PolicyLossInput(
            logp=token_logp(table, y),
            behaviour_logp=token_logp(behaviour, y),
            mask=mask,
            rewards=rewards,
            group_size=G,
            extras={"seq_grad_sq_norms": per_sequence_grad_sq_norms(seq_logprob, {"table": table}, y)},
        )
        out = loss_fn(inp)
        opt.zero_grad()
        out.loss.sum().backward()
        m = opt.step(StepContext(ess_ratio=out.metrics["is/ess_ratio"], staleness=len(stale) - 1))
        stale.append(table.detach().clone())
        if step % 25 == 0 or step == STEPS - 1:
            print(
                f"step {step:3d}  reward {rewards.mean():.3f}  ess_ratio {out.metrics['is/ess_ratio'].item():.3f}  "
                f"lr_scale {m['lr/scale'].item():.3f}  {gac_text(m)}"
            )
    with torch.no_grad():
        greedy_ok = (token_logits(table, TARGET).argmax(-1) == TARGET).float().mean().item()
    print(f"done in {time.perf_counter() - t0:.1f}s; greedy tokens matching target: {greedy_ok:.2f}")


if __name__ == "__main__":
    main()
