"""Real launch files in, the framework's own reading out (issue 44): every corpus file (tests/importers/corpus,
taken verbatim; MANIFEST.toml) imports as written or is refused with a line naming the key, and the checked
quantities (staleness control and bound, objective clip, correction, learning rate, rollout batch, group
size, mini-batches, epochs, response cap) equal what the framework's own config code resolves
(corpus_readings.py: verl's Hydra compose from the 0.9.1 wheel, TRL's dataclasses, OpenRLHF's 0.11.2 parser,
AReaL's OmegaConf resolution, prime-rl's model defaults). Then one test per finding of the issue, each of
which fails on the importer before this change."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sandbox.importers.api import IMPORTERS, ConfigImportError, import_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus_readings as cr  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ITEMS = cr.manifest()
DATA = Path(__file__).resolve().parent / "data"


def _wheel_or_skip(fw: str) -> None:
    from sandbox.export.validate.wheels import PINNED, WheelUnavailable, unpacked_wheel

    name = {"verl": "verl", "openrlhf": "openrlhf"}.get(fw)
    if name is None:
        return
    try:
        unpacked_wheel(name, PINNED[name])
    except WheelUnavailable as exc:
        pytest.skip(f"{name} wheel unavailable: {exc}")


def test_manifest_covers_every_file_and_both_kinds_of_entry_point():
    names = {i["name"] for i in ITEMS}
    assert names == {p.name for p in cr.CORPUS.iterdir() if p.name != "MANIFEST.toml"}
    assert len(names) >= 20
    for item in ITEMS:
        assert item["license"] == "Apache-2.0" and len(item["commit"]) == 40 and item["path"]
    by_fw = {}
    for item in ITEMS:
        by_fw.setdefault(item["framework"], []).append(item["name"])
    assert set(by_fw) == {"verl", "areal", "openrlhf", "trl", "prime-rl"}


def test_at_least_90_percent_import_as_written():
    ok = 0
    for item in ITEMS:
        try:
            import_config(cr.CORPUS / item["name"], item["framework"])
            ok += 1
        except ConfigImportError as exc:
            assert "line" in str(exc) or "key" in str(exc), str(exc)  # refused by name
    assert ok / len(ITEMS) >= 0.9, f"{ok}/{len(ITEMS)}"


@pytest.mark.parametrize("item", ITEMS, ids=[i["name"] for i in ITEMS])
def test_imported_values_match_the_framework_s_reading(item):
    path, fw = cr.CORPUS / item["name"], item["framework"]
    _wheel_or_skip(fw)
    try:
        imp = import_config(path, fw)
    except ConfigImportError as exc:
        # a refusal must be one the framework shares or cannot decide from the file alone
        assert "per_device_train_batch_size" in str(exc) and "processes" in str(exc), str(exc)
        return
    expected = cr.READINGS[fw](path)
    if "_refused" in expected:
        pytest.fail(f"the framework refuses {item['name']} ({expected['_refused']}) but the importer accepted it")
    got = cr.imported_values(imp)
    assert cr.compare(expected, got) == {}
    assert got["staleness"][0] in ("sync", "max_lag", "fixed_lag", "async_ratio")
    # nothing silent: every key of the file is in a row
    keys = set(IMPORTERS[fw].read(str(path)).values)
    assert keys <= {r.key for r in imp.rows}


@pytest.mark.parametrize(
    "item", [i for i in ITEMS if i["framework"] in ("verl", "openrlhf", "areal", "prime-rl")], ids=lambda i: i["name"]
)
def test_cluster_facts_from_the_file_alone(item):
    """Q3/Q4/Q7 need the GPU count and the model: every corpus file that names its GPUs gives them."""
    from sandbox.preflight.system import cluster_facts

    imp = import_config(cr.CORPUS / item["name"], item["framework"])
    f = cluster_facts(imp.rows, item["framework"], {})
    text = (cr.CORPUS / item["name"]).read_text()
    names_gpus = any(
        k in text
        for k in (
            "n_gpus_per_node",
            "num_gpus_per_node",
            "num_train_gpus",
            "num_train_nodes",
            'backend: "',
            "allocation_mode",
            "n_gpus_per_node:",
        )
    )
    if names_gpus:  # Q3/Q4/Q7 answerable: a GPU count and a model of the hardware table (or its stand-in by size)
        assert f.gpus is not None and f.gpus >= 2 and not f.missing, (f.source, f.missing)


# ------------------------------------------------------------------------------------------------
# the eight findings of issue 44, each failing on the importer before it
# ------------------------------------------------------------------------------------------------


def test_finding1_verl_default_objective_is_the_ppo_clip_against_pi_old():
    imp = import_config(cr.CORPUS / "verl_grpo_qwen2-7b.sh", "verl")
    a = imp.scenario.algorithm
    # 1024 prompts / 256 per mini-batch: 4 optimizer steps on one batch, the clip (0.2) against π_old binds
    assert (a.objective.name, a.objective.eps_low, a.objective.eps_high, a.minibatches, a.proximal) == (
        "grpo",
        0.2,
        0.2,
        4,
        "batch_start",
    )


def test_finding2_verl_entry_points_set_their_staleness():
    a = import_config(cr.CORPUS / "verl_one_step_off_grpo_0.6b.sh", "verl").scenario.system.staleness
    assert (a.kind, a.k) == ("fixed_lag", 1)
    imp = import_config(cr.CORPUS / "verl_fully_async_dapo_7b_8_8.sh", "verl")
    st, al = imp.scenario.system.staleness, imp.scenario.algorithm
    assert (st.kind, st.alpha) == ("async_ratio", 0.1)
    # a version: ppo_mini_batch_size 32 x require_batches 4 x trigger_parameter_sync_step 4 prompts, 16 optimizer steps
    assert (al.groups_per_step, al.minibatches) == (32 * 4 * 4, 16)
    assert any(r.key == "(entry point)" and "fully-async" in r.note for r in imp.rows)


def test_finding3_real_files_read_as_written(tmp_path):
    # set -x, exports, ${VAR:-default}, continuations, quoted 'key=value', arrays, ray job submit -- python3 -m
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/bash\nset -xeuo pipefail\nexport VLLM_USE_V1=1\nN=${N:-8}\nB=$((N * 4))\n"
        "python3 -m verl.trainer.main_ppo \\\n  'data.train_batch_size=${B}' \\\n"
        "  actor_rollout_ref.rollout.n=$N \\\n  actor_rollout_ref.actor.ppo_mini_batch_size=8 $@\n"
    )
    script.write_text(script.read_text().replace("'data.train_batch_size=${B}'", '"data.train_batch_size=${B}"'))
    imp = import_config(script, "verl")
    assert (imp.scenario.algorithm.groups_per_step, imp.scenario.algorithm.group_size) == (32, 8)
    assert any("N is not set" in n for n in imp.notes)
    quoted = tmp_path / "quoted.sh"
    quoted.write_text(
        "python3 -m verl.trainer.main_ppo 'data.train_batch_size=16' 'actor_rollout_ref.rollout.n=4' "
        "actor_rollout_ref.actor.ppo_mini_batch_size=16\n"
    )
    assert import_config(quoted, "verl").scenario.algorithm.groups_per_step == 16
    # OpenRLHF through ray job submit with flag arrays (was: "empty flag name")
    imp = import_config(cr.CORPUS / "openrlhf_reinforce_baseline_agent_async.sh", "openrlhf")
    assert imp.scenario.algorithm.group_size == 8
    # AReaL ${...} interpolation (consumer_batch_size: ${train_dataset.batch_size})
    assert import_config(cr.CORPUS / "areal_gsm8k_grpo.yaml", "areal").scenario.algorithm.groups_per_step == 256
    # TRL nested dict kwargs
    trl = tmp_path / "grpo.yaml"
    trl.write_text(
        "num_generations: 8\nper_device_train_batch_size: 8\nlr_scheduler_kwargs:\n  min_lr_rate: 0.1\n"
        "chat_template_kwargs:\n  enable_thinking: false\n"
    )
    rows = {r.key: r.kind for r in import_config(trl, "trl").rows}
    assert (
        rows["lr_scheduler_kwargs.min_lr_rate"] == "unsupported"
        and rows["chat_template_kwargs.enable_thinking"] == "ignored"
    )
    # prime-rl relying on its own defaults (group_size 1 there)
    prime = tmp_path / "rl.toml"
    prime.write_text("[orchestrator]\nbatch_size = 64\n")
    imp = import_config(prime, "prime-rl")
    assert {r.key: r.kind for r in imp.rows}["orchestrator.group_size"] == "unsupported"


def test_finding4_openrlhf_main_branch_correction_flags(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text(
        "python3 -m openrlhf.cli.train_ppo_ray --rollout.batch_size 8 --rollout.n_samples_per_prompt 4 "
        "--train.batch_size 32 --algo.advantage.estimator group_norm --algo.advantage.is_correction_enable "
        "--algo.advantage.is_correction_type icepop --algo.advantage.is_correction_threshold 0.5 2.0\n"
    )
    c = import_config(path, "openrlhf").scenario.algorithm.correction
    assert (c.name, c.level, c.C_low, c.C) == ("mis", "token", 0.5, 2.0)
    path.write_text(path.read_text().replace("icepop", "tis"))
    assert import_config(path, "openrlhf").scenario.algorithm.correction.name == "tis"


def test_finding5_trl_async_config_with_default_knobs_can_be_named(tmp_path):
    path = tmp_path / "async.json"
    path.write_text('{"num_generations": 8, "per_device_train_batch_size": 16}')
    assert import_config(path, "trl").scenario.system.staleness.kind == "sync"  # GRPOConfig, said so in a row
    st = import_config(path, "trl", entry="AsyncGRPOConfig").scenario.system.staleness
    assert (st.kind, st.k_max) == ("max_lag", 4)
    st = import_config(cr.CORPUS / "trl_async_grpo.py", "trl").scenario.system.staleness
    assert (st.kind, st.k_max) == ("max_lag", 4)


def test_finding6_verl_defaults_come_from_the_wheel(tmp_path):
    from sandbox.importers.verl_defaults import defaults

    d = defaults("ppo_trainer")
    assert (
        d["trainer.use_v1"],
        d["trainer.v1.separate_async.num_warmup_batches"],
        d["trainer.v1.separate_async.parameter_sync_step"],
        d["trainer.v1.sampler.max_off_policy_threshold"],
    ) == (True, 1, 4, 8)
    path = tmp_path / "sep.txt"
    path.write_text(
        "data.train_batch_size=64\nactor_rollout_ref.rollout.n=4\nactor_rollout_ref.actor.ppo_mini_batch_size=16\n"
        "trainer.v1.trainer_mode=separate_async\n"
    )
    st = import_config(path, "verl").scenario.system.staleness  # use_v1 and the threshold from verl's own defaults
    assert (st.kind, st.k_max, st.enforcement, st.queue_capacity) == ("max_lag", 7, "drop", 2 * 64)


def test_finding6_stored_defaults_equal_a_fresh_compose_of_the_wheel():
    _wheel_or_skip("verl")
    from sandbox.export.validate.wheels import unpacked_wheel
    from sandbox.importers.verl_defaults import compose, stored

    wheel = unpacked_wheel("verl")
    for name in ("ppo_trainer", "fully_async_ppo_trainer"):
        import json

        assert json.loads(json.dumps(compose(wheel, name), default=str)) == stored()[name]


def test_finding7_cluster_facts_from_the_file():
    from sandbox.preflight.system import cluster_facts

    f = cluster_facts(import_config(cr.CORPUS / "verl_one_step_off_grpo_0.6b.sh", "verl").rows, "verl", {})
    assert (f.gpus, f.trainer_gpus, f.tp, f.max_tokens) == (8, 6, 2, 1024)
    f = cluster_facts(import_config(cr.CORPUS / "areal_gsm8k_grpo.yaml", "areal").rows, "areal", {})
    assert (f.gpus, f.trainer_gpus, f.model, f.max_tokens) == (
        8,
        4,
        "qwen2.5-1.5b",
        1024,
    )  # sglang:d4p1t1 + fsdp:d4p1t1
    f = cluster_facts(import_config(cr.CORPUS / "primerl_reverse_text_rl.toml", "prime-rl").rows, "prime-rl", {})
    assert (f.gpus, f.trainer_gpus, f.max_tokens) == (2, 1, 128)
    f = cluster_facts(
        import_config(cr.CORPUS / "openrlhf_reinforce_baseline_agent_async.sh", "openrlhf").rows, "openrlhf", {}
    )
    assert f.gpus == 4 and "Qwen3-4B" in f.source["model"]  # engines colocated on the actor's 4 GPUs


def test_finding8_areal_adv_norm_listed_and_vcpo_refuses_a_sync_verl_config():
    imp = import_config(cr.CORPUS / "areal_gsm8k_grpo.yaml", "areal")
    rows = {r.key: r for r in imp.rows}
    assert (
        rows["actor.adv_norm.mean_level"].kind == "unsupported"
        and "batch-level" in rows["actor.adv_norm.mean_level"].note
    )
    with pytest.raises(ConfigImportError, match="use -f verl"):
        import_config(cr.CORPUS / "verl_grpo_qwen2-7b.sh", "verl-vcpo")
    with pytest.raises(ConfigImportError, match="use -f verl"):
        import_config(DATA / "verl_reinforce_sync.txt", "verl-vcpo")


def test_errors_name_the_line_and_the_framework(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("set -x\npython3 -m openrlhf.cli.train_ppo_ray --rollout.batch_size 8\n")
    with pytest.raises(ConfigImportError, match=r"line 2: .*use -f openrlhf"):
        import_config(path, "verl")
    path.write_text(
        "MODEL=${MODEL_PATH}\npython3 -m verl.trainer.main_ppo data.train_batch_size=8 "
        "actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.rollout.n=2 "
        "actor_rollout_ref.rollout.temperature=$TEMP\n"
    )
    with pytest.raises(ConfigImportError, match=r"TEMP is not set in the file"):
        import_config(path, "verl")


def test_trl_defaults_table_equals_the_dataclasses():
    import dataclasses
    import warnings

    from trl import GRPOConfig

    from sandbox.frameworks.trl.importer import ASYNC_DEFAULTS, SYNC_DEFAULTS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.async_grpo import AsyncGRPOConfig
    for cls, table in ((GRPOConfig, SYNC_DEFAULTS), (AsyncGRPOConfig, ASYNC_DEFAULTS)):
        fields = {f.name: f.default for f in dataclasses.fields(cls)}
        for k, v in table.items():
            if k in fields:
                assert fields[k] == v, (cls.__name__, k)
