"""Preemption against a real kube-apiserver: victims deleted with their grace period, nomination, event."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from policyd.backends.kube.api_backend import ApiBackend, bind_pod
from policyd.backends.kube.client import KubeClient, object_path
from policyd.compiler.profiles import compile_sources
from policyd.scheduler.metrics import SchedulerMetrics
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions

from .apiserver import KubeTestContext
from .test_api_backend import REPO, make_node, node_of, wait_for


def priority_class(kube: KubeClient, name: str, value: int) -> None:
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    kube.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body=body)


def pod(
    kube: KubeClient,
    ns: str,
    name: str,
    cpu: str,
    priority_class_name: str,
    *,
    scheduler: str = "policyd",
    grace: int | None = None,
    selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "priorityClassName": priority_class_name,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}],
    }
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if selector:
        spec["nodeSelector"] = selector
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    return kube.request("POST", object_path("v1", "pods", ns), body=body)


def get_pod(kube: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    items = kube.request(
        "GET", object_path("v1", "pods", ns), query={"fieldSelector": f"metadata.name={name}"}
    )
    found = items["items"]
    return dict(found[0]) if found else None


def events_of(kube: KubeClient, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    items = kube.request(
        "GET", object_path("v1", "events", ns), query={"fieldSelector": f"involvedObject.name={name}"}
    )["items"]
    return [e for e in items if e["reason"] == reason]


@contextlib.contextmanager
def scheduling(kube: KubeClient, metrics: SchedulerMetrics) -> Iterator[Scheduler]:
    """A Scheduler with default.policy on an ApiBackend, running until the block ends."""
    backend = ApiBackend(kube, identity="test")
    texts = {"default.policy": (REPO / "policies" / "default.policy").read_text()}
    sched = Scheduler(
        compile_sources(texts, generation=1),
        backend,
        options=SchedulerOptions(bind_workers=2),
        metrics=metrics,
    )
    stop = threading.Event()
    backend.start(sched)
    thread = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    try:
        assert backend.wait_for_sync(20)
        thread.start()
        yield sched
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(10)
        backend.stop()


def test_preemption_deletes_victims_nominates_and_binds(kube: KubeClient, k8s: KubeTestContext) -> None:
    ns = k8s.namespace
    node = f"{ns}-full"
    pool = {"pool": ns}  # other tests' nodes share the apiserver: the preemptor fits only here
    make_node(kube, node, cpu="1", labels=pool)
    priority_class(kube, f"{ns}-low", 10)
    priority_class(kube, f"{ns}-high", 1000)
    # the node is full of low-priority pods, bound by "someone else" through the binding subresource
    victims = {"quick": 0, "slow": 30}  # terminationGracePeriodSeconds
    for name, grace in victims.items():
        created = pod(kube, ns, name, "450m", f"{ns}-low", scheduler="other", grace=grace)
        assert bind_pod(kube, ns, name, created["metadata"]["uid"], node).ok

    metrics = SchedulerMetrics()
    with scheduling(kube, metrics):
        preemptor = pod(kube, ns, "urgent", "900m", f"{ns}-high", selector=pool)
        uid = preemptor["metadata"]["uid"]

        # the preemptor is nominated to the node through the status subresource
        def nominated() -> str:
            p = get_pod(kube, ns, "urgent") or {}
            return str((p.get("status") or {}).get("nominatedNodeName") or "")

        assert wait_for(nominated) == node

        # both victims were deleted with their own grace period: the one with 0 is gone at once,
        # the other is Terminating (there is no kubelet to finish it)
        assert wait_for(lambda: get_pod(kube, ns, "quick") is None)
        slow = wait_for(
            lambda: (get_pod(kube, ns, "slow") or {}).get("metadata", {}).get("deletionTimestamp")
        )
        assert slow
        slow_pod = get_pod(kube, ns, "slow")
        assert slow_pod is not None
        assert slow_pod["metadata"]["deletionGracePeriodSeconds"] == 30

        # each victim got kube-scheduler's Preempted event
        for name in victims:
            (event,) = wait_for(lambda name=name: events_of(kube, ns, name, "Preempted"))
            assert event["type"] == "Normal"
            assert event["message"] == f"Preempted by pod {uid} on node {node}"

        # while a victim is terminating the preemptor waits for it, not bound anywhere else
        assert node_of(kube, ns, "urgent") == ""

        # the kubelet's part: the terminating victim goes away; then the preemptor binds to the node
        kube.request(
            "DELETE",
            object_path("v1", "pods", ns, "slow"),
            body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
        )
        assert wait_for(lambda: node_of(kube, ns, "urgent"), timeout=40) == node
        (scheduled,) = wait_for(lambda: events_of(kube, ns, "urgent", "Scheduled"))
        assert scheduled["message"] == f"Successfully assigned {ns}/urgent to {node}"

    def sample(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, labels) or 0.0

    assert sample("scheduler_preemption_victims_count") == 1
    assert sample("scheduler_preemption_victims_sum") == 2
    assert sample("scheduler_schedule_attempts_total", result="scheduled", profile="policyd") == 1
    assert sample("policyd_binding_total", result="bound") == 1


def test_victims_leave_in_kube_schedulers_order_which_decides_the_next_preemption(
    kube: KubeClient, k8s: KubeTestContext
) -> None:
    # tests/differential/regressions/swap-order.yaml, recorded from kube-scheduler 1.20.2: the first
    # preemptor evicts e1, then e0, which leaves e4, e5, e2, e3 on the node (NodeInfo's swap-remove);
    # the second then evicts e4 (on the old order, e2..e5, e2). Deleted together, e0's deletion could
    # arrive first, leave e5, e4, e2, e3, and have the second evict e5; that the deletions are sent one
    # after another is checked in tests/unit/backends/test_api_writes.py.
    ns = k8s.namespace
    node = f"{ns}-six"
    pool = {"pool": ns}
    make_node(kube, node, cpu="6", labels=pool)
    priority_class(kube, f"{ns}-low", 10)
    priority_class(kube, f"{ns}-high", 1000)
    for i in range(6):
        created = pod(kube, ns, f"e{i}", "1", f"{ns}-low", scheduler="other", grace=0)
        assert bind_pod(kube, ns, f"e{i}", created["metadata"]["uid"], node).ok

    with scheduling(kube, SchedulerMetrics()) as sched:
        pod(kube, ns, "p0", "2", f"{ns}-high", selector=pool, grace=0)
        assert wait_for(lambda: node_of(kube, ns, "p0"), timeout=40) == node
        pod(kube, ns, "p1", "1", f"{ns}-high", selector=pool, grace=0)
        assert wait_for(lambda: node_of(kube, ns, "p1"), timeout=40) == node
    assert sched.victims == [f"{ns}/e1", f"{ns}/e0", f"{ns}/e4"]
    left = {p["metadata"]["name"] for p in kube.request("GET", object_path("v1", "pods", ns))["items"]}
    assert left == {"e2", "e3", "e5", "p0", "p1"}
