"""The import surface against hostile inputs (issue 42, findings 4-6 and 8): YAML alias bombs and
block-style nesting, numbers no config holds (integers of thousands of digits, ``1e400``, NaN), lone
surrogates, GPU counts that would size lists, learning rates that are not one. Every case ends in a
:class:`ConfigImportError` (or the scenario's / the plan's error) naming the key or option, within a
time limit (``SIGALRM``: a hang fails the test instead of stalling the suite)."""

from __future__ import annotations

import math
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox.base.errors import ScenarioError
from sandbox.cli import app
from sandbox.frameworks.importing import ConfigImportError, Mapper
from sandbox.importers.api import IMPORTERS, import_config
from sandbox.importers.build import build, render_import_md

DATA = Path(__file__).resolve().parent / "data"
FILES = {
    "verl": ["verl_gsm8k_async.yaml", "verl_reinforce_sync.txt"],
    "verl-vcpo": ["vcpo_ratio_clip.yaml", "vcpo_fully_async_math.txt"],
    "trl": ["trl_grpo_gsm8k.yaml", "trl_async_grpo.json"],
    "openrlhf": ["openrlhf_async_reinforce.sh", "openrlhf_sync_drgrpo.txt"],
    "areal": ["areal_gsm8k_grpo.yaml", "areal_sync_tis.yaml"],
    "prime-rl": ["primerl_reverse_text.toml", "primerl_sgd_warmup.toml"],
}
YAML_READERS = {"verl": "a.yaml", "verl-vcpo": "a.yaml", "trl": "a.yaml", "areal": "a.yaml"}


class Hang(Exception):
    pass


@contextmanager
def within(seconds: int):
    def stop(signum, frame):
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    lines.append("bomb: [" + ", ".join([f"*a{levels - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def _deep(levels: int = 1000) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(levels)) + "  " * levels + "v: 1\n"


@pytest.mark.parametrize("framework", list(YAML_READERS))
@pytest.mark.parametrize("kind", ["alias bomb", "block nesting", "recursive alias", "huge integer"])
def test_hostile_yaml_is_a_clear_error(framework, kind, tmp_path):
    text = {
        "alias bomb": _bomb(),
        "block nesting": _deep(),
        "recursive alias": "a: &a [*a]\n",
        "huge integer": "x: " + "9" * 5000 + "\n",
    }[kind]
    path = tmp_path / YAML_READERS[framework]
    path.write_text(text)
    with within(20), pytest.raises(ConfigImportError) as err:
        import_config(path, framework)
    assert str(path) in str(err.value)
    expect = {
        "alias bomb": "alias bomb",
        "block nesting": "nested too deeply",
        "recursive alias": "",
        "huge integer": "number",
    }[kind]
    assert expect in str(err.value)


def test_an_alias_bomb_in_an_override_line_is_a_clear_error(tmp_path):
    path = tmp_path / "run.txt"
    # quoted as a launch line must be (a shell splits an unquoted value at its spaces)
    path.write_text("'x=[" + ", ".join(["[1,2,3,4,5,6,7,8,9]"] * 3) + "]'\ndata.train_batch_size=" + "9" * 5000 + "\n")
    with within(20), pytest.raises(ConfigImportError, match="number|digits"):
        import_config(path, "verl")


@pytest.mark.parametrize("text", ['{"learning_rate": ' + "9" * 5000 + "}", '{"output_dir": "\\ud800"}'])
def test_json_numbers_and_surrogates_are_clear_errors(text, tmp_path):
    path = tmp_path / "a.json"
    path.write_text(text)
    with pytest.raises(ConfigImportError, match="digits|number|surrogate"):
        import_config(path, "trl")


HOSTILE = {"1e400": math.inf, "-1e400": -math.inf, "nan": math.nan, "16 digits": 10**16, "lone surrogate": "\ud800"}


@pytest.mark.parametrize("framework", list(FILES))
def test_every_key_of_every_importer_takes_hostile_numbers_cleanly(framework):
    """Each key of the shipped example configs set to each hostile value, through the whole import
    (mapping, building and validating the scenario, writing scenario.toml and IMPORT.md as UTF-8):
    a ConfigImportError or a ScenarioError, never another exception."""
    imp = IMPORTERS[framework]
    tracebacks = []
    for name in FILES[framework]:
        base = imp.read(str(DATA / name))
        for key in base.values:
            for label, value in HOSTILE.items():
                try:
                    s = type(base)(base.path)
                    for k in base.values:
                        s.add(k, value if k == key else base.values[k], base.where[k])
                    m = Mapper(s, framework)
                    imp.map(m)
                    m.finish()
                    done = build(framework, name, m.rows, m.fields, "bitstring", None)
                    done.toml.encode("utf-8")
                    render_import_md(done, imp.title).encode("utf-8")
                except (ConfigImportError, ScenarioError):
                    pass
                except Exception as exc:  # noqa: BLE001 - what the test counts
                    tracebacks.append(f"{name}: {key} = {label}: {type(exc).__name__}: {exc}"[:200])
    assert not tracebacks, "\n".join(tracebacks[:20])


@pytest.mark.parametrize("value", ["nan", '"fast"', "-1.0e-6", "0"])
def test_a_learning_rate_that_is_not_one_is_refused(value, tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text(
        (DATA / "trl_grpo_gsm8k.yaml").read_text() + f"learning_rate: {value}\n"
        if "learning_rate" not in (DATA / "trl_grpo_gsm8k.yaml").read_text()
        else "\n".join(
            f"learning_rate: {value}" if ln.startswith("learning_rate:") else ln
            for ln in (DATA / "trl_grpo_gsm8k.yaml").read_text().splitlines()
        )
        + "\n"
    )
    with pytest.raises(ConfigImportError, match="learning_rate.*positive finite learning rate"):
        import_config(path, "trl")


# ------------------------------------------------------------------------------------------------
# sizes that would build lists: GPU counts, grids, workers, seeds
# ------------------------------------------------------------------------------------------------


def test_huge_gpu_counts_are_refused_before_a_list_is_built(tmp_path):
    from sandbox.plan.split import MAX_GPUS
    from sandbox.preflight.system import SystemPlanError, cluster_facts

    imp = import_config(DATA / "verl_gsm8k_async.yaml", "verl")
    with within(20), pytest.raises(SystemPlanError, match="--gpus.*at most"):
        cluster_facts(imp.rows, "verl", {"gpus": 10**12}, None)
    with within(20), pytest.raises(SystemPlanError, match="cluster.trainer_gpus.*at most"):
        cluster_facts(imp.rows, "verl", {}, {"trainer_gpus": 10**9, "rollout_gpus": 8})
    text = (DATA / "verl_gsm8k_async.yaml").read_text()
    path = tmp_path / "v.yaml"
    path.write_text(
        text.replace("nnodes: 1", "nnodes: 100000").replace("n_gpus_per_node: 8", "n_gpus_per_node: 100000")
    )
    rows = import_config(path, "verl").rows  # 1e10 GPUs: nnodes x n_gpus_per_node
    with within(20), pytest.raises(SystemPlanError, match=f"at most {MAX_GPUS:,}"):
        cluster_facts(rows, "verl", {}, None)


def test_an_areal_allocation_of_a_billion_gpus_is_refused(tmp_path):
    from sandbox.preflight.system import SystemPlanError, cluster_facts

    path = tmp_path / "a.yaml"
    path.write_text(
        (DATA / "areal_gsm8k_grpo.yaml").read_text().replace("sglang.d4p1t1+d4p1t1", "sglang.d999999999p1t1+d4p1t1")
    )
    imp = import_config(path, "areal")
    with within(20), pytest.raises(SystemPlanError, match="allocation_mode.*at most"):
        cluster_facts(imp.rows, "areal", {}, None)


def test_plan_gpus_of_a_trillion_is_refused():
    res = CliRunner().invoke(app, ["plan", "--gpus", str(10**12), "-q"])
    assert res.exit_code == 2 and "--gpus" in res.output and "at most" in res.output, res.output


@pytest.mark.parametrize(
    "args, option",
    [
        (["run", "--set", "system.num_workers=1000000000", "-q"], "num_workers"),
        (["claims", "--seeds", "1000000000", "--quick"], "--seeds"),
        (["plan", "--workers", "1000000000", "-q"], "--workers"),
        (["run", "--out", "", "-q"], "--out"),
    ],
)
def test_absurd_sizes_and_an_empty_out_are_refused_at_once(args, option, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with within(60):
        res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert option in res.output and "Traceback" not in res.output
    assert not any(tmp_path.iterdir())  # nothing written


def test_default_import_folders_of_odd_names_are_distinct(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = (DATA / "trl_grpo_gsm8k.yaml").read_text()
    for name in ("..yaml", "名前.yaml", "~.yaml", "plain.yaml"):
        (tmp_path / name).write_text(source)
        res = CliRunner().invoke(app, ["import", name, "-f", "trl"])
        assert res.exit_code == 0, res.output
    made = sorted(p.name for p in (tmp_path / "imported").iterdir())
    assert len(made) == 4 and "plain-trl" in made, made
