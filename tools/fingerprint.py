"""Behaviour fingerprint: SHA-256 of every number a set of short runs produces.

A refactor that must not change behaviour (same scenario and seeds, bitwise the same metrics) is
checked by writing a fingerprint before it and comparing after it, on the same machine:

    python tools/fingerprint.py --out /tmp/before.json          # on the old commit
    python tools/fingerprint.py --compare /tmp/before.json      # on the new one: exit 1 on any difference

Covered: every variant of every shipped scenario (``scenarios/*.toml``, steps capped), every
registered objective, correction and stabilizer on the bit-string task (each valid pairing), the
delay models and staleness controls on the system-only path, and ``sandbox check --quick``'s
measured values. Hashes are of the raw float64 bytes, so they hold only for the same machine,
torch build and thread count (bitwise determinism on CPU is per platform).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STEPS = 12


def _hash_run(res) -> str:
    h = hashlib.sha256()
    m = res.metrics
    for col in sorted(m.columns):
        h.update(col.encode())
        h.update(np.ascontiguousarray(m[col].to_numpy(dtype=float)).tobytes())
    for key in sorted(res.replica_metrics):
        h.update(key.encode())
        h.update(np.ascontiguousarray(res.replica_metrics[key]).tobytes())
    jobs = res.jobs
    for col in sorted(jobs.columns):
        h.update(col.encode())
        h.update(np.ascontiguousarray(jobs[col].to_numpy(dtype=float)).tobytes())
    h.update(res.status.encode())
    return h.hexdigest()


def _run(data: dict, steps: int = STEPS) -> str:
    from sandbox.run.runner import run_scenario
    from sandbox.scenario.api import validate_scenario

    data = json.loads(json.dumps(data))
    data.setdefault("run", {})
    data["run"]["steps"] = min(int(data["run"].get("steps", steps)), steps)
    data["run"]["figures"] = False
    try:
        scn = validate_scenario(data)
        return _hash_run(run_scenario(scn, force=True))
    except Exception as exc:  # a refusal is part of the behaviour too
        return f"error: {type(exc).__name__}: {exc}"


def shipped() -> dict[str, str]:
    from sandbox.scenario.load import apply_overrides, read_toml

    out = {}
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        raw = read_toml(path)
        variants = raw.pop("variants", {}) or {}
        if raw.get("task", {}).get("name") == "lm":
            steps = 3
        else:
            steps = STEPS
        out[f"scenario/{path.stem}"] = _run(raw, steps)
        for name, over in variants.items():
            out[f"scenario/{path.stem}/{name}"] = _run(apply_overrides(json.loads(json.dumps(raw)), over), steps)
    return out


def _bitstring(algorithm: dict, system: dict | None = None) -> dict:
    return {
        "task": {"name": "bitstring", "horizon": 6, "replicas": 2},
        "system": system or {"num_workers": 3, "staleness": {"kind": "max_lag", "k_max": 3}},
        "algorithm": {"group_size": 4, "groups_per_step": 2, **algorithm},
        "run": {"seed": 7},
    }


def methods() -> dict[str, str]:
    from sandbox.algorithms import CORRECTIONS, OBJECTIVES, STABILIZERS

    out = {}
    for obj in OBJECTIVES.names():
        for corr in CORRECTIONS.names():
            out[f"method/{obj}+{corr}"] = _run(_bitstring({"objective": {"name": obj}, "correction": {"name": corr}}))
    baselines = [("grpo", "baseline", "opob"), ("ppo", "advantage", "opob")]
    baselines += [("reinforce", "baseline", b) for b in ("opob", "optimal", "ema", "leave_one_out")]
    for obj, key, base in baselines:
        out[f"method/{obj}:{base}"] = _run(_bitstring({"objective": {"name": obj, key: base}}))
    gac_variants = [
        {},
        {"placement": "post_optimizer"},
        {"clip_order": "project_then_clip"},
        {"scope": "per_layer", "strength": "to_target", "renorm": True},
        {"threshold_mode": "quantile", "min_history": 2, "c_skip": 0.9},
        {"threshold_mode": "staleness_scaled", "c_skip": 0.5, "skip_mode": "zero_update", "reference": "ema"},
        {"placement": "post_optimizer", "c_skip": 0.4, "sided": "two_sided"},
    ]
    for i, knobs in enumerate(gac_variants):
        out[f"stabilizer/gac{i}"] = _run(
            _bitstring({"stabilizers": [{"name": "gac", "c_thr": 0.1, **knobs}], "optimizer": {"grad_clip": 1.0}})
        )
    for name in STABILIZERS.names():
        if name != "gac":
            out[f"stabilizer/{name}"] = _run(_bitstring({"stabilizers": [{"name": name}]}))
    for rule in ("polynomial", "threshold", "delay_adaptive", "drop"):
        out[f"stabilizer/staleness_lr:{rule}"] = _run(
            _bitstring({"stabilizers": [{"name": "staleness_lr", "rule": rule, "max_staleness": 1.0}]})
        )
    out["stabilizer/all"] = _run(
        _bitstring({"stabilizers": [{"name": "gac"}, {"name": "vcpo_lr"}, {"name": "staleness_lr"}]})
    )
    return out


def systems() -> dict[str, str]:
    out = {}
    delays = {
        "constant": {"kind": "constant", "value": 0.7},
        "exponential": {"kind": "exponential", "mean": 0.8},
        "lognormal": {"kind": "lognormal", "median": 0.9, "sigma": 0.6},
        "pareto": {"kind": "pareto", "alpha": 2.5, "scale": 0.5},
        "cost_model": {"kind": "cost_model", "prefill": 0.1, "per_token": 0.05, "jitter": 0.2},
    }
    controls = {
        "sync": {"kind": "sync"},
        "fixed_lag": {"kind": "fixed_lag", "k": 2},
        "max_lag": {"kind": "max_lag", "k_max": 1},
        "max_lag_drop": {"kind": "max_lag", "k_max": 1, "enforcement": "drop", "queue_capacity": 3},
        "async_ratio": {"kind": "async_ratio", "alpha": 1.5},
    }
    for dname, delay in delays.items():
        for cname, ctl in controls.items():
            system = {
                "num_workers": 3,
                "worker_speeds": [1.0, 0.5, 2.0],
                "generation_time": delay,
                "train_time": {"kind": "exponential", "mean": 0.3},
                "staleness": ctl,
            }
            out[f"system/{dname}+{cname}"] = _run(_bitstring({}, system))
    system = {
        "num_workers": 3,
        "generation_time": delays["cost_model"],
        "partial_rollouts": True,
        "sync_delay": {"kind": "constant", "value": 0.05},
        "staleness": controls["max_lag"],
    }
    out["system/partial"] = _run(_bitstring({}, system))
    return out


def checks() -> dict[str, str]:
    from sandbox.checks.api import CHECKS

    out = {}
    for name, check in CHECKS.items():
        payload = json.dumps(check.run(quick=True, perturb=1.0).to_dict(), sort_keys=True, default=repr)
        out[f"check/{name}"] = hashlib.sha256(payload.encode()).hexdigest()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", type=Path)
    ap.add_argument("--only", choices=["shipped", "methods", "systems", "checks"], action="append")
    args = ap.parse_args()
    parts = args.only or ["shipped", "methods", "systems", "checks"]
    prints = {}
    for part in parts:
        prints.update(globals()[part]())
    if args.out:
        args.out.write_text(json.dumps(prints, indent=1, sort_keys=True))
        print(f"{len(prints)} fingerprints written to {args.out}")
    if args.compare:
        old = json.loads(args.compare.read_text())
        prefixes = tuple(x for p in parts for x in PREFIXES[p])
        keys = sorted(k for k in set(old) | set(prints) if k.startswith(prefixes))
        diff = [k for k in keys if old.get(k) != prints.get(k)]
        for k in diff:
            print(f"DIFFERENT {k}: {old.get(k, '<missing>')[:70]} -> {prints.get(k, '<missing>')[:70]}")
        same = len([k for k in prints if old.get(k) == prints[k]])
        print(f"{same} identical, {len(diff)} different (of {len(prints)} computed)")
        return 1 if diff else 0
    return 0


PREFIXES = {
    "shipped": ("scenario/",),
    "methods": ("method/", "stabilizer/"),
    "systems": ("system/",),
    "checks": ("check/",),
}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
