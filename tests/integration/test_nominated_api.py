"""Against a real kube-apiserver: a preemptor nominated to a node, waiting for its terminating victim,
counts in the inter-pod anti-affinity of a lower-priority pod placed meanwhile (kube-scheduler's
RunFilterPluginsWithNominatedPods)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policyd.backends.kube.api_backend import bind_pod
from policyd.backends.kube.client import KubeClient, object_path
from policyd.scheduler.scheduler import Scheduler

from .apiserver import KubeTestContext
from .test_api_backend import make_node, node_of, running, wait_for  # noqa: F401 - fixture running
from .test_preemption_api import get_pod, priority_class

HOST = "kubernetes.io/hostname"


def anti_affinity(app: str) -> dict[str, Any]:
    """Required pod anti-affinity to app=`app` pods on the same node."""
    term = {"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": app}}}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def create_pod(
    client: KubeClient,
    ns: str,
    name: str,
    *,
    app: str,
    cpu: str,
    priority: str,
    pool: dict[str, str],
    scheduler: str = "policyd",
    affinity: dict[str, Any] | None = None,
    grace: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "priorityClassName": priority,
        "nodeSelector": pool,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}],
    }
    if affinity is not None:
        spec["affinity"] = affinity
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": spec,
    }
    return client.request("POST", object_path("v1", "pods", ns), body=body)


def test_a_nominated_preemptor_repels_a_lower_priority_pod(
    kube: KubeClient,  # noqa: F811
    k8s: KubeTestContext,
    running: Callable[[], Scheduler],  # noqa: F811
) -> None:
    ns = k8s.namespace
    pool = {"pool": ns}  # other tests' nodes share the apiserver
    near, far = f"{ns}-near", f"{ns}-far"
    make_node(kube, near, cpu="4", labels=pool)
    make_node(kube, far, cpu="4", labels=pool)
    for name, value in (("low", 10), ("high", 1000), ("top", 2000)):
        priority_class(kube, f"{ns}-{name}", value)
    # `guard` pods: the preemptor refuses to share a node with one; the one on `far` may not be
    # preempted, the one on `near` may, and stays Terminating once deleted (no kubelet)
    for node, priority, grace in ((near, "low", 30), (far, "top", None)):
        name = f"guard-{node}"
        created = create_pod(
            kube, ns, name, app="guard", cpu="2" if node == far else "100m",
            priority=f"{ns}-{priority}", pool=pool, scheduler="other", grace=grace,
        )  # fmt: skip
        assert bind_pod(kube, ns, name, created["metadata"]["uid"], node).ok

    sched = running()
    create_pod(
        kube, ns, "preemptor", app="web", cpu="100m", priority=f"{ns}-high", pool=pool,
        affinity=anti_affinity("guard"),
    )  # fmt: skip

    def nominated() -> str:
        p = get_pod(kube, ns, "preemptor") or {}
        return str((p.get("status") or {}).get("nominatedNodeName") or "")

    assert wait_for(nominated) == near
    assert wait_for(
        lambda: (get_pod(kube, ns, f"guard-{near}") or {}).get("metadata", {}).get("deletionTimestamp")
    )
    # the preemptor waits for its victim; meanwhile a lower-priority pod that avoids web pods
    # arrives: `near` has the most room, but with the preemptor counted there it fails
    create_pod(
        kube, ns, "later", app="other", cpu="100m", priority=f"{ns}-low", pool=pool,
        affinity=anti_affinity("web"),
    )  # fmt: skip
    assert wait_for(lambda: node_of(kube, ns, "later")) == far
    assert node_of(kube, ns, "preemptor") == ""
    later = sched.attempts.for_pod(f"{ns}/later")[0]
    assert later.failures[near].reasons == ("node(s) didn't match pod anti-affinity rules",)

    # the kubelet's part: the victim goes away; the preemptor binds where it was nominated
    kube.request(
        "DELETE",
        object_path("v1", "pods", ns, f"guard-{near}"),
        body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
    )
    assert wait_for(lambda: node_of(kube, ns, "preemptor"), timeout=40) == near
