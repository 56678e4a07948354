"""processed_logprobs: the processed distribution against hand-computed truncated softmaxes, the two
reporting modes, and the sampled frequencies (``docs/engines.md#processed_logprobs``)."""

from __future__ import annotations

import math

import pytest
import torch
from _common import engine

from sandbox.engines.processed_logprobs import processed_logp

P = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])
Z = P.log()


@pytest.mark.component("engine", "processed_logprobs")
def test_top_k_top_p_and_temperature_hand_values():
    """top-k 3: (0.5, 0.2, 0.15)/0.85; top-p 0.75: 0.5 + 0.2 = 0.7 < 0.75, so the third entry (crossing
    0.75) is kept and the rest dropped: (0.5, 0.2, 0.15)/0.85 too; top-p 0.6: (0.5, 0.2)/0.7; τ = 2:
    ∝ sqrt(p); τ = 2 then top-k 2: (√0.5, √0.2)/(√0.5 + √0.2)."""
    inf = float("-inf")
    want = torch.tensor([0.5, 0.2, 0.15, 0, 0]) / 0.85
    assert torch.allclose(processed_logp(Z, 1.0, 3, 1.0).exp(), want, atol=1e-6)
    assert torch.allclose(processed_logp(Z, 1.0, None, 0.75).exp(), want, atol=1e-6)
    assert torch.allclose(processed_logp(Z, 1.0, None, 0.6).exp(), torch.tensor([0.5, 0.2, 0, 0, 0]) / 0.7, atol=1e-6)
    assert processed_logp(Z, 1.0, 3, 1.0)[3:].tolist() == [inf, inf]
    sq = P.sqrt()
    assert torch.allclose(processed_logp(Z, 2.0, None, 1.0).exp(), sq / sq.sum(), atol=1e-6)
    two = torch.tensor([sq[0], sq[1], 0, 0, 0]) / (sq[0] + sq[1])
    assert torch.allclose(processed_logp(Z, 2.0, 2, 1.0).exp(), two, atol=1e-6)
    # top-k first, then top-p on the renormalised top-k: top-k 3 gives (0.588, 0.235, 0.176); top-p 0.8 keeps 2
    assert torch.allclose(processed_logp(Z, 1.0, 3, 0.8).exp(), torch.tensor([0.5, 0.2, 0, 0, 0]) / 0.7, atol=1e-6)
    assert torch.allclose(processed_logp(Z, 1.0, None, 1.0), Z, atol=1e-6)  # nothing to process


@pytest.mark.component("engine", "processed_logprobs")
def test_processed_and_raw_reports_and_sampled_frequencies():
    """Tokens come from q (never a dropped entry; chi-square within 5 standard deviations); 'processed'
    reports log q(y), 'raw' reports log softmax(z)(y) = the trainer's (version_logp) exactly."""
    n = 200_000
    z = Z.expand(n, 5)
    q = torch.tensor([0.5, 0.2, 0.15, 0, 0]) / 0.85
    for mode in ("processed", "raw"):
        d = engine({"name": "processed_logprobs", "top_k": 3, "logprobs": mode}).draw(
            z, torch.Generator().manual_seed(3)
        )
        assert int(d.tokens.max()) <= 2
        assert torch.allclose(d.version_logp, Z[d.tokens], atol=1e-6)
        if mode == "processed":
            assert torch.allclose(d.reported_logp, q.log()[d.tokens], atol=1e-6)
        else:
            assert torch.equal(d.reported_logp, d.version_logp)
        counts = torch.bincount(d.tokens, minlength=5).double()[:3]
        chi2 = float(((counts - n * q[:3]) ** 2 / (n * q[:3])).sum())
        assert chi2 < 2 + 5 * math.sqrt(2 * 2), chi2


def test_processed_engine_on_the_bitstring_task_reports_tempered_probabilities():
    """Bit-string with τ = 2: a bit of logit θ is sampled with probability sigmoid(θ/2), and that is reported."""
    from sandbox.engines import make_engine
    from sandbox.scenario.api import validate_scenario
    from sandbox.tasks import make_task

    scn = validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 3, "init_logit": 2.0},
            "engine": {"name": "processed_logprobs", "temperature": 2.0},
        },
        "t",
    )
    task = make_task(scn.task)
    task.engine = make_engine(scn.engine)
    params = task.init_params(torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    ro = task.generate(params, task.new_group(20_000, gen), gen, 0)
    frac = float(ro.tokens.double().mean())
    p = 1 / (1 + math.exp(-1.0))
    assert abs(frac - p) < 4 * math.sqrt(p * (1 - p) / ro.tokens.numel())
    lp1 = torch.nn.functional.logsigmoid(torch.tensor(1.0))
    assert torch.allclose(ro.behaviour_logp[ro.tokens == 1], lp1.expand(int((ro.tokens == 1).sum())), atol=1e-6)
    lv1 = torch.nn.functional.logsigmoid(torch.tensor(2.0))
    assert torch.allclose(ro.version_logp[ro.tokens == 1], lv1.expand(int((ro.tokens == 1).sum())), atol=1e-6)
