"""Ghost per-trajectory gradient norms (sandbox/algorithms/ghost_norms.py) against hand values and against
the exact vmap(grad) path, on the builtin transformer, the HF backend and models with unruled layers."""

import pytest
import torch
from torch import nn
from torch.func import functional_call

from sandbox.algorithms import per_sequence_grad_sq_norms
from sandbox.algorithms.ghost_norms import ghost_sequence_grad_sq_norms
from sandbox.models import Transformer, TransformerConfig, sequence_logprobs

RTOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def test_hand_values_two_layer_linear():
    # log π_i = Σ_t w2·(W1 a_t): ∇W1 = w2ᵀ (Σ_t a_t)ᵀ, ∇w2 = (W1 Σ_t a_t)ᵀ
    model = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 1, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        model[1].weight.copy_(torch.tensor([[3.0, 4.0]]))
    a = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]])  # N=2 sequences of T=2 tokens
    # sample 0: Σa = (1, 1): ‖w2‖²‖Σa‖² = 25·2 = 50, ‖W1 Σa‖² = ‖(1, 2)‖² = 5  -> 55
    # sample 1: Σa = (2, 2): 25·8 = 200, ‖(2, 4)‖² = 20                        -> 220
    got = ghost_sequence_grad_sq_norms(
        lambda p, x: functional_call(model, p, (x,)).sum((-2, -1)), dict(model.named_parameters()), a
    )
    assert torch.equal(got, torch.tensor([55.0, 220.0]))


def builtin_case(dtype, tie: bool, n=6, prompt_len=3, t=7, vocab=11):
    model = Transformer(
        TransformerConfig(d_model=16, n_heads=2, vocab_size=vocab, max_seq_len=prompt_len + t, tie_embeddings=tie)
    )
    model.reset_parameters(torch.Generator().manual_seed(0))
    model = model.to(dtype)
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, vocab, (n, prompt_len), generator=g)
    tokens = torch.randint(0, vocab, (n, t), generator=g)
    lengths = torch.tensor([1, 7, 3, 5, 7, 2])  # padding after each response's end, masked out
    mask = (torch.arange(t) < lengths.unsqueeze(1)).to(dtype)
    tokens = tokens * (mask > 0)

    def fwd(p):
        return lambda x, past=None: functional_call(model, p, (x, past))

    def seq(p, tr):  # one trajectory, as LMTask.sequence_logprob
        tk, mk, pr = tr
        return (sequence_logprobs(fwd(p), pr[None], tk[None])[0].to(dtype) * mk).sum()

    def batch(p, tr):  # the whole batch in one forward, one sequence per row
        tk, mk, pr = tr
        return (sequence_logprobs(fwd(p), pr, tk).to(dtype) * mk).sum(-1)

    return dict(model.named_parameters()), (tokens, mask, prompts), seq, batch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("tie", [True, False])
def test_builtin_transformer_matches_exact(dtype, tie):
    params, inputs, seq, batch = builtin_case(dtype, tie)
    exact = per_sequence_grad_sq_norms(seq, params, inputs)
    ghost = ghost_sequence_grad_sq_norms(batch, params, inputs)  # no seq fn: every parameter has a rule
    assert ghost.dtype == exact.dtype and ghost.shape == (6,)
    torch.testing.assert_close(ghost, exact, rtol=RTOL[dtype], atol=0)


def test_replicas_match_exact():
    params, inputs, seq, batch = builtin_case(torch.float64, True)
    rp = {k: torch.stack([v.detach(), 1.5 * v.detach()]) for k, v in params.items()}
    ri = tuple(torch.stack([x, x.flip(0)]) for x in inputs)
    exact = per_sequence_grad_sq_norms(seq, rp, ri, replica_dims=1)
    ghost = ghost_sequence_grad_sq_norms(batch, rp, ri, replica_dims=1)
    assert ghost.shape == (2, 6)
    torch.testing.assert_close(ghost, exact, rtol=1e-12, atol=0)


class Gated(nn.Module):
    """Embedding (with padding_idx) → Linear → a gate σ(p) (an op no rule covers) → bias-free head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(9, 5, padding_idx=0)
        self.fc = nn.Linear(5, 5)
        self.gate = nn.Parameter(torch.randn(5))
        self.head = nn.Linear(5, 9, bias=False)

    def forward(self, x):
        return self.head(torch.tanh(self.fc(self.emb(x))) * torch.sigmoid(self.gate)).log_softmax(-1)


def gated_case():
    torch.manual_seed(3)
    model = Gated().double()
    y = torch.randint(0, 9, (5, 6))
    y[:, 4:] = 0  # padding tokens hit padding_idx (zero gradient rows)

    def seq(p, yi):
        return functional_call(model, p, (yi,)).gather(-1, yi.unsqueeze(-1)).sum()

    def batch(p, yb):
        return functional_call(model, p, (yb,)).gather(-1, yb.unsqueeze(-1)).squeeze(-1).sum(-1)

    return dict(model.named_parameters()), y, seq, batch


def test_layer_without_rule_falls_back_to_exact():
    params, y, seq, batch = gated_case()
    with pytest.raises(ValueError, match=r"no rule covers parameter\(s\) \['gate'\]"):
        ghost_sequence_grad_sq_norms(batch, params, y)
    exact = per_sequence_grad_sq_norms(seq, params, y)
    ghost = ghost_sequence_grad_sq_norms(batch, params, y, seq)
    torch.testing.assert_close(ghost, exact, rtol=1e-12, atol=0)


class RMSNormed(nn.Module):
    """Embedding → torch.nn.RMSNorm (``F.rms_norm`` with a weight) → Linear → RMSNorm → head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(9, 6)
        self.norm1 = nn.RMSNorm(6, eps=1e-5)
        self.fc = nn.Linear(6, 6)
        self.norm2 = nn.RMSNorm(6)
        self.head = nn.Linear(6, 9, bias=False)

    def forward(self, x):
        return self.head(self.norm2(torch.tanh(self.fc(self.norm1(self.emb(x)))))).log_softmax(-1)


def test_rms_norm_weight_has_a_rule():
    torch.manual_seed(4)
    model = RMSNormed().double()
    with torch.no_grad():
        for norm in (model.norm1, model.norm2):
            norm.weight.uniform_(0.5, 1.5)  # not all ones: the rule must weigh x̂ by the output gradient
    y = torch.randint(0, 9, (5, 7))
    params = dict(model.named_parameters())

    def seq(p, yi):
        return functional_call(model, p, (yi,)).gather(-1, yi.unsqueeze(-1)).sum()

    def batch(p, yb):
        return functional_call(model, p, (yb,)).gather(-1, yb.unsqueeze(-1)).squeeze(-1).sum(-1)

    exact = per_sequence_grad_sq_norms(seq, params, y)
    ghost = ghost_sequence_grad_sq_norms(batch, params, y)  # no fallback given: every parameter has a rule
    torch.testing.assert_close(ghost, exact, rtol=1e-12, atol=0)


def test_bad_inputs_are_named():
    params, y, seq, batch = gated_case()
    with pytest.raises(ValueError, match=r"expected \(5,\) sequence log-probs"):
        ghost_sequence_grad_sq_norms(lambda p, yb: batch(p, yb).sum(), params, y, seq)
    with pytest.raises(ValueError, match="replica_dims must be 0 or 1"):
        ghost_sequence_grad_sq_norms(batch, params, y, seq, replica_dims=2)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_hf_backend_matches_exact(arch):
    pytest.importorskip("transformers")
    from sandbox.tasks.lm.task import LMTask, LMTaskConfig

    config = {
        "llama": dict(
            model_type="llama", hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        ),
        "gpt2": dict(model_type="gpt2", n_embd=16, n_layer=1, n_head=2),
    }[arch]
    task = LMTask(
        LMTaskConfig.model_validate(
            dict(
                problem=dict(kind="sort", min_len=2, max_len=4),
                model=dict(backend="hf", config=config),
                warmstart=dict(enabled=False),
                train_size=16,
                eval_size=4,
            )
        )
    )
    single = {k: v[0] for k, v in task.init_params(torch.Generator().manual_seed(0)).items()}
    g = torch.Generator().manual_seed(1)
    n, t = 5, 4
    tokens = torch.randint(2, 10, (n, t), generator=g)
    mask = (torch.arange(t) < torch.tensor([[1], [4], [2], [3], [4]])).float()
    inputs = (tokens, mask, task.train_ids[:n])

    def batch(p, tr):
        tk, mk, pr = tr
        return (sequence_logprobs(task.forward_fn(p, use_cache=False), pr, tk, task.cfg.temperature).float() * mk).sum(
            -1
        )

    exact = per_sequence_grad_sq_norms(task.sequence_logprob, single, inputs)
    ghost = ghost_sequence_grad_sq_norms(batch, single, inputs)  # Linear / Conv1D / RMSNorm / LayerNorm rules
    torch.testing.assert_close(ghost, exact, rtol=1e-5, atol=0)


def test_recorder_on_the_training_forward_keeps_the_loss_gradient():
    from sandbox.algorithms.ghost_norms import GhostNormRecorder

    params, inputs, seq, batch = builtin_case(torch.float64, True)
    exact = per_sequence_grad_sq_norms(seq, params, inputs)
    weights = torch.linspace(-1.0, 1.0, 6, dtype=torch.float64)
    plain = torch.autograd.grad((weights * batch(params, inputs)).sum(), list(params.values()))
    with GhostNormRecorder(params, inputs) as rec:
        per_seq = batch(params, inputs)
    norms = rec.sq_norms(per_seq, retain_graph=True)
    shared = torch.autograd.grad((weights * per_seq).sum(), list(params.values()))  # same graph, afterwards
    torch.testing.assert_close(norms, exact, rtol=1e-12, atol=0)
    for a, b in zip(shared, plain):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)
