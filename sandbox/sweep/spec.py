"""Sweep files: a base scenario, axes over dotted keys, and seeds, expanded into runs.

A sweep file is TOML::

    base = "../delayed_quadratic.toml"   # path relative to this file, or an inline [base] table
    seeds = [0, 1, 2]                    # each sets run.seed (default: the base's run.seed)

    [sweep]
    name = "lag_lr"                      # default: the file's stem; output runs/sweeps/<safe_name(name)>
    workers = 2                          # parallel runs (default: one per core)
    backend = "local"                    # local | ray
    retries = 2                          # times a run is retried when its worker process dies

    [set]                                # fixed overrides applied to every run
    "run.steps" = 400

    [grid]                               # cartesian product over these lists
    "system.staleness.k" = [1, 2, 4, 8]
    "algorithm.optimizer.lr" = [0.05, 0.1, 0.2]

    [[zip]]                              # lists of equal length varied together
    method = ["none", "tis"]             # a key without a dot that is no scenario field: a label column
    "algorithm.correction" = [{ name = "none" }, { name = "tis", level = "sequence" }]

If the base scenario has ``[variants]``, every variant becomes one value of a ``variant`` axis.
Each run gets an id: a stable hash of its resolved (un-defaulted) scenario data, so reordering the
axes or adding values keeps the finished runs, and changing the base or ``[set]`` recomputes them.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.base.outputs import check_names
from sandbox.base.readfile import TOML_LIMIT, InputFileError, read_text
from sandbox.scenario.load import (
    ScenarioError,
    override_texts,
    parse_overrides,
    read_toml,
    validate_scenario,
)
from sandbox.scenario.model import MAX_SEED, Scenario
from sandbox.scenario.shipped import resolve_scenario_path

TOP_KEYS = {"base", "seeds", "sweep", "set", "grid", "zip"}
SWEEP_KEYS = {"name", "workers", "backend", "out", "description", "retries"}
DEFAULT_RETRIES = 2
MAX_RETRIES = 100
BACKENDS = ("local", "ray")


@dataclass
class RunSpec:
    """One run of a sweep: its id, the axis values that define it and the scenario data."""

    id: str
    params: dict[str, Any]  # axis key -> value (grid, zip, label and variant axes), in axis order
    seed: int
    overrides: dict[str, Any]  # dotted overrides applied to the base (set + axes + seed)
    data: dict  # the raw scenario dict (base + overrides), what the run validates and executes

    def scenario(self) -> Scenario:
        return validate_scenario(self.data, f"run {self.id}")


@dataclass
class SweepSpec:
    """A parsed, validated sweep; ``runs`` is the expanded list."""

    name: str
    base: dict
    axes: list[list[str]]  # groups of keys varied together (a grid key is a group of one)
    values: list[list[tuple]]  # per group: the tuples of values
    seeds: list[int] | None
    set: dict[str, Any] = field(default_factory=dict)
    workers: int | None = None
    backend: str = "local"
    retries: int = DEFAULT_RETRIES  # retries of a run whose worker process died (Ray max_retries; local: alone)
    out: str | None = None
    description: str = ""
    source: str = "sweep"
    text: str = ""  # the sweep file as written (for the report)
    runs: list[RunSpec] = field(default_factory=list)

    @property
    def axis_keys(self) -> list[str]:
        return [k for group in self.axes for k in group]

    @property
    def display_keys(self) -> list[str]:
        """Keys that name a run in tables and legends: a zip group with a label axis shows only
        its labels (``method`` rather than the tables it sets)."""
        return display_keys(self.axes)

    @property
    def label_keys(self) -> list[str]:
        return [k for k in self.axis_keys if is_label_key(k)]


def is_label_key(key: str) -> bool:
    """An axis key without a dot that names no scenario field only labels the runs (a table column)."""
    return "." not in key and key not in Scenario.model_fields


def display_keys(axes: list[list[str]]) -> list[str]:
    out: list[str] = []
    for group in axes:
        labels = [k for k in group if is_label_key(k)]
        out.extend(labels or group)
    return out


def run_id(data: dict) -> str:
    """Stable 12-hex-digit id of a run's scenario data (key order does not matter)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _err(problems: list[str] | str, source: str) -> ScenarioError:
    return ScenarioError([problems] if isinstance(problems, str) else problems, source)


def _check_list(key: str, value: Any, where: str, source: str) -> list:
    if not isinstance(value, list) or not value:
        raise _err(f"{where}.{key}: expected a non-empty list of values (got {value!r})", source)
    return value


def parse_sweep(
    raw: dict,
    base_dir: Path | None = None,
    source: str = "sweep",
    default_name: str = "sweep",
    extra_set: dict[str, Any] | None = None,
) -> SweepSpec:
    """Validate a sweep dict (as read from TOML) and expand it."""
    problems = [f"{k}: unknown key (expected one of {sorted(TOP_KEYS)})" for k in raw if k not in TOP_KEYS]
    scenario_tables = sorted(k for k in raw if k in ("task", "system", "algorithm", "run", "variants"))
    if problems and scenario_tables and "base" not in raw:
        raise _err(
            f"this is a scenario file ({', '.join(scenario_tables)} at the top), not a sweep: use "
            f'`sandbox run {source}` (a sweep file names it as base = "..." with [grid] or [[zip]] axes)',
            source,
        )
    if problems:
        raise _err(problems, source)
    meta = raw.get("sweep", {})
    if not isinstance(meta, dict):
        raise _err("sweep: expected a table", source)
    problems = [f"sweep.{k}: unknown key (expected one of {sorted(SWEEP_KEYS)})" for k in meta if k not in SWEEP_KEYS]
    if problems:
        raise _err(problems, source)
    workers = meta.get("workers")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise _err(f"sweep.workers: expected an integer >= 1 (got {workers!r})", source)
    backend = meta.get("backend", "local")
    if backend not in BACKENDS:
        raise _err(f"sweep.backend: expected one of {list(BACKENDS)} (got {backend!r})", source)
    retries = meta.get("retries", DEFAULT_RETRIES)
    if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= MAX_RETRIES:
        raise _err(f"sweep.retries: expected an integer from 0 to {MAX_RETRIES} (got {retries!r})", source)

    # base scenario
    if "base" not in raw:
        raise _err("base: missing; give a scenario path (relative to the sweep file) or an inline [base] table", source)
    base_val = raw["base"]
    if isinstance(base_val, str):
        path = Path(base_val)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            base = read_toml(path)
        except ScenarioError as exc:
            raise _err([f"base: {p}" for p in exc.problems], source) from None
    elif isinstance(base_val, dict):
        base = base_val
    else:
        raise _err(f"base: expected a path or a table (got {base_val!r})", source)

    # seeds
    seeds = raw.get("seeds")
    if seeds is not None:
        _check_list("seeds", seeds, "(top level)", source)
        if not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED for s in seeds):
            raise _err(f"seeds: expected integers from 0 to 2^63 - 1 (got {seeds!r})", source)
        if len(set(seeds)) != len(seeds):
            raise _err(f"seeds: duplicate values in {seeds!r}", source)

    # fixed overrides
    fixed = dict(raw.get("set", {}))
    if not isinstance(raw.get("set", {}), dict):
        raise _err("set: expected a table of dotted keys", source)
    fixed.update(extra_set or {})

    # axes
    axes: list[list[str]] = []
    values: list[list[tuple]] = []
    seen: dict[str, str] = {}

    def claim(key: str, where: str) -> None:
        if key in seen:
            raise _err(f"{where}.{key}: already varied in {seen[key]}; a key may appear in one axis only", source)
        if key in fixed:
            raise _err(f"{where}.{key}: also fixed in [set]; remove one of them", source)
        if key == "run.seed" and seeds is not None:
            raise _err(f"{where}.run.seed: use the top-level `seeds` list (it sets run.seed)", source)
        if key == "variant":
            raise _err(f"{where}.variant: reserved for the base scenario's [variants]", source)
        seen[key] = where

    grid = raw.get("grid", {})
    if not isinstance(grid, dict):
        raise _err("grid: expected a table of dotted keys -> lists", source)
    for key, vals in grid.items():
        claim(key, "grid")
        _check_list(key, vals, "grid", source)
        axes.append([key])
        values.append([(v,) for v in vals])
    zips = raw.get("zip", [])
    if isinstance(zips, dict):
        zips = [zips]
    if not isinstance(zips, list) or not all(isinstance(z, dict) for z in zips):
        raise _err("zip: expected [[zip]] tables of dotted keys -> lists of equal length", source)
    for i, group in enumerate(zips):
        where = f"zip[{i}]"
        if not group:
            raise _err(f"{where}: empty group", source)
        lengths = {}
        for key, vals in group.items():
            claim(key, where)
            lengths[key] = len(_check_list(key, vals, where, source))
        if len(set(lengths.values())) > 1:
            detail = ", ".join(f"{k} has {n}" for k, n in lengths.items())
            raise _err(f"{where}: lists must have equal length ({detail})", source)
        keys = list(group)
        axes.append(keys)
        values.append(list(zip(*(group[k] for k in keys))))

    # the base's variants become an axis
    variants = base.get("variants") or {}
    base = {k: v for k, v in base.items() if k != "variants"}
    if variants:
        if not isinstance(variants, dict):
            raise _err("base.variants: expected a table of named overrides", source)
        axes.append(["variant"])
        values.append([(name,) for name in variants])

    name = meta.get("name", default_name)
    if not isinstance(name, str):
        raise _err(f"sweep.name: expected a string (got {name!r})", source)
    try:
        check_names([name], "sweep", reserved=False)  # it names the default output directory
    except ValueError as exc:
        raise _err(f"sweep.name: {exc}", source) from None
    out = meta.get("out")
    if out is not None and (not isinstance(out, str) or not out or Path(out).is_absolute() or ".." in Path(out).parts):
        raise _err(
            f"sweep.out: expected a relative path without '..' (got {out!r}); give any other directory with --out",
            source,
        )

    spec = SweepSpec(
        name=name,
        base=base,
        axes=axes,
        values=values,
        seeds=list(seeds) if seeds is not None else None,
        set=fixed,
        workers=workers,
        backend=backend,
        retries=retries,
        out=out,
        description=str(meta.get("description", base.get("description", ""))),
        source=source,
    )
    spec.runs = expand(spec, variants)
    return spec


def _overlapping_replicas(taken: list[tuple[int, int]], seed: int, replicas: int) -> str | None:
    """With ``run.schedules = "independent"`` replica r of seed s is the run with seed s + r: two
    seeds closer than ``replicas`` would run the same replicas twice and count them as independent."""
    last = seed + replicas - 1
    for first, other_last in taken:
        if seed <= other_last and first <= last:
            return (
                f"seeds: {first} and {seed} overlap: with run.schedules = 'independent' and task.replicas = "
                f"{replicas}, seed s runs the replicas of seeds s .. s + {replicas - 1}; space the seeds at least "
                f"{replicas} apart (e.g. seeds = [0, {replicas}, {2 * replicas}])"
            )
    taken.append((seed, last))
    return None


def overlay(base: dict, overrides: dict[str, Any]) -> dict:
    """``apply_overrides(base, overrides)`` without copying the whole of ``base``: only the tables on
    the path of an override are copied (and the override values), the rest is shared with ``base``,
    which nothing mutates (a run's data is validated, hashed and pickled, never changed). The same
    result and the same errors; a deep copy of the base per run made a 90,000-run sweep slow."""
    data = dict(base)
    own = {id(data)}
    for dotted, value in overrides.items():
        keys = dotted.split(".")
        if not all(keys):
            raise ScenarioError([f"{dotted!r}: expected a dotted key like system.staleness.k_max"], "override")
        node = data
        for k in keys[:-1]:
            if k not in node:
                node[k] = {}
                own.add(id(node[k]))
            elif not isinstance(node[k], dict):
                raise ScenarioError([f"{dotted}: '{k}' is a value, not a section"], "override")
            elif id(node[k]) not in own:
                node[k] = dict(node[k])
                own.add(id(node[k]))
            node = node[k]
        node[keys[-1]] = copy.deepcopy(value)
    return data


def expand(spec: SweepSpec, variants: dict | None = None) -> list[RunSpec]:
    """All runs of the sweep: product over the axis groups, then over seeds. Every configuration
    (axis point) is validated once, with its first seed: the seeds, checked when the sweep file is
    read, change nothing else. Problems are reported together, each with the axis values of its run."""
    variants = variants or {}
    runs: list[RunSpec] = []
    problems: list[tuple[str, str]] = []
    tried = 0
    seeds = spec.seeds if spec.seeds is not None else [None]
    ids: dict[str, dict] = {}
    replica_seeds: list[tuple[int, int]] = []  # per axis point: (first, last) master seed its replicas use
    for combo in itertools.product(*spec.values) if spec.values else [()]:
        replica_seeds.clear()
        params: dict[str, Any] = {}
        for keys, vals in zip(spec.axes, combo):
            params.update(zip(keys, vals))
        common = dict(spec.set)
        for k, v in params.items():
            if k == "variant":
                common.update(variants[v])
            elif not is_label_key(k):
                common[k] = v
        labels = {k: v for k, v in params.items() if is_label_key(k)}
        scn = None
        for seed in seeds:
            overrides = dict(common)
            if seed is not None:
                overrides["run.seed"] = seed
            tried += 1
            try:
                data = overlay(spec.base, overrides)
                if scn is None:
                    scn = validate_scenario(data, "run")
            except ScenarioError as exc:
                where = ", ".join(f"{k}={v!r}" for k, v in params.items()) or "base"
                if seed is not None:
                    where += f", seed={seed}"
                problems.extend((where, p) for p in exc.problems)
                continue
            run_seed = seed if seed is not None else scn.run.seed
            rid = run_id({"scenario": data, **({"labels": labels} if labels else {})})
            if rid in ids:
                problems.append(("", f"two runs resolve to the same scenario: {ids[rid]} and {params} (seed {seed})"))
                continue
            ids[rid] = params
            if scn.run.schedules == "independent" and seed is not None:
                clash = _overlapping_replicas(replica_seeds, run_seed, scn.task.replicas)
                if clash:
                    problems.append(("", clash))
                    continue
            runs.append(RunSpec(id=rid, params=params, seed=run_seed, overrides=overrides, data=data))
        if len(problems) > 20:
            break
    if problems:
        raise _err(_collapse_shared(problems, tried), spec.source)
    return runs


def _collapse_shared(problems: list[tuple[str, str]], tried: int) -> list[str]:
    """``[where] problem`` lines, a problem that every one of the ``tried`` runs has said once as
    ``[all N runs] problem``; at most 20 lines."""
    counts: dict[str, int] = {}
    for _, p in problems:
        counts[p] = counts.get(p, 0) + 1
    lines: list[str] = []
    for where, p in problems:
        if tried > 1 and counts[p] == tried:
            line = f"[all {tried} runs] {p}"
            if line not in lines:
                lines.append(line)
        else:
            lines.append(f"[{where}] {p}" if where else p)
    return lines[:20] + (["... and more"] if len(lines) > 20 else [])


def load_sweep(path: str | Path, overrides: list[str] | dict | None = None) -> SweepSpec:
    """Read and expand a sweep file; ``overrides`` (``dotted.key=value``) are added to ``[set]``.
    A ``path`` that does not exist may name a shipped sweep (``sweeps/lag_lr_quadratic``)."""
    path = resolve_scenario_path(path)
    raw = read_toml(path)
    extra = overrides if isinstance(overrides, dict) else parse_overrides(overrides)
    try:
        spec = parse_sweep(raw, base_dir=path.parent, source=str(path), default_name=path.stem, extra_set=extra)
    except ScenarioError as exc:
        if not extra:
            raise
        try:
            parse_sweep(raw, base_dir=path.parent, source=str(path), default_name=path.stem, extra_set={})
        except ScenarioError:
            raise exc from None
        culprits = " ".join(override_texts(extra, overrides).values())
        raise ScenarioError(exc.problems, f"override {culprits} (applied to {path})") from None
    try:
        spec.text = read_text(path, TOML_LIMIT, "sweep file")
    except InputFileError as exc:  # changed since read_toml read it
        raise ScenarioError([str(exc)], str(path)) from None
    return spec


def value_label(v: Any) -> Any:
    """A table-friendly form of an axis value: scalars as they are, tables/lists as compact text."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        if set(v) <= {"name", "kind"} and len(v) == 1:
            return str(next(iter(v.values())))
        inner = ", ".join(f"{k}={value_label(x)}" for k, x in v.items())
        return "{" + inner + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(value_label(x)) for x in v) + "]"
    return str(v)
