"""Typed, documented configuration models for every objective, correction and stabilizer.

Each model has a ``name`` discriminator (the string users write in TOML), every knob has a default
whose source is given in its description, and ``validate_group_size(G)`` raises ``ValueError`` when
the method cannot run with groups of ``G`` responses. Formulas: ``shared/reference/algorithms.md``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._tensor import Aggregation


class MethodConfig(BaseModel):
    """Base of all method configs: unknown keys are errors, and floats are finite except the upper
    clips ``eps_high``, where ``inf`` switches the clip off."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def validate_group_size(self, group_size: int) -> None:
        """Raise ``ValueError`` if this method cannot run with ``group_size`` responses per prompt."""
        if group_size < 1:
            raise ValueError(f"{self.name}: group_size must be >= 1, got {group_size}")  # type: ignore[attr-defined]


def _need_groups(name: str, what: str, group_size: int, minimum: int = 2) -> None:
    if group_size < minimum:
        raise ValueError(
            f"{name}: {what} needs at least {minimum} responses per prompt (group_size={group_size}); "
            f"raise group_size or choose a baseline that does not use the group"
        )


# --------------------------------------------------------------------------------------------
# Objectives
# --------------------------------------------------------------------------------------------

Baseline = Literal["none", "constant", "ema", "group_mean", "leave_one_out", "optimal", "opob"]
AdvantageKind = Literal["grpo", "dr_grpo", "rloo", "reward", "opob"]


class _OpobKnobs(MethodConfig):
    opob_weight: Literal["readme", "code"] = Field(
        "readme",
        description="OPOB weight W_i: 'readme' = w_i²‖∇log π(y_i)‖² (VCPO README, optimal per theory T10); "
        "'code' = min(w_i,C)²·w_i²·‖∇log π‖² (mit-han-lab/vcpo compute_opob_baseline) as an ablation.",
    )
    opob_clip_c: float = Field(8.0, gt=0, description="C in the 'code' OPOB weight; VCPO's sequence-TIS cap C = 8.")
    opob_leave_one_out: bool = Field(
        False,
        description="Exclude sample i from its own OPOB/optimal baseline (unbiased; theory.md T10). VCPO uses the "
        "plain batch estimate (False), which has an O(1/G) bias.",
    )
    opob_scope: Literal["group", "minibatch"] = Field(
        "group",
        description="OPOB scope: per prompt group (VCPO default) or whole mini-batch with GRPO advantages as values.",
    )


class _ClipKnobs(MethodConfig):
    eps_low: float = Field(0.2, ge=0.0, description="Lower clip: ratio floor 1 − eps_low. PPO default 0.2 (arXiv 1707.06347).")
    eps_high: float = Field(
        0.2, ge=0.0, allow_inf_nan=True, description="Upper clip: ratio cap 1 + eps_high. PPO default 0.2; inf = no upper clip."
    )
    dual_clip_c: float | None = Field(
        None,
        description="Dual clip c > 1 bounding the loss of negative-advantage tokens at −c·Â (arXiv 1912.09729); "
        "None disables it. verl clip_ratio_c = 3.0.",
    )

    @model_validator(mode="after")
    def _check_clip(self):
        if self.eps_low > 1.0:
            raise ValueError(f"eps_low={self.eps_low} gives a negative ratio floor; use eps_low <= 1")
        if self.dual_clip_c is not None and self.dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c must be > 1 (got {self.dual_clip_c}); use None to disable")
        return self


class ReinforceConfig(_OpobKnobs):
    """REINFORCE on the sequence log-probability with a baseline (Williams 1992; algorithms.md §1.1).

    ``L = −(1/B) Σ_i sg(R_i − b_i) log π_θ(y^i|x)`` (seq-mean-token-sum)."""

    name: Literal["reinforce"] = "reinforce"
    baseline: Baseline = Field(
        "none",
        description="none | constant | ema | group_mean | leave_one_out | optimal (needs per-sequence gradient "
        "norms) | opob (VCPO). Default 'none' = textbook REINFORCE (Williams 1992).",
    )
    constant_baseline: float = Field(0.0, description="b for baseline='constant'.")
    ema_decay: float = Field(0.9, ge=0.0, lt=1.0, description="EMA decay for baseline='ema' (algorithms.md: 0.9–0.99).")
    ema_init: float = Field(0.0, description="EMA baseline before the first batch has been seen.")
    normalize_std: bool = Field(False, description="Divide advantages by the group std (+1e-6) as GRPO does.")
    aggregation: Aggregation = Field("seq_mean_token_sum", description="algorithms.md §0: REINFORCE uses seq-mean-token-sum.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        if self.baseline == "leave_one_out" or self.normalize_std:
            _need_groups(self.name, f"baseline={self.baseline!r}/normalize_std", group_size)


class GRPOConfig(_ClipKnobs, _OpobKnobs):
    """GRPO (DeepSeekMath, arXiv 2402.03300; algorithms.md §1.2): ``Â = (R − mean_g R)/(std_g R + ε_std)``,
    PPO clip surrogate, seq-mean-token-mean, optional k3 KL to ``extras['ref_logp']``."""

    name: Literal["grpo"] = "grpo"
    baseline: Literal["group_mean", "opob"] = Field(
        "group_mean", description="group_mean (GRPO) or opob (VCPO off-policy optimal baseline, needs seq_grad_sq_norms)."
    )
    eps_std: float = Field(1e-6, ge=0.0, description="ε added to the group std; verl 1e-6 (TRL uses 1e-4).")
    normalize_std: bool = Field(True, description="Divide by the group std (GRPO); False gives Dr.GRPO's centring.")
    std_unbiased: bool | None = Field(
        None,
        description="Bessel-corrected std? None = True for group_mean (torch/verl default), False (population std) "
        "for opob (VCPO norm_by_std).",
    )
    beta_kl: float = Field(0.0, ge=0.0, description="β of the k3(π_ref/π_θ) penalty; 0 in recent recipes (TRL beta=0.0).")
    aggregation: Aggregation = Field("seq_mean_token_mean", description="Original GRPO: seq-mean-token-mean.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        _need_groups(self.name, "a group-relative advantage", group_size)


class DrGRPOConfig(_ClipKnobs, _OpobKnobs):
    """Dr.GRPO (arXiv 2503.20783; algorithms.md §1.3): ``Â = R − mean_g R`` and
    ``L = −(1/(B·L_const)) Σ_{i,t} min(rÂ, clip(r)Â)``."""

    name: Literal["dr_grpo"] = "dr_grpo"
    baseline: Literal["group_mean", "opob"] = Field("group_mean", description="group_mean (Dr.GRPO) or opob.")
    max_len: int | None = Field(
        None, gt=0, description="L_const (max completion length); None uses the padded length T of the batch."
    )
    aggregation: Aggregation = Field("seq_mean_token_sum_norm", description="Dr.GRPO: seq-mean-token-sum-norm.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        _need_groups(self.name, "a group-mean baseline", group_size)


class RLOOConfig(_ClipKnobs):
    """RLOO advantages ``Â_i = R_i − mean_{j≠i} R_j`` (Kool et al. 2019; Ahmadian et al. arXiv 2402.14740)
    with the PPO clip surrogate (verl ``compute_rloo_outcome_advantage`` + vanilla policy loss)."""

    name: Literal["rloo"] = "rloo"
    aggregation: Aggregation = Field("token_mean", description="verl default loss_agg_mode token-mean.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        _need_groups(self.name, "the leave-one-out baseline", group_size)


class _AdvantageKnob(MethodConfig):
    advantage: AdvantageKind = Field(
        "grpo",
        description="Critic-free advantage: grpo (mean/std), dr_grpo (centred), rloo, reward (raw R), opob.",
    )
    eps_std: float = Field(1e-6, ge=0.0, description="ε in the GRPO std normaliser (verl 1e-6).")

    def _check_adv_group(self, group_size: int) -> None:
        if self.advantage != "reward":
            _need_groups(self.name, f"advantage={self.advantage!r}", group_size)  # type: ignore[attr-defined]


class PPOConfig(_ClipKnobs, _AdvantageKnob, _OpobKnobs):
    """PPO clip with dual clip (arXiv 1707.06347, 1912.09729; algorithms.md §1.5)."""

    name: Literal["ppo"] = "ppo"
    dual_clip_c: float | None = Field(3.0, description="Dual clip c; verl clip_ratio_c = 3.0. None disables.")
    aggregation: Aggregation = Field("token_mean", description="verl default token-mean.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        self._check_adv_group(group_size)


class DAPOConfig(_ClipKnobs, _AdvantageKnob, _OpobKnobs):
    """DAPO clip-higher with token-mean over the batch (arXiv 2503.14476; algorithms.md §1.6).
    Data-side tricks (dynamic sampling, overlong shaping) are in :mod:`sandbox.algorithms.shaping`."""

    name: Literal["dapo"] = "dapo"
    eps_low: float = Field(0.2, ge=0.0, le=1.0, description="DAPO ε_low = 0.2.")
    eps_high: float = Field(0.28, ge=0.0, allow_inf_nan=True, description="DAPO clip-higher ε_high = 0.28; inf = no upper clip.")
    aggregation: Aggregation = Field("token_mean", description="DAPO: token-mean over the whole batch.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        self._check_adv_group(group_size)


class GSPOConfig(_ClipKnobs, _AdvantageKnob, _OpobKnobs):
    """GSPO sequence-level ratio ``s_i = exp(mean_t log r_{i,t})`` (arXiv 2507.18071; algorithms.md §1.7),
    implemented in the GSPO-token form so token-level corrections compose."""

    name: Literal["gspo"] = "gspo"
    eps_low: float = Field(3e-4, ge=0.0, le=1.0, description="GSPO paper ε_l = 3e-4.")
    eps_high: float = Field(4e-4, ge=0.0, allow_inf_nan=True, description="GSPO paper ε_h = 4e-4; inf = no upper clip.")
    aggregation: Aggregation = Field("seq_mean_token_mean", description="GSPO: mean over sequences.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        self._check_adv_group(group_size)


class CISPOConfig(_AdvantageKnob, _OpobKnobs):
    """CISPO (MiniMax-M1, arXiv 2506.13585; algorithms.md §1.8):
    ``ℓ_t = −sg(clip(r_t, 1−ε_low, 1+ε_high)) Â_t log π_θ``, token-mean."""

    name: Literal["cispo"] = "cispo"
    eps_low: float = Field(
        1.0, ge=0.0, le=1.0, description="1.0 = no lower bound (MiniMax-M1 imposes none; SkyRL default)."
    )
    eps_high: float = Field(
        4.0, ge=0.0, allow_inf_nan=True,
        description="4.0 → weight range [0, 5] (ScaleRL/SkyRL setting, algorithms.md); inf = no upper cap.",
    )
    aggregation: Aggregation = Field("token_mean", description="CISPO: token-mean.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        self._check_adv_group(group_size)


class TBAConfig(MethodConfig):
    """Trajectory balance with asynchrony (Bartoldson et al., arXiv 2503.18929; algorithms.md §3.5):
    ``z_k = R_k/β − log π_θ(y_k) + log π_ref(y_k)``, ``L = mean_k (sg(mean_k z) − z_k)²`` per prompt."""

    name: Literal["tba"] = "tba"
    beta: float = Field(0.012, gt=0, description="β (kl_coef) at step 0; TBA GSM8K config 0.012.")
    beta_final: float = Field(0.004, gt=0, description="β after annealing; TBA GSM8K config 0.004.")
    anneal_steps: int = Field(500, ge=0, description="Linear β annealing length in learner versions (TBA: 500).")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        _need_groups(self.name, "the VarGrad estimate of log Z", group_size)


# --------------------------------------------------------------------------------------------
# Off-policy corrections
# --------------------------------------------------------------------------------------------

Level = Literal["token", "sequence"]


class NoCorrectionConfig(MethodConfig):
    """No correction: the objective's own ratio (π_θ/μ in bypass mode, π_θ/π_prox in decoupled mode)."""

    name: Literal["none"] = "none"


class TISConfig(MethodConfig):
    """Truncated importance sampling (Yao, Liu et al., blog Aug 2025; algorithms.md §2.1–2.2):
    token ``sg(clamp(w_t, C_low, C))``, sequence ``sg(clamp(Π_t w_t, C_low, C))``."""

    name: Literal["tis"] = "tis"
    level: Level = Field("token", description="token (TIS blog) or sequence (VCPO).")
    C: float | None = Field(
        None, gt=0, description="Cap; None → 2.0 at token level (TIS blog) and 8.0 at sequence level (VCPO)."
    )
    C_low: float = Field(0.0, ge=0.0, description="Optional floor (0 = none, the common setting).")

    @property
    def cap(self) -> float:
        return self.C if self.C is not None else (2.0 if self.level == "token" else 8.0)

    @model_validator(mode="after")
    def _check(self):
        if self.C is not None and self.C_low > self.C:
            raise ValueError(f"tis: C_low={self.C_low} exceeds C={self.C}")
        return self


class MISConfig(MethodConfig):
    """Masked importance sampling (algorithms.md §2.3): token ``w_t·1[C_low ≤ w_t ≤ C]``; sequence keeps
    response i iff ``C_low ≤ Π_t w_t ≤ C`` (weight Π w or 1)."""

    name: Literal["mis"] = "mis"
    level: Level = Field("token", description="token or sequence.")
    C: float = Field(2.0, gt=0, description="Upper band edge; typical 2–3 (algorithms.md §2.3; TRL cap 3.0).")
    C_low: float = Field(0.0, ge=0.0, description="Lower band edge (0 = none; SkyRL uses 0.5).")
    seq_weight: Literal["ratio", "one"] = Field(
        "ratio", description="Surviving sequence coefficient: the ratio Π w (verl) or 1 (pure rejection)."
    )
    veto_low: float | None = Field(None, description="Veto: drop a sequence if any token has w_t < veto_low (e.g. 1e-4).")
    veto_high: float | None = Field(None, description="Veto: drop a sequence if any token has w_t > veto_high (e.g. 100).")
    batch_normalize: bool = Field(False, description="Rescale kept coefficients to batch mean 1 (verl rollout_is_batch_normalize).")

    @model_validator(mode="after")
    def _check(self):
        if self.C_low >= self.C:
            raise ValueError(f"mis: empty band [C_low={self.C_low}, C={self.C}]")
        return self


class GeoMISConfig(MethodConfig):
    """Geometric-mean rejection (Geo-RS; algorithms.md §2.4): mask response i if
    ``exp(mean_t log w_{i,t}) ∉ [lo, hi]``."""

    name: Literal["geo_mis"] = "geo_mis"
    lo: float = Field(0.999, gt=0, description="Lower edge; verl bypass preset 0.999 (SkyRL 0.99).")
    hi: float = Field(1.001, gt=0, description="Upper edge; verl bypass preset 1.001 (SkyRL 1.01).")
    token_weight: Literal["none", "tis"] = Field(
        "none", description="Surviving tokens keep weight 1 ('none': mask only) or token-TIS min(w_t, C)."
    )
    C: float = Field(2.0, gt=0, description="Token TIS cap when token_weight='tis' (TIS blog C=2).")

    @model_validator(mode="after")
    def _check(self):
        if self.lo >= self.hi:
            raise ValueError(f"geo_mis: empty band [lo={self.lo}, hi={self.hi}]")
        return self


class IcePopConfig(MethodConfig):
    """IcePop (Ring-1T, arXiv 2510.18855; algorithms.md §2.5): ``coef_t = w_t·1[α ≤ w_t ≤ β]``."""

    name: Literal["icepop"] = "icepop"
    alpha: float = Field(0.5, ge=0, description="Lower band edge; OpenRLHF/verl preset 0.5 [unverified vs paper].")
    beta: float = Field(5.0, gt=0, description="Upper band edge; OpenRLHF/verl preset 5 [unverified vs paper].")

    @model_validator(mode="after")
    def _check(self):
        if self.alpha >= self.beta:
            raise ValueError(f"icepop: empty band [alpha={self.alpha}, beta={self.beta}]")
        return self


class OPSMConfig(MethodConfig):
    """Off-policy sequence masking (DeepSeek-V3.2, arXiv 2512.02556; algorithms.md §2.6): drop response i
    iff ``Â_i < 0`` and ``mean_t (log μ − log π_θ) > δ``."""

    name: Literal["opsm"] = "opsm"
    delta: float = Field(1e-4, description="δ; slime default 1e-4 (TRL docs example 0.5). Task dependent.")


class DecoupledPPOConfig(MethodConfig):
    """AReaL decoupled PPO (Fu et al. arXiv 2505.24298; Hilton et al. arXiv 2110.00641; algorithms.md §3.1):
    the per-token loss is weighted by ``sg(w_t)``, ``w = π_prox/μ``, with rejection where ``w_t > cap``; the
    trust region (objective's clip) is anchored at π_prox. Pair with the ``ppo`` objective."""

    name: Literal["decoupled_ppo"] = "decoupled_ppo"
    behave_imp_weight_cap: float = Field(5.0, gt=0, description="Reject tokens with w_t > cap; AReaL examples 5.0.")
    level: Level = Field("token", description="Rejection at token level (AReaL default) or whole sequence.")
    require_prox: bool = Field(
        False, description="Raise if prox_logp is missing (otherwise bypass: w = sg(π_θ)/μ, A-3PO-like)."
    )


class M2POMaskConfig(MethodConfig):
    """M2PO token masking, paper text / AReaL style (Zheng, Zhao, Chen arXiv 2510.01161; algorithms.md §3.2a):
    mask the fewest largest-δ² tokens so the mean δ² of the rest is below τ_M2."""

    name: Literal["m2po_mask"] = "m2po_mask"
    m2_threshold: float = Field(0.04, gt=0, description="τ_M2; 0.04 in all paper experiments (AReaL actor.m2_threshold).")
    anchor: Literal["prox", "current"] = Field(
        "prox",
        description="δ = log π_anchor − log μ: 'prox' (AReaL; falls back to sg(π_θ) in bypass) or 'current' (paper: π_θ).",
    )
    behaviour_weight: bool = Field(
        True, description="Multiply kept tokens by w = π_prox/μ as decoupled PPO does (AReaL); False = mask only."
    )


class M2POClipBandConfig(MethodConfig):
    """M2PO as in the official code (Infini-AI-Lab/M2PO ``kpo_clip_harmful_tokens``; algorithms.md §3.2b):
    adaptive PPO bounds ``[exp(−τ), exp(τ)]`` water-filled so harmful tokens' M2 ≤ budget."""

    name: Literal["m2po_clipband"] = "m2po_clipband"
    m2_budget: float = Field(0.04, gt=0, description="M2_budget; 0.04 (paper and official scripts).")
    miniclip_low: float | None = Field(
        None, description="Floor on ε_low (lower bound ≤ 1 − miniclip_low); code knob, unset in released scripts (0.3 when used)."
    )
    miniclip_high: float | None = Field(
        None, description="Floor on ε_high (upper bound ≥ 1 + miniclip_high); unset in released scripts (0.5 when used)."
    )


class BAPOConfig(MethodConfig):
    """BAPO balanced adaptive clipping (Xi et al. arXiv 2510.18927; code WooooDyy/BAPO; algorithms.md §3.3):
    absolute bounds ``[c_low, c_high]`` moved (lower first) until the positive/negative surrogate ratio
    P/N reaches the target; loss = dual-clip PPO with those bounds."""

    name: Literal["bapo"] = "bapo"
    pos_neg_target: float = Field(
        1.0, gt=0, description="Target P/N; 1.0 ⇔ positive share ρ₀ = 0.5 (paper README; code adv_ratio_target=1)."
    )
    c_low_start: float = Field(0.6, gt=0, description="a⁻; paper README 0.6.")
    c_low_max: float = Field(0.9, gt=0, description="b⁻; paper README 0.9 (code default 0.8).")
    c_high_start: float = Field(1.2, gt=0, description="a⁺; paper README 1.2.")
    c_high_max: float = Field(3.0, gt=0, description="b⁺; paper README 3.0 (code default 2.0).")
    step_low: float = Field(0.05, gt=0, description="δ⁻; code default 0.05.")
    step_high: float = Field(0.05, gt=0, description="δ⁺; code default 0.05.")
    dual_clip_c: float = Field(3.0, gt=1, description="Dual clip c = 3 (BAPO code).")
    stat: Literal["value", "gradient_carrying"] = Field(
        "value",
        description="'value': P, N from the clipped surrogate values (official code); 'gradient_carrying': count only "
        "tokens still carrying gradient ([reconstruction] of the README's intent).",
    )

    @model_validator(mode="after")
    def _check(self):
        if not (self.c_low_start <= self.c_low_max <= 1.0 <= self.c_high_start <= self.c_high_max):
            raise ValueError(
                "bapo: need c_low_start <= c_low_max <= 1 <= c_high_start <= c_high_max, got "
                f"{self.c_low_start}, {self.c_low_max}, {self.c_high_start}, {self.c_high_max}"
            )
        return self


class TOPRConfig(MethodConfig):
    """Tapered off-policy REINFORCE (Le Roux et al. arXiv 2503.14286; algorithms.md §3.4):
    ``c_i = 1`` if ``R_i ≥ 0`` else ``sg(clamp(π_θ(y)/μ(y), 0, 1))``. Pair with ``reinforce``."""

    name: Literal["topr"] = "topr"
    level: Level = Field("sequence", description="sequence (paper) or token (ROLL's variant).")
    split_on: Literal["reward", "advantage"] = Field(
        "reward", description="Sign test on R (paper; baseline shifts R) or on the advantage."
    )
    positive_weight: float = Field(1.0, ge=0, description="ROLL topr_positive_weight (default 1.0).")
    negative_weight: float = Field(1.0, ge=0, description="ROLL topr_negative_weight (default 1.0).")


class DPPOMaskConfig(MethodConfig):
    """prime-rl DPPO mask + KL (prime-rl ``default_loss_fn``; arXiv 2602.04879; algorithms.md §3.6):
    mask tokens whose probability moved too far in the advantage direction, add ``kl_tau·(log ρ)²``."""

    name: Literal["dppo_mask"] = "dppo_mask"
    variant: Literal["dppo", "ipo"] = Field("dppo", description="dppo: sign-aware Δp mask; ipo: symmetric |Δp| > ipo_threshold.")
    dppo_mask_low: float = Field(0.2, ge=0, description="prime-rl default 0.2.")
    dppo_mask_high: float = Field(0.2, ge=0, description="prime-rl default 0.2.")
    ipo_threshold: float = Field(0.1, ge=0, description="prime-rl ipo variant 0.1.")
    adv_tau: float = Field(1.0, ge=0, description="prime-rl adv_tau = 1.0 (scales the policy-gradient term).")
    kl_tau: float = Field(1e-3, ge=0, description="prime-rl kl_tau = 1e-3 (weight of (log ρ)²).")


__all__ = [
    "MethodConfig",
    "ReinforceConfig",
    "GRPOConfig",
    "DrGRPOConfig",
    "RLOOConfig",
    "PPOConfig",
    "DAPOConfig",
    "GSPOConfig",
    "CISPOConfig",
    "TBAConfig",
    "NoCorrectionConfig",
    "TISConfig",
    "MISConfig",
    "GeoMISConfig",
    "IcePopConfig",
    "OPSMConfig",
    "DecoupledPPOConfig",
    "M2POMaskConfig",
    "M2POClipBandConfig",
    "BAPOConfig",
    "TOPRConfig",
    "DPPOMaskConfig",
]
