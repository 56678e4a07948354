"""The transfer rule of ``sandbox preflight``: where the user's learning rate sits on the LM proxy.

The sandbox cannot know the curvature of the user's model, so it transfers what it can state: the
per-step relative update size ‖Δθ‖/‖θ‖. For Adam and AdamW every coordinate moves by about the learning
rate once the moment estimates have settled (Kingma & Ba 2015, §2.1: the effective step is bounded by
and near α), so

    u = ‖Δθ‖/‖θ‖ ≈ lr / RMS(θ),        RMS(θ) = sqrt(mean of θ² over every parameter)

and the proxy learning rate with the same relative update is ``lr_proxy = u · RMS(θ_proxy)``. RMS(θ_proxy)
is measured on the proxy's own weights (the warm-started base model the runs start from); RMS(θ_user) comes
from :data:`PARAM_RMS` (an **assumption**: the initialisation standard deviation of the model family's
published config, ``initializer_range``; trained weights differ from it) or from ``--param-rms``.
Other optimizers (SGD's step scales with the gradient, not with lr alone) get no transfer: the answer says so.

Whether the rule holds is measured, not assumed: the claim ``transfer_rule`` (``docs/preflight.md#the-transfer-rule``)
measures the critical learning rate of LM proxies of several widths and reports whether the critical ``u`` stays
within a stated factor while the critical lr differs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from sandbox.scenario.api import validate_scenario
from sandbox.tasks import TASKS

ADAM_FAMILY = ("adam", "adamw")
#: RMS(θ) of a model family's weights, with its source. Assumption: the family's ``initializer_range``
#: (the std of its normal init) stands for the RMS of the trained weights.
PARAM_RMS: dict[str, tuple[float, str]] = {
    "qwen": (0.02, "initializer_range = 0.02 in the Qwen2.5 / Qwen3 config.json files (Hugging Face, 2024-2025)"),
    "llama": (0.02, "initializer_range = 0.02 in the Llama 3 config.json files (Hugging Face, 2024)"),
    "mistral": (0.02, "initializer_range = 0.02 in the Mistral 7B config.json (Hugging Face, 2023)"),
    "deepseek": (0.006, "initializer_range = 0.006 in the DeepSeek-V3 config.json (Hugging Face, 2024)"),
}
DEFAULT_RMS = (0.02, "no model named: the common initializer_range 0.02 (GPT-2, Qwen, Llama configs), an assumption")


@dataclass(frozen=True)
class Transfer:
    """The user's point on the proxy: ``applicable`` False when the optimizer has no stated rule."""

    optimizer: str
    user_lr: float
    user_rms: float
    user_rms_source: str
    proxy_rms: float
    update_size: float
    proxy_lr: float
    applicable: bool
    note: str

    def as_dict(self) -> dict:
        return asdict(self)


def model_rms(model: str | None, override: float | None = None) -> tuple[float, str]:
    """RMS(θ) of the user's model and where it comes from: ``override`` (``--param-rms``), else the family
    of the hardware-table name ``model`` in :data:`PARAM_RMS`, else :data:`DEFAULT_RMS`."""
    if override is not None:
        if not (override > 0 and math.isfinite(override)):
            raise ValueError(f"--param-rms: {override!r} must be a positive number")
        return float(override), "--param-rms (given)"
    if model:
        for family, entry in PARAM_RMS.items():
            if model.lower().startswith(family):
                return entry
    return DEFAULT_RMS


def params_rms(params: dict[str, torch.Tensor]) -> float:
    """sqrt(mean θ²) over the weight matrices (two or more dimensions) of replica 0 of ``params`` (``(R, ...)``
    tensors): the tensors an ``initializer_range`` describes; norm gains (which start at 1) and biases are left
    out, as they are a negligible share of a large model's parameters but not of the proxy's."""
    total, count = 0.0, 0
    for v in params.values():
        if v.dim() < 3:
            continue
        x = v[0].double()
        total += float((x * x).sum())
        count += x.numel()
    return math.sqrt(total / count)


def proxy_rms(lm_data: dict) -> float:
    """RMS(θ) of the LM proxy's starting weights (the warm-started base model of ``lm_data``'s task)."""
    scn = validate_scenario(lm_data, "preflight LM proxy")
    task = TASKS[scn.task.name].impl(scn.task.model_copy(update={"replicas": 1}))
    return params_rms(task.init_params(torch.Generator().manual_seed(0)))


def transfer(user_lr: float, optimizer: str, user_rms: tuple[float, str], proxy_param_rms: float) -> Transfer:
    """The user's (optimizer, lr, RMS(θ)) as a proxy learning rate with the same relative update size."""
    if not (user_lr > 0 and math.isfinite(user_lr)):
        raise ValueError(f"learning rate: {user_lr!r} must be a positive number")
    rms, source = user_rms
    u = user_lr / rms
    ok = optimizer.lower() in ADAM_FAMILY
    note = (
        "Adam-family: ‖Δθ‖/‖θ‖ ≈ lr / RMS(θ)"
        if ok
        else f"optimizer {optimizer!r}: its step scales with the gradient, so lr / RMS(θ) is not its update size; "
        "the map is shown without your point"
    )
    return Transfer(optimizer, float(user_lr), rms, source, float(proxy_param_rms), u, u * proxy_param_rms, ok, note)


def user_learning_rate(rows) -> float | None:
    """The learning rate the imported config sets (its ``scale`` row on ``algorithm.optimizer.lr``), or None."""
    for r in rows:
        if getattr(r, "field", None) == "algorithm.optimizer.lr":
            try:
                v = float(r.value)
            except (TypeError, ValueError):
                return None
            return v if v > 0 and math.isfinite(v) else None
    return None


__all__ = [
    "DEFAULT_RMS",
    "PARAM_RMS",
    "Transfer",
    "model_rms",
    "params_rms",
    "proxy_rms",
    "transfer",
    "user_learning_rate",
]
