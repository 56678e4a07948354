"""Small-LM policy: tokenizer/problems by hand, KV-cache sampling, on-policy log-probs, EOS masking,
partial continuation, the warm-start cache, and a few simulator steps end to end (tiny model)."""

from __future__ import annotations

import math

import pytest
import torch

from sandbox.models import Transformer, TransformerConfig, sample, sequence_logprobs
from sandbox.tasks.lm import (
    AdditionConfig,
    CharTokenizer,
    CountdownConfig,
    LMTask,
    LMTaskConfig,
    SequenceConfig,
    eval_expression,
    make_prompt_sets,
)
from sandbox.tasks.lm import warmstart as ws
from sandbox.tasks.rollouts import Rollouts

TINY = dict(d_model=16, n_layers=1, n_heads=2)


@pytest.fixture(autouse=True)
def _cache_and_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def tiny_cfg(**kw) -> LMTaskConfig:
    base = dict(
        problem=dict(kind="sort", min_len=2, max_len=4),
        model=TINY,
        warmstart=dict(max_steps=15, target_accuracy=None, eval_every=5, dev_size=16),
        train_size=64,
        eval_size=16,
        eval_samples=1,
    )
    base.update(kw)
    return LMTaskConfig.model_validate(base)


def random_task(**kw) -> tuple[LMTask, dict]:
    task = LMTask(tiny_cfg(warmstart=dict(enabled=False), **kw))
    return task, task.init_params(torch.Generator().manual_seed(0))


# -- problems ------------------------------------------------------------------------------------


def test_tokenizer_roundtrip_and_eos():
    tok = CharTokenizer()
    ids = tok.encode(" 12+3=")
    assert tok.decode(ids) == " 12+3="
    assert tok.decode(tok.encode("42") + [tok.eos_id] + tok.encode("99")) == "42"
    with pytest.raises(ValueError):
        tok.encode("a")


@pytest.mark.component("task", "lm")
def test_rewards_by_hand():
    add = AdditionConfig(digits=3)
    assert add.score("  37+512=", "945") == 1.0  # 549 reversed
    assert add.score("  37+512=", "549") == 0.0
    assert AdditionConfig(digits=3, reverse_answer=False).score("  37+512=", "549") == 1.0
    cd = CountdownConfig(numbers=3)
    assert eval_expression("3*7+9") == 30 and eval_expression("9-3*2") == 3 and eval_expression("3+") is None
    assert cd.score(" 3,7,9>30:", "9+7*3") == 1.0
    assert cd.score(" 3,7,9>30:", "3*7+9+1") == 0.0  # uses a number not given
    assert cd.score(" 3,7,9>30:", "3*7") == 0.0  # misses a number
    assert CountdownConfig(partial_credit=0.1).score(" 3,7,9>30:", "3+7+9") == 0.1
    srt = SequenceConfig(kind="sort")
    assert srt.score("  4912>", "1249") == 1.0 and srt.score("  4912>", "124") == 0.0
    assert SequenceConfig(kind="reverse").score("  4912>", "2194") == 1.0


@pytest.mark.parametrize(
    "problem", [AdditionConfig(), CountdownConfig(), SequenceConfig(kind="sort"), SequenceConfig(kind="reverse")]
)
def test_prompt_sets_deterministic_disjoint_and_solvable(problem):
    a_train, a_eval = make_prompt_sets(problem, 100, 30, seed=3)
    b_train, b_eval = make_prompt_sets(problem, 100, 30, seed=3)
    assert a_train == b_train and a_eval == b_eval
    assert len(a_train) == 100 and len(a_eval) == 30
    assert not {p for p, _ in a_train} & {p for p, _ in a_eval}
    assert make_prompt_sets(problem, 100, 30, seed=4)[0] != a_train
    for p, ans in a_train + a_eval:
        assert len(p) == problem.prompt_len and len(ans) <= problem.max_answer_len
        assert problem.score(p, ans) == 1.0  # the reference answer is correct


# -- model and sampling ----------------------------------------------------------------------------


def test_kv_cache_sampling_equals_no_cache():
    cfg = TransformerConfig(d_model=32, n_layers=2, n_heads=4, vocab_size=20, max_seq_len=24)
    m = Transformer(cfg)
    m.reset_parameters(torch.Generator().manual_seed(1))
    ctx = torch.randint(2, 20, (6, 8), generator=torch.Generator().manual_seed(2))
    a = sample(m, ctx, 12, eos_id=1, temperature=1.3, gen=torch.Generator().manual_seed(5), use_cache=True)
    b = sample(m, ctx, 12, eos_id=1, temperature=1.3, gen=torch.Generator().manual_seed(5), use_cache=False)
    assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2]) and torch.equal(a[3], b[3])
    assert torch.allclose(a[1], b[1], atol=1e-5)
    # the recorded log-probs are the teacher-forced ones under the same temperature
    lp = sequence_logprobs(m, ctx, a[0], temperature=1.3)
    mask = torch.arange(a[0].shape[1]) < a[2].unsqueeze(1)
    assert torch.allclose(lp * mask, a[1], atol=1e-5)


def test_generate_eos_masking_and_onpolicy_logprobs():
    task, params = random_task(temperature=0.7)
    gen = torch.Generator().manual_seed(0)
    groups = [task.generate(params, task.new_group(8, gen), gen, version=3) for _ in range(4)]
    ro = Rollouts.cat(groups)
    assert bool(ro.ended.all())
    m = ro.mask.bool()
    assert (ro.token_versions[m] == 3).all() and (ro.token_versions[~m] == -1).all()
    assert (ro.tokens[~m] == 0).all() and (ro.behaviour_logp[~m] == 0).all()
    assert (ro.lengths >= 1).all() and (ro.lengths <= task.max_new).all()
    # an EOS ends a response exactly at its last valid token; a cut response is at the budget
    eos = task.hit_eos(ro)
    assert (ro.lengths[~eos] == task.max_new).all()
    for n in range(ro.num_responses):
        L = int(ro.lengths[0, n])
        assert (ro.tokens[0, n, : L - 1] != task.tokenizer.eos_id).all()
    lp = task.logprobs(params, ro)
    assert lp.shape == ro.tokens.shape
    assert torch.allclose(lp, ro.behaviour_logp, atol=1e-5), (lp - ro.behaviour_logp).abs().max()
    leaf = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    task.logprobs(leaf, ro).sum().backward()  # differentiable w.r.t. the weights
    assert all(v.grad is not None for v in leaf.values())


@pytest.mark.component("task", "lm")
def test_rewards_only_for_eos_terminated_correct_answers():
    task, _ = random_task()
    g = task.new_group(3, torch.Generator().manual_seed(1))
    prompt = task.tokenizer.decode(g.prompts[0, 0])
    answer = task.problem.answer(prompt.strip()[:-1])
    tok = task.tokenizer
    rows = [tok.encode(answer) + [tok.eos_id], tok.encode(answer), tok.encode("9" * len(answer)) + [tok.eos_id]]
    W = max(len(r) for r in rows)
    t = torch.zeros(1, 3, W, dtype=torch.long)
    for i, r in enumerate(rows):
        t[0, i, : len(r)] = torch.tensor(r)
    lengths = torch.tensor([[len(r) for r in rows]])
    ro = g.extend(t, torch.zeros(1, 3, W), lengths, torch.ones(1, 3, dtype=torch.bool), 0)
    r = task.rewards(ro, None)
    expected_third = 1.0 if answer == "9" * len(answer) else 0.0
    assert r.tolist() == [[1.0, 0.0, expected_third]]


def test_partial_continuation_records_versions_per_token():
    task, params = random_task(problem=dict(kind="sort", min_len=4, max_len=6))
    params2 = {k: v + 0.05 * torch.randn_like(v) for k, v in params.items()}
    gen = torch.Generator().manual_seed(4)
    group = task.new_group(8, gen)
    full = task.generate(params, group, gen, version=0)
    cut = full.truncate(2)
    assert not bool(cut.ended.all())
    live = ~cut.ended[0]
    assert (cut.lengths[0, live] == 2).all()
    cont = task.generate(params2, cut, gen, version=1)
    assert bool(cont.ended.all())
    m = cont.mask.bool()
    v = cont.token_versions
    # kept prefix from version 0, continuation from version 1, padding -1
    assert (v[0, :, :2][m[0, :, :2]] == 0).all()
    assert (v[0, live, 2:][m[0, live, 2:]] == 1).all()
    assert (v[~m] == -1).all()
    assert torch.equal(cont.tokens[..., :2] * m[..., :2], cut.tokens[..., :2] * m[..., :2])
    # behaviour log-probs of the continuation are those of params2 given prompt + prefix
    lp2 = task.logprobs(params2, cont)
    tail = m.clone()
    tail[..., :2] = False
    assert torch.allclose(lp2[tail], cont.behaviour_logp[tail], atol=1e-5)
    assert cont.oldest_version().min() == 0 and cont.newest_version().max() == 1


def test_mixed_version_continuation_at_each_responses_own_position():
    """Responses cut at their own positions (an engine's sequences at a weight sync) continue under the new
    weights: every token before its cut keeps version 0 and μ of the old weights, every token after has
    version 1 and μ of the new weights given prompt + its own prefix (teacher-forced, float tolerance of
    cached vs uncached attention), and the kept prefixes are unchanged token for token."""
    task, params = random_task(problem=dict(kind="sort", min_len=4, max_len=6))
    params2 = {k: v + 0.05 * torch.randn_like(v, generator=torch.Generator().manual_seed(1)) for k, v in params.items()}
    gen = torch.Generator().manual_seed(5)  # a draw whose first five responses outlast their cuts
    full = task.generate(params, task.new_group(6, gen), gen, version=0)
    cuts = torch.tensor([[0, 1, 2, 3, 1, 100]])
    cut = full.truncate_each(cuts)
    assert torch.equal(cut.lengths, torch.minimum(full.lengths, cuts))
    assert torch.equal(cut.ended, full.ended & (full.lengths <= cuts))
    assert not bool(cut.ended[0, :5].any()) and bool(cut.ended[0, 5])  # the last one had ended before its cut
    cont = task.generate(params2, cut, gen, version=1)
    assert bool(cont.ended.all())
    m = cont.mask.bool()
    pos = torch.arange(cont.width).view(1, 1, -1)
    kept = cut.lengths.unsqueeze(-1)
    old, new = m & (pos < kept), m & (pos >= kept)
    assert bool(new[0, :5].any(-1).all())  # every cut response got new tokens
    assert torch.equal(cont.token_versions[old], torch.zeros(int(old.sum()), dtype=torch.long))
    assert torch.equal(cont.token_versions[new], torch.ones(int(new.sum()), dtype=torch.long))
    assert (cont.token_versions[~m] == -1).all() and (cont.behaviour_logp[~m] == 0).all()
    assert torch.equal(cont.tokens[..., : cut.width][old[..., : cut.width]], cut.tokens[old[..., : cut.width]])
    lp1, lp2 = task.logprobs(params, cont), task.logprobs(params2, cont)
    assert torch.allclose(cont.behaviour_logp[old], lp1[old], atol=1e-5)
    assert torch.allclose(cont.behaviour_logp[new], lp2[new], atol=1e-5)
    assert not torch.allclose(lp1[new], lp2[new], atol=1e-3)  # the two weight versions are told apart
    assert torch.equal(cont.oldest_version()[0, :5], torch.tensor([1, 0, 0, 0, 0]))  # response 0 cut at 0: all new


def test_sequence_logprob_matches_batched_logprobs():
    task, params = random_task()
    gen = torch.Generator().manual_seed(0)
    ro = task.generate(params, task.new_group(4, gen), gen, 0)
    single = {k: v[0] for k, v in params.items()}
    tokens, mask, prompts = task.sequence_inputs(ro)
    per = torch.stack([task.sequence_logprob(single, (tokens[0, i], mask[0, i], prompts[0, i])) for i in range(4)])
    assert torch.allclose(per, task.logprobs(params, ro)[0].sum(-1), atol=1e-5)
    from sandbox.algorithms import per_sequence_grad_sq_norms

    norms = per_sequence_grad_sq_norms(task.sequence_logprob, params, task.sequence_inputs(ro), replica_dims=1)
    assert norms.shape == (1, 4) and bool((norms > 0).all())


def test_evaluate_and_replicas_validation():
    task, params = random_task()
    out = task.evaluate(params)
    assert set(out) >= {"eval/accuracy", "eval/length", "eval/expected_reward"}
    assert all(v.shape == (1,) and 0 <= float(v) <= task.max_new for v in out.values())
    assert out == task.evaluate(params)  # deterministic (fixed evaluation draws)
    with pytest.raises(ValueError, match="task.replicas"):  # the hf backend: one replica (tests/lm/test_lm_replicas.py)
        LMTaskConfig(replicas=2, model={"backend": "hf", "config": {"model_type": "llama"}})


# -- warm start ------------------------------------------------------------------------------------


def test_warmstart_is_cached_and_deterministic(tmp_path):
    before = ws.TRAININGS
    task = LMTask(tiny_cfg())
    p1 = task.init_params(torch.Generator().manual_seed(0))
    assert ws.TRAININGS == before + 1
    path, meta = ws.cache_paths(task)
    assert path.exists() and meta.exists() and path.parent == tmp_path / "cache"
    mtime = path.stat().st_mtime_ns
    p2 = LMTask(tiny_cfg()).init_params(torch.Generator().manual_seed(99))  # cache hit: no retraining
    assert ws.TRAININGS == before + 1 and path.stat().st_mtime_ns == mtime
    assert all(torch.equal(p1[k], p2[k]) for k in p1)
    assert set(task.base_meta) >= {"heldout_accuracy", "train_seconds", "steps"}
    # same config retrained from scratch gives the same weights (deterministic)
    state, _ = ws.train_base_model(task)
    assert all(torch.equal(state[k], p1[k][0]) for k in p1)
    # a different warm-start config is a different cache entry
    other = LMTask(tiny_cfg(warmstart=dict(max_steps=5, target_accuracy=None)))
    assert ws.cache_key(other) != ws.cache_key(task)


# -- end to end ------------------------------------------------------------------------------------


def _scenario(**over):
    from sandbox.scenario.model import Scenario

    d = dict(
        task=tiny_cfg().model_dump(),
        system=dict(num_workers=2, generation_time=dict(kind="cost_model", prefill=0.05, per_token=0.01)),
        algorithm=dict(group_size=4, groups_per_step=2, optimizer=dict(name="adam", lr=1e-3)),
        run=dict(steps=4, eval_every=2, figures=False),
    )
    for k, v in over.items():
        d[k].update(v)
    return Scenario.model_validate(d)


def test_simulator_end_to_end_sync_and_fixed_lag():
    from sandbox.run.runner import run_scenario

    r = run_scenario(_scenario())
    assert r.status == "completed" and len(r.metrics) == 4
    assert (r.metrics["is/ess_ratio"] > 1 - 1e-5).all()  # synchronous: on-policy ratios are 1
    assert r.metrics["eval/accuracy"].notna().any()
    r2 = run_scenario(
        _scenario(
            system=dict(staleness=dict(kind="fixed_lag", k=2)),
            algorithm=dict(correction=dict(name="tis", level="sequence", C=8.0)),
        )
    )
    assert r2.status == "completed" and r2.metrics["staleness/mean"].iloc[-1] == 2


def test_simulator_partial_rollouts_vcpo_gac():
    from sandbox.run.runner import run_scenario

    scn = _scenario(
        system=dict(
            num_workers=3,
            generation_time=dict(kind="cost_model", prefill=0.01, per_token=0.2),
            train_time=dict(kind="constant", value=0.05),
            staleness=dict(kind="max_lag", k_max=3),
            partial_rollouts=True,
        ),
        algorithm=dict(
            objective=dict(name="grpo", baseline="opob"),
            correction=dict(name="tis", level="sequence"),
            stabilizers=[dict(name="vcpo_lr"), dict(name="gac")],
        ),
        run=dict(steps=6),
    )
    r = run_scenario(scn)
    assert r.status == "completed"
    assert (r.jobs.segments > 1).any()  # some generations continued under a newer version
    assert r.metrics["staleness/token_mean"].notna().all()
    assert "lr/scale" in r.metrics and math.isfinite(r.metrics["grad/norm"].iloc[-1])


# -- shipped scenarios and the mission report ----------------------------------------------------------


def _engine_scenario(mixed: bool):
    return _scenario(
        system=dict(
            num_workers=3,
            generation_time=dict(
                kind="continuous_batching",
                step_base=0.05,
                step_per_sequence=0.01,
                workers_per_engine=3,
                sync="partial",
                sync_time=0.05,
                mixed_versions=mixed,
            ),
            train_time=dict(kind="constant", value=0.1),
            staleness=dict(kind="max_lag", k_max=2),
        ),
        algorithm=dict(correction=dict(name="tis", level="token")),
    )


def test_engine_mixed_versions_resume_in_flight_sequences_under_new_weights(monkeypatch):
    """``generation_time.mixed_versions``: at each sync the engine's groups are cut where each sequence stands
    and continued with the new weights. Every resumed payload's tokens after a cut carry the sync's version
    and μ of that version's weights (teacher-forced, float tolerance of cached vs uncached attention); the
    run's token-weighted staleness then lies strictly between its head and tail staleness, while without the
    opt-in every token keeps the admitted version (token staleness = head staleness at every step)."""
    from sandbox.run.runner import run_scenario
    from sandbox.system.cluster import Cluster

    seen = []
    original = Cluster._resume

    def spy(self, job, version, weights, positions):
        out = original(self, job, version, weights, positions)
        seen.append((job.payload, version, weights, list(positions)))
        return out

    monkeypatch.setattr(Cluster, "_resume", spy)
    r = run_scenario(_engine_scenario(True))
    assert r.status == "completed" and len(seen) > 0
    task = LMTask(tiny_cfg())
    cut_mid = 0
    for payload, version, weights, positions in seen:
        m = payload.mask.bool()
        after = m & (torch.arange(payload.width).view(1, 1, -1) >= torch.tensor(positions).view(1, -1, 1))
        assert (payload.token_versions[after] == version).all()
        lp = task.logprobs(weights, payload)
        assert torch.allclose(payload.behaviour_logp[after], lp[after], atol=1e-5)
        cut_mid += sum(0 < p < int(n) for p, n in zip(positions, payload.lengths[0]))
    assert cut_mid > 0  # some sequences really were cut in the middle: mixed-version sequences
    met = r.metrics
    mixed = (met["staleness/token_mean"] < met["staleness/mean"] - 1e-9) & (
        met["staleness/token_mean"] > met["staleness/tail_mean"] + 1e-9
    )
    assert bool(mixed.any())
    monkeypatch.setattr(Cluster, "_resume", original)
    off = run_scenario(_engine_scenario(False)).metrics
    assert (off["staleness/token_mean"] == off["staleness/mean"]).all()
    again = run_scenario(_engine_scenario(True)).metrics  # deterministic: the same numbers bitwise
    assert met.equals(again)


def test_engine_mixed_versions_refused_where_it_cannot_be_honoured():
    from pydantic import ValidationError

    from sandbox.scenario.model import Scenario

    d = _engine_scenario(True).model_dump()
    d["task"]["replicas"] = 2
    with pytest.raises(ValidationError, match="mixed_versions: needs task.replicas = 1"):
        Scenario.model_validate(d)
    d = _engine_scenario(True).model_dump()
    d["task"] = {"name": "bitstring"}
    with pytest.raises(ValidationError, match="mixed_versions: task 'bitstring' cannot continue"):
        Scenario.model_validate(d)


def test_shipped_lm_and_gym_scenarios_validate_with_variants():
    from pathlib import Path

    from sandbox.scenario.api import load_scenario, variant_scenarios

    root = Path(__file__).resolve().parents[2] / "scenarios"
    files = sorted(root.glob("lm_*.toml")) + sorted(root.glob("gym_*.toml"))
    assert len(files) >= 3
    for f in files:
        scn, raw = load_scenario(f)
        assert variant_scenarios(scn, raw)
    scn, raw = load_scenario(root / "lm_mission.toml")
    v = variant_scenarios(scn, raw)
    assert {"sync", "naive", "tis", "m2po", "vcpo", "gac"} <= set(v)
    lags = {k: (s.system.staleness.kind, getattr(s.system.staleness, "k", None)) for k, s in v.items()}
    assert lags["sync"][0] == "sync" and len({lags[k] for k in v if k != "sync"}) == 1  # same lag for all methods
    assert len({s.algorithm.optimizer.lr for s in v.values()}) == 1  # same learning rate


def test_mission_summary_and_figure(tmp_path):
    import numpy as np
    import pandas as pd

    from sandbox.sweep.mission import markdown, mission_figure, summarize

    def fake(level):
        steps = np.arange(20)
        return {
            "metrics": pd.DataFrame(
                {
                    "step": steps,
                    "reward/mean": level + 0 * steps,
                    "eval/expected_reward": np.where(steps % 5 == 0, level, np.nan),
                    "eval/accuracy": np.where(steps % 5 == 0, level, np.nan),
                    "is/ess_ratio": 0.5 + 0 * steps,
                    "grad/cos_prev": 0.1 + 0 * steps,
                    "grad/norm": 1.0 + 0 * steps,
                    "lr": 1e-3 + 0 * steps,
                }
            ),
            "summary": {"status": "completed"},
            "wall_s": 1.0,
        }

    results = {"sync": [fake(0.3), fake(0.5)], "naive": [fake(0.1), fake(0.1)]}
    table = summarize(results, [0, 1])
    assert table["sync"]["heldout_reward"]["mean"] == pytest.approx(0.4)
    assert table["sync"]["heldout_reward"]["std"] == pytest.approx(0.1)
    assert "| naive |" in markdown(table, "t")
    mission_figure(results, tmp_path / "m.png", "t")
    assert (tmp_path / "m.png").stat().st_size > 1000
