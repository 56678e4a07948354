"""The small-LM policy task: a compact transformer answering synthetic prompts, GRPO-style groups.

A group is ``G`` responses to ONE train prompt (drawn with the sampling generator). Responses stop
at the end token or at ``max_new_tokens``; padding after the end holds token 0, behaviour log-prob
0 and version -1. Behaviour log-probs are those of the distribution actually sampled from
(``log_softmax(logits / temperature)``) and :meth:`LMTask.logprobs` uses the same temperature, so on
fresh samples the learner/behaviour ratio is exactly 1 (up to float rounding of cached vs uncached
attention).
A rollout engine that is not exact (``task.engine``, ``docs/engines.md``) samples instead through
:meth:`LMTask._engine_sample`: its own distribution and reported log-probs, the trainer's exact ones kept
as ``version_logp``.

Model: ``task.model`` is the builtin transformer (:mod:`sandbox.models.transformer`) or, with
``backend = "hf"``, a Hugging Face causal LM (:mod:`sandbox.models.hf`); both run through the same
code below (:meth:`LMTask.forward_fn`, :meth:`LMTask.new_module`).

Weights: the learner's parameters are the module's ``named_parameters`` with a leading replica
dim of size R (``task.replicas``), kept on the CPU in float32 (the learner, the optimizer and the weight
store work there). The builtin model computes every forward, R = 1 included, through the formulation
batched over that dimension (:mod:`sandbox.models.replicas`: the replicas decode together, one forward
per step; the learner scores them in one forward over responses padded to the response budget), whose
kernels compute each replica as the one-replica batch does, so replica r is its one-replica run to the
bit (``docs/tasks.md#replicas``; one CPU thread). The hf backend runs its module through
``torch.func.functional_call`` and supports ``replicas = 1`` only.

Partial rollouts: :meth:`generate` continues every unfinished response from its current position
(all unfinished responses of a group sit at the same position), re-encoding prompt + prefix with
the new weights (the KV cache is recomputed), so every token records the version that produced it.
Task page: ``docs/tasks.md#lm``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from sandbox.base.errors import ScenarioError
from sandbox.base.lazy_torch import lazy_import, no_grad
from sandbox.base.processes import forked_map
from sandbox.models import hf
from sandbox.models import replicas as rp
from sandbox.models.hf import HFModelConfig
from sandbox.models.transformer import TransformerConfig, sample, sample_with, sequence_logprobs
from sandbox.tasks.base import TASKS, BudgetShape, Params, PolicyTask
from sandbox.tasks.draws import RowGenerators, Stream
from sandbox.tasks.lm import warmstart as ws_mod
from sandbox.tasks.lm.problems import AdditionConfig, CharTokenizer, ProblemConfig, make_prompt_sets
from sandbox.tasks.lm.warmstart import WarmStartConfig
from sandbox.tasks.rollouts import Rollouts

if TYPE_CHECKING:
    from torch import nn

torch = lazy_import("torch", globals())
Tensor = lazy_import("torch:Tensor", globals())
functional_call = lazy_import("torch.func:functional_call", globals())

EVAL_ROWS = 1024
"""Rows (held-out prompts x replicas) an evaluation decodes in one batch (``LMTask.evaluate``)."""

EVAL_PREFILL_BYTES = 64 << 20
"""The most memory the held-out prompts' stored prefill may take (``LMTask._eval_decoder``; beyond it each
pass prefills its own rows)."""

SEEDS, SAMPLER, PROMPTS = "sampling_seeds", "sampler", "prompt_index"
"""``Rollouts.info`` keys of an LM group: the seeds of its own sampling stream (:meth:`LMTask.new_group`), that
stream once it has drawn (:meth:`LMTask._sampler`) and each replica's train prompt ``(R,)`` (:meth:`LMTask.rewards`)."""

SEED_BOUND = 2**63 - 1
"""Group seeds are drawn in ``[0, SEED_BOUND)`` (``torch.Generator.manual_seed`` takes any 64-bit value)."""


def _model_backend(v: Any) -> str | None:
    backend = v.get("backend", "builtin") if isinstance(v, dict) else getattr(v, "backend", "builtin")
    return backend if backend in ("builtin", "hf") else None


ModelConfig = Annotated[
    Annotated[TransformerConfig, Tag("builtin")] | Annotated[HFModelConfig, Tag("hf")],
    Discriminator(
        _model_backend,
        custom_error_type="invalid_backend",
        custom_error_message="unknown backend; expected 'builtin' (the default: the compact transformer) or 'hf' (transformers)",
    ),
]
"""``task.model``: the builtin transformer (no ``backend`` key, or ``backend = "builtin"``) or a
Hugging Face causal LM (``backend = "hf"``)."""


class LMTaskConfig(BaseModel):
    """A small language model on a synthetic task with a verifiable reward."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Literal["lm"] = "lm"

    check_settings: ClassVar[dict] = {
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "warmstart": {"enabled": False},
        "train_size": 16,
        "eval_size": 4,
        "eval_samples": 1,
    }
    """A tiny LM for the component checker (``sandbox.component_check``): no warm start, one layer."""
    problem: ProblemConfig = Field(
        default_factory=AdditionConfig, description="The synthetic task (kind = addition | countdown | sort | reverse)."
    )
    model: ModelConfig = Field(
        default_factory=TransformerConfig,
        description="Policy network: the builtin transformer (default) or backend = 'hf' (a transformers causal LM).",
    )
    warmstart: WarmStartConfig = Field(
        default_factory=WarmStartConfig, description="Supervised warm start (the base model)."
    )
    train_size: int = Field(2000, ge=1, description="Train prompts (RL groups draw from them).")
    eval_size: int = Field(256, ge=1, description="Held-out prompts for eval/accuracy (disjoint from train).")
    prompt_seed: int = Field(
        0,
        ge=0,
        le=2**63 - 1,
        description="Seed of the prompt sets (independent of the run seeds: same data in every run).",
    )
    max_new_tokens: int | None = Field(
        None, ge=1, description="Response budget; None = the longest reference answer + 2 (end token and slack)."
    )
    temperature: float = Field(
        1.0,
        ge=1e-5,
        le=1e5,
        description="Sampling temperature; learner log-probs use the same one. In [1e-5, 1e5]: below 1e-5 engines "
        "such as vLLM (0.11, SamplingParams) switch to greedy decoding, which has no behaviour log-probs to correct "
        "with, and logits / T would overflow float32.",
    )
    eval_batch: int = Field(512, ge=1, description="Held-out prompts decoded per batch in evaluate().")
    eval_samples: int = Field(
        2,
        ge=0,
        description="Sampled responses per held-out prompt for eval/expected_reward (at the sampling temperature, "
        "from a fixed evaluation seed so every run and variant sees the same draws); 0 = skip.",
    )
    device: str = Field(
        "cpu", description="Where forwards run: 'cpu' or 'cuda' (same code path); weights live on the CPU."
    )
    dtype: Literal["float32", "float64", "bfloat16", "float16"] = Field(
        "float32", description="Compute dtype of forwards (master weights stay float32)."
    )
    replicas: int = Field(
        1,
        ge=1,
        le=4096,
        description="Independent learners R in one run (weights with a leading replica dimension; each replica samples, "
        "scores and trains with its own weights: docs/tasks.md#replicas). The hf backend supports 1 only.",
    )
    eval_processes: int = Field(
        1,
        ge=1,
        le=64,
        description="Processes that evaluate the replicas (builtin model, CPU): the replicas are split into this many "
        "chunks, all but one evaluated in processes forked for the evaluation, the last in the run's own; 2 on a 2-core "
        "machine. Each replica's evaluation depends on its weights alone, so the numbers do not depend on it "
        "(docs/tasks.md#replicas).",
    )
    threads: int | None = Field(
        1,
        ge=1,
        le=256,
        description="torch intra-op CPU threads (at most 256), set process-wide when the task is built (None: leave torch's "
        "setting). The model's matrices are tiny: one thread avoids OpenMP synchronisation that makes small ops "
        "10-100x slower on a busy 2-core machine. replicas > 1 needs 1 (each replica bitwise its one-replica run).",
    )

    @model_validator(mode="after")
    def _check(self):
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device must be 'cpu' or 'cuda[:i]', got {self.device!r}")
        if self.model.backend == "hf" and self.replicas != 1:
            raise ValueError(
                f"task.replicas: {self.replicas}, but the hf backend supports replicas = 1 only (the "
                f"transformers module is called with one replica's weights); use backend = 'builtin' "
                f"or run seeds for independent repeats"
            )
        if self.eval_processes > 1 and self.device != "cpu":
            raise ValueError(
                f"task.eval_processes: {self.eval_processes}, but the evaluation forks only on the CPU "
                f"(task.device = {self.device!r}: a forked child cannot use the parent's CUDA context); "
                f"use eval_processes = 1"
            )
        if self.replicas > 1 and self.threads != 1:
            raise ValueError(
                f"task.threads: {self.threads}, but replicas = {self.replicas} run in one batched kernel "
                f"per layer, which computes each replica as its one-replica run to the bit on one thread "
                f"only (several threads split a batch by its size); use threads = 1 (the default)"
            )
        if self.model.backend == "builtin":
            need_vocab = CharTokenizer().vocab_size
            need_len = self.problem.prompt_len + (self.max_new_tokens or self.problem.max_answer_len + 2)
            if self.model.vocab_size is not None and self.model.vocab_size < need_vocab:
                raise ValueError(
                    f"task.model.vocab_size: {self.model.vocab_size} is smaller than the task's tokenizer "
                    f"({need_vocab} characters); use at least {need_vocab} or leave it unset"
                )
            if self.model.max_seq_len is not None and self.model.max_seq_len < need_len:
                raise ValueError(
                    f"task.model.max_seq_len: {self.model.max_seq_len} is shorter than a prompt plus its "
                    f"longest response ({need_len} tokens); use at least {need_len} or leave it unset"
                )
        return self


@TASKS.register(LMTaskConfig)
class LMTask(PolicyTask):
    ragged_replicas = True
    """Responses have variable lengths: with several replicas the learner computes each replica's loss
    on its own responses at its own width (``PolicyLearner.per_replica``), so each is its one-replica run."""

    resumes_each = True
    """:meth:`generate` continues responses cut at different positions (:meth:`_generate_each`): an engine's
    sequences resumed under new weights (``system.generation_time.mixed_versions``)."""

    @property
    def width_free_logprobs(self) -> bool:
        """:meth:`logprobs` of replica r at position t depend on replica r's responses only, not on the width
        of the batch nor on the other replicas (the builtin model pads to the response budget): the learner
        may score every replica in one call and cut each to its own width (``PolicyLearner.compute_loss``)."""
        return self.backend == "builtin"

    @classmethod
    def engine_features(cls, cfg):
        """Logits to every engine; the network to precision and routing (builtin model; routing with experts)."""
        experts = cfg.model.backend == "builtin" and cfg.model.experts > 0
        return frozenset({"logits", "forward"} | ({"experts"} if experts else set()))

    @classmethod
    def budget_shape(cls, cfg):
        prob, m = cfg.problem, cfg.model
        P = prob.prompt_len
        T = cfg.max_new_tokens or prob.max_answer_len + 2
        seq = P + T
        if m.backend == "hf":
            V = CharTokenizer().vocab_size
            sizes = hf.shape(m, V, seq)  # exact parameter count from the module built on the meta device
            d, L, ff, heads, params = sizes["d"], sizes["L"], sizes["ff"], sizes["heads"], sizes["params"]
        else:
            V = m.vocab_size or CharTokenizer().vocab_size
            S = m.max_seq_len or seq
            d, L, ff, heads = m.d_model, m.n_layers, m.ff, m.n_heads
            mlp = (d * ff + ff) + (ff * d + d)
            per_layer = (
                4 * d
                + (3 * d * d + 3 * d)
                + (d * d + d)
                + (mlp * m.experts + d * m.experts + m.experts if m.experts else mlp)
            )
            params = V * d + S * d + L * per_layer + 2 * d + (0 if m.tie_embeddings else d * V)
        # saved for backward per position: per layer about 12 d + 2 ff + heads x seq (attention), logits
        # (a gated MLP, as in llama, saves a third ff-wide activation: within the estimate's margin)
        act_per_pos = (L * (12 * d + 2 * ff + 2 * heads * seq) + 4 * V) * 4
        return BudgetShape(
            "transformer",
            T,
            "task.max_new_tokens",
            params,
            4,
            prompt_bytes=P * 8,
            data_bytes=(cfg.train_size + cfg.eval_size) * (P * 8 + 256),
            act_per_slot=act_per_pos * seq / max(T, 1),
            exact_length=False,
            details={"P": P, "V": V, "d": d, "L": L, "ff": ff, "heads": heads, "seq": seq},
        )

    @classmethod
    def response_length(cls, cfg):  # without building the model (budget_shape counts its parameters)
        return cfg.max_new_tokens or cfg.problem.max_answer_len + 2, False

    @classmethod
    def response_length_hint(cls, cfg):
        return "a few characters (synthetic arithmetic answers)"

    @classmethod
    def needs_preload(cls, cfg):
        return cfg.warmstart.enabled

    @classmethod
    def preload(cls, cfg):
        ws_mod.load_or_train(cls(cfg))

    def __init__(self, cfg: LMTaskConfig):
        if cfg.device.startswith("cuda"):  # known only where the run happens: a run-time error naming the field
            if not torch.cuda.is_available():
                raise ScenarioError(
                    [
                        f"task.device: {cfg.device!r} but CUDA is not available here (torch "
                        f"{torch.__version__}); use task.device = 'cpu'"
                    ]
                )
            index = torch.device(cfg.device).index
            if index is not None and index >= torch.cuda.device_count():
                raise ScenarioError(
                    [
                        f"task.device: {cfg.device!r} but this machine has {torch.cuda.device_count()} "
                        f"CUDA device(s) (cuda:0 to cuda:{torch.cuda.device_count() - 1})"
                    ]
                )
        self.cfg = cfg
        self.replicas = cfg.replicas
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        self.tokenizer = CharTokenizer()
        self.problem = cfg.problem
        self.P = self.problem.prompt_len
        self.max_new = cfg.max_new_tokens or self.problem.max_answer_len + 2
        self.max_len = self.max_new
        self.device = torch.device(cfg.device)
        self.dtype = getattr(torch, cfg.dtype)  # float32, float64, bfloat16 or float16
        self.backend = cfg.model.backend
        if self.backend == "hf":
            self.model_cfg = hf.task_config(
                cfg.model, self.tokenizer.vocab_size, self.P + self.max_new, self.tokenizer.eos_id
            )
        else:
            self.model_cfg = cfg.model.model_copy(
                update={
                    "vocab_size": cfg.model.vocab_size or self.tokenizer.vocab_size,
                    "max_seq_len": cfg.model.max_seq_len or self.P + self.max_new,
                }
            )
        data = _prompt_data(self.problem, cfg.train_size, cfg.eval_size, cfg.prompt_seed, self.tokenizer)
        self.train_prompts, self.train_ids, self.train_answer_ids = data.train_prompts, data.train_ids, data.answer_ids
        self.eval_prompts, self.eval_ids = data.eval_prompts, data.eval_ids
        self._answers = data.answers  # (answer + end token ids (n, A) padded with -1, their lengths (n,)) or None
        if self.backend == "hf":
            self.model = hf.to_device(self.new_module(torch.Generator().manual_seed(0)), self.device, self.dtype)
        else:
            from sandbox.models.transformer_nn import Transformer  # torch.nn modules: imported when a task is built

            self.model = Transformer(self.model_cfg).to(device=self.device, dtype=self.dtype)
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.base_meta: dict | None = None
        self._scores: dict = {}

    # -- weights ---------------------------------------------------------------------------------
    def init_params(self, gen: torch.Generator) -> Params:
        """``(R, ...)`` weights: every replica the warm-started base model, or R fresh modules drawn one
        after the other from ``gen`` (replica 0 is the one-replica run's init)."""
        if self.cfg.warmstart.enabled:
            state, self.base_meta = ws_mod.load_or_train(self)
            names = [n for n, _ in self.model.named_parameters()]
            state = {n: state[n] for n in names}
            return {n: v.float().unsqueeze(0).expand((self.replicas,) + v.shape).clone() for n, v in state.items()}
        states = []
        for _ in range(self.replicas):
            m = self.new_module(gen)
            states.append({n: p.detach().clone() for n, p in m.named_parameters()})
        if self.replicas == 1:
            return {n: v.float().unsqueeze(0).clone() for n, v in states[0].items()}
        return {n: torch.stack([st[n].float() for st in states]) for n in states[0]}

    def new_module(self, gen: torch.Generator) -> nn.Module:
        """A fresh module on the CPU in float32 whose weights depend on ``gen`` only (builtin:
        :meth:`Transformer.reset_parameters`; hf: the architecture's init under a seeded RNG, or the
        checkpoint's weights, :func:`sandbox.models.hf.build_module`)."""
        if self.backend == "hf":
            return hf.build_module(self.cfg.model, self.model_cfg, gen)
        from sandbox.models.transformer_nn import Transformer

        m = Transformer(self.model_cfg)
        m.reset_parameters(gen)
        return m

    def module_forward(self, module: nn.Module, use_cache: bool = True):
        """``(tokens, past) -> (logits, cache)`` of ``module`` under its own parameters (the warm start)."""
        return hf.causal_lm_forward(module, None, use_cache) if self.backend == "hf" else module

    def _single(self, params: Params, detach: bool, r: int = 0) -> dict[str, Tensor]:
        """Replica ``r``'s weights on ``task.device`` in ``task.dtype`` (differentiable unless ``detach``)."""
        out = {}
        for k, v in params.items():
            v = v[r].detach() if detach else v[r]
            out[k] = v.to(device=self.device, dtype=self.dtype)
        return out

    def _stacked(self, params: Params, rows: list[int] | None = None, detach: bool = True) -> dict[str, Tensor]:
        """The ``(R', ...)`` weights of replicas ``rows`` (None: all) on ``task.device`` in ``task.dtype``
        (differentiable unless ``detach``): the builtin model's batched forward (:mod:`sandbox.models.replicas`)."""
        out = {}
        for k, v in params.items():
            if rows is not None:
                v = v[rows]
            out[k] = (v.detach() if detach else v).to(device=self.device, dtype=self.dtype)
        return out

    def forward_fn(self, single: dict[str, Tensor], use_cache: bool = True):
        """``(tokens, past) -> (logits, cache)`` of the module under ``single`` (one replica's weights),
        through ``functional_call``: the hf backend's every forward, and the builtin's per-sequence
        log-probs (:meth:`sequence_logprob`, :meth:`batch_sequence_logprob`: OPOB's gradient norms).
        ``use_cache=False``: teacher-forced scoring, which needs no cache (the builtin always returns its
        keys/values; the hf model then builds no ``DynamicCache``)."""
        if self.backend == "hf":
            return hf.causal_lm_forward(self.model, single, use_cache)
        return lambda tokens, past=None: functional_call(self.model, single, (tokens, past))

    # -- PolicyTask ------------------------------------------------------------------------------
    def new_group(self, group_size: int, gen: Stream) -> Rollouts:
        """One train prompt per replica, ``torch.randint`` with ``gen`` (a :class:`RowGenerators`: replica r
        draws its index from its own generator, the call of a one-replica run), then the seed of the group's
        own sampling stream (:func:`_group_seeds`): the group's tokens are drawn from it, not from ``gen``, so
        they do not depend on when the group is decoded nor on the groups decoded beside it
        (:meth:`sample_groups`)."""
        R, n = self.replicas, self.train_ids.shape[0]
        if isinstance(gen, RowGenerators):
            gen._check(R)
            i = torch.cat([torch.randint(n, (1,), generator=g) for g in gen.gens])
        else:
            i = torch.randint(n, (R,), generator=gen)
        prompts = self.train_ids[i].view(R, 1, -1).expand(R, group_size, -1).clone()
        return Rollouts(
            tokens=torch.zeros(R, group_size, 0, dtype=torch.long),
            behaviour_logp=torch.zeros(R, group_size, 0),
            token_versions=torch.zeros(R, group_size, 0, dtype=torch.long),
            lengths=torch.zeros(R, group_size, dtype=torch.long),
            ended=torch.zeros(R, group_size, dtype=torch.bool),
            group_size=group_size,
            prompts=prompts,
            info={SEEDS: _group_seeds(gen), PROMPTS: i},
        )

    def _sampler(self, group: Rollouts, gen: Stream) -> Stream:
        """The stream ``group``'s tokens are drawn from: for a group of :meth:`new_group`, its own stream, started
        from its seeds when nothing is decoded yet (a group decoded again from its start, under other weights,
        draws the same numbers) and continued afterwards (``group.info``, shared with its continuations);
        ``gen`` for a group made otherwise."""
        seeds = group.info.get(SEEDS)
        if seeds is None:
            return gen
        if group.width == 0 or SAMPLER not in group.info:
            group.info[SAMPLER] = _seeded(seeds)
        return group.info[SAMPLER]

    def generate(self, params: Params, group: Rollouts, gen: Stream, version: int | Tensor) -> Rollouts:
        """Continue every unfinished response. Builtin model: the replicas decode together, those with
        the same number of unfinished responses in one batch (:func:`sandbox.models.replicas.decode`: one
        forward per step for all of them); each draws from ``gen`` (a :class:`RowGenerators`: its own
        generator, the draws of its one-replica run; one ``torch.Generator``: the replicas of a batch draw
        from it together, step after step). hf backend (one replica): :func:`sample`."""
        if group.prompts is None:
            raise ValueError("LM groups carry their prompts; make them with new_group")
        W = group.width
        if not bool((~group.ended).any()):
            return group
        R = group.lengths.shape[0]
        gen = self._sampler(group, gen)
        if isinstance(gen, RowGenerators):
            gen._check(R)
        if bool((group.lengths[~group.ended] != W).any()):
            return self._generate_each(params, group, gen, version)
        if W >= self.max_new:
            # budget exhausted: nothing left to decode
            return replace(group, ended=torch.ones_like(group.ended))
        live, batches = [], {}
        for r in range(R):
            idx = torch.nonzero(~group.ended[r]).squeeze(-1)
            live.append(idx)
            if idx.numel():
                batches.setdefault(idx.numel(), []).append(r)
        parts = []
        for rs in batches.values():
            ctx = torch.stack([torch.cat([group.prompts[r, live[r]], group.tokens[r, live[r]]], 1) for r in rs])
            versions = [int(version[r]) if isinstance(version, Tensor) else version for r in rs]
            gens = [gen.gens[r] if isinstance(gen, RowGenerators) else gen for r in rs]
            parts += [
                (r, live[r], W, o) for r, o in zip(rs, self._decode(params, rs, ctx.to(self.device), W, gens, versions))
            ]
        return self._extend(group, parts, max(o[0].shape[1] for *_, o in parts), version, group.extend)

    def sample_groups(self, params: Params, groups: list[Rollouts], version: int) -> list[Rollouts]:
        """:meth:`generate` of each of ``groups`` (new groups of :meth:`new_group`, one group size) under the same
        ``params``, to the bit, with one decode for all of them: their responses side by side in one batch
        (:func:`sandbox.models.replicas.decode`; a row's numbers do not depend on the rows beside it) and each
        group drawing from its own stream exactly the calls of its own decode (:func:`_groups_draw`). One forward
        per decode step for every group instead of one per group and step: the groups a cluster dispatches at
        one instant with the same weights (``sandbox.system.workload.PolicyWorkload``). Group by group where
        that equality is not established: an engine that is not exact, the hf backend, per-replica streams
        (``run.schedules = "independent"``), groups already decoded or of different sizes."""
        first = groups[0] if groups else None
        if (
            len(groups) < 2
            or self.backend != "builtin"
            or self.sampling_engine() is not None
            or isinstance(version, Tensor)
            or self.max_new <= 0
            or any(
                g.width != 0
                or bool(g.ended.any())
                or g.lengths.shape != first.lengths.shape
                or not isinstance(g.info.get(SEEDS), int)
                for g in groups
            )
        ):
            return [self.generate(params, g, None, version) for g in groups]
        R, N = first.lengths.shape
        samplers = [self._sampler(g, None) for g in groups]
        ctx = torch.cat([g.prompts for g in groups], 1).to(self.device)  # (R, groups·N, P)
        steps = [[0] * len(groups) for _ in range(R)]  # steps replica r drew for group g
        outs = rp.decode(
            self.model_cfg,
            self._stacked(params),
            ctx,
            self.max_new,
            self.tokenizer.eos_id,
            _groups_draw(self.cfg.temperature, samplers, N, self.tokenizer.eos_id, steps),
            compact=True,
        )
        results = []
        for j, g in enumerate(groups):
            rows = slice(j * N, (j + 1) * N)
            parts = []
            for r, (toks, lps, _, lens, hit) in enumerate(outs):
                s_r = steps[r][j]
                parts.append((r, torch.arange(N), 0, (toks[rows, :s_r], lps[rows, :s_r], None, lens[rows], hit[rows])))
            results.append(self._extend(g, parts, max(steps[r][j] for r in range(R)), version, g.extend))
        return results

    def _generate_each(self, params: Params, group: Rollouts, gen: Stream, version: int | Tensor) -> Rollouts:
        """:meth:`generate` for a group whose unfinished responses sit at different positions (an engine's
        sequences cut at a weight sync, each at its own decode step: ``docs/system.md#continuous_batching, mixed-version tokens``).
        Replica by replica, then position by position (ascending), the responses at position ``w`` decode
        prompt + their first ``w`` tokens with the budget left, ``max_new_tokens − w`` (one :meth:`_decode`
        each, the KV cache recomputed under ``params``); each continuation is written from its own position
        (:meth:`Rollouts.extend_each`)."""
        parts = []
        for r in range(group.lengths.shape[0]):
            live = ~group.ended[r]
            g = gen.gens[r] if isinstance(gen, RowGenerators) else gen
            v = int(version[r]) if isinstance(version, Tensor) else version
            for w in sorted({int(x) for x in group.lengths[r, live].tolist()}):
                idx = torch.nonzero(live & (group.lengths[r] == w)).squeeze(-1)
                ctx = torch.cat([group.prompts[r, idx], group.tokens[r, idx, :w]], 1).unsqueeze(0)
                parts.append(
                    (
                        r,
                        idx,
                        w,
                        None if w >= self.max_new else self._decode(params, [r], ctx.to(self.device), w, [g], [v])[0],
                    )
                )
        return self._extend(group, parts, self.max_new, version, group.extend_each)

    def _extend(self, group: Rollouts, parts: list, S: int, version: int | Tensor, extend) -> Rollouts:
        """``extend`` (:meth:`Rollouts.extend` or :meth:`Rollouts.extend_each`) of ``group`` by ``parts``, each
        ``(r, idx, w, decoded)``: responses ``idx`` of replica ``r`` continued from position ``w`` by ``decoded``
        (one replica's :meth:`_decode`; None: the budget is spent, they end), in ``(R, N, S)`` buffers; a response
        ends at the end token or when ``w`` + its new length reaches the budget. The result shares ``group``'s
        ``info`` (its sampling stream, :meth:`_sampler`)."""
        R, N = group.lengths.shape
        new_t, new_lp = torch.zeros(R, N, S, dtype=torch.long), torch.zeros(R, N, S)
        new_len, new_end = torch.zeros(R, N, dtype=torch.long), torch.zeros(R, N, dtype=torch.bool)
        new_exact = None if self.sampling_engine() is None else torch.zeros(R, N, S)
        for r, idx, w, decoded in parts:
            if decoded is None:
                new_end[r, idx] = True
                continue
            toks, lps, exact, lens, hit = decoded
            s_r = toks.shape[1]
            new_t[r, idx, :s_r] = toks.cpu()
            new_lp[r, idx, :s_r] = lps.float().cpu()
            new_len[r, idx] = lens.cpu()
            new_end[r, idx] = (hit | (w + lens >= self.max_new)).cpu()
            if new_exact is not None:
                new_exact[r, idx, :s_r] = exact.float().cpu()
        out = extend(new_t, new_lp, new_len, new_end, version, new_exact)
        out.info = group.info
        return out

    def _decode(self, params: Params, rs: list[int], ctx: Tensor, W: int, gens: list, versions: list[int]) -> list:
        """Decode the contexts ``ctx (len(rs), n, P + W)`` of replicas ``rs``, replica ``rs[j]`` drawing from
        ``gens[j]``: per replica ``(tokens, reported logp, exact logp or None, lengths, hit_eos)``. Through
        the task's engine when it is not exact (``docs/engines.md``): its draw on the trainer's logits
        ``z = logits / temperature`` (``logit_noise``, ``processed_logprobs``), or a sampler forward at another
        precision / with flipped routes (``precision``, ``routing``) whose exact log-probs come from a
        teacher-forced forward of the task's weights afterwards, padded to the response budget (a width that
        does not depend on the other replicas)."""
        engine = self.sampling_engine()
        T, eos, budget = self.cfg.temperature, self.tokenizer.eos_id, self.max_new - W
        if self.backend == "hf":  # one replica (LMTaskConfig refuses more)
            return [self._decode_hf(engine, params, ctx[0], W, gens[0], versions[0])]
        rows = None if rs == list(range(self.replicas)) else rs
        if engine is None:
            shared = all(g is gens[0] for g in gens)
            return rp.decode(
                self.model_cfg,
                self._stacked(params, rows),
                ctx,
                budget,
                eos,
                _token_draw(T, gens, shared),
                compact=True,
            )
        own_forward = "forward" in engine.needs
        flips = None
        if own_forward:
            per = [engine.sampler_weights(self._single(params, detach=True, r=r))[0] for r in rs]
            weights = {k: torch.stack([w[k] for w in per]) for k in per[0]}
            flips = [engine.router_flip(g) for g in gens]
        else:
            weights = self._stacked(params, rows)

        def draw(logits: Tensor, active: list[int], step: int):
            out = [engine.draw(z.float() / T, gens[a], versions[a], W + step) for z, a in zip(logits, active)]
            return (
                torch.stack([d.tokens for d in out]),
                torch.stack([d.reported_logp for d in out]),
                torch.stack([d.version_logp for d in out]),
            )

        outs = rp.decode(self.model_cfg, weights, ctx, budget, eos, draw, flips)
        if not own_forward:
            return outs
        toks = torch.stack([torch.nn.functional.pad(o[0], (0, budget - o[0].shape[1])) for o in outs])
        with torch.no_grad():
            lp = rp.sequence_logprobs(self.model_cfg, self._stacked(params, rows), ctx, toks, T).float()
        fixed = []
        for j, (tk, lps, _, lens, hit) in enumerate(outs):
            s = tk.shape[1]
            fixed.append((tk, lps, lp[j, :, :s] * (torch.arange(s, device=lp.device) < lens.unsqueeze(-1)), lens, hit))
        return fixed

    def _decode_hf(self, engine, params: Params, ctx: Tensor, W: int, gen, version: int):
        """One replica of the hf backend: :func:`sample`, or :func:`sample_with` through a logits engine."""
        single = self._single(params, detach=True)
        T = self.cfg.temperature
        if engine is None:
            toks, lps, lens, hit = sample(self.forward_fn(single), ctx, self.max_new - W, self.tokenizer.eos_id, T, gen)
            return toks, lps, None, lens, hit

        def draw_fn(logits: Tensor, step: int):
            d = engine.draw(logits.float() / T, gen, version, W + step)
            return d.tokens, d.reported_logp, d.version_logp

        return sample_with(self.forward_fn(single), ctx, self.max_new - W, self.tokenizer.eos_id, draw_fn)

    def hit_eos(self, rollouts: Rollouts) -> Tensor:
        """``(R, N)`` the response ends with the end token (not cut by the budget)."""
        last = (rollouts.lengths - 1).clamp_min(0).unsqueeze(-1)
        return (rollouts.lengths > 0) & (rollouts.tokens.gather(-1, last).squeeze(-1) == self.tokenizer.eos_id)

    def rewards(self, group: Rollouts, gen: torch.Generator) -> Tensor:
        """1 for a correct answer closed by the end token, 0 otherwise (a cut answer earns nothing). A group of
        :meth:`new_group` on a problem scored by exact answer (``exact_answer``) is compared with its prompt's
        reference tokens in one tensor test (:meth:`_exact_rewards`); otherwise each answer is scored as text."""
        idx = group.info.get(PROMPTS)
        if idx is not None and self._answers is not None:
            return self._exact_rewards(group, idx)
        R, N = group.lengths.shape
        out = torch.zeros(R, N)
        eos = self.hit_eos(group).tolist()
        prompts, tokens = group.prompts.tolist(), group.tokens.tolist()
        for r in range(R):
            for n in range(N):
                if eos[r][n]:
                    out[r, n] = self._score(tuple(prompts[r][n]), tokens[r][n])
        return out

    def _exact_rewards(self, group: Rollouts, idx: Tensor) -> Tensor:
        """:meth:`rewards` of a group whose replica r answers train prompt ``idx[r]``, for a problem whose score
        is 1 exactly when the answer's text is the reference answer: a response without padding tokens among its
        own decodes (:meth:`CharTokenizer.decode`) to the characters before its first end token, so its text is
        the reference exactly when its length is the reference's plus the end token and its tokens are the
        reference's ids then the end token (which also says that it ended with the end token). A response with
        a padding token among its own (``decode`` skips it) is scored as text (:meth:`_score`)."""
        ref, ref_len = self._answers
        tokens, lengths = group.tokens, group.lengths
        R, N, T = tokens.shape
        A = ref.shape[1]
        want, n = ref[idx].unsqueeze(1), ref_len[idx].view(R, 1)  # (R, 1, A), (R, 1)
        tok = tokens[..., :A] if T >= A else torch.nn.functional.pad(tokens, (0, A - T))
        same = (tok == want) | (torch.arange(A) >= n.unsqueeze(-1))
        out = (same.all(-1) & (lengths == n)).float()
        junk = ((tokens == self.tokenizer.pad_id) & (torch.arange(T) < lengths.unsqueeze(-1))).any(-1)
        if bool(junk.any()):
            eos = self.hit_eos(group)
            for r, i in (junk & eos).nonzero().tolist():
                out[r, i] = self._score(tuple(group.prompts[r, i].tolist()), tokens[r, i].tolist())
        return out

    def _score(self, prompt: str | tuple[int, ...], response: list[int]) -> float:
        """``problem.score(prompt, decode(response))`` for a prompt given as text or as token ids, memoised on
        the prompt and the response's tokens (a pure function of them; the same answers recur every step:
        decoding and scoring them again was ~15% of an LM run's CPU time, ``benchmarks/README.md`` row 8)."""
        key = (prompt, tuple(response))
        value = self._scores.get(key)
        if value is None:
            if len(self._scores) >= 1_000_000:
                self._scores.clear()
            text = prompt if isinstance(prompt, str) else self.tokenizer.decode(prompt)
            value = self._scores[key] = self.problem.score(text, self.tokenizer.decode(response))
        return value

    def logprobs(self, params: Params, rollouts: Rollouts) -> Tensor:
        """Teacher-forced ``log π(y_t | x, y_<t)`` at the sampling temperature, ``(R, N, T)``, 0 on padding.
        Builtin: one forward of every replica (:func:`sandbox.models.replicas.sequence_logprobs`, each group's
        prompt computed once) over the responses padded to the response budget, so a replica's numbers do not depend on the batch's
        width nor on the other replicas (:attr:`width_free_logprobs`). hf: one replica at the batch width."""
        R, N, T = rollouts.tokens.shape
        if T == 0:
            return torch.zeros(R, N, 0)
        if self.backend == "hf":
            fwd = self.forward_fn(self._single(params, detach=False), use_cache=False)
            lp = sequence_logprobs(
                fwd, rollouts.prompts[0].to(self.device), rollouts.tokens[0].to(self.device), self.cfg.temperature
            )
            return (lp.float().cpu() * rollouts.mask[0]).unsqueeze(0)
        if T > self.max_new:
            raise ValueError(f"responses of {T} tokens exceed the task's budget of {self.max_new}")
        tokens = torch.nn.functional.pad(rollouts.tokens, (0, self.max_new - T))
        lp = rp.sequence_logprobs(
            self.model_cfg,
            self._stacked(params, detach=False),
            rollouts.prompts.to(self.device),
            tokens.to(self.device),
            self.cfg.temperature,
            shared_rows=rollouts.group_size,  # a group's responses share their prompt: computed once
        )
        return lp[..., :T].float().cpu() * rollouts.mask

    def sequence_inputs(self, rollouts: Rollouts):
        """Per-trajectory inputs for :meth:`sequence_logprob` (leading dims ``(R, N)``)."""
        return (rollouts.tokens, rollouts.mask, rollouts.prompts)

    def sequence_logprob(self, params: Params, trajectory) -> Tensor:
        """log π(y|x) = Σ_t mask_t log π(y_t|x, y_<t) of ONE trajectory under ONE replica's weights
        (``torch.func`` friendly; ``trajectory = (tokens (T,), mask (T,), prompt (P,))``)."""
        tokens, mask, prompt = trajectory
        single = {k: v.to(device=self.device, dtype=self.dtype) for k, v in params.items()}
        lp = sequence_logprobs(
            self.forward_fn(single, use_cache=False),
            prompt.unsqueeze(0).to(self.device),
            tokens.unsqueeze(0).to(self.device),
            self.cfg.temperature,
        )
        return (lp[0].float().cpu() * mask).sum()

    def batch_sequence_logprob(self, params: Params, batch) -> Tensor:
        """log π(y_i|x_i) of every trajectory of ONE replica in one forward (``batch = (tokens (N, T),
        mask (N, T), prompts (N, P))``): the batched form :func:`sandbox.algorithms.ghost_norms.ghost_sequence_grad_sq_norms`
        differentiates once for all trajectories."""
        tokens, mask, prompts = batch
        same = all(v.device == torch.device(self.device) and v.dtype == self.dtype for v in params.values())
        single = params if same else {k: v.to(device=self.device, dtype=self.dtype) for k, v in params.items()}
        lp = sequence_logprobs(
            self.forward_fn(single, use_cache=False),
            prompts.to(self.device),
            tokens.to(self.device),
            self.cfg.temperature,
        )
        return (lp.float().cpu() * mask).sum(-1)

    @no_grad
    def evaluate(self, params: Params) -> dict[str, Tensor]:
        """Greedy decoding on the held-out prompts: exact-answer accuracy and mean response length, ``(R,)``
        (builtin: every replica decodes the same prompts in one batch, :func:`sandbox.models.replicas.decode`,
        each sampling with its own evaluation generator, as its one-replica run does)."""
        R = next(iter(params.values())).shape[0]
        P = min(self.cfg.eval_processes, R) if self.backend == "builtin" else 1
        if (
            P > 1
        ):  # replica chunks in forked processes (sandbox.base.processes.forked_map): each replica's numbers alone
            cuts = [R * i // P for i in range(P + 1)]
            parts = forked_map(
                [
                    (lambda a=a, b=b: self._evaluate_builtin({k: v[a:b] for k, v in params.items()}))
                    for a, b in zip(cuts, cuts[1:])
                ]
            )
            return {k: torch.cat([part[k] for part in parts]) for k in parts[0]}
        if self.backend == "hf":
            eos = self.tokenizer.eos_id
            return self._evaluate(
                lambda ctx, T, gens, idx: [
                    sample(self.forward_fn(self._single(params, detach=True, r=r)), ctx, self.max_new, eos, T, gens[r])
                    for r in range(R)
                ],
                R,
            )
        return self._evaluate_builtin(params)

    def _evaluate_builtin(self, params: Params) -> dict[str, Tensor]:
        """:meth:`evaluate` of the builtin model's replicas ``params`` in this process: the replicas in chunks
        of about :data:`EVAL_ROWS` rows per decode (larger batches leave the caches: slower per replica; the
        same numbers, each replica's kernels do not depend on the others), each chunk's held-out prompts
        prefilled once for its greedy and its sampled decoding (:meth:`_eval_decoder`)."""
        R = next(iter(params.values())).shape[0]
        weights = self._stacked(params)
        N, eb = len(self.eval_prompts), self.cfg.eval_batch
        c = max(1, EVAL_ROWS // max(min(eb, N), min(eb, N * self.cfg.eval_samples)))
        parts = [
            self._evaluate(self._eval_decoder({k: v[s : s + c] for k, v in weights.items()}), min(c, R - s))
            for s in range(0, R, c)
        ]
        if len(parts) == 1:
            return parts[0]
        return {k: torch.cat([part[k] for part in parts]) for k in parts[0]}

    def _eval_decoder(self, weights: Params):
        """The ``decode`` of :meth:`_evaluate` for the replicas ``weights``: :func:`sandbox.models.replicas.decode`
        of the rows of held-out prompts ``idx``. With sampled responses (``eval_samples > 0``) every held-out
        prompt is prefilled once, in pieces of ``eval_batch`` prompts, and both passes start from its logits
        and keys/values (each row's numbers do not depend on the rows beside it, :func:`_prefill`: the same
        bits as prefilling each pass; half of an evaluation's prefill, about a fifth of its time), when
        the stored keys/values take at most :data:`EVAL_PREFILL_BYTES`."""
        eos, cfg = self.tokenizer.eos_id, self.model_cfg
        Rc = next(iter(weights.values())).shape[0]
        N, L = self.eval_ids.shape
        kv_bytes = Rc * N * L * cfg.d_model * 2 * cfg.n_layers * torch.finfo(self.dtype).bits // 8
        store: list = []  # [(last logits (Rc, N, 1, V), per layer (k, v) each (Rc, N, heads, L, hd))] once computed

        def prefilled(idx: Tensor):
            if not store:
                logits, caches = [], []
                for s in range(0, N, self.cfg.eval_batch):
                    ctx = self.eval_ids[s : s + self.cfg.eval_batch].to(self.device)
                    lg, cache = rp._prefill(cfg, weights, ctx.unsqueeze(0).expand(Rc, -1, -1), None)
                    logits.append(lg[:, :, -1:])
                    n = (Rc, ctx.shape[0], cfg.n_heads)  # (Rc·n·heads, L, hd) -> (Rc, n, heads, L, hd)
                    caches.append([(k.reshape(*n, *k.shape[1:]), v.reshape(*n, *v.shape[1:])) for k, v in cache])
                store.append(
                    (
                        torch.cat(logits, 1),
                        [
                            (torch.cat([c[i][0] for c in caches], 1), torch.cat([c[i][1] for c in caches], 1))
                            for i in range(cfg.n_layers)
                        ],
                    )
                )
            logits, cache = store[0]
            i = idx.to(logits.device)
            return logits.index_select(1, i), [
                (k.index_select(1, i).flatten(0, 2), v.index_select(1, i).flatten(0, 2)) for k, v in cache
            ]

        def decode(ctx: Tensor, T: float, gens: list, idx: Tensor):
            pre = prefilled(idx) if self.cfg.eval_samples > 0 and kv_bytes <= EVAL_PREFILL_BYTES else None
            outs = rp.decode(
                cfg,
                weights,
                ctx.unsqueeze(0).expand(Rc, -1, -1),
                self.max_new,
                eos,
                _token_draw(T, gens, shared=False),
                prefilled=pre,
                compact=True,
            )
            return [(t, lp, lens, hit) for t, lp, _, lens, hit in outs]

        return decode

    def _evaluate(self, decode, R: int) -> dict[str, Tensor]:
        """The evaluation of ``R`` replicas through ``decode(context (B, L), temperature, generators, the held-out
        prompts' indices (B,)) -> per replica (tokens, log-probs, lengths, hit_eos)`` (:func:`sample` per replica)."""
        correct, total_len, cut = [0.0] * R, [0.0] * R, [0] * R
        for s in range(0, len(self.eval_prompts), self.cfg.eval_batch):
            ctx = self.eval_ids[s : s + self.cfg.eval_batch].to(self.device)
            idx = torch.arange(s, s + ctx.shape[0])
            for r, (toks, _, lens, hit) in enumerate(decode(ctx, 0.0, [None] * R, idx)):
                rows, lens, hit = toks.cpu().tolist(), lens.cpu(), hit.cpu().tolist()
                for j in range(ctx.shape[0]):
                    if hit[j]:
                        correct[r] += self._score(self.eval_prompts[s + j], rows[j])
                    else:
                        cut[r] += 1
                total_len[r] += float(lens.sum())
        n = max(len(self.eval_prompts), 1)
        out = {
            "eval/accuracy": torch.tensor([c / n for c in correct]),
            "eval/length": torch.tensor([t / n for t in total_len]),
            "eval/cut_frac": torch.tensor([c / n for c in cut]),
        }
        if self.cfg.eval_samples > 0:
            out["eval/expected_reward"] = torch.tensor(self._sampled_reward(decode, R))
        return out

    def _sampled_reward(self, decode, R: int) -> list[float]:
        """Monte Carlo expected reward on the held-out prompts under the sampling policy (what RL
        optimises; greedy accuracy moves more slowly). A fixed generator per replica: common random numbers."""
        gens = [torch.Generator().manual_seed(12345) for _ in range(R)]
        k = self.cfg.eval_samples
        ids = self.eval_ids.repeat_interleave(k, 0)
        prompts = [p for p in self.eval_prompts for _ in range(k)]
        total = [0.0] * R
        for s in range(0, len(prompts), self.cfg.eval_batch):
            ctx = ids[s : s + self.cfg.eval_batch].to(self.device)
            idx = torch.arange(s, s + ctx.shape[0]) // k
            for r, (toks, _, _, hit) in enumerate(decode(ctx, self.cfg.temperature, gens, idx)):
                rows, hit = toks.cpu().tolist(), hit.cpu().tolist()
                for j in range(ctx.shape[0]):
                    if hit[j]:
                        total[r] += self._score(prompts[s + j], rows[j])
        return [t / max(len(prompts), 1) for t in total]


@dataclass(frozen=True)
class _PromptData:
    """A task's prompt sets, encoded (read only: shared by the tasks built with the same sets)."""

    train_prompts: list[str]
    train_ids: Tensor
    answer_ids: list[list[int]]
    """Each train prompt's reference answer then the end token."""
    eval_prompts: list[str]
    eval_ids: Tensor
    answers: tuple[Tensor, Tensor] | None
    """``answer_ids`` padded with -1 ``(n, A)`` and their lengths ``(n,)``, for a problem scored by exact answer
    (``exact_answer``: :meth:`LMTask._exact_rewards`), else None."""


_PROMPT_DATA: dict[tuple, _PromptData] = {}


def _prompt_data(problem, train_size: int, eval_size: int, seed: int, tokenizer: CharTokenizer) -> _PromptData:
    """:func:`make_prompt_sets` encoded, once per process for each problem, sizes, seed and alphabet (a pure
    function of them; drawing and encoding the mission's 2,256 prompts took about two thirds of building an LM
    task, a fixed cost of every run: ``benchmarks/README.md``)."""
    key = (problem.model_dump_json(), train_size, eval_size, seed, tokenizer.alphabet)
    data = _PROMPT_DATA.get(key)
    if data is not None:
        return data
    train, held = make_prompt_sets(problem, train_size, eval_size, seed)
    encode = tokenizer.encode
    answer_ids = [encode(a) + [tokenizer.eos_id] for _, a in train]
    answers = None
    if getattr(problem, "exact_answer", False) and answer_ids:
        width = max(len(a) for a in answer_ids)
        answers = (
            torch.tensor([a + [-1] * (width - len(a)) for a in answer_ids], dtype=torch.long),
            torch.tensor([len(a) for a in answer_ids], dtype=torch.long),
        )
    if len(_PROMPT_DATA) >= 16:
        _PROMPT_DATA.clear()
    data = _PROMPT_DATA[key] = _PromptData(
        [p for p, _ in train],
        torch.tensor([encode(p) for p, _ in train], dtype=torch.long),
        answer_ids,
        [p for p, _ in held],
        torch.tensor([encode(p) for p, _ in held], dtype=torch.long),
        answers,
    )
    return data


def _group_seeds(gen: Stream) -> int | list[int]:
    """The seed of a group's sampling stream, one ``torch.randint`` of ``gen`` (with :class:`RowGenerators`: each
    replica's from its own generator, the call of its one-replica run)."""
    if isinstance(gen, RowGenerators):
        return [int(torch.randint(SEED_BOUND, (1,), generator=g)) for g in gen.gens]
    return int(torch.randint(SEED_BOUND, (1,), generator=gen))


def _seeded(seeds: int | list[int]) -> Stream:
    """A group's sampling stream at its start: a generator seeded with ``seeds`` (a list: one per replica)."""
    if isinstance(seeds, int):
        return torch.Generator().manual_seed(seeds)
    return RowGenerators([torch.Generator().manual_seed(s) for s in seeds])


def _groups_draw(temperature: float, gens: list[torch.Generator], size: int, eos_id: int, steps: list[list[int]]):
    """The draw of :meth:`LMTask.sample_groups`: the batch's rows are ``len(gens)`` groups of ``size`` rows side
    by side; group ``g`` draws from ``gens[g]`` what :func:`_token_draw` (``shared``) draws in that group's own
    decode: at each step one ``torch.multinomial`` over the rows of the replicas that still have an unfinished
    response in the group, in replica order (its own decode's active replicas), none once every response of the
    group has ended. The rows of a group a replica has finished get token 0 (the decode ignores them: ended).
    ``steps[r][g]`` counts the steps replica ``r`` drew for group ``g`` (its own decode's width)."""
    live: Tensor | None = None  # (R, rows) the response has not ended, as each group's own decode tracks it

    def draw(z: Tensor, active: list[int], step: int):
        nonlocal live
        if live is None:
            live = torch.ones(len(steps), z.shape[1], dtype=torch.bool)
        logp = torch.log_softmax(z.float() / temperature, -1)
        probs = logp.exp().cpu()
        tok = torch.zeros(z.shape[:2], dtype=torch.long)
        here = live[active]  # (A, rows)
        for g, gen in enumerate(gens):
            cols = slice(g * size, (g + 1) * size)
            who = [i for i, going in enumerate(here[:, cols].any(1).tolist()) if going]
            if not who:
                continue
            p = probs[who, cols]
            tok[who, cols] = torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=gen).view(len(who), size)
            for i in who:
                steps[active[i]][g] += 1
        live[active] = here & (tok != eos_id)
        tok = tok.to(logp.device)
        return tok, logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1), None

    return draw


def _token_draw(temperature: float, gens: list, shared: bool):
    """The draw of :func:`sandbox.models.replicas.decode` that :func:`sandbox.models.transformer.draw` makes
    for one replica: ``softmax(logits / temperature)`` sampled with ``torch.multinomial`` (greedy at
    temperature 0, reporting the temperature-1 log-prob). Position ``j`` of the batch draws from ``gens[j]``
    in one call per replica (the call of its one-replica run); ``shared``: every position holds the same
    generator, and one call draws for all active replicas."""

    def draw(z: Tensor, active: list[int], step: int):
        if temperature == 0:
            tok = torch.argmax(z, -1)
            logp = torch.log_softmax(z.float(), -1)
        else:
            logp = torch.log_softmax(z.float() / temperature, -1)
            probs = logp.exp().cpu()
            if shared:
                tok = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=gens[0]).view(probs.shape[:-1])
            else:
                tok = torch.stack(
                    [torch.multinomial(p, 1, generator=gens[a]).squeeze(-1) for p, a in zip(probs, active)]
                )
            tok = tok.to(logp.device)
        return tok, logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1), None

    return draw
