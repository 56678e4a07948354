"""Each staleness control on a hand-worked sequence of the calls the cluster makes (admit, dispatch,
finish, take, publish), with no simulation: which version each job gets, which jobs a step takes
and which it drops (``docs/system.md#<kind>``). Also: the cluster only talks to the control through
that protocol and never assigns its state."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sandbox.system import cluster as cluster_module
from sandbox.system.cluster import Job, PartialPayload, Payload
from sandbox.system.staleness import (
    CONTROLS,
    AsyncRatioControlConfig,
    Control,
    FixedLagControlConfig,
    MaxLagControlConfig,
    SyncControlConfig,
    Take,
    make_control,
)

CLUSTER_SOURCE = Path(cluster_module.__file__).read_text()


class Harness:
    """Plays the cluster's side: dispatch what the control admits, finish jobs into the buffer."""

    def __init__(self, cfg, B):
        self.control = make_control(cfg, B)
        self.buffer: list[Job] = []
        self.jobs: list[Job] = []

    def dispatch(self, visible: int) -> Job | None:
        adm = self.control.admit(visible, len(self.buffer))
        if adm is None:
            return None
        job = Job(id=len(self.jobs), worker=0, head_version=adm.version, dispatch_time=0.0, target_step=adm.target_step)
        self.control.on_dispatch(job)
        self.jobs.append(job)
        return job

    def dispatch_all(self, visible: int) -> list[Job]:
        out = []
        while (job := self.dispatch(visible)) is not None:
            out.append(job)
        return out

    def finish(self, *jobs: Job) -> None:
        for job in jobs:
            self.control.on_finish(job)
            self.buffer.append(job)

    def take(self, step: int) -> Take:
        return self.control.take(step, self.buffer)


def job(id, head, target=None):
    return Job(id=id, worker=0, head_version=head, dispatch_time=0.0, target_step=target)


@pytest.mark.component("staleness", "sync")
def test_sync_admits_one_batch_of_the_newest_version():
    h = Harness(SyncControlConfig(), B=2)
    first = h.dispatch_all(visible=0)
    assert [j.head_version for j in first] == [0, 0]  # B groups, then wait
    h.finish(first[0])
    assert h.take(0).batch is None  # the learner waits for every group
    h.finish(first[1])
    taken = h.take(0)
    assert taken.batch == first and taken.dropped == [] and h.buffer == []
    assert h.control.consumed == 2 and h.control.running == 0
    assert h.dispatch(visible=0) is None  # version 0 is done; version 1 not published
    h.control.on_publish(1)
    assert h.dispatch(visible=0) is None  # published but not yet visible
    assert [j.head_version for j in h.dispatch_all(visible=1)] == [1, 1]


@pytest.mark.component("staleness", "fixed_lag")
def test_fixed_lag_destines_each_job_to_a_step_and_version():
    h = Harness(FixedLagControlConfig(k=1), B=2)
    first = h.dispatch_all(visible=0)
    # steps 0 and 1 both use version max(0, t − 1) = 0; step 2 needs version 1: wait
    assert [(j.head_version, j.target_step) for j in first] == [(0, 0), (0, 0), (0, 1), (0, 1)]
    assert h.control.oldest_needed_version(visible=5) == 1  # the next job needs version 1
    h.finish(first[2], first[0], first[3])
    assert h.take(0).batch is None  # only one job destined for step 0
    h.finish(first[1])
    assert h.take(0).batch == [first[0], first[1]]  # step 0 takes exactly its jobs, not completion order
    assert h.buffer == [first[2], first[3]]
    assert [(j.head_version, j.target_step) for j in h.dispatch_all(visible=1)] == [(1, 2), (1, 2)]


@pytest.mark.component("staleness", "max_lag")
def test_max_lag_throttles_admission_and_drops_over_the_bound():
    h = Harness(MaxLagControlConfig(k_max=1), B=2)
    assert len(h.dispatch_all(visible=0)) == 4  # (k_max + v + 1)·B = 4 in flight at v = 0
    h.finish(*h.jobs)
    h.take(0)
    assert len(h.dispatch_all(visible=0)) == 0  # consumed groups still count
    assert len(h.dispatch_all(visible=1)) == 2  # (1 + 1 + 1)·2 = 6

    ctl = make_control(MaxLagControlConfig(k_max=1, enforcement="drop"), 2)
    buffer = [job(0, 0), job(1, 1), job(2, 1), job(3, 2)]
    taken = ctl.take(2, buffer)  # lag 2 − 0 > 1: job 0 is dropped
    assert [j.id for j in taken.dropped] == [0] and [j.id for j in taken.batch] == [1, 2]
    assert buffer == [job(3, 2)] and ctl.dropped == 1 and ctl.consumed == 2
    assert ctl.capacity == 4 and "queue capacity 4" in ctl.stuck_reason()


@pytest.mark.component("staleness", "async_ratio")
def test_async_ratio_window_and_oldest_version_quota():
    h = Harness(AsyncRatioControlConfig(alpha=1.5), B=4)
    assert len(h.dispatch_all(visible=0)) == 10  # floor((0 + 1 + 1.5)·4) = 10
    ctl = make_control(AsyncRatioControlConfig(alpha=1.5), 4)
    # step 3: window ceil(1.5) = 2, so the oldest admissible version is 1, and at most
    # round(0.5·4) = 2 groups may come from it
    buffer = [job(0, 0), job(1, 1), job(2, 1), job(3, 1), job(4, 2), job(5, 3), job(6, 2)]
    taken = ctl.take(3, buffer)
    assert [j.id for j in taken.dropped] == [0, 3]
    assert [j.id for j in taken.batch] == [1, 2, 4, 5] and [j.id for j in buffer] == [6]
    assert ctl.dropped == 2 and ctl.consumed == 4
    sync_like = make_control(AsyncRatioControlConfig(alpha=0.0), 2)
    taken = sync_like.take(1, [job(0, 0), job(1, 1)])
    assert [j.id for j in taken.dropped] == [0] and taken.batch is None  # α = 0: only the current version


def test_every_registered_control_speaks_the_protocol():
    for entry in CONTROLS.entries():
        assert issubclass(entry.impl, Control)
        assert isinstance(make_control(entry.config(), 2), entry.impl)


# -- the cluster side ------------------------------------------------------------------------------

PROTOCOL = {
    "admit",
    "on_dispatch",
    "on_finish",
    "take",
    "on_publish",
    "oldest_needed_version",
    "stuck_reason",
    "running",
    "dropped",
}


def _control_accesses(tree):
    """(attribute, node, parent) for every ``self.control.<attribute>`` in ``tree``."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "control"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "self"
        ):
            yield node.attr, node, parents.get(node)


def test_cluster_never_assigns_control_state():
    tree = ast.parse(CLUSTER_SOURCE)
    accesses = list(_control_accesses(tree))
    assert accesses, "the cluster should talk to self.control"
    for attr, node, _ in accesses:
        assert isinstance(node.ctx, ast.Load), f"cluster.py line {node.lineno} assigns self.control.{attr}"
    for node in ast.walk(tree):  # nor through setattr / delattr
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            assert "control" not in ast.unparse(node.args[0]), f"cluster.py line {node.lineno}"


def test_cluster_uses_only_the_control_protocol():
    used = {attr for attr, _, _ in _control_accesses(ast.parse(CLUSTER_SOURCE))}
    assert used <= PROTOCOL, used - PROTOCOL
    for name in PROTOCOL - {"running", "dropped"}:
        assert callable(getattr(Control, name)), name
    assert "staleness.kind" not in CLUSTER_SOURCE and ".enforcement" not in CLUSTER_SOURCE


def test_payload_protocol_declares_what_the_cluster_reads():
    declared = {n for proto in (Payload, PartialPayload) for n in vars(proto) if not n.startswith("_")}
    read = set()
    for node in ast.walk(ast.parse(CLUSTER_SOURCE)):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id in ("payload", "full")) or (
            isinstance(owner, ast.Attribute) and owner.attr == "payload"
        ):
            read.add(node.attr)
    assert read and read <= declared, read - declared
    assert {"decode_steps", "num_responses", "width", "truncate", "oldest_version", "newest_version"} <= read
