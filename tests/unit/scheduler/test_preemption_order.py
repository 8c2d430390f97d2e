"""Preemption on the shipped default policy where the order of a node's pods decides the victims."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policyd import shipped
from policyd.backends.simulated import SimulatedCluster
from policyd.commands.simulate import run_simulation
from policyd.compiler.profiles import compile_paths
from policyd.scheduler.snapshot import PodInfoLike
from tests.builders import make_node, make_pod


def test_a_removed_pods_place_goes_to_the_nodes_last_pod_as_in_kube_scheduler() -> None:
    # Recorded from kube-scheduler 1.20.2 (tests/differential/regressions/swap-remove.yaml): four
    # equal low-priority pods fill the node, two preemptors of 1 CPU come one after another. The first
    # evicts e0, and e3 takes its place in the node's pods (e3, e1, e2). Pods of one priority without a
    # start time are reprieved in reverse (Go's insertion sort): e2, e1 stay and e3 is evicted. Had the
    # pods kept their order (e1, e2, e3), e1 would have been evicted.
    existing = [make_pod(f"e{i}", cpu="1", priority=10, node_name="n0") for i in range(4)]
    for pod in existing:
        del pod["status"]["startTime"]  # no kubelet started them
    preemptors = [make_pod(f"p{i}", cpu="1", priority=1000) for i in range(2)]
    cluster = SimulatedCluster([make_node("n0", cpu="4")], [*existing, *preemptors], [])
    policies = compile_paths([str(shipped.default_policy())], generation=1)
    scheduler = run_simulation(policies, cluster, seed=0, explain=False, max_attempts=3)
    assert cluster.deleted == ["default/e0", "default/e3"]
    assert scheduler.attempts.for_pod("default/p1")[0].victims == ["default/e3"]
    assert {p["metadata"]["name"] for p in cluster.pods() if p["spec"].get("nodeName") == "n0"} == {
        "e1",
        "e2",
        "p0",
        "p1",
    }


class _Recording(SimulatedCluster):
    """Records each preemption's victims and whether they had to go in order."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.preemptions: list[tuple[list[str], bool]] = []

    def delete_victims(self, pods: Sequence[PodInfoLike], in_order: bool = True) -> None:
        self.preemptions.append(([p.key for p in pods], in_order))
        super().delete_victims(pods, in_order)


def test_victims_go_in_order_only_where_their_order_can_change_the_pods_left() -> None:
    def preempt(cpu: str) -> list[tuple[list[str], bool]]:
        existing = [make_pod(f"e{i}", cpu="1", priority=10, node_name="n0") for i in range(4)]
        for pod in existing:
            del pod["status"]["startTime"]
        cluster = _Recording(
            [make_node("n0", cpu="4")], [*existing, make_pod("p", cpu=cpu, priority=1000)], []
        )
        policies = compile_paths([str(shipped.default_policy())], generation=1)
        run_simulation(policies, cluster, seed=0, explain=False, max_attempts=3)
        return cluster.preemptions

    # e3 and e2 are reprieved (reverse order); e1 and e0 go, and e3, e2 stay in an order that depends on
    # which goes first
    assert preempt("2") == [(["default/e1", "default/e0"], True)]
    assert preempt("3") == [(["default/e2", "default/e1", "default/e0"], False)]  # only e3 stays


def test_victims_leave_in_their_order_and_that_order_decides_the_next_preemption() -> None:
    # Recorded from kube-scheduler 1.20.2 (tests/differential/regressions/swap-order.yaml): p0 evicts
    # e1, then e0, of e0..e5, which leaves e4, e5, e2, e3; p1 then evicts e4 (had e0 gone first,
    # e5, e4, e2, e3 would be left and p1 would evict e5)
    existing = [make_pod(f"e{i}", cpu="1", priority=10, node_name="n0") for i in range(6)]
    for pod in existing:
        del pod["status"]["startTime"]
    preemptors = [make_pod("p0", cpu="2", priority=1000), make_pod("p1", cpu="1", priority=1000)]
    cluster = _Recording([make_node("n0", cpu="6")], [*existing, *preemptors], [])
    policies = compile_paths([str(shipped.default_policy())], generation=1)
    run_simulation(policies, cluster, seed=0, explain=False, max_attempts=3)
    assert cluster.preemptions == [(["default/e1", "default/e0"], True), (["default/e4"], False)]
    assert cluster.deleted == ["default/e1", "default/e0", "default/e4"]
