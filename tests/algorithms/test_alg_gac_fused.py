"""GAC's fused reductions (torch._foreach_* in one pass) are bitwise the plain per-tensor loop, and the
logged norms reuse the unit sums without changing a bit (sandbox/algorithms/stabilizers/gac.py)."""

import pytest
import torch

from sandbox.algorithms._tensor import replica_sum
from sandbox.algorithms.stabilizers.gac import GAC, GACConfig, _dots

SHAPES = [(5, 3), (7,), (4, 2, 3), (1,), (33, 17)]


def loop_dot(xs, ys, rd):
    return sum(replica_sum(x * y, rd) for x, y in zip(xs, ys))


@pytest.mark.parametrize("rd", [0, 1])
def test_dots_bitwise_equal_to_loop(rd):
    g = torch.Generator().manual_seed(0)
    lead = (3,) if rd else ()
    xs = [torch.randn(*lead, *s, generator=g) for s in SHAPES]
    ys = [torch.randn(*lead, *s, generator=g) for s in SHAPES]
    got = _dots([(xs, ys), (xs, xs), (ys, ys)], rd)
    for value, (a, b) in zip(got, [(xs, ys), (xs, xs), (ys, ys)]):
        assert torch.equal(value, loop_dot(a, b, rd))


@pytest.mark.parametrize("scope", ["global", "per_layer"])
@pytest.mark.parametrize("renorm", [False, True])
def test_transform_projection_and_norms_bitwise(scope, renorm):
    g = torch.Generator().manual_seed(1)
    base = [torch.randn(2, *s, generator=g, dtype=torch.float64) for s in SHAPES]
    gac = GAC(GACConfig(scope=scope, renorm=renorm, c_thr=0.2))
    gac.transform([b.clone() for b in base], 1)
    ref = [r.clone() for r in gac.ref]
    vecs = [b + 0.3 * torch.randn(b.shape, generator=g, dtype=b.dtype) for b in base]
    out, skip, metrics = gac.transform(vecs, 1)
    assert skip is None and bool((metrics["gac/projected"] > 0).all())
    units = [list(range(len(vecs)))] if scope == "global" else [[i] for i in range(len(vecs))]
    expected = list(vecs)
    for idx in units:  # the original per-tensor formulation (module docstring), alpha = 1
        gu, pu = [vecs[i] for i in idx], [ref[i] for i in idx]
        gp, gg, pp = loop_dot(gu, pu, 1), loop_dot(gu, gu, 1), loop_dot(pu, pu, 1)
        c = gp / (gg.sqrt() * pp.sqrt() + 1e-12)
        coeff = torch.where(c > 0.2, gp / (pp.sqrt() + 1e-12), torch.zeros_like(c))
        new = [x - (coeff / (pp.sqrt() + 1e-12)).reshape(2, *[1] * (x.dim() - 1)) * p for x, p in zip(gu, pu)]
        if renorm:
            nn = loop_dot(new, new, 1).sqrt()
            s = torch.where(c > 0.2, gg.sqrt() / (nn + 1e-12), torch.ones_like(nn))
            new = [x * s.reshape(2, *[1] * (x.dim() - 1)) for x in new]
        for i, x in zip(idx, new):
            expected[i] = x
    for a, b in zip(out, expected):
        assert torch.equal(a, b)
    ratio = loop_dot(expected, expected, 1).sqrt() / (loop_dot(vecs, vecs, 1).sqrt() + 1e-12)
    assert torch.equal(metrics["gac/norm_ratio"], ratio)


@pytest.mark.parametrize("rd", [0, 1])
def test_packed_blocks_dot_and_update_bitwise(rd):
    from sandbox.algorithms.stabilizers._packed import Blocks, Layout

    g = torch.Generator().manual_seed(2)
    lead = (2,) if rd else ()
    shapes = [(60, 60), (7,), (60, 60), (40000,), (7,), (60, 60), (3, 1), (300, 300)]  # repeats, and big ones
    xs = [torch.randn(*lead, *s, generator=g) for s in shapes]
    ys = [torch.randn(*lead, *s, generator=g) for s in shapes]
    layout = Layout.of(xs, rd)
    assert sum(layout.stacked) == 2  # (60, 60) x3 and (7,) x2 stacked; (40000,) and (300, 300) alone
    bx, by = Blocks.pack(layout, xs, rd), Blocks.pack(layout, ys, rd)
    assert torch.equal(bx.dot(by), loop_dot(xs, ys, rd))
    s = torch.rand(*lead, generator=g) if rd else torch.tensor(0.37)
    got = bx.sub_scaled(by, s).tensors()
    for x, y, z in zip(xs, ys, got):
        assert torch.equal(z, x - (s.reshape(*lead, *[1] * (x.dim() - rd)) if rd else s) * y)
