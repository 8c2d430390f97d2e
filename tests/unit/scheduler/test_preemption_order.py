"""Preemption on the shipped default policy where the order of a node's pods decides the victims."""

from __future__ import annotations

from policyd import shipped
from policyd.backends.simulated import SimulatedCluster
from policyd.commands.simulate import run_simulation
from policyd.compiler.profiles import compile_paths
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
