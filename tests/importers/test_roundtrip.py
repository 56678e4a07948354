"""Round trips between ``sandbox export`` and ``sandbox import`` (issue 31 part 2).

* ``import(export(s)) == s`` on every field the framework expresses: for every export golden
  (``tests/export/golden/<framework>/<scenario>-<variant>/``), the golden config is imported and the
  scenario compared with the shipped variant it was written from, field by field (:data:`FIELDS`), except
  the fields the export itself lists as having no equivalent (PROMOTION.md's gaps);
* ``export(import(c)) == c`` on every key the import mapped: for hand-written configs in each framework's
  own style (``data/``) and for the goldens, the imported scenario is exported again and every key whose
  IMPORT.md row is mapped, converted, setup or a checked convention must come back with the config's value.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sandbox.export.api import export_scenario
from sandbox.importers.api import IMPORTERS, import_config
from sandbox.scenario.api import load_scenario, variant_scenarios

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "export" / "golden"
DATA = Path(__file__).resolve().parent / "data"

# the config file of each framework's export that the importer reads
CONFIG_FILE = {
    "verl": "overrides.txt",
    "verl-vcpo": "overrides.txt",
    "trl": "grpo_config.json",
    "openrlhf": "flags.txt",
    "areal": "areal_config.yaml",
    "prime-rl": "rl.toml",
}

# the scenario fields each framework can express (a field the export lists as a gap is skipped)
COMMON = [
    "algorithm.group_size",
    "algorithm.groups_per_step",
    "algorithm.minibatches",
    "algorithm.epochs",
    "system.staleness.kind",
    "system.staleness.k_max",
    "algorithm.objective.name",
    "algorithm.correction.name",
    "optimizer.name",
    "algorithm.optimizer.weight_decay",
    "algorithm.optimizer.schedule",
    "algorithm.optimizer.warmup_steps",
]
FIELDS: dict[str, list[str]] = {
    "verl": COMMON
    + [
        "system.staleness.enforcement",
        "system.staleness.queue_capacity",
        "algorithm.proximal",
        "algorithm.objective.eps_low",
        "algorithm.objective.eps_high",
        "algorithm.objective.dual_clip_c",
        "algorithm.objective.aggregation",
        "algorithm.objective.baseline",
        "algorithm.objective.normalize_std",
        "algorithm.objective.beta_kl",
        "algorithm.correction.level",
        "algorithm.correction.C",
        "algorithm.optimizer.betas",
    ],
    "openrlhf": COMMON
    + [
        "system.staleness.enforcement",
        "system.partial_rollouts",
        "algorithm.proximal",
        "algorithm.objective.eps_low",
        "algorithm.objective.eps_high",
        "algorithm.objective.dual_clip_c",
        "algorithm.objective.aggregation",
        "algorithm.objective.normalize_std",
        "algorithm.objective.beta_kl",
        "algorithm.correction.level",
        "algorithm.correction.C",
        "algorithm.correction.C_low",
        "algorithm.optimizer.betas",
        "algorithm.optimizer.eps",
    ],
    "areal": COMMON
    + [
        "system.staleness.enforcement",
        "algorithm.proximal",
        "algorithm.objective.eps_low",
        "algorithm.objective.eps_high",
        "algorithm.objective.dual_clip_c",
        "algorithm.objective.baseline",
        "algorithm.objective.normalize_std",
        "algorithm.objective.eps_std",
        "algorithm.correction.level",
        "algorithm.correction.C",
        "algorithm.correction.C_low",
        "algorithm.correction.m2_threshold",
        "algorithm.optimizer.betas",
        "algorithm.optimizer.eps",
    ],
    "prime-rl": COMMON
    + [
        "system.staleness.enforcement",
        "system.staleness.queue_capacity",
        "algorithm.proximal",
        "algorithm.correction.variant",
        "algorithm.correction.dppo_mask_low",
        "algorithm.correction.dppo_mask_high",
        "algorithm.correction.ipo_threshold",
        "algorithm.correction.adv_tau",
        "algorithm.correction.kl_tau",
        "algorithm.optimizer.betas",
    ],
    "verl-vcpo": COMMON
    + [
        "system.staleness.enforcement",
        "system.partial_rollouts",
        "algorithm.proximal",
        "algorithm.objective.eps_low",
        "algorithm.objective.eps_high",
        "algorithm.objective.dual_clip_c",
        "algorithm.objective.aggregation",
        "algorithm.objective.baseline",
        "algorithm.objective.normalize_std",
        "algorithm.objective.opob_scope",
        "algorithm.correction.level",
        "algorithm.correction.C",
        "algorithm.stabilizers",
    ],
    "trl": COMMON
    + [
        "system.staleness.enforcement",
        "system.staleness.queue_capacity",
        "algorithm.proximal",
        "algorithm.objective.dual_clip_c",
        "algorithm.objective.eps_low",
        "algorithm.objective.eps_high",
        "algorithm.objective.aggregation",
        "algorithm.objective.normalize_std",
        "algorithm.objective.beta_kl",
        "algorithm.correction.level",
        "algorithm.correction.C",
        "algorithm.correction.C_low",
        "algorithm.optimizer.betas",
        "algorithm.optimizer.eps",
    ],
}

OPT_EQUIV = {"adamw": "adam"}  # Adam and AdamW coincide at weight_decay = 0, where the exporters write AdamW


def _get(scn, dotted: str):
    if dotted == "optimizer.name":  # adam == adamw when nothing decays
        o = scn.algorithm.optimizer
        return OPT_EQUIV.get(o.name, o.name) if o.weight_decay == 0 else o.name
    node = scn
    for part in dotted.split("."):
        if not hasattr(node, part):
            return "<absent>"
        node = getattr(node, part)
    return list(node) if isinstance(node, tuple) else node


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-12) or (math.isinf(a) and a == b)
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _equivalent_objectives(fw: str, a, b) -> bool:
    """OpenRLHF recomputes π_old once per rollout batch: at one optimizer step per batch its ppo loss has ratio 1,
    so the sandbox's grpo (clip inert) and reinforce with the same group advantages are the same loss there; the
    importer writes reinforce (tests/importers/test_import_cli.py checks it)."""
    names = {a.algorithm.objective.name, b.algorithm.objective.name}
    return fw == "openrlhf" and names == {"grpo", "reinforce"} and a.algorithm.updates_per_batch == 1


def _variant(case: str):
    stem, _, variant = case.partition("-")
    scn, raw = load_scenario(ROOT / "scenarios" / f"{stem}.toml")
    return variant_scenarios(scn, raw)[variant if variant != "base" else ""]


GOLDENS = [(fw, d.name) for fw in sorted(IMPORTERS) if (GOLDEN / fw).is_dir() for d in sorted((GOLDEN / fw).iterdir())]


@pytest.mark.parametrize("fw,case", GOLDENS, ids=[f"{f}/{c}" for f, c in GOLDENS])
def test_import_of_export_is_the_scenario(fw, case):
    original = _variant(case)
    plan = export_scenario(original, fw, allow_partial=True).plan
    gaps = {s for r in plan.gaps() for s in r.source.split(" + ")}
    written = {
        s for r in plan.rows if r.target and r.kind in ("as_is", "converted", "setup") for s in r.source.split(" + ")
    }
    imp = import_config(
        GOLDEN / fw / case / CONFIG_FILE[fw], fw, proxy="lm" if original.task.name == "lm" else "bitstring"
    )
    compared = []
    for f in FIELDS[fw]:
        if any(f == g or f.startswith(g + ".") or g.startswith(f) for g in gaps):
            continue  # the export says the framework cannot express it
        if not any(
            f.removeprefix("algorithm.") == w.removeprefix("algorithm.")
            or f.startswith(w + ".")
            or w.startswith(f + ".")
            for w in written
        ):
            continue  # no key carries it in this export (e.g. TRL's GRPOConfig: the objective's name is implicit)
        want, got = _get(original, f), _get(imp.scenario, f)
        if want == "<absent>" and got == "<absent>":
            continue
        if _equivalent_objectives(fw, original, imp.scenario):
            if f == "algorithm.objective.name" or "<absent>" in (want, got):
                continue
        assert _same(got, want), f"{fw}/{case}: {f} imported as {got!r}, the scenario has {want!r}"
        compared.append(f)
    assert len(compared) >= 5, f"{fw}/{case}: only {compared} compared"  # prime-rl/lm_mission-vcpo expresses 6
    proxy_only = "the proxy's generation time"  # partial rollouts on the bit-string proxy (no time per token)
    assert not [r for r in imp.rows if r.kind == "unknown" or (r.kind == "unsupported" and proxy_only not in r.note)], (
        f"{fw}/{case}: the exporter's own keys must all be read: {[r for r in imp.rows if r.kind in ('unknown', 'unsupported')]}"
    )


MAPPED = ("mapped", "converted", "setup", "pinned")


def _export_back(path: Path, fw: str):
    imp = import_config(path, fw)
    settings = {
        k.removeprefix("--"): v for k, v in export_scenario(imp.scenario, fw, allow_partial=True).plan.settings.items()
    }
    keys = {r.key for r in imp.rows if r.kind in MAPPED}
    given = IMPORTERS[fw].read(str(path)).values
    return imp, settings, keys, given


def _trl_geometry(s: dict) -> tuple:
    """TRL's batch keys have many spellings of one geometry: (completions per optimizer step, per generation
    batch or per version, group size), one process."""
    P, gas = s.get("per_device_train_batch_size", 8), s.get("gradient_accumulation_steps", 1)
    per_gen = P * s.get("weight_sync_steps", s.get("steps_per_generation", gas))
    return P * gas, per_gen, s.get("num_generations", 8)


RUN_FRACTIONS = {"actor.lr_warmup_ratio", "actor.optimizer.warmup_steps_proportion"}

# framework -> {key: (the key the exporter writes instead, the value it must hold given the config's)}
ALIASES = {
    "openrlhf": {"actor.eps_clip": ("actor.eps_clip_low_high", lambda e: [e, e])},
    "areal": {"actor.behav_imp_weight_cap": ("actor.rejection_sampling.upper", lambda c: c)},
}

# framework -> (keys compared through a derived quantity, the derivation)
CANONICAL = {
    "trl": (("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation"), _trl_geometry)
}


def _check_back(path: Path, fw: str, min_keys: int):
    imp, settings, keys, given = _export_back(path, fw)
    checked = []
    canon_keys, derive = CANONICAL.get(fw, ((), None))
    if derive is not None:
        assert derive(settings) == derive(given), (
            f"{path.name}: batch geometry {derive(given)} came back as {derive(settings)}"
        )
    for k in sorted(keys):
        if k not in given or k in canon_keys:
            continue
        if k in RUN_FRACTIONS:  # a fraction of the run goes through whole steps of the proxy's run
            steps = imp.scenario.run.steps
            assert round(settings[k] * steps) == round(given[k] * steps), (
                f"{path.name}: {k} = {given[k]} came back as {settings[k]}"
            )
            checked.append(k)
            continue
        if k in ALIASES.get(fw, {}):
            other, want = ALIASES[fw][k]
            assert _same(settings.get(other), want(given[k])), (
                f"{path.name}: {k} = {given[k]!r} came back as {other} = {settings.get(other)!r}"
            )
            checked.append(k)
            continue
        assert k in settings, (
            f"{path.name}: {k} was mapped on import but the export of the imported scenario does not write it"
        )
        assert _same(settings[k], given[k]), f"{path.name}: {k} = {given[k]!r} came back as {settings[k]!r}"
        checked.append(k)
    assert len(checked) >= min_keys, f"{path.name}: only {checked} compared"
    return imp, checked


@pytest.mark.parametrize("fw,case", GOLDENS, ids=[f"{f}/{c}" for f, c in GOLDENS])
def test_export_of_import_of_golden(fw, case):
    _check_back(GOLDEN / fw / case / CONFIG_FILE[fw], fw, 10)


HAND = sorted((p.name.split("_", 1)[0].replace("verl-vcpo", "verl-vcpo"), p) for p in DATA.iterdir() if p.is_file())


def _fw_of(p: Path) -> str:
    return {
        "verl": "verl",
        "vcpo": "verl-vcpo",
        "trl": "trl",
        "openrlhf": "openrlhf",
        "areal": "areal",
        "primerl": "prime-rl",
    }[p.name.split("_", 1)[0]]  # file names start with the framework


HAND_FILES = [p for p in sorted(DATA.iterdir()) if p.is_file() and _fw_of(p) in IMPORTERS]


@pytest.mark.parametrize("path", HAND_FILES, ids=[p.name for p in HAND_FILES])
def test_export_of_import_of_hand_written(path):
    imp, checked = _check_back(path, _fw_of(path), 8)
    imp.scenario  # validated by the loader


def test_two_hand_written_configs_per_framework():
    for fw in IMPORTERS:
        assert sum(_fw_of(p) == fw for p in HAND_FILES) >= 2, f"{fw}: fewer than two hand-written configs in data/"


def test_docs_list_the_fields_compared_per_framework():
    """docs/import.md's table of compared fields is FIELDS (it drifts otherwise)."""
    doc = (ROOT / "docs" / "import.md").read_text()
    for fw, fields in FIELDS.items():
        row = f"| `{fw}` | " + ", ".join(f"`{f.removeprefix('algorithm.')}`" for f in fields if f not in COMMON) + " |"
        assert row in doc, f"docs/import.md: the row of {fw} is not {row}"
    assert all(f"`{f.removeprefix('algorithm.')}`" in doc for f in COMMON)


YAML_TWINS = [
    (fw, case, name)
    for fw, name in (("verl", "verl_config.yaml"), ("verl-vcpo", "vcpo_config.yaml"))
    for case in sorted(p.name for p in (GOLDEN / fw).iterdir())
    if (GOLDEN / fw / case / name).is_file()
]


@pytest.mark.parametrize("fw,case,name", YAML_TWINS, ids=[f"{f}/{c}" for f, c, _ in YAML_TWINS])
def test_yaml_and_override_list_import_alike(fw, case, name):
    """verl's two formats: the exporter's YAML and its override list of the same scenario give one scenario."""
    a = import_config(GOLDEN / fw / case / "overrides.txt", fw)
    b = import_config(GOLDEN / fw / case / name, fw)
    assert a.data["system"] == b.data["system"] and a.data["algorithm"] == b.data["algorithm"]
    assert {r.key for r in a.rows if r.kind == "unknown"} == {r.key for r in b.rows if r.kind == "unknown"} == set()
