"""The learner step's per-run plan (``trainer._StepPlan``), its one-replica rows written as Python floats
(``ReplicaColumns.append_values``) and the Adam argument lists reused between steps (``optim._adam_calls``):
each shortcut gives the numbers of the path it replaces to the bit, stands down when a function it specialises
is replaced, and a planted bug in a function it calls still changes the run's output."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sandbox.learner.diagnostics as dg
import sandbox.learner.optim as optim
import sandbox.learner.trainer as trainer
import sandbox.system.records as records
from sandbox.learner.metric_levels import MetricSet
from sandbox.learner.optim import OptimizerConfig, build_optimizer
from sandbox.run.runner import prepare_run
from sandbox.scenario.api import validate_scenario
from sandbox.system.records import ReplicaColumns

STEPS = 24


def bandit(metrics: str = "lean", replicas: int = 1):
    return validate_scenario(
        {
            "task": {"name": "bandit", "num_arms": 6, "replicas": replicas},
            "system": {"num_workers": 3, "staleness": {"kind": "max_lag", "k_max": 2}},
            "algorithm": {
                "group_size": 4,
                "groups_per_step": 2,
                "objective": {"name": "reinforce", "baseline": "group_mean"},
            },
            "run": {"steps": STEPS, "seed": 4, "figures": False, "metrics": metrics, "eval_every": 5},
        }
    )


def _run(scn=None):
    """(the rows, the per-replica columns, the final weights, the learner) of a run of ``scn``."""
    _, learner, cluster = prepare_run(scn or bandit())
    res = cluster.run(STEPS)
    return list(res.rows), learner.replica_rows.arrays(), learner.params["logits"].detach().clone(), learner


def _bits(rows) -> list[tuple[str, bytes]]:
    return [(k, np.float64(v).tobytes()) for r in rows for k, v in r.items()]


def _same(a, b) -> bool:
    rows_a, cols_a, w_a, _ = a
    rows_b, cols_b, w_b, _ = b
    return (
        _bits(rows_a) == _bits(rows_b)
        and list(cols_a) == list(cols_b)
        and all(cols_a[k].tobytes() == cols_b[k].tobytes() for k in cols_a)
        and w_a.numpy().tobytes() == w_b.numpy().tobytes()
    )


@pytest.fixture(scope="module")
def reference():
    out = _run()
    plan = out[3]._plan
    assert plan.views and plan.one_row and plan.lean_plain  # the run the shortcuts are for
    return out


def test_a_replaced_flat_view_turns_the_views_off_and_is_called(monkeypatch, reference):
    calls = []

    def flat_view(tensors, replicas):
        calls.append(1)
        return trainer._FLAT_VIEW(tensors, replicas)

    monkeypatch.setattr(dg, "flat_view", flat_view)
    out = _run()
    assert not out[3]._plan.views and len(calls) >= 2 * STEPS  # the gradient's and the weights' norm, every step
    assert _same(out, reference)  # the general path: the same numbers
    monkeypatch.setattr(dg, "flat_view", lambda tensors, replicas: trainer._FLAT_VIEW(tensors, replicas) * 2.0)
    assert not _same(_run(), reference)  # a planted bug in it shows


def test_a_planted_bug_in_row_norms_shows(monkeypatch, reference):
    monkeypatch.setattr(dg, "row_norms", lambda x: torch.linalg.vector_norm(x, 1, 1))
    out = _run()
    assert out[3]._plan.views
    assert not _same(out, reference)


@pytest.mark.parametrize(
    "owner, name",
    [
        (trainer, "_metrics_to_numpy"),
        (trainer, "_one_replica_row"),
        (records.ReplicaColumns, "append"),
        (records.ReplicaColumns, "put"),
    ],
)
def test_the_float_rows_stand_down_when_a_row_function_is_replaced(monkeypatch, reference, owner, name):
    original = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *a, **kw: original(*a, **kw))  # the same body, another function
    out = _run()
    assert not out[3]._plan.one_row
    assert _same(out, reference)


def test_a_planted_bug_in_the_row_functions_shows(monkeypatch, reference):
    original = trainer._metrics_to_numpy

    def halved_loss(metrics, replicas, alive):
        arrays, row = original(metrics, replicas, alive)
        row["loss"] = row["loss"] / 2
        return arrays, row

    monkeypatch.setattr(trainer, "_metrics_to_numpy", halved_loss)
    assert not _same(_run(), reference)
    monkeypatch.undo()
    put = ReplicaColumns.put
    monkeypatch.setattr(ReplicaColumns, "put", lambda self, i, values: put(self, i, {**values, "loss": 0.0}))
    assert not _same(_run(), reference)


def test_the_plan_follows_a_replaced_metric_set_and_plain_flag():
    _, learner, cluster = prepare_run(bandit())
    plans, train = [], learner.train

    def switching(step, jobs, now):
        if step == 3:
            learner.monitors = MetricSet("full")
        if step == 6:
            learner._plain = False
        out = train(step, jobs, now)
        plans.append(learner._plan)
        return out

    learner.train = switching
    rows = list(cluster.run(9).rows)
    lean, full, wrapped = plans[0], plans[3], plans[6]
    assert plans[:3] == [lean] * 3 and plans[3:6] == [full] * 3 and plans[6:] == [wrapped] * 3
    assert lean.lean_plain and not lean.cos_prev and not lean.update
    assert full.cos_prev and full.update_norm and full.update_cos_grad and not full.lean_plain and full.plain
    assert not wrapped.plain
    assert "grad/cos_prev" not in rows[2] and "update/cos_grad" in rows[3] and "grad/norm_clipped" in rows[5]


def _run_replacing_gradients(views: bool):
    """A lean run whose parameter's gradient is replaced by a new tensor before step 3 and by a non-contiguous
    one before step 6 (the backward accumulates into each); ``views``: the plan keeps its views."""
    _, learner, cluster = prepare_run(bandit())
    train, kept = learner.train, []

    def replacing(step, jobs, now):
        p = learner.plist[0]
        if step == 3:
            p.grad = torch.zeros_like(p)
        if step == 6:
            p.grad = torch.zeros(p.shape[0], 2 * p.shape[1])[:, ::2]
            assert not p.grad.is_contiguous()
        out = train(step, jobs, now)
        kept.append(learner._grad_rows is not None)
        return out

    learner.train = replacing
    with pytest.MonkeyPatch.context() as mp:
        if not views:
            mp.setattr(dg, "flat_view", lambda tensors, replicas: trainer._FLAT_VIEW(tensors, replicas))
        rows = list(cluster.run(9).rows)
    assert learner._plan.views == views
    return rows, learner.params["logits"].detach().clone(), kept


@pytest.mark.filterwarnings("ignore:grad and param do not obey the gradient layout contract")
def test_the_gradient_view_follows_a_replaced_gradient():
    rows, weights, kept = _run_replacing_gradients(True)
    general_rows, general_weights, _ = _run_replacing_gradients(False)
    assert kept == [True] * 6 + [False] * 3  # a non-contiguous gradient's flat_view is a copy: not kept
    assert _bits(rows) == _bits(general_rows) and torch.equal(weights, general_weights)
    # a view of a replaced gradient would repeat the norm of the step before the replacement
    assert all(rows[k]["grad/norm"] != rows[k - 1]["grad/norm"] for k in (3, 6))


def test_the_stabilizers_step_in_the_caller_s_grad_mode_and_it_is_restored():
    _, learner, cluster = prepare_run(bandit())
    learner._plain = False
    modes, step = [], learner.stabilized.step

    def recording(context=None):
        modes.append(torch.is_grad_enabled())
        if len(modes) == 3:
            raise RuntimeError("planted")
        return step(context)

    learner.stabilized.step = recording
    with pytest.raises(RuntimeError, match="planted"):
        cluster.run(5)
    assert modes == [True, True, True] and torch.is_grad_enabled()


def test_a_standard_run_is_unchanged_by_the_plan():
    """At ``standard`` (the plain wrapper's metrics, the row through numpy) and with two replicas (no float
    rows) the plan only answers ``wants``: the run with the views off is the same to the bit."""
    for scn in (bandit("standard"), bandit("lean", replicas=2)):
        fast = _run(scn)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(dg, "flat_view", lambda tensors, replicas: trainer._FLAT_VIEW(tensors, replicas))
            general = _run(scn)
        assert _same(fast, general)


@pytest.mark.parametrize("replicas", [1, 3])
def test_append_values_is_append(replicas):
    """Rows of Python floats (NaN, ±inf, -0.0, a row with other metrics, growth past the capacity) give the
    columns, presence flags and reads that appending their ``(R,)`` arrays gives."""
    rng = np.random.default_rng(0)
    special = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-310]
    fast, slow = ReplicaColumns(replicas, capacity=2), ReplicaColumns(replicas, capacity=2)
    for i in range(11):
        keys = ("loss", "grad/norm", "lr") if i % 3 else ("loss", "eval/reward", "grad/norm", "lr")
        values = [float(rng.normal()) if rng.random() < 0.6 else special[rng.integers(len(special))] for _ in keys]
        fast.append_values(keys, values)
        slow.append({k: np.full(replicas, x) for k, x in zip(keys, values)})
    assert len(fast) == len(slow) == 11 and fast.nbytes() == slow.nbytes()
    a, b = fast.arrays(), slow.arrays()
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k
    for ra, rb in zip(fast, slow):
        assert list(ra) == list(rb)
        assert all(ra[k].tobytes() == rb[k].tobytes() for k in ra)


def _adam_run(fast: bool, counted: list | None = None) -> list[torch.Tensor]:
    """Adam on two parameters: gradients zeroed in place (the lists reused), then replaced (``w.grad = None``),
    one parameter without a gradient for two steps, and the optimizer reloaded from its state dict."""
    w = torch.tensor([[0.3, -1.2, 2.0, 0.5]], requires_grad=True)
    v = torch.tensor([[1.5, -0.25]], requires_grad=True)
    opt = build_optimizer(OptimizerConfig(name="adam", lr=0.1, weight_decay=0.01), [w, v])
    adam = optim._single_tensor_adam_step(opt)
    for k in range(12):
        if k == 4:
            w.grad = None
        if k in (6, 7):
            v.grad = None
        for p in (w, v):
            if p.grad is not None:
                p.grad.zero_()
        loss = ((w - k) ** 3).sum() + (0.0 if k in (6, 7) else (v * v).sum())
        loss.backward()
        if k == 9:
            opt.load_state_dict(opt.state_dict())
        with torch.no_grad():
            if not fast or not adam():
                assert not fast or k == 0  # only the first step, which creates the state
                opt.step()
    return [w.detach(), v.detach(), *(opt.state[p][s] for p in (w, v) for s in ("exp_avg", "exp_avg_sq", "step"))]


def test_the_reused_adam_lists_give_adam_step_to_the_bit(monkeypatch):
    built = []
    make = optim._adam_calls
    monkeypatch.setattr(optim, "_adam_calls", lambda groups, state: built.append(1) or make(groups, state))
    fast, slow = _adam_run(True), _adam_run(False)
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and a.numpy().tobytes() == b.numpy().tobytes()
    # tried at k = 0 (no state yet: the full step), built at k = 1, after w.grad was replaced (4), after v's
    # gradient went (6) and came back (8), and after the reload (9): reused at the six other steps
    assert len(built) == 6
