"""What each framework's own config code reads from a corpus file (tests/importers/corpus), for
test_corpus.py and the corpus table (``python -m tests.importers.corpus_readings``):

* verl: the file's overrides composed by Hydra against the wheel's config tree for the entry point's
  config (verl 0.9.1, as its ``@hydra.main`` does); an override of a key 0.9.1 lacks is added with ``+``
  and listed (the file was written for another verl version);
* TRL: ``GRPOConfig`` / ``AsyncGRPOConfig`` (trl 1.16, installed) built from the keyword arguments
  (``output_dir`` given when the file has none);
* OpenRLHF: the 0.11.2 wheel's ``train_ppo_ray`` argparse parser (``parse_known_args``: flags of the main
  branch it lacks are listed);
* AReaL: the YAML loaded and resolved with OmegaConf (AReaL's ``load_expr_config`` does the same);
* prime-rl: the TOML read by ``tomllib`` with prime-rl's pydantic-model defaults (git 559b4477, as read
  into ``sandbox/export/keys``) where the file is silent (prime-rl itself is not installable here).

Each reading returns the checked quantities in the importer's terms (``expected``) from the framework's
own values, by the documented conventions of :mod:`sandbox.importers` (docs/import.md).
"""

from __future__ import annotations

import re
import tomllib
import warnings
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parent / "corpus"
FRAMEWORK = {"verl": "verl", "areal": "areal", "openrlhf": "openrlhf", "primerl": "prime-rl", "trl": "trl"}


def manifest() -> list[dict]:
    return tomllib.loads((CORPUS / "MANIFEST.toml").read_text())["file"]


def framework_of(name: str) -> str:
    return FRAMEWORK[name.split("_")[0]]


# ------------------------------------------------------------------------------------------------


def verl_reading(path: Path) -> dict[str, Any]:
    from sandbox.export.validate.wheels import unpacked_wheel
    from sandbox.frameworks.verl.importer import ENTRY_POINTS
    from sandbox.importers.launch import read_launch
    from sandbox.importers.verl_defaults import compose

    launch = read_launch(str(path), path.read_text())
    kind, config = ENTRY_POINTS[launch.entry]
    overrides = []
    for w in launch.args:
        if w.text.startswith("--config-name"):
            config = w.text.split("=", 1)[1].removesuffix(".yaml")
        elif not w.text.startswith("--"):
            overrides.append(w.text)
    wheel = unpacked_wheel("verl")
    added: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(40):
            try:
                c = compose(wheel, config, overrides)
                break
            except Exception as exc:  # Hydra's ConfigCompositionException: a key 0.9.1 lacks
                m = re.search(r"Could not override '([^']+)'", str(exc))
                if not m:
                    raise
                i = next(i for i, o in enumerate(overrides) if o.lstrip("+").split("=", 1)[0] == m.group(1))
                overrides[i] = "+" + overrides[i]
                added.append(m.group(1))
    A = "actor_rollout_ref.actor"
    n, mini, E = c["actor_rollout_ref.rollout.n"], c[f"{A}.ppo_mini_batch_size"], c[f"{A}.ppo_epochs"]
    exp: dict[str, Any] = {
        "group_size": max(n, 2),
        "epochs": E,
        "lr": c[f"{A}.optim.lr"],
        "response_cap": c["data.max_response_length"],
        "eps_low": c[f"{A}.clip_ratio_low"],
        "eps_high": c[f"{A}.clip_ratio_high"],
    }
    bypass = c["algorithm.rollout_correction.bypass_mode"]
    if kind == "fully_async":
        req, trig = c["async_training.require_batches"], c["async_training.trigger_parameter_sync_step"]
        exp.update(groups_per_step=mini * req * trig, minibatches=req * trig)
        s = float(c["async_training.staleness_threshold"])
        exp["staleness"] = ("sync", None) if s == 0 else (("async_ratio", s) if s != int(s) else ("async_ratio", s))
    else:
        B = c["data.train_batch_size"]
        exp.update(groups_per_step=B, minibatches=B // mini)
        if kind == "one_step_off":
            exp["staleness"] = ("fixed_lag", 1)
        elif c["trainer.use_v1"] and c["trainer.v1.trainer_mode"] == "separate_async":
            exp["staleness"] = ("max_lag", c["trainer.v1.sampler.max_off_policy_threshold"] - 1)
        else:
            exp["staleness"] = ("sync", None)
    steps = exp["minibatches"] * E
    exp["proximal"] = "behaviour" if bypass or steps == 1 else "batch_start"
    exp["clipped"] = bypass or steps > 1  # the PPO clip can bind (finding 1)
    exp["correction"] = "none" if c["algorithm.rollout_correction.rollout_is"] is None or bypass else "tis"
    exp["_not_in_0.9.1"] = added
    exp["_entry"] = launch.entry
    return exp


def trl_reading(path: Path) -> dict[str, Any]:
    import dataclasses

    from trl import GRPOConfig

    from sandbox.frameworks.trl.importer import read_trl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.async_grpo import AsyncGRPOConfig
    s = read_trl(str(path))
    is_async = (s.entry or "").endswith("AsyncGRPOConfig")
    cls = AsyncGRPOConfig if is_async else GRPOConfig
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for k, v in s.values.items():
        top, _, sub = k.partition(".")
        if top not in names:
            continue
        if sub:
            kwargs.setdefault(top, {})[sub] = v
        else:
            kwargs[top] = v
    kwargs.setdefault("output_dir", "/tmp/corpus-trl")
    kwargs.pop("report_to", None)
    kwargs.update(bf16=False, fp16=False, use_cpu=True)  # this machine has no GPU; no checked value depends on them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cfg = cls(**kwargs)
        except ValueError as exc:  # the framework refuses it too (e.g. a geometry for several processes)
            return {"_refused": str(exc).splitlines()[0]}
    G, P, gas = cfg.num_generations, cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps
    exp: dict[str, Any] = {
        "group_size": G,
        "lr": cfg.learning_rate,
        "response_cap": cfg.max_completion_length,
        "eps_low": cfg.epsilon,
    }
    if is_async:
        exp.update(
            staleness=("max_lag", cfg.max_staleness),
            groups_per_step=P * cfg.weight_sync_steps // G,
            minibatches=cfg.weight_sync_steps,
            epochs=1,
            correction="none",
        )
    else:
        spg = cfg.steps_per_generation
        exp.update(
            staleness=("sync", None),
            groups_per_step=P * spg // G,
            minibatches=spg // gas,
            epochs=cfg.num_iterations,
            correction="none"
            if not (cfg.use_vllm and cfg.vllm_importance_sampling_correction)
            else ("tis" if cfg.vllm_importance_sampling_mode.endswith("truncate") else "mis"),
        )
    return exp


def openrlhf_reading(path: Path) -> dict[str, Any]:
    from sandbox.export.validate.wheels import unpacked_wheel
    from sandbox.frameworks.openrlhf.validation import build_parser
    from sandbox.importers.launch import read_launch

    launch = read_launch(str(path), path.read_text())
    parser = build_parser(unpacked_wheel("openrlhf"))
    ns, unknown = parser.parse_known_args([w.text for w in launch.args])
    a = vars(ns)
    G, B, tb = a["rollout.n_samples_per_prompt"], a["rollout.batch_size"], a["train.batch_size"]
    exp: dict[str, Any] = {
        "group_size": max(G, 2),
        "groups_per_step": B,
        "minibatches": B * G // tb,
        "epochs": a["train.max_epochs"],
        "lr": a["actor.adam.lr"],
        "response_cap": a["rollout.max_new_tokens"],
        "staleness": ("max_lag", a["train.async_queue_size"]) if a["train.async_enable"] else ("sync", None),
    }
    main = "--algo.advantage.is_correction_enable" in unknown
    if main:  # the main branch's spelling (not in 0.11.2's parser): read from the file's words
        words = [w.text for w in launch.args]
        i = words.index("--algo.advantage.is_correction_type") if "--algo.advantage.is_correction_type" in words else -1
        kind = words[i + 1] if i >= 0 else "tis"
        exp["correction"] = {"tis": "tis", "icepop": "mis", "seq-mask-tis": "geo_mis"}[kind]
    else:
        level, mode = a["algo.advantage.is_correction_level"], a["algo.advantage.is_correction_mode"]
        exp["correction"] = (
            "none"
            if level == "off"
            else {("token", "clip"): "tis", ("token", "mask"): "mis", ("seq", "mask"): "geo_mis"}.get(
                (level, mode), "none"
            )
        )
    exp["_flags_not_in_0.11.2"] = [u for u in unknown if u.startswith("--")]
    return exp


def areal_reading(path: Path) -> dict[str, Any]:
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    actor, rollout, g = cfg["actor"], cfg["rollout"], cfg["gconfig"]
    eta = rollout.get("max_head_offpolicyness", 0)
    rs = actor.get("rejection_sampling") or {}
    if actor.get("m2_threshold") is not None:
        corr = "m2po_mask"
    elif rs.get("upper") is not None:
        level, action = rs.get("level", "token"), rs.get("action", "mask")
        corr = {("token", "clamp"): "tis", ("token", "mask"): "mis", ("sequence", "mask"): "geo_mis"}[(level, action)]
    else:
        corr = "none"
    return {
        "group_size": g["n_samples"],
        "groups_per_step": rollout.get("consumer_batch_size", cfg["train_dataset"]["batch_size"]),
        "minibatches": actor.get("ppo_n_minibatches", 4),
        "epochs": 1,
        "lr": actor["optimizer"]["lr"],
        "response_cap": g.get("max_new_tokens"),
        "eps_low": actor.get("eps_clip", 0.2),
        "staleness": ("sync", None) if eta == 0 else ("max_lag", eta),
        "correction": corr,
    }


def prime_rl_reading(path: Path) -> dict[str, Any]:
    data = tomllib.loads(path.read_text())
    orch, trainer = data.get("orchestrator", {}), data.get("trainer", {})
    # prime-rl's model defaults (orchestrator.OrchestratorConfig, trainer.DefaultLossConfig, trainer.AdamWConfig)
    import json

    models = json.loads(
        (Path(__file__).resolve().parents[2] / "sandbox/frameworks/prime_rl/keys/prime_rl_559b4477.json").read_text()
    )["models"]
    ofields = models["orchestrator.OrchestratorConfig"]["fields"]
    G = orch.get("group_size", ofields["group_size"]["default"])
    loss = {k: v.get("default") for k, v in models["trainer.DefaultLossConfig"]["fields"].items()} | trainer.get(
        "loss", {}
    )
    lr = trainer.get("optim", {}).get("lr", models["trainer.AdamWConfig"]["fields"]["lr"]["default"])
    sampling = orch.get("train", {}).get("sampling", {})
    return {
        "group_size": max(G, 2),
        "groups_per_step": orch["batch_size"] // (G if G > 1 else 2),
        "minibatches": 1,
        "epochs": 1,
        "lr": lr,
        "response_cap": sampling.get("max_completion_tokens"),
        "staleness": ("max_lag", orch.get("max_off_policy_steps", ofields["max_off_policy_steps"]["default"])),
        "correction": "none"
        if loss.get("dppo_mask_low", 1) >= 1 and loss.get("dppo_mask_high", 1) >= 1
        else "dppo_mask",
    }


READINGS = {
    "verl": verl_reading,
    "trl": trl_reading,
    "openrlhf": openrlhf_reading,
    "areal": areal_reading,
    "prime-rl": prime_rl_reading,
}


def imported_values(imp) -> dict[str, Any]:
    """The checked quantities of an import, in the same terms."""
    from sandbox.preflight.system import cluster_facts

    a, st = imp.scenario.algorithm, imp.scenario.system.staleness
    bound = {"max_lag": "k_max", "fixed_lag": "k", "async_ratio": "alpha"}.get(st.kind)
    lr = next((r.value for r in imp.rows if r.field == "algorithm.optimizer.lr" and r.kind == "scale"), None)
    o = a.objective
    facts = cluster_facts(imp.rows, imp.framework, {})
    return {
        "group_size": a.group_size,
        "groups_per_step": a.groups_per_step,
        "minibatches": a.minibatches,
        "epochs": a.epochs,
        "lr": lr,
        "staleness": (st.kind, getattr(st, bound) if bound else None),
        "correction": a.correction.name,
        "eps_low": getattr(o, "eps_low", None),
        "eps_high": getattr(o, "eps_high", None),
        "objective": o.name,
        "proximal": a.proximal,
        "response_cap": facts.max_tokens,
        "gpus": facts.gpus,
        "model": facts.model,
    }


def compare(expected: dict[str, Any], got: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Checked quantities that differ: {name: (framework's reading, import)}."""
    bad = {}
    for k, want in expected.items():
        if k.startswith("_") or k in ("clipped",):
            continue
        have = got.get(k)
        same = have == want or (
            isinstance(want, float) and isinstance(have, (int, float)) and abs(have - want) <= 1e-12 * max(1, abs(want))
        )
        if k == "staleness" and isinstance(want, tuple) and isinstance(have, tuple):
            same = want[0] == have[0] and (want[1] is None or abs(float(have[1]) - float(want[1])) < 1e-12)
        if not same:
            bad[k] = (want, have)
    if expected.get("clipped") is True and got.get("objective") == "reinforce":
        bad["objective"] = ("a clipped surrogate", "reinforce")
    return bad


def table() -> str:
    from sandbox.importers.api import ConfigImportError, import_config

    rows = [
        "| file | framework | entry point | accepted | values matched | unmapped keys |",
        "|---|---|---|---|---|---|",
    ]
    for item in manifest():
        path, fw = CORPUS / item["name"], item["framework"]
        try:
            imp = import_config(path, fw)
        except ConfigImportError as exc:
            rows.append(
                f"| `{item['name']}` | {fw} | {item['entry']} | no: {str(exc).split(': ', 1)[-1][:120]} | — | — |"
            )
            continue
        exp = READINGS[fw](path)
        if "_refused" in exp:
            matched = f"framework refuses it too ({exp['_refused'][:60]})"
        else:
            got = imported_values(imp)
            bad = compare(exp, got)
            n = len([k for k in exp if not k.startswith("_") and k != "clipped"])
            matched = f"{n - len(bad)}/{n}" + (f" (differs: {', '.join(bad)})" if bad else "")
        unk = [r.key for r in imp.rows if r.kind == "unknown"]
        rows.append(
            f"| `{item['name']}` | {fw} | {item['entry']} | yes | {matched} | "
            f"{len(unk)}{': ' + ', '.join(f'`{k}`' for k in unk[:4]) + (' …' if len(unk) > 4 else '') if unk else ''} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
