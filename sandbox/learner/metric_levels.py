"""Which per-step metrics a learner computes: ``run.metrics = "lean" | "standard" | "full"``
(docs/system.md#metric-levels).

* ``standard`` (the default): every metric the learner has always logged; its numbers do not depend on
  this module.
* ``lean``: only what the run itself reads: the metrics of divergence detection (``loss``, ``grad/norm``,
  ``param/norm``), the headline metrics time-to-target reads (``reward/mean`` and the task's ``eval/*``,
  :data:`sandbox.analysis.time_to_target.HEADLINE`), ``lr``, what each configured stabilizer produces and
  the metrics it reads (:attr:`sandbox.algorithms.stabilizers.base.Stabilizer.reads`, e.g. ``vcpo_lr``'s
  ``is/ess_ratio``), and, when the run draws its figures, the metrics those read
  (:data:`FIGURE_METRICS`). Every metric it keeps is computed by the same operations as at ``standard``,
  and nothing it skips feeds the loss, the gradient or a random draw, so the weights, the rewards and
  the kept metrics are the standard run's to the bit (``tests/learner/test_metric_levels.py``).
* ``full``: ``standard`` plus the diagnostics that cost an extra pass over the weights
  (:data:`FULL_EXTRA`).
"""

from __future__ import annotations

from collections.abc import Iterable

LEVELS = ("lean", "standard", "full")

ALWAYS = frozenset({"loss", "reward/mean", "grad/norm", "param/norm", "lr"})
"""Kept at every level: divergence detection reads ``loss``, ``grad/norm`` and ``param/norm``;
time-to-target's headline is ``eval/*`` (always computed when the task evaluates) or ``reward/mean``."""

FIGURE_METRICS = frozenset({"is/ess_ratio", "grad/cos_prev", "grad/norm", "staleness/mean"})
"""What the default figures of a run read besides the headline (:func:`sandbox.run.plots.default_figures`,
:func:`sandbox.run.plots.comparison_figure`); the engine-mismatch panel reads the ``mismatch/*`` and
``rollout_corr/*`` families, kept whole (:data:`FIGURE_PREFIXES`)."""

FIGURE_PREFIXES = ("mismatch/", "rollout_corr/")

FULL_EXTRA = frozenset({"update/cos_grad", "update/relative"})
"""``full`` only: the cosine between the applied update and the negative raw gradient, and the update's
norm relative to the weights' norm (docs/system.md#metric-levels)."""


class MetricSet:
    """The metrics a learner computes at one level. ``wants(name)`` answers for one metric;
    ``wants_any(prefix)`` for a family (``is/``: the importance-sampling monitors are computed together).
    ``keep is None`` means every standard metric."""

    def __init__(self, level: str = "standard", keep: Iterable[str] | None = None, prefixes: Iterable[str] = ()):
        if level not in LEVELS:
            raise ValueError(f"run.metrics: expected one of {', '.join(LEVELS)}, got {level!r}")
        self.level = level
        self.keep = None if level != "lean" else frozenset(ALWAYS | set(keep or ()))
        self.prefixes = tuple(prefixes) if level == "lean" else ()
        self.full = level == "full"
        self._families: dict[str, bool] = {}  # wants_any's answers: keep and prefixes never change

    @property
    def lean(self) -> bool:
        return self.keep is not None

    def wants(self, name: str) -> bool:
        if self.keep is None:
            return name not in FULL_EXTRA or self.full
        return name in self.keep or name.startswith(self.prefixes)

    __contains__ = wants  # so that the method library's loss reads it as a plain container of names

    def wants_any(self, prefix: str) -> bool:
        if self.keep is None:
            return True
        known = self._families.get(prefix)
        if known is None:
            known = any(k.startswith(prefix) for k in self.keep) or any(p.startswith(prefix) for p in self.prefixes)
            self._families[prefix] = known
        return known


STANDARD = MetricSet()


def metric_set(level: str, stabilizers: Iterable = (), figures: bool = False) -> MetricSet:
    """The :class:`MetricSet` of a run at ``level``: at ``lean``, :data:`ALWAYS`, the metrics the
    built ``stabilizers`` read, and the figures' metrics when ``figures``."""
    if level != "lean":
        return MetricSet(level)
    keep: set[str] = set()
    for stab in stabilizers:
        keep.update(getattr(stab, "reads", ()))
    if figures:
        keep |= FIGURE_METRICS
    return MetricSet("lean", keep, FIGURE_PREFIXES if figures else ())
