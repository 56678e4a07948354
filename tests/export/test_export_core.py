"""The export machinery without a real framework: input resolution (scenario files, run and sweep
directories, --best over seeds), refusals, PROMOTION.md, the output-directory protocol and the CLI's
exit codes. A minimal exporter ("toyfw") is registered for the duration of each test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.export.api import EXPORTERS, Exporter, ExportError, ExportRefused, Given, Version, export_scenario
from sandbox.export.common import scale_rows, scenario_leaves
from sandbox.export.source import resolve
from sandbox.scenario.api import dump_scenario, load_scenario, variant_scenarios

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.toml"


class ToyExporter(Exporter):
    """Maps the staleness bound and the group size; everything else in algorithm is a gap."""

    name = "toyfw"
    title = "a toy framework for tests"
    versions = (Version("2.0", "2.0.1", "tests"), Version("1.0", "1.0.3", "tests"))
    expresses = {"max lag": "lag.max", "GAC": "no equivalent: none"}

    def plan(self, scn, version, given):
        p = self.new_plan(version, "toy trainer")
        st = scn.system.staleness
        if st.kind == "max_lag":
            p.converted("system.staleness", st.kind, "lag.max", st.k_max + 1, "toy counts versions spanned: k_max + 1")
        elif st.kind == "sync":
            p.pinned("lag.max", 1, "synchronous")
            p.implicit("system.staleness.kind", "sync", "synchronous")
            p.implicit("system.staleness.dispatch", st.dispatch, "how the simulated workers share a step")
        else:
            p.no_equivalent("system.staleness", st.kind, "toy cannot")
        p.implicit("system.partial_rollouts", scn.system.partial_rollouts, "n/a")
        p.setup(
            "algorithm.group_size", scn.algorithm.group_size, "responses per prompt", "group", scn.algorithm.group_size
        )
        p.implicit("algorithm.groups_per_step", scn.algorithm.groups_per_step, "n/a")
        p.implicit("algorithm.objective", scn.algorithm.objective.name, "n/a")
        p.implicit("algorithm.minibatches + algorithm.epochs + algorithm.proximal", "1 x 1, behaviour", "n/a")
        if scn.algorithm.correction.name == "none":
            p.implicit("algorithm.correction", "none", "no correction")
        else:
            p.no_equivalent("algorithm.correction", scn.algorithm.correction.name, "toy has no correction")
        for i, s in enumerate(scn.algorithm.stabilizers):
            p.no_equivalent(f"algorithm.stabilizers[{i}]", s.name, "toy has no stabilizers")
        opt = scn.algorithm.optimizer
        p.implicit(
            "algorithm.optimizer.name + algorithm.optimizer.betas + algorithm.optimizer.eps + algorithm.optimizer.momentum"
            " + algorithm.optimizer.weight_decay + algorithm.optimizer.schedule + algorithm.optimizer.warmup_steps",
            opt.name,
            "n/a",
        )
        scale_rows(p, scn, given, "optim.lr", "optim.clip")
        return p

    def files(self, plan):
        return {"toy.json": json.dumps(plan.settings, indent=1, sort_keys=True) + "\n"}

    def launch(self, plan, files):
        return "toy-train --config toy.json"


@pytest.fixture(autouse=True)
def toyfw():
    EXPORTERS["toyfw"] = ToyExporter
    yield
    EXPORTERS.pop("toyfw", None)


def quick(variant: str):
    scn, raw = load_scenario(QUICKSTART)
    return variant_scenarios(scn, raw)[variant]


# --------------------------------------------------------------------------------------------
# export_scenario
# --------------------------------------------------------------------------------------------


def test_every_leaf_gets_a_row_and_the_mapping_is_applied():
    exp = export_scenario(quick("async"), "toyfw")
    assert exp.plan.settings["lag.max"] == 5 and exp.plan.settings["group"] == 8
    assert exp.plan.uncovered(scenario_leaves(quick("async"))) == []
    doc = exp.files["PROMOTION.md"]
    for heading in ("## Converted", "## Your setup", "## Scale-dependent: set for your model", "## Sandbox only"):
        assert heading in doc
    assert "`lag.max` = `5`" in doc and "toy-train --config toy.json" in doc
    assert exp.manifest["counts"]["no_equivalent"] == 0 and exp.manifest["partial"] is False


def test_learning_rate_is_written_only_when_given():
    assert "optim.lr" not in export_scenario(quick("async"), "toyfw").plan.settings
    exp = export_scenario(quick("async"), "toyfw", given=Given(lr=1e-6))
    assert exp.plan.settings["optim.lr"] == 1e-6
    row = next(r for r in exp.plan.rows if r.source == "algorithm.optimizer.lr")
    assert row.value == 0.05 and row.target_value == 1e-6


def test_gaps_refuse_by_default_and_are_listed_with_allow_partial():
    with pytest.raises(ExportRefused) as info:
        export_scenario(quick("async+tis"), "toyfw")
    assert [r.source for r in info.value.rows] == ["algorithm.correction"]
    assert "algorithm.correction = tis" in str(info.value)
    exp = export_scenario(quick("async+tis"), "toyfw", allow_partial=True)
    assert exp.manifest["partial"] is True
    doc = exp.files["PROMOTION.md"]
    assert "## No equivalent in toyfw" in doc and "toy has no correction" in doc and "Partial export" in doc


def test_a_forgotten_field_is_an_exporter_bug():
    class Forgetful(ToyExporter):
        def plan(self, scn, version, given):
            p = super().plan(scn, version, given)
            p.rows = [r for r in p.rows if r.source != "algorithm.group_size"]
            return p

    EXPORTERS["toyfw"] = Forgetful
    with pytest.raises(AssertionError, match="algorithm.group_size"):
        export_scenario(quick("async"), "toyfw")


def test_bad_framework_version_and_task():
    with pytest.raises(ExportError, match="unknown framework 'nope'; expected one of .*toyfw"):
        export_scenario(quick("async"), "nope")
    with pytest.raises(ExportError, match=r"'3\.0' is not supported; supported: 2\.0 \(2\.0\.1\), 1\.0 \(1\.0\.3\)"):
        export_scenario(quick("async"), "toyfw", version="3.0")
    assert export_scenario(quick("async"), "toyfw", version="1.0.3").plan.version == "1.0"
    scn, _ = load_scenario(ROOT / "scenarios" / "delayed_quadratic.toml")
    with pytest.raises(ExportError, match="task.name: the quadratic gradient oracle"):
        export_scenario(scn, "toyfw")


# --------------------------------------------------------------------------------------------
# sources
# --------------------------------------------------------------------------------------------


def test_scenario_file_needs_an_existing_variant():
    with pytest.raises(ExportError, match="has variants sync, async, async\\+tis; choose one"):
        resolve(QUICKSTART)
    with pytest.raises(
        ExportError, match="no variant .fast. in quickstart.toml; expected one of sync, async, async\\+tis"
    ):
        resolve(QUICKSTART, variant="fast")
    src = resolve(QUICKSTART, variant="async", overrides=["system.staleness.k_max=6"])
    assert src.scenario.system.staleness.k_max == 6 and src.overrides == {"system.staleness.k_max": 6}
    assert "variant `async`" in src.provenance and "system.staleness.k_max=6" in src.provenance
    with pytest.raises(ExportError, match="sweep file"):
        resolve(ROOT / "scenarios" / "sweeps" / "methods_bitstring.toml")
    with pytest.raises(ExportError, match="invalid .*system.staleness.k_max"):
        resolve(QUICKSTART, variant="async", overrides=["system.staleness.k_max=-1"])


def _write_run(path: Path, scn, summary: dict | None) -> None:
    path.mkdir(parents=True)
    (path / "scenario.toml").write_text(dump_scenario(scn))
    if summary is not None:
        (path / "summary.json").write_text(json.dumps(summary))


def _fake_sweep(tmp_path: Path) -> Path:
    """k_max in {2, 4} x seeds {0, 1}: k_max=4 has the higher mean reward (0.9, 0.8) vs (1.0, 0.5);
    a diverged seed of k_max=8 has the single highest reward and must not win."""
    out = tmp_path / "sweep"
    runs, rewards = [], {("2", 0): 1.0, ("2", 1): 0.5, ("4", 0): 0.9, ("4", 1): 0.8, ("8", 0): 2.0}
    for (k, seed), reward in rewards.items():
        rid = f"k{k}-s{seed}"
        scn = quick("async").model_copy(deep=True)
        scn = scn.model_validate(
            {
                **scn.model_dump(),
                "system": {**scn.system.model_dump(), "staleness": {"kind": "max_lag", "k_max": int(k)}},
            }
        )
        status = "diverged" if k == "8" else "completed"
        _write_run(out / "runs" / rid, scn, {"status": status, "final_expected_reward": reward, "staleness_mean": 1.0})
        runs.append({"id": rid, "params": {"system.staleness.k_max": int(k)}, "seed": seed})
    runs.append({"id": "k16-s0", "params": {"system.staleness.k_max": 16}, "seed": 0})  # never ran
    (out / "sweep.json").write_text(json.dumps({"name": "fake", "axes": [["system.staleness.k_max"]], "runs": runs}))
    return out


def test_sweep_best_is_the_best_mean_over_seeds(tmp_path):
    out = _fake_sweep(tmp_path)
    src = resolve(out, best="final_expected_reward")
    assert src.scenario.system.staleness.k_max == 4
    assert "0.85 over 2 completed seed(s)" in src.provenance
    low = resolve(out, best="final_expected_reward", lowest=True)
    assert low.scenario.system.staleness.k_max == 2
    assert resolve(out, run_id="k2-s1").scenario.system.staleness.k_max == 2


def test_sweep_bad_selections(tmp_path):
    out = _fake_sweep(tmp_path)
    with pytest.raises(
        ExportError, match="unknown metric 'reward' in .*; expected one of final_expected_reward, staleness_mean"
    ):
        resolve(out, best="reward")
    with pytest.raises(ExportError, match="choose one with --run ID or --best METRIC"):
        resolve(out)
    with pytest.raises(ExportError, match="no run 'k3-s0'"):
        resolve(out, run_id="k3-s0")
    with pytest.raises(ExportError, match="has no resolved scenario.toml"):
        resolve(out, run_id="k16-s0")
    with pytest.raises(ExportError, match="--variant applies to"):
        resolve(out, variant="async")


def test_run_directories(tmp_path):
    multi = tmp_path / "runs" / "quickstart"
    _write_run(multi / "sync", quick("sync"), {"status": "completed", "final_expected_reward": 0.9})
    _write_run(multi / "async", quick("async"), {"status": "completed", "final_expected_reward": 0.95})
    assert resolve(multi, best="final_expected_reward").scenario.system.staleness.kind == "max_lag"
    assert resolve(multi, variant="sync").scenario.system.staleness.kind == "sync"
    with pytest.raises(ExportError, match="choose one with --variant NAME or --best METRIC"):
        resolve(multi)
    single = resolve(multi / "async")
    assert "the run finished" in single.provenance
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ExportError, match="not a run or sweep directory"):
        resolve(empty)
    with pytest.raises(ExportError, match="no such file or directory"):
        resolve(tmp_path / "missing.toml")


def test_run_directory_best_by_end_to_end_speedup(tmp_path):
    """A `sandbox run` of variants records each variant's speed-up against the synchronous one in
    its summary.json; `--best speedup` (alias of speedup_vs_sync) picks the fastest end to end, and
    a variant that never reached the target (no speed-up) is left out."""
    multi = tmp_path / "runs" / "quickstart"
    for name, speed in (("sync", 1.0), ("async", 2.5), ("async+tis", None)):
        _write_run(
            multi / name,
            quick(name),
            {
                "status": "completed",
                "final_expected_reward": 0.9,
                "speedup_vs_sync": speed,
                "speedup_reason": "" if speed else "async+tis never reached the target",
            },
        )
    for metric in ("speedup", "speedup_vs_sync"):
        src = resolve(multi, best=metric)
        assert src.scenario.system.staleness.kind == "max_lag" and src.scenario.algorithm.correction.name == "none"
        assert "highest `speedup_vs_sync` among the completed runs: async 2.5, sync 1" in src.provenance
    for name in ("sync", "async"):
        (multi / name / "summary.json").write_text(
            json.dumps({"status": "completed", "speedup_vs_sync": None, "speedup_reason": "no synchronous variant"})
        )
    with pytest.raises(
        ExportError, match="no completed run .* has a value for 'speedup_vs_sync' .*never reached the target"
    ):
        resolve(multi, best="speedup")


def test_damaged_summary_counts_as_unfinished(tmp_path):
    """A summary.json that is not a JSON object is a run without a summary, never a traceback."""
    multi = tmp_path / "runs" / "quickstart"
    _write_run(multi / "sync", quick("sync"), {"status": "completed", "final_expected_reward": 0.9})
    _write_run(multi / "async", quick("async"), {"status": "completed", "final_expected_reward": 0.5})
    (multi / "sync" / "summary.json").write_text("[0.9]")
    assert "among the completed runs: async 0.5" in resolve(multi, best="final_expected_reward").provenance
    (multi / "async" / "summary.json").write_text("null")
    with pytest.raises(ExportError, match="unknown metric 'final_expected_reward' .*no finished runs"):
        resolve(multi, best="final_expected_reward")


def test_sweep_best_by_end_to_end_speedup(tmp_path):
    """A sweep run's own summary.json knows the run alone (no speed-up); `--best speedup` takes the
    sweep's value of each configuration against its synchronous baseline (load_time_to_target)."""
    from sandbox.sweep.api import load_time_to_target

    base = tmp_path / "base.toml"
    base.write_text(dump_scenario(quick("sync")))
    sweep = tmp_path / "tiny.toml"
    sweep.write_text(f"""base = "{base.as_posix()}"
seeds = [0]
[sweep]
name = "tiny"
[set]
"run.steps" = 40
"run.figures" = false
"run.eval_every" = 5
"task.replicas" = 1
"system.num_workers" = 8
[grid]
"system.staleness" = [{{ kind = "sync" }}, {{ kind = "max_lag", k_max = 1 }}, {{ kind = "max_lag", k_max = 4 }}]
""")
    out = tmp_path / "sweep"
    done = CliRunner().invoke(app, ["sweep", str(sweep), "--out", str(out), "-j", "1", "-q"])
    assert done.exit_code == 0, done.output
    assert all("speedup_vs_sync" not in json.loads(p.read_text()) for p in out.glob("runs/*/summary.json"))
    table = load_time_to_target(out).dropna(subset=["speedup_vs_sync"])
    fastest = table.loc[table["speedup_vs_sync"].idxmax()]
    assert fastest["speedup_vs_sync"] > 1
    src = resolve(out, best="speedup")
    chosen = src.provenance.split("Top configurations")[0]
    assert (
        f"system.staleness={fastest['system.staleness']}" in chosen and src.scenario.system.staleness.kind == "max_lag"
    )
    assert "mean `speedup_vs_sync` over seeds" in chosen and f"{fastest['speedup_vs_sync']:.4g}" in src.provenance


# --------------------------------------------------------------------------------------------
# output directory and command line
# --------------------------------------------------------------------------------------------


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_output_directory_is_replaced_whole_and_nothing_is_written_outside(tmp_path):
    out = tmp_path / "promote" / "x"
    first = export_scenario(quick("async"), "toyfw")
    first.files["stale.txt"] = "from the first export\n"
    first.write(out)
    assert (out / "stale.txt").exists() and (out / "export.json").exists()
    (out / ".staging-leftover").mkdir()  # an interrupted earlier export
    outside = lambda: {p for p in _tree(tmp_path) if not p.startswith("promote/x/")}  # noqa: E731
    before = outside()
    export_scenario(quick("sync"), "toyfw").write(out)
    assert sorted(p.name for p in out.iterdir()) == ["PROMOTION.md", "export.json", "toy.json"]
    assert json.loads((out / "toy.json").read_text())["lag.max"] == 1
    assert outside() == before


def test_refuses_a_directory_that_is_not_an_export(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty and holds no previous export"):
        export_scenario(quick("async"), "toyfw").write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_cli_exit_codes(tmp_path):
    runner = CliRunner()
    out = tmp_path / "o"
    ok = runner.invoke(
        app, ["export", str(QUICKSTART), "--variant", "async", "-f", "toyfw", "--out", str(out), "--lr", "1e-6"]
    )
    assert ok.exit_code == 0, ok.output
    assert json.loads((out / "toy.json").read_text())["optim.lr"] == 1e-6
    refused = runner.invoke(
        app, ["export", str(QUICKSTART), "--variant", "async+tis", "-f", "toyfw", "--out", str(tmp_path / "r")]
    )
    assert refused.exit_code == 3 and "algorithm.correction" in refused.output and not (tmp_path / "r").exists()
    partial = runner.invoke(
        app,
        [
            "export",
            str(QUICKSTART),
            "--variant",
            "async+tis",
            "-f",
            "toyfw",
            "--allow-partial",
            "--out",
            str(tmp_path / "p"),
        ],
    )
    assert partial.exit_code == 0 and "no equivalent" in partial.output and (tmp_path / "p" / "PROMOTION.md").exists()
    for args, message in [
        (["export", str(QUICKSTART), "--variant", "async", "-f", "nope"], "unknown framework 'nope'"),
        (["export", str(QUICKSTART), "--variant", "async", "-f", "toyfw", "--version", "9"], "supported: 2.0"),
        (["export", str(QUICKSTART), "--variant", "nope", "-f", "toyfw"], "no variant 'nope'"),
        (["export", str(tmp_path / "none.toml"), "-f", "toyfw"], "no such file"),
        (["export", str(QUICKSTART), "--variant", "async"], "--framework: required"),
        (["export", str(QUICKSTART), "--variant", "async", "-f", "toyfw", "--lr", "-1"], "--lr: expected a positive"),
    ]:
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert message in res.output and "Traceback" not in res.output
    listed = runner.invoke(app, ["export", "--list"])
    assert listed.exit_code == 0 and "toyfw" in listed.output and "2.0 (2.0.1)" in listed.output


@pytest.mark.parametrize("framework", ["verl", "verl-vcpo", "trl", "openrlhf", "areal", "prime-rl"])
def test_every_registered_stabilizer_gets_a_row_in_every_framework(framework):
    """A stabilizer added to the registry (one file) must not break an exporter that predates it: each
    framework writes one no-equivalent row per stabilizer, saying what to do instead."""
    from sandbox.algorithms import STABILIZERS

    names = STABILIZERS.names()
    scn, raw = load_scenario(QUICKSTART, {"algorithm.stabilizers": [{"name": n} for n in names]})
    exp = export_scenario(variant_scenarios(scn, raw)["async"], framework, allow_partial=True)
    for i, name in enumerate(names):
        rows = [r for r in exp.plan.rows if r.source == f"algorithm.stabilizers[{i}]"]
        assert len(rows) == 1 and rows[0].kind == "no_equivalent" and "Instead" in rows[0].note, (framework, name, rows)


def test_a_planted_manifest_never_deletes_outside_the_export(tmp_path):
    """export.json is data to validate, not a list of paths to trust: entries that are absolute, climb
    out with '..', name a subdirectory or a symlink refuse the export and nothing is removed."""
    out = tmp_path / "out"
    out.mkdir()
    victims = [tmp_path / "victim.txt", tmp_path / "victim2.txt"]
    for v in victims:
        v.write_text("keep me")
    (out / "link").symlink_to(victims[0])
    (out / "sub").mkdir()
    for planted in (str(victims[0]), "../victim2.txt", "sub", "link", "a/../../victim2.txt"):
        (out / "export.json").write_text(json.dumps({"files": [planted]}))
        before = _tree(tmp_path)
        with pytest.raises(ExportError, match="not a file an export writes"):
            export_scenario(quick("sync"), "toyfw").write(out)
        assert _tree(tmp_path) == before and all(v.read_text() == "keep me" for v in victims), planted
    res = CliRunner().invoke(
        app, ["export", str(QUICKSTART), "--variant", "sync", "-f", "toyfw", "--lr", "1e-6", "--out", str(out)]
    )
    text = " ".join(res.output.split())  # rich wraps long lines
    assert res.exit_code == 2 and "not a file an export writes" in text and "Traceback" not in text
    assert all(v.read_text() == "keep me" for v in victims)


def test_default_export_folders_of_two_run_directories_do_not_collide(tmp_path, monkeypatch):
    """Two run directories with the same variant names get their own default folders
    (promote/<run dir>-<variant>-<framework>), and a default folder holding the export of another
    source is refused rather than silently replaced; the same source replaces its own export."""
    for name in ("a", "b"):
        _write_run(
            tmp_path / "runs" / name / "sync", quick("sync"), {"status": "completed", "final_expected_reward": 0.9}
        )
    _write_run(tmp_path / "runs" / "b" / "async", quick("async"), {"status": "completed", "final_expected_reward": 0.9})
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    first = runner.invoke(app, ["export", "runs/a", "--variant", "sync", "-f", "toyfw", "--lr", "1e-6"])
    second = runner.invoke(app, ["export", "runs/b", "--variant", "sync", "-f", "toyfw", "--lr", "1e-6"])
    assert first.exit_code == 0 and second.exit_code == 0, (first.output, second.output)
    assert sorted(p.name for p in (tmp_path / "promote").iterdir()) == ["a-sync-toyfw", "b-sync-toyfw"]
    again = runner.invoke(app, ["export", "runs/a", "--variant", "sync", "-f", "toyfw", "--lr", "1e-6"])
    assert again.exit_code == 0, again.output
    # another source landing on the same default folder (a single run directory named like the label)
    _write_run(tmp_path / "elsewhere" / "a-sync", quick("sync"), {"status": "completed", "final_expected_reward": 0.9})
    clash = runner.invoke(app, ["export", "elsewhere/a-sync", "-f", "toyfw", "--lr", "1e-6"])
    assert clash.exit_code == 2 and "holds the export of another source" in " ".join(clash.output.split()), clash.output
    assert "runs/a" in json.loads((tmp_path / "promote" / "a-sync-toyfw" / "export.json").read_text())["source"]


def test_an_unknown_framework_is_named_before_the_variant_and_gets_a_did_you_mean():
    res = CliRunner().invoke(app, ["export", str(QUICKSTART), "-f", "toyf"])
    assert res.exit_code == 2 and "unknown framework 'toyf'; did you mean 'toyfw'?" in " ".join(res.output.split()), (
        res.output
    )
    assert "--variant" not in res.output
