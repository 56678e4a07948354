"""The learner: real gradients on the real policy, at the moment the event schedule says.

:class:`Learner` owns the weights (leaf tensors whose first dimension indexes R independent
replicas), a standard torch optimizer wrapped in the method library's StabilizedOptimizer
(per-replica clipping, GAC projections, VCPO / staleness LR rules), and the per-step bookkeeping
every task shares: gradient norm and cosine with the previous gradient, the LR schedule, the
update norm, and divergence detection. Subclasses say how a batch of finished jobs becomes a loss.

Mini-batches (``algorithm.minibatches`` = m, ``algorithm.epochs`` = E; docs/system.md#mini-batches):
a consumed batch is split, in consumption order and by whole groups, into m equal mini-batches and
the learner takes one optimizer step per mini-batch per epoch, the same order in every epoch (verl
0.9.1 ``make_iterator`` with its default ``actor.shuffle = false``). The learner's version counts
optimizer steps: step (e, j) of batch b is version ``S·b + e·m + j`` with ``S = m·E``, and a token
generated with published version v (the weights after batch v − 1) has lag ``S·(b − v) + e·m + j``.
With m = E = 1 the batch is one step and nothing of this runs.

Divergence (non-finite loss, gradient or weights, or loss / weight norm beyond the configured
bounds) freezes that replica at its last finite weights and records the step; when every replica
has diverged the run stops with status ``diverged`` and everything recorded so far is kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from sandbox.algorithms import ghost_norms
from sandbox.algorithms._tensor import replica_sum, seq_sum
from sandbox.algorithms.advantages import zero_variance_group_frac
from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.diagnostics import is_metrics
from sandbox.algorithms.opob import per_sequence_grad_sq_norms
from sandbox.algorithms.stabilized import StabilizedOptimizer, StepContext, build_stabilizers
from sandbox.learner import diagnostics as dg
from sandbox.learner.metric_levels import MetricSet, metric_set
from sandbox.learner.mismatch import mismatch_metrics
from sandbox.learner.optim import OptimizerConfig, build_optimizer, scheduled_lr, unhooked_step
from sandbox.system.cluster import Job, TrainResult
from sandbox.system.records import ReplicaColumns
from sandbox.tasks.base import OracleTask, Params, PolicyTask
from sandbox.tasks.rollouts import Rollouts, oldest_versions


@dataclass
class DivergenceBounds:
    max_loss: float = 1e8
    max_param_norm: float = 1e6


@dataclass
class MinibatchContext:
    """What a mini-batch's loss takes from the start of its batch (computed once, before the batch's
    first optimizer step, as verl 0.9.1 and AReaL 1.0.4 compute advantages and ``old_log_prob``)."""

    advantages: Tensor | None = None
    """``(R, n)`` the mini-batch's slice of the advantages computed on the whole batch."""
    prox_logp: Tensor | None = None
    """``(R, n, T)`` log π_prox: the weights at the start of the batch (``proximal = 'batch_start'``), or ``None``."""
    batch_metrics: dict[str, Tensor] = field(default_factory=dict)
    """Metrics of the whole batch's advantages (repeated on each of its steps)."""


class Learner:
    def __init__(
        self,
        params: Params,
        optimizer_cfg: OptimizerConfig,
        total_steps: int,
        bounds: DivergenceBounds,
        eval_fn=None,
        eval_every: int = 1,
        stabilizers: list | None = None,
        minibatches: int = 1,
        epochs: int = 1,
        metrics: str = "standard",
        figures: bool = False,
    ):
        self.minibatches = minibatches
        self.epochs = epochs
        self.updates_per_batch = minibatches * epochs
        self.names = list(params)
        self.params = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        self.plist = [self.params[k] for k in self.names]
        self.R = self.plist[0].shape[0]
        self.opt_cfg = optimizer_cfg
        self.optimizer = build_optimizer(optimizer_cfg, self.plist)
        self._optimizer_step_fn = unhooked_step(self.optimizer)  # the same update, without torch's per-call wrappers
        # Clipping, GAC projections and LR rules, all per replica (dim 0 of every parameter).
        self.stabilized = StabilizedOptimizer(
            self.optimizer,
            self.plist,
            build_stabilizers(stabilizers or []),
            replica_dims=1,
            max_grad_norm=optimizer_cfg.grad_clip,
        )
        # Nothing to clip, transform, scale or skip: the step runs without the wrapper (same numbers).
        self._plain = not self.stabilized.stabilizers and optimizer_cfg.grad_clip is None
        # run.metrics: which per-step metrics are computed (docs/system.md#metric-levels).
        self.monitors: MetricSet = metric_set(metrics, self.stabilized.stabilizers, figures)
        self.total_steps = total_steps
        self.bounds = bounds
        self.eval_fn = eval_fn
        self.eval_every = max(eval_every, 1)
        self.prev_grad: Tensor | None = None
        self._prev_grad_norm: Tensor | None = None
        self.alive = torch.ones(self.R, dtype=torch.bool)
        self._all_alive = (
            True  # = bool(self.alive.all()), kept beside it so that a step with no divergence reads no tensor
        )
        self._alive_np = np.ones(self.R, dtype=bool)
        self.diverged_at = np.full(self.R, -1)
        # Per-replica metrics, one row per optimizer step, as float64 columns sized for the run
        # (a dict of (R,) arrays per step was about 5.7 KB a step on the quickstart).
        self.replica_rows = ReplicaColumns(self.R, max(total_steps, 1))
        self._sample_lag: Tensor | None = None
        self._last_snapshot: tuple | None = None  # (copies, the weights' version counters, the copies' ones)
        self._lr_column: tuple[float, Tensor] | None = None  # (lr, its (R,) column), reused while lr is unchanged
        self._fresh: dict = {}  # _fresh_staleness's values of this run, per shape
        self._plan: _StepPlan | None = None  # what every optimizer step computes, decided at the first one
        # A _StepPlan.views run: (the one parameter's gradient, its (R, n) view), kept while it is the same tensor.
        self._grad_rows: tuple[Tensor, Tensor] | None = None
        # One replica: the divergence test on Python floats, exact when both bounds are finite float32 values
        # (torch compares the float32 loss and norms with a float32 bound; float64 compares the same values alike).
        self._bounds_f32 = all(
            math.isfinite(b) and float(np.float32(b)) == b for b in (bounds.max_loss, bounds.max_param_norm)
        )

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything the next optimizer step depends on: the weights, the optimizer with its
        stabilizers (:meth:`StabilizedOptimizer.state_dict`), the previous raw gradient (``grad/cos_prev``)
        and which replicas are alive; a learner built with the same arguments and loaded from it continues
        bitwise as the uninterrupted one. The metrics rows already returned are the caller's."""
        return {
            "params": {k: v.detach().clone() for k, v in self.params.items()},
            "optimizer": self.stabilized.state_dict(),
            "prev_grad": self.prev_grad,
            "prev_grad_norm": self._prev_grad_norm,
            "alive": self.alive.clone(),
            "diverged_at": torch.from_numpy(self.diverged_at.copy()),
        }

    def load_state_dict(self, state: dict) -> None:
        if sorted(state["params"]) != sorted(self.names):
            raise ValueError(
                f"the learner state holds parameters {sorted(state['params'])}, this learner {sorted(self.names)}"
            )
        with torch.no_grad():
            for k in self.names:
                self.params[k].copy_(state["params"][k])
        self.stabilized.load_state_dict(state["optimizer"])
        self.prev_grad, self._prev_grad_norm = state["prev_grad"], state["prev_grad_norm"]
        self.alive = state["alive"].clone()
        self._all_alive = bool(self.alive.all())
        self.diverged_at = state["diverged_at"].numpy().copy()

    # -- Trainer protocol --------------------------------------------------------------------
    def initial_weights(self) -> Params:
        return self.snapshot()

    def snapshot(self) -> Params:
        """A copy of the weights (what the cluster publishes to the workers). It is kept as the weights before
        the next optimizer step (:meth:`_weights_before_step`) while neither it nor the weights change."""
        copies = [p.detach().clone() for p in self.plist]
        self._last_snapshot = (copies, [p._version for p in self.plist], [c._version for c in copies])
        return dict(zip(self.names, copies))

    def _weights_before_step(self) -> list[Tensor]:
        """Copies of the weights as they are now, what a diverging replica is restored from: the last snapshot
        while the weights and the snapshot are unchanged since it was taken (their in-place version counters),
        so that a step makes one copy (the one published to the workers), not two; otherwise new copies."""
        last = self._last_snapshot
        if last is not None:
            copies, versions, copy_versions = last
            if [p._version for p in self.plist] == versions and [c._version for c in copies] == copy_versions:
                return copies
        return [p.detach().clone() for p in self.plist]

    def compute_loss(
        self, step: int, jobs: list[Job], context: MinibatchContext | None = None
    ) -> tuple[Tensor, dict[str, Tensor], int]:
        """(loss per replica ``(R,)``, metrics per replica ``(R,)``, tokens in the batch) at learner
        version ``step``; ``context`` is given for the mini-batches of a multi-step batch only."""
        raise NotImplementedError

    def minibatch_contexts(self, version: int, parts: list[list[Job]]) -> list[MinibatchContext | None]:
        """Per mini-batch, what its loss takes from the start of the batch (learner at ``version``)."""
        return [None] * len(parts)

    def optimizer_version(self, batch: int, epoch: int, minibatch: int) -> int:
        """The learner's version at optimizer step (``epoch``, ``minibatch``) of consumed batch ``batch``."""
        return batch * self.updates_per_batch + epoch * self.minibatches + minibatch

    def behaviour_versions(self, versions: Tensor) -> Tensor:
        """Published versions (one per batch, as the cluster stamps them) in learner versions
        (one per optimizer step): published version v holds the weights of version ``S·v``.
        Negative entries (padding) and the int64 maximum (no token) are kept."""
        if self.updates_per_batch == 1:
            return versions
        valid = (versions >= 0) & (versions < torch.iinfo(torch.int64).max)
        return torch.where(valid, versions * self.updates_per_batch, versions)

    def step_context(self, metrics: dict[str, Tensor]):
        """What the stabilizers may read: the batch ESS (VCPO) and the per-sample lag."""
        return StepContext(ess_ratio=metrics.get("is/ess_ratio"), staleness=self._sample_lag)

    def train(self, step: int, jobs: list[Job], now: float) -> TrainResult:
        """Consume batch ``step``: one optimizer step, or ``minibatches × epochs`` of them."""
        if self.updates_per_batch > 1:
            return self._train_minibatches(step, jobs)
        loss, metrics, tokens = self.compute_loss(step, jobs)
        row = self._optimizer_step(step, loss, metrics)
        stop = not self._all_alive and not bool(self.alive.any())  # every replica alive: no tensor to read
        return TrainResult(weights=self.snapshot(), tokens=tokens, metrics=row, stop=stop)

    def _train_minibatches(self, batch: int, jobs: list[Job]) -> TrainResult:
        m = self.minibatches
        if len(jobs) % m:
            raise ValueError(
                f"a batch of {len(jobs)} groups cannot be split into {m} equal mini-batches (algorithm.minibatches)"
            )
        size = len(jobs) // m
        parts = [jobs[j * size : (j + 1) * size] for j in range(m)]
        contexts = self.minibatch_contexts(self.optimizer_version(batch, 0, 0), parts)
        rows: list[dict] = []
        tokens = 0
        for epoch in range(self.epochs):
            for j, part in enumerate(parts):
                version = self.optimizer_version(batch, epoch, j)
                if version >= self.total_steps:  # run.steps reached inside the last batch
                    break
                loss, metrics, part_tokens = self.compute_loss(version, part, contexts[j])
                tokens += part_tokens if epoch == 0 else 0
                row = self._optimizer_step(version, loss, metrics)
                row["minibatch"], row["epoch"] = j, epoch
                rows.append(row)
                if not self.alive.any():
                    break
            if not self.alive.any() or len(rows) < (epoch + 1) * self.minibatches:
                break
        return TrainResult(
            weights=self.snapshot(),
            tokens=tokens,
            metrics=rows[-1],
            stop=not bool(self.alive.any()),
            step_metrics=rows,
            passes=self.epochs,
        )

    def _optimizer_step(self, step: int, loss: Tensor, metrics: dict[str, Tensor]) -> dict:
        """Backward, stabilizers, optimizer step and divergence bookkeeping at learner version
        ``step``; returns the step's metrics row (means over the replicas still alive)."""
        plist = self.plist
        for p in plist:  # = optimizer.zero_grad(set_to_none=False), without its profiler wrapper
            if p.grad is not None:
                p.grad.zero_()
        # One replica: its loss itself starts the backward with the gradient 1.0 that the sum's backward would
        # hand it (the same value, so the same gradient), without the sum and its node in the graph.
        total = (loss if loss.shape == _ONE else loss.sum()) if self._all_alive else None
        if total is not None and math.isfinite(total.item()):
            # Every replica alive and every loss finite (a sum is finite only if every term is; a sum of finite
            # terms that overflows takes the general path, whose gradient is the same): nan_to_num is the identity
            # and the alive mask all ones, so each replica's loss receives the sum's gradient 1.0 exactly as below.
            # Not loss.backward(ones): an explicit gradient tensor makes torch import
            # torch.fx.experimental.symbolic_shapes and sympy (about 2 s per process, torch/autograd/__init__.py:
            # _make_grads); a scalar's implicit one does not.
            _scalar_backward(total)
        else:
            (torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0) * self.alive.to(loss.dtype)).sum().backward()

        plan = self._plan
        if plan is None or plan.monitors is not self.monitors or plan.plain != self._plain or plan.plist is not plist:
            plan = self._plan = _StepPlan(self)
        grad_mode = torch.is_grad_enabled()
        # One no-grad region for everything below up to the evaluation (the stabilizers' step excepted, which
        # runs in the caller's grad mode as it always has): nothing in it records a graph, and torch.no_grad's
        # context manager twice a step cost more than the bookkeeping it wrapped.
        _set_grad_enabled(False)
        try:
            # GAC's diagnostic: cosine between this raw gradient and the previous one.
            grad = cos_prev = None
            if plan.cos_prev:
                grad = dg.flat_per_replica([p.grad for p in plist], self.R)  # a copy (torch.cat)
                grad_norm = plan.row_norms(grad)
                prev = self.prev_grad
                cos_prev = (
                    dg.cosine(grad, prev, grad_norm, self._prev_grad_norm)
                    if prev is not None
                    else torch.full((self.R,), math.nan)
                )
                self.prev_grad, self._prev_grad_norm = grad.detach(), grad_norm
            elif plan.views:  # the same norm through the view flat_view gave for this gradient object
                g = plist[0].grad
                rows = self._grad_rows
                if rows is None or rows[0] is not g:
                    rows = (g, dg.flat_view([g], self.R))
                    self._grad_rows = rows if g.is_contiguous() else None  # a copy is not kept
                grad_norm = plan.row_norms(rows[1])
            else:  # the same norm (same layout, same reduction) without the copy the cosine keeps
                grad_norm = plan.row_norms(dg.flat_view([p.grad for p in plist], self.R))

            lr = scheduled_lr(self.opt_cfg, step, self.total_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            before = self._weights_before_step()
            if plan.lean_plain:  # nothing reads the plain step's constant metrics
                self._optimizer_step_fn()  # every parameter has a gradient here: the norm above read each one
            else:
                _set_grad_enabled(grad_mode)
                metrics.update(self._plain_step() if self._plain else self.stabilized.step(self.step_context(metrics)))
                _set_grad_enabled(False)
            metrics["grad/norm"] = grad_norm
            if cos_prev is not None:
                metrics["grad/cos_prev"] = cos_prev
            if plan.update:
                delta = dg.flat_view([p - b for p, b in zip(plist, before)], self.R)
                update_norm = plan.row_norms(delta)
                if plan.update_norm:
                    metrics["update/norm"] = update_norm
            pnorm = plan.row_norms(plan.param_rows if plan.views else dg.flat_view(plist, self.R))
            metrics["param/norm"] = pnorm
            if plan.update_cos_grad and grad is not None:  # full only
                metrics["update/cos_grad"] = dg.cosine(delta, -grad, update_norm, grad_norm)
                metrics["update/relative"] = update_norm / pnorm
            monitored = metrics.get("loss", loss)  # read only, under no_grad
            bounds = self.bounds
            newly = None
            if (
                self._all_alive
                and self.R == 1
                and self._bounds_f32
                and monitored.dtype in _EXACT
                and pnorm.dtype in _EXACT
            ):
                # One replica: the test below on its three values as Python floats (three reads instead of seven
                # tensor operations); NaN fails every comparison.
                if not (
                    abs(monitored.item()) <= bounds.max_loss
                    and pnorm.item() <= bounds.max_param_norm
                    and math.isfinite(grad_norm.item())
                ):
                    newly = torch.ones(1, dtype=torch.bool)
            elif self._all_alive and math.isfinite(bounds.max_loss) and math.isfinite(bounds.max_param_norm):
                # The usual step: every replica alive and, in one test, none diverging. |loss| <= max_loss and
                # ‖θ‖ <= max_param_norm are false exactly for a NaN, an infinity or a value beyond a finite
                # bound, so ``ok`` is the negation of ``bad`` below (the same float32 comparisons).
                ok = (monitored.abs() <= bounds.max_loss) & (pnorm <= bounds.max_param_norm)
                ok &= torch.isfinite(grad_norm)
                if not bool(ok.all()):
                    newly = ~ok
            if newly is not None or not self._all_alive:
                bad = ~torch.isfinite(monitored) | ~torch.isfinite(pnorm) | ~torch.isfinite(grad_norm)
                bad |= (monitored.abs() > bounds.max_loss) | (pnorm > bounds.max_param_norm)
                newly = bad & self.alive
                if newly.any():
                    for r in torch.nonzero(newly).flatten().tolist():
                        self.diverged_at[r] = step
                    self.alive &= ~bad
                # Frozen replicas keep their last finite weights so sampling from them stays defined.
                frozen = ~self.alive
                if frozen.any():
                    for p, b in zip(plist, before):
                        p[frozen] = b[frozen]
                self._all_alive = bool(self.alive.all())
        finally:
            _set_grad_enabled(grad_mode)
        if "lr/scale" in metrics:
            metrics["lr"] = lr * metrics["lr/scale"]
        else:  # a constant rate: the same column while it is the same (the row copies it, nothing writes to it)
            if self._lr_column is None or self._lr_column[0] != lr:
                self._lr_column = (lr, torch.full((self.R,), lr))
            metrics["lr"] = self._lr_column[1]
        if self.eval_fn is not None and (step % self.eval_every == 0 or step == self.total_steps - 1):
            metrics.update(self.eval_fn(self.params))
        if self._all_alive:
            if plan.one_row:  # one replica: the row's Python floats straight into the columns
                one = _one_replica_values(metrics)
                if one is not None:
                    values, row = one
                    self.replica_rows.append_values(tuple(metrics), values)
                    row["replicas/alive"] = 1.0
                    return row
            arrays, row = _metrics_to_numpy(metrics, self.R, self._alive_np)
            self.replica_rows.append(arrays)
            row["replicas/alive"] = 1.0  # float(self.alive.float().mean()) with every replica alive
            return row
        alive = self.alive.numpy() if self.alive.any() else newly.numpy()
        arrays, row = _metrics_to_numpy(metrics, self.R, alive)
        self.replica_rows.append(arrays)
        row["replicas/alive"] = float(self.alive.float().mean())
        return row

    def _plain_step(self) -> dict[str, Tensor]:
        """:meth:`StabilizedOptimizer.step` with no stabilizer and no clipping, with the same metrics
        (``grad/norm`` is replaced by the trainer's own, as after the wrapper): nothing to transform,
        scale or skip, so only the optimizer step and the constant metrics remain."""
        grads = [p.grad for p in self.plist if p.grad is not None]
        if not grads:
            return {}
        with torch.no_grad():
            squares = [replica_sum(g * g, 1) for g in grads]
            # One tensor: itself, not ``0 + s`` (Python's sum): a sum of squares is +0, positive or NaN, for which
            # adding the integer 0 changes no bit.
            norm_clipped = (squares[0] if len(squares) == 1 else sum(squares)).sqrt()
            scale = torch.ones(norm_clipped.shape, dtype=grads[0].dtype, device=grads[0].device)
            metrics = {"grad/norm": norm_clipped, "grad/norm_clipped": norm_clipped, "lr/scale": scale}
            self._optimizer_step_fn()  # = self.optimizer.step() under no_grad, without its per-call wrappers
            metrics["step/skipped"] = torch.zeros(norm_clipped.shape, dtype=scale.dtype, device=scale.device)
        return metrics


class _StepPlan:
    """What every optimizer step of a run computes, decided once from the learner's metric set, its plain flag
    and its parameter list (the learner makes a new plan when one of them is replaced): the ``wants`` answers
    (fixed for a :class:`~sandbox.learner.metric_levels.MetricSet`), the norm function (:func:`dg.row_norms`,
    bound once), whether the step skips the plain wrapper's constant metrics, and:

    * ``views``: one contiguous parameter, read through the ``(R, n)`` view :func:`dg.flat_view` returns for it
      (a reshape: the same layout, so the same norms to the bit), kept for the run instead of made twice a step;
      the gradient's view is kept while the gradient is the same tensor (``Learner._grad_rows``). Off when
      :func:`dg.flat_view` is not the module's own (a replaced one is called every step, as the general path
      does);
    * ``one_row``: one replica, the row written as Python floats (:func:`_one_replica_values`,
      :meth:`ReplicaColumns.append_values`): the values and presence flags :func:`_metrics_to_numpy` and
      :meth:`ReplicaColumns.append` give. Off when one of those, :func:`_one_replica_row` or
      :meth:`ReplicaColumns.put` is not the one defined here (or there)."""

    __slots__ = (
        "monitors",
        "plain",
        "plist",
        "row_norms",
        "cos_prev",
        "update",
        "update_norm",
        "update_cos_grad",
        "lean_plain",
        "views",
        "param_rows",
        "one_row",
    )

    def __init__(self, learner: Learner):
        monitors, plist = learner.monitors, learner.plist
        self.monitors, self.plain, self.plist = monitors, learner._plain, plist
        self.row_norms = dg.row_norms
        want = monitors.wants
        self.cos_prev = want("grad/cos_prev")
        self.update_norm = want("update/norm")
        self.update_cos_grad = want("update/cos_grad")
        self.update = self.update_norm or self.update_cos_grad
        self.lean_plain = learner._plain and monitors.lean
        self.views = len(plist) == 1 and plist[0].is_contiguous() and dg.flat_view is _FLAT_VIEW
        self.param_rows = None
        if self.views:
            with torch.no_grad():
                self.param_rows = dg.flat_view(plist, learner.R)
        self.one_row = (
            learner.R == 1
            and _metrics_to_numpy is _METRICS_TO_NUMPY
            and _one_replica_row is _ONE_REPLICA_ROW
            and type(learner.replica_rows).append is _REPLICA_APPEND
            and type(learner.replica_rows).put is _REPLICA_PUT
        )


_set_grad_enabled = torch._C._set_grad_enabled
"""``torch.set_grad_enabled(mode)`` as a call (torch 2.x: that class's ``__init__`` makes this call)."""


def _scalar_backward(total: Tensor) -> None:
    """``total.backward()`` of a plain float scalar that requires grad, through the call that method makes
    into the autograd engine (torch 2.x, ``torch/autograd/__init__.py: backward``: the implicit gradient
    ``ones_like(total)``, no retained graph, no ``inputs``) without the Python around it that applies to no
    such call (tensor-subclass dispatch, functorch transforms, the deprecated ``grad_variables``, the forms of
    ``inputs``, the checks of an explicit gradient): the same engine run on the same gradient, so the same
    bits (``tests/learner/test_step_fast_paths.py``). A one-element ``(1,)`` tensor (one replica's loss) runs
    with the gradient ``ones_like(total)``, the 1.0 that ``total.sum().backward()`` hands it. Anything else, or
    another torch layout, takes ``total.backward()`` (``total.sum().backward()`` for the ``(1,)`` tensor)."""
    run = _ENGINE_RUN.get("run", _UNRESOLVED)
    if run is _UNRESOLVED:
        try:
            from torch.autograd.graph import _engine_run_backward as run
        except ImportError:
            run = None
        _ENGINE_RUN["run"] = run
    if (
        run is None
        or type(total) is not Tensor
        or (total.dim() != 0 and total.shape != _ONE)
        or not total.requires_grad
        or not total.dtype.is_floating_point
        or total.dtype.is_complex
        or torch._C._are_functorch_transforms_active()
    ):
        (total.sum() if total.shape == _ONE else total).backward()
        return
    ones = torch.ones_like(total, memory_format=torch.preserve_format)
    run((total,), (ones,), False, False, (), allow_unreachable=True, accumulate_grad=True)


_ENGINE_RUN: dict = {}
_UNRESOLVED = object()

_EXACT = (torch.float32, torch.float64)
"""The dtypes whose values compare with a float32 bound in Python floats as torch compares them."""

_ONE = (1,)


def _metrics_to_numpy(metrics: dict, replicas: int, alive: np.ndarray) -> tuple[dict[str, np.ndarray], dict]:
    """Per-replica arrays (float64 for floating metrics) and the row of means over the live
    replicas. The ``(R,)`` floating metrics go to numpy in one stacked copy per dtype, widened to
    float64 (exact for every float dtype), and the rows whose live values are all finite are averaged
    together over the live columns (the same reduction per row as the per-metric :func:`_alive_mean`,
    so the same bits); anything else takes the per-metric path."""
    if replicas == 1 and alive.shape == _ONE and alive[0]:
        one = _one_replica_row(metrics)
        if one is not None:
            return one
    groups: dict[torch.dtype, list[str]] = {}
    shape = (replicas,)
    for k, v in metrics.items():
        if isinstance(v, Tensor) and v.dtype.is_floating_point and v.shape == shape:
            groups.setdefault(v.dtype, []).append(k)
    arrays: dict[str, np.ndarray] = {}
    means: dict[str, float] = {}
    all_alive = bool(alive.all())
    with torch.no_grad():
        for dtype, keys in groups.items():
            stacked = torch.stack([metrics[k] for k in keys]).cpu()
            if dtype in (torch.float32, torch.float64, torch.float16):
                matrix = stacked.numpy().astype(np.float64, copy=False)
            else:  # bf16 and the like have no numpy dtype
                matrix = stacked.to(torch.float64).numpy()
            arrays.update(zip(keys, matrix))
            if replicas == 1 and all_alive:
                # One live replica: a row's mean is (0 + x) / 1, numpy's sum starting from its identity: x to the
                # bit, except -0.0, which becomes 0.0 (hence the + 0.0) when every value is finite; a non-finite
                # one takes the general path below (its mean is NaN there).
                values = (matrix.ravel() + 0.0).tolist()
                if all(map(math.isfinite, values)):
                    means.update(zip(keys, values))
                    continue
            # the live replicas' columns, C-contiguous (the fancy index alone gives a column-major copy, whose
            # row means sum in another order): a row's mean reduces its values in the order of _alive_mean's 1-D selection (frozen replicas are finite, so after a divergence most rows stay fast)
            live = matrix if all_alive else np.ascontiguousarray(matrix[:, alive]) if alive.any() else None
            if live is None:
                fast, fast_means = np.zeros(len(keys), dtype=bool), [math.nan] * len(keys)
            else:
                fast_means = live.mean(axis=1).tolist()
                finite = np.isfinite(live)
                if finite.all():  # the common case: every mean is the fast one
                    means.update(zip(keys, fast_means))
                    continue
                fast = finite.all(axis=1)
            for i, k in enumerate(keys):
                means[k] = fast_means[i] if fast[i] else _alive_mean(matrix[i], alive)
    if len(arrays) < len(metrics):
        for k, v in metrics.items():
            if k not in arrays:
                arrays[k] = _np(v)
                means[k] = _alive_mean(arrays[k], alive)
    elif len(groups) == 1:  # one dtype, every metric (R,): both dicts are in the metrics' order already
        return arrays, means
    return {k: arrays[k] for k in metrics}, {k: means[k] for k in metrics}


def _one_replica_row(metrics: dict) -> tuple[dict[str, np.ndarray], dict] | None:
    """:func:`_metrics_to_numpy` of one live replica whose metrics are all floating ``(1,)`` tensors, else None
    (the general path): the :func:`_one_replica_values` as ``(1,)`` float64 arrays, and the row."""
    one = _one_replica_values(metrics)
    if one is None:
        return None
    values, means = one
    matrix = np.array(values, dtype=np.float64).reshape(-1, 1)
    return dict(zip(metrics, matrix)), means


def _one_replica_values(metrics: dict) -> tuple[list[float], dict] | None:
    """One live replica whose metrics are all floating ``(1,)`` tensors: (each value read once as a Python float,
    the row of means), else None (the general path). ``Tensor.item`` gives the float64 of the value, as the
    widening copy; a row's mean is the value itself, ``(0 + x) / 1`` as numpy sums from its identity, so -0.0
    becomes 0.0 (hence the ``+ 0.0``), and NaN for a non-finite value, as :func:`_alive_mean` (which drops it
    and averages nothing). A floating tensor is one whose ``item`` is a ``float`` (an integer or bool one gives
    an ``int`` or ``bool``, a complex one a ``complex``). A non-finite value of a dtype other than float32 /
    float64 takes the general path (its widening there is torch's own conversion, not the hardware one ``item``
    uses)."""
    values = []
    for v in metrics.values():
        if type(v) is not Tensor or v.shape != _ONE:
            return None
        x = v.item()
        if type(x) is not float:
            return None
        values.append(x)
    means = {k: x + 0.0 for k, x in zip(metrics, values)}
    if not all(map(math.isfinite, values)):
        if not all(v.dtype in _EXACT for v in metrics.values()):
            return None
        for k, x in zip(metrics, values):
            if not math.isfinite(x):
                means[k] = math.nan
    return values, means


_METRICS_TO_NUMPY, _ONE_REPLICA_ROW, _FLAT_VIEW = _metrics_to_numpy, _one_replica_row, dg.flat_view
_REPLICA_APPEND, _REPLICA_PUT = ReplicaColumns.append, ReplicaColumns.put
"""The functions a :class:`_StepPlan` specialises, as this module, :mod:`sandbox.learner.diagnostics` and
:class:`~sandbox.system.records.ReplicaColumns` define them (a replaced one turns its shortcut off)."""


def _np(v) -> np.ndarray:
    if not isinstance(v, Tensor):
        return np.asarray(v)
    v = v.detach()
    return (v.double() if v.is_floating_point() else v).cpu().numpy()  # bf16/fp16 have no numpy dtype


def _alive_mean(a: np.ndarray, alive: np.ndarray) -> float:
    """Mean over the replicas still alive, ignoring non-finite entries (NaN when none)."""
    if a.ndim == 0:
        return float(a)
    sel = a[alive] if a.shape == alive.shape else a.reshape(-1)
    sel = sel[np.isfinite(sel)]
    return float(sel.mean()) if sel.size else math.nan


def response_lags(step: int, versions: Tensor) -> Tensor:
    """``(R, N)`` int64 lag of each response at ``step``: ``step −`` its oldest token's version
    (its head version). ``versions``: ``(R, N, T)``, -1 on padding."""
    return step - oldest_versions(versions)


def staleness_metrics(step: int, versions: Tensor, mask: Tensor, head: Tensor | None = None) -> dict[str, Tensor]:
    """Per-replica lag of the consumed data: per response (head = oldest token, tail = newest)
    and per token. ``versions``: ``(R, N, T)``, -1 on padding; ``head``: the float64
    :func:`response_lags` when the caller has them already."""
    head = response_lags(step, versions).double() if head is None else head
    tail = step - versions.amax(-1)
    tok = ((step - versions) * mask).sum((-2, -1)) / mask.sum((-2, -1)).clamp_min(1)
    return {
        "staleness/mean": head.mean(-1),
        "staleness/max": head.amax(-1),
        "staleness/min": head.amin(-1),
        "staleness/tail_mean": tail.double().mean(-1),
        "staleness/token_mean": tok.double(),
    }


def _fresh_staleness(
    step: int, versions: Tensor, mask: Tensor, cache: dict
) -> tuple[Tensor | None, dict[str, Tensor] | None]:
    """``(response_lags(step, versions).double(), staleness_metrics(step, versions, mask, that))`` of a batch whose
    every token was sampled by the weights of version ``step`` (lag 0 everywhere: every synchronous step), under a
    mask of ones: ``step − versions`` is then int64 zeros whatever ``step``, so the values depend on the shapes and
    dtypes alone; they are computed once from zeros and ones by the same functions, kept in ``cache`` (the learner's
    own: one run, so a function replaced for a run is the one they are computed with, and nothing outlives the run)
    and shared by such batches (their version counters checked: a write to one makes new ones): one test of the
    versions instead of about twenty tensor operations.
    ``(None, None)`` when some token is older (or newer)."""
    if bool((versions != step).any()):
        return None, None
    key = (tuple(versions.shape), versions.dtype, tuple(mask.shape), mask.dtype, versions.device)
    cached = cache.get(key)
    if cached is None or any(t._version != n for t, n in zip((cached[0], *cached[1].values()), cached[2])):
        zeros = torch.zeros(versions.shape, dtype=versions.dtype, device=versions.device)
        head = response_lags(0, zeros).double()
        metrics = staleness_metrics(0, zeros, torch.ones(mask.shape, dtype=mask.dtype, device=mask.device), head)
        cached = cache[key] = (head, metrics, [t._version for t in (head, *metrics.values())])
    return cached[0], dict(cached[1])


#: The learner/behaviour mismatch monitors of :func:`sandbox.algorithms.diagnostics.is_metrics`.
IS_METRIC_KEYS = ("is/ess_ratio", "is/ess", "is/chi2", "is/chi2_seq", "is/kl_k3", "is/log_ratio_mean")


class PolicyLearner(Learner):
    """Policy-gradient learner: objective + off-policy correction from ``sandbox.algorithms``."""

    def __init__(self, task: PolicyTask, policy_loss, params: Params, proximal: str = "behaviour", **kw):
        super().__init__(params, eval_fn=task.evaluate, **kw)
        self.task = task
        self.policy_loss = policy_loss
        self.proximal = proximal
        self.last_batch: Rollouts | None = None

    @property
    def per_replica(self) -> bool:
        """The loss of each replica is computed alone, on its own responses cut to its own width
        (:meth:`Rollouts.replica`): a task whose responses have variable lengths (``ragged_replicas``,
        the LM) with several replicas. A batch of R replicas is padded to the longest response of any
        replica, and that padding changes the order of float sums over positions (the matmul shapes of a
        forward, the reductions of the loss and its metrics); per replica, each replica computes exactly
        what its one-replica run does, so its numbers are that run's to the bit."""
        return self.R > 1 and getattr(self.task, "ragged_replicas", False)

    def _replica_params(self, r: int) -> Params:
        """Replica ``r``'s weights as a one-replica parameter dict (differentiable views ``(1, ...)``)."""
        return {k: v[r : r + 1] for k, v in self.params.items()}

    def _loss_input(
        self,
        ro: Rollouts,
        logp: Tensor,
        version: int,
        token_versions: Tensor | None = None,
        params: Params | None = None,
    ):
        """The policy-loss input for ``ro`` at learner ``version`` (OPOB's gradient norms included);
        ``token_versions`` (in learner versions) when the caller has them already; ``params``: the
        weights ``ro`` is scored under (default: the learner's)."""
        params = self.params if params is None else params

        inp = PolicyLossInput(
            logp=logp,
            behaviour_logp=ro.behaviour_logp,
            mask=ro.mask,
            rewards=ro.rewards,
            group_size=ro.group_size,
            token_versions=self.behaviour_versions(ro.token_versions) if token_versions is None else token_versions,
            learner_version=version,
            full_mask=ro.full,
        )
        if self.policy_loss.needs_sequence_grad_norms:  # OPOB / the optimal baseline weigh by ‖∇ log π(y)‖²
            inputs = self.task.sequence_inputs(ro)
            batched = getattr(self.task, "batch_sequence_logprob", None)
            if self.policy_loss.sequence_grad_norms == "ghost" and batched is not None:
                norms = ghost_norms.ghost_sequence_grad_sq_norms(
                    batched, params, inputs, self.task.sequence_logprob, replica_dims=1
                )
            else:
                norms = per_sequence_grad_sq_norms(self.task.sequence_logprob, params, inputs, replica_dims=1)
            inp.extras["seq_grad_sq_norms"] = norms
        return inp

    def minibatch_contexts(self, version, parts, params: Params | None = None):
        """Advantages of the whole batch (computed once, as verl 0.9.1, AReaL 1.0.4 and TRL 1.16 do
        before their mini-batch updates, so a group's advantages and the EMA baseline's update do
        not depend on the split) and, with ``proximal = 'batch_start'``, log π_prox of each
        mini-batch under the weights at the start of the batch. :attr:`per_replica`: per mini-batch,
        the list of each replica's own context (computed on its own groups, :meth:`_replica_jobs`)."""
        if params is None and self.per_replica:
            per = [
                self.minibatch_contexts(version, [_replica_jobs(part, r) for part in parts], self._replica_params(r))
                for r in range(self.R)
            ]
            return [[per[r][j] for r in range(self.R)] for j in range(len(parts))]
        params = self.params if params is None else params
        ros = [Rollouts.cat([j.payload for j in part]) for part in parts]
        with torch.no_grad():
            start = [self.task.logprobs(params, ro).detach() for ro in ros]
        whole = Rollouts.cat(ros)
        width = whole.width
        logp = torch.cat([torch.nn.functional.pad(lp, (0, width - lp.shape[-1])) for lp in start], -2)
        inp = self._loss_input(whole, logp, version, params=params)
        log_seq_rho = seq_sum((logp - whole.behaviour_logp) * inp.fmask, inp.fmask)
        adv, metrics = self.policy_loss.advantages(inp, log_seq_rho)
        metrics = {k: v.detach() for k, v in metrics.items()}
        metrics["adv/zero_var_groups"] = zero_variance_group_frac(whole.rewards.detach(), whole.group_size)
        contexts, lo = [], 0
        for ro, lp in zip(ros, start):
            hi = lo + ro.num_responses
            prox = lp if self.proximal == "batch_start" else None
            contexts.append(
                MinibatchContext(advantages=adv[..., lo:hi].detach(), prox_logp=prox, batch_metrics=metrics)
            )
            lo = hi
        return contexts

    def compute_loss(self, step, jobs, context=None):
        if not self.per_replica:
            return self._compute_loss(step, jobs, context, self.params)
        losses, rows, lags = [], [], []
        logp = None
        if getattr(self.task, "width_free_logprobs", False):  # one forward for all replicas, each cut to its width
            logp = self.task.logprobs(self.params, Rollouts.cat([j.payload for j in jobs]))
        for r in range(self.R):
            own = _replica_jobs(jobs, r)
            logp_r = None
            if logp is not None:
                logp_r = logp[r : r + 1, :, : max((j.payload.width for j in own), default=0)]
            loss, metrics, _ = self._compute_loss(
                step, own, None if context is None else context[r], self._replica_params(r), logp_r
            )
            losses.append(loss)
            rows.append(metrics)
            lags.append(self._sample_lag)
        self._sample_lag = torch.cat(lags)
        self.last_batch = Rollouts.cat([j.payload for j in jobs])
        merged = {
            k: torch.cat([torch.as_tensor(m[k]).reshape(1, *torch.as_tensor(m[k]).shape[1:]) for m in rows])
            for k in rows[0]
        }
        return torch.cat(losses), merged, self.last_batch.token_count

    def _compute_loss(self, step, jobs, context, params: Params, logp: Tensor | None = None):
        """The loss of ``jobs`` under ``params``; ``logp``: their log-probs when the caller scored them already
        (:meth:`compute_loss`, a task with ``width_free_logprobs``)."""
        ro = Rollouts.cat([j.payload for j in jobs])
        self.last_batch = ro
        if logp is None:
            logp = self.task.logprobs(params, ro)
        mask = ro.mask
        versions = self.behaviour_versions(ro.token_versions)
        if context is None:
            inp = self._loss_input(ro, logp, step, versions, params=params)
            if self.proximal == "batch_start":  # one step per batch: the batch starts at these weights
                inp.prox_logp = logp.detach()
        else:
            inp = PolicyLossInput(  # advantages come from the whole batch: no gradient norms needed here
                logp=logp,
                behaviour_logp=ro.behaviour_logp,
                mask=mask,
                rewards=ro.rewards,
                group_size=ro.group_size,
                token_versions=versions,
                learner_version=step,
                prox_logp=context.prox_logp,
                advantages=context.advantages,
                full_mask=ro.full,
            )
        monitors = self.monitors
        wants_staleness = monitors.wants_any("staleness/")
        # The per-response lag: what the stabilizers may read (a plain step has none) and the staleness metrics.
        head = staleness = None
        if wants_staleness or not self._plain or self.per_replica:
            if ro.full:  # complete one-token groups: at lag 0 everywhere, the shared values
                head, staleness = _fresh_staleness(step, versions, mask, self._fresh)
            if head is None:
                head = response_lags(step, versions).double()
        self._sample_lag = head
        # The loss reports the per-response staleness below under its token-lag names (in their place
        # in its metrics) instead of measuring a token lag that this learner replaces anyway.
        if not wants_staleness:
            staleness = {}
        elif staleness is None:
            staleness = staleness_metrics(step, versions, mask, head)
        inp.staleness = staleness
        if monitors.lean:
            inp.monitors = monitors
        out = self.policy_loss(inp)
        metrics = dict(out.metrics)
        if context is not None:
            metrics.update(context.batch_metrics)
        # Learner-vs-behaviour mismatch from the unclipped ratios, whatever the correction. The policy
        # loss reports exactly these (is_metrics of (log π_θ − log μ)·m) when the three tensors share a
        # dtype and shape (masking twice by a 0/1 mask changes no bit); otherwise they are computed here.
        if monitors.wants_any("is/") and not (
            logp.dtype == mask.dtype == ro.behaviour_logp.dtype
            and logp.shape == mask.shape
            and all(k in metrics for k in IS_METRIC_KEYS)
        ):
            metrics.update(is_metrics(logp.detach() - ro.behaviour_logp, mask))
        metrics["loss"] = out.loss.detach()
        if (
            "reward/mean" not in metrics
        ):  # the policy loss reports it (rewards.mean(-1): the same op on the same tensor)
            metrics["reward/mean"] = ro.rewards.mean(-1)
        if monitors.wants("length/mean"):
            metrics["length/mean"] = ro.lengths.double().mean(-1)
        metrics.update(staleness)
        if ro.version_logp is not None and monitors.wants_any(
            "mismatch/"
        ):  # an engine that is not exact: μ vs π split (docs/engines.md#metrics)
            metrics.update(
                mismatch_metrics(
                    logp, ro.version_logp, ro.behaviour_logp, mask, ro.lengths, getattr(self.task, "max_len", ro.width)
                )
            )
        return out.loss, metrics, ro.token_count


def _replica_jobs(jobs: list[Job], r: int) -> list[Job]:
    """Replica ``r``'s view of a batch: each group cut to that replica at its own width (:meth:`Rollouts.replica`)."""
    return [replace(j, payload=j.payload.replica(r)) for j in jobs]


class OracleLearner(Learner):
    """Delayed SGD on a gradient oracle: applies the (stale) gradients the workers computed."""

    def __init__(self, task: OracleTask, params: Params, **kw):
        super().__init__(params, eval_fn=None, **kw)
        self.task = task

    def compute_loss(self, step, jobs, context=None):
        grads = torch.cat([j.payload.grad for j in jobs], dim=1)
        surrogate = self.task.surrogate(self.params, grads)
        true_loss = self.task.loss(self.params).detach()
        samples = [j.payload for j in jobs]
        if all(type(s.version) is int for s in samples):  # the same int64 values as the repeat_interleave below
            versions = torch.tensor([s.version for s in samples for _ in range(s.num_responses)], dtype=torch.long)
        else:
            versions = torch.tensor([s.version for s in samples]).repeat_interleave(
                torch.tensor([s.num_responses for s in samples])
            )
        versions = self.behaviour_versions(versions.view(1, -1, 1).expand(self.R, -1, 1))
        self._sample_lag = (step - versions[..., 0]).double()
        metrics = {"loss": true_loss, **self.task.evaluate(self.params)}
        if self.monitors.wants_any("staleness/"):
            metrics.update(staleness_metrics(step, versions, torch.ones(versions.shape)))
        return surrogate, metrics, 0
