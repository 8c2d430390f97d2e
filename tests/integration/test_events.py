"""Events and pod status patches against a real kube-apiserver."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policyd.backends.kube.api_backend import ApiBackend
from policyd.backends.kube.client import KubeClient, object_path
from policyd.backends.kube.events import EventRecorder

from .apiserver import KubeTestContext


def make_pod(kube: KubeClient, ns: str, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "pause"}], "schedulerName": "policyd"},
    }
    return kube.request("POST", object_path("v1", "pods", ns), body=body)


def events_of(kube: KubeClient, ns: str, name: str) -> list[dict[str, Any]]:
    out = kube.request(
        "GET", object_path("v1", "events", ns), query={"fieldSelector": f"involvedObject.name={name}"}
    )
    return list(out.get("items") or [])


def test_scheduling_events_have_kube_scheduler_texts(kube: KubeClient, k8s: KubeTestContext) -> None:
    pod = make_pod(kube, k8s.namespace, "web")
    rec = EventRecorder(kube, instance="policyd-test")
    try:
        rec.failed_scheduling(pod, "0/3 nodes are available: 3 Insufficient cpu.")
        rec.scheduled(pod, "node-1")
        rec.preempted(pod, "1234-uid", "node-2")
        assert rec.flush()
    finally:
        rec.stop()
    events = {e["reason"]: e for e in events_of(kube, k8s.namespace, "web")}
    assert set(events) == {"FailedScheduling", "Scheduled", "Preempted"}
    assert events["Scheduled"]["message"] == f"Successfully assigned {k8s.namespace}/web to node-1"
    assert events["Scheduled"]["type"] == "Normal"
    assert events["FailedScheduling"]["type"] == "Warning"
    assert events["Preempted"]["message"] == "Preempted by pod 1234-uid on node node-2"
    for e in events.values():
        assert e["source"]["component"] == "policyd" and e["reportingComponent"] == "policyd"
        assert e["involvedObject"]["uid"] == pod["metadata"]["uid"]
        assert e["involvedObject"]["kind"] == "Pod"


def test_repeated_failures_aggregate_and_are_rate_limited(kube: KubeClient, k8s: KubeTestContext) -> None:
    pod = make_pod(kube, k8s.namespace, "stuck")
    rec = EventRecorder(kube, burst=5)
    try:
        for _ in range(40):  # an hour of retries, compressed
            rec.failed_scheduling(pod, "0/1 nodes are available: 1 Insufficient cpu.")
        assert rec.flush()
        assert rec.dropped == 35
        # the create, then updates one at a time; counts recorded meanwhile ride on the next update
        assert 2 <= rec.written <= 5
    finally:
        rec.stop()
    events = events_of(kube, k8s.namespace, "stuck")
    assert len(events) == 1
    assert events[0]["count"] == 5


def test_a_burst_of_equal_events_lands_as_one_event_with_the_full_count(
    kube: KubeClient, k8s: KubeTestContext
) -> None:
    # recorded faster than written: an update must never overtake the create or a later count
    pods = [make_pod(kube, k8s.namespace, f"burst-{i}") for i in range(8)]
    rec = EventRecorder(kube)
    try:
        for _ in range(25):
            for pod in pods:
                rec.failed_scheduling(pod, "0/1 nodes are available: 1 Insufficient cpu.")
        assert rec.flush()
        assert rec.dropped == 0
    finally:
        rec.stop()
    for i in range(8):
        events = events_of(kube, k8s.namespace, f"burst-{i}")
        assert [e["count"] for e in events] == [25]


@dataclass
class _Pod:
    key: str
    uid: str


def test_unschedulable_condition_and_nominated_node(kube: KubeClient, k8s: KubeTestContext) -> None:
    created = make_pod(kube, k8s.namespace, "p")
    p = _Pod(f"{k8s.namespace}/p", created["metadata"]["uid"])
    backend = ApiBackend(kube)
    msg = "0/2 nodes are available: 2 Insufficient memory."
    backend.patch_pod_scheduled(p, {"status": "False", "reason": "Unschedulable", "message": msg}, "node-7")
    assert backend.flush(10)
    pod = kube.request("GET", object_path("v1", "pods", k8s.namespace, "p"))
    conds = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert len(conds) == 1
    assert (conds[0]["status"], conds[0]["reason"], conds[0]["message"]) == ("False", "Unschedulable", msg)
    assert pod["status"]["nominatedNodeName"] == "node-7"
    # a second failure replaces the condition rather than adding one
    cpu = "0/2 nodes are available: 2 Insufficient cpu."
    backend.patch_pod_scheduled(p, {"status": "False", "reason": "Unschedulable", "message": cpu})
    backend.set_nominated_node(p, None)  # after the condition: a pod's patches go in order
    assert backend.flush(10)
    backend.stop()
    pod = kube.request("GET", object_path("v1", "pods", k8s.namespace, "p"))
    conds = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert len(conds) == 1 and conds[0]["message"].endswith("Insufficient cpu.")
    assert "nominatedNodeName" not in pod["status"]
