"""Random draws with one stream, or with one stream per replica.

A task draws through these functions instead of calling ``torch.rand(..., generator=gen)`` and
friends directly, so that the same ``generate`` / ``rewards`` code serves two kinds of run:

* a run under one shared event schedule passes a ``torch.Generator``: one call draws every
  replica's numbers, exactly as the torch function would (same bits);
* a run with an independent schedule per replica (``run.schedules = "independent"``,
  ``docs/system.md#independent-schedules``) passes a :class:`RowGenerators`, one generator per
  leading row: row ``r`` is filled by its own generator with a call of shape ``(1, ...)``, the
  call a one-replica run makes, so replica ``r`` draws the numbers a separate run with its seeds
  would draw (``tests/system/test_independent_schedules.py`` holds the two equal).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Union

from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class RowGenerators:
    """One ``torch.Generator`` per leading row of every draw."""

    __slots__ = ("gens",)

    def __init__(self, gens: Sequence[torch.Generator]):
        self.gens = list(gens)

    def __len__(self) -> int:
        return len(self.gens)

    def _check(self, rows: int) -> None:
        if rows != len(self.gens):
            raise ValueError(f"a draw of {rows} rows with {len(self.gens)} row generators")


Stream = Union["torch.Generator", RowGenerators]


def rand(shape: tuple[int, ...], gen: Stream, dtype: torch.dtype | None = None) -> Tensor:
    """Uniform [0, 1) numbers of ``shape`` (``torch.rand``)."""
    if isinstance(gen, torch.Generator):
        return torch.rand(shape, generator=gen, dtype=dtype)
    return _per_row(shape, gen, dtype, torch.Tensor.uniform_)  # torch.rand is empty().uniform_(): the same numbers


def randn(shape: tuple[int, ...], gen: Stream, dtype: torch.dtype | None = None) -> Tensor:
    """Standard normal numbers of ``shape`` (``torch.randn``)."""
    if isinstance(gen, torch.Generator):
        return torch.randn(shape, generator=gen, dtype=dtype)
    return _per_row(
        shape, gen, dtype, torch.Tensor.normal_
    )  # torch.randn is empty().normal_(): same numbers, same size


def _per_row(shape: tuple[int, ...], gen: RowGenerators, dtype: torch.dtype | None, fill) -> Tensor:
    """A tensor of ``shape`` whose row r is filled in place by ``fill(row, generator=gen.gens[r])``."""
    gen._check(shape[0])
    out = torch.empty(shape, dtype=dtype)
    for row, g in zip(out, gen.gens):
        fill(row, generator=g)
    return out


def multinomial(probs: Tensor, samples: int, gen: Stream, replacement: bool = True) -> Tensor:
    """``(R, samples)`` indices drawn from each row of ``probs`` ``(R, K)`` (``torch.multinomial``)."""
    if isinstance(gen, torch.Generator):
        return torch.multinomial(probs, samples, replacement=replacement, generator=gen)
    gen._check(probs.shape[0])
    out = torch.empty(probs.shape[0], samples, dtype=torch.long)
    draw = torch.multinomial
    for p, o, g in zip(probs.split(1), out.split(1), gen.gens):  # (1, K) rows: the call of a one-replica run
        draw(p, samples, replacement, generator=g, out=o)
    return out
