"""``sandbox import``: the written scenario loads and runs, unknown keys are listed, malformed files and bad
values are one error line naming the line or key (no traceback), cluster facts come from flags or [cluster]."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.importers.api import ConfigImportError, import_config
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import load_scenario

DATA = Path(__file__).resolve().parent / "data"


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize(
    "name,fw",
    [
        ("verl_reinforce_sync.txt", "verl"),
        ("trl_async_grpo.json", "trl"),
        ("openrlhf_sync_drgrpo.txt", "openrlhf"),
        ("areal_sync_tis.yaml", "areal"),
        ("primerl_sgd_warmup.toml", "prime-rl"),
        ("vcpo_ratio_clip.yaml", "verl-vcpo"),
    ],
)
def test_written_scenario_loads_and_runs(tmp_path, name, fw):
    res = invoke("import", DATA / name, "--framework", fw, "--out", tmp_path / "imp")
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    assert sorted(p.name for p in (tmp_path / "imp").iterdir() if not p.name.startswith(".")) == [
        "IMPORT.md",
        "scenario.toml",
    ]
    scn, _ = load_scenario(tmp_path / "imp" / "scenario.toml", ["run.steps=2", "run.figures=false", "task.replicas=1"])
    result = run_scenario(scn, None, force=True)
    assert len(result.metrics) >= 2  # two learner steps recorded
    md = (tmp_path / "imp" / "IMPORT.md").read_text()
    assert "## The task is a proxy" in md and "bitstring" in md


def test_unknown_keys_are_listed_never_dropped(tmp_path):
    imp = import_config(DATA / "verl_reinforce_sync.txt", "verl")
    unknown = [r for r in imp.rows if r.kind == "unknown"]
    assert [r.key for r in unknown] == ["trainer.entropy_schedule"]
    assert "line 25" in unknown[0].note
    imp = import_config(DATA / "trl_grpo_gsm8k.yaml", "trl")
    assert "reward_weights" in [r.key for r in imp.rows if r.kind == "unknown"]
    # every key of the file is in exactly one row
    from sandbox.frameworks.trl.importer import read_trl

    keys = set(read_trl(str(DATA / "trl_grpo_gsm8k.yaml")).values)
    assert keys <= {r.key for r in imp.rows}


def test_unsupported_values_are_listed_with_the_reason():
    imp = import_config(DATA / "verl_gsm8k_async.yaml", "verl")
    rows = {r.key: r for r in imp.rows if r.kind == "unsupported"}
    assert "reference-policy" in rows["actor_rollout_ref.actor.use_kl_loss"].note
    assert imp.scenario.algorithm.objective.beta_kl == 0.0


def test_conversions(tmp_path):
    imp = import_config(DATA / "verl_gsm8k_async.yaml", "verl")
    st = imp.scenario.system.staleness
    # T = 3 versions spanned -> lag bound 2; warm-up window 1 != k_max -> drop with (1 + 1) * 256 groups
    assert (st.kind, st.k_max, st.enforcement, st.queue_capacity) == ("max_lag", 2, "drop", 512)
    a = imp.scenario.algorithm
    assert (a.group_size, a.groups_per_step, a.minibatches) == (5, 256, 4)
    # verl defaults where the file is silent: clip_ratio_c = 3 (dual clip on), token-mean, AdamW with decay 0.01
    assert a.objective.dual_clip_c == 3.0 and a.objective.aggregation == "token_mean"
    assert (a.optimizer.name, a.optimizer.weight_decay) == ("adamw", 0.01)
    imp = import_config(DATA / "verl_reinforce_sync.txt", "verl")
    a = imp.scenario.algorithm
    # bypass_mode = false with 2 mini-batches x 2 epochs: the PPO clip (rloo advantages) against π_old recomputed
    # once per batch, the rollout_is weights π_old/μ (finding 1 of issue 44: not the unclipped reinforce)
    assert (a.objective.name, a.objective.eps_low, a.correction.name, a.correction.level, a.correction.C) == (
        "rloo",
        0.2,
        "tis",
        "sequence",
        4.0,
    )
    assert a.optimizer.warmup_steps == 5 * 2 * 2  # scheduler steps x (minibatches x epochs) in sync mode
    assert a.proximal == "batch_start"
    imp = import_config(DATA / "trl_async_grpo.json", "trl")
    st, a = imp.scenario.system.staleness, imp.scenario.algorithm
    assert (a.group_size, a.groups_per_step, a.minibatches) == (16, 16, 2)  # 128 * 2 / 16
    assert (st.k_max, st.enforcement, st.queue_capacity) == (2, "drop", 384 // 16 + 16)
    assert list(a.optimizer.betas) == [0.9, 0.99]


MALFORMED = [
    ("verl", "bad.yaml", "a:\n  b: [1, 2\n", "line 3"),
    ("verl", "bad.txt", "data.train_batch_size=8\nthis is not an override\n", "line 2"),
    ("verl", "dup.txt", "data.train_batch_size=8\ndata.train_batch_size=16\n", "given twice"),
    ("verl", "type.txt", "data.train_batch_size=eight\n", "data.train_batch_size"),
    (
        "verl",
        "mini.txt",
        "data.train_batch_size=8\nactor_rollout_ref.actor.ppo_mini_batch_size=3\n",
        "ppo_mini_batch_size",
    ),
    ("verl", "loss.txt", "data.train_batch_size=8\nactor_rollout_ref.actor.loss_agg_mode=token-sum\n", "loss_agg_mode"),
    ("trl", "bad.json", '{"num_generations": 8,\n "epsilon": }\n', "line 2"),
    ("trl", "list.json", "[1, 2]", "mapping"),
    ("trl", "groups.json", '{"num_generations": 8, "per_device_train_batch_size": 12}', "per_device_train_batch_size"),
    ("trl", "mode.json", '{"vllm_importance_sampling_mode": "both"}', "vllm_importance_sampling_mode"),
    ("trl", "bin.json", b"\xff\xfe{}", "UTF-8"),
    ("openrlhf", "quote.sh", "--rollout.batch_size 8\n--actor.optim 'adam\n", "line 2"),
    ("openrlhf", "word.sh", "--rollout.batch_size 8 stray\n", "stray"),
    (
        "openrlhf",
        "geom.sh",
        "--rollout.batch_size 8 --rollout.n_samples_per_prompt 4 --train.batch_size 5\n",
        "train.batch_size",
    ),
    ("areal", "type.yaml", "gconfig:\n  n_samples: four\nrollout:\n  consumer_batch_size: 8\n", "gconfig.n_samples"),
    ("areal", "bad.yaml", "actor:\n\teps_clip: 0.2\n", "line 2"),
    ("prime-rl", "bad.toml", "[orchestrator]\nbatch_size = \n", "TOML"),
    ("prime-rl", "geom.toml", "[orchestrator]\nbatch_size = 60\ngroup_size = 8\n", "orchestrator.batch_size"),
    (
        "verl-vcpo",
        "thr.txt",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8\nasync_training.staleness_threshold=-1\n",
        "staleness_threshold",
    ),
]


@pytest.mark.parametrize("fw,name,text,expect", MALFORMED, ids=[m[1] + "-" + m[0] for m in MALFORMED])
def test_malformed_file_is_one_error_line(tmp_path, fw, name, text, expect):
    path = tmp_path / name
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    with pytest.raises(ConfigImportError, match=expect):
        import_config(path, fw)
    res = invoke("import", path, "--framework", fw, "--out", tmp_path / "o")
    assert res.exit_code == 2 and res.output.startswith("error:") and "Traceback" not in res.output, res.output
    assert not (tmp_path / "o").exists()


def test_cli_bad_flags(tmp_path):
    res = invoke("import", DATA / "verl_reinforce_sync.txt")
    assert res.exit_code == 2 and "--framework: required" in res.output
    res = invoke("import", DATA / "verl_reinforce_sync.txt", "-f", "verl", "--task", "atari", "--out", tmp_path / "o")
    assert res.exit_code == 2 and "--task" in res.output
    res = invoke("import", tmp_path / "missing.txt", "-f", "verl", "--out", tmp_path / "o")
    assert res.exit_code == 2 and "missing.txt" in res.output


def test_cluster_facts(tmp_path):
    (tmp_path / "c.toml").write_text(
        "[cluster]\nnum_workers = 24\ntrainer_gpus = 4\nrollout_gpus = 12\n"
        'generation_time = { kind = "lognormal", median = 2.0, sigma = 1.0 }\n'
    )
    res = invoke(
        "import", DATA / "trl_async_grpo.json", "-f", "trl", "--cluster", tmp_path / "c.toml", "--out", tmp_path / "o"
    )
    assert res.exit_code == 0, res.output
    data = tomllib.loads((tmp_path / "o" / "scenario.toml").read_text())
    assert data["system"]["num_workers"] == 24
    assert data["system"]["generation_time"]["kind"] == "lognormal"
    md = (tmp_path / "o" / "IMPORT.md").read_text()
    assert "cluster.trainer_gpus" in md and "cluster.rollout_gpus" in md
    (tmp_path / "bad.toml").write_text("[cluster]\ngpus = 4\n")
    res = invoke(
        "import",
        DATA / "trl_async_grpo.json",
        "-f",
        "trl",
        "--cluster",
        tmp_path / "bad.toml",
        "--out",
        tmp_path / "o2",
    )
    assert res.exit_code == 2 and "cluster.gpus" in res.output


def test_task_lm_proxy():
    imp = import_config(DATA / "verl_reinforce_sync.txt", "verl", proxy="lm")
    assert imp.scenario.task.name == "lm"
    assert imp.scenario.algorithm.groups_per_step == 32


def test_list_names_every_framework():
    res = invoke("import", "--list")
    assert res.exit_code == 0, res.output
    for fw in ("verl", "verl-vcpo", "trl", "openrlhf", "areal", "prime-rl"):
        assert fw in res.output


def test_verl_s_own_shipped_default_config():
    """verl's wheel carries its full default config (trainer/config/_generated_ppo_trainer.yaml, ~900 keys): it
    imports, every key lands in a row, and its n = 1 with the gae estimator (a critic) is listed as not
    representable (the scenario uses groups of 2 and the grpo estimator). Skipped without the cached wheel."""
    from sandbox.export.validate.wheels import cache_dir

    path = cache_dir() / "verl-0.9.1" / "verl" / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    if not path.is_file():
        pytest.skip(f"verl 0.9.1 wheel not unpacked in {cache_dir()} (tests/export fetch it)")
    imp = import_config(path, "verl")
    from sandbox.frameworks.verl.importer import read_verl

    assert set(read_verl(str(path)).values) <= {r.key for r in imp.rows}
    bad = {r.key for r in imp.rows if r.kind == "unsupported"}
    assert {"actor_rollout_ref.rollout.n", "algorithm.adv_estimator"} <= bad
    assert imp.scenario.algorithm.group_size == 2 and imp.scenario.system.staleness.kind == "sync"
    # verl's defaults: bypass_mode = false with 1024 / 256 = 4 mini-batches is the PPO clip (0.2) against π_old
    # recomputed once per batch (finding 1 of issue 44), token-mean, AdamW with decay 0.01
    a = imp.scenario.algorithm
    assert (a.objective.name, a.objective.eps_low, a.minibatches, a.proximal) == ("grpo", 0.2, 4, "batch_start")
    assert (a.objective.aggregation, a.optimizer.name, a.optimizer.weight_decay) == ("token_mean", "adamw", 0.01)


def test_a_pasted_launch_command_reads_as_overrides(tmp_path):
    path = tmp_path / "run_grpo.sh"
    path.write_text(
        "python3 -m verl.trainer.main_ppo \\\n    algorithm.adv_estimator=grpo \\\n"
        "    data.train_batch_size=64 actor_rollout_ref.rollout.n=4 \\\n"
        "    actor_rollout_ref.actor.optim.lr=1e-6 \\\n    trainer.logger='[\"console\"]'\n"
    )
    imp = import_config(path, "verl")
    assert (imp.scenario.algorithm.groups_per_step, imp.scenario.algorithm.group_size) == (64, 4)
    assert {r.key: r.kind for r in imp.rows}["actor_rollout_ref.actor.optim.lr"] == "scale"
    path.write_text("set -x\n")  # a shell preamble alone: nothing to import
    with pytest.raises(ConfigImportError, match="no launch command"):
        import_config(path, "verl")


def test_hostile_inputs_are_refused_by_name(tmp_path):
    """The bounded reader: a directory, a FIFO (would block), a device (never ends), a file nested too deeply."""
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    for path, fw in ((tmp_path, "areal"), (fifo, "areal"), (Path("/dev/zero"), "verl"), (deep, "trl")):
        with pytest.raises(ConfigImportError, match=str(path)):
            import_config(path, fw)
