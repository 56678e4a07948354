"""The LM task with a Hugging Face ``transformers`` policy (``task.model.backend = "hf"``): validation
errors, deterministic init, KV-cache sampling, on-policy log-probs, OPOB per-sequence gradients,
checkpoints, the warm-start cache key, the run budget, and sync vs lag-16 runs through the runner."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from sandbox.base.errors import ScenarioError  # noqa: E402
from sandbox.models import sample, sequence_logprobs  # noqa: E402
from sandbox.scenario.api import load_scenario, validate_scenario  # noqa: E402
from sandbox.tasks.lm import LMTask, LMTaskConfig  # noqa: E402
from sandbox.tasks.lm import warmstart as ws  # noqa: E402
from sandbox.tasks.rollouts import Rollouts  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LLAMA = dict(model_type="llama", hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
GPT2 = dict(model_type="gpt2", n_embd=16, n_layer=1, n_head=2)
QWEN2 = dict(
    model_type="qwen2",
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=32,
)
ARCHS = {"llama": LLAMA, "gpt2": GPT2, "qwen2": QWEN2}


@pytest.fixture(autouse=True)
def _cache_and_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def task_cfg(config=LLAMA, **kw) -> LMTaskConfig:
    base = dict(
        problem=dict(kind="sort", min_len=2, max_len=4),
        model=dict(backend="hf", config=config),
        warmstart=dict(enabled=False),
        train_size=64,
        eval_size=16,
        eval_samples=1,
    )
    base.update(kw)
    return LMTaskConfig.model_validate(base)


def random_task(config=LLAMA, **kw) -> tuple[LMTask, dict]:
    task = LMTask(task_cfg(config, **kw))
    return task, task.init_params(torch.Generator().manual_seed(0))


def errors_of(model: dict) -> str:
    with pytest.raises(ScenarioError) as exc:
        validate_scenario({"task": {"name": "lm", "model": model}})
    return str(exc.value)


# -- configuration ---------------------------------------------------------------------------------


def test_builtin_stays_the_default_and_keeps_its_cache_key():
    cfg = LMTaskConfig.model_validate({"model": {"d_model": 64, "n_layers": 2, "n_heads": 4}})
    assert cfg.model.backend == "builtin" and type(cfg.model).__name__ == "TransformerConfig"
    assert LMTaskConfig.model_validate({"model": {"backend": "builtin", "d_model": 32}}).model.d_model == 32
    # the key of the default task's base model as computed before backends existed: caches stay valid
    assert ws.cache_key(LMTask(LMTaskConfig())) == "56d958cc9d5912dff8f8"


def test_hf_config_errors_name_the_field_and_the_reason():
    msg = errors_of({"backend": "hf", "config": {"model_type": "no_such_arch"}})
    assert "task.model.config" in msg and "unknown model_type 'no_such_arch'" in msg
    msg = errors_of({"backend": "hf", "config": {"hidden_size": 16}})
    assert "task.model.config" in msg and "model_type" in msg
    msg = errors_of({"backend": "hf", "config": {**LLAMA, "num_attention_heads": 3}})
    assert "task.model.config" in msg and "not a multiple of the number of attention heads" in msg
    msg = errors_of({"backend": "hf", "config": {**GPT2, "n_head": 5}})  # rejected when the module is built
    assert "task.model.config" in msg and "divisible" in msg
    msg = errors_of({"backend": "hf", "config": {**LLAMA, "hidden_sise": 16}})
    assert "task.model.config" in msg and "'hidden_sise' is no field of transformers' LlamaConfig" in msg
    msg = errors_of({"backend": "hf", "config": {"model_type": "t5"}})
    assert "task.model.config" in msg and "no causal-LM class" in msg
    msg = errors_of({"backend": "hf"})
    assert "task.model:" in msg and "exactly one of config" in msg
    msg = errors_of({"backend": "torch"})
    assert "task.model:" in msg and "unknown backend" in msg
    msg = errors_of({"d_model": "wide"})
    assert "task.model.d_model:" in msg  # the builtin's errors keep their dotted path (no union tag)
    with pytest.raises(ValueError, match=r"task\.model\.config: vocab_size=8 is smaller than the tokenizer's 20"):
        LMTask(task_cfg({**LLAMA, "vocab_size": 8}))
    with pytest.raises(ValueError, match=r"task\.model\.config: max_position_embeddings=4 is below"):
        LMTask(task_cfg({**LLAMA, "max_position_embeddings": 4}))


def test_missing_checkpoint_errors(tmp_path):
    msg = errors_of({"backend": "hf", "path": str(tmp_path / "absent")})
    assert "task.model.path" in msg and "does not exist" in msg
    msg = errors_of({"backend": "hf", "path": str(tmp_path)})
    assert "task.model.path" in msg and "no config.json" in msg
    from transformers import AutoConfig

    AutoConfig.for_model(**LLAMA).save_pretrained(tmp_path / "no_weights")  # a config but no weight file
    with pytest.raises(ValueError, match=r"task\.model\.path: cannot load the checkpoint"):
        LMTask(task_cfg(model=dict(backend="hf", path=str(tmp_path / "no_weights"))))


def test_missing_transformers_names_the_backend_and_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    msg = errors_of({"backend": "hf", "config": LLAMA})
    assert "task.model.backend" in msg and 'pip install -c constraints-cpu.txt -e ".[hf]"' in msg
    assert msg.count("\n  - ") == 1  # one error, not one per field
    validate_scenario({"task": {"name": "lm", "model": {"d_model": 16, "n_heads": 2}}})  # builtin needs no transformers


def test_task_fills_sizes_and_special_tokens():
    for config in ARCHS.values():
        task = LMTask(task_cfg(config))
        c = task.model_cfg
        assert c.vocab_size == task.tokenizer.vocab_size == task.model.get_input_embeddings().weight.shape[0]
        assert c.max_position_embeddings == task.P + task.max_new
        assert c.eos_token_id == task.tokenizer.eos_id and c.bos_token_id is None and c.pad_token_id is None
        assert task.model.config._attn_implementation == "eager"


def test_init_is_deterministic_and_independent_of_the_global_rng():
    task = LMTask(task_cfg())
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = task.init_params(torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is left as it was
    torch.manual_seed(456)
    b = LMTask(task_cfg()).init_params(torch.Generator().manual_seed(7))
    c = task.init_params(torch.Generator().manual_seed(8))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    assert all(v.shape[0] == 1 and v.dtype == torch.float32 and v.device.type == "cpu" for v in a.values())
    names = [n for n, _ in task.model.named_parameters()]
    assert list(a) == names and "model.embed_tokens.weight" in a


# -- sampling and scoring --------------------------------------------------------------------------


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_hf_kv_cache_sampling_equals_full_recompute(arch):
    """Cached decoding (prefill + one token per step through the model's DynamicCache) and the
    uncached full recompute draw the same tokens from the same generator; log-probs agree to 1e-5
    (float32: the two paths sum the attention in a different order, about 1e-7 per logit)."""
    task, params = random_task(ARCHS[arch])
    fwd = task.forward_fn(task._single(params, detach=True))
    ctx = task.train_ids[:8]
    a = sample(fwd, ctx, task.max_new, task.tokenizer.eos_id, 1.3, torch.Generator().manual_seed(5), use_cache=True)
    b = sample(fwd, ctx, task.max_new, task.tokenizer.eos_id, 1.3, torch.Generator().manual_seed(5), use_cache=False)
    assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2]) and torch.equal(a[3], b[3])
    assert a[0].shape[1] >= 2  # more than the prefill: the cache was used
    assert torch.allclose(a[1], b[1], atol=1e-5), (a[1] - b[1]).abs().max()
    # recorded behaviour log-probs are the teacher-forced ones at the same temperature
    lp = sequence_logprobs(
        task.forward_fn(task._single(params, detach=True), use_cache=False), ctx, a[0], temperature=1.3
    )
    mask = torch.arange(a[0].shape[1]) < a[2].unsqueeze(1)
    assert torch.allclose(lp * mask, a[1], atol=1e-5)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_hf_forward_uses_the_supported_cache_keyword(arch):
    """Cached sampling and uncached scoring pass the KV cache under transformers 5.24's ``cache``
    keyword: no deprecation warning about ``past_key_values`` (removed in transformers 5.40), and the
    returned cache is the one the next step reads (it grows by one position per decoded token)."""
    import warnings

    task, params = random_task(ARCHS[arch])
    fwd = task.forward_fn(task._single(params, detach=True))
    ctx = task.train_ids[:4]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logits, cache = fwd(ctx, None)
        _, cache2 = fwd(logits[:, -1:].argmax(-1), cache)
        task.logprobs(
            params,
            task.generate(
                params, task.new_group(4, torch.Generator().manual_seed(0)), torch.Generator().manual_seed(0), version=0
            ),
        )
    assert not [w for w in caught if "past_key_values" in str(w.message)], [str(w.message) for w in caught]
    assert cache2 is not None and cache2.get_seq_length() == ctx.shape[1] + 1


def test_hf_generate_and_partial_continuation_are_on_policy():
    task, params = random_task(temperature=0.7)
    params2 = {
        k: v + 0.05 * torch.randn(v.shape, generator=torch.Generator().manual_seed(1)) for k, v in params.items()
    }
    gen = torch.Generator().manual_seed(4)
    full = task.generate(params, task.new_group(8, gen), gen, version=0)
    assert bool(full.ended.all())
    assert torch.allclose(task.logprobs(params, full), full.behaviour_logp, atol=1e-5)
    cut = full.truncate(1)
    cont = task.generate(params2, cut, gen, version=1)
    m = cont.mask.bool()
    tail = m.clone()
    tail[..., :1] = False
    assert bool(tail.any()) and (cont.token_versions[tail] == 1).all()
    assert torch.allclose(task.logprobs(params2, cont)[tail], cont.behaviour_logp[tail], atol=1e-5)
    leaf = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    task.logprobs(leaf, full).sum().backward()
    assert all(v.grad is not None and bool(v.grad.abs().sum() > 0) for v in leaf.values())


@pytest.mark.filterwarnings("ignore:There is a performance drop")  # sdpa: torch's per-sample vmap fallback
@pytest.mark.parametrize("arch, attn", [("llama", "eager"), ("gpt2", "eager"), ("llama", "sdpa")])
def test_hf_opob_grad_norms_equal_per_sequence_backward(arch, attn):
    """vmap(grad) per-sequence squared gradient norms (VCPO's OPOB input) equal one backward() per
    sequence; float32 relative 1e-4 (sums of ~10^4 squared entries)."""
    from sandbox.algorithms import per_sequence_grad_sq_norms

    task, params = random_task(model=dict(backend="hf", config=ARCHS[arch], attn_implementation=attn))
    assert task.model.config._attn_implementation == attn
    gen = torch.Generator().manual_seed(0)
    ro = task.generate(params, task.new_group(6, gen), gen, 0)
    norms = per_sequence_grad_sq_norms(task.sequence_logprob, params, task.sequence_inputs(ro), replica_dims=1)
    tokens, mask, prompts = task.sequence_inputs(ro)
    loop = []
    for i in range(6):
        leaf = {k: v[0].clone().requires_grad_(True) for k, v in params.items()}
        task.sequence_logprob(leaf, (tokens[0, i], mask[0, i], prompts[0, i])).backward()
        loop.append(sum(float(v.grad.pow(2).sum()) for v in leaf.values()))
    assert norms.shape == (1, 6) and bool((norms > 0).all())
    assert torch.allclose(norms[0], torch.tensor(loop), rtol=1e-4)


# -- checkpoints, warm start, budget ---------------------------------------------------------------


def test_local_checkpoint_is_loaded_and_cut_to_the_tokenizer_vocabulary(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    big = AutoModelForCausalLM.from_config(AutoConfig.for_model(**LLAMA, vocab_size=40, max_position_embeddings=64))
    big.save_pretrained(tmp_path / "big")
    task = LMTask(task_cfg(model=dict(backend="hf", path=str(tmp_path / "big"))))
    p = task.init_params(torch.Generator().manual_seed(0))
    ref = dict(big.named_parameters())
    assert p["model.embed_tokens.weight"].shape == (1, 20, 16)
    assert torch.equal(p["model.embed_tokens.weight"][0], ref["model.embed_tokens.weight"][:20])
    assert torch.equal(p["lm_head.weight"][0], ref["lm_head.weight"][:20])
    assert torch.equal(p["model.layers.0.mlp.up_proj.weight"][0], ref["model.layers.0.mlp.up_proj.weight"])
    gen = torch.Generator().manual_seed(1)
    ro = task.generate(p, task.new_group(4, gen), gen, 0)
    assert int(ro.tokens.max()) < 20  # only the character vocabulary is ever sampled
    # the checkpoint's identity keys the warm-start cache: other weights, other key
    key = ws.cache_key(task)
    torch.manual_seed(1)
    AutoModelForCausalLM.from_config(
        AutoConfig.for_model(**LLAMA, vocab_size=40, max_position_embeddings=64)
    ).save_pretrained(tmp_path / "big")
    assert ws.cache_key(LMTask(task_cfg(model=dict(backend="hf", path=str(tmp_path / "big"))))) != key

    AutoModelForCausalLM.from_config(AutoConfig.for_model(**LLAMA, vocab_size=10)).save_pretrained(tmp_path / "small")
    with pytest.raises(ValueError, match=r"task\.model\.path: the checkpoint's vocabulary \(10\) is smaller"):
        LMTask(task_cfg(model=dict(backend="hf", path=str(tmp_path / "small"))))


def test_warmstart_cache_key_differs_between_architectures():
    keys = {name: ws.cache_key(LMTask(task_cfg(config))) for name, config in ARCHS.items()}
    keys["llama-wide"] = ws.cache_key(LMTask(task_cfg({**LLAMA, "intermediate_size": 48})))
    keys["llama-sdpa"] = ws.cache_key(
        LMTask(task_cfg(model=dict(backend="hf", config=LLAMA, attn_implementation="sdpa")))
    )
    keys["builtin"] = ws.cache_key(LMTask(task_cfg(model=dict(d_model=16, n_layers=1, n_heads=2))))
    assert len(set(keys.values())) == len(keys), keys
    assert ws.cache_key(LMTask(task_cfg())) == keys["llama"]  # and stable for the same config


def test_hf_warmstart_trains_caches_and_is_deterministic():
    ws_cfg = dict(max_steps=10, target_accuracy=None, eval_every=5, dev_size=16)
    before = ws.TRAININGS
    task = LMTask(task_cfg(warmstart=ws_cfg))
    p1 = task.init_params(torch.Generator().manual_seed(0))
    p2 = LMTask(task_cfg(warmstart=ws_cfg)).init_params(torch.Generator().manual_seed(9))  # cache hit
    assert ws.TRAININGS == before + 1 and ws.cache_paths(task)[0].exists()
    assert all(torch.equal(p1[k], p2[k]) for k in p1)
    state, meta = ws.train_base_model(task)
    assert all(torch.equal(state[k], p1[k][0]) for k in p1)  # retrained: bitwise the same
    init = task.new_module(torch.Generator().manual_seed(0))  # the warm start's own init (warmstart.seed = 0)
    assert not torch.equal(
        dict(init.named_parameters())["model.embed_tokens.weight"], p1["model.embed_tokens.weight"][0]
    )
    assert meta["steps"] == 10 and meta["params"] == sum(v.numel() for v in p1.values())


def test_budget_counts_hf_parameters_exactly():
    from sandbox.scenario import budget

    for config in ARCHS.values():
        scn = validate_scenario(
            {
                "task": {
                    "name": "lm",
                    "model": {"backend": "hf", "config": config},
                    "warmstart": {"enabled": False},
                    "train_size": 50,
                    "eval_size": 10,
                }
            }
        )
        task = LMTask(scn.task)
        assert budget._shape(scn.task).params == sum(p.numel() for p in task.model.parameters())
    scn, _ = load_scenario(ROOT / "scenarios" / "lm_mission_hf.toml")
    est = budget.estimate(scn)
    assert est.memory < 2 * 2**30  # a tiny model: far below any machine's memory, never refused


# -- devices -----------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
@pytest.mark.parametrize("model", [dict(backend="hf", config=LLAMA), dict(d_model=16, n_layers=1, n_heads=2)])
def test_cuda_without_cuda_is_a_clear_error(model):
    with pytest.raises(ValueError, match=r"task\.device: 'cuda' but CUDA is not available"):
        LMTask(task_cfg(model=model, device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("model", [dict(backend="hf", config=LLAMA), dict(d_model=16, n_layers=1, n_heads=2)])
def test_cuda_matches_cpu(model):
    """The same weights on CUDA (float32) and on the CPU: teacher-forced log-probs within 1e-4 and
    gradients within rtol 1e-3 (different kernels and summation orders; TF32 matmul is off by
    default), the same sampled tokens (draws use the CPU generator on CPU-copied probabilities, so
    only a probability within ~1e-6 of a draw's boundary could flip one), and a few runner steps
    with the same rewards and close losses. bfloat16 runs (within 5e-2 of float32 log-probs)."""
    cpu, params = random_task(model=model)
    gpu = LMTask(task_cfg(model=model, device="cuda"))
    gen_c, gen_g = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    ro_c = Rollouts.cat([cpu.generate(params, cpu.new_group(8, gen_c), gen_c, 0) for _ in range(2)])
    ro_g = Rollouts.cat([gpu.generate(params, gpu.new_group(8, gen_g), gen_g, 0) for _ in range(2)])
    assert torch.equal(ro_c.tokens, ro_g.tokens) and torch.equal(ro_c.lengths, ro_g.lengths)
    assert torch.allclose(ro_c.behaviour_logp, ro_g.behaviour_logp, atol=1e-4)
    grads = []
    for task in (cpu, gpu):
        leaf = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        lp = task.logprobs(leaf, ro_c)
        lp.sum().backward()
        grads.append((lp.detach(), {k: v.grad for k, v in leaf.items()}))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-4)
    for k in params:
        assert torch.allclose(grads[0][1][k], grads[1][1][k], rtol=1e-3, atol=1e-5), k
    bf = LMTask(task_cfg(model=model, device="cuda", dtype="bfloat16"))
    assert torch.allclose(bf.logprobs(params, ro_c), grads[0][0], atol=5e-2)

    from sandbox.run.runner import run_scenario

    runs = [run_scenario(_scenario(model, device=d)) for d in ("cpu", "cuda")]
    assert all(r.status == "completed" for r in runs)
    assert runs[0].metrics["reward/mean"].tolist() == runs[1].metrics["reward/mean"].tolist()
    assert torch.allclose(
        torch.tensor(runs[0].metrics["loss"].to_numpy()),
        torch.tensor(runs[1].metrics["loss"].to_numpy()),
        rtol=1e-3,
        atol=1e-5,
    )


# -- end to end through the runner -------------------------------------------------------------------


def _scenario(model=None, variant: str = "sync", steps: int = 5, **task):
    """lm_mission_hf.toml shrunk to seconds: a tiny problem, a 1-layer llama, a short warm start."""
    from sandbox.scenario.api import variant_scenarios

    over = {
        "task.problem": {"kind": "sort", "min_len": 2, "max_len": 4},
        "task.model": model or {"backend": "hf", "config": LLAMA},
        # about 40 steps to 30% dev accuracy (under a second): rewards vary within groups, so RL has signal
        "task.warmstart": {"max_steps": 150, "target_accuracy": 0.3, "eval_every": 10, "dev_size": 32, "lr": 0.01},
        "task.train_size": 64,
        "task.eval_size": 16,
        "task.eval_samples": 1,
        "algorithm.group_size": 4,
        "algorithm.optimizer.lr": 0.01,  # large enough that a few stale versions move the ratios visibly
        "algorithm.groups_per_step": 2,
        "run.steps": steps,
        "run.eval_every": 2,
        "run.figures": False,
        **{f"task.{k}": v for k, v in task.items()},
    }
    scn, raw = load_scenario(ROOT / "scenarios" / "lm_mission_hf.toml", over)
    return variant_scenarios(scn, raw)[variant]


def test_lm_mission_hf_sync_vs_lag16_through_the_runner():
    from sandbox.run.runner import run_scenario

    scn = _scenario()
    assert scn.task.model.backend == "hf" and scn.task.model.config["model_type"] == "llama"
    sync = run_scenario(scn)
    lag = run_scenario(_scenario(variant="naive"))
    vcpo = run_scenario(_scenario(variant="vcpo"))
    again = run_scenario(_scenario())
    for r in (sync, lag, vcpo):
        assert r.status == "completed" and len(r.metrics) == 5
        for col in ("loss", "grad/norm", "reward/mean", "is/ess_ratio", "param/norm"):
            assert r.metrics[col].notna().all() and bool((r.metrics[col].abs() < 1e6).all()), col
        assert r.metrics["eval/accuracy"].notna().any()
    m = sync.metrics
    assert (m["staleness/mean"] == 0).all()
    assert (m["is/ess_ratio"] > 1 - 1e-5).all() and (
        m["is/log_ratio_mean"].abs() < 1e-5
    ).all()  # fresh samples: ratio 1
    assert lag.metrics["staleness/mean"].iloc[-1] > 0 and lag.metrics["staleness/max"].max() <= 16
    assert (
        lag.metrics["is/ess_ratio"].iloc[-1] < 1 - 1e-4 and lag.metrics["is/kl_k3"].iloc[-1] > 0
    )  # stale: ratios != 1
    assert "lr/scale" in vcpo.metrics  # VCPO's OPOB baseline ran (per-sequence gradients through the hf model)
    # determinism: the same scenario twice gives bitwise the same numbers
    assert sync.metrics.equals(again.metrics) and sync.jobs.equals(again.jobs)
