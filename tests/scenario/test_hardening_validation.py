"""Issue 12, bugs 1, 2, 3, 5, 7 and 8: inputs that used to pass validation and then crash, hang or
never make progress are refused when the scenario is loaded, with the field's dotted path; the
simulator turns what can only be seen at run time into the same kind of error."""

from __future__ import annotations

import math
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from sandbox.base.registry import LazyUnion
from sandbox.cli import app
from sandbox.scenario.api import Scenario, ScenarioError, load_scenario, validate_scenario
from sandbox.system.cluster import SimulationError
from sandbox.system.config import SystemConfig
from sandbox.system.delays import ConstantDelay
from sandbox.system.timing_only import simulate_timing

INF, NAN = math.inf, math.nan


def problems(data: dict) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        validate_scenario(data)
    return info.value.problems


def assert_named(data: dict, path: str, expected: str) -> None:
    msgs = problems(data)
    assert any(m.startswith(f"{path}:") and expected in m for m in msgs), msgs


def cli_error(tmp_path, *sets: str) -> str:
    """``sandbox run --set ...`` fails with exit status 2, one ``error:`` and no traceback."""
    args = ["run", "--out", str(tmp_path / "out"), "-q"]
    for s in sets:
        args += ["--set", s]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and "error:" in result.output, result.output
    return result.output


# -- bug 1: async_ratio alpha = inf ------------------------------------------------------------


def test_async_ratio_alpha_must_be_finite():
    for alpha in (INF, NAN):
        assert_named(
            {"system": {"staleness": {"kind": "async_ratio", "alpha": alpha}}},
            "system.staleness.alpha",
            "must be finite",
        )
    assert_named(
        {"system": {"staleness": {"kind": "async_ratio", "alpha": 1e7}}},
        "system.staleness.alpha",
        "less than or equal to",
    )
    # A large finite ratio is the way to say "unbounded": it runs.
    cfg = SystemConfig(
        num_workers=2,
        staleness={"kind": "async_ratio", "alpha": 1e6},
        generation_time={"kind": "constant", "value": 1.0},
    )
    assert simulate_timing(cfg, 3, 2).steps_done == 3


def test_cli_async_ratio_alpha_inf(tmp_path):
    out = cli_error(tmp_path, 'system.staleness={kind="async_ratio",alpha=inf}', "run.steps=3")
    assert "system.staleness.alpha" in out and "finite" in out


# -- bug 2: configurations that can never complete a learner step ------------------------------


def test_queue_capacity_below_the_batch_is_refused():
    drop = {"kind": "max_lag", "k_max": 0, "enforcement": "drop", "queue_capacity": 1}
    msgs = problems({"system": {"staleness": drop}, "algorithm": {"groups_per_step": 4}})
    assert any(
        m.startswith("system.staleness.queue_capacity:") and "groups_per_step" in m and "never" in m for m in msgs
    ), msgs
    validate_scenario({"system": {"staleness": {**drop, "queue_capacity": 4}}, "algorithm": {"groups_per_step": 4}})


def test_cli_max_lag_drop_that_cannot_fill_a_batch(tmp_path):
    out = cli_error(
        tmp_path, 'system.staleness={kind="max_lag",k_max=0,enforcement="drop",queue_capacity=1}', "run.steps=3"
    )
    assert "system.staleness.queue_capacity" in out


def test_a_stuck_simulation_is_an_error_naming_the_cause():
    """Safety net below the load-time check: simpy's 'No scheduled events left' becomes a
    SimulationError (a ScenarioError) that says which step waits for what."""
    cfg = SystemConfig(staleness={"kind": "max_lag", "k_max": 0, "enforcement": "drop", "queue_capacity": 1})
    with pytest.raises(SimulationError) as info:
        simulate_timing(cfg, 3, 4)
    msg = str(info.value)
    assert isinstance(info.value, ScenarioError)
    assert "system.staleness" in msg and "no progress" in msg and "queue_capacity" in msg


def test_cli_reports_a_stuck_simulation_without_traceback(tmp_path, monkeypatch):
    from sandbox.system import staleness

    monkeypatch.setattr(staleness.SyncControl, "admit", lambda self, visible, buffer_len: None)
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--out",
            str(tmp_path / "out"),
            "-q",
            "--set",
            "run.steps=2",
            "--set",
            "variants={}",
            "--set",
            "run.figures=false",
        ],
    )
    assert result.exit_code == 2, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and "no progress" in result.output


# -- bug 3: infinite or overflowing durations --------------------------------------------------


@pytest.mark.parametrize(
    "field, delay, path",
    [
        ("generation_time", {"kind": "constant", "value": INF}, "system.generation_time.value"),
        ("generation_time", {"kind": "exponential", "mean": INF}, "system.generation_time.mean"),
        ("sync_delay", {"kind": "uniform", "low": 0.0, "high": NAN}, "system.sync_delay.high"),
        ("generation_time", {"kind": "empirical", "values": [1.0, INF]}, "system.generation_time.values[1]"),
    ],
)
def test_non_finite_delay_parameters(field, delay, path):
    assert_named({"system": {field: delay}}, path, "finite")


@pytest.mark.parametrize(
    "field, delay",
    [
        ("train_time", {"kind": "lognormal", "median": 1.0, "sigma": 1e6}),
        ("train_time", {"kind": "lognormal", "median": 1.0, "sigma": 8.0}),
        ("generation_time", {"kind": "gamma", "shape": 1e200, "scale": 1e200}),
        ("generation_time", {"kind": "exponential", "mean": 1e300}),
        ("generation_time", {"kind": "cost_model", "prefill": 0.0, "per_token": 0.0, "jitter": 100.0}),
    ],
)
def test_delays_whose_mean_overflows_are_refused(field, delay):
    assert_named({"system": {field: delay}}, f"system.{field}", "mean duration")


def test_cli_infinite_durations(tmp_path):
    for s, path in [
        ('system.generation_time={kind="constant",value=inf}', "system.generation_time.value"),
        ('system.generation_time={kind="exponential",mean=inf}', "system.generation_time.mean"),
        ('system.train_time={kind="lognormal",median=1.0,sigma=1e6}', "system.train_time"),
    ]:
        out = cli_error(tmp_path, s, "run.steps=3")
        assert path in out, out


def test_a_non_finite_draw_is_an_error_naming_the_field():
    cfg = SystemConfig(num_workers=2)
    cfg.train_time = ConstantDelay.model_construct(value=INF)  # past validation, as a custom delay could be
    with pytest.raises(SimulationError, match=r"system\.train_time: drew a duration of inf"):
        simulate_timing(cfg, 3, 2)


# -- bug 5: Pareto with an infinite mean --------------------------------------------------------


def test_pareto_needs_alpha_above_one():
    for alpha in (0.5, 1.0):
        assert_named(
            {"system": {"generation_time": {"kind": "pareto", "alpha": alpha}}},
            "system.generation_time.alpha",
            "infinite mean",
        )
        assert_named(
            {"system": {"train_time": {"kind": "pareto", "alpha": alpha}}}, "system.train_time.alpha", "alpha > 1"
        )
    validate_scenario({"system": {"generation_time": {"kind": "pareto", "alpha": 1.2, "scale": 0.5}}})


# -- bug 7: inf / nan / out-of-range values -----------------------------------------------------


@pytest.mark.parametrize(
    "data, path, expected",
    [
        ({"algorithm": {"optimizer": {"lr": INF}}}, "algorithm.optimizer.lr", "finite"),
        ({"algorithm": {"optimizer": {"betas": [0.9, NAN]}}}, "algorithm.optimizer.betas[1]", "finite"),
        ({"algorithm": {"correction": {"name": "tis", "C": INF}}}, "algorithm.correction.C", "finite"),
        ({"task": {"name": "bitstring", "init_logit": NAN}}, "task.init_logit", "finite"),
        # found by the fuzz test: float32 max passed validation and overflowed torch.full mid-run
        (
            {"task": {"name": "bitstring", "init_logit": 3.402823466385289e38}},
            "task.init_logit",
            "less than or equal to 50",
        ),
        ({"task": {"name": "bitstring", "init_logit_std": 1e300}}, "task.init_logit_std", "less than or equal to 50"),
        ({"task": {"name": "bandit", "init_logit_std": 1e300}}, "task.init_logit_std", "less than or equal to 50"),
        ({"task": {"name": "quadratic", "x0": NAN}, "algorithm": {"group_size": 1}}, "task.x0", "finite"),
        ({"system": {"num_workers": 1, "worker_speeds": [INF]}}, "system.worker_speeds[0]", "finite"),
        ({"system": {"num_workers": 1, "worker_speeds": [1e-300]}}, "system", "worker_speeds must all be >= 1e-06"),
        ({"run": {"max_loss": INF}}, "run.max_loss", "finite"),
        ({"run": {"seed": 2**64}}, "run.seed", "less than or equal to"),
        ({"run": {"system_seed": 2**70}}, "run.system_seed", "less than or equal to"),
        ({"run": {"threads": 10**6}}, "run.threads", "less than or equal to 256"),
        (
            {"algorithm": {"objective": {"name": "grpo", "eps_high": NAN}}},
            "algorithm.objective.eps_high",
            "greater than or equal to 0",
        ),
        (
            {"algorithm": {"stabilizers": [{"name": "gac"}, {"name": "gac", "c_thr": 0.5}]}},
            "algorithm.stabilizers",
            "second 'gac'",
        ),
    ],
)
def test_non_finite_and_out_of_range_values(data, path, expected):
    assert_named(data, path, expected)


def test_largest_seed_and_distinct_stabilizers_are_fine():
    scn = validate_scenario(
        {
            "run": {"seed": 2**63 - 1, "init_seed": 2**63 - 1},
            "algorithm": {"stabilizers": [{"name": "gac"}, {"name": "vcpo_lr"}]},
        }
    )
    assert set(scn.run.seeds()) == {"system", "sampling", "init"}


def test_eps_high_inf_still_means_no_upper_clip():
    """The one documented use of inf (prime-rl's unclipped ratio, sandbox/frameworks/prime_rl/export.py)."""
    scn = validate_scenario({"algorithm": {"objective": {"name": "grpo", "eps_low": 1.0, "eps_high": INF}}})
    assert scn.algorithm.objective.eps_high == INF


def _models(tp, seen: set) -> None:
    if isinstance(tp, LazyUnion):  # a registry's union (sandbox.base.registry), resolved
        tp = tp.resolve()
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp in seen:
            return
        seen.add(tp)
        for f in tp.model_fields.values():
            _models(f.annotation, seen)
            for m in f.metadata:
                _models(m, seen)
        return
    for arg in typing.get_args(tp):
        _models(arg, seen)


def test_every_scenario_model_forbids_inf_and_nan():
    """One mechanism for the whole tree: each model sets allow_inf_nan=False; only the documented
    upper clips (eps_high) opt back in to inf."""
    seen: set = set()
    _models(Scenario, seen)
    assert len(seen) > 30
    for model in seen:
        assert model.model_config.get("allow_inf_nan") is False, model.__name__
        for name, f in model.model_fields.items():
            if any(getattr(m, "allow_inf_nan", False) for m in f.metadata):
                assert name == "eps_high", (model.__name__, name)


# -- bug 8: strict types -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, path, expected",
    [
        ({"system": {"staleness": {"kind": "fixed_lag", "k": "16"}}}, "system.staleness.k", "valid integer"),
        ({"system": {"num_workers": 4.0}}, "system.num_workers", "valid integer"),
        ({"run": {"steps": True}}, "run.steps", "valid integer"),
        ({"algorithm": {"optimizer": {"lr": "0.1"}}}, "algorithm.optimizer.lr", "valid number"),
        ({"run": {"figures": 1}}, "run.figures", "valid boolean"),
    ],
)
def test_types_are_strict(data, path, expected):
    assert_named(data, path, expected)


def test_toml_ints_for_floats_and_set_values_are_typed(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[algorithm.optimizer]\nlr = 1\nbetas = [0, 0.5]\n[system.staleness]\nkind = "fixed_lag"\nk = 16\n')
    scn, _ = load_scenario(
        f, ["system.num_workers=16", 'system.generation_time.kind="constant"', "system.generation_time.value=2"]
    )
    assert scn.algorithm.optimizer.lr == 1.0 and scn.algorithm.optimizer.betas == (0.0, 0.5)
    assert scn.system.staleness.k == 16 and scn.system.num_workers == 16 and scn.system.generation_time.value == 2.0
    f.write_text('[system.staleness]\nkind = "fixed_lag"\nk = "16"\n')
    with pytest.raises(ScenarioError, match=r"system\.staleness\.k: Input should be a valid integer"):
        load_scenario(f)


def test_kl_to_a_reference_policy_is_refused_before_a_run(tmp_path):
    """Found by the fuzz test: beta_kl > 0 validated (it is exportable), then crashed mid-run with a
    KeyError because no task supplies reference log-probs. Now a clear error before simulating."""
    from typer.testing import CliRunner

    from sandbox.cli import app
    from sandbox.run.runner import run_scenario
    from sandbox.scenario.api import ScenarioError, load_scenario

    scn, _ = load_scenario(
        Path(__file__).resolve().parents[2] / "scenarios" / "sync.toml",
        ["algorithm.objective.beta_kl=0.1", "run.steps=2"],
    )
    with pytest.raises(ScenarioError, match="algorithm.objective.beta_kl: no task of the simulator supplies"):
        run_scenario(scn, None)
    res = CliRunner().invoke(
        app,
        [
            "run",
            str(Path(__file__).resolve().parents[2] / "scenarios" / "sync.toml"),
            "--set",
            "algorithm.objective.beta_kl=0.1",
            "--set",
            "run.steps=2",
            "--out",
            str(tmp_path / "o"),
            "-q",
        ],
    )
    assert res.exit_code == 2 and "beta_kl" in res.output and "Traceback" not in res.output


def test_a_learning_rate_beyond_float32_is_refused_and_the_largest_one_diverges_as_a_result(tmp_path):
    """SGD with lr = 1e308 crashed mid-run (torch cannot apply a rate float32 cannot hold); it is refused at
    load time, and the largest accepted rate gives a diverged run (a result with status, not a crash)."""
    import json

    base = {"task": {"name": "bitstring", "horizon": 4}, "run": {"steps": 8, "figures": False}}
    assert_named(
        {**base, "algorithm": {"optimizer": {"name": "sgd", "lr": 1e308}}},
        "algorithm.optimizer.lr",
        "less than or equal to",
    )
    res = CliRunner().invoke(
        app,
        [
            "run",
            "--out",
            str(tmp_path / "run"),
            "-q",
            "--set",
            "task.horizon=4",
            "--set",
            "run.steps=8",
            "--set",
            "run.figures=false",
            "--set",
            'algorithm.optimizer={name = "sgd", lr = 3e38}',
        ],
    )
    assert res.exit_code == 0, res.output
    statuses = {p.parent.name: json.loads(p.read_text())["status"] for p in (tmp_path / "run").rglob("summary.json")}
    assert statuses and set(statuses.values()) == {"diverged"}, statuses


@pytest.mark.parametrize(
    "override, field, expected",
    [
        ({"vocab_size": 5}, "task.model.vocab_size", "smaller than the task's tokenizer"),
        ({"max_seq_len": 4}, "task.model.max_seq_len", "shorter than a prompt plus its longest response"),
    ],
)
def test_an_lm_too_small_for_its_task_is_refused_at_load_time(override, field, expected):
    """Once a ValueError traceback at run start; now a load-time problem naming the field."""
    assert_named({"task": {"name": "lm", "model": {"backend": "builtin", **override}}}, field, expected)


def test_an_lm_temperature_that_would_overflow_is_refused():
    assert_named({"task": {"name": "lm", "temperature": 1e-300}}, "task.temperature", "greater than or equal to")


@pytest.mark.skipif(__import__("torch").cuda.device_count() >= 8, reason="needs a machine without a cuda:7")
def test_a_missing_cuda_device_is_a_clear_error_at_run_start(tmp_path):
    """``task.device = "cuda:7"`` cannot be judged at load time (the scenario may be written on another
    machine); the run refuses it naming the field, exit status 2, no traceback."""
    res = CliRunner().invoke(
        app,
        [
            "run",
            str(Path(__file__).resolve().parents[2] / "scenarios" / "lm_mission.toml"),
            "--out",
            str(tmp_path / "o"),
            "-q",
            "--set",
            'task.device="cuda:7"',
            "--set",
            "run.steps=2",
            "--set",
            "task.warmstart.enabled=false",
        ],
    )
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "task.device: 'cuda:7'" in text and "Traceback" not in text, res.output
