"""An imported config made a scenario: the mapped fields laid over a shipped proxy task (the bit-string
task of ``quickstart`` or the small LM of ``lm_mission``), cluster facts from flags or a ``[cluster]``
table, validated by the scenario loader; and IMPORT.md, key by key. Guide: ``docs/import.md``."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomli_w

from sandbox.base.errors import ScenarioError
from sandbox.frameworks.importing import ROW_TITLES, ConfigImportError, Row
from sandbox.run.runner import check_runnable
from sandbox.scenario.api import Scenario, validate_scenario
from sandbox.scenario.load import read_toml
from sandbox.scenario.shipped import shipped_root

PROXIES: dict[str, tuple[str, str]] = {
    "bitstring": (
        "quickstart.toml",
        "the bit-string task of the shipped quickstart scenario (16-bit strings, 4 policy "
        "replicas, 16 workers with exponential generation times): seconds per run",
    ),
    "lm": (
        "lm_mission.toml",
        "the small LM of the shipped lm_mission scenario (a 2-layer transformer of about 1e5 "
        "parameters on 3-digit addition, cost-model generation times): minutes per run",
    ),
}

# sections an importer writes whole: a set field under one replaces the proxy's section (its other keys
# belong to another component)
WHOLE = ("algorithm.objective", "algorithm.correction", "system.staleness")

CLUSTER_KEYS: dict[str, str] = {
    "num_workers": "rollout workers generating concurrently (engines x concurrency) -> system.num_workers",
    "generation_time": 'a delay table (docs/system.md), e.g. {kind = "trace", path = "lengths.csv"} -> system.generation_time',
    "train_time": "a delay table -> system.train_time",
    "sync_delay": "a delay table -> system.sync_delay",
    "trainer_gpus": "recorded only: the timing model of `sandbox plan` sizes the split",
    "rollout_gpus": "recorded only: the timing model of `sandbox plan` sizes the split",
    "gpu": "recorded only (GPU kind)",
    "model_params": "recorded only: the proxy task's model is a toy; scale-dependent values do not transfer",
}
_DELAYS = ("generation_time", "train_time", "sync_delay")


@dataclass
class Imported:
    """The result of an import: the scenario (validated), its TOML, the rows of IMPORT.md."""

    framework: str
    source: str
    proxy: str
    rows: list[Row]
    data: dict[str, Any]
    scenario: Scenario
    cluster_rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what reading the file assumed (shell variables, conditions)
    entry: str | None = None

    @property
    def toml(self) -> str:
        return tomli_w.dumps(self.data)

    def fields(self) -> dict[str, Any]:
        return {r.field: r.field_value for r in self.rows if r.field and r.kind not in ("scale", "unsupported")}


RUN_STEPS = "RUN_STEPS"


def _per_run(value: Any, steps: int) -> Any:
    """``(RUN_STEPS, fraction)`` (a fraction of the run, e.g. a warm-up ratio) as steps of the proxy's run."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] == RUN_STEPS:
        if not (isinstance(value[1], (int, float)) and math.isfinite(value[1])):
            raise ConfigImportError(
                f"a fraction of the run (a warm-up ratio) must be a finite number, got {value[1]!r}"
            )
        return round(value[1] * steps)
    return value


def _strip_none(x: Any) -> Any:
    """TOML has no null: a None field is left out (every such field defaults to None in the scenario model)."""
    if isinstance(x, dict):
        return {k: _strip_none(v) for k, v in x.items() if v is not None}
    return x


def _set(data: dict, dotted: str, value: Any) -> None:
    node = data
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value


def read_cluster(path: str | Path) -> dict[str, Any]:
    """The ``[cluster]`` table of a TOML file (or the file's top level when it has no such table)."""
    try:
        data = read_toml(path)
    except ScenarioError as exc:
        raise ConfigImportError(f"--cluster: {exc}") from None
    table = data.get("cluster", data)
    if not isinstance(table, dict):
        raise ConfigImportError(f"--cluster: {path}: [cluster] must be a table")
    return table


def cluster_rows(cluster: dict[str, Any]) -> tuple[dict[str, Any], list[Row]]:
    """Scenario fields and IMPORT.md rows from the cluster facts; an unknown or mistyped key is an error."""
    fields, rows = {}, []
    for key, value in cluster.items():
        if key not in CLUSTER_KEYS:
            raise ConfigImportError(f"cluster.{key}: unknown cluster key; expected one of {', '.join(CLUSTER_KEYS)}")
        if key == "num_workers":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigImportError(f"cluster.num_workers = {value!r}: expected a positive integer")
            fields["system.num_workers"] = value
            rows.append(Row("setup", f"cluster.{key}", value, "system.num_workers", value, CLUSTER_KEYS[key]))
        elif key in _DELAYS:
            if not isinstance(value, dict) or "kind" not in value:
                raise ConfigImportError(
                    f"cluster.{key} = {value!r}: expected a delay table with a kind (docs/system.md)"
                )
            fields[f"system.{key}"] = value
            rows.append(Row("setup", f"cluster.{key}", value, f"system.{key}", value, CLUSTER_KEYS[key]))
        else:
            rows.append(Row("ignored", f"cluster.{key}", value, None, None, CLUSTER_KEYS[key]))
    return fields, rows


def build(
    framework: str,
    source: str,
    rows: list[Row],
    fields: dict[str, Any],
    proxy: str = "bitstring",
    cluster: dict[str, Any] | None = None,
) -> Imported:
    """Lay ``fields`` over the proxy scenario, then the cluster facts; validate. A field the loader refuses
    is an error naming it (the importer's mapping produced a value the scenario cannot hold)."""
    if proxy not in PROXIES:
        raise ConfigImportError(f"--task: unknown proxy task {proxy!r}; expected one of {', '.join(PROXIES)}")
    base = read_toml(shipped_root() / PROXIES[proxy][0])
    data = {k: copy.deepcopy(v) for k, v in base.items() if k not in ("variants", "title", "description")}
    data["title"] = f"imported from {framework}: {Path(source).name}"
    data["description"] = (
        f"Imported by `sandbox import --framework {framework}` from {source}; the task is a proxy: "
        f"{PROXIES[proxy][1]}. See IMPORT.md beside this file."
    )
    steps = data["run"]["steps"]
    fields = {f: _per_run(v, steps) for f, v in fields.items()}
    rows = [replace(r, field_value=_per_run(r.field_value, steps)) for r in rows]
    for section in WHOLE:
        if any(f.startswith(section + ".") for f in fields):
            _set(data, section, {})
    for f, v in fields.items():
        _set(data, f, v)
    crow: list[Row] = []
    if cluster:
        cfields, crow = cluster_rows(cluster)
        for f, v in cfields.items():
            _set(data, f, v)
    gen = data["system"].get("generation_time", {})
    if data["system"].get("partial_rollouts") and gen.get("kind") not in ("cost_model", "trace"):
        data["system"]["partial_rollouts"] = False
        rows = [
            r
            if r.field != "system.partial_rollouts"
            else replace(
                r,
                kind="unsupported",
                note="partial rollouts need a time per token: the proxy's generation time is "
                f"{gen.get('kind')}; use --task lm or give cluster.generation_time as a cost_model "
                "or a trace. The scenario runs without them",
            )
            for r in rows
        ]
    data = _strip_none(data)
    try:
        scn = validate_scenario(data, f"scenario imported from {source}")
        check_runnable(scn)
    except ScenarioError as exc:
        raise ConfigImportError(f"{source}: the imported settings do not form a runnable scenario: {exc}") from None
    ordered = {
        k: data[k] for k in ("title", "description", "task", "system", "engine", "algorithm", "run") if k in data
    }
    return Imported(framework, source, proxy, rows, ordered, scn, crow)


def _cell(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_cell(x)}" for k, x in v.items()) + "}"
    text = str(v)
    return text.replace("|", "\\|").replace("\n", " ")


def render_import_md(imp: Imported, title: str) -> str:
    """IMPORT.md: the proxy task, then one table per row kind (key, value, scenario field, value, why)."""
    rows = imp.rows + imp.cluster_rows
    counts = {k: sum(r.kind == k for r in rows) for k in ROW_TITLES}
    out = [
        f"# Import from {title}",
        "",
        f"Source: `{imp.source}`; framework **{imp.framework}**.",
        "",
        f"Keys read: {len({r.key for r in rows})}, in {len(rows)} rows ({counts['mapped']} as is, {counts['converted']} converted, "
        f"{counts['default']} framework defaults, {counts['pinned']} checked conventions, {counts['setup']} setup, "
        f"{counts['scale']} scale-dependent, {counts['unsupported']} not representable, {counts['ignored']} not "
        f"simulated, {counts['unknown']} unknown).",
        "",
        "## The task is a proxy",
        "",
        f"Configs do not hold a task the sandbox can simulate, so the scenario uses **{imp.proxy}**: "
        f"{PROXIES[imp.proxy][1]}. Choose the other proxy with `--task {'lm' if imp.proxy == 'bitstring' else 'bitstring'}`. "
        "What transfers from a toy model to yours is the behaviour of the algorithm and the system (staleness, "
        "corrections, batch geometry); absolute values tied to the model's scale (learning rate, gradient clip) do not, "
        f"and the scenario keeps the proxy's own (learning rate {imp.scenario.algorithm.optimizer.lr:g}).",
        "",
        "Run it: `sandbox run scenario.toml`.",
        "",
        "A key may have several rows (one per scenario field it sets); a key in parentheses is not in the file "
        "but read from its shape (e.g. `(AsyncGRPOConfig)`: the config has AsyncGRPOConfig's keys).",
        "",
    ]
    entry_rows = [r for r in rows if r.key.startswith("(")]
    out += ["## Entry point and assumptions", ""]
    for r in entry_rows:
        out.append(f"- `{r.key}` = `{_cell(r.value)}`: {_cell(r.note)}")
    defaults = [r for r in rows if r.kind == "default"]
    out.append(
        f"- {len(defaults)} framework defaults assumed (the keys the file does not set; table "
        '"Framework default" below)'
    )
    for note in imp.notes:
        out.append(f"- reading the file: {_cell(note)}")
    out.append("")
    for kind, (head, what) in ROW_TITLES.items():
        sel = [r for r in rows if r.kind == kind]
        if not sel:
            continue
        out += [
            f"## {head}",
            "",
            what,
            "",
            "| framework key | value | scenario field | scenario value | how / why |",
            "|---|---|---|---|---|",
        ]
        for r in sel:
            fld = f"`{r.field}`" if r.field else "—"
            fv = f"`{_cell(r.field_value)}`" if r.field and kind not in ("scale", "unsupported") else ""
            out.append(f"| `{r.key}` | `{_cell(r.value)}` | {fld} | {fv} | {_cell(r.note) if r.note else ''} |")
        out.append("")
    return "\n".join(out)
