"""Hash every export of a wide grid, to show that a refactor of ``sandbox/export/`` changes no output.

Not a speed benchmark: a before/after comparison wider than the golden files. It exports every
variant of every shipped scenario, and every objective × correction on six base scenarios (as
is, sequence level, 2 mini-batches × 2 epochs, SGD + cosine), to all six frameworks with and
without ``--lr``/``--grad-clip``, and every baseline or advantage, aggregation, normalisation, KL and dual clip
of every objective on three of them, and writes one sha256 per export (its files and manifest; an
error's type and text where the export refuses). ``--validate`` also runs each framework's
validator (``sandbox/frameworks/<framework>/validation.py``) on the exports of the shipped variants (with ``--lr``) and hashes
the problem lists (AReaL's in one child process).

Run it on the tree before and after a change (``PYTHONPATH`` picks the tree) and compare:

    PYTHONPATH=<old tree> python benchmarks/export_hashes.py <old tree> /tmp/before.json --validate
    PYTHONPATH=<new tree> python benchmarks/export_hashes.py <new tree> /tmp/after.json --validate
    python benchmarks/export_hashes.py --compare /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import typing
import warnings
from pathlib import Path

BASES = ("quickstart", "max_lag", "sync", "fixed_lag", "async_ratio", "partial_rollouts")
EXTRAS = (
    {},
    {"algorithm.correction.level": "sequence"},
    {"algorithm.minibatches": 2, "algorithm.epochs": 2},
    {"algorithm.optimizer.name": "sgd", "algorithm.optimizer.schedule": "cosine"},
)


def _cases(root: Path):
    from sandbox.algorithms.corrections.base import CORRECTIONS
    from sandbox.algorithms.objectives.base import OBJECTIVES
    from sandbox.scenario.api import load_scenario, variant_scenarios

    shipped, grid = [], []
    for path in sorted((root / "scenarios").glob("*.toml")):
        scn, raw = load_scenario(path)
        if scn.task.name == "quadratic":
            continue
        shipped += [(f"{path.stem}:{name}", v) for name, v in variant_scenarios(scn, raw).items()]
    for base in BASES:
        for o in OBJECTIVES.names():
            for c in CORRECTIONS.names():
                for extra in EXTRAS:
                    ov = {"algorithm.objective.name": o, "algorithm.correction.name": c, **extra}
                    try:
                        scn, _ = load_scenario(root / "scenarios" / f"{base}.toml", ov)
                    except Exception:  # the pair does not validate: not a case
                        continue
                    grid.append((f"{base}:{o}:{c}:{json.dumps(extra)}", scn))
    for base in BASES[:3]:  # every advantage/baseline, aggregation and normalisation of every objective
        for o in OBJECTIVES.names():
            fields = OBJECTIVES[o].config.model_fields
            knob = next((k for k in ("baseline", "advantage") if k in fields), None)
            for kind in typing.get_args(fields[knob].annotation) if knob else (None,):
                for agg in typing.get_args(fields["aggregation"].annotation) if "aggregation" in fields else (None,):
                    for extra in ({}, {"normalize_std": False}, {"beta_kl": 0.1}, {"dual_clip_c": 3.0}):
                        if any(k not in fields for k in extra):
                            continue
                        obj = {
                            "name": o,
                            **({"aggregation": agg} if agg else {}),
                            **({knob: kind} if knob else {}),
                            **extra,
                        }
                        try:
                            scn, _ = load_scenario(root / "scenarios" / f"{base}.toml", {"algorithm.objective": obj})
                        except Exception:  # the objective does not validate here: not a case
                            continue
                        grid.append((f"{base}:{json.dumps(obj)}", scn))
    return shipped, grid


def _validator(framework: str):
    """The framework's validator as ``files -> problems`` (wheels from the cache; None where unavailable)."""
    from sandbox.export.validate import wheels

    try:
        if framework in ("verl", "openrlhf", "areal"):
            where = wheels.unpacked_wheel(framework)
        mod = __import__(f"sandbox.frameworks.{framework.replace('-', '_')}.validation", fromlist=["validate"])
        if framework == "areal":
            return lambda many: mod.validate_many(many, where)
        if framework in ("verl", "openrlhf"):
            return lambda files: mod.validate(files, where)
        if framework == "trl":
            return lambda files: mod.validate(files, None)
        return mod.validate
    except Exception as exc:  # noqa: BLE001 - a missing wheel: say so, hash nothing for it
        print(f"{framework}: validator unavailable ({exc})", file=sys.stderr)
        return None


def run(root: Path, out: Path, validate: bool) -> None:
    from sandbox.export.api import EXPORTERS, export_scenario
    from sandbox.export.base import Given

    shipped, grid = _cases(root)
    checks = {fw: _validator(fw) for fw in EXPORTERS} if validate else {}
    hashes, areal, shipped_ids = {}, {}, {cid for cid, _ in shipped}
    for cid, scn in shipped + grid:
        for fw in list(EXPORTERS):
            for given in (Given(), Given(lr=1e-6, grad_clip=1.0)):
                try:
                    exp = export_scenario(scn, fw, given=given, allow_partial=True)
                    text = json.dumps([exp.files, exp.manifest], sort_keys=True, default=str)
                except Exception as exc:  # noqa: BLE001 - a refusal is an output too
                    exp, text = None, f"ERR {type(exc).__name__}: {exc}"
                hashes[f"{cid}|{fw}|{given}"] = hashlib.sha256(text.encode()).hexdigest()
                check = checks.get(fw)
                if check and exp is not None and given.lr and cid in shipped_ids:
                    if fw == "areal":
                        areal[f"{cid}|{fw}|{given}|validate"] = exp.files
                        continue
                    try:
                        problems = json.dumps(check(exp.files))
                    except Exception as exc:  # noqa: BLE001
                        problems = f"ERR {type(exc).__name__}: {exc}"
                    hashes[f"{cid}|{fw}|{given}|validate"] = hashlib.sha256(problems.encode()).hexdigest()
    if areal and checks.get("areal"):
        for key, problems in zip(areal, checks["areal"](list(areal.values()))):
            hashes[key] = hashlib.sha256(json.dumps(problems).encode()).hexdigest()
    out.write_text(json.dumps(hashes, indent=0, sort_keys=True))
    total = hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()
    print(f"{len(hashes)} hashes ({sum(k.endswith('|validate') for k in hashes)} validations): {total}")


def compare(a: Path, b: Path) -> int:
    old, new = json.loads(a.read_text()), json.loads(b.read_text())
    differ = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    only = sorted(old.keys() ^ new.keys())
    print(f"{len(old)} vs {len(new)} hashes: {len(differ)} differ, {len(only)} in one file only")
    for k in (differ + only)[:20]:
        print("  ", k)
    return 1 if differ or only else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="the tree (scenarios/ is read from it)")
    ap.add_argument("out", type=Path, help="JSON file of hashes to write (with --compare: the second file)")
    ap.add_argument("--validate", action="store_true", help="also hash the validators' problem lists")
    ap.add_argument("--compare", action="store_true", help="compare two hash files: ROOT and OUT")
    args = ap.parse_args()
    if args.compare:
        return compare(args.root, args.out)
    warnings.simplefilter("ignore")
    run(args.root, args.out, args.validate)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
