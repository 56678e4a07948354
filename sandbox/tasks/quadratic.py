"""Noisy quadratic testbed: f(x) = ½ Σ_i λ_i x_i², gradient oracle g = ∇f(x) + σ ξ, ξ ~ N(0, I).

The delayed-SGD recursion x_{t+1} = x_t − η g(x_{t−τ}) on this model is the object of the stability
threshold (Levin & May 1976; ``docs/theory.md#t1``), the stationary variance (``docs/theory.md#t2``)
and the consecutive gradient cosine (``docs/theory.md#t3``, GAC's stale-aligned signature). Workers
evaluate the gradient with autograd at the weights of the version they hold; the learner applies
whatever arrives. Task page: ``docs/tasks.md#quadratic``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandbox.base.lazy_torch import lazy_import
from sandbox.tasks.base import TASKS, BudgetShape, GradientSample, OracleTask

torch = lazy_import("torch", globals())


class QuadraticConfig(BaseModel):
    """Diagonal quadratic with a chosen Hessian spectrum and isotropic gradient noise."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Literal["quadratic"] = "quadratic"
    dim: int = Field(100, ge=1, description="Dimension d.")
    spectrum: Literal["logspace", "linspace", "constant"] = Field(
        "logspace", description="How the eigenvalues are spread between eig_min and eig_max."
    )
    eigenvalues: list[float] | None = Field(None, description="Explicit Hessian eigenvalues (overrides spectrum).")
    eig_min: float = Field(0.01, gt=0, description="Smallest eigenvalue (docs/theory.md#t3 example: 0.01).")
    eig_max: float = Field(1.0, gt=0, description="Largest eigenvalue λ_max (sets the critical step).")
    noise_std: float = Field(
        0.05, ge=0, description="Gradient noise σ per coordinate (docs/theory.md#t3 example: 0.05)."
    )
    x0_std: float = Field(1.0, ge=0, description="Std of the initial point.")
    x0: float | None = Field(None, description="Start every coordinate at this value instead (deterministic start).")
    replica_scales: list[float] | None = Field(
        None,
        description="Curvature multiplier per replica (Hessian of replica r = scale_r · diag(λ)); lets one run "
        "sweep the effective step a = ηλ across replicas under one schedule. Default: all 1.",
    )
    replicas: int = Field(1, ge=1, description="Independent learners R carried in one batched tensor.")

    @model_validator(mode="after")
    def _check(self):
        if self.eigenvalues is not None:
            if len(self.eigenvalues) != self.dim:
                raise ValueError(f"eigenvalues has {len(self.eigenvalues)} entries, expected dim={self.dim}")
            if any(v <= 0 for v in self.eigenvalues):
                raise ValueError("eigenvalues must all be > 0")
        elif self.eig_max < self.eig_min:
            raise ValueError(f"eig_max ({self.eig_max}) must be >= eig_min ({self.eig_min})")
        if self.replica_scales is not None:
            if len(self.replica_scales) != self.replicas:
                raise ValueError(
                    f"replica_scales has {len(self.replica_scales)} entries, expected replicas={self.replicas}"
                )
            if any(not (s > 0) for s in self.replica_scales):
                raise ValueError("replica_scales must all be > 0")
        return self

    def hessian_diagonal(self) -> torch.Tensor:
        if self.eigenvalues is not None:
            return torch.tensor(self.eigenvalues, dtype=torch.float64)
        if self.spectrum == "constant" or self.dim == 1:
            return torch.full((self.dim,), self.eig_max, dtype=torch.float64)
        if self.spectrum == "logspace":
            return torch.logspace(
                torch.log10(torch.tensor(self.eig_min)),
                torch.log10(torch.tensor(self.eig_max)),
                self.dim,
                dtype=torch.float64,
            )
        return torch.linspace(self.eig_min, self.eig_max, self.dim, dtype=torch.float64)


@TASKS.register(QuadraticConfig)
class QuadraticTask(OracleTask):
    default_threads = 1

    @classmethod
    def budget_shape(cls, cfg):
        return BudgetShape("oracle", cfg.dim, "task.dim", cfg.dim, 8)

    def __init__(self, cfg: QuadraticConfig):
        self.cfg = cfg
        self.replicas = cfg.replicas
        scales = torch.tensor(cfg.replica_scales or [1.0] * cfg.replicas, dtype=torch.float64)
        self.lam = scales.unsqueeze(1) * cfg.hessian_diagonal().unsqueeze(0)  # (R, d)

    def init_params(self, gen):
        shape = (self.replicas, self.cfg.dim)
        if self.cfg.x0 is not None:
            return {"x": torch.full(shape, float(self.cfg.x0), dtype=torch.float64)}
        return {"x": self.cfg.x0_std * torch.randn(*shape, generator=gen, dtype=torch.float64)}

    def loss(self, params):
        x = params["x"]
        return 0.5 * (self.lam * x * x).sum(-1)

    def gradient(self, params, n, gen, version):
        x = params["x"].detach().clone().requires_grad_(True)
        value = self.loss({"x": x})
        (true_grad,) = torch.autograd.grad(value.sum(), x)
        noise = self.cfg.noise_std * torch.randn(self.replicas, n, self.cfg.dim, generator=gen, dtype=torch.float64)
        return GradientSample(grad=true_grad.unsqueeze(1) + noise, version=version, loss_at_version=value.detach())

    def surrogate(self, params, grads):
        return (grads.mean(1).detach() * params["x"]).sum(-1)

    def evaluate(self, params):
        x = params["x"].detach()
        return {
            "eval/loss": self.loss(params).detach(),
            "eval/grad_sq_norm": ((self.lam * x) ** 2).sum(-1),  # ‖∇f(x)‖², the quantity of docs/theory.md#t5
        }
