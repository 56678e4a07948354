"""Q3, Q4 and Q7 of ``sandbox preflight`` (:mod:`sandbox.preflight.questions`; guide ``docs/preflight.md``): the
trainer/rollout split, the speed-up over synchronous training and the drop bias, from system-only runs
of the timing model of ``sandbox plan --gpus N`` (:mod:`sandbox.plan.split`: continuous-
batching engines whose step costs and weight-sync time come from the hardware table, a trainer timed
by ``(6 + 2r)·N·T / (gpus · peak · MFU)``, log-normal response lengths; docs/plan.md#gpu-split).

**Cluster facts** (:func:`cluster_facts`): the total GPU count, the GPU kind, the model (a name of the
hardware table, ``sandbox.system.hardware.MODELS``), the tensor-parallel size of an engine and the
longest response come, first, from the flags (``--gpus``, ``--gpu``, ``--model``, ``--tp``,
``--max-tokens``), then from the ``[cluster]`` table (``trainer_gpus + rollout_gpus``, ``gpu``), then from
the keys of the imported config that hold them (:data:`CONFIG_KEYS`). Each fact records where it came
from. A checkpoint the table lacks is timed by the entry of nearest size in its name
(:func:`nearest_model`, named as a stand-in). Without a GPU count or a model, Q3, Q4 and Q7 are not
answered and the page names the flag that supplies the fact; a missing GPU kind is taken as H100 and
said so.

**Weight sync.** Charged once, by the engines (``sync_time`` = bf16 weight bytes / NVLink bandwidth, the
hardware table); ``system.sync_delay`` (publish-to-use latency) is 0 unless the ``--cluster`` file gives one
(the proxy scenario's own value is not yours).

**Lengths.** A config holds the longest response, not the distribution: the median is
``min(1000, max_tokens / 4)`` tokens and the log-length σ 1.0 unless ``--length-median`` /
``--length-sigma`` give them (the page says which).

**Runs.** For each trainer GPU count ``t`` of :func:`trainer_grid` and each per-engine concurrency,
two configurations: your staleness control at your bound (``k₀ = max(bound, 1)``, its enforcement
kept) and synchronous (``system.staleness = sync``), ``seeds`` seeds each. Q3's answer is the
asynchronous configuration with the highest mean samples/s (``sandbox.plan.split.best_split``,
with its paired margin over the runner-up). Q4's speed-up is, per seed ``s``, ``r_s = samples/s of the
best asynchronous configuration / samples/s of the best synchronous one`` (each best over its own
grid), and its Student t 95% interval over seeds. **What drives it**: the same two configurations
rerun (same seeds) with every response the mean length of the length model (``length_sigma = 0``, no
Pareto factor, the median set to the mean of the cut distribution: no length tail, the same tokens to
generate on average — with the median instead, the rerun would also generate less, which moves the
balance between generation and training and so the speed-up for a reason that is not the tail) and
with no weight-sync cost (engine ``sync_time = 0`` and ``system.sync_delay = 0``); the share of the
gain the tail explains is ``(r − r_no_tail) / (r − 1)``.

**Q7** (:mod:`sandbox.analysis.drop_bias`, claim ``drop_bias``): the drop-bias summary of every seed
of the best asynchronous configuration (your bound, your enforcement), of the configuration of the grid
that drops the largest fraction of groups (where the engines out-run the trainer), and of that one
with problems (256 prompts whose lengths persist across epochs, the ``drop_bias`` claim's
:data:`sandbox.claims.drop_bias.PROMPTS`): ``length_bias = mean consumed / mean generated − 1`` with its
t-interval, the dropped fractions of long and short groups, and the Spearman correlation over
problems between a problem's mean length and its dropped fraction. Verdict (thresholds of the claim):
*biased toward short responses* when the mean is below −0.05 and the interval is below 0;
*negligible* when the interval is inside (−0.05, 0.05); *inconclusive* otherwise. Difficulty is not
measured: a long problem stands in for a hard one (the page says so).

**Time.** A system-only run costs about :data:`SECONDS_PER_SEQUENCE` per response simulated (measured
on the development machine, 2 shared cores: 31–55 µs for 256 × 5 responses per step on 1–4 trainer
GPUs, 40 µs over a whole --quick plan; the estimate counts the dropped and in-flight groups as one more
batch).
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sandbox.base.errors import ScenarioError
from sandbox.claims.drop_bias import MATERIAL, NEGLIGIBLE, PROMPTS
from sandbox.plan.capacity import staleness_for
from sandbox.plan.split import (
    MAX_GPUS,
    SplitConfig,
    SplitOptions,
    best_split,
    simulate_split,
    split_configurations,
    t_interval,
)
from sandbox.scenario.api import validate_scenario
from sandbox.system.hardware import GPUS, MODELS

SECONDS_PER_SEQUENCE = 5e-5
"""Wall seconds per simulated response of a system-only split run (module docstring)."""
QUICK = {"seeds": 3, "steps": 8, "trainers": 4, "concurrency": (64, 256)}
FULL = {"seeds": 5, "steps": 20, "trainers": 6, "concurrency": (64, 128, 256)}
DEFAULT_GPU = "H100"
MAX_TOKENS = 10_000_000
"""The longest response planned, tokens (a config's response cap; the largest context windows are ~1e6)."""

#: Per framework, the config keys holding a cluster fact, in the order tried (their values are recorded by
#: the importer as rows). ``trainer``/``rollout``: products of GPU counts; ``total``: the whole cluster;
#: ``shared``: a switch that puts the engines on the trainer's GPUs (the total is then the trainer's).
CONFIG_KEYS: dict[str, dict[str, Any]] = {
    "verl": {
        "trainer": [("trainer.n_gpus_per_node", "trainer.nnodes")],
        "rollout": [("rollout.n_gpus_per_node", "rollout.nnodes")],
        "model": ["actor_rollout_ref.model.path"],
        "tp": ["actor_rollout_ref.rollout.tensor_model_parallel_size"],
        "max_tokens": ["data.max_response_length"],
    },
    "verl-vcpo": {
        "trainer": [("trainer.n_gpus_per_node", "trainer.nnodes")],
        "rollout": [("rollout.n_gpus_per_node", "rollout.nnodes")],
        "model": ["actor_rollout_ref.model.path"],
        "tp": ["actor_rollout_ref.rollout.tensor_model_parallel_size"],
        "max_tokens": ["data.max_response_length"],
    },
    "trl": {
        "total": [("(accelerate launch --num_processes)",), ("(torchrun --nproc_per_node)",)],
        "model": ["model_name_or_path"],
        "tp": ["vllm_tensor_parallel_size"],
        "max_tokens": ["max_completion_length"],
    },
    "openrlhf": {
        "trainer": [("actor.num_gpus_per_node", "actor.num_nodes")],
        "rollout": [("vllm.num_engines", "vllm.tensor_parallel_size")],
        "shared": ["train.colocate_all", "colocate_all_models"],
        "model": ["actor.model_name_or_path", "pretrain"],
        "tp": ["vllm.tensor_parallel_size"],
        "max_tokens": ["rollout.max_new_tokens", "generate_max_len"],
    },
    "areal": {
        "allocation": ["allocation_mode"],
        "backends": ("rollout.backend", "actor.backend"),
        "total": [("cluster.n_gpus_per_node", "cluster.n_nodes")],
        "model": ["actor.path"],
        "max_tokens": ["gconfig.max_new_tokens"],
    },
    "prime-rl": {
        "trainer": [("deployment.num_train_gpus",), ("deployment.num_train_nodes", "deployment.gpus_per_node")],
        "rollout": [("deployment.num_infer_gpus",), ("deployment.num_infer_nodes", "deployment.gpus_per_node")],
        "model": ["model.name", "trainer.model.name", "orchestrator.model.name"],
        "tp": ["inference.vllm.tensor_parallel_size", "inference.parallel.tp"],
        "max_tokens": ["orchestrator.train.sampling.max_completion_tokens", "orchestrator.sampling.max_tokens"],
    },
}
#: one allocation of AReaL (``sglang:d4p1t1``, ``d4p1t1``): data, pipeline, tensor parallel sizes
_ALLOC = re.compile(r"(?:\w+[:.])?d(\d+)p(\d+)t(\d+)(?:c\d+)?(?:e\d+)?")


def _allocation(text: str) -> list[tuple[int, int, int]]:
    return [tuple(map(int, m.groups())) for m in _ALLOC.finditer(text)]


class SystemPlanError(ValueError):
    """A cluster fact out of range; the message names the flag."""


def model_from_name(name: str) -> str | None:
    """The hardware table's model for a checkpoint name: family and size both as tokens of the name
    (``Qwen/Qwen2.5-Math-7B`` → ``qwen2.5-7b``; ``Meta-Llama-3.1-8B-Instruct`` → ``llama3.1-8b``); None
    when no entry matches."""
    low = name.lower().rsplit("/", 1)[-1]
    low = re.sub(r"llama-(\d)", r"llama\1", low)
    tokens = set(re.split(r"[-_/ ]+", low))
    for key in MODELS:
        family, size = key.rsplit("-", 1)
        if family in tokens and size in tokens:
            return key
    return None


def nearest_model(name: str) -> str | None:
    """A stand-in of the hardware table for a checkpoint it lacks, by the size in the name (``Qwen3-8B`` → 8e9
    parameters): the entry of the same family with the nearest size on a log scale, else of any family; None
    when the name gives no size. Q3/Q4/Q7 then time a model of that size (the page says which)."""
    low = name.lower().rsplit("/", 1)[-1]
    sizes = [float(x) for x in re.findall(r"(?:^|[-_])(\d+(?:\.\d+)?)b(?=$|[-_])", low)]
    if not sizes:
        return None
    size = sizes[0]

    def key(entry: str) -> float:  # total parameters (a mixture-of-experts entry's name ends in its active size)
        return abs(math.log(MODELS[entry].params / (size * 1e9)))

    family = [k for k in MODELS if k.split("-")[0].rstrip("0123456789.") in low]
    return min(family or list(MODELS), key=key)


@dataclass
class Facts:
    gpus: int | None = None
    gpu: str = DEFAULT_GPU
    model: str | None = None
    tp: int = 1
    max_tokens: int | None = None
    length_median: float | None = None
    length_sigma: float | None = None
    trainer_gpus: int | None = None
    source: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def lengths(self) -> tuple[float, float, int]:
        mt = self.max_tokens or 8192
        return (
            float(self.length_median or min(1000.0, mt / 4)),
            float(1.0 if self.length_sigma is None else self.length_sigma),
            mt,
        )


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def cluster_facts(rows, framework: str, flags: dict[str, Any], cluster: dict[str, Any] | None = None) -> Facts:
    """The facts (module docstring) with the source of each; ``rows``: the importer's rows
    (``key``, ``value``); ``flags``: ``gpus``, ``gpu``, ``model``, ``tp``, ``max_tokens``, ``length_median``,
    ``length_sigma`` (None when not given)."""
    f = Facts()
    seen: dict[str, Any] = {}
    for r in rows:
        seen.setdefault(r.key, r.value)
    keys = CONFIG_KEYS.get(framework, {})

    def product(names) -> int | None:
        vals = [_int(seen.get(n)) for n in names]
        return math.prod(vals) if vals and all(v is not None for v in vals) else None

    def first_product(options) -> tuple[int | None, str]:
        for names in options:
            v = product(names)
            if v is not None:
                return v, " x ".join(names)
        return None, ""

    def first(names) -> tuple[Any, str]:
        for n in names:
            if seen.get(n) is not None:
                return seen[n], n
        return None, ""

    t, t_src = first_product(keys.get("trainer", []))
    r, r_src = first_product(keys.get("rollout", []))
    total, total_src = first_product(keys.get("total", []))
    shared, shared_src = first(keys.get("shared", []))
    if t is not None and r is not None and not shared:
        f.gpus, f.trainer_gpus = t + r, t
        f.source["gpus"] = f"{t_src} + {r_src} in the config"
    elif t is not None:
        f.gpus = t
        f.source["gpus"] = f"{t_src} in the config" + (
            f" (engines share the trainer's GPUs: {shared_src})" if shared else ""
        )
    elif total is not None:
        f.gpus, f.source["gpus"] = total, f"{total_src} in the config"
    alloc, alloc_src = first(keys.get("allocation", []))
    parts: list[tuple[int, int, int]] = []
    if isinstance(alloc, str) and "+" in alloc:
        parts = _allocation(alloc)
    elif "backends" in keys and all(isinstance(seen.get(k), str) for k in keys["backends"]):
        parts = [p for k in keys["backends"] for p in _allocation(seen[k])]
        alloc_src = " and ".join(keys["backends"])
        alloc = " / ".join(seen[k] for k in keys["backends"])
    if len(parts) == 2:
        (rd, rp, rt), (td, tp_, tt) = parts
        f.gpus, f.trainer_gpus, f.tp = rd * rp * rt + td * tp_ * tt, td * tp_ * tt, rt * rp
        f.source["gpus"] = f.source["tp"] = f"{alloc_src} = {alloc!r} in the config"
    tp_v, tp_src = first(keys.get("tp", []))
    if _int(tp_v):
        f.tp, f.source["tp"] = int(tp_v), f"{tp_src} in the config"
    mt, mt_src = first(keys.get("max_tokens", []))
    if _int(mt):
        f.max_tokens, f.source["max_tokens"] = int(mt), f"{mt_src} in the config"
    name, name_src = first(keys.get("model", []))
    if isinstance(name, str):
        f.model = model_from_name(name)
        stand_in = None if f.model else nearest_model(name)
        if stand_in:
            f.model = stand_in
            f.source["model"] = (
                f"{name_src} = {name!r} in the config is not in the hardware table: {stand_in}, the "
                "nearest by size, stands in (give --model to choose)"
            )
        else:
            f.source["model"] = (
                f"{name_src} = {name!r} in the config"
                if f.model
                else f"{name_src} = {name!r} in the config is not in the hardware table "
                f"({', '.join(MODELS)}): give --model"
            )
    if cluster and "sync_delay" in cluster:
        f.source["sync_delay"] = "cluster.sync_delay"
    if cluster:
        t, r = _int(cluster.get("trainer_gpus")), _int(cluster.get("rollout_gpus"))
        if t is not None and r is not None:
            f.gpus, f.trainer_gpus, f.source["gpus"] = t + r, t, "cluster.trainer_gpus + cluster.rollout_gpus"
        if isinstance(cluster.get("gpu"), str):
            f.gpu, f.source["gpu"] = cluster["gpu"], "cluster.gpu"
    for key in ("gpus", "gpu", "model", "tp", "max_tokens", "length_median", "length_sigma"):
        if flags.get(key) is not None:
            setattr(f, key, flags[key])
            f.source[key] = f"--{key.replace('_', '-')}"
            if key == "gpus":
                f.trainer_gpus = None
    if f.gpu not in GPUS:
        raise SystemPlanError(
            f"{'--gpu' if flags.get('gpu') else 'cluster.gpu'}: unknown GPU {f.gpu!r}; known: {', '.join(GPUS)}"
        )
    if flags.get("model") is not None and f.model not in MODELS:
        raise SystemPlanError(f"--model: unknown model {f.model!r}; known: {', '.join(MODELS)}")
    f.source.setdefault("gpu", f"not in the config: {DEFAULT_GPU} assumed (--gpu)")
    for what, n, limit in (
        ("gpus", f.gpus, MAX_GPUS),
        ("tp", f.tp, MAX_GPUS),
        ("max_tokens", f.max_tokens, MAX_TOKENS),
    ):
        if n is not None and n > limit:  # before any list is sized by it
            raise SystemPlanError(f"{f.source.get(what, what)}: {what} = {n:,}; expected at most {limit:,}")
    if f.gpus is None:
        f.missing.append("the total GPU count (--gpus N, or trainer_gpus and rollout_gpus in a --cluster file)")
    elif f.gpus < 1 + f.tp:
        raise SystemPlanError(f"--gpus: {f.gpus} GPUs cannot hold a trainer GPU and an engine of --tp {f.tp} GPU(s)")
    if f.model is None:
        f.missing.append("the model (--model, one of " + ", ".join(MODELS) + ")")
    med, sig, mt = f.lengths()
    f.source.setdefault("max_tokens", "not in the config: 8192 assumed (--max-tokens)")
    f.source.setdefault("length_median", f"assumed min(1000, max_tokens / 4) = {med:g} (--length-median)")
    f.source.setdefault("length_sigma", "assumed 1.0 (--length-sigma)")
    if f.trainer_gpus is not None and not 1 <= f.trainer_gpus <= f.gpus - f.tp:
        f.trainer_gpus = None
    return f


def trainer_grid(gpus: int, tp: int, n: int, include: int | None = None) -> list[int]:
    """Trainer GPU counts ``t = gpus − tp·e`` (``e ≥ 1`` engines, ``t ≥ 1``: no GPU left idle), at most ``n`` of
    them spread evenly on a log scale of ``t`` (all when there are at most ``n``), plus ``include`` (your own
    split) when given."""
    options = [gpus - tp * e for e in range(1, gpus) if gpus - tp * e >= 1]
    if len(options) <= n:
        grid = set(options)
    else:
        targets = np.exp(np.linspace(0, math.log(max(options)), n))
        grid = {min(options, key=lambda t: abs(math.log(t) - math.log(x))) for x in targets}
    if include is not None:
        grid.add(include)
    return sorted(grid)


@dataclass
class SystemPlan:
    facts: Facts
    seeds: int
    steps: int
    bound: int
    control: dict
    asynchronous: list[SplitConfig]
    synchronous: list[SplitConfig]
    seconds: float
    note: str = ""
    """Set when the plan was shrunk to fit the budget: what was reduced, from what to what."""

    @property
    def runs(self) -> int:
        return (len(self.asynchronous) + len(self.synchronous) + 4 + 1) * self.seeds

    def weights(self) -> list[float]:
        """One weight (estimated seconds) per progress tick of :func:`run_system_plan`."""
        return [self.seconds / (len(self.asynchronous) + len(self.synchronous) + 4 + 1)] * (
            len(self.asynchronous) + len(self.synchronous) + 4 + 1
        )


def _seconds(cfg: SplitConfig, steps: int) -> float:
    a = cfg.scenario.algorithm
    return SECONDS_PER_SEQUENCE * (steps + 1) * a.groups_per_step * a.group_size


def make_system_plan(
    data: dict, facts: Facts, quick: bool, bound: int, max_seconds: float | None = None
) -> SystemPlan | None:
    """The runs of Q3/Q4/Q7 (module docstring), or None when a fact is missing (``facts.missing``). ``max_seconds``:
    the budget left for them; a plan over it is shrunk — steps per run down to 6, then seeds down to 2, then steps
    down to 3 — and says so in its ``note`` (a batch of thousands of responses per step prices each split run at
    seconds)."""
    if facts.missing:
        return None
    size = QUICK if quick else FULL
    med, sig, mt = facts.lengths()
    k0 = max(bound, 1)
    control = staleness_for(data["system"]["staleness"], k0)
    base = copy.deepcopy(data)
    base["system"]["staleness"] = control
    if facts.source.get("sync_delay") != "cluster.sync_delay":  # the proxy's own delivery delay is not yours
        base["system"]["sync_delay"] = {"kind": "constant", "value": 0.0}
    opts = SplitOptions(
        gpus=facts.gpus,
        gpu=facts.gpu,
        model=facts.model,
        tp=facts.tp,
        concurrency=list(size["concurrency"]),
        trainer_gpus=trainer_grid(facts.gpus, facts.tp, size["trainers"], facts.trainer_gpus),
        length_median=med,
        length_sigma=sig,
        max_tokens=mt,
    )
    G = int(base["algorithm"]["group_size"])
    opts.concurrency = sorted({max(c, G) for c in opts.concurrency})
    try:
        asy = split_configurations(base, "preflight (your bound)", opts)
        syn = split_configurations(base, "preflight (synchronous)", SplitOptions(**{**opts.__dict__, "k_max": 0}))
    except ScenarioError as exc:  # naming the option (e.g. a model that does not fit its engine)
        raise SystemPlanError(str(exc)) from None
    runs = len(asy) + len(syn) + 4 + 1
    seeds, steps = size["seeds"], size["steps"]

    def cost(seeds_: int, steps_: int) -> float:
        return _seconds(asy[0], steps_) * seeds_ * runs

    note = ""
    if max_seconds is not None and cost(seeds, steps) > max_seconds:
        before = (seeds, steps)
        while cost(seeds, steps) > max_seconds and steps > 6:
            steps = max(6, steps // 2)
        while cost(seeds, steps) > max_seconds and seeds > 2:
            seeds -= 1
        while cost(seeds, steps) > max_seconds and steps > 3:
            steps -= 1
        note = (
            f"shrunk to fit the budget: {before[0]} seeds x {before[1]} steps per split run -> {seeds} x {steps} "
            f"(the batch is {asy[0].scenario.algorithm.groups_per_step * asy[0].scenario.algorithm.group_size} "
            "responses per step); the intervals are wider and the start-up weighs more"
        )
    return SystemPlan(facts, seeds, steps, k0, control, asy, syn, cost(seeds, steps), note)


def _variant(cfg: SplitConfig, gen: dict | None = None, system: dict | None = None) -> SplitConfig:
    d = cfg.scenario.model_dump(mode="json", exclude_none=True)
    d["system"]["generation_time"].update(gen or {})
    d["system"].update(system or {})
    return SplitConfig(cfg.trainer_gpus, cfg.engines, cfg.concurrency, validate_scenario(d, f"preflight {cfg.label}"))


def mean_length(cfg: SplitConfig, draws: int = 400_000) -> float:
    """Mean response length of ``cfg``'s length model (median, σ, Pareto factor, cut at ``max_tokens``),
    from ``draws`` lengths of a fixed generator (the same number every call)."""
    gen = cfg.scenario.system.generation_time
    return float(np.mean(gen.lengths(np.random.default_rng(0), None, draws)))


def _rate(m) -> float:
    return m.samples / m.sim_time if m.sim_time > 0 else math.nan


def _bias_summary(per_seed: list[dict]) -> dict:
    col = lambda k: np.array([d.get(k, math.nan) for d in per_seed], dtype=float)  # noqa: E731
    out = {}
    for key in (
        "length_bias",
        "dropped_fraction",
        "dropped_fraction_long",
        "dropped_fraction_short",
        "length_generated_mean",
        "length_consumed_mean",
        "length_generated_p90",
        "length_consumed_p90",
        "length_ks",
        "prompt_spearman",
        "prompts_never_consumed",
    ):
        v = col(key)
        if np.isfinite(v).any():
            fraction = key.startswith("dropped_fraction") or key == "prompts_never_consumed"
            out[key] = list(t_interval(v, bounds=(0.0, 1.0) if fraction else None))
    return out


def bias_verdict(interval: list[float] | None) -> str:
    if interval is None or not math.isfinite(interval[0]):
        return "not measured"
    m, lo, hi = interval
    if m < MATERIAL and math.isfinite(hi) and hi < 0:
        return "biased toward short responses"
    if math.isfinite(lo) and NEGLIGIBLE[0] < lo and hi < NEGLIGIBLE[1]:
        return "negligible"
    return "inconclusive (the interval reaches past a threshold)"


def run_system_plan(sp: SystemPlan, advance: Callable[[str], None] | None = None) -> dict:
    """Run the plan; the Q3, Q4 and Q7 answers (module docstring) as plain numbers."""
    tick = advance or (lambda label: None)
    seeds = range(sp.seeds)

    def sweep(configs, with_bias=False):
        rows, per_seed, bias = [], {}, {}
        for c in configs:
            ms = [simulate_split(c, sp.steps, s, with_drop_bias=with_bias) for s in seeds]
            rates = [_rate(m) for m in ms]
            per_seed[c.label] = rates
            mean, lo, hi = t_interval(rates)
            lags = np.concatenate([m.lags for m in ms])
            taken = sum(m.dropped + m.consumed for m in ms)
            rows.append(
                {
                    "trainer_gpus": c.trainer_gpus,
                    "engines": c.engines,
                    "concurrency": c.concurrency,
                    "samples_per_s": mean,
                    "samples_per_s_low": lo,
                    "samples_per_s_high": hi,
                    "lag_mean": float(lags.mean()) if lags.size else math.nan,
                    "dropped_fraction": sum(m.dropped for m in ms) / taken if taken else math.nan,
                    "util_learner": float(np.mean([m.util_learner for m in ms])),
                }
            )
            if with_bias:
                bias[c.label] = [m.drop_bias for m in ms]
            tick(c.label)
        return rows, per_seed, bias

    a_rows, a_seed, a_bias = sweep(sp.asynchronous, with_bias=True)
    s_rows, s_seed, _ = sweep(sp.synchronous)
    best_a, best_s = best_split(a_rows, a_seed), best_split(s_rows, s_seed)
    pick = lambda cfgs, b: next(
        c for c in cfgs if c.trainer_gpus == b["trainer_gpus"] and c.concurrency == b["concurrency"]
    )  # noqa: E731
    ca, cs = pick(sp.asynchronous, best_a), pick(sp.synchronous, best_s)
    ratio = np.array(a_seed[ca.label]) / np.array(s_seed[cs.label])

    def rerun(gen=None, system=None, label=""):
        va, vs = _variant(ca, gen, system), _variant(cs, gen, system)
        ra = [_rate(simulate_split(va, sp.steps, s)) for s in seeds]
        tick(f"{label} async")
        rs = [_rate(simulate_split(vs, sp.steps, s)) for s in seeds]
        tick(f"{label} sync")
        return list(t_interval(np.array(ra) / np.array(rs)))

    flat = mean_length(ca)
    no_tail = rerun({"length_sigma": 0.0, "tail_alpha": None, "length_median": flat}, None, "no tail")
    no_sync = rerun({"sync_time": 0.0}, {"sync_delay": {"kind": "constant", "value": 0.0}}, "no sync cost")
    speed = list(t_interval(ratio))
    tail_share = (speed[0] - no_tail[0]) / (speed[0] - 1) if abs(speed[0] - 1) > 1e-9 else math.nan
    sync_share = (no_sync[0] - speed[0]) / (speed[0] - 1) if abs(speed[0] - 1) > 1e-9 else math.nan
    worst_row = max(
        a_rows,
        key=lambda r: (
            r["dropped_fraction"] if math.isfinite(r["dropped_fraction"]) else -1.0,
            -r["trainer_gpus"],
            -r["concurrency"],
        ),
    )
    cw = pick(sp.asynchronous, worst_row)
    prompts = _variant(cw, {**PROMPTS})
    p_bias = [simulate_split(prompts, sp.steps, s, with_drop_bias=True).drop_bias for s in seeds]
    tick("Q7 problems")
    user = None
    if sp.facts.trainer_gpus is not None:
        mine = [r for r in a_rows if r["trainer_gpus"] == sp.facts.trainer_gpus]
        user = max(mine, key=lambda r: r["samples_per_s"]) if mine else None
    bias = _bias_summary(a_bias[ca.label])
    wbias = _bias_summary(a_bias[cw.label])
    pbias = _bias_summary(p_bias)
    gen = ca.scenario.system.generation_time
    f = sp.facts
    return {
        "facts": {
            "gpus": f.gpus,
            "gpu": f.gpu,
            "model": f.model,
            "tp": f.tp,
            "max_tokens": f.max_tokens,
            "length_median": gen.length_median,
            "length_sigma": gen.length_sigma,
            "trainer_gpus": f.trainer_gpus,
            "source": f.source,
        },
        "seeds": sp.seeds,
        "steps": sp.steps,
        "bound": sp.bound,
        "control": sp.control,
        "note": sp.note,
        "Q3": {
            "verdict": f"{best_a['trainer_gpus']} trainer GPUs, {f.gpus - best_a['trainer_gpus']} for rollouts, "
            f"{best_a['concurrency']} sequences per engine",
            "best": best_a,
            "best_synchronous": best_s,
            "rows": a_rows,
            "rows_synchronous": s_rows,
            "your_split": user,
            "sync_time_s": gen.sync_time,
            "step_base_s": gen.step_base,
        },
        "Q4": {
            "verdict": f"×{speed[0]:.2f}",
            "speedup": speed,
            "speedup_no_tail": no_tail,
            "no_tail_length": flat,
            "speedup_no_sync_cost": no_sync,
            "tail_share": tail_share,
            "sync_share": sync_share,
            "per_seed": [float(x) for x in ratio],
        },
        "Q7": {
            "verdict": bias_verdict(bias.get("length_bias")),
            "bound": sp.bound,
            "enforcement": sp.control.get("enforcement", "-"),
            "control": sp.control,
            "summary": bias,
            "most_dropping": {
                "trainer_gpus": cw.trainer_gpus,
                "concurrency": cw.concurrency,
                "summary": wbias,
                "verdict": bias_verdict(wbias.get("length_bias")),
            },
            "problems": pbias,
            "problems_verdict": bias_verdict(pbias.get("length_bias")),
        },
    }
