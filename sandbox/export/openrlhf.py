"""OpenRLHF exporter: a scenario as the command-line flags of ``python -m openrlhf.cli.train_ppo_ray``
(openrlhf 0.11.2; argparse with dotted flag names, ``openrlhf/cli/train_ppo_ray.py``). Guide:
``docs/promotion.md``.

Files: ``flags.txt`` (the exported flags, one flag and its values per line, as argparse receives
them) and ``launch.sh`` (the same flags plus shell variables for the model, data, reward and GPUs).

Staleness (``openrlhf/trainer/ppo_trainer_async.py``). ``--train.async_enable`` runs the generator and
the trainer as two Ray actors joined by a token pool of ``Q = --train.async_queue_size`` slots. The
generator takes a slot before it generates a rollout batch; the trainer returns the slot when it
dequeues a batch, *before* training on it, and ``train_step`` broadcasts the new weights to vLLM before
the next dequeue (``openrlhf/trainer/ppo_trainer.py``). Rollout batch ``n`` therefore starts after batch
``n − Q`` was dequeued, with weights of version ``≥ n − Q``, and is trained by step ``n``:

    lag ≤ Q versions          (the batch being trained holds no slot; reached when generation is fast)

With ``--train.batch_size = groups_per_step · group_size``, ``--train.max_epochs 1`` and
``--rollout.vllm_generate_batch_size = groups_per_step`` (pinned), one rollout batch is one optimizer
step and one published version, so ``Q = k_max`` (``versions_to_optimizer_steps(k_max, 1)``). The pool
is admission only: nothing is ever dropped (``enforcement = "drop"`` has no equivalent), and a fixed lag
or ROLL's asynchronous ratio cannot be expressed. With ``--train.partial_rollout_enable`` the first
token still starts at version ``≥ n − Q``, so the bound holds for the oldest token.

Surrogate anchor (``openrlhf/trainer/ppo_utils/experience_maker.py``, ``trainer/ray/ppo_actor.py``,
``models/loss.py``). OpenRLHF recomputes the trainer's log-probs ``π_old`` for every consumed batch and
its ``ppo`` loss uses ``r = π_θ/π_old``; the sandbox's learner is in bypass mode (``r = π_θ/μ``). With
one optimizer step per batch ``r = 1`` (up to numerics), the clip never binds, and the per-token
gradient is ``−coef_t · Â · ∇log π_θ`` with the correction's weight on ``w = π_old/μ`` (the value of
``π_θ/μ``). That is the sandbox's ``reinforce`` objective exactly, and every clip objective at lag 0;
for a clip objective on stale data the sandbox's clip against ``μ`` has no OpenRLHF flag (no
equivalent). ``--actor.policy_loss_type gspo`` takes its sequence ratio against ``μ`` whenever
``--algo.advantage.is_correction_level`` is not ``off`` (and then applies no IS weight), so GSPO is
exported in bypass form by switching that flag on.

Advantages (``experience_maker.py``): ``group_norm`` = ``(R − mean_g)/(std_g + 1e-9)`` with the
Bessel-corrected std, ``dr_grpo`` = ``R − mean_g``, ``rloo`` = ``R − mean_{j≠i} R_j``; ``reinforce``,
``reinforce_baseline`` and ``flash_reinforce`` subtract batch statistics the sandbox has no baseline for.

Corrections (``models/loss.py``, ``PolicyLoss``): ``level token, mode clip`` multiplies the loss by
``clamp(w_t, LOW, HIGH)`` (token TIS); ``mode mask`` keeps ``w_t`` inside ``[LOW, HIGH]`` and zeroes the
rest (token MIS, IcePop, decoupled-PPO token rejection); ``level seq`` gates the *geometric mean*
``exp(mean_t log w_t)`` and can only mask (Geo-RS), so a sequence TIS or MIS on the product ``Π_t w_t``
has no equivalent.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..algorithms import OBJECTIVES
from ..scenario import Scenario
from ..algorithms.objectives.base import OPOB_KNOBS
from .base import Exporter, Given, Version, describe, register
from .common import (MINIBATCH_INSTEAD, STD_GUARD_TOLERANCE, fixed_lag_gap, proximal_row, scale_rows, staleness_of,
                     unmapped_stabilizer_note)
from .plan import Plan

SCRIPT = "python -m openrlhf.cli.train_ppo_ray"

ASYNC = "--train.async_enable"
QUEUE = "--train.async_queue_size"
PARTIAL = "--train.partial_rollout_enable"
LEVEL = "--algo.advantage.is_correction_level"
MODE = "--algo.advantage.is_correction_mode"
GATING = "--algo.advantage.is_correction_gating"
THRESHOLD = "--algo.advantage.is_correction_threshold"
ESTIMATOR = "--algo.advantage.estimator"
LOSS_TYPE = "--actor.policy_loss_type"
CLIP = "--actor.eps_clip_low_high"
DUAL_CLIP = "--actor.dual_clip"
AGGREGATION = "--actor.loss_agg_mode"
KL_COEF = "--algo.kl.init_coef"

CLIP_OBJECTIVES = tuple(n for n in OBJECTIVES if OBJECTIVES[n].impl.ratio_clip)  # the PPO-clip surrogates
GROUP_NORM_EPS = 1e-9  # hard-coded in experience_maker.py (group_norm)
AGGREGATIONS = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean"}
SCHEDULES = {"linear": "linear", "cosine": "cosine"}  # transformers get_scheduler names

ANCHOR = ("OpenRLHF's ppo ratio is π_θ/π_old with π_old recomputed by the trainer on the consumed batch "
          "(experience_maker.py, ppo_actor.py)")
SANDBOX_COMPONENTS = "the sandbox's torch components (sandbox.algorithms, shown in examples/plain_torch_loop.py)"

METRICS = {
    "reward/mean": "`train/rollout/reward_mean` (raw rewards of the rollout batch)",
    "loss/pg": "`train/policy_loss`",
    "grad/norm": "`train/actor_grad_norm` (DeepSpeed global norm before clipping)",
    "clip/frac": "`train/ppo_clip_ratio`, measured against the recomputed π_old: about 0 at one optimizer step per "
                 "batch, so not comparable with the sandbox's clip against μ on stale data",
    "ppo/kl": "`train/ppo_kl` (mean log π_old − log π_θ; about 0 at one step per batch)",
    "is/log_ratio_mean": "`train/vllm_kl` = mean(log μ − log π_old), the negative of the sandbox's value "
                         "(logged only when --algo.advantage.is_correction_level is not off)",
    "is/trunc_frac, mask/frac": "`train/is_filter_ratio`: fraction of tokens (level token) or sequences (level seq) "
                                "outside [LOW, HIGH], truncated (clip) or masked (mask)",
    "kl/ref_k3": "`train/kl` (with --algo.kl.use_loss)",
    "adv/mean, adv/std, adv/zero_var_groups": "not logged (`train/group_reward_std` is the mean reward std of the groups)",
    "is/ess_ratio, is/kl_k3, is/chi2": "not logged",
    "staleness/mean, staleness/max": "not logged: OpenRLHF records no per-sample version (the lag is at most "
                                     "--train.async_queue_size by construction)",
    "grad/cos_prev": "not logged",
    "lr/scale, lr/vcpo_scale": "not logged (`train/actor_lr` is the scheduled learning rate)",
    "system/step_time": "`train/timing/step_total` (wall clock per step, queue wait included)",
    "throughput/samples_per_s": "not logged: `train/rollout/num_samples` / `train/timing/step_total`",
    "system/dropped": "not applicable: OpenRLHF never drops a sample",
}


def _values(*names: str, obj: Any) -> dict[str, Any]:
    return {n: getattr(obj, n) for n in names}


def _sources(prefix: str, *names: str) -> str:
    return " + ".join(f"{prefix}.{n}" for n in names)


@register
class OpenRLHFExporter(Exporter):
    name = "openrlhf"
    title = "OpenRLHF (python -m openrlhf.cli.train_ppo_ray)"
    versions = (Version("0.11", "0.11.2", "openrlhf 0.11.2 wheel (cp311)"),)
    expresses = {
        "max lag": f"{ASYNC} {QUEUE} Q = k_max (a token pool of Q rollout batches: admission only, no drop)",
        "fixed lag": "no equivalent: the pool bounds the lag, it does not fix it",
        "async ratio": "no equivalent: no per-sample age check or fractional quota (export max lag ceil(α))",
        "partial rollouts": f"{PARTIAL} (needs {ASYNC})",
        "batch geometry": "--rollout.batch_size (prompts), --rollout.n_samples_per_prompt, --train.batch_size "
                          "(= their product / minibatches), --train.max_epochs = epochs",
        "learning rate": "--actor.adam.lr",
        "clip range": f"partly: {CLIP} LOW HIGH: anchored at the recomputed π_old, so equal to the sandbox's only at lag 0 "
                      "and for gspo",
        "dual clip": f"partly: {DUAL_CLIP} (same anchor caveat)",
        "KL penalty": f"--algo.kl.use_loss --algo.kl.estimator k3 {KL_COEF} β (token-mean only)",
        "loss aggregation": f"partly: {AGGREGATION} token-mean or seq-mean-token-mean",
        "advantage": f"{ESTIMATOR} group_norm (ε = 1e-9), dr_grpo, rloo",
        "token TIS": f"{LEVEL} token, {MODE} clip, {THRESHOLD} C_low C",
        "sequence TIS": "no equivalent: the seq level gates the geometric mean of w and can only mask",
        "masked IS / IcePop": f"token MIS, IcePop: {LEVEL} token, {MODE} mask, {THRESHOLD} LOW HIGH; "
                              "Geo-RS: level seq, mode mask",
        "M2PO": "no equivalent",
        "decoupled PPO": f"partly: token rejection: {LEVEL} token, {MODE} mask, {THRESHOLD} 0 cap (sequence rejection: "
                         "no equivalent)",
        "VCPO": "no equivalent: the mit-han-lab/vcpo verl fork (--framework verl-vcpo) or "
                "the sandbox's torch components",
        "GAC": "no equivalent: no public code; the sandbox's torch component between backward and the "
               "actor's optimizer step",
    }

    # ------------------------------------------------------------------------------------------
    def plan(self, scn: Scenario, version: Version, given: Given) -> Plan:
        plan = self.new_plan(version, f"`{SCRIPT}` (Ray + vLLM + DeepSpeed)")
        lag = staleness_of(scn)
        stale = lag.bound > 0
        is_async = _staleness(plan, scn)
        _partial_rollouts(plan, scn, is_async)
        _batch(plan, scn)
        _objective(plan, scn, stale, scn.algorithm.proximal)
        _minibatch_loss(plan, scn)
        _correction(plan, scn)
        _stabilizers(plan, scn)
        _optimizer(plan, scn, given)
        plan.metrics = dict(METRICS)
        plan.notes += [
            (f"Anchor: {ANCHOR}; the sandbox uses π_θ/μ (bypass) by default. With one optimizer step per batch "
             "π_old equals π_θ, so OpenRLHF's ppo loss gives −coef·Â·∇log π_θ with the correction weight on "
             "w = π_old/μ (the value of π_θ/μ): the sandbox's reinforce objective, and every clip objective at lag 0."),
            ("Without partial rollouts OpenRLHF generates a whole rollout batch (all prompts of a step) at one weight "
             "version while it holds the vLLM lock; the sandbox's workers generate group by group."),
            "flags.txt holds only the exported flags; launch.sh adds your model, data, reward and GPUs.",
        ]
        return plan

    def files(self, plan: Plan) -> dict[str, str]:
        lines = [line for key, value in plan.settings.items() if (line := flag_line(key, value))]
        return {"flags.txt": "\n".join(lines) + "\n", "launch.sh": _launch_script(plan, lines)}

    def launch(self, plan: Plan, files: dict[str, str]) -> str:
        return ("MODEL_PATH=<hf model or path> PROMPT_DATASET=<hf dataset or path> "
                "REWARD=<reward server URL or reward_func .py> bash launch.sh")


# ----------------------------------------------------------------------------------------------
# flags
# ----------------------------------------------------------------------------------------------


def _token(value: Any) -> str:
    if isinstance(value, bool):
        raise TypeError("exporter bug: booleans are bare flags, not values")
    if isinstance(value, float):
        return repr(value)
    return shlex.quote(str(value))


def flag_line(key: str, value: Any) -> str | None:
    """One line of flags.txt: a bare flag for ``True`` (store_true), nothing for ``False``."""
    if value is True:
        return key
    if value is False or value is None:
        return None
    if isinstance(value, (list, tuple)):
        return " ".join([key, *(_token(v) for v in value)])
    return f"{key} {_token(value)}"


SETUP_VARIABLES = [
    ("MODEL_PATH", ":?set MODEL_PATH to a Hugging Face model name or local path", "actor model"),
    ("PROMPT_DATASET", ":?set PROMPT_DATASET to a Hugging Face dataset name or path", "prompts"),
    ("INPUT_KEY", ":-input", "prompt field of the dataset"),
    ("LABEL_KEY", ":-label", "field passed to the reward as labels (must exist in the dataset)"),
    ("REWARD", ":?set REWARD to a reward server URL or a Python file defining reward_func(queries, prompts, labels)",
     "verifiable reward"),
    ("NUM_NODES", ":-1", "actor (DeepSpeed) nodes"),
    ("GPUS_PER_NODE", ":-8", "actor GPUs per node; --train.batch_size must be a multiple of all actor GPUs"),
    ("VLLM_ENGINES", ":-4", "vLLM engines generating (the sandbox's rollout workers)"),
    ("VLLM_TP", ":-1", "tensor parallel size of each engine"),
    ("MAX_NEW_TOKENS", ":-1024", "maximum response length"),
    ("NUM_EPISODES", ":-1", "passes over the prompts: optimizer steps = prompts x episodes / --rollout.batch_size"),
    ("SAVE_PATH", ":-./ckpt/sandbox-export", "checkpoints"),
    ("TENSORBOARD_DIR", ":-./runs/openrlhf", "metrics (names in PROMOTION.md)"),
]

SETUP_FLAGS = [
    ("--actor.model_name_or_path", "MODEL_PATH"),
    ("--data.prompt_dataset", "PROMPT_DATASET"),
    ("--data.input_key", "INPUT_KEY"),
    ("--data.label_key", "LABEL_KEY"),
    ("--reward.remote_url", "REWARD"),
    ("--actor.num_nodes", "NUM_NODES"),
    ("--actor.num_gpus_per_node", "GPUS_PER_NODE"),
    ("--vllm.num_engines", "VLLM_ENGINES"),
    ("--vllm.tensor_parallel_size", "VLLM_TP"),
    ("--rollout.max_new_tokens", "MAX_NEW_TOKENS"),
    ("--train.num_episodes", "NUM_EPISODES"),
    ("--ckpt.output_dir", "SAVE_PATH"),
    ("--logger.tensorboard_dir", "TENSORBOARD_DIR"),
]


def _launch_script(plan: Plan, exported: list[str]) -> str:
    out = [
        "#!/usr/bin/env bash",
        f"# OpenRLHF {plan.release} run exported by `sandbox export`; PROMOTION.md explains every exported flag.",
        "# Needs openrlhf==" + plan.release + " with vLLM on the GPU machines. On several nodes start Ray first",
        "# (ray start --head / ray start --address=...) or submit this command with `ray job submit`.",
        "# Extra flags are passed through, e.g. `bash launch.sh --data.apply_chat_template`.",
        "set -euo pipefail",
        "",
        "# ---- Your setup: fill these in (they are not exported from the scenario) ----",
    ]
    for name, expansion, what in SETUP_VARIABLES:
        out.append(f'{name}="${{{name}{expansion}}}"' + (f"  # {what}" if expansion.startswith(":-") else ""))
    out += ["", "SETUP_FLAGS=("]
    out += [f'  {flag} "${var}"' for flag, var in SETUP_FLAGS]
    out += [")", "", "# ---- Exported from the scenario: the same lines as flags.txt ----", "EXPORTED_FLAGS=("]
    out += [f"  {line}" for line in exported]
    out += [")", "", f'exec {SCRIPT} "${{SETUP_FLAGS[@]}}" "${{EXPORTED_FLAGS[@]}}" "$@"', ""]
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# staleness and batch geometry
# ----------------------------------------------------------------------------------------------


def _staleness(plan: Plan, scn: Scenario) -> bool:
    """Rows for ``system.staleness``; returns whether the asynchronous trainer is written."""
    st = scn.system.staleness
    value = describe(st.model_dump())
    sync_note = ("without --train.async_enable OpenRLHF runs the synchronous PPOTrainer (generate a rollout batch, "
                 "train on it, broadcast the weights, repeat): lag 0")
    if st.kind == "sync":
        plan.implicit("system.staleness", value, sync_note)
        return False
    if st.kind == "fixed_lag":
        if st.k == 0:
            plan.implicit("system.staleness", value, f"a fixed lag of 0 is synchronous; {sync_note}")
        else:
            fixed_lag_gap(plan, scn, f"In OpenRLHF that bound is {ASYNC} {QUEUE} {st.k}")
        return False
    if st.kind == "async_ratio":
        if st.alpha == 0:
            plan.implicit("system.staleness", value, f"α = 0 is synchronous; {sync_note}")
        else:
            k = staleness_of(scn).bound
            bound = f"k_max = {k}" if k is not None else "a finite k_max"
            plan.no_equivalent(
                "system.staleness", value,
                "ROLL's asynchronous ratio drops groups dispatched before version n − ceil(α) at dequeue and admits "
                "only a fraction (α mod 1) of a batch from the oldest version; OpenRLHF has no per-sample age check "
                f"and no quota. Instead: export with system.staleness = {{kind = \"max_lag\", {bound}}} "
                f"({ASYNC} {QUEUE} k_max), after checking in the sandbox that the conclusion holds under that control",
            )
        return False
    if st.k_max == 0:
        plan.implicit("system.staleness", value, f"k_max = 0 is synchronous; {sync_note}")
        return False
    plan.converted("system.staleness.kind", "max_lag", ASYNC, True,
                   "PPOTrainerAsync: generator and trainer in two Ray actors joined by a token pool "
                   "(openrlhf/trainer/ppo_trainer_async.py)")
    plan.converted(
        "system.staleness.k_max", st.k_max, QUEUE, st.k_max,
        "Q = k_max. The generator takes one of Q slots per rollout batch and the trainer returns it when it dequeues "
        "the batch, before training; each step broadcasts its weights before the next dequeue. Batch n starts with "
        "weights of version ≥ n − Q and is trained by step n: lag ≤ Q versions, reached when generation outpaces "
        "training (one rollout batch = one optimizer step = one version, pinned below)",
    )
    knobs = "system.staleness.enforcement + system.staleness.queue_capacity"
    knob_value = describe({"enforcement": st.enforcement, "queue_capacity": st.queue_capacity})
    if st.enforcement == "throttle":
        plan.implicit(knobs, knob_value,
                      "admission: the generator waits for a free slot, so no batch can exceed the bound (the sandbox's "
                      "drop of jobs still over k_max, counted in system/dropped, has nothing to drop here); "
                      "queue_capacity is not used by throttle")
    else:
        plan.no_equivalent(
            knobs, knob_value,
            "OpenRLHF has no per-sample age check: its token pool only makes the generator wait, so the bound "
            f"k_max holds ({QUEUE} {st.k_max}) but nothing is generated beyond it and nothing is dropped, while the "
            "sandbox's workers run ahead into a queue of queue_capacity groups and discard over-stale groups at "
            "dequeue (wasted generation, a different lag distribution within the bound). Instead: check the "
            "conclusion in the sandbox with --set system.staleness.enforcement=throttle, which is what OpenRLHF does",
        )
    return True


def _partial_rollouts(plan: Plan, scn: Scenario, is_async: bool) -> None:
    if not scn.system.partial_rollouts:
        plan.implicit("system.partial_rollouts", False,
                      f"{PARTIAL} is off by default: generation holds the vLLM lock, so a batch never mixes weights")
    elif is_async:
        plan.as_is("system.partial_rollouts", True, PARTIAL,
                   "vLLM pause → weight update → resume: in-flight responses continue under the new weights and keep "
                   "each token's rollout log-prob (trainer/ppo_trainer_async.py); the first token still starts at "
                   "version ≥ n − Q, so the lag bound holds for the oldest token as in the sandbox")
    else:
        plan.no_equivalent("system.partial_rollouts", True,
                           f"{PARTIAL} requires {ASYNC}, which this export does not write (see system.staleness). "
                           "Instead: export the scenario with a max_lag control")


def _batch(plan: Plan, scn: Scenario) -> None:
    a = scn.algorithm
    samples = a.groups_per_step * a.group_size
    plan.setup("algorithm.group_size", a.group_size,
               "responses per prompt (the group of the group-relative advantages)", "--rollout.n_samples_per_prompt")
    plan.setup("algorithm.groups_per_step", a.groups_per_step,
               "prompts per rollout batch = per optimizer step; check it against your data", "--rollout.batch_size")
    m, E = a.minibatches, a.epochs
    if m == 1:
        plan.converted("algorithm.minibatches", m, "--train.batch_size", samples,
                       f"groups_per_step × group_size = {samples} samples per optimizer step: one step per rollout batch, "
                       "as in the sandbox (a smaller value takes several steps per batch and adds lag); must be a "
                       "multiple of --train.micro_batch_size × actor GPUs")
    else:
        plan.converted("algorithm.minibatches", m, "--train.batch_size", samples // m,
                       f"groups_per_step × group_size / minibatches = {samples // m} samples per optimizer step: {m} steps "
                       "per rollout batch and one weight broadcast after them, as the sandbox's mini-batches "
                       "(OpenRLHF's DataLoader reshuffles the samples every epoch, so its mini-batches mix groups: the "
                       "same lags per step, other data per step); must be a multiple of --train.micro_batch_size × "
                       "actor GPUs")
    if E == 1:
        plan.converted("algorithm.epochs", E, "--train.max_epochs", 1,
                       "one pass over each rollout batch" + (": one optimizer step per version" if m == 1 else ""))
    else:
        plan.converted("algorithm.epochs", E, "--train.max_epochs", E,
                       f"{E} passes over each rollout batch (trainer/ray/ppo_actor.py ppo_train), one weight broadcast "
                       "after the last")
    plan.pinned("--rollout.vllm_generate_batch_size", a.groups_per_step,
                "generate exactly one rollout batch at a time: a larger value keeps the extra samples in a buffer that "
                "later steps consume, which adds lag beyond the queue bound")


# ----------------------------------------------------------------------------------------------
# objective
# ----------------------------------------------------------------------------------------------


def _reinforce_twin(obj: Any) -> str:
    """The sandbox objective OpenRLHF trains at one optimizer step per batch: REINFORCE with the same
    advantages and aggregation, as a ``--set`` value."""
    kind = getattr(obj, "advantage", None)
    if obj.name in ("grpo", "dr_grpo"):
        kind = "opob" if obj.baseline == "opob" else ("grpo" if getattr(obj, "normalize_std", False) else "dr_grpo")
    elif obj.name == "rloo":
        kind = "rloo"
    baseline, norm = {"grpo": ("group_mean", "true"), "dr_grpo": ("group_mean", "false"),
                      "rloo": ("leave_one_out", "false"), "reward": ("none", "false"),
                      "opob": ("opob", "true")}[kind]
    return (f"algorithm.objective={{name=\"reinforce\",baseline=\"{baseline}\",normalize_std={norm},"
            f"aggregation=\"{obj.aggregation}\"}}")


def _minibatch_loss(plan: Plan, scn: Scenario) -> None:
    """OpenRLHF recomputes π_old once per rollout batch: the sandbox's ``proximal = "batch_start"``.
    The REINFORCE and CISPO mappings rely on ratio 1 (one step per batch)."""
    a = scn.algorithm
    proximal_row(plan, scn, "batch_start", f"{ANCHOR}")
    if a.updates_per_batch > 1 and a.objective.name in ("reinforce", "cispo"):
        plan.no_equivalent("algorithm.minibatches + algorithm.epochs", f"{a.minibatches} x {a.epochs}",
                           f"OpenRLHF's ppo loss stands in for the sandbox's {a.objective.name} objective only while "
                           "π_old is the weights being trained (ratio 1); from a batch's second optimizer step on its "
                           f"ratio π_θ/π_old moves and its clip binds. Instead: {MINIBATCH_INSTEAD}")


def _objective(plan: Plan, scn: Scenario, stale: bool, proximal: str = "behaviour") -> None:
    obj = scn.algorithm.objective
    p = "algorithm.objective"
    if obj.name == "tba":
        plan.no_equivalent(p, describe(obj.model_dump()),
                           "trajectory balance (a squared log-ratio loss with a learned log Z) is not an OpenRLHF loss "
                           "(--actor.policy_loss_type: ppo or gspo). Instead: "
                           f"{SANDBOX_COMPONENTS} in your own loop")
        plan.pinned(LOSS_TYPE, "ppo", "TBA is not exported (see its row): the remaining keys run the ppo loss")
        _stand_in(plan, True)
        _kl_off(plan)
        return
    _loss_type(plan, obj)
    _advantage(plan, obj, scn.algorithm.group_size)
    _clip(plan, obj, stale, proximal)
    _kl(plan, obj)
    _aggregation(plan, obj)
    if obj.name != "rloo" and not _uses_opob(obj):
        plan.implicit(_sources(p, *OPOB_KNOBS), describe(_values(*OPOB_KNOBS, obj=obj)),
                      "OPOB knobs: unused (the baseline is not opob)")


def _uses_opob(obj: Any) -> bool:
    return getattr(obj, "baseline", None) == "opob" or getattr(obj, "advantage", None) == "opob"


def _loss_type(plan: Plan, obj: Any) -> None:
    src = "algorithm.objective.name"
    if obj.name == "reinforce":
        plan.converted(src, obj.name, LOSS_TYPE, "ppo",
                       f"{ANCHOR}; with one optimizer step per batch that ratio is 1, the clip never binds and the "
                       "gradient is −Â·∇log π_θ: the REINFORCE surrogate (the clip range is left at its default)")
    elif obj.name == "gspo":
        plan.converted(src, obj.name, LOSS_TYPE, "gspo",
                       "sequence ratio s_i = exp(mean_t log(π_θ/μ)) clipped per sequence (models/loss.py), taken "
                       f"against the rollout log-probs because {LEVEL} is on (pinned with the correction)")
    elif obj.name == "cispo":
        plan.converted(src, obj.name, LOSS_TYPE, "ppo",
                       "CISPO is REINFORCE with the stop-gradient weight clip(π_θ/μ, 1−ε_low, 1+ε_high); OpenRLHF's "
                       f"ppo loss at one optimizer step per batch (ratio 1) times its token clip gate ({LEVEL} token, "
                       f"{MODE} clip) computes exactly that")
        knobs = _sources("algorithm.objective", "eps_low", "eps_high")
        value = [obj.eps_low, obj.eps_high]
        band = [1.0 - obj.eps_low, 1.0 + obj.eps_high]
        plan.converted(knobs, value, LEVEL, "token", "the gate reads each token's w = π_old/μ (the value of π_θ/μ)")
        plan.converted(knobs, value, MODE, "clip", "clamp w_t into [LOW, HIGH], gradient kept (models/loss.py)")
        plan.pinned(GATING, "ratio", "the gate reads the IS ratio itself")
        plan.converted(knobs, value, THRESHOLD, band, "[1 − ε_low, 1 + ε_high]")
    else:
        plan.converted(src, obj.name, LOSS_TYPE, "ppo",
                       "PPO clip surrogate; see the clip-range row for where its ratio is anchored")


def _advantage(plan: Plan, obj: Any, g: int) -> None:
    p = "algorithm.objective"
    if obj.name == "reinforce":
        _reinforce_advantage(plan, obj, g)
        return
    if obj.name == "rloo":
        _estimator(plan, g, "algorithm.objective.name", "rloo", "rloo",
                   "R_i − mean_{j≠i} R_j, no normalisation (experience_maker.py)")
        return
    if obj.name in ("grpo", "dr_grpo"):
        knobs = ["baseline", "normalize_std", "eps_std", "std_unbiased"] if obj.name == "grpo" else ["baseline"]
        if obj.baseline == "opob":
            _opob_gap(plan, obj, knobs, obj.name == "grpo" and obj.normalize_std)
            return
        normalize = obj.name == "grpo" and obj.normalize_std
        names = ["baseline", "normalize_std"] if obj.name == "grpo" else ["baseline"]
        src, value = _sources(p, *names), describe(_values(*names, obj=obj))
        if normalize:
            _estimator(plan, g, src, value, "group_norm",
                       "(R − mean_g)/(std_g + ε), per prompt group (experience_maker.py)")
            _group_norm_knobs(plan, obj.eps_std, obj.std_unbiased, "eps_std", "std_unbiased")
        else:
            _estimator(plan, g, src, value, "dr_grpo", "R − mean_g, no std and no batch whitening (experience_maker.py)")
            if obj.name == "grpo":
                plan.implicit(_sources(p, "eps_std", "std_unbiased"),
                              describe(_values("eps_std", "std_unbiased", obj=obj)), "unused without std normalisation")
        return
    # ppo, dapo, gspo, cispo: the advantage knob
    kind = obj.advantage
    if kind == "opob":
        _opob_gap(plan, obj, ["advantage", "eps_std"], True)
        return
    if kind == "reward":
        plan.no_equivalent(_sources(p, "advantage", "eps_std"), describe(_values("advantage", "eps_std", obj=obj)),
                           "raw rewards as advantages: OpenRLHF's estimators all subtract a baseline (reinforce and "
                           "flash_reinforce the batch mean). Instead: check the conclusion in the sandbox with "
                           "advantage = \"rloo\" or \"grpo\", which OpenRLHF has")
        _stand_in(plan, False)
        return
    estimator = {"grpo": "group_norm", "dr_grpo": "dr_grpo", "rloo": "rloo"}[kind]
    _estimator(plan, g, f"{p}.advantage", kind, estimator,
               {"group_norm": "(R − mean_g)/(std_g + ε), Bessel-corrected std (experience_maker.py)",
                "dr_grpo": "R − mean_g (experience_maker.py)",
                "rloo": "R_i − mean_{j≠i} R_j (experience_maker.py)"}[estimator])
    if kind == "grpo":
        _group_norm_knobs(plan, obj.eps_std, None, "eps_std", None)
    else:
        plan.implicit(f"{p}.eps_std", obj.eps_std, f"unused by the {kind} advantage")


def _estimator(plan: Plan, g: int, src: str, value: Any, estimator: str, note: str) -> None:
    """The advantage row, with what OpenRLHF's clamp of advantages to ``--reward.clip_range`` (±10 by
    default, models/utils.py compute_reward) does to it."""
    if estimator == "group_norm":
        bound = (g - 1) / g**0.5  # largest |z-score| with the Bessel std in a group of g
        clamp = (f"the ±10 clamp of --reward.clip_range never binds: abs(Â) ≤ (G−1)/√G = {bound:.3g} here" if bound <= 10
                 else f"abs(Â) can reach (G−1)/√G = {bound:.3g} > 10 and --reward.clip_range clamps it at ±10: widen it")
    else:
        clamp = "OpenRLHF clamps these advantages to --reward.clip_range (±10 by default): widen it if rewards can differ by more"
    plan.converted(src, value, ESTIMATOR, estimator, f"{note}; {clamp}")


def _group_norm_knobs(plan: Plan, eps: float, unbiased: bool | None, eps_name: str, unbiased_name: str | None) -> None:
    p = "algorithm.objective"
    if abs(eps - GROUP_NORM_EPS) <= STD_GUARD_TOLERANCE:
        plan.implicit(f"{p}.{eps_name}", eps,
                      f"group_norm adds 1e-9 to the group std (experience_maker.py), a zero-division guard like the "
                      f"scenario's {eps:g}: the advantages differ by at most {abs(eps - GROUP_NORM_EPS):.2g}/(std + 1e-9) "
                      "relative, below 1e-2 for any group whose reward std is at least 0.1")
    else:
        plan.no_equivalent(f"{p}.{eps_name}", eps,
                           f"group_norm hard-codes ε = 1e-9 (experience_maker.py), no flag; the scenario's {eps:g} damps "
                           f"the advantages of low-variance groups by (std + 1e-9)/(std + {eps:g}). Instead: check the "
                           f"conclusion in the sandbox with --set {p}.{eps_name}=1e-9")
    if unbiased_name is None:
        return
    if unbiased is False:
        plan.no_equivalent(f"{p}.{unbiased_name}", False,
                           "group_norm uses torch's Bessel-corrected std (rewards.std), no flag for the population "
                           f"std. Instead: check the conclusion with --set {p}.{unbiased_name}=true")
    else:
        plan.implicit(f"{p}.{unbiased_name}", unbiased,
                      "group_norm uses the Bessel-corrected std (torch default, experience_maker.py)")


def _reinforce_advantage(plan: Plan, obj: Any, g: int) -> None:
    p = "algorithm.objective"
    b, norm = obj.baseline, obj.normalize_std
    used = {"constant": ["constant_baseline"], "ema": ["ema_decay", "ema_init"]}.get(b, [])
    unused = [k for k in ("constant_baseline", "ema_decay", "ema_init") if k not in used]
    plan.implicit(_sources(p, *unused), describe(_values(*unused, obj=obj)), f"unused with baseline {b}")
    if b == "opob" or b == "optimal":
        _opob_gap(plan, obj, ["baseline", "normalize_std"], norm)
        return
    src = _sources(p, "baseline", "normalize_std", *used)
    value = describe(_values("baseline", "normalize_std", *used, obj=obj))
    if b == "group_mean" and norm:
        _estimator(plan, g, src, value, "group_norm",
                   "(R − mean_g)/(std_g + ε) with the Bessel-corrected std (experience_maker.py); the sandbox's "
                   "REINFORCE adds ε = 1e-6, OpenRLHF 1e-9 (no flag): only groups with a reward std near ε differ")
    elif b == "group_mean":
        _estimator(plan, g, src, value, "dr_grpo", "R − mean_g, no std and no batch whitening (experience_maker.py)")
    elif b == "leave_one_out" and not norm:
        _estimator(plan, g, src, value, "rloo", "R_i − mean_{j≠i} R_j, no normalisation (experience_maker.py)")
    else:
        what = ("the leave-one-out baseline divided by the group std" if b == "leave_one_out"
                else f"baseline {b}" + (" with group-std normalisation" if norm else ""))
        plan.no_equivalent(src, value,
                           f"{what}: OpenRLHF's estimators are group_norm, dr_grpo, rloo and REINFORCE variants that "
                           "subtract the batch mean (reinforce, reinforce_baseline then whiten over the batch; "
                           "flash_reinforce subtracts the rollout-batch mean), none of which is this baseline. Instead: "
                           "check the conclusion in the sandbox with baseline group_mean or leave_one_out")
        _stand_in(plan, norm)


def _opob_gap(plan: Plan, obj: Any, knobs: list[str], normalize: bool) -> None:
    names = [*knobs, *OPOB_KNOBS]
    what = ("the variance-optimal baseline" if getattr(obj, "baseline", None) == "optimal"
            else "the VCPO off-policy optimal baseline (OPOB)")
    vcpo = "the mit-han-lab/vcpo verl fork (--framework verl-vcpo) or " if "VCPO" in what else ""
    plan.no_equivalent(_sources("algorithm.objective", *names), describe(_values(*names, obj=obj)),
                       f"{what} needs per-trajectory gradient norms, which OpenRLHF does not compute. Instead: "
                       f"{vcpo}{SANDBOX_COMPONENTS} in your own loop")
    _stand_in(plan, normalize)


def _stand_in(plan: Plan, normalize: bool) -> None:
    """A critic-free estimator for a partial export whose advantage has no equivalent (OpenRLHF's
    default ``gae`` would train a critic)."""
    estimator = "group_norm" if normalize else "dr_grpo"
    plan.pinned(ESTIMATOR, estimator,
                f"stand-in so that the written run stays critic-free (the default gae trains a critic): {estimator} "
                "is not the scenario's baseline, see its no-equivalent row")


def _clip(plan: Plan, obj: Any, stale: bool, proximal: str = "behaviour") -> None:
    p = "algorithm.objective"
    if obj.name in ("reinforce", "cispo"):
        return
    clip = [obj.eps_low, obj.eps_high]
    if obj.name == "gspo":
        plan.as_is(_sources(p, "eps_low", "eps_high"), clip, CLIP,
                   "clip of the sequence ratio against μ, as in the sandbox")
        plan.implicit(f"{p}.dual_clip_c", obj.dual_clip_c,
                      "GSPO has no dual clip in the sandbox (it refuses one); --actor.dual_clip is left off")
        return
    dual = obj.dual_clip_c
    if not stale or proximal == "batch_start":
        plan.as_is(_sources(p, "eps_low", "eps_high"), clip, CLIP,
                   "at lag 0 both anchors are the current weights (μ = π_θ = π_old for the single step), so both "
                   "clips act on the same ratio" if proximal == "behaviour" else
                   "both clips act on π_θ/π_old, π_old the weights at the start of the batch (algorithm.proximal = "
                   "'batch_start')")
        if dual is None:
            plan.implicit(f"{p}.dual_clip_c", None, f"no dual clip ({DUAL_CLIP} defaults to off)")
        else:
            plan.as_is(f"{p}.dual_clip_c", dual, DUAL_CLIP, "dual clip at −c·Â for Â < 0 (models/loss.py)")
        return
    names = ["eps_low", "eps_high"] + (["dual_clip_c"] if dual is not None else [])
    plan.no_equivalent(
        _sources(p, *names), describe(_values(*names, obj=obj)),
        f"{ANCHOR}: with one optimizer step per batch it is 1, so the clip never binds and the loss carries no π_θ/μ "
        "weight, while the sandbox's clip acts on π_θ/μ (bypass), weighting stale tokens by it and cutting their "
        "gradient outside the band. No 0.11.2 flag anchors the ppo loss at the rollout log-probs. Instead: OpenRLHF "
        "trains the sandbox's reinforce objective with the same advantages and correction; check the conclusion with "
        f"--set '{_reinforce_twin(obj)}' and export that, or use a framework with a bypass mode (verl)",
    )
    if dual is None:
        plan.implicit(f"{p}.dual_clip_c", None, "no dual clip")


def _kl_off(plan: Plan) -> None:
    plan.pinned(KL_COEF, 0.0, "no KL term in the sandbox objective; OpenRLHF's default 0.01 would load a reference "
                              "model and subtract a k1 KL penalty from the reward")


def _kl(plan: Plan, obj: Any) -> None:
    beta = getattr(obj, "beta_kl", None)
    if beta is None:
        _kl_off(plan)
        return
    src = "algorithm.objective.beta_kl"
    if beta == 0:
        plan.as_is(src, 0.0, KL_COEF, "no KL: with 0 OpenRLHF creates no reference model")
    elif obj.aggregation != "token_mean":
        plan.no_equivalent(src, beta,
                           "OpenRLHF averages the KL loss over tokens (ppo_actor.py: aggregate_loss in token mode, "
                           f"whatever {AGGREGATION}); the sandbox aggregates it like the policy loss "
                           f"({obj.aggregation}). Instead: check the conclusion with --set "
                           "algorithm.objective.aggregation=token_mean")
        _kl_off(plan)
    else:
        plan.as_is(src, beta, KL_COEF, "β of the KL loss")
        plan.pinned("--algo.kl.use_loss", True, "KL as a loss term, not a reward penalty")
        plan.pinned("--algo.kl.estimator", "k3",
                    "k3(π_ref/π_θ) = π_ref/π_θ − 1 − log(π_ref/π_θ), gradient through π_θ (models/utils.py; values "
                    "clamped to [−10, 10] there)")


def _aggregation(plan: Plan, obj: Any) -> None:
    p = "algorithm.objective"
    agg = obj.aggregation
    max_len = obj.name == "dr_grpo"
    target = AGGREGATIONS.get(agg)
    if obj.name == "gspo" and agg != "seq_mean_token_mean":
        target = None
    if target is None:
        src = _sources(p, "aggregation", "max_len") if max_len else f"{p}.aggregation"
        plan.no_equivalent(src, agg,
                           f"{AGGREGATION} offers token-mean and seq-mean-token-mean only (gspo always uses the "
                           "latter; models/loss.py). Instead: check the conclusion in the sandbox with "
                           f"--set {p}.aggregation={'seq_mean_token_mean' if obj.name == 'gspo' else 'token_mean'}")
        return
    plan.converted(f"{p}.aggregation", agg, AGGREGATION, target,
                   {"token-mean": "Σ m·ℓ / Σ m over the optimizer step's whole batch (models/loss.py aggregate_loss, "
                                  "utils/loss_utils.py)",
                    "seq-mean-token-mean": "mean over responses of each response's token mean (models/loss.py "
                                           "aggregate_loss)"}[target])
    if max_len:
        plan.implicit(f"{p}.max_len", obj.max_len, "used only by seq_mean_token_sum_norm")


# ----------------------------------------------------------------------------------------------
# correction
# ----------------------------------------------------------------------------------------------


def _gate(plan: Plan, src: str, value: Any, level: str, mode: str, band: list[float], note: str) -> None:
    plan.converted(src, value, LEVEL, level, note)
    plan.converted(src, value, MODE, mode,
                   "clip: clamp w_t into [LOW, HIGH]" if mode == "clip"
                   else "mask: out-of-band units get weight 0, kept tokens their w_t")
    plan.pinned(GATING, "ratio", "the gate reads the IS ratio w = π_old/μ itself")
    plan.converted(src, value, THRESHOLD, band, "[LOW, HIGH] on the gated statistic")


def _correction(plan: Plan, scn: Scenario) -> None:
    c = scn.algorithm.correction
    obj = scn.algorithm.objective
    p = "algorithm.correction"
    full = describe(c.model_dump())
    if obj.name == "gspo":
        plan.pinned(LEVEL, "token", "with gspo this only takes the sequence ratio against the rollout log-probs μ "
                                    "(bypass, as in the sandbox); OpenRLHF then applies no IS weight (models/loss.py)")
        if c.name == "none":
            plan.implicit(p, "none", "no IS weight on the gspo loss, as in the sandbox")
        else:
            plan.no_equivalent(p, full, "OpenRLHF applies its is_correction weights to the ppo loss only "
                                        "(models/loss.py). Instead: check the conclusion in the sandbox without the "
                                        "correction, or with a ppo-type objective")
        return
    if obj.name == "cispo":
        if c.name == "none":
            plan.implicit(p, "none", "no correction on top of CISPO's own clipped weight")
        else:
            plan.no_equivalent(p, full, "OpenRLHF has one IS gate and CISPO's clipped weight uses it (see the "
                                        "objective rows). Instead: check the conclusion in the sandbox without the "
                                        "correction")
        return
    if c.name == "none":
        plan.pinned(LEVEL, "off", "no correction" + (
            "; a clip objective in the sandbox still weights by π_θ/μ through its ratio (see the clip-range row)"
            if obj.name in CLIP_OBJECTIVES else ""))
        plan.implicit(p, "none", "no correction")
        return
    if c.name == "tis" and c.level == "token":
        _gate(plan, f"{p}.name + {p}.level + {p}.C + {p}.C_low", full, "token", "clip", [c.C_low, c.cap],
              "token TIS: the loss of token t is multiplied by clamp(w_t, C_low, C) (models/loss.py); C_low = 0 is no "
              "floor" + ("; C unset is the sandbox's token default 2" if c.C is None else ""))
        return
    if c.name == "mis" and c.level == "token":
        _gate(plan, f"{p}.name + {p}.level + {p}.C + {p}.C_low", full, "token", "mask", [c.C_low, c.C],
              "token MIS: w_t kept inside [C_low, C], 0 outside (models/loss.py)")
        plan.implicit(f"{p}.seq_weight + {p}.veto_low + {p}.veto_high",
                      describe(_values("seq_weight", "veto_low", "veto_high", obj=c)),
                      "sequence-level MIS knobs: unused at token level")
        if c.batch_normalize:
            plan.no_equivalent(f"{p}.batch_normalize", True,
                               "OpenRLHF does not rescale the kept weights to batch mean 1. Instead: check the "
                               f"conclusion with --set {p}.batch_normalize=false")
        else:
            plan.implicit(f"{p}.batch_normalize", False, "kept weights are not renormalised, as in OpenRLHF")
        return
    if c.name == "icepop":
        _gate(plan, f"{p}.name + {p}.alpha + {p}.beta", full, "token", "mask", [c.alpha, c.beta],
              "IcePop: w_t kept inside [α, β], 0 outside (models/loss.py)")
        return
    if c.name == "decoupled_ppo" and c.level == "token":
        _gate(plan, f"{p}.name + {p}.level + {p}.behave_imp_weight_cap", full, "token", "mask",
              [0.0, c.behave_imp_weight_cap],
              "tokens with w_t > cap rejected, the rest weighted by w_t (in bypass the sandbox's weight is π_θ/μ, "
              "OpenRLHF's π_old/μ has the same value)")
        plan.implicit(f"{p}.require_prox", c.require_prox, "OpenRLHF always recomputes the proximal log-probs π_old")
        return
    if c.name == "geo_mis":
        _gate(plan, f"{p}.name + {p}.lo + {p}.hi", describe(_values("lo", "hi", obj=c)), "seq", "mask", [c.lo, c.hi],
              "Geo-RS: response masked when exp(mean_t log w_t) ∉ [lo, hi] (models/loss.py, level seq)")
        knobs = f"{p}.token_weight + {p}.C"
        if c.token_weight == "none" and obj.name in CLIP_OBJECTIVES:
            plan.implicit(knobs, describe(_values("token_weight", "C", obj=c)),
                          "kept tokens: the sandbox's clip surrogate carries π_θ/μ, OpenRLHF weights them by "
                          "w_t = π_old/μ, the same value")
        else:
            kept = "min(w_t, C)" if c.token_weight == "tis" else "1"
            plan.no_equivalent(knobs, describe(_values("token_weight", "C", obj=c)),
                               f"OpenRLHF weights the kept tokens by their untruncated w_t (models/loss.py); the sandbox "
                               f"by {kept}. Instead: check the conclusion in the sandbox with a clip objective and "
                               "token_weight = \"none\"")
        return
    plan.pinned(LEVEL, "off", "the correction is not exported (see its row)")
    plan.no_equivalent(p, full, _correction_gap(c))


def _correction_gap(c: Any) -> str:
    token_tis = (f"nearest OpenRLHF form: token-level TIS ({LEVEL} token, {MODE} clip), a different estimator; "
                 "check it in the sandbox with --set 'algorithm.correction={name=\"tis\",level=\"token\"}'")
    if c.name == "tis":
        return ("sequence TIS truncates the product Π_t w_t; OpenRLHF's seq level gates the geometric mean "
                "exp(mean_t log w_t) and can only mask (models/loss.py: clip requires level token). Instead: a "
                f"framework with a sequence-level truncated weight (verl rollout_is = sequence, the VCPO fork), or the {token_tis}")
    if c.name == "mis":
        return ("sequence MIS keeps a response by its product Π_t w_t; OpenRLHF's seq level gates the geometric mean, "
                f"a different (length-normalised) statistic. Instead: Geo-RS (geo_mis), which OpenRLHF has, or the {token_tis}")
    if c.name == "decoupled_ppo":
        return ("sequence-level rejection drops a response when any token has w_t > cap; OpenRLHF's seq level gates the "
                "geometric mean. Instead: level = \"token\", which OpenRLHF has")
    what = {
        "opsm": "off-policy sequence masking (sign of the advantage and the mean log-ratio)",
        "m2po_mask": "M2PO's second-moment token mask",
        "m2po_clipband": "M2PO's adaptive clip band",
        "bapo": "BAPO's adaptive clip bounds",
        "topr": "TOPR's sign-split truncated weights",
        "dppo_mask": "prime-rl's DPPO probability-difference mask and KL term",
    }.get(c.name, f"the {c.name!r} correction")  # .get: a component unknown here has no equivalent (issue 26)
    return (f"{what} is not in OpenRLHF (its corrections: token or geometric-sequence gates on w, clip or mask, "
            f"models/loss.py). Instead: {SANDBOX_COMPONENTS} in your own loop, or a framework that has it")


# ----------------------------------------------------------------------------------------------
# stabilizers and optimizer
# ----------------------------------------------------------------------------------------------

STEP_HOOK = ("between backward and the optimizer step of OpenRLHF's actor (ActorPPOTrainer.training_step in "
             "openrlhf/trainer/ray/ppo_actor.py calls strategy.backward, then strategy.optimizer_step, where "
             "DeepSpeed clips and steps): a code change, no flag")


def _stabilizers(plan: Plan, scn: Scenario) -> None:
    for i, s in enumerate(scn.algorithm.stabilizers):
        src = f"algorithm.stabilizers[{i}]"
        if s.name == "vcpo_lr":
            note = ("VCPO's ESS-scaled learning rate exists only in the mit-han-lab/vcpo verl fork. Instead: export "
                    "with --framework verl-vcpo, or use the sandbox's torch components (sandbox.algorithms: "
                    f"VCPOLRConfig in a StabilizedOptimizer, shown in examples/plain_torch_loop.py) {STEP_HOOK}")
        elif s.name == "gac":
            note = ("gradient alignment control has no public code (arXiv 2603.01501 only). Instead: the sandbox's torch "
                    f"component (sandbox.algorithms: GACConfig in a StabilizedOptimizer) placed {STEP_HOOK}")
        elif s.name == "staleness_lr":
            note = ("OpenRLHF has no staleness-aware learning rate and records no per-sample version to compute the "
                    "lag from. Instead: the sandbox's torch component (sandbox.algorithms: StalenessLRConfig in a "
                    f"StabilizedOptimizer) placed {STEP_HOOK}, fed with versions you track yourself")
        else:
            note = unmapped_stabilizer_note(s, "OpenRLHF", STEP_HOOK)
        plan.no_equivalent(src, describe(s.model_dump()), note)


def _optimizer(plan: Plan, scn: Scenario, given: Given) -> None:
    opt = scn.algorithm.optimizer
    p = "algorithm.optimizer"
    if opt.name == "sgd":
        plan.no_equivalent(_sources(p, "name", "momentum", "weight_decay"),
                           describe(_values("name", "momentum", "weight_decay", obj=opt)),
                           "OpenRLHF's optimizers are DeepSpeed AdamW and Muon (--actor.optim adam or muon); nothing is "
                           "written, so AdamW with OpenRLHF's defaults applies. Instead: check the conclusion in the "
                           f"sandbox with --set {p}.name=adamw")
        plan.implicit(_sources(p, "betas", "eps"), describe(_values("betas", "eps", obj=opt)), "unused by SGD")
    else:
        if opt.name == "adam" and opt.weight_decay > 0:
            plan.no_equivalent(_sources(p, "name", "weight_decay"), describe(_values("name", "weight_decay", obj=opt)),
                               "torch Adam adds the decay to the gradient (L2); OpenRLHF's only Adam is DeepSpeed "
                               "AdamW, whose decay is decoupled. Instead: check the conclusion in the sandbox with "
                               f"--set {p}.name=adamw")
        else:
            if opt.name == "adam":
                plan.as_is(f"{p}.name", "adam", "--actor.optim",
                           "DeepSpeed AdamW; with weight decay 0 it is Adam (utils/deepspeed/deepspeed.py)")
            else:
                plan.converted(f"{p}.name", "adamw", "--actor.optim", "adam",
                               "OpenRLHF's adam is DeepSpeed AdamW, decoupled weight decay (utils/deepspeed/deepspeed.py)")
            plan.as_is(f"{p}.weight_decay", opt.weight_decay, "--actor.adam.weight_decay",
                       "biases and norm weights are exempt in OpenRLHF (deepspeed_utils.py)" if opt.weight_decay else "")
        plan.as_is(f"{p}.betas", list(opt.betas), "--actor.adam.betas", "OpenRLHF's default is 0.9 0.95")
        plan.as_is(f"{p}.eps", opt.eps, "--actor.adam.eps")
        plan.implicit(f"{p}.momentum", opt.momentum, "SGD only; unused by Adam")
    _schedule(plan, scn)
    scale_rows(plan, scn, given, "--actor.adam.lr", "--actor.max_norm", framework_lr_default=1e-6,
               framework_clip_default=1.0)


def _schedule(plan: Plan, scn: Scenario) -> None:
    opt = scn.algorithm.optimizer
    p = "algorithm.optimizer"
    steps = scn.run.steps
    if opt.schedule == "constant":
        name = "constant_with_warmup" if opt.warmup_steps else "constant"
    else:
        name = SCHEDULES[opt.schedule]
    plan.converted(f"{p}.schedule", opt.schedule, "--actor.lr_scheduler", name,
                   "transformers get_scheduler over OpenRLHF's max_steps = prompts × n_samples_per_prompt / "
                   "train.batch_size × episodes (ppo_trainer.py), the GPU run's length; the sandbox decays over run.steps")
    ratio = opt.warmup_steps / steps
    plan.converted(f"{p}.warmup_steps", opt.warmup_steps, "--actor.lr_warmup_ratio", ratio,
                   "no warm-up" if not opt.warmup_steps else
                   f"ratio = warmup_steps / run.steps = {opt.warmup_steps}/{steps}; OpenRLHF warms up for "
                   "ceil(ratio × max_steps) steps, the same number when the GPU run has run.steps optimizer steps "
                   "(its warm-up starts at 0, the sandbox's at lr/warmup_steps)")
