"""LM replicas: R tiny transformers in one task and one learner, replica r bitwise the one-replica
learner started from replica r's seeds (weights, every per-replica metric, the sampled groups).

Both are driven the same way (the simulator's order for a synchronous schedule: per batch, each group
is a new prompt, its sampling and its rewards; then one learner step), each replica drawing from its
own generator (:class:`sandbox.tasks.draws.RowGenerators`, as the independent-schedules replay does).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sandbox.base.errors import ScenarioError
from sandbox.engines import make_engine
from sandbox.run.runner import _stack_replica_rows, build_learner, run_scenario
from sandbox.scenario.api import validate_scenario
from sandbox.system.cluster import Job
from sandbox.tasks import make_task
from sandbox.tasks.draws import RowGenerators

SEED, R, STEPS = 5, 3, 3
WARM = {"max_steps": 200, "target_accuracy": None, "eval_every": 30, "dev_size": 16, "batch_size": 32}
"""A base model that answers some prompts (a random init earns no reward: zero gradients). Every
replica starts from it; they differ by their sampling streams."""


@pytest.fixture(autouse=True)
def _threads(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def scenario(
    replicas: int, engine: dict | None = None, experts: int = 0, algorithm: dict | None = None, steps: int = STEPS
) -> dict:
    model = {"d_model": 16, "n_layers": 1, "n_heads": 2, **({"experts": experts} if experts else {})}
    raw = {
        "task": {
            "name": "lm",
            "replicas": replicas,
            "problem": {"kind": "sort", "min_len": 2, "max_len": 3},
            "model": model,
            "warmstart": WARM,
            "train_size": 32,
            "eval_size": 4,
            "eval_samples": 1,
        },
        "system": {"num_workers": 1},
        "algorithm": {
            "group_size": 4,
            "groups_per_step": 2,
            "objective": {"name": "grpo"},
            "optimizer": {"name": "adam", "lr": 0.01, "grad_clip": 1.0},
            **(algorithm or {}),
        },
        "run": {"steps": steps, "seed": SEED, "figures": False, "eval_every": 1},
    }
    if engine is not None:
        raw["engine"] = engine
    return raw


def drive(raw: dict, seeds: list[int]):
    """Train ``len(seeds)`` replicas for ``run.steps`` batches; replica r starts from and samples with
    the streams of master seed ``seeds[r]``. Returns (final weights, per-replica metrics, batches)."""
    scn = validate_scenario(raw)
    task = make_task(scn.task)
    task.engine = make_engine(scn.engine)
    one = make_task(scn.task.model_copy(update={"replicas": 1}))
    streams = [scn.run.model_copy(update={"seed": s}).seeds() for s in seeds]
    inits = [one.init_params(torch.Generator().manual_seed(s["init"])) for s in streams]
    learner = build_learner(scn, task, {k: torch.cat([p[k] for p in inits]) for k in inits[0]})
    gens = RowGenerators([torch.Generator().manual_seed(s["sampling"]) for s in streams])
    weights, batches = learner.initial_weights(), []
    G, B = scn.algorithm.group_size, scn.algorithm.groups_per_step
    updates = scn.algorithm.updates_per_batch
    for b in range(-(-scn.run.steps // updates)):
        jobs = []
        for _ in range(B):
            ro = task.generate(weights, task.new_group(G, gens), gens, b * updates)
            ro.rewards = task.rewards(ro, gens)
            jobs.append(Job(id=-1, worker=-1, head_version=-1, dispatch_time=math.nan, payload=ro))
        batches.append([j.payload for j in jobs])
        result = learner.train(b, jobs, math.nan)
        weights = result.weights
        if result.stop:
            break
    metrics = _stack_replica_rows(learner.replica_rows, learner.R)
    return {k: v.detach().clone() for k, v in learner.params.items()}, metrics, batches


def assert_replicas_are_separate(raw_many: dict, raw_one: dict, replicas: int = R) -> None:
    w, m, batches = drive(raw_many, [SEED + r for r in range(replicas)])
    assert m["loss"].shape[1] == replicas
    compared = 0
    for r in range(replicas):
        w1, m1, batches1 = drive(raw_one, [SEED + r])
        for k, v in w1.items():
            assert torch.equal(w[k][r], v[0]), f"replica {r}: weight {k}"
        assert m.keys() == m1.keys()
        for k, v in m1.items():
            np.testing.assert_array_equal(m[k][:, r], v[:, 0], err_msg=f"replica {r}: {k}")
            compared += 1
        for b, (many, alone) in enumerate(zip(batches, batches1)):
            for g, (ro, ro1) in enumerate(zip(many, alone)):
                width = ro1.tokens.shape[-1]
                assert torch.equal(ro.tokens[r, :, :width], ro1.tokens[0]), (r, b, g)
                assert not ro.tokens[r, :, width:].any()
                assert torch.equal(ro.behaviour_logp[r, :, :width], ro1.behaviour_logp[0]), (r, b, g)
                assert torch.equal(ro.rewards[r], ro1.rewards[0]), (r, b, g)
    assert compared > 10
    # the replicas learn (some groups have signal) and really differ (their own draws)
    assert (m["grad/norm"] > 0).any()
    assert not torch.equal(w["tok.weight"][0], w["tok.weight"][1])
    assert not np.array_equal(m["grad/norm"][:, 0], m["grad/norm"][:, 1])


def test_lm_replicas_are_bitwise_separate_learners():
    assert_replicas_are_separate(scenario(R), scenario(1))


@pytest.mark.parametrize(
    "engine, experts",
    [
        ({"name": "precision", "dtype": "bfloat16"}, 0),
        ({"name": "routing", "flip_prob": 0.3}, 4),
        ({"name": "logit_noise", "scale": 0.5}, 0),
    ],
    ids=["precision", "routing", "logit_noise"],
)
def test_lm_replicas_with_an_engine_are_separate_learners(engine, experts):
    assert_replicas_are_separate(scenario(R, engine, experts), scenario(1, engine, experts))


def test_lm_replicas_run_under_the_shared_schedule():
    """``sandbox run`` with replicas = 2: one clock, every replica's metrics, replica 0 from the run's
    init seed (the replicas draw in turn from the one sampling stream)."""
    res = run_scenario(validate_scenario(scenario(2)), force=True)
    assert res.status == "completed"
    assert res.replica_metrics["loss"].shape == (STEPS, 2)
    assert res.replica_metrics["eval/accuracy"].shape == (STEPS, 2)
    np.testing.assert_allclose(res.metrics["loss"].to_numpy(), res.replica_metrics["loss"].mean(1))


def test_replicas_need_one_thread_at_load_time():
    raw = scenario(2)
    raw["task"]["threads"] = 2
    with pytest.raises(ScenarioError, match="task.threads"):
        validate_scenario(raw)


def test_hf_backend_refuses_replicas_at_load_time():
    raw = scenario(2)
    raw["task"]["model"] = {
        "backend": "hf",
        "config": {
            "model_type": "llama",
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 32,
        },
    }
    with pytest.raises(ScenarioError, match="task.replicas"):
        validate_scenario(raw)


@pytest.mark.parametrize(
    "algorithm",
    [
        {"minibatches": 2, "epochs": 2, "proximal": "batch_start"},
        {
            "objective": {
                "name": "reinforce",
                "baseline": "opob",
                "normalize_std": True,
                "aggregation": "seq_mean_token_mean",
            },
            "correction": {"name": "tis", "level": "sequence", "C": 8.0},
            "stabilizers": [{"name": "gac"}, {"name": "vcpo_lr"}],
        },
    ],
    ids=["minibatches-epochs", "opob-tis-gac-vcpo"],
)
def test_lm_replicas_with_other_algorithms_are_separate_learners(algorithm):
    """Mini-batches (whole-batch advantages, the batch-start proximal policy) and OPOB's per-sequence
    gradient norms with GAC and VCPO's LR rule: per replica too."""
    steps = 8 if "minibatches" in algorithm else STEPS  # two batches of four optimizer steps
    assert_replicas_are_separate(
        scenario(R, algorithm=algorithm, steps=steps), scenario(1, algorithm=algorithm, steps=steps)
    )


@pytest.mark.parametrize("replicas, group_size, lengths", [(2, 3, (1, 4)), (8, 2, (2, 3))], ids=["R2-G3", "R8-G2"])
def test_lm_replicas_other_shapes_are_separate_learners(replicas, group_size, lengths):
    """Other replica counts, group sizes below the linear layers' row floor (2-3 rows a decode step:
    :func:`sandbox.models.replicas.min_rows` pads them) and prompts/answers of other lengths."""
    raws = []
    for n in (replicas, 1):
        raw = scenario(n, steps=2)
        raw["task"]["problem"] = {"kind": "sort", "min_len": lengths[0], "max_len": lengths[1]}
        raw["algorithm"]["group_size"] = group_size
        raws.append(raw)
    assert_replicas_are_separate(*raws, replicas=replicas)


def _replica_models(cfg, R: int, dtype) -> dict:
    from sandbox.models.transformer_nn import Transformer

    mods = []
    for i in range(R):
        m = Transformer(cfg)
        m.reset_parameters(torch.Generator().manual_seed(i))
        mods.append(dict(m.named_parameters()))
    return {k: torch.stack([m[k].detach() for m in mods]).to(dtype) for k in mods[0]}


@pytest.mark.parametrize(
    "d, heads, experts, dtype",
    [
        (16, 2, 0, torch.float32),
        (64, 4, 0, torch.float32),
        (16, 2, 3, torch.float32),
        (8, 8, 0, torch.float32),
        (16, 2, 0, torch.bfloat16),
        (16, 2, 0, torch.float16),
    ],
    ids=["d16", "d64", "moe", "hd1", "bf16", "fp16"],
)
def test_batched_forward_does_not_depend_on_the_other_replicas(d, heads, experts, dtype):
    """The batched forward (:mod:`sandbox.models.replicas`) and its gradients: replica r of an R = 8 batch
    equals the same replica in batches of 1, 2 and 3 to the bit (prefill and one cached step, rows 1-33,
    prompt lengths 1-11), and the forward is the plain module's function (within float32 rounding)."""
    from sandbox.models import replicas as rp
    from sandbox.models.transformer import TransformerConfig
    from sandbox.models.transformer_nn import Transformer

    torch.set_num_threads(1)  # the task's default (task.threads = 1; required with replicas > 1)
    cfg = TransformerConfig(d_model=d, n_heads=heads, n_layers=2, vocab_size=20, max_seq_len=24, experts=experts)
    P = _replica_models(cfg, 8, dtype)

    def run(params, tok, nxt):
        leaf = {k: v.float().clone().requires_grad_(True) for k, v in params.items()}
        logits, cache = rp.forward(cfg, {k: v.to(dtype) for k, v in leaf.items()}, tok)
        step, _ = rp.forward(cfg, {k: v.to(dtype) for k, v in leaf.items()}, nxt, cache)
        (logits.float().square().sum() + step.float().sum()).backward()
        return logits, step, {k: v.grad for k, v in leaf.items()}

    for B, L in [(1, 1), (1, 5), (3, 11), (8, 9), (33, 4)]:
        gen = torch.Generator().manual_seed(B * 100 + L)
        tok, nxt = torch.randint(20, (8, B, L), generator=gen), torch.randint(20, (8, B, 1), generator=gen)
        full = run(P, tok, nxt)
        for sub in ([5], [0, 7], [2, 3, 6]):
            part = run({k: v[sub] for k, v in P.items()}, tok[sub], nxt[sub])
            for j, r in enumerate(sub):
                assert torch.equal(part[0][j], full[0][r]) and torch.equal(part[1][j], full[1][r]), (B, L, sub)
                for k in P:
                    assert torch.equal(part[2][k][j], full[2][k][r]), (B, L, sub, k)
        if dtype == torch.float32:
            m = Transformer(cfg)
            m.load_state_dict({k: v[0] for k, v in P.items()}, strict=False)
            ref, _ = m(tok[0])
            torch.testing.assert_close(full[0][0], ref, rtol=0, atol=2e-5)


def test_linear_rows_and_shared_prefill_do_not_change_a_number():
    """A row of a batched linear layer is the same in a product of any number of rows (padded up to
    :func:`min_rows`), so the decoder computes each distinct prompt once (:func:`_prefill`) with the same
    bits as the full batch; and it is a real product (a wrong weight moves it)."""
    from sandbox.models import replicas as rp
    from sandbox.models.transformer import TransformerConfig

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    for inner, cols in [(8, 1), (16, 3), (16, 16), (64, 20), (64, 192), (256, 64)]:
        w, b = torch.randn(3, cols, inner, generator=gen), torch.randn(3, cols, generator=gen)
        x = torch.randn(3, 600, inner, generator=gen)
        big = rp.linear(x, w, b)
        for lo, hi in [(0, 1), (5, 7), (9, 12), (100, 104), (0, 33), (1, 600)]:
            assert torch.equal(rp.linear(x[:, lo:hi].contiguous(), w, b), big[:, lo:hi]), (inner, cols, lo, hi)
        torch.testing.assert_close(big[1], x[1] @ w[1].T + b[1], rtol=1e-5, atol=1e-5)
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, vocab_size=20, max_seq_len=24)
    P = _replica_models(cfg, 3, torch.float32)
    prompts = torch.randint(2, 20, (3, 4, 6), generator=gen)
    ctx = prompts[:, [0, 1, 0, 2, 2, 3, 0]]  # duplicated rows, as a group or a repeated evaluation prompt
    shared, shared_cache = rp._prefill(cfg, P, ctx, None)
    plain, plain_cache = rp.forward(cfg, P, ctx)
    assert torch.equal(shared, plain)
    for (k1, v1), (k2, v2) in zip(shared_cache, plain_cache):
        assert torch.equal(k1, k2) and torch.equal(v1, v2)


def test_evaluation_in_forked_processes_is_the_same_to_the_bit():
    """``task.eval_processes``: the replicas evaluated in chunks, all but the last in forked children
    (:func:`sandbox.base.processes.forked_map`), give every replica's numbers of the in-process evaluation;
    and the children really evaluate their chunks (a replica with other weights gets other numbers)."""
    from sandbox.tasks import make_task

    torch.set_num_threads(1)
    raw = scenario(5)
    raw["task"]["eval_size"] = 12
    raw["task"]["eval_samples"] = 2
    scn = validate_scenario(raw)
    one = make_task(scn.task.model_copy(update={"replicas": 1}))
    gen = torch.Generator().manual_seed(1)  # the warm-started base model, moved differently per replica
    params = {
        k: v.expand(5, *v.shape[1:]) + 0.05 * torch.randn(5, *v.shape[1:], generator=gen)
        for k, v in one.init_params(torch.Generator().manual_seed(0)).items()
    }
    here = make_task(scn.task).evaluate(params)
    assert len({tuple(float(x) for x in v) for v in zip(*here.values())}) > 1  # the replicas' numbers differ
    for processes in (2, 3, 5, 8):
        split = make_task(scn.task.model_copy(update={"eval_processes": processes})).evaluate(params)
        assert here.keys() == split.keys()
        for k, v in here.items():
            assert v.shape == (5,) and torch.equal(split[k], v), (processes, k)
    # a wrong chunk is seen: replica 1's weights in place of replica 0's move replica 0's numbers
    swapped = {k: v[[1, 1, 2, 3, 4]] for k, v in params.items()}
    moved = make_task(scn.task.model_copy(update={"eval_processes": 2})).evaluate(swapped)
    assert any(not torch.equal(moved[k][0], here[k][0]) for k in here)
    assert all(torch.equal(moved[k][0], here[k][1]) for k in here)


def test_eval_processes_need_the_cpu_at_load_time():
    raw = scenario(2)
    raw["task"]["eval_processes"] = 2
    raw["task"]["device"] = "cuda"
    with pytest.raises(ScenarioError, match="task.eval_processes"):
        validate_scenario(raw)


def test_forked_map_returns_raises_and_recovers():
    """:func:`sandbox.base.processes.forked_map`: results in order (the children really run: each reports its
    own pid), a child's exception raised here, a child that dies without a result re-run here."""
    import os

    from sandbox.base.processes import forked_map

    me = os.getpid()
    out = forked_map([lambda i=i: (i, os.getpid()) for i in range(3)])
    assert [i for i, _ in out] == [0, 1, 2]
    assert out[2][1] == me and out[0][1] != me and out[1][1] != me and out[0][1] != out[1][1]

    def boom():
        raise ValueError("from the child")

    with pytest.raises(ValueError, match="from the child"):
        forked_map([boom, lambda: 1])

    def dies():
        if os.getpid() != me:
            os._exit(3)  # killed before sending anything
        return "here"

    assert forked_map([dies, lambda: 2]) == ["here", 2]


@pytest.mark.parametrize("eval_batch", [512, 5], ids=["one-piece", "pieces"])
def test_evaluation_prefills_each_held_out_prompt_once_with_the_same_bits(monkeypatch, eval_batch):
    """The greedy and the sampled pass of an evaluation start from one stored prefill of the held-out
    prompts (``LMTask._eval_decoder``): every number equals the evaluation that prefills each pass's
    rows itself (``EVAL_PREFILL_BYTES = 0``), also with pieces of 5 prompts (a sampled piece then splits
    a prompt's repeats); and each held-out prompt is prefilled once instead of 1 + eval_samples times."""
    from sandbox.models import replicas as rp
    from sandbox.tasks import make_task
    from sandbox.tasks.lm import task as lm_task

    torch.set_num_threads(1)
    raw = scenario(3)
    raw["task"].update(eval_size=12, eval_samples=2, eval_batch=eval_batch)
    scn = validate_scenario(raw)
    task = make_task(scn.task)
    gen = torch.Generator().manual_seed(2)
    params = {
        k: v + 0.05 * torch.randn(v.shape, generator=gen)
        for k, v in task.init_params(torch.Generator().manual_seed(0)).items()
    }
    stored = task.evaluate(params)
    monkeypatch.setattr(lm_task, "EVAL_PREFILL_BYTES", 0)
    own = task.evaluate(params)
    assert stored.keys() == own.keys() and "eval/expected_reward" in own
    for k, v in own.items():
        assert torch.equal(stored[k], v), k
    real, calls = rp._prefill, []

    def counted(cfg, p, ctx, flips):
        calls.append(ctx.shape[1])
        return real(cfg, p, ctx, flips)

    monkeypatch.setattr(rp, "_prefill", counted)
    task.evaluate(params)
    pieces = -(-12 // eval_batch)
    assert len(calls) == pieces + -(-24 // eval_batch)  # each pass prefills its own rows
    calls.clear()
    monkeypatch.setattr(lm_task, "EVAL_PREFILL_BYTES", 64 << 20)
    again = task.evaluate(params)
    assert all(torch.equal(again[k], v) for k, v in own.items())
    assert len(calls) == pieces and sum(calls) == 12  # every held-out prompt once, in pieces of eval_batch


@pytest.mark.parametrize(
    "temperature, shared", [(1.0, False), (1.0, True), (0.0, False)], ids=["own", "shared", "greedy"]
)
def test_decoding_without_the_ended_rows_changes_no_number(monkeypatch, temperature, shared):
    """:func:`sandbox.models.replicas.decode` with ``compact=True`` (ended rows leave the forward) gives the
    tokens, log-probs, lengths and ends of the full batch to the bit, and leaves the generators in the same
    state; and the batch really shrinks."""
    from sandbox.models import replicas as rp
    from sandbox.models.transformer import TransformerConfig
    from sandbox.tasks.lm.task import _token_draw

    torch.set_num_threads(1)
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, vocab_size=12, max_seq_len=24)
    P = _replica_models(cfg, 3, torch.float32)
    P["tok.weight"][:, 3] *= 8  # token 3 (the end token here) likely: rows end at different steps
    ctx = torch.randint(4, 12, (3, 9, 5), generator=torch.Generator().manual_seed(4))
    real, widths = rp.forward, []

    def counted(cfg, p, tokens, past=None, flips=None):
        widths.append(tokens.shape[1])
        return real(cfg, p, tokens, past, flips)

    monkeypatch.setattr(rp, "forward", counted)
    monkeypatch.setattr(rp, "COMPACT_ROWS", 1)  # this small batch compacts too (an evaluation's does by default)
    outs, states = {}, {}
    for compact in (False, True):
        gens = (
            [torch.Generator().manual_seed(7)] * 3 if shared else [torch.Generator().manual_seed(s) for s in range(3)]
        )
        widths.clear()
        outs[compact] = rp.decode(cfg, P, ctx, 12, 3, _token_draw(temperature, gens, shared), compact=compact)
        states[compact] = [g.get_state() for g in gens]
        if compact:
            assert min(widths) < 9  # ended rows left the batch
        else:
            assert set(widths) <= {9}
    for a, b in zip(outs[False], outs[True]):
        for x, y in zip(a, b):
            assert (x is None and y is None) or torch.equal(x, y)
    assert all(torch.equal(a, b) for a, b in zip(states[False], states[True]))
    lengths = torch.stack([o[3] for o in outs[True]])
    assert lengths.min() < lengths.max()  # rows did end at different steps
