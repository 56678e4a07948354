"""Per-trajectory gradient norms for VCPO's off-policy optimal baseline (OPOB) and the classic optimal
baseline (VCPO, Huang et al. arXiv 2602.17616; ``docs/methods/objectives.md#reinforce``, ``docs/theory.md#t10``).

The baseline itself lives in :mod:`.advantages` (``opob`` / ``optimal`` baseline options); it reads
``‖∇_θ log π_θ(y^i|x)‖²`` from ``PolicyLossInput.extras["seq_grad_sq_norms"]``, produced here (exactly);
:mod:`.ghost_norms` gives the same numbers up to rounding from one batched backward
(``docs/methods/objectives.md#opob-grad-norms``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())
grad = lazy_import("torch.func:grad", globals())
vmap = lazy_import("torch.func:vmap", globals())


def per_sequence_grad_sq_norms(
    seq_logprob_fn: Callable[[dict[str, Tensor], Any], Tensor],
    params: dict[str, Tensor],
    batch_inputs: Any,
    replica_dims: int = 0,
    chunk_size: int | None = None,
) -> Tensor:
    """Exact ``‖∇_θ log π_θ(y^i|x)‖²`` for every trajectory i, with ``torch.func.vmap(grad(...))``
    (VCPO computes the same quantity with one backward per trajectory).

    Args:
        seq_logprob_fn: ``(params, one_trajectory_inputs) -> scalar`` sequence log-probability
            ``Σ_t log π_θ(y_t|s_t)`` (use ``torch.func.functional_call(module, params, ...)`` inside).
        params: ``{name: tensor}`` parameters to differentiate (detached copies are fine). With
            ``replica_dims=1`` every tensor carries a leading replica dim R.
        batch_inputs: a tensor or pytree of tensors whose leading dim is N (``(R, N, ...)`` with replicas).
        replica_dims: 0 or 1.
        chunk_size: optional vmap chunk size to bound memory.

    Returns:
        ``(N,)`` (or ``(R, N)``) squared norms, detached.
    """
    params = {k: v.detach() for k, v in params.items()}
    per_seq = vmap(grad(seq_logprob_fn), in_dims=(None, 0), chunk_size=chunk_size)

    def sq_norms(p, x):
        g = per_seq(p, x)
        return sum(v.reshape(v.shape[0], -1).pow(2).sum(-1) for v in g.values())

    if replica_dims == 0:
        return sq_norms(params, batch_inputs).detach()
    if replica_dims == 1:
        return vmap(sq_norms, in_dims=(0, 0))(params, batch_inputs).detach()
    raise ValueError(f"replica_dims must be 0 or 1, got {replica_dims}")


def logit_space_grad_sq_norm(logits: Tensor, actions: Tensor, mask: Tensor | None = None) -> Tensor:
    """Cheap proxy (verl ``optimal_token_baseline``): for a softmax policy
    ``‖∂ log π(a)/∂ logits‖² = 1 − 2π(a) + Σ_b π(b)²``, summed over the valid tokens of each trajectory.

    ``logits (..., N, T, V)``, ``actions (..., N, T)`` → ``(..., N)``."""
    p = torch.softmax(logits.detach(), dim=-1)
    pa = p.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    per_tok = 1.0 - 2.0 * pa + (p * p).sum(-1)
    if mask is not None:
        per_tok = per_tok * mask.to(per_tok.dtype)
    return per_tok.sum(-1)
