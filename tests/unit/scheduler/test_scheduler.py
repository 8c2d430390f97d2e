"""The Scheduler end to end on the simulated back-end with fake profiles (fake clock, inline binds)."""

from __future__ import annotations

from typing import Any

from policyd.backends.simulated import SimulatedCluster
from policyd.framework import PermitSpec, RuleRef
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.metrics import SchedulerMetrics
from policyd.scheduler.queue import VICTIMS_WAIT
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions
from tests.unit.scheduler.fakes import FakePod, FakeProfile, node_obj, pod_obj, policy_set


def make(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    profile: FakeProfile | None = None,
    adopt: bool = True,
    pdbs: list[dict[str, Any]] | None = None,
    **opts: Any,
) -> tuple[Scheduler, SimulatedCluster]:
    cluster = SimulatedCluster(nodes, pods, pdbs or [])
    sched = Scheduler(
        policy_set(profile or FakeProfile()),
        cluster,
        clock=FakeClock(),
        options=SchedulerOptions(
            adopt_unknown_schedulers=adopt, bind_workers=opts.pop("workers", 0), seed=1, **opts
        ),
    )
    cluster.start(sched)
    return sched, cluster


def test_pod_goes_to_the_least_allocated_node_and_events_are_recorded() -> None:
    sched, cluster = make(
        [node_obj("small", 2000), node_obj("big", 8000), node_obj("tiny", 500)], [pod_obj("p", "1")]
    )
    sched.run_until_settled()
    assert cluster.node_of("default/p") == "big"
    assert [(e.reason, e.message) for e in cluster.events] == [
        ("Scheduled", "Successfully assigned default/p to big")
    ]
    (attempt,) = sched.attempts.for_pod("default/p")
    assert attempt.chosen == "big" and attempt.result == "scheduled"


def test_assumed_pods_count_for_the_next_pod() -> None:
    sched, cluster = make(
        [node_obj("a", 1000), node_obj("b", 1000)], [pod_obj("p1", "600m"), pod_obj("p2", "600m")]
    )
    sched.run_until_settled()
    assert {cluster.node_of("default/p1"), cluster.node_of("default/p2")} == {"a", "b"}


def test_unschedulable_message_condition_and_no_victims_suffix() -> None:
    sched, cluster = make([node_obj("a", 1000), node_obj("b", 1000)], [pod_obj("p", "2")])
    sched.run_until_settled()
    message = (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )
    assert cluster.node_of("default/p") is None
    assert cluster.events[-1].reason == "FailedScheduling" and cluster.events[-1].message == message
    pod = cluster.pod("default/p")
    assert pod is not None
    assert pod["status"]["conditions"][-1] == {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }
    assert sched.unschedulable() == ["default/p"]


def test_unresolvable_nodes_are_not_helpful_for_preemption() -> None:
    profile = FakeProfile(zone="z1")
    sched, cluster = make(
        [node_obj("a", 1000, {"zone": "z1"}), node_obj("b", 8000, {"zone": "z2"})],
        [pod_obj("low", "1", priority=1, node="a"), pod_obj("p", "2", priority=5)],
        profile,
    )
    sched.run_until_settled()
    assert cluster.events[-1].message == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match zone. preemption: 0/2 nodes are "
        "available: 1 Insufficient cpu, 1 Preemption is not helpful for scheduling."
    )


def test_preemption_evicts_nominates_and_then_binds() -> None:
    sched, cluster = make(
        [node_obj("a", 1000)],
        [pod_obj("low", "800m", priority=1, node="a"), pod_obj("high", "500m", priority=100)],
    )
    sched.run_until_settled()
    assert cluster.deleted == ["default/low"] and sched.victims == ["default/low"]
    assert cluster.node_of("default/high") == "a"
    reasons = [(e.pod, e.reason, e.message) for e in cluster.events]
    assert ("default/low", "Preempted", "Preempted by pod uid-high on node a") in reasons
    first, second = sched.attempts.for_pod("default/high")
    assert first.result == "nominated" and first.nominated_node == "a" and first.victims == ["default/low"]
    assert second.result == "scheduled" and second.chosen == "a"


def test_preemption_policy_never() -> None:
    sched, cluster = make(
        [node_obj("a", 1000)],
        [
            pod_obj("low", "800m", priority=1, node="a"),
            pod_obj("high", "500m", priority=100, preemptionPolicy="Never"),
        ],
    )
    sched.run_until_settled()
    assert cluster.deleted == []
    assert cluster.events[-1].message == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    )


def test_unknown_scheduler_names_adopted_only_when_asked() -> None:
    pods = [pod_obj("p", "1", schedulerName="someone-else"), pod_obj("q", "1", schedulerName="policyd")]
    sched, cluster = make([node_obj("a", 4000)], pods, adopt=False)
    sched.run_until_settled()
    assert cluster.node_of("default/p") is None and cluster.node_of("default/q") == "a"
    sched, cluster = make([node_obj("a", 4000)], pods, adopt=True)
    sched.run_until_settled()
    assert cluster.node_of("default/p") == "a"


def test_node_added_later_wakes_the_parked_pod() -> None:
    sched, cluster = make([node_obj("a", 1000)], [pod_obj("p", "2")])
    sched.run_until_settled()
    assert cluster.node_of("default/p") is None
    cluster.add_node(node_obj("b", 4000))
    sched.run_until_settled()
    assert cluster.node_of("default/p") == "b"
    assert len(sched.attempts.for_pod("default/p")) == 2


def gang_profile(min_members: int) -> FakeProfile:
    spec = PermitSpec(
        rule=RuleRef("fake", "gang"),
        group=lambda pod: pod["labels"].get("group"),
        min_members=lambda pod: min_members,
        timeout_seconds=60.0,
    )
    return FakeProfile(permits=(spec,))


def test_gang_binds_together_once_enough_members_are_reserved() -> None:
    pods = [pod_obj(f"g{i}", "100m") for i in range(3)]
    for p in pods:
        p["metadata"]["labels"] = {"group": "g"}
    sched, cluster = make([node_obj("a", 4000)], pods, gang_profile(3))
    sched.run_until_settled()
    assert all(cluster.node_of(f"default/g{i}") == "a" for i in range(3))


def test_gang_times_out_and_unreserves_everyone() -> None:
    pods = [pod_obj(f"g{i}", "100m") for i in range(2)]
    for p in pods:
        p["metadata"]["labels"] = {"group": "g"}
    # an incomplete gang is retried (after a backoff) at every timeout, as kube-scheduler does: bound it
    sched, cluster = make([node_obj("a", 4000)], pods, gang_profile(3), max_attempts=2)
    sched.run_until_settled()
    assert cluster.node_of("default/g0") is None and cluster.node_of("default/g1") is None
    assert not sched.cache.is_assumed("default/g0") and not sched.cache.is_assumed("default/g1")
    assert sched.clock.now() >= 60.0
    assert any("rejected due to timeout after waiting 60s" in e.message for e in cluster.events)


def test_gang_timeout_requeues_at_once_and_frees_the_node_for_parked_pods() -> None:
    """An incomplete gang holds the node until its permit times out; then the pod parked behind it
    is scheduled at once (not after the 5-minute flush) and the gang's pods go to backoffQ."""
    gang = [pod_obj(f"g{i}", "400m") for i in range(2)]
    for p in gang:
        p["metadata"]["labels"] = {"group": "g"}
    sched, cluster = make(
        [node_obj("a", 1000)], [*gang, pod_obj("p", "600m")], gang_profile(3), max_attempts=2
    )
    sched.run_until_settled()
    assert cluster.node_of("default/p") == "a"
    (first, second) = sched.attempts.for_pod("default/p")
    assert first.result == "unschedulable" and second.result == "scheduled"
    assert 60.0 <= second.time < 61.0  # right after the timeout, not after the 300 s flush
    gang_attempts = [a for a in sched.attempts.for_pod("default/g0") if a.result != "rejected"]
    assert len(gang_attempts) == 2  # retried after a backoff, not parked until the flush
    assert gang_attempts[1].time < 300.0


class FailingOnce(SimulatedCluster):
    failures = 1

    def bind(self, pod: Any, node: str) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("conflict")
        super().bind(pod, node)


def test_bind_failure_forgets_and_retries_with_backoff() -> None:
    cluster = FailingOnce([node_obj("a", 1000)], [pod_obj("p", "500m")], [])
    clock = FakeClock()
    sched = Scheduler(
        policy_set(FakeProfile()),
        cluster,
        clock=clock,
        options=SchedulerOptions(adopt_unknown_schedulers=True, bind_workers=2),
    )
    cluster.start(sched)
    sched.run_until_settled()
    assert cluster.node_of("default/p") == "a"
    assert clock.now() >= 1.0  # waited out the backoff
    assert [e.reason for e in cluster.events] == ["FailedScheduling", "Scheduled"]
    sched.binder.shutdown()


def test_gated_pod_is_not_attempted_until_an_update_removes_its_gates() -> None:
    """PreEnqueue on the simulated back-end with the real pod conversion and metrics."""
    gated = pod_obj("g", "100m", schedulingGates=[{"name": "example.com/quota"}])
    cluster = SimulatedCluster([node_obj("a", 1000)], [gated, pod_obj("p", "100m")], [])
    metrics = SchedulerMetrics()
    sched = Scheduler(
        policy_set(FakeProfile()),
        cluster,
        clock=FakeClock(),
        options=SchedulerOptions(adopt_unknown_schedulers=True, bind_workers=0),
        metrics=metrics,
    )
    cluster.start(sched)
    sched.run_until_settled()
    assert cluster.node_of("default/p") == "a" and cluster.node_of("default/g") is None
    assert sched.attempts.for_pod("default/g") == []
    assert [qp.key for qp in sched.queue.gated_pods()] == ["default/g"]
    assert "default/g" not in sched.unschedulable()
    sample = metrics.registry.get_sample_value
    assert sample("scheduler_pending_pods", {"queue": "gated"}) == 1
    assert sample("scheduler_queue_incoming_pods_total", {"queue": "gated", "event": "PodAdd"}) == 1

    cluster.update_pod({**gated, "spec": {**gated["spec"], "schedulingGates": []}})
    sched.run_until_settled()
    assert cluster.node_of("default/g") == "a"
    assert [a.result for a in sched.attempts.for_pod("default/g")] == ["scheduled"]
    assert sample("scheduler_pending_pods", {"queue": "gated"}) == 0
    event = {"queue": "active", "event": "UpdatePodSchedulingGatesEliminated"}
    assert sample("scheduler_queue_incoming_pods_total", event) == 1


class _CountingCluster(SimulatedCluster):
    """Records every PodScheduled write: (pod, message, nominated node)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.status_writes: list[tuple[str, str, str]] = []
        self.nominations: list[tuple[str, str | None]] = []

    def patch_pod_scheduled(self, pod: Any, condition: Any, nominated_node: str = "") -> None:
        self.status_writes.append((pod.key, condition["message"], nominated_node))
        super().patch_pod_scheduled(pod, condition, nominated_node)

    def set_nominated_node(self, pod: Any, node: str | None) -> None:
        self.nominations.append((pod.key, node))
        super().set_nominated_node(pod, node)


def _counting(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> tuple[Scheduler, _CountingCluster]:
    cluster = _CountingCluster(nodes, pods, [])
    sched = Scheduler(
        policy_set(FakeProfile()),
        cluster,
        clock=FakeClock(),
        options=SchedulerOptions(adopt_unknown_schedulers=True, bind_workers=0, seed=1),
    )
    cluster.start(sched)
    sched.run_until_settled()
    return sched, cluster


def test_an_unchanged_condition_is_not_written_again() -> None:
    sched, cluster = _counting([node_obj("a", 1000)], [pod_obj("p", "2")])
    assert isinstance(sched.clock, FakeClock)
    sched.clock.advance(301)  # parked longer than 5 min: tried again, fails the same way
    assert sched.queue.flush_unschedulable() == 1
    sched.run_until_settled()
    assert len(sched.attempts.for_pod("default/p")) == 2
    assert [key for key, _, _ in cluster.status_writes] == ["default/p"]  # once: same status, reason, message
    cluster.add_node(node_obj("b", 500))  # tried again with another message: written again
    sched.run_until_settled()
    assert [key for key, _, _ in cluster.status_writes] == ["default/p", "default/p"]
    assert "0/2 nodes are available" in cluster.status_writes[-1][1]


def test_a_preemptors_nomination_is_written_with_its_condition() -> None:
    _, cluster = _counting(
        [node_obj("a", 1000)],
        [pod_obj("low", "800m", priority=1, node="a"), pod_obj("p", "800m", priority=5)],
    )
    assert cluster.status_writes[0][0] == "default/p" and cluster.status_writes[0][2] == "a"
    assert ("default/p", "a") not in cluster.nominations  # no second write for the nomination
    assert cluster.node_of("default/p") == "a"


class _SlowApiCluster(SimulatedCluster):
    """Victims stay terminating (no kubelet finishes them) and the preemptor's status writes have not
    reached the API server yet: what policyd sees while its writes wait behind many deletions."""

    def delete_victims(self, pods: Any, in_order: bool = True) -> None:
        for pod in pods:
            obj = self.pod(pod.key)
            assert obj is not None
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            self.update_pod(obj)
            self.deleted.append(pod.key)

    def patch_pod_scheduled(self, pod: Any, condition: Any, nominated_node: str = "") -> None:
        pass


def test_a_preemptor_retried_before_its_nomination_is_written_does_not_preempt_again() -> None:
    cluster = _SlowApiCluster(
        [node_obj("a", 3000)],
        [
            pod_obj("low1", "900m", priority=1, node="a"),
            pod_obj("low2", "900m", priority=1, node="a"),
            pod_obj("low3", "900m", priority=1, node="a"),
            pod_obj("high", "1000m", priority=100),
        ],
        [],
    )
    clock = FakeClock()
    sched = Scheduler(
        policy_set(FakeProfile()),
        cluster,
        clock=clock,
        options=SchedulerOptions(adopt_unknown_schedulers=True, bind_workers=0, seed=1),
    )
    cluster.start(sched)
    sched.run_until_settled()
    (first,) = sched.attempts.for_pod("default/high")
    assert first.result == "nominated" and len(first.victims) == 1
    # its victim is still terminating when the wait for it lapses and another pod's deletion moves it
    clock.advance(VICTIMS_WAIT + 1)
    cluster.add_pod(pod_obj("other", "100m", node="a"))
    cluster.delete_pod(FakePod("other"), None)
    sched.run_until_settled()
    second = sched.attempts.for_pod("default/high")[-1]
    assert second is not first
    assert second.message.endswith("preemption: not eligible due to a terminating pod on the nominated node.")
    assert sched.victims == first.victims  # no second victim
