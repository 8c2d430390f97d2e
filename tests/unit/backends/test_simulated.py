"""The simulated back-end: initial order, binding rules, deletions, status writes, determinism."""

from __future__ import annotations

from typing import Any

import pytest

from policyd.backends.simulated import SimulatedCluster
from policyd.scheduler.backend import BindError
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions
from tests.unit.scheduler.fakes import FakeProfile, fake_pod_info, node_obj, pod_obj, policy_set


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*objs: Any) -> None:
            self.calls.append((name, objs[-1]["metadata"]["name"] if objs else ""))

        return record


def stamped(name: str, priority: int, ts: str, node: str = "") -> dict[str, Any]:
    obj = pod_obj(name, priority=priority, node=node)
    obj["metadata"]["creationTimestamp"] = ts
    return obj


def test_start_delivers_nodes_assigned_then_pending_in_queue_order() -> None:
    pods = [
        stamped("late-high", 10, "2024-01-02T00:00:00Z"),
        stamped("running", 0, "2024-01-01T00:00:00Z", node="n1"),
        stamped("early-low", 1, "2024-01-01T00:00:00Z"),
        stamped("early-high", 10, "2024-01-01T00:00:00Z"),
        stamped("tie-b", 1, "2024-01-01T00:00:00Z"),
    ]
    cluster = SimulatedCluster([node_obj("n1")], pods, [])
    rec = Recorder()
    cluster.start(rec)  # type: ignore[arg-type]
    assert rec.calls == [
        ("on_node_add", "n1"),
        ("on_pod_add", "running"),
        ("on_pod_add", "early-high"),
        ("on_pod_add", "late-high"),
        ("on_pod_add", "early-low"),
        ("on_pod_add", "tie-b"),
        ("on_synced", ""),
    ]


def test_bind_sets_node_name_and_refuses_double_binds() -> None:
    cluster = SimulatedCluster([node_obj("n1")], [pod_obj("p")], [])
    rec = Recorder()
    cluster.start(rec)  # type: ignore[arg-type]
    pod = fake_pod_info(pod_obj("p"))
    cluster.set_nominated_node(pod, "n1")
    cluster.bind(pod, "n1")
    assert cluster.node_of("default/p") == "n1"
    obj = cluster.pod("default/p")
    assert obj is not None and "nominatedNodeName" not in obj["status"]
    with pytest.raises(BindError):
        cluster.bind(pod, "n1")
    with pytest.raises(BindError):
        cluster.bind(fake_pod_info(pod_obj("ghost")), "n1")


def test_delete_emits_and_records() -> None:
    cluster = SimulatedCluster([node_obj("n1")], [pod_obj("v", node="n1")], [])
    rec = Recorder()
    cluster.start(rec)  # type: ignore[arg-type]
    cluster.delete_pod(fake_pod_info(pod_obj("v", node="n1")), None)
    assert cluster.deleted == ["default/v"] and cluster.pod("default/v") is None
    assert rec.calls[-1] == ("on_pod_delete", "v")


def test_replayed_arrivals_enter_the_queue_at_their_creation_time() -> None:
    """Each pending pod is created when the fake clock reaches its creationTimestamp (offset from the
    earliest), the clock jumping over idle time; a pod without a timestamp arrives at once."""

    def created(name: str, stamp: str | None) -> dict[str, Any]:
        obj = pod_obj(name, "100m")
        if stamp is not None:
            obj["metadata"]["creationTimestamp"] = stamp
        return obj

    pods = [
        created("third", "2024-01-01T00:02:30Z"),
        created("first", "2024-01-01T00:00:00+00:00"),
        created("second", "2024-01-01T00:00:45Z"),
        created("untimed", None),
    ]
    cluster = SimulatedCluster([node_obj("a", 4000)], pods, replay_arrivals=True)
    sched = Scheduler(
        policy_set(FakeProfile()),
        cluster,
        clock=FakeClock(),
        options=SchedulerOptions(bind_workers=0, adopt_unknown_schedulers=True),
    )
    cluster.start(sched)
    assert cluster.next_arrival() == 45.0
    sched.run_until_settled(arrivals=cluster)
    times = {key: sched.attempts.for_pod(key)[0].time for key in sched.attempts.pods()}
    assert times == {
        "default/first": 0.0,
        "default/untimed": 0.0,
        "default/second": 45.0,
        "default/third": 150.0,
    }
    assert cluster.next_arrival() is None
    assert all(cluster.node_of(f"default/{n}") == "a" for n in ("first", "second", "third", "untimed"))
