"""LM groups decoded together: :meth:`LMTask.sample_groups` is each group's own :meth:`LMTask.generate` to
the bit, and the workload that decodes the groups dispatched with the same weights in one batch
(:class:`sandbox.system.workload.PolicyWorkload`) gives a run the same numbers however many it makes ahead."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from _tiny_lm import tiny_lm_scenario

from sandbox.run.runner import run_scenario
from sandbox.system import workload as wl
from sandbox.tasks.draws import RowGenerators
from sandbox.tasks.lm import LMTask, LMTaskConfig
from sandbox.tasks.lm.task import SEEDS


@pytest.fixture(autouse=True)
def _cache_and_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def task_and_weights(replicas: int, eos_bias: float) -> tuple[LMTask, dict]:
    """A random tiny model whose end token gets ``eos_bias`` more logit through the final LayerNorm's bias:
    responses of every length, groups and replicas that end at different steps."""
    cfg = LMTaskConfig.model_validate(
        dict(
            problem=dict(kind="sort", min_len=2, max_len=5),
            model=dict(d_model=16, n_layers=1, n_heads=2),
            warmstart=dict(enabled=False),
            train_size=64,
            eval_size=4,
            replicas=replicas,
        )
    )
    task = LMTask(cfg)
    params = task.init_params(torch.Generator().manual_seed(3))
    eos = task.tokenizer.eos_id
    u = torch.randn(replicas, 16, generator=torch.Generator().manual_seed(4))
    params["ln_f.bias"] = u
    head = "tok.weight" if task.model_cfg.tie_embeddings else "head.weight"
    params[head][:, eos] = eos_bias * u / (u * u).sum(-1, keepdim=True)
    return task, params


@pytest.mark.parametrize("replicas, groups, eos_bias", [(1, 5, 1.5), (3, 4, 1.0), (2, 6, 3.0), (3, 1, 1.0)])
def test_groups_decoded_together_are_each_groups_own_decode(replicas, groups, eos_bias):
    task, params = task_and_weights(replicas, eos_bias)
    made = [task.new_group(4, torch.Generator().manual_seed(11 + i)) for i in range(groups)]
    together = task.sample_groups(params, made, 7)
    again = [task.new_group(4, torch.Generator().manual_seed(11 + i)) for i in range(groups)]
    alone = [task.generate(params, g, None, 7) for g in again]
    widths = set()
    for a, b in zip(together, alone):
        for name in ("tokens", "behaviour_logp", "token_versions", "lengths", "ended", "prompts"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert a.info[SEEDS] == b.info[SEEDS]
        widths.add(a.width)
    lengths = torch.stack([a.lengths for a in together])
    if groups > 1:  # the case exercised: groups of different widths, responses ended at different steps
        assert len(widths) > 1 or lengths.unique().numel() > 2
    # decoding again from its start under the same weights draws the same numbers (the group's own stream)
    redo = task.sample_groups(params, made, 7)
    for a, b in zip(redo, together):
        assert torch.equal(a.tokens, b.tokens)


def test_a_groups_tokens_come_from_its_own_stream():
    """Two groups made from different sampling streams but with the same seed draw the same tokens; the
    sampling stream gives the prompt and the seed only."""
    task, params = task_and_weights(2, 1.0)
    a = task.new_group(4, torch.Generator().manual_seed(1))
    b = task.new_group(4, torch.Generator().manual_seed(1))
    stream = torch.Generator().manual_seed(99)
    torch.rand(5, generator=stream)
    ga, gb = task.generate(params, a, stream, 0), task.generate(params, b, torch.Generator().manual_seed(2), 0)
    assert torch.equal(ga.tokens, gb.tokens)
    rows = task.new_group(4, RowGenerators([torch.Generator().manual_seed(s) for s in (1, 2)]))
    assert isinstance(rows.info[SEEDS], list) and len(rows.info[SEEDS]) == 2


def lm_run(steps: int = 3, staleness: dict | None = None):
    return tiny_lm_scenario(staleness or {"kind": "sync"}, steps)


@pytest.mark.parametrize(
    "staleness",
    [{"kind": "sync"}, {"kind": "max_lag", "k_max": 1}, {"kind": "fixed_lag", "k": 2}],
    ids=["sync", "max_lag", "fixed_lag"],
)
def test_a_runs_numbers_do_not_depend_on_how_many_groups_are_decoded_together(monkeypatch, staleness):
    calls: list[int] = []
    real = LMTask.sample_groups

    def counted(self, params, groups, version):
        calls.append(len(groups))
        return real(self, params, groups, version)

    monkeypatch.setattr(LMTask, "sample_groups", counted)
    together = run_scenario(lm_run(staleness=staleness), force=True)
    batched = list(calls)
    calls.clear()
    init = wl.PolicyWorkload.__init__

    def one_at_a_time(self, task, gen, ahead=1):
        init(self, task, gen, 1)
        self._ahead = 1

    monkeypatch.setattr(wl.PolicyWorkload, "__init__", one_at_a_time)
    monkeypatch.setattr(
        wl.PolicyWorkload,
        "sample",
        lambda self, w, v, g: counted(self.task, w, [self.task.new_group(g, self.gen)], v)[0],
    )
    alone = run_scenario(lm_run(staleness=staleness), force=True)
    assert max(batched) > 1 and max(calls) == 1
    for k in together.replica_metrics:
        np.testing.assert_array_equal(together.replica_metrics[k], alone.replica_metrics[k], err_msg=k)
    for col in together.jobs.columns:
        np.testing.assert_array_equal(together.jobs[col].to_numpy(), alone.jobs[col].to_numpy(), err_msg=col)


@pytest.mark.parametrize("problem", [dict(kind="addition", digits=2), dict(kind="sort", min_len=2, max_len=4)])
def test_exact_answer_rewards_are_the_text_scores(problem):
    """The tensor test of :meth:`LMTask.rewards` gives every response the score of its text: reference answers,
    answers with a padding token inside (its text skips it), too long or too short, cut without the end token."""
    cfg = LMTaskConfig.model_validate(
        dict(
            problem=problem,
            model=dict(d_model=16, n_layers=1, n_heads=2),
            warmstart=dict(enabled=False),
            train_size=32,
            eval_size=4,
            replicas=2,
        )
    )
    task = LMTask(cfg)
    gen = torch.Generator().manual_seed(0)
    eos, pad = task.tokenizer.eos_id, task.tokenizer.pad_id
    checked = correct = 0
    for _ in range(30):
        group = task.new_group(12, gen)
        R, N = group.lengths.shape
        T = task.max_new
        tokens = torch.randint(2, task.tokenizer.vocab_size, (R, N, T), generator=gen)
        for r in range(R):
            ans = task.train_answer_ids[int(group.info["prompt_index"][r])]
            for n in range(N):
                kind = n % 6
                row = list(ans)  # the reference then the end token
                if kind == 1 and len(row) < T:
                    row.insert(int(torch.randint(len(row), (1,), generator=gen)), pad)
                elif kind == 2:
                    row = row[:-1] + [row[0], eos]
                elif kind == 3:
                    row = row[1:]
                elif kind == 4:
                    row = row[:-1]  # cut: no end token
                elif kind == 5:
                    row = tokens[r, n, : max(1, len(row) - 1)].tolist() + [eos]
                row = row[:T]
                tokens[r, n, : len(row)] = torch.tensor(row)
                tokens[r, n, len(row) :] = 0
                group.lengths[r, n] = len(row)
        group.tokens = tokens
        fast = task.rewards(group, None)
        text = task.rewards(replace(group, info={}), None)  # without the prompt index: each text scored
        assert torch.equal(fast, text)
        checked += fast.numel()
        correct += int(fast.sum())
    assert correct > 0 and correct < checked


def test_scoring_computes_each_shared_prompt_once_without_coupling_rows():
    """:func:`sandbox.models.replicas.sequence_logprobs` computes a prompt its rows share once: replica r's
    log-probs and gradients are the same to the bit alone, in a batch of replicas and beside other groups (a
    row's numbers are its own), the shared path is taken, and it is the one-forward function within float32
    rounding (cached vs uncached attention), gradients included."""
    from sandbox.models import replicas as rp
    from sandbox.models.transformer import TransformerConfig

    torch.set_num_threads(1)
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, vocab_size=20, max_seq_len=24)
    gen = torch.Generator().manual_seed(0)
    R, G, N, P, S = 3, 4, 5, 6, 7
    weights = {k: torch.randn(R, *v, generator=gen) * 0.3 for k, v in _module_shapes(cfg).items()}
    prompts = torch.randint(2, 20, (R, G, 1, P), generator=gen).expand(R, G, N, P).reshape(R, G * N, P)
    tokens = torch.randint(0, 20, (R, G * N, S), generator=gen)

    def score(rows, reps, shared=True):
        leaf = {k: v[reps].clone().requires_grad_(True) for k, v in weights.items()}
        real = rp._shared_contexts
        if not shared:
            rp._shared_contexts = lambda c, n: None
        try:
            lp = rp.sequence_logprobs(cfg, leaf, prompts[reps][:, rows], tokens[reps][:, rows], 0.7, shared_rows=N)
        finally:
            rp._shared_contexts = real
        (lp * torch.linspace(0.5, 1.5, lp[0].numel()).view(lp.shape[1:])).sum().backward()
        return lp.detach(), {k: v.grad for k, v in leaf.items()}

    assert rp._shared_contexts(prompts, N)[0].shape[1] == G
    assert rp._shared_contexts(prompts[:, 1:], N) is None  # rows out of their blocks: the one forward
    every = list(range(G * N))
    lp, grads = score(every, list(range(R)))
    for r in range(R):
        one, one_grads = score(every, [r])
        assert torch.equal(one[0], lp[r])
        for k in grads:
            assert torch.equal(one_grads[k][0], grads[k][r]), (r, k)
    group = list(range(N, 2 * N))  # one group alone: the same log-probs as beside the other groups
    alone, _ = score(group, list(range(R)))
    assert torch.equal(alone, lp[:, N : 2 * N])
    plain, plain_grads = score(every, list(range(R)), shared=False)
    torch.testing.assert_close(lp, plain, rtol=0, atol=1e-5)
    for k in grads:
        torch.testing.assert_close(grads[k], plain_grads[k], rtol=1e-4, atol=1e-5)


def _module_shapes(cfg) -> dict:
    from sandbox.models.transformer_nn import Transformer

    return {k: v.shape for k, v in Transformer(cfg).named_parameters()}


def test_groups_made_ahead_under_other_weights_are_decoded_again():
    """The workload makes groups ahead under the weights of the first call; when the next calls hold other
    weights, the groups made ahead are decoded again from their seeds: each call returns what a workload
    that decodes one group per call returns."""
    task, w1 = task_and_weights(2, 1.0)
    w2 = {k: v + 0.1 for k, v in w1.items()}
    calls = [(w1, 0), (w2, 1), (w2, 1), (w1, 0), (w2, 1), (w2, 1), (w2, 1)]
    ahead = wl.PolicyWorkload(task, torch.Generator().manual_seed(8), ahead=3)
    alone = wl.PolicyWorkload(task, torch.Generator().manual_seed(8), ahead=1)
    decoded = []
    real = task.sample_groups
    task.sample_groups = lambda params, groups, version: decoded.append(len(groups)) or real(params, groups, version)
    for weights, version in calls:
        a = ahead.sample(weights, version, 4)
        b = task.generate(weights, task.new_group(4, alone.gen), None, version)
        for name in ("tokens", "behaviour_logp", "token_versions", "lengths", "prompts"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert max(decoded) == 3 and sum(decoded) > len(calls)  # batched, and some groups decoded twice
