"""The Scheduler on the API back-end against a real kube-apiserver (in-process)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from policyd.backends.kube.api_backend import CONFLICT, ApiBackend, bind_pod
from policyd.backends.kube.client import KubeClient, object_path
from policyd.compiler.profiles import compile_sources
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions

from .apiserver import KubeTestContext

REPO = Path(__file__).resolve().parents[2]


def wait_for(cond: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def make_node(kube: KubeClient, name: str, cpu: str = "4", labels: dict[str, str] | None = None) -> None:
    capacity = {"cpu": cpu, "memory": "8Gi", "pods": "110"}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    kube.request("POST", "/api/v1/nodes", body=body)
    # status is ignored on create: set it through the subresource
    kube.request(
        "PUT",
        f"/api/v1/nodes/{name}/status",
        body=kube.request("GET", f"/api/v1/nodes/{name}") | {"status": body["status"]},
    )


def make_pod(
    kube: KubeClient, ns: str, name: str, cpu: str = "100m", selector: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "policyd",
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}],
    }
    if selector:
        spec["nodeSelector"] = selector
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    return kube.request("POST", object_path("v1", "pods", ns), body=body)


def node_of(kube: KubeClient, ns: str, name: str) -> str:
    return str(kube.request("GET", object_path("v1", "pods", ns, name))["spec"].get("nodeName") or "")


@pytest.fixture
def running(kube: KubeClient) -> Iterator[Callable[[], Scheduler]]:
    """Start a Scheduler on an ApiBackend (call the fixture value once nodes exist)."""
    stop = threading.Event()
    started: list[tuple[Scheduler, ApiBackend, threading.Thread]] = []

    def start() -> Scheduler:
        texts = {"default.policy": (REPO / "policies" / "default.policy").read_text()}
        backend = ApiBackend(kube, identity="test")
        sched = Scheduler(
            compile_sources(texts, generation=1), backend, options=SchedulerOptions(bind_workers=4)
        )
        backend.start(sched)
        assert backend.wait_for_sync(20)
        t = threading.Thread(target=sched.run, args=(stop,), daemon=True)
        t.start()
        started.append((sched, backend, t))
        return sched

    yield start
    stop.set()
    for _sched, backend, t in started:
        t.join(10)
        backend.stop()


def test_pods_bound_to_fitting_nodes_with_events(
    kube: KubeClient, k8s: KubeTestContext, running: Callable[[], Scheduler]
) -> None:
    ns = k8s.namespace
    small, big = f"{ns}-small", f"{ns}-big"
    make_node(kube, small, cpu="1", labels={"tier": ns + "-a"})
    make_node(kube, big, cpu="8", labels={"tier": ns + "-b"})
    running()
    make_pod(kube, ns, "fat", cpu="3", selector={"kubernetes.io/hostname": big})
    make_pod(kube, ns, "pinned", selector={"tier": ns + "-a"})
    assert wait_for(lambda: node_of(kube, ns, "fat")) == big
    assert wait_for(lambda: node_of(kube, ns, "pinned")) == small

    def scheduled_event() -> list[dict[str, Any]]:
        items = kube.request(
            "GET", object_path("v1", "events", ns), query={"fieldSelector": "involvedObject.name=fat"}
        )["items"]
        return [e for e in items if e["reason"] == "Scheduled"]

    events = wait_for(scheduled_event)
    assert events[0]["message"] == f"Successfully assigned {ns}/fat to {big}"


def test_unschedulable_pod_gets_condition_then_binds_when_node_added(
    kube: KubeClient, k8s: KubeTestContext, running: Callable[[], Scheduler]
) -> None:
    ns = k8s.namespace
    running()
    make_pod(kube, ns, "waiting", selector={"pool": ns})

    def condition() -> dict[str, Any] | None:
        pod = kube.request("GET", object_path("v1", "pods", ns, "waiting"))
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False":
                return dict(c)
        return None

    cond = wait_for(condition)
    assert cond["reason"] == "Unschedulable"
    assert cond["message"].startswith("0/")

    def failed_event() -> list[dict[str, Any]]:
        items = kube.request(
            "GET", object_path("v1", "events", ns), query={"fieldSelector": "involvedObject.name=waiting"}
        )["items"]
        return [e for e in items if e["reason"] == "FailedScheduling"]

    assert wait_for(failed_event)[0]["type"] == "Warning"
    make_node(kube, f"{ns}-late", labels={"pool": ns})
    assert wait_for(lambda: node_of(kube, ns, "waiting"), timeout=40) == f"{ns}-late"


def test_bind_conflict_is_reported_and_never_double_binds(kube: KubeClient, k8s: KubeTestContext) -> None:
    ns = k8s.namespace
    make_node(kube, f"{ns}-x")
    make_node(kube, f"{ns}-y")
    pod = make_pod(kube, ns, "raced")
    uid = pod["metadata"]["uid"]
    assert bind_pod(kube, ns, "raced", uid, f"{ns}-x").ok  # someone else bound it meanwhile
    result = bind_pod(kube, ns, "raced", uid, f"{ns}-y")
    assert result.outcome == CONFLICT and not result.ok
    assert node_of(kube, ns, "raced") == f"{ns}-x"
