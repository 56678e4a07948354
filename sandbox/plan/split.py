"""The trainer/rollout split of a fixed GPU budget (``sandbox plan --gpus N``,
docs/plan.md#gpu-split).

**Configurations.** Of ``N`` GPUs, ``t`` train (``--trainer-gpus``, default every ``t`` = 1 … N − 1)
and the other ``N − t`` serve rollouts as ``⌊(N − t) / tp⌋`` inference engines of ``tp`` GPUs each
(tensor parallel). For every ``t`` and every per-engine concurrency ``c`` (``--concurrency``: sequences
in flight per engine, vLLM's ``max_num_seqs``) the scenario (its ``--set`` overrides applied, variants
ignored) gets:

* ``system.generation_time``: a ``continuous_batching`` engine (docs/system.md#continuous_batching)
  with its step costs and weight-sync time from the hardware table (``--gpu``, ``--model``, ``tp``
  GPUs), ``max_sequences = c``, ``workers_per_engine = ⌊c / G⌋`` groups of ``G`` =
  ``algorithm.group_size`` sequences, the KV-cache capacity left by the weights,
  ``⌊0.9 · (tp · memory − weight bytes) / KV bytes per token⌋`` tokens (vLLM's default
  ``gpu_memory_utilization`` 0.9), and the length model (``--length-median``, ``--length-sigma``,
  ``--max-tokens``; default the scenario's engine length model when it has one, else 1000 / 1.0 / 8192;
  the scenario engine's structure, ``prompts``, ``prompt_sigma``, ``length_trend``, ``tail_alpha``, is
  kept: docs/system.md#structured-lengths);
  the engine's sync mode is the scenario engine's, else ``drain``;
* ``system.num_workers = engines · slots`` (one worker per group slot), equal speeds, with ``slots =
  ⌊c / G⌋`` capped at ``⌈M / engines⌉`` when the staleness control admits at most ``M`` groups at once
  (``ControlConfig.max_in_flight``): worker ``w`` runs on engine ``⌊w / slots⌋``, so without the cap the
  admitted groups would crowd onto the first engines while the others idle (a framework spreads its
  requests over every engine);
* ``system.train_time``: the ``hardware`` kind on ``t`` GPUs (``--mfu``, one log-prob recompute pass),
  charged the tokens of the consumed responses (prompt + response; the engine's lengths);
* ``system.staleness``: the scenario's control, with its bound set to ``--k-max`` when given
  (:func:`sandbox.plan.capacity.staleness_for`); ``system.partial_rollouts`` off (the engine's sync
  mode plays that part).

**Simulation and columns.** Seeds 0 … S − 1 (the timing stream of ``run.seed = s``), ``--steps``
learner steps each, system only. Per seed: ``samples_per_s`` (responses trained on per simulated
second), ``tokens_per_s`` (response tokens trained on per second), the mean and 95th-percentile lag of
the consumed groups, the dropped fraction, the busy fraction of the learner. A row gives the mean over
seeds and, for the throughputs, the Student t 95% interval (``sandbox.claims.base.t_interval``).

**Learning** (``--learn``): every configuration is also trained, ``learn_seeds`` runs each (``run.seed =
0 …``, ``--learn-steps`` optimizer steps; the engine times the generation from its length model and the
``hardware`` trainer is charged the task's own tokens), and :func:`sandbox.analysis.time_to_target.compare`
gives each configuration's time to the target: no configuration of a split is synchronous, so the target
level is measured against the best configuration (``docs/time_to_target.md``), the same level for all.
The **best split by time to target** is the configuration with the smallest mean time to target among
those whose every run reached it, with its bootstrap interval; the runner-up (the best with another
trainer GPU count) is named and the two are called indistinguishable when their intervals overlap.

**Best split.** The configuration with the highest mean ``samples_per_s`` (on a tie, the smaller
trainer share, then the smaller concurrency); its interval, and the paired (same seed) difference to
the runner-up, the best configuration with another trainer GPU count, with its t-interval: when that interval contains 0 the
two are not distinguishable with these seeds and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sandbox.analysis.drop_bias import drop_bias
from sandbox.analysis.intervals import t_interval
from sandbox.analysis.time_to_target import Arm, Curves, compare
from sandbox.base.errors import ScenarioError
from sandbox.plan.capacity import default_steps, describe_control, learn_scenario, staleness_for, system_seed
from sandbox.scenario.api import validate_scenario
from sandbox.scenario.load import apply_overrides
from sandbox.system.cluster import TrainResult
from sandbox.system.delays.continuous_batching import ContinuousBatchingDelay
from sandbox.system.hardware import GPUS, MODELS, kv_capacity_tokens
from sandbox.system.heap_loop import HeapCluster
from sandbox.system.timing_only import TimingOnlyWorkload

DEFAULT_LENGTHS = {"length_median": 1000.0, "length_sigma": 1.0, "max_tokens": 8192}
STRUCTURE = ("prompts", "prompt_sigma", "prompt_seed", "length_trend", "tail_alpha")
"""Knobs of a structured length model, kept from the scenario's engine when it has them."""
MAX_GPUS = 100_000
"""The largest GPU count planned (--gpus, a config's GPU keys, a --cluster file): the trainer grid holds
one candidate per GPU count, so a count is bounded before any list is built."""
RECOMPUTE_PASSES = 1

COLUMNS = {
    "trainer_gpus": "GPUs training",
    "rollout_gpus": "GPUs serving rollouts (engines x tp)",
    "engines": "inference engines",
    "concurrency": "sequences in flight per engine (max_sequences)",
    "workers": "group slots (system.num_workers)",
    "samples_per_s": "responses trained on per simulated second (mean over seeds)",
    "samples_per_s_low": "95% t-interval of samples_per_s, low end",
    "samples_per_s_high": "95% t-interval of samples_per_s, high end",
    "tokens_per_s": "response tokens trained on per simulated second (mean over seeds)",
    "tokens_per_s_low": "95% t-interval of tokens_per_s, low end",
    "tokens_per_s_high": "95% t-interval of tokens_per_s, high end",
    "lag_mean": "mean lag of the consumed groups (published versions)",
    "lag_p95": "95th percentile of the lag (inverted CDF, pooled over seeds)",
    "dropped_fraction": "dropped / (dropped + consumed) groups",
    "util_learner": "busy fraction of the trainer",
    "train_step_s": "trainer seconds per step (mean)",
}
LEARN_COLUMNS = {
    "target_level": "the target level every configuration is timed to (docs/time_to_target.md)",
    "reached_units": "learning runs that reached it / runs",
    "time_to_target": "mean simulated seconds to the target (when every run reached it)",
    "time_to_target_ci_low": "95% bootstrap interval of time_to_target, low end",
    "time_to_target_ci_high": "95% bootstrap interval of time_to_target, high end",
}


@dataclass
class SplitOptions:
    gpus: int
    gpu: str = "H100"
    model: str = "qwen2.5-7b"
    tp: int = 1
    concurrency: list[int] = field(default_factory=lambda: [64, 128, 256])
    trainer_gpus: list[int] | None = None
    k_max: int | None = None
    mfu: float = 0.4
    length_median: float | None = None
    length_sigma: float | None = None
    max_tokens: int | None = None


@dataclass
class SplitConfig:
    trainer_gpus: int
    engines: int
    concurrency: int
    scenario: Any

    @property
    def label(self) -> str:
        return f"t={self.trainer_gpus},c={self.concurrency}"


def _err(option: str, message: str) -> ScenarioError:
    return ScenarioError([f"{option}: {message}"], "option")


def kv_capacity(gpu: str, model: str, tp: int) -> int:
    """KV-cache tokens of an engine: ``⌊0.9 · (tp · memory − weight bytes) / KV bytes per token⌋``
    (:func:`sandbox.system.hardware.kv_capacity_tokens`)."""
    return kv_capacity_tokens(gpu, model, tp)


def split_configurations(raw: dict, source: str, opts: SplitOptions) -> list[SplitConfig]:
    """One validated scenario per (trainer GPUs, concurrency) (module docstring); a
    :class:`ScenarioError` naming the option or the field when a combination is impossible."""
    if opts.gpu not in GPUS:
        raise _err("--gpu", f"unknown {opts.gpu!r}; known: {', '.join(GPUS)}")
    if opts.model not in MODELS:
        raise _err("--model", f"unknown {opts.model!r}; known: {', '.join(MODELS)}")
    if opts.gpus < 2:
        raise _err("--gpus", f"{opts.gpus}: a split needs at least 2 GPUs (one training, one serving)")
    if opts.gpus > MAX_GPUS:  # before a list of one trainer count per GPU is built
        raise _err("--gpus", f"{opts.gpus:,} GPUs: expected at most {MAX_GPUS:,}")
    if opts.tp < 1:
        raise _err("--tp", f"{opts.tp}: expected an integer >= 1")
    base = {k: v for k, v in raw.items() if k != "variants"}
    scn = validate_scenario(base, source)
    G = scn.algorithm.group_size
    trainers = opts.trainer_gpus or list(range(1, opts.gpus))
    for t in trainers:
        if not 1 <= t <= opts.gpus - opts.tp:
            raise _err(
                "--trainer-gpus",
                f"{t} leaves {opts.gpus - t} GPU(s) for rollouts: expected 1 … "
                f"{opts.gpus - opts.tp} with --gpus {opts.gpus} and --tp {opts.tp}",
            )
    for c in opts.concurrency:
        if c < G:
            raise _err(
                "--concurrency",
                f"{c} sequences per engine is below algorithm.group_size = {G}: an engine would hold no whole group",
            )
    kv = kv_capacity(opts.gpu, opts.model, opts.tp)
    if kv < 1:
        raise _err(
            "--model",
            f"{opts.model} does not fit in {opts.tp} x {opts.gpu} ({GPUS[opts.gpu].memory / 1e9:.0f} GB "
            "each at 90% use): raise --tp",
        )
    own = scn.system.generation_time
    lengths = dict(DEFAULT_LENGTHS)
    sync = "drain"
    engine = isinstance(own, ContinuousBatchingDelay)  # the user already runs on an engine: keep its sync and lengths
    if engine:
        sync = own.sync
        if own.length_median is not None:
            lengths = {
                "length_median": own.length_median,
                "length_sigma": own.length_sigma,
                "max_tokens": own.max_tokens,
            }
    for key in DEFAULT_LENGTHS:
        if getattr(opts, key) is not None:
            lengths[key] = getattr(opts, key)
    if engine:  # the structure of its length model (docs/system.md#structured-lengths)
        lengths.update({k: getattr(own, k) for k in STRUCTURE if getattr(own, k) not in (None, 0, 0.0)})
    staleness = scn.system.staleness.model_dump(mode="json")
    if opts.k_max is not None:
        staleness = staleness_for(staleness, opts.k_max)
    out = []
    for t in trainers:
        engines = (opts.gpus - t) // opts.tp
        for c in opts.concurrency:
            slots = c // G
            gen = {
                "kind": "continuous_batching",
                "hardware": {"gpu": opts.gpu, "model": opts.model, "gpus": opts.tp},
                "max_sequences": c,
                "workers_per_engine": slots,
                "kv_capacity_tokens": kv,
                "sync": sync,
                "prompt_tokens": getattr(own, "prompt_tokens", 0),
                **lengths,
            }
            train = {
                "kind": "hardware",
                "gpu": opts.gpu,
                "model": opts.model,
                "gpus": t,
                "mfu": opts.mfu,
                "recompute_passes": RECOMPUTE_PASSES,
            }
            ov = {
                "system.num_workers": engines * slots,
                "system.worker_speeds": None,
                "system.generation_time": gen,
                "system.train_time": train,
                "system.staleness": staleness,
                "system.partial_rollouts": False,
            }
            where = f"{source}, split trainer_gpus={t}, concurrency={c}"
            cfg = validate_scenario(apply_overrides(base, ov), where)
            limit = cfg.system.staleness.max_in_flight(cfg.algorithm.groups_per_step)
            if limit is not None and engines * slots > limit:  # spread the admitted groups over every engine
                slots = -(-limit // engines)
                gen["workers_per_engine"] = slots
                ov["system.num_workers"] = engines * slots
                cfg = validate_scenario(apply_overrides(base, ov), where)
            out.append(SplitConfig(t, engines, c, cfg))
    return out


class SplitTrainer:
    """Publishes the next integer per step and reports the batch's tokens (prompt + the engine's response
    lengths of every consumed sequence), so the ``hardware`` train time is charged for them."""

    def __init__(self, prompt_tokens: int, passes: int):
        self.prompt_tokens, self.passes = prompt_tokens, passes
        self.lengths: dict[int, list[int]] = {}
        self.response_tokens = 0

    def initial_weights(self):
        return 0

    def train(self, step, jobs, now):
        response = sum(sum(self.lengths[j.id]) for j in jobs)
        self.response_tokens += response
        prompts = self.prompt_tokens * sum(len(self.lengths[j.id]) for j in jobs)
        return TrainResult(weights=step + 1, tokens=response + prompts, passes=self.passes)


@dataclass
class SplitSeed:
    sim_time: float
    samples: int
    response_tokens: int
    lags: np.ndarray
    dropped: int
    consumed: int
    util_learner: float
    train_seconds: float
    steps: int
    drop_bias: dict | None = None


def simulate_split(config: SplitConfig, steps: int, seed: int, with_drop_bias: bool = False) -> SplitSeed:
    """One seed of one configuration; ``with_drop_bias``: also the drop-bias summary of the run
    (:func:`sandbox.analysis.drop_bias.drop_bias`, by prompt when the engine has prompts)."""
    scn = config.scenario
    trainer = SplitTrainer(scn.system.generation_time.prompt_tokens, scn.algorithm.epochs)
    cluster = HeapCluster(
        scn.system,
        TimingOnlyWorkload(),
        trainer,
        scn.algorithm.groups_per_step,
        scn.algorithm.group_size,
        system_seed(scn, seed),
        record_events=False,
    )
    trainer.lengths = cluster.lengths  # the engine fills it as groups are submitted
    res = cluster.run(steps)
    consumed = [j for j in res.jobs if j.consume_step >= 0]
    last = res.rows[-1] if res.rows else {}
    return SplitSeed(
        sim_time=float(res.sim_time),
        samples=sum(j.num_samples for j in consumed),
        response_tokens=trainer.response_tokens,
        lags=np.array([j.consume_step - j.head_version for j in consumed], dtype=np.int64),
        dropped=int(res.dropped),
        consumed=len(consumed),
        util_learner=float(last.get("util/learner", math.nan)),
        train_seconds=float(cluster.learner_busy),
        steps=len(res.rows),
        drop_bias=_drop_bias(res, scn.system.generation_time) if with_drop_bias else None,
    )


def _drop_bias(res, engine) -> dict:
    return drop_bias(res.jobs.to_frame(), res.lengths, engine.prompt_of if engine.prompts else None)


def _row(config: SplitConfig, seeds: list[SplitSeed]) -> dict[str, Any]:
    samples = [m.samples / m.sim_time for m in seeds]
    tokens = [m.response_tokens / m.sim_time for m in seeds]
    lags = np.concatenate([m.lags for m in seeds])
    taken = sum(m.dropped + m.consumed for m in seeds)
    s, s_lo, s_hi = t_interval(samples)
    k, k_lo, k_hi = t_interval(tokens)
    return {
        "trainer_gpus": config.trainer_gpus,
        "rollout_gpus": config.engines * config.scenario.system.generation_time.hardware.gpus,
        "engines": config.engines,
        "concurrency": config.concurrency,
        "workers": config.scenario.system.num_workers,
        "samples_per_s": s,
        "samples_per_s_low": s_lo,
        "samples_per_s_high": s_hi,
        "tokens_per_s": k,
        "tokens_per_s_low": k_lo,
        "tokens_per_s_high": k_hi,
        "lag_mean": float(lags.mean()) if lags.size else math.nan,
        "lag_p95": int(np.quantile(lags, 0.95, method="inverted_cdf")) if lags.size else -1,
        "dropped_fraction": sum(m.dropped for m in seeds) / taken if taken else math.nan,
        "util_learner": float(np.mean([m.util_learner for m in seeds])),
        "train_step_s": float(np.mean([m.train_seconds / max(m.steps, 1) for m in seeds])),
    }


@dataclass
class SplitPlan:
    title: str
    source: str
    options: SplitOptions
    steps: int
    seeds: int
    control: str
    lengths: dict
    rows: list[dict[str, Any]]
    per_seed: dict[str, list[float]]  # label -> samples_per_s per seed
    best: dict[str, Any] = field(default_factory=dict)
    figure_formats: tuple[str, ...] = ("png",)
    learn_seeds: int = 0
    learn_steps: int | None = None
    best_learned: dict[str, Any] = field(default_factory=dict)

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(COLUMNS) + (list(LEARN_COLUMNS) if self.learn_seeds else []))

    def to_json(self) -> dict[str, Any]:
        clean = lambda v: None if isinstance(v, float) and not math.isfinite(v) else v  # noqa: E731
        return {
            "title": self.title,
            "scenario": self.source,
            "steps": self.steps,
            "seeds": list(range(self.seeds)),
            "gpus": self.options.gpus,
            "gpu": self.options.gpu,
            "model": self.options.model,
            "tp": self.options.tp,
            "mfu": self.options.mfu,
            "staleness": self.control,
            "lengths": self.lengths,
            "columns": COLUMNS,
            "rows": [{k: clean(v) for k, v in r.items()} for r in self.rows],
            "samples_per_s_per_seed": self.per_seed,
            "best": {k: clean(v) for k, v in self.best.items()},
            **(
                {
                    "learn_seeds": list(range(self.learn_seeds)),
                    "learn_steps": self.learn_steps,
                    "learn_columns": LEARN_COLUMNS,
                    "best_by_time_to_target": {k: clean(v) for k, v in self.best_learned.items()},
                }
                if self.learn_seeds
                else {}
            ),
        }


def best_split(rows: list[dict], per_seed: dict[str, list[float]]) -> dict[str, Any]:
    """The row with the highest mean samples/s, and the paired difference to the best row with another
    trainer GPU count (module docstring)."""
    label = lambda r: f"t={r['trainer_gpus']},c={r['concurrency']}"  # noqa: E731
    ranked = sorted(rows, key=lambda r: -r["samples_per_s"] if math.isfinite(r["samples_per_s"]) else math.inf)
    best = ranked[0]
    out = {
        "trainer_gpus": best["trainer_gpus"],
        "concurrency": best["concurrency"],
        "samples_per_s": best["samples_per_s"],
        "samples_per_s_low": best["samples_per_s_low"],
        "samples_per_s_high": best["samples_per_s_high"],
    }
    others = [r for r in ranked if r["trainer_gpus"] != best["trainer_gpus"]]
    if others:
        second = others[0]
        diff = np.array(per_seed[label(best)]) - np.array(per_seed[label(second)])
        m, lo, hi = t_interval(diff)
        out.update(
            {
                "runner_up_trainer_gpus": second["trainer_gpus"],
                "runner_up_concurrency": second["concurrency"],
                "margin": m,
                "margin_low": lo,
                "margin_high": hi,
                "distinguishable": bool(math.isfinite(lo) and lo > 0),
            }
        )
    return out


def learn_split(
    configs: list[SplitConfig], seeds: int, steps: int | None, on_run: Callable[[SplitConfig, int], None] | None = None
) -> dict[str, dict[str, Any]]:
    """Train every configuration ``seeds`` times; per label, the :data:`LEARN_COLUMNS` (module docstring)."""
    from sandbox.run.runner import run_scenario

    arms = []
    for c in configs:
        runs = []
        for s in range(seeds):
            curves = Curves.from_result(run_scenario(learn_scenario(c.scenario, s, steps), None, force=True))
            if curves is not None:
                runs.append(curves)
            if on_run is not None:
                on_run(c, s)
        arms.append(Arm(c.label, runs))
    comp = compare(arms, {c.label: None for c in configs}, kind="split")
    out = {}
    for c in configs:
        f = comp.config_fields(c.label) if c.label in comp.levels else {}
        out[c.label] = {k: f.get(k) for k in LEARN_COLUMNS}
        out[c.label]["reached_units"] = f.get("reached_units", "0/0")
    return out


def best_learned(rows: list[dict]) -> dict[str, Any]:
    """The row with the smallest mean time to target among those whose every run reached it, its
    interval, and the best row with another trainer GPU count (module docstring); empty when none reached."""

    def done(r):
        t = r.get("time_to_target")
        return t is not None and math.isfinite(t)

    ranked = sorted(
        (r for r in rows if done(r)), key=lambda r: (r["time_to_target"], r["trainer_gpus"], r["concurrency"])
    )
    if not ranked:
        return {}
    best = ranked[0]
    keys = ("trainer_gpus", "concurrency", "time_to_target", "time_to_target_ci_low", "time_to_target_ci_high")
    out = {k: best[k] for k in keys}
    others = [r for r in ranked if r["trainer_gpus"] != best["trainer_gpus"]]
    if others:
        second = others[0]
        out.update({f"runner_up_{k}": second[k] for k in keys})
        lo, hi = second.get("time_to_target_ci_low"), best.get("time_to_target_ci_high")
        out["distinguishable"] = bool(lo is not None and hi is not None and hi < lo)
    return out


def run_split(
    raw: dict,
    source: str,
    opts: SplitOptions,
    seeds: int,
    steps: int | None,
    on_config: Callable[[SplitConfig], None] | None = None,
    configs: list[SplitConfig] | None = None,
    learn_seeds: int = 0,
    learn_steps: int | None = None,
    on_run: Callable[[SplitConfig, int], None] | None = None,
) -> SplitPlan:
    base = validate_scenario({k: v for k, v in raw.items() if k != "variants"}, source)
    configs = configs if configs is not None else split_configurations(raw, source, opts)
    steps = steps if steps is not None else default_steps(base)
    rows, per_seed = [], {}
    for c in configs:
        measures = [simulate_split(c, steps, s) for s in range(seeds)]
        rows.append(_row(c, measures))
        per_seed[c.label] = [m.samples / m.sim_time for m in measures]
        if on_config is not None:
            on_config(c)
    if learn_seeds:
        learned = learn_split(configs, learn_seeds, learn_steps, on_run)
        for c, row in zip(configs, rows):
            row.update(learned[c.label])
    gen = configs[0].scenario.system.generation_time
    return SplitPlan(
        title=base.title or source,
        source=source,
        options=opts,
        steps=steps,
        seeds=seeds,
        control=describe_control(configs[0].scenario.system.staleness.model_dump(mode="json")),
        lengths={
            "median": gen.length_median,
            "sigma": gen.length_sigma,
            "max_tokens": gen.max_tokens,
            "prompt_tokens": gen.prompt_tokens,
        },
        rows=rows,
        per_seed=per_seed,
        best=best_split(rows, per_seed),
        figure_formats=tuple(base.run.figure_formats),
        learn_seeds=learn_seeds,
        learn_steps=learn_steps,
        best_learned=best_learned(rows) if learn_seeds else {},
    )
