"""prime-rl git 559b4477 export table; the mapping and its upstream sources: docs/promotion.md#mapping-tables-by-framework-version."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import tomli_w

from ..algorithms import OBJECTIVES
from ..scenario import Scenario
from ..algorithms.objectives.base import OPOB_KNOBS
from .base import Exporter, Given, Version, describe, register
from .common import MINIBATCH_INSTEAD, fixed_lag_gap, no_minibatch_rows, proximal_row, scale_rows, staleness_of
from .engine import stabilizer_rows
from .mismatch import exact_engine
from .plan import Plan

AT = "prime-rl 559b4477"
LOSS_PY = "src/prime_rl/trainer/rl/loss.py"
CUSTOM_LOSS = (
    'trainer.loss.type = "custom" with import_path to your own per-sequence loss function (LossInputs in '
    f"{LOSS_PY} carries trainer and inference log-probs, advantages and the loss mask)"
)
OFF_MASK = 1.0  # |π_θ − μ| ≤ 1, so thresholds of 1 never mask a token
ADAM_EPS = 1e-8  # torch AdamW default; prime-rl passes no eps (src/prime_rl/trainer/optim/__init__.py)

METRICS = {
    "staleness/mean": "`off_policy/mean` (orchestrator; per shipped episode, (step − 1) − oldest generating version; "
                      "split into `off_policy/in_flight/*` and `off_policy/in_queue/*`). The sandbox's value is per token",
    "staleness/max": "`off_policy/max` (orchestrator)",
    "system/dropped": "`off_policy/dropped` (queued rollouts voided by the staleness sweep since the last step); "
                      "in-flight cancellations are only logged as warnings (\"Cancelled N train episodes ...\")",
    "is/ess_ratio": "not logged (closest: `mismatch_kl/all/mean`)",
    "is/kl_k3": "`mismatch_kl/all/mean` (token mean of ρ − 1 − log ρ, the same k3 estimate of KL(μ‖π_θ))",
    "grad/norm": "`optim/grad_norm` (before clipping; logged only when trainer.optim.max_norm is set)",
    "grad/cos_prev": "not logged",
    "clip/frac": "not logged (prime-rl has no ratio clip)",
    "mask/frac": "`is_masked/mean` (mean over sequences of each sequence's masked-token fraction)",
    "dppo/masked_low": "`is_masked_low/mean`",
    "dppo/masked_high": "`is_masked_high/mean`",
}

NOTES = [
    ("One optimizer step and one published version per step with no key: src/prime_rl/trainer/rl/train.py runs "
     "forward/backward over every micro-batch of the step's batch, calls optimizer.step() once and broadcasts the "
     "new weights; there is no mini-batch or epoch key at 559b4477."),
    ("prime-rl always overlaps one step: since commit e792f9cf8 the orchestrator runs one batch ahead of the trainer "
     "(TARGET_LAG = 1 in src/prime_rl/orchestrator/orchestrator.py) and the former orchestrator.max_async_level / "
     "strict_async_level keys are rejected as unknown."),
    ("Batches are filled with the first orchestrator.batch_size rollouts to finish (train_sink.py), so the groups "
     "that age out and get dropped are the slow (long) ones: compare `off_policy/dropped` and response lengths with "
     "the sandbox's `system/dropped`."),
    ("prime-rl:docs/algorithms.md at 559b4477 writes the policy term with a clamp min(ρ, δ); the code "
     "(default_loss_fn) masks by the probability difference and never clamps ρ. This export follows the code."),
    ("launch.sh holds the setup the scenario cannot know, as placeholders: the model ([model] name, default "
     "Qwen/Qwen3-0.6B; [orchestrator.renderer] name when the model is not in renderers' MODEL_RENDERER_MAP), at "
     "least one [[orchestrator.train.source]] with env.taskset.id (prime-rl's TrainSource will not start without a "
     "train env), max_steps (otherwise the run never stops) and [inference] (the rl entrypoint starts vLLM only when "
     "it is present). [trainer] and [orchestrator] are the two tables RLConfig requires; rl.toml has both."),
]


# ------------------------------------------------------------------------------------------------
# staleness and in-flight updates
# ------------------------------------------------------------------------------------------------


def _staleness_rows(plan: Plan, scn: Scenario) -> int | None:
    """Rows for ``system.staleness``; returns the ``max_off_policy_steps`` written (None: none)."""
    st = staleness_of(scn)
    cfg = scn.system.staleness
    key = "orchestrator.max_off_policy_steps"
    if st.kind == "max_lag":
        plan.converted(
            "system.staleness.kind + system.staleness.k_max", f"max_lag, k_max = {cfg.k_max}", key, cfg.k_max,
            "both count versions of lag from the oldest version that generated the rollout to the version the batch "
            "trains on (train_sink.py: (step − 1) − policy.start), queue time included; bound inclusive: "
            "max_off_policy_steps = k_max",
        )
        if cfg.enforcement == "drop":
            plan.implicit(
                "system.staleness.enforcement", "drop",
                "prime-rl drops over-stale groups from its queue (train_sink.py) and also cancels them in flight "
                "(dispatcher.py, on_version_pending); a group cancelled in flight would have been dropped at dequeue "
                "anyway, so the trained rollouts are the same (only the freed generation capacity differs)",
            )
            plan.setup(
                "system.staleness.queue_capacity", cfg.queue_capacity,
                "groups queued or running in the sandbox; prime-rl bounds in-flight episodes instead "
                "(orchestrator.concurrency.max_inflight, adaptive, default 1024) and never runs more than one batch "
                "ahead of the trainer: size it for your fleet and compare the lag distribution (`off_policy/*`)",
            )
        else:
            plan.no_equivalent(
                "system.staleness.enforcement", "throttle",
                "prime-rl has no staleness admission: the orchestrator always dispatches up to one batch ahead of the "
                "trainer (TARGET_LAG = 1 in orchestrator.py) and drops whatever exceeds the bound, in flight or queued. "
                "The bound on trained rollouts is the same (the max_off_policy_steps row); which work is started, "
                "how much is thrown away and the lag distribution differ. Instead: check in the sandbox that the "
                "conclusion holds with system.staleness.enforcement = \"drop\", prime-rl's rule",
            )
            plan.implicit("system.staleness.queue_capacity", cfg.queue_capacity,
                          "used only with enforcement = \"drop\"")
        return cfg.k_max
    if st.kind == "sync":
        plan.no_equivalent(
            "system.staleness", "sync",
            "prime-rl has no synchronous mode since commit e792f9cf8: the orchestrator keeps generating one batch "
            "ahead while the trainer steps. The closest setting, max_off_policy_steps = 0 (pinned), trains only "
            "rollouts generated entirely by the weights being trained (lag 0 as in the sandbox), but each batch is "
            "filled with the groups that finish first while the rest are thrown away (a bias towards short "
            "responses that the sandbox's sync control does not have), and the orchestrator aborts after 10 "
            "batch-equivalents of discarded groups in a row (train_sink.py) when generation outruns a trainer step",
        )
        plan.pinned(key, 0, "closest to the synchronous control (see the system.staleness row): only lag-0 rollouts "
                            "are trained; without it prime-rl's default bound 8 would apply")
        return 0
    if st.kind == "fixed_lag":
        fixed_lag_gap(plan, scn, "prime-rl's only staleness control is the bound orchestrator.max_off_policy_steps "
                                 "(pinned to k), enforced by dropping: use enforcement = \"drop\" for that check")
        plan.pinned(key, cfg.k, f"closest bound to the fixed lag k = {cfg.k} (lag at most k instead of exactly k); "
                                "without it prime-rl's default bound 8 would apply")
        return cfg.k
    plan.no_equivalent(
        "system.staleness", describe(cfg.model_dump()),
        "ROLL's asynchronous ratio admits a fraction (α mod 1) of a batch from the oldest admissible version and lets "
        "the rollout side run α batches ahead; prime-rl runs one batch ahead and only bounds the lag. Instead: export "
        f"the scenario with system.staleness = {{kind = \"max_lag\", k_max = {st.bound}, enforcement = \"drop\"}}"
        + " (pinned as the closest bound)"
        + " after checking the conclusion in the sandbox",
    )
    plan.pinned(key, st.bound, f"closest bound to α = {cfg.alpha:g}: ceil(α) versions of lag, dropped beyond")
    return st.bound


def _partial_rollout_row(plan: Plan, scn: Scenario, bound: int | None) -> None:
    if scn.system.partial_rollouts:
        plan.implicit(
            "system.partial_rollouts", True,
            "prime-rl always keeps in-flight generations running across weight updates (update_weights in "
            "src/prime_rl/utils/client.py pauses vLLM with mode \"keep\" and resumes it), and counts the lag from "
            "the oldest version, as the sandbox does",
        )
    elif bound == 0:
        plan.implicit(
            "system.partial_rollouts", False,
            "prime-rl continues generations across weight updates, but with bound 0 any rollout that spans an update "
            "is dropped, so every trained rollout comes from one version, as in the sandbox",
        )
    else:
        plan.no_equivalent(
            "system.partial_rollouts", False,
            "prime-rl always continues in-flight generations under the new weights (no key turns this off), so a "
            "trained rollout may mix versions; the lag still counts from the oldest one and μ is recorded per token. "
            "Instead: check in the sandbox with system.partial_rollouts = true (needs a cost_model generation_time)",
        )


# ------------------------------------------------------------------------------------------------
# batch geometry
# ------------------------------------------------------------------------------------------------


def _batch_rows(plan: Plan, scn: Scenario) -> None:
    a = scn.algorithm
    plan.setup("algorithm.group_size", a.group_size,
               "responses per prompt; orchestrator.batch_size must be a multiple of it (OrchestratorConfig."
               "resolve_batching)", target="orchestrator.group_size")
    plan.setup(
        "algorithm.groups_per_step", a.groups_per_step,
        f"orchestrator.batch_size counts samples: groups_per_step × group_size = {a.groups_per_step} × {a.group_size}; "
        "one optimizer step per batch with no key (train.py steps the optimizer once per trainer step)",
        target="orchestrator.batch_size", target_value=a.groups_per_step * a.group_size,
    )
    no_minibatch_rows(plan, scn, f"prime-rl {AT.split()[-1]} takes one optimizer step per batch and has no mini-batch or "
                      "epoch key (src/prime_rl/trainer/rl/train.py steps the optimizer once per trainer step)",
                      MINIBATCH_INSTEAD)
    proximal_row(plan, scn, "behaviour", "default_loss_fn's ρ = π_θ/μ against the inference engine's log-probs "
                 "(src/prime_rl/trainer/rl/loss.py)")


# ------------------------------------------------------------------------------------------------
# objective
# ------------------------------------------------------------------------------------------------

_RATIO_OBJECTIVES = tuple(n for n in OBJECTIVES if OBJECTIVES[n].impl.ratio_clip)  # the PPO-clip surrogates
_AGG_TEXT = {
    "seq_mean_token_mean": "each sequence's token mean, averaged over sequences",
    "seq_mean_token_sum": "each sequence's token sum, averaged over sequences",
    "seq_mean_token_sum_norm": "the token sum divided by B × L_const",
}


def _src(*knobs: str) -> str:
    return " + ".join(f"algorithm.objective.{k}" for k in knobs)


def _rloo_factor(scn: Scenario) -> float:
    g = scn.algorithm.group_size
    return g / (g - 1)


def _adv_tau_base(scn: Scenario) -> float:
    c = scn.algorithm.correction
    return c.adv_tau if c.name == "dppo_mask" else 1.0


class _ObjectiveRows:
    """One row per knob of the scenario's objective."""

    def __init__(self, plan: Plan, scn: Scenario, on_policy: bool):
        self.plan, self.scn, self.obj = plan, scn, scn.algorithm.objective
        self.on_policy = on_policy
        self.exact_engine = bool(exact_engine(scn))  # the scenario's rollout engine models no mismatch
        self.done: set[str] = set()

    def row(self, kind: str, knobs: tuple[str, ...], note: str, target: str | None = None, target_value: Any = None) -> None:
        value = getattr(self.obj, knobs[0]) if len(knobs) == 1 else {k: getattr(self.obj, k) for k in knobs}
        source = _src(*knobs)
        if kind == "implicit":
            self.plan.implicit(source, value, note)
        elif kind == "no_equivalent":
            self.plan.no_equivalent(source, describe(value) if isinstance(value, dict) else value, note)
        elif kind == "converted":
            self.plan.converted(source, value, target, target_value, note)
        self.done.update(knobs)

    def unused(self, knobs: tuple[str, ...], why: str) -> None:
        knobs = tuple(k for k in knobs if k in type(self.obj).model_fields and k not in self.done)
        if knobs:
            self.row("implicit", knobs, why)

    # -- the surrogate ---------------------------------------------------------------------------
    def surrogate(self) -> None:
        name = self.obj.name
        if name == "reinforce" and self.on_policy:
            self.row("implicit", ("name",),
                     "with the bound at 0 every trained rollout comes from the weights being trained, so prime-rl's "
                     f"ρ_t = π_θ/μ ({LOSS_PY}, default_loss_fn) is 1 up to trainer/inference numerics and its gradient "
                     "Â·ρ_t·∇log π_θ is REINFORCE's Â·∇log π_θ " + ("(the sandbox has no such mismatch)" if self.exact_engine
                     else "(this scenario's rollout engine models that mismatch: see the engine row)"))
        elif name == "reinforce":
            self.row("no_equivalent", ("name",),
                     "the sandbox's REINFORCE surrogate −sg(Â)·log π_θ carries no importance ratio, while prime-rl's policy "
                     f"term −Â·π_θ/μ ({LOSS_PY}, default_loss_fn) weights each token's gradient by ρ_t = π_θ/μ: identical "
                     f"on-policy, different on stale rollouts. Instead: {CUSTOM_LOSS} returning −(advantages·trainer_logprobs) "
                     "summed over the loss mask, or check the conclusion in the sandbox with an unclipped ratio objective "
                     "(name = \"grpo\", normalize_std = false, eps_low = 1, eps_high = inf, aggregation = \"token_mean\")")
        elif name != "rloo":
            self.row("implicit", ("name",),
                     f"the ratio surrogate r·Â with r = π_θ/μ (bypass mode) is the policy term of prime-rl's loss ({LOSS_PY}: "
                     "trainer minus inference log-probs, no recomputed proximal policy); its clip knobs have their own rows")

    def clip(self) -> None:
        o = self.obj
        instead = ("prime-rl never clips π_θ/μ; its built-in trust region is the DPPO mask on π_θ − μ (trainer.loss "
                   "defaults dppo_mask_low/high = 0.2, kl_tau = 1e-3: the sandbox's dppo_mask correction), a different "
                   f"rule. Instead: {CUSTOM_LOSS} with a PPO clip (prime-rl:docs/algorithms.md shows one), or check in "
                   "the sandbox that the conclusion holds with correction dppo_mask and this clip off (eps_low = 1, "
                   "eps_high = inf)")
        if o.eps_low >= 1.0:
            self.row("implicit", ("eps_low",), "ratio floor 1 − eps_low ≤ 0 never binds (π_θ/μ > 0): no lower clip, as in prime-rl")
        else:
            self.row("no_equivalent", ("eps_low",), f"lower clip at {1 - o.eps_low:g}: {instead}")
        if math.isinf(o.eps_high):
            self.row("implicit", ("eps_high",), "no upper clip, as in prime-rl")
        else:
            self.row("no_equivalent", ("eps_high",), f"upper clip at {1 + o.eps_high:g}: {instead}")
        if o.dual_clip_c is None:
            self.row("implicit", ("dual_clip_c",), "no dual clip, as in prime-rl")
        else:
            self.row("no_equivalent", ("dual_clip_c",), f"prime-rl has no dual clip. Instead: {CUSTOM_LOSS}")

    def aggregation(self) -> None:
        o = self.obj
        max_len = ("max_len",) if "max_len" in type(o).model_fields else ()
        if o.aggregation == "token_mean":
            self.row("implicit", ("aggregation",),
                     "prime-rl divides the summed per-token loss by the step's global count of loss tokens (compute_loss, "
                     "rl_scale in src/prime_rl/trainer/rl/train.py): token-mean over the whole batch; zero-advantage "
                     "tokens stay in the count because orchestrator.train.filter_zero_advantages is pinned to false")
            self.unused(max_len, "used only with aggregation = \"seq_mean_token_sum_norm\"")
            return
        knobs = ("aggregation",) + (max_len if o.aggregation == "seq_mean_token_sum_norm" else ())
        self.row("no_equivalent", knobs,
                 f"prime-rl's aggregation is fixed to token-mean over the step's batch (the trainer divides by the global "
                 f"loss-token count, even for a custom loss); the sandbox's {o.aggregation} ({_AGG_TEXT[o.aggregation]}) "
                 "weights tokens and sequences differently. Instead: check the conclusion in the sandbox with "
                 "aggregation = \"token_mean\"")
        self.unused(max_len, "used only with aggregation = \"seq_mean_token_sum_norm\"")

    # -- the advantage ---------------------------------------------------------------------------
    def _centred(self, knobs: tuple[str, ...], what: str) -> None:
        self.row("implicit", knobs,
                 f"{what}: prime-rl's grpo algorithm (orchestrator.algo.type = \"grpo\", pinned) gives every token of "
                 "response i the advantage R_i − mean_g R (src/prime_rl/orchestrator/algo/grpo.py)")

    def _rloo(self, knobs: tuple[str, ...]) -> None:
        g, base = self.scn.algorithm.group_size, _adv_tau_base(self.scn)
        factor = _rloo_factor(self.scn)
        self.row("converted", knobs,
                 f"leave-one-out advantage R_i − mean_(j≠i) R_j = G/(G−1)·(R_i − mean_g R) = {g}/{g - 1} × prime-rl's grpo "
                 f"advantage; adv_tau multiplies only the policy term of default_loss_fn, so adv_tau = {base:g} × {g}/{g - 1} "
                 "is exact (the DPPO mask depends on the sign of Â only)",
                 target="trainer.loss.adv_tau", target_value=base * factor)

    def _std(self, knobs: tuple[str, ...]) -> None:
        self.row("no_equivalent", knobs,
                 "prime-rl's grpo advantage is R − mean_g R with no division by the group std (orchestrator/algo/grpo.py; "
                 "prime-rl:docs/algorithms.md \"Default Advantage\"); max_rl divides by the group mean instead, another estimator. "
                 "Instead: check the conclusion in the sandbox with the centred advantage (normalize_std = false, or "
                 "advantage = \"dr_grpo\"), or write a named prime-rl algorithm (prime-rl:docs/algorithms.md, \"Authoring an "
                 "Algorithm\")")

    def _opob(self, knobs: tuple[str, ...]) -> None:
        self.row("no_equivalent", knobs + tuple(k for k in OPOB_KNOBS if k in type(self.obj).model_fields),
                 "VCPO's off-policy optimal baseline needs per-trajectory gradient norms and importance weights; prime-rl "
                 "computes advantages on the orchestrator from rewards only. Instead: the VCPO fork (--framework verl-vcpo) "
                 "or the sandbox's torch components (sandbox.algorithms, used in examples/plain_torch_loop.py)")

    def advantage(self) -> None:
        o, name = self.obj, self.obj.name
        if name == "reinforce":
            self._reinforce_baseline()
        elif name in ("grpo", "dr_grpo"):
            if o.baseline == "opob":
                self._opob(("baseline",))
            else:
                self._centred(("baseline",), "group-mean baseline")
            if name == "grpo":
                if o.normalize_std:
                    self._std(("normalize_std", "eps_std", "std_unbiased"))
                else:
                    self.row("implicit", ("normalize_std",), "no std normaliser, as in prime-rl")
                    self.unused(("eps_std", "std_unbiased"), "used only by the std normaliser (normalize_std = false)")
                if o.beta_kl == 0:
                    self.row("implicit", ("beta_kl",), "no reference-model KL, as in prime-rl's rl loss (its kl_tau term "
                                                       "is the squared log-ratio to the sampler, set by the correction)")
                else:
                    self.row("no_equivalent", ("beta_kl",),
                             "prime-rl's rl loss has no KL to a frozen reference model (trainer.loss.kl_tau penalises "
                             "(log π_θ/μ)², a different term, and the grpo algorithm ships no reference log-probs). Instead: "
                             "check the conclusion in the sandbox with beta_kl = 0")
        elif name == "rloo":
            self._rloo(("name",))
        else:  # ppo, dapo: the advantage knob
            kind = o.advantage
            if kind == "grpo":
                self._std(("advantage", "eps_std"))
            elif kind == "dr_grpo":
                self._centred(("advantage",), "group-centred advantage")
            elif kind == "rloo":
                self._rloo(("advantage",))
            elif kind == "opob":
                self._opob(("advantage", "eps_std"))
            else:
                self.row("no_equivalent", ("advantage",),
                         "Â = R (no baseline): every prime-rl algorithm subtracts a baseline (grpo: the group mean; rae: a "
                         "per-agent EMA). Instead: check the conclusion in the sandbox with advantage = \"dr_grpo\"")
            self.unused(("eps_std",), "used only by the std-normalised (grpo) and opob advantages")
        self.unused(OPOB_KNOBS, "used only by the opob baseline, which this scenario does not use")

    def _reinforce_baseline(self) -> None:
        o = self.obj
        b = o.baseline
        if b == "group_mean":
            self._centred(("baseline",), "group-mean baseline")
        elif b == "leave_one_out":
            self._rloo(("baseline",))
        elif b in ("optimal", "opob"):
            self._opob(("baseline",))
        elif b == "none":
            self.row("no_equivalent", ("baseline",),
                     "Â = R (no baseline): every prime-rl algorithm subtracts a baseline. Instead: check the conclusion "
                     "in the sandbox with baseline = \"group_mean\"")
        elif b == "constant":
            self.row("no_equivalent", ("baseline", "constant_baseline"),
                     "prime-rl has no constant baseline. Instead: baseline = \"group_mean\" in the sandbox")
        else:
            self.row("no_equivalent", ("baseline", "ema_decay", "ema_init"),
                     "the sandbox's EMA of past batch-mean rewards has no prime-rl equivalent (the rae algorithm keeps a "
                     "per-agent EMA updated after every rollout, a different baseline). Instead: baseline = \"group_mean\"")
        self.unused(("constant_baseline",), "used only by baseline = \"constant\"")
        self.unused(("ema_decay", "ema_init"), "used only by baseline = \"ema\"")
        if o.normalize_std:
            self._std(("normalize_std",))
        else:
            self.row("implicit", ("normalize_std",), "no std normaliser, as in prime-rl")


def _objective_rows(plan: Plan, scn: Scenario, bound: int | None) -> None:
    obj = scn.algorithm.objective
    if obj.name in ("gspo", "cispo", "tba"):
        why = {
            "gspo": "GSPO's clipped sequence-level ratio (geometric mean of π_θ/μ) is not prime-rl's per-token policy "
                    f"term. Instead: {CUSTOM_LOSS} (it sees one whole sequence, so the sequence ratio and its clip can be "
                    "written there; the token-mean aggregation stays)",
            "cispo": "CISPO's REINFORCE term with a clipped stop-gradient weight is not prime-rl's policy term "
                     f"(gradient through ρ, masked by Δp). Instead: {CUSTOM_LOSS}",
            "tba": "trajectory balance needs log Z estimated across the group's sequences and reference log-probs; "
                   "prime-rl's custom loss sees one sequence at a time and the grpo algorithm ships no reference "
                   "log-probs. Instead: the sandbox's torch loss (sandbox.algorithms) in your own trainer",
        }[obj.name]
        plan.no_equivalent("algorithm.objective", describe(obj.model_dump()), why)
        return
    rows = _ObjectiveRows(plan, scn, on_policy=bound == 0)
    rows.surrogate()
    if obj.name in _RATIO_OBJECTIVES:
        rows.clip()
    rows.advantage()
    rows.aggregation()
    missing = [k for k in type(obj).model_fields if k not in rows.done]
    if missing:
        raise AssertionError(f"exporter bug: prime-rl objective {obj.name} knobs without a row: {missing}")


# ------------------------------------------------------------------------------------------------
# correction (the rl loss) and stabilizers
# ------------------------------------------------------------------------------------------------

_CORRECTION_GAPS = {
    "tis": "truncated importance sampling has no prime-rl key",
    "mis": "masked importance sampling has no prime-rl key",
    "geo_mis": "geometric-mean rejection has no prime-rl key",
    "icepop": "IcePop's two-sided band on π_θ/μ has no prime-rl key (the DPPO mask bands π_θ − μ, sign-aware)",
    "opsm": "off-policy sequence masking has no prime-rl key",
    "topr": "tapered off-policy REINFORCE has no prime-rl key",
}
_CORRECTION_IMPOSSIBLE = {
    "decoupled_ppo": "prime-rl never recomputes a proximal policy (the ratio is always trainer vs inference "
                     "log-probs), and LossInputs carries no proximal log-probs, so decoupled PPO cannot be written even "
                     "as a custom loss",
    "m2po_mask": "M2PO masks tokens by a statistic of the whole batch; prime-rl calls a custom loss once per sequence "
                 f"(compute_loss in {LOSS_PY}), so it cannot be written as a custom loss either",
    "m2po_clipband": "the M2PO clip band is chosen from the whole batch's tokens; prime-rl calls a custom loss once per "
                     f"sequence (compute_loss in {LOSS_PY}), so it cannot be written as a custom loss either",
    "bapo": "BAPO moves its clip bounds from statistics of the whole batch; prime-rl calls a custom loss once per "
            f"sequence (compute_loss in {LOSS_PY}), so it cannot be written as a custom loss either",
}


def _switch_off_dppo(plan: Plan, scn: Scenario, why: str) -> None:
    plan.pinned("trainer.loss.type", "default", f"prime-rl's default loss, {why}")
    plan.pinned("trainer.loss.dppo_mask_low", OFF_MASK, "mask off: π_θ − μ ≥ −1 always, so no token is masked")
    plan.pinned("trainer.loss.dppo_mask_high", OFF_MASK, "mask off: π_θ − μ ≤ 1 always, so no token is masked")
    plan.pinned("trainer.loss.kl_tau", 0.0, "no (log π_θ/μ)² penalty (prime-rl's default 1e-3)")
    if "trainer.loss.adv_tau" not in plan.settings:
        plan.pinned("trainer.loss.adv_tau", 1.0, "policy term unscaled")


def _correction_rows(plan: Plan, scn: Scenario) -> None:
    c = scn.algorithm.correction
    if c.name == "none":
        plan.implicit("algorithm.correction.name", "none",
                      "no correction: prime-rl's default loss with its DPPO mask and KL switched off (pinned keys) is the "
                      "plain ratio policy term −Â·π_θ/μ of the objective")
        _switch_off_dppo(plan, scn, "with the DPPO mask and KL switched off (the scenario has no correction)")
        return
    if c.name != "dppo_mask":
        if c.name in _CORRECTION_IMPOSSIBLE:
            note = _CORRECTION_IMPOSSIBLE[c.name]
            if c.name in ("m2po_mask", "m2po_clipband"):
                note += ". Instead: AReaL (actor.m2_threshold) for the token mask, or the sandbox's torch component"
            elif c.name == "decoupled_ppo":
                note += ". Instead: AReaL (use_decoupled_loss) or verl (bypass_mode = false)"
            else:
                note += ". Instead: the sandbox's torch component (sandbox.algorithms) in your own trainer"
        else:
            note = f"{_CORRECTION_GAPS.get(c.name, f'no equivalent of the {c.name!r} correction')} at {AT}; only through {CUSTOM_LOSS}"  # .get: issue 26
            if c.name == "mis" and c.batch_normalize:
                note += " (but batch_normalize rescales over the whole batch, which a per-sequence loss cannot)"
            if c.name == "topr" and c.split_on == "reward":
                note += " (but split_on = \"reward\" needs rewards, and LossInputs carries only advantages)"
        plan.no_equivalent("algorithm.correction", describe(c.model_dump()),
                           note + ". The exporter writes the default loss with its mask and KL off, so the run trains "
                                  "without the correction; set trainer.loss back to its defaults to use prime-rl's own "
                                  "DPPO mask instead")
        _switch_off_dppo(plan, scn, f"with the DPPO mask and KL switched off (the scenario's {c.name} has no equivalent)")
        return
    loss_type = "default" if c.variant == "dppo" else "ipo"
    plan.converted("algorithm.correction.name + algorithm.correction.variant", f"dppo_mask, {c.variant}",
                   "trainer.loss.type", loss_type,
                   f"the sandbox's dppo_mask correction restates prime-rl's {loss_type}_loss_fn ({LOSS_PY}): variant "
                   f"{c.variant!r} is trainer.loss.type = {loss_type!r}")
    if c.variant == "dppo":
        plan.as_is("algorithm.correction.dppo_mask_low", c.dppo_mask_low, "trainer.loss.dppo_mask_low",
                   "masks Â < 0 tokens with π_θ − μ < −dppo_mask_low")
        plan.as_is("algorithm.correction.dppo_mask_high", c.dppo_mask_high, "trainer.loss.dppo_mask_high",
                   "masks Â > 0 tokens with π_θ − μ > dppo_mask_high")
        plan.implicit("algorithm.correction.ipo_threshold", c.ipo_threshold, "used only by variant \"ipo\"")
    else:
        plan.as_is("algorithm.correction.ipo_threshold", c.ipo_threshold, "trainer.loss.ipo_threshold",
                   "masks tokens with |π_θ − μ| > ipo_threshold, whatever the sign of Â")
        plan.implicit("algorithm.correction.dppo_mask_low + algorithm.correction.dppo_mask_high",
                      f"{c.dppo_mask_low:g}, {c.dppo_mask_high:g}", "used only by variant \"dppo\"")
    if "trainer.loss.adv_tau" in plan.settings:  # an RLOO objective folded G/(G−1) into it
        plan.converted("algorithm.correction.adv_tau", c.adv_tau, "trainer.loss.adv_tau", plan.settings["trainer.loss.adv_tau"],
                       "times G/(G−1) for the leave-one-out advantage (objective row)")
    else:
        plan.as_is("algorithm.correction.adv_tau", c.adv_tau, "trainer.loss.adv_tau", "scales the policy term only")
    plan.as_is("algorithm.correction.kl_tau", c.kl_tau, "trainer.loss.kl_tau",
               "weight of (log π_θ/μ)² on every loss token, gradient through ρ, as in the sandbox")


STABILIZERS = {
    "gac": ("GAC has no public code (arXiv 2603.01501 only) and prime-rl no optimizer hook. Instead: place the sandbox's "
            "torch component (sandbox.algorithms.GAC, through StabilizedOptimizer) between backward and optimizer.step() "
            "of prime-rl's trainer (src/prime_rl/trainer/rl/train.py, after clip_grad_norm_): a code change, no config key"),
    "vcpo_lr": ("VCPO's ESS learning-rate rule exists only in the mit-han-lab/vcpo verl fork. Instead: export with "
                "--framework verl-vcpo, or use the sandbox's torch components (sandbox.algorithms, shown in "
                "examples/plain_torch_loop.py) in your own trainer"),
    "staleness_lr": ("prime-rl has no learning-rate rule keyed on staleness (its schedulers follow the step count). "
                     "Instead: the sandbox's torch component (sandbox.algorithms.StalenessLR) in your own trainer"),
}
STABILIZER_HOOK = ("between backward and optimizer.step() of prime-rl's trainer (src/prime_rl/trainer/rl/train.py): a "
                   "code change, no config key")


# ------------------------------------------------------------------------------------------------
# optimizer
# ------------------------------------------------------------------------------------------------


def _optimizer_rows(plan: Plan, scn: Scenario, given: Given) -> None:
    opt = scn.algorithm.optimizer
    src = "algorithm.optimizer."
    if opt.name == "sgd":
        plan.as_is(src + "name", "sgd", "trainer.optim.type", "torch SGD in both")
        plan.as_is(src + "momentum", opt.momentum, "trainer.optim.momentum", "heavy-ball momentum (prime-rl default 0.9)")
        plan.pinned("trainer.optim.nesterov", False, "the sandbox's torch SGD has no Nesterov momentum (prime-rl default true)")
        plan.as_is(src + "weight_decay", opt.weight_decay, "trainer.optim.weight_decay", "L2 in torch SGD in both")
        plan.implicit(src + "betas + " + src + "eps", f"{describe(opt.betas)}, {opt.eps:g}", "unused by SGD")
    else:
        if opt.name == "adam":
            plan.converted(src + "name", "adam", "trainer.optim.type", "adamw",
                           "prime-rl has torch AdamW (src/prime_rl/trainer/optim/__init__.py); Adam is AdamW with no weight "
                           "decay (weight decay row)")
        else:
            plan.as_is(src + "name", "adamw", "trainer.optim.type", "torch AdamW in both")
        plan.converted(src + "betas", describe(opt.betas), "trainer.optim.betas1", opt.betas[0], "β1 of the betas pair")
        plan.converted(src + "betas", describe(opt.betas), "trainer.optim.betas2", opt.betas[1], "β2 of the betas pair")
        if opt.eps == ADAM_EPS:
            plan.implicit(src + "eps", opt.eps, "torch AdamW's default eps 1e-8; prime-rl passes none")
        else:
            plan.no_equivalent(src + "eps", opt.eps,
                               "prime-rl's AdamW has no eps key (torch default 1e-8). Instead: check the conclusion in "
                               "the sandbox with eps = 1e-8")
        if opt.name == "adam" and opt.weight_decay > 0:
            plan.no_equivalent(src + "weight_decay", opt.weight_decay,
                               "Adam's weight decay is an L2 term in the gradient, AdamW's is decoupled; prime-rl has "
                               "only AdamW. Instead: check the conclusion in the sandbox with name = \"adamw\"")
            plan.pinned("trainer.optim.weight_decay", 0.0,
                        "no decay, rather than prime-rl's default decoupled 0.01 (the coupled decay has no equivalent)")
        else:
            plan.as_is(src + "weight_decay", opt.weight_decay, "trainer.optim.weight_decay",
                       "decoupled AdamW decay (prime-rl default 0.01)" if opt.name == "adamw"
                       else "Adam without decay = AdamW with weight_decay 0 (prime-rl default 0.01)")
        plan.implicit(src + "momentum", opt.momentum, "unused by Adam(W)")
    _schedule_rows(plan, scn)
    scale_rows(plan, scn, given, "trainer.optim.lr", "trainer.optim.max_norm",
               framework_lr_default=1e-6, framework_clip_default=1.0)


def _schedule_rows(plan: Plan, scn: Scenario) -> None:
    opt = scn.algorithm.optimizer
    src = "algorithm.optimizer."
    w = opt.warmup_steps
    warmup_note = ("linear warm-up over warmup_steps; prime-rl's LinearLR starts near 0 and reaches lr after w steps, "
                   "the sandbox starts at lr/w and reaches lr at step w − 1 (one step earlier)")
    if opt.schedule == "constant" and w == 0:
        plan.as_is(src + "schedule", "constant", "trainer.scheduler.type", "constant learning rate")
        plan.implicit(src + "warmup_steps", 0, "no warm-up (the constant scheduler has none)")
        return
    if opt.schedule == "constant":
        plan.converted(src + "schedule", "constant", "trainer.scheduler.type", "linear",
                       "prime-rl's constant scheduler has no warm-up: a linear scheduler with warm-up and no decay "
                       "(decay_steps pinned to 0) is warm-up then constant")
        plan.as_is(src + "warmup_steps", w, "trainer.scheduler.warmup_steps", warmup_note)
        plan.pinned("trainer.scheduler.decay_steps", 0, "no decay phase (prime-rl default 10)")
        return
    if opt.schedule == "linear":
        steps = scn.run.steps
        plan.as_is(src + "schedule", "linear", "trainer.scheduler.type",
                   "warm-up, then linear decay to min_lr over the last decay_steps steps (src/prime_rl/trainer/scheduler.py)")
        plan.converted(src + "schedule", "linear", "trainer.scheduler.decay_steps", max(steps - w, 0),
                       f"the sandbox decays over the whole run after warm-up: decay_steps = max_steps − warmup_steps, "
                       f"written for max_steps = run.steps = {steps}; set it again for your run's max_steps")
    else:
        plan.as_is(src + "schedule", "cosine", "trainer.scheduler.type",
                   "warm-up, then cosine decay to min_lr over max_steps − warmup_steps (src/prime_rl/trainer/scheduler.py); "
                   "max_steps must be set (launch.sh)")
    plan.as_is(src + "warmup_steps", w, "trainer.scheduler.warmup_steps", warmup_note)
    plan.pinned("trainer.scheduler.min_lr", 0.0, "decay to 0, as in the sandbox")


# ------------------------------------------------------------------------------------------------
# files
# ------------------------------------------------------------------------------------------------

RL_TOML_HEADER = """\
# prime-rl (PrimeIntellect-ai/prime-rl git 559b4477): the keys exported from the scenario, nothing else.
# PROMOTION.md explains every key; launch.sh adds your model, environment and run length and starts the run.
"""

LAUNCH_SH = """\
#!/usr/bin/env bash
# Start the exported prime-rl run (PrimeIntellect-ai/prime-rl git 559b4477).
#
# rl.toml holds only the keys exported from the scenario (PROMOTION.md explains each one). What the
# scenario cannot know goes into a second file written below and merged after rl.toml
# (`uv run rl @ a.toml @ b.toml` deep-merges left to right).
#
# FILL IN before running (edit the defaults here or export the variables):
#   MODEL         Hugging Face name or local path of the policy
#   ENV_ID        verifiers taskset id of the training environment. Tasksets built into verifiers (the
#                 deps/verifiers submodule at a60a606e, verifiers.v1.tasksets: harbor, lean, nemo_gym,
#                 openenv, textarena) need no install but their own settings. Any other id is a package
#                 that must be installed in your checkout first: prime-rl's own example reverse-text
#                 (configs/basic/reverse-text/rl.toml) is an opt-in uv workspace member, installed with
#                   git submodule update --init -- deps/verifiers deps/renderers deps/prime-envs deps/pydantic-config
#                   uv sync --all-extras --package prime-rl --package reverse-text
#                 and run with [orchestrator.train.source.env.agent.harness] id = "null" (see below)
#   MAX_STEPS     trainer steps of the run{max_steps_note}
#   PRIME_RL_DIR  your prime-rl checkout at 559b4477 (default: the current directory)
set -euo pipefail

MODEL="${{MODEL:-<FILL IN: model, e.g. Qwen/Qwen3-0.6B>}}"
ENV_ID="${{ENV_ID:-<FILL IN: taskset id, e.g. reverse-text once installed (see above)>}}"
MAX_STEPS="${{MAX_STEPS:-<FILL IN: number of steps>}}"
PRIME_RL_DIR="${{PRIME_RL_DIR:-.}}"

for value in "$MODEL" "$ENV_ID" "$MAX_STEPS"; do
  case "$value" in
    "<FILL IN"*) echo "launch.sh: set MODEL, ENV_ID and MAX_STEPS first (see the top of this file)" >&2; exit 2 ;;
  esac
done

EXPORT_DIR="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
SETUP="$(mktemp -d)/setup.toml"
cat > "$SETUP" <<EOF
# Your setup, not exported from the scenario.
max_steps = $MAX_STEPS

[model]
name = "$MODEL"

# One GPU for the trainer and one for vLLM: change for your node.
[deployment]
num_train_gpus = 1
num_infer_gpus = 1

# Starts a vLLM server for the policy; remove it if you run one at orchestrator.model.client.base_url.
[inference]

[[orchestrator.train.source]]
[orchestrator.train.source.env.taskset]
id = "$ENV_ID"
# Add what your environment needs (env.agent.harness, env.agent.runtime, ...: see configs/basic/*/rl.toml
# in prime-rl), the response length ([orchestrator.train.sampling] max_completion_tokens), and
# [orchestrator.renderer] name = "..." when the model is not in renderers' MODEL_RENDERER_MAP.
EOF

cd "$PRIME_RL_DIR"
exec uv run rl @ "$EXPORT_DIR/rl.toml" @ "$SETUP"
"""


def _nested(settings: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys → nested tables, sections and keys sorted with each table's ``type`` first."""
    tree: dict[str, Any] = {}
    for key, value in settings.items():
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value

    def order(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        keys = sorted(node, key=lambda k: (k != "type", k))
        return {k: order(node[k]) for k in keys}

    return order(tree)


@register
class PrimeRLExporter(Exporter):
    """prime-rl at git 559b4477: ``rl.toml`` (``[trainer]``, ``[orchestrator]``) and ``launch.sh``."""

    name = "prime-rl"
    title = "prime-rl (PrimeIntellect-ai/prime-rl git 559b4477)"
    versions = (Version("559b4477", "559b4477", "PrimeIntellect-ai/prime-rl git 559b4477 (prime-rl-configs 0.4.0)"),)
    components = property(lambda self: {"correction": frozenset({"none", "dppo_mask"}) | frozenset(_CORRECTION_GAPS)
                                        | frozenset(_CORRECTION_IMPOSSIBLE)})
    expresses: ClassVar[dict[str, str]] = {
        "max lag": "orchestrator.max_off_policy_steps = k_max (drop in flight and in queue, lag from the oldest "
                   "generating version, queue time included); throttle (admission) has no equivalent",
        "fixed lag": "no equivalent: prime-rl only bounds the lag",
        "async ratio": "no equivalent: prime-rl runs one batch ahead and only bounds the lag",
        "partial rollouts": "partly: always on (generations continue across weight updates), no key",
        "batch geometry": "orchestrator.batch_size (samples = groups_per_step × group_size), orchestrator.group_size",
        "learning rate": "trainer.optim.lr (+ trainer.optim.type, trainer.scheduler)",
        "clip range": "no equivalent: no ratio clip; the trust region is the DPPO mask trainer.loss.dppo_mask_low/high "
                      "(the sandbox's dppo_mask correction)",
        "dual clip": "no equivalent",
        "KL penalty": "trainer.loss.kl_tau penalises (log π_θ/μ)² (the dppo_mask correction); no reference-model KL",
        "loss aggregation": "partly: token-mean over the step's batch, fixed (no key)",
        "advantage": "orchestrator.algo.type = \"grpo\": R − group mean (no std); RLOO via trainer.loss.adv_tau = G/(G−1)",
        "token TIS": "no equivalent: only trainer.loss.type = \"custom\" (import_path)",
        "sequence TIS": "no equivalent: only trainer.loss.type = \"custom\" (import_path)",
        "masked IS / IcePop": "no equivalent: only trainer.loss.type = \"custom\" (import_path)",
        "M2PO": "no equivalent: batch-level token selection; prime-rl's custom loss sees one sequence",
        "decoupled PPO": "no equivalent: no recomputed proximal policy",
        "VCPO": "no equivalent: the verl-vcpo target or the sandbox's torch components",
        "GAC": "no equivalent: no public code; the sandbox's torch component in prime-rl's trainer (code change)",
    }

    def plan(self, scn: Scenario, version: Version, given: Given) -> Plan:
        plan = self.new_plan(version, "uv run rl @ rl.toml @ <your setup> (tables [trainer] and [orchestrator])")
        bound = _staleness_rows(plan, scn)
        _partial_rollout_row(plan, scn, bound)
        _batch_rows(plan, scn)
        _objective_rows(plan, scn, bound)
        _correction_rows(plan, scn)
        stabilizer_rows(plan, scn, STABILIZERS, "prime-rl", STABILIZER_HOOK)
        _optimizer_rows(plan, scn, given)
        plan.pinned("orchestrator.algo.type", "grpo",
                    "the advantage R − group mean that the objective rows rely on (prime-rl's default algorithm, written "
                    "so that the file says it)")
        plan.pinned("orchestrator.train.filter_zero_advantages", False,
                    "prime-rl by default removes zero-advantage tokens from the rl loss and from its token count "
                    "(train_sink.py, _prune_zero_advantages), which raises every other token's weight in a batch with "
                    "zero-variance groups; the sandbox keeps them in the denominator (and in the KL term)")
        plan.metrics.update(METRICS)
        plan.notes.extend(NOTES)
        return plan

    def files(self, plan: Plan) -> dict[str, str]:
        decays = plan.settings.get("trainer.scheduler.type") == "cosine" or plan.settings.get("trainer.scheduler.decay_steps", 0) > 0
        note = " (the learning-rate schedule decays over it)" if decays else ""
        return {
            "rl.toml": RL_TOML_HEADER + "\n" + tomli_w.dumps(_nested(plan.settings)),
            "launch.sh": LAUNCH_SH.format(max_steps_note=note),
        }

    def launch(self, plan: Plan, files: dict[str, str]) -> str:
        return ("# from the export directory, with a prime-rl checkout at 559b4477:\n"
                "PRIME_RL_DIR=/path/to/prime-rl MODEL=<model> ENV_ID=<taskset id> MAX_STEPS=<steps> bash launch.sh")
