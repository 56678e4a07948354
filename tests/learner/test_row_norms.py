"""``row_norms`` is ``x.norm(dim=1)`` to the bit (the learner's ``grad/norm``, ``param/norm`` and
``update/norm``), for the float dtypes a learner holds, shapes with one and many columns, and
non-finite rows (divergence detection reads them)."""

from __future__ import annotations

import math

import torch

from sandbox.learner.diagnostics import row_norms


def test_row_norms_are_tensor_norm_over_dim_one():
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for shape in ((1, 10), (3, 1000), (8, 77), (2, 1), (2, 0)):
            x = (torch.randn(shape, generator=gen) * 3).to(dtype)
            a, b = x.norm(dim=1), row_norms(x)
            assert a.dtype == b.dtype and torch.equal(a, b), (dtype, shape)
    bad = torch.tensor([[math.nan, 1.0], [math.inf, 2.0], [3.0, 4.0]])
    out = row_norms(bad)
    assert math.isnan(out[0]) and out[1] == math.inf and out[2] == 5.0
