"""The sandbox's methods inside TRL's real ``GRPOTrainer`` (trl 1.16, transformers 5) on a tiny Llama built
from a config and a character tokenizer built here: no download, a few optimizer steps on the CPU.

Each test checks what the trainer actually did to the weights, not only what it logged: with plain SGD the
update is ``−lr·s·g̃``, so GAC's projection and VCPO's learning-rate factor can be read off the parameters."""

from __future__ import annotations

import math
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from sandbox.integrations.trl import SandboxGRPOConfig, SandboxGRPOTrainer, SandboxTRLConfig, check_trl_version  # noqa: E402

CHARS = list("0123456789+=ab")
VOCAB = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>"] + CHARS)}
STEPS = 4


@pytest.fixture(scope="module")
def tokenizer():
    tk = Tokenizer(models.WordLevel(VOCAB, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")


def tiny_llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    return LlamaForCausalLM(cfg)


def digit_fraction(completions, **kwargs):
    """Verifiable reward: the fraction of digits in the completion (random policies score about 0.6)."""
    return [sum(c.isdigit() for c in comp) / max(len(comp), 1) for comp in completions]


class Snapshots(TrainerCallback):
    """Flat parameters after every optimizer step, and the gradient the optimizer is handed."""

    def __init__(self):
        self.params, self.grads, self.batches = [], [], []

    def on_train_begin(self, args, state, control, model=None, **kw):
        self.params.append(torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()]))

    def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
        self.grads.append(torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()]))

    def on_step_end(self, args, state, control, model=None, **kw):
        self.params.append(torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()]))


def grpo_args(tmp_path, steps=STEPS, sandbox=None, **overrides):
    """The tests' GRPOConfig; with ``sandbox`` (SandboxTRLConfig fields without the prefix) a SandboxGRPOConfig."""
    config = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        steps_per_generation=4,
        max_steps=steps,
        learning_rate=3e-2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        seed=0,
        save_strategy="no",
        beta=0.0,
    )
    config.update(overrides)
    if sandbox is None:
        return GRPOConfig(**config)
    return SandboxGRPOConfig(**config, **{f"sandbox_{k}": v for k, v in sandbox.items()})


def dataset():
    return Dataset.from_dict({"prompt": [f"{i}+{j}=" for i in range(4) for j in range(4)]})


def train(tokenizer, tmp_path, cls=SandboxGRPOTrainer, steps=STEPS, callback=None, resume=None, **kwargs):
    args = grpo_args(tmp_path, steps, kwargs.pop("sandbox", None), **kwargs.pop("args", {}))
    trainer = cls(
        model=tiny_llama(),
        reward_funcs=digit_fraction,
        args=args,
        train_dataset=dataset(),
        processing_class=tokenizer,
        callbacks=[callback] if callback else None,
        **kwargs,
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def logged(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


def test_without_methods_the_trainer_is_trls_bitwise_and_logs_the_sandbox_monitors(tokenizer, tmp_path):
    plain = train(tokenizer, tmp_path, cls=GRPOTrainer)
    ours = train(tokenizer, tmp_path)
    for a, b in zip(plain.model.parameters(), ours.model.parameters()):
        assert torch.equal(a, b)
    # A generation batch serves 4 optimizer steps: lags 0, 1, 2, 3 and a falling ESS once off-policy.
    assert logged(ours, "staleness/mean") == [0.0, 1.0, 2.0, 3.0]
    ess = logged(ours, "is/ess_ratio")
    assert ess[0] == pytest.approx(1.0, abs=1e-6) and all(0.0 < e < 1.0 for e in ess[1:])
    assert len(logged(ours, "grad/cos_prev")) == STEPS and logged(ours, "lr/scale") == [1.0] * STEPS


def test_gac_makes_consecutive_sgd_updates_non_positively_aligned(tokenizer, tmp_path):
    """GAC with c_thr = 0 and full removal against the previous applied gradient: with SGD the applied
    gradient is the update, so no two consecutive updates may have a positive cosine (float32 slack 1e-4)."""
    sgd = {"optim": "sgd", "lr_scheduler_type": "constant"}
    plain_snaps, gac_snaps = Snapshots(), Snapshots()
    train(tokenizer, tmp_path, steps=8, args=sgd, callback=plain_snaps)
    trainer = train(
        tokenizer,
        tmp_path,
        steps=8,
        args=sgd,
        callback=gac_snaps,
        sandbox={"stabilizers": [{"name": "gac", "c_thr": 0.0}]},
    )

    def update_cosines(snaps):
        ups = [b - a for a, b in zip(snaps.params, snaps.params[1:])]
        return [
            float(torch.nn.functional.cosine_similarity(u, v, dim=0))
            for u, v in zip(ups, ups[1:])
            if u.norm() > 0 and v.norm() > 0
        ]

    assert max(update_cosines(plain_snaps)) > 0.01  # without GAC some consecutive updates are aligned
    cosines = update_cosines(gac_snaps)
    assert len(cosines) >= 4 and max(cosines) < 1e-4
    assert sum(logged(trainer, "gac/projected")) >= 1


def test_vcpo_scales_the_update_by_the_square_root_of_the_batch_ess(tokenizer, tmp_path):
    """The realised SGD step divided by ``lr·g`` equals ``sqrt(min(1, ESS/N))``, with the ESS recomputed
    here from the step's micro-batch (current log-probs against the ones stored at generation time)."""
    expected = []

    class RecomputeESS(Snapshots):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            super().on_pre_optimizer_step(args, state, control, model=model, **kw)
            t = trainer_ref[0]
            batch = t._buffered_inputs[(t._step - 1) % args.steps_per_generation]
            ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
            attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=attn).logits[:, -batch["completion_ids"].shape[1] - 1 : -1]
            logp = torch.log_softmax(logits.double(), -1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
            mask = batch["completion_mask"].double()
            w = torch.exp(((logp - batch["old_per_token_logps"].double()) * mask).sum(-1))
            expected.append(math.sqrt(min(1.0, float(w.sum() ** 2 / (len(w) * (w * w).sum())))))

    trainer_ref = []

    class Trainer(SandboxGRPOTrainer):
        def __init__(self, *a, **k):
            trainer_ref.append(self)
            super().__init__(*a, **k)

    snaps = RecomputeESS()
    trainer = train(
        tokenizer,
        tmp_path,
        cls=Trainer,
        steps=4,
        callback=snaps,
        args={"optim": "sgd", "lr_scheduler_type": "constant", "max_grad_norm": 0.0, "learning_rate": 0.5},
        sandbox={"stabilizers": [{"name": "vcpo_lr"}]},
    )
    lr = trainer.args.learning_rate
    realised = [
        float(-(b - a) @ g / (lr * g @ g))
        for a, b, g in zip(snaps.params, snaps.params[1:], snaps.grads)
        if g.norm() > 0
    ]
    assert len(realised) >= 3 and min(expected) < 0.97  # off-policy steps, so the rule really scales
    assert realised == pytest.approx([e for e, g in zip(expected, snaps.grads) if g.norm() > 0], rel=2e-4)
    assert logged(trainer, "lr/scale") == pytest.approx(expected, rel=1e-5)


def test_opob_advantages_and_m2po_masking(tokenizer, tmp_path):
    """VCPO's OPOB baseline with exact per-completion gradient norms, checked against norms computed here
    with a plain forward and one backward per completion; M2PO keeps the mean δ² of kept tokens below τ."""
    captured = []

    class Trainer(SandboxGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            captured.append((out, [p.detach().clone() for p in self.model.parameters()]))
            return out

    trainer = train(
        tokenizer,
        tmp_path,
        cls=Trainer,
        steps=4,
        sandbox={"objective": {"name": "grpo", "baseline": "opob"}, "correction": {"name": "m2po_mask"}},
    )
    out, weights = captured[0]
    model = tiny_llama()
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(w)
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    width = out["completion_ids"].shape[1]
    norms = []
    for i in range(ids.shape[0]):
        logits = model(input_ids=ids[i : i + 1], attention_mask=attn[i : i + 1]).logits[:, -width - 1 : -1]
        logp = (
            torch.log_softmax(logits.float(), -1).gather(-1, out["completion_ids"][i : i + 1].unsqueeze(-1)).squeeze(-1)
        )
        grads = torch.autograd.grad((logp * out["completion_mask"][i : i + 1]).sum(), list(model.parameters()))
        norms.append(sum(float((g.double() ** 2).sum()) for g in grads))
    norms = torch.tensor(norms).view(-1, 4)
    rewards = out["sandbox_rewards"].double().view(-1, 4)
    baseline = (norms * rewards).sum(-1, keepdim=True) / norms.sum(-1, keepdim=True)  # w = 1 at generation
    expected = (rewards - baseline) / (rewards.std(-1, unbiased=False, keepdim=True) + 1e-6)
    # TRL computes log-probs through its fused LM head; its per-completion gradient norms agree with the plain
    # forward's within 0.5% (measured 0.3%), which moves b* by at most 0.5% of a group's reward range, i.e. the
    # advantage by at most 0.005 x range/σ <= 0.02 for groups of 4.
    assert out["advantages"].double().view(-1, 4) == pytest.approx(expected, abs=0.02)
    group_mean = (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, unbiased=False, keepdim=True) + 1e-6)
    assert (group_mean - expected).abs().max() > 0.1  # OPOB really differs from GRPO's mean baseline here
    kept = logged(trainer, "m2/value_kept")
    assert len(kept) == 4 and max(kept) < 0.04
    assert max(logged(trainer, "mask/frac")) > 0.0  # the stale steps really masked tokens


def test_ghost_norms_equal_the_exact_per_completion_norms(tokenizer, tmp_path):
    """grad_norms = 'ghost' (one batched forward and one backward) gives the norms of one backward per
    completion through the model class's forward (not TRL's fused LM head), on the tiny Llama (every parameter has a ghost rule: embedding,
    linear, RMSNorm scale), and it follows the objective's opob_grad_norms by default."""
    captured = []

    class Trainer(SandboxGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            captured.append(out)
            return out

    objective = {"name": "grpo", "baseline": "opob", "opob_grad_norms": "ghost"}
    trainer = train(tokenizer, tmp_path, cls=Trainer, steps=1, sandbox={"objective": objective})
    assert trainer.sandbox.sequence_grad_norms == "ghost"
    out = captured[0]
    ghost = trainer._sequence_grad_sq_norms(out)
    model = trainer.accelerator.unwrap_model(trainer.model)
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    width = out["completion_ids"].shape[1]
    exact = []
    for i in range(ids.shape[0]):  # the reference: one backward per completion, the class's own forward
        logits = (
            type(model)
            .forward(model, input_ids=ids[i : i + 1], attention_mask=attn[i : i + 1])
            .logits[:, -width - 1 : -1]
        )
        logp = (
            torch.log_softmax(logits.float(), -1).gather(-1, out["completion_ids"][i : i + 1].unsqueeze(-1)).squeeze(-1)
        )
        grads = torch.autograd.grad((logp * out["completion_mask"][i : i + 1]).sum(), list(model.parameters()))
        exact.append(sum((g.double() ** 2).sum() for g in grads))
    exact = torch.stack(exact).float()
    assert ghost.shape == exact.shape == (ids.shape[0],) and bool((exact > 0).all())
    assert torch.allclose(ghost, exact, rtol=1e-4, atol=0), (ghost, exact)  # float32 sums in another order
    trainer.sandbox = SandboxTRLConfig(objective={**objective, "opob_grad_norms": "exact"})
    trls = trainer._sequence_grad_sq_norms(out)  # 'exact' goes through TRL's fused LM head: measured within 0.7%
    assert torch.allclose(ghost, trls, rtol=1e-2, atol=0), (ghost, trls)
    with pytest.raises(ValueError, match="contradicts objective.opob_grad_norms"):
        SandboxTRLConfig(objective=objective, grad_norms="exact")
    # A model with a parameter no ghost rule covers is refused by name, pointing at 'exact'.
    original = type(model.model.norm).forward  # the RMSNorm scale through torch.addcmul: an op with no ghost rule
    type(model.model.norm).forward = lambda self, x: torch.addcmul(torch.zeros_like(x), x, self.weight)
    try:
        trainer.sandbox = SandboxTRLConfig(objective=objective)
        with pytest.raises(
            ValueError, match=r"grad_norms = 'ghost' cannot serve LlamaForCausalLM: .*model.norm.weight.*'exact'"
        ):
            trainer._sequence_grad_sq_norms(out)
    finally:
        type(model.model.norm).forward = original


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="stabilizers"):
        SandboxTRLConfig.model_validate({"stabilizers": [{"name": "gak"}]})
    with pytest.raises(ValueError, match="second 'gac'"):
        SandboxTRLConfig.model_validate({"stabilizers": [{"name": "gac"}, {"name": "gac"}]})
    with pytest.raises(RuntimeError, match="supports trl 1.16"):
        check_trl_version("1.17.0")
    check_trl_version("1.16.3")


def test_trl_loss_features_a_sandbox_objective_would_drop_are_refused(tokenizer, tmp_path):
    with pytest.raises(ValueError, match=r"GRPOConfig.beta = 0.1"):
        grpo_args(tmp_path, beta=0.1, sandbox={"correction": {"name": "icepop"}})
    with pytest.raises(ValueError, match="loss_type='sapo'"):
        grpo_args(tmp_path, loss_type="sapo", sandbox={"correction": {"name": "mis"}})


def test_a_scenarios_methods_load_into_the_trainer_config():
    cfg = SandboxTRLConfig.from_scenario(
        "scenarios/fixed_lag.toml",
        [
            'algorithm.stabilizers=[{name="gac", c_thr=0.25}, {name="vcpo_lr"}]',
            'algorithm.correction={name="m2po_mask"}',
        ],
    )
    assert [s.name for s in cfg.stabilizers] == ["gac", "vcpo_lr"] and cfg.stabilizers[0].c_thr == 0.25
    assert cfg.correction.name == "m2po_mask"


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo"])
def test_the_sandbox_loss_path_reproduces_trls_own_loss(tokenizer, tmp_path, loss_type):
    """With the identity correction the objective is derived from GRPOConfig (clip ε's, std scaling, the
    loss type's aggregation and normaliser) and computed by the sandbox's PolicyLoss with the sandbox's GRPO
    advantages: after 4 steps, three of them off-policy, the weights match TRL's own loss (measured: bitwise;
    allowed: 1e-6, float32 summation order)."""
    args = {"loss_type": loss_type}
    plain = train(tokenizer, tmp_path, cls=GRPOTrainer, args=args)
    ours = train(tokenizer, tmp_path, args=args, sandbox={"correction": {"name": "none"}})
    assert ours._policy_loss is not None
    start = tiny_llama()
    moved = max(float((a - s).abs().max()) for a, s in zip(plain.model.parameters(), start.parameters()))
    diff = max(float((a - b).abs().max()) for a, b in zip(plain.model.parameters(), ours.model.parameters()))
    assert moved > 1e-2 and diff <= 1e-6


RESUME_STACK = {
    "stabilizers": [
        {"name": "grad_norm_skip", "warmup": 2},
        {"name": "vcpo_lr"},
        {"name": "gac", "c_thr": 0.0, "sided": "two_sided", "reference": "ema"},
    ]
}


def _resume_run(tokenizer, out, resume=None, cls=SandboxGRPOTrainer, sandbox=RESUME_STACK):
    """6 optimizer steps, a generation batch every 2 (so a checkpoint falls between generation batches),
    a checkpoint every 2 steps."""
    return train(
        tokenizer,
        out,
        cls=cls,
        steps=6,
        resume=resume,
        sandbox=sandbox,
        args={"steps_per_generation": 2, "save_strategy": "steps", "save_steps": 2},
    )


def _step_logs(trainer, after: int) -> list[dict]:
    """The logged rows of the optimizer steps after ``after``, without the wall-clock ones."""
    return [
        {k: v for k, v in h.items() if "time" not in k and "per_second" not in k}
        for h in trainer.state.log_history
        if h.get("step", 0) > after and "loss" in h
    ]


def _same_logs(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys()
        and all(x[k] == y[k] or (isinstance(x[k], float) and math.isnan(x[k]) and math.isnan(y[k])) for k in x)
        for x, y in zip(a, b)
    )


def test_resume_from_a_checkpoint_is_bitwise_the_continuous_run(tokenizer, tmp_path):
    """TRL's own resume is bitwise on the CPU when the checkpoint falls between generation batches (the
    reference, checked first: the data order and the sampling RNG come back from the checkpoint). With GAC
    (EMA reference, projecting every step), VCPO and grad_norm_skip, a run resumed at step 4 equals the
    continuous one bitwise: parameters and every logged metric of steps 5 and 6, ``grad/cos_prev`` and GAC's
    cosine included. A checkpoint stripped of the stabilizers' state resumes differently, so the comparison
    can fail."""
    plain = _resume_run(tokenizer, tmp_path / "plain", cls=GRPOTrainer, sandbox=None)
    plain_resumed = _resume_run(
        tokenizer, tmp_path / "plain", resume=str(tmp_path / "plain/out/checkpoint-4"), cls=GRPOTrainer, sandbox=None
    )
    assert all(torch.equal(a, b) for a, b in zip(plain.model.parameters(), plain_resumed.model.parameters()))
    assert _same_logs(_step_logs(plain, 4), _step_logs(plain_resumed, 4))

    ours = _resume_run(tokenizer, tmp_path / "a")
    checkpoint = tmp_path / "a/out/checkpoint-4"
    saved_args = torch.load(checkpoint / "training_args.bin", weights_only=False)
    assert isinstance(saved_args, SandboxGRPOConfig) and saved_args.sandbox == ours.sandbox  # settings saved
    resumed = _resume_run(tokenizer, tmp_path / "a", resume=str(checkpoint))
    assert all(torch.equal(a, b) for a, b in zip(ours.model.parameters(), resumed.model.parameters()))
    logs, resumed_logs = _step_logs(ours, 4), _step_logs(resumed, 4)
    assert len(logs) == 2 and _same_logs(logs, resumed_logs)
    assert all(row["grad/cos_prev"] is not None for row in resumed_logs)  # the trainer logs NaN as None
    assert all(row["gac/projected"] == 1.0 for row in logs)  # GAC acts on both steps after the resume
    assert logged(ours, "lr/scale")[-1] < 0.99  # VCPO scales them

    from sandbox.integrations.step_hooks import STATE_KEY

    optimizer = torch.load(checkpoint / "optimizer.pt", weights_only=True)
    assert [e["name"] for e in optimizer[STATE_KEY]["stabilizers"]] == ["grad_norm_skip", "vcpo_lr", "gac"]
    optimizer.pop(STATE_KEY)
    torch.save(optimizer, checkpoint / "optimizer.pt")
    stripped = _resume_run(tokenizer, tmp_path / "a", resume=str(checkpoint))
    assert any(not torch.equal(a, b) for a, b in zip(ours.model.parameters(), stripped.model.parameters()))
    assert _step_logs(stripped, 4)[0]["grad/cos_prev"] is None  # NaN: no previous gradient


# ------------------------------------------------------------------------------------ SandboxGRPOConfig
def BASE(tmp_path):
    return {"output_dir": str(tmp_path), "report_to": [], "use_cpu": True}


SANDBOX = {
    "sandbox_stabilizers": [{"name": "gac", "c_thr": 0.25}, {"name": "vcpo_lr"}],
    "sandbox_objective": {"name": "grpo", "baseline": "opob"},
    "sandbox_correction": {"name": "m2po_mask"},
    "sandbox_grad_norms": "logit_proxy",
    "sandbox_grad_cosine": False,
}


def test_the_sandbox_settings_serialise_with_the_training_arguments(tmp_path):
    """to_dict / to_json_string (what TRL writes to the hub card and trackers), back into the class, and the
    HfArgumentParser paths: from a dict and from command-line strings (the list and dicts as JSON)."""
    import json

    from transformers import HfArgumentParser

    args = SandboxGRPOConfig(**BASE(tmp_path), **SANDBOX)
    d = args.to_dict()
    assert {k: d[k] for k in SANDBOX} == SANDBOX
    assert json.loads(args.to_json_string())["sandbox_objective"] == SANDBOX["sandbox_objective"]
    # TRL's own GRPOConfig does not take its to_dict() back as is: generation_batch_size is derived from
    # steps_per_generation in __post_init__ and both may not be given (trl 1.16 grpo_config.py)
    again = SandboxGRPOConfig(**{k: v for k, v in d.items() if k != "generation_batch_size"})
    assert again.sandbox == args.sandbox and again.sandbox.stabilizers[0].c_thr == 0.25
    parser = HfArgumentParser(SandboxGRPOConfig)
    (parsed,) = parser.parse_dict({**BASE(tmp_path), **SANDBOX})
    assert parsed.sandbox == args.sandbox
    cli = [
        "--output_dir",
        str(tmp_path),
        "--report_to",
        "none",
        "--use_cpu",
        "true",
        "--sandbox_stabilizers",
        json.dumps(SANDBOX["sandbox_stabilizers"]),
        "--sandbox_objective",
        json.dumps(SANDBOX["sandbox_objective"]),
        "--sandbox_correction",
        '{"name": "m2po_mask"}',
        "--sandbox_grad_norms",
        "logit_proxy",
        "--sandbox_grad_cosine",
        "false",
    ]
    (from_cli,) = parser.parse_args_into_dataclasses(cli)
    assert (
        from_cli.sandbox == args.sandbox and from_cli.to_dict()["sandbox_stabilizers"] == SANDBOX["sandbox_stabilizers"]
    )
    with pytest.raises(ValueError, match="sandbox_objective is not valid JSON"):
        SandboxGRPOConfig(**BASE(tmp_path), sandbox_objective="{name: grpo}")
    with pytest.raises(ValueError, match=r"SandboxGRPOConfig\.sandbox_stabilizers\[0\]: .*'gak'"):
        SandboxGRPOConfig(**BASE(tmp_path), sandbox_stabilizers=[{"name": "gak"}])
    with pytest.raises(ValueError, match=r"SandboxGRPOConfig\.sandbox_objective\.grpo\.eps_low: "):
        SandboxGRPOConfig(**BASE(tmp_path), sandbox_objective={"name": "grpo", "eps_low": -1})
    with pytest.raises(ValueError, match=r"SandboxGRPOConfig\.sandbox_\*: .*contradicts objective.opob_grad_norms"):
        SandboxGRPOConfig(
            **BASE(tmp_path),
            sandbox_objective={"name": "grpo", "baseline": "opob", "opob_grad_norms": "ghost"},
            sandbox_grad_norms="exact",
        )
    assert SandboxGRPOConfig(**BASE(tmp_path)).sandbox == SandboxTRLConfig()


def test_a_scenario_loads_into_the_config(tmp_path):
    args = SandboxGRPOConfig.from_scenario(
        "scenarios/fixed_lag.toml",
        [
            'algorithm.stabilizers=[{name="gac", c_thr=0.25}, {name="vcpo_lr"}]',
            'algorithm.correction={name="m2po_mask"}',
        ],
        **BASE(tmp_path),
        learning_rate=1e-6,
    )
    assert [s["name"] for s in args.sandbox_stabilizers] == ["gac", "vcpo_lr"] and args.learning_rate == 1e-6
    assert args.sandbox.correction.name == "m2po_mask"


REFUSED_VALUES = {
    "beta": 0.04,
    "use_bias_correction_kl": False,
    "delta": 2.0,
    "importance_sampling_level": "sequence",
    "off_policy_mask_threshold": 0.5,
    "top_entropy_quantile": 0.2,
    "entropy_coef": 0.01,
    "use_adaptive_entropy": True,
    "entropy_coef_min": 0.1,
    "entropy_coef_max": 0.5,
    "entropy_coef_delta": 0.01,
    "entropy_target": 0.3,
    "multi_objective_aggregation": "normalize_then_sum",
    "sapo_temperature_neg": 2.0,
    "sapo_temperature_pos": 2.0,
    "vespo_k_pos": 1.0,
    "vespo_lambda_pos": 1.0,
    "vespo_k_neg": 1.0,
    "vespo_lambda_neg": 1.0,
    "vllm_importance_sampling_mode": "token_truncate",
    "vllm_importance_sampling_clip_max": 5.0,
    "vllm_importance_sampling_clip_min": 0.5,
    "vllm_importance_sampling_cap": 2.0,
}


def test_every_refused_field_has_a_case():
    from sandbox.integrations.trl import LOSS_FIELDS_REFUSED

    assert set(REFUSED_VALUES) == set(LOSS_FIELDS_REFUSED)


@pytest.mark.parametrize("field", list(REFUSED_VALUES))
@pytest.mark.parametrize(
    "sandbox",
    [{"sandbox_objective": {"name": "grpo"}}, {"sandbox_correction": {"name": "mis"}}],
    ids=["objective", "correction"],
)
def test_a_loss_setting_the_sandbox_objective_replaces_is_refused_by_name(tmp_path, field, sandbox):
    value = REFUSED_VALUES[field]
    with pytest.raises(ValueError, match=re.escape(f"GRPOConfig.{field} = {value!r} is applied inside TRL's loss")):
        SandboxGRPOConfig(**BASE(tmp_path), **{field: value}, **sandbox)
    SandboxGRPOConfig(**BASE(tmp_path), **{field: value})  # without sandbox loss: TRL's own, accepted


@pytest.mark.parametrize(
    "trl_fields,objective,expected",
    [
        ({"loss_type": "grpo"}, {"name": "dapo"}, {"aggregation": "seq_mean_token_mean"}),
        ({"loss_type": "bnpo"}, {"name": "grpo"}, {"aggregation": "token_mean"}),
        ({"epsilon": 0.1}, {"name": "grpo"}, {"eps_low": 0.1, "eps_high": 0.1}),
        ({"epsilon": 0.1, "epsilon_high": 0.3}, {"name": "dapo"}, {"eps_low": 0.1, "eps_high": 0.3}),
        ({"epsilon_high": 0.3}, {"name": "gspo"}, {"eps_low": 0.2, "eps_high": 0.3}),
        ({"scale_rewards": "none"}, {"name": "grpo"}, {"normalize_std": False}),
        ({"scale_rewards": False}, {"name": "reinforce"}, {"normalize_std": False}),
        ({"scale_rewards": "none"}, {"name": "cispo"}, {"advantage": "dr_grpo"}),
        (
            {"loss_type": "grpo", "epsilon": 0.1},
            {"name": "grpo", "eps_low": 0.1, "aggregation": "seq_mean_token_mean"},
            {"eps_low": 0.1, "eps_high": 0.1},
        ),  # agreeing values are not a conflict
        ({}, {"name": "dapo"}, {"eps_high": 0.28, "aggregation": "token_mean"}),  # TRL's defaults leave the objective's
    ],
)
def test_a_grpo_setting_with_an_equivalent_is_mapped_onto_the_objective(tmp_path, trl_fields, objective, expected):
    args = SandboxGRPOConfig(**BASE(tmp_path), sandbox_objective=objective, **trl_fields)
    built = args.sandbox.objective
    assert {k: getattr(built, k) for k in expected} == expected
    assert {k: args.sandbox_objective[k] for k in expected if k in args.sandbox_objective} == {
        k: v for k, v in expected.items() if k in args.sandbox_objective
    }
    assert (
        SandboxGRPOConfig(
            **trl_fields,
            **BASE(tmp_path),  # the stored config re-validates
            sandbox_objective=args.sandbox_objective,
        ).sandbox
        == args.sandbox
    )


@pytest.mark.parametrize(
    "trl_fields,objective,message",
    [
        (
            {"epsilon": 0.1},
            {"name": "grpo", "eps_low": 0.3},
            r"GRPOConfig.epsilon = 0.1 contradicts sandbox_objective.eps_low = 0.3",
        ),
        ({"epsilon": 0.1}, {"name": "dapo"}, None),  # dapo's own eps_high = 0.28 is its default, not set: mapped
        (
            {"epsilon_high": 0.3},
            {"name": "dapo", "eps_high": 0.28},
            r"GRPOConfig.epsilon_high = 0.3 contradicts sandbox_objective.eps_high",
        ),
        (
            {"loss_type": "grpo"},
            {"name": "grpo", "aggregation": "token_mean"},
            r"GRPOConfig.loss_type = 'grpo' contradicts",
        ),
        ({"loss_type": "dr_grpo"}, {"name": "grpo"}, r"GRPOConfig.loss_type = 'dr_grpo' has no equivalent"),
        ({"loss_type": "sapo"}, {"name": "grpo"}, r"GRPOConfig.loss_type = 'sapo' has no equivalent"),
        ({"scale_rewards": "batch"}, {"name": "grpo"}, r"GRPOConfig.scale_rewards = 'batch' has no equivalent"),
        (
            {"scale_rewards": "none"},
            {"name": "grpo", "normalize_std": True},
            r"GRPOConfig.scale_rewards = 'none' contradicts",
        ),
        (
            {"scale_rewards": "none"},
            {"name": "cispo", "advantage": "rloo"},
            r"scale_rewards = 'none' contradicts sandbox_objective.advantage",
        ),
        (
            {"epsilon": 0.1},
            {"name": "reinforce"},
            r"GRPOConfig.epsilon = 0.1 has no counterpart in sandbox_objective 'reinforce'",
        ),
        ({"scale_rewards": "none"}, {"name": "ppo", "advantage": "reward"}, r"scale_rewards = 'none' contradicts"),
    ],
)
def test_a_conflicting_or_unmappable_grpo_setting_is_refused_by_name(tmp_path, trl_fields, objective, message):
    if message is None:
        assert (
            SandboxGRPOConfig(**BASE(tmp_path), sandbox_objective=objective, **trl_fields).sandbox.objective.eps_high
            == 0.1
        )
        return
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        SandboxGRPOConfig(**BASE(tmp_path), sandbox_objective=objective, **trl_fields)


def test_the_deprecated_sandbox_argument_still_configures_the_trainer(tokenizer, tmp_path):
    """sandbox= warns and is merged into a SandboxGRPOConfig copy of args (without re-running GRPOConfig's
    post-processing); with the sandbox_* fields set too, it is refused."""
    kwargs = dict(model=tiny_llama(), reward_funcs=digit_fraction, train_dataset=dataset(), processing_class=tokenizer)
    with pytest.warns(FutureWarning, match=r"\(sandbox=\.\.\.\) is deprecated"):
        trainer = SandboxGRPOTrainer(
            **kwargs,
            args=grpo_args(tmp_path, epsilon=0.1),
            sandbox={"stabilizers": [{"name": "vcpo_lr"}], "objective": {"name": "grpo"}},
        )
    assert isinstance(trainer.args, SandboxGRPOConfig) and trainer.args.sandbox_stabilizers == [{"name": "vcpo_lr"}]
    assert trainer.args.generation_batch_size == 16 and trainer.sandbox.objective.eps_low == 0.1  # mapped
    with pytest.raises(ValueError, match="both args"), pytest.warns(FutureWarning):
        SandboxGRPOTrainer(
            **kwargs,
            args=grpo_args(tmp_path, sandbox={"stabilizers": [{"name": "gac"}]}),
            sandbox={"stabilizers": [{"name": "vcpo_lr"}]},
        )
    with pytest.raises(ValueError, match=r"GRPOConfig\.beta = 0\.04"), pytest.warns(FutureWarning):
        SandboxGRPOTrainer(**kwargs, args=grpo_args(tmp_path, beta=0.04), sandbox={"correction": {"name": "mis"}})
