"""A list of gradient-sized tensors held as stacks of same-shape tensors, so that inner products and
``x − s·y`` over the whole list cost one op per shape instead of one per tensor, with results bitwise
equal to the per-tensor loop ``sum(replica_sum(x_i * y_i) for i)`` (``docs/methods/stabilizers.md#gac``).

Why bitwise: element-wise ops are exact per element whatever the layout. A reduction over the trailing
dims of a stack ``(k, R…, *shape)`` reduces each row with the same serial kernel as the row alone, as long
as the row alone is reduced serially, which torch's CPU reductions do below ``at::internal::GRAIN_SIZE``
(32768) elements (torch 2.13 ``TensorIterator``); larger tensors, and every tensor off the CPU, stay
unstacked and are reduced on their own. The per-tensor partial sums are then accumulated left to right
from 0 in list order, as the loop does, in NumPy scalars of the same dtype (float32 + float32 in NumPy
rounds exactly as torch's CPU add does), which saves one torch op per tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sandbox.algorithms._tensor import replica_sum, replica_view
from sandbox.base.lazy_torch import lazy_import

torch = lazy_import("torch", globals())
Tensor = lazy_import("torch:Tensor", globals())

SERIAL_REDUCTION_MAX = 32768
"""``at::internal::GRAIN_SIZE``: CPU reductions over fewer elements run on one thread."""


@dataclass(frozen=True)
class Layout:
    """How a list of tensors is grouped: ``groups[j]`` lists the indices held by block j (a stack when
    ``stacked[j]``, else the single tensor itself); ``order`` maps list index → position of its partial
    sum in the concatenated per-block sums."""

    groups: tuple[tuple[int, ...], ...]
    stacked: tuple[bool, ...]
    order: tuple[int, ...]

    @staticmethod
    def usable(vecs: list[Tensor]) -> bool:
        """CPU tensors of one float32/float64 dtype (the case whose bitwise equality is established)."""
        return (
            bool(vecs)
            and all(v.device.type == "cpu" and v.dtype == vecs[0].dtype for v in vecs)
            and vecs[0].dtype in (torch.float32, torch.float64)
        )

    @staticmethod
    def of(vecs: list[Tensor], replica_dims: int) -> Layout:
        by_key: dict[tuple, list[int]] = {}
        for i, v in enumerate(vecs):
            small = v.device.type == "cpu" and v.numel() < SERIAL_REDUCTION_MAX and v.dim() > replica_dims
            key = (tuple(v.shape), v.dtype) if small else ("alone", i)
            by_key.setdefault(key, []).append(i)
        groups = tuple(tuple(ix) for ix in by_key.values())
        stacked = tuple(len(ix) > 1 for ix in groups)
        position = {i: p for p, i in enumerate(i for ix in groups for i in ix)}
        return Layout(groups, stacked, tuple(position[i] for i in range(len(vecs))))


class Blocks:
    """The tensors of a list as blocks of :class:`Layout` (``replica_dims`` leading replica dims)."""

    def __init__(self, layout: Layout, blocks: list[Tensor], replica_dims: int):
        self.layout, self.blocks, self.rd = layout, blocks, replica_dims

    @staticmethod
    def pack(layout: Layout, vecs: list[Tensor], replica_dims: int) -> Blocks:
        blocks = [
            torch.stack([vecs[i] for i in ix]) if st else vecs[ix[0]] for ix, st in zip(layout.groups, layout.stacked)
        ]
        return Blocks(layout, blocks, replica_dims)

    def tensors(self) -> list[Tensor]:
        out: list[Tensor | None] = [None] * len(self.layout.order)
        for ix, st, b in zip(self.layout.groups, self.layout.stacked, self.blocks):
            for i, row in zip(ix, b.unbind(0) if st else (b,)):
                out[i] = row
        return out  # type: ignore[return-value]

    def view(self, s: Tensor, j: int) -> Tensor:
        """Per-replica ``s`` shaped to broadcast against block j."""
        b = self.blocks[j]
        if self.rd == 0 or not isinstance(s, Tensor):
            return s
        v = replica_view(s, b[0] if self.layout.stacked[j] else b, self.rd)
        return v.unsqueeze(0) if self.layout.stacked[j] else v

    def map(self, fn, *others: Blocks) -> Blocks:
        """``fn(j, block, *other blocks)`` on every block (element-wise ops only)."""
        return Blocks(
            self.layout, [fn(j, *bs) for j, bs in enumerate(zip(self.blocks, *(o.blocks for o in others)))], self.rd
        )

    def sub_scaled(self, other: Blocks, s: Tensor) -> Blocks:
        """``x − s·y`` (per replica s), computed as the loop does: ``x_i − (s · y_i)``."""
        return Blocks(
            self.layout, [x - self.view(s, j) * y for j, (x, y) in enumerate(zip(self.blocks, other.blocks))], self.rd
        )

    def scaled(self, s: Tensor) -> Blocks:
        return self.map(lambda j, b: b * self.view(s, j))

    def dot(self, other: Blocks) -> Tensor:
        """``Σ_i replica_sum(x_i · y_i)`` bitwise as the per-tensor loop (module docstring)."""
        rd, parts = self.rd, []
        for st, x, y in zip(self.layout.stacked, self.blocks, other.blocks):
            prod = x * y
            if st:
                parts.append(prod.sum(tuple(range(1 + rd, prod.dim()))))
            else:
                parts.append(replica_sum(prod, rd).unsqueeze(0))
        flat = torch.cat(parts).numpy()
        acc = 0
        for p in self.layout.order:
            acc = acc + flat[p]
        return torch.from_numpy(np.asarray(acc, dtype=flat.dtype).copy())
