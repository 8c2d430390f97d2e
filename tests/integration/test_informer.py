"""The informer against a real kube-apiserver: events, restarts, 410 Gone relists."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from policyd.backends.kube.client import KubeClient, object_path
from policyd.backends.kube.informer import PODS, Informer, Resource, capacity_resource, pdb_resource
from policyd.envtest import LocalControlPlane

from .apiserver import KubeTestContext


class Recorder:
    """Handler calls, in order, as (verb, name)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []

    def add(self, obj: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append(("add", obj["metadata"]["name"]))

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append(("update", new["metadata"]["name"]))

    def delete(self, obj: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append(("delete", obj["metadata"]["name"]))

    def seen(self, call: tuple[str, str]) -> bool:
        with self.lock:
            return call in self.calls


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def configmap(client: KubeClient, ns: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
    return client.request("POST", object_path("v1", "configmaps", ns), body=body)


def cm_informer(client: KubeClient, ns: str, rec: Recorder, **kw: Any) -> Informer:
    return Informer(
        client,
        Resource("v1", "configmaps", "ConfigMap", namespace=ns),
        on_add=rec.add,
        on_update=rec.update,
        on_delete=rec.delete,
        **kw,
    )


def test_add_update_delete_are_delivered_as_camelcase_dicts(kube: KubeClient, k8s: KubeTestContext) -> None:
    ns = k8s.namespace
    configmap(kube, ns, "before", {"a": "1"})
    rec = Recorder()
    inf = cm_informer(kube, ns, rec, page_size=1)
    inf.start()
    try:
        assert inf.wait_for_sync(10)
        assert rec.seen(("add", "before"))
        configmap(kube, ns, "after", {"a": "1"})
        wait_for(lambda: rec.seen(("add", "after")))
        path = object_path("v1", "configmaps", ns, "after")
        kube.request("PATCH", path, body={"data": {"a": "2"}}, content_type="application/merge-patch+json")
        wait_for(lambda: rec.seen(("update", "after")))
        obj = inf.get(f"{ns}/after")
        assert obj is not None and obj["data"] == {"a": "2"}
        assert "creationTimestamp" in obj["metadata"] and obj["kind"] == "ConfigMap"
        kube.request("DELETE", path)
        wait_for(lambda: rec.seen(("delete", "after")))
        assert inf.get(f"{ns}/after") is None
        assert sorted(o["metadata"]["name"] for o in inf.items()) == ["before"]
    finally:
        inf.stop()


def test_pod_informer_excludes_terminal_pods(kube: KubeClient, k8s: KubeTestContext) -> None:
    ns = k8s.namespace
    rec = Recorder()
    inf = Informer(kube, PODS, on_add=rec.add, on_update=rec.update, on_delete=rec.delete)
    inf.start()
    try:
        assert inf.wait_for_sync(10)
        for name in ("running", "done"):
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": "pause"}], "schedulerName": "policyd"},
            }
            kube.request("POST", object_path("v1", "pods", ns), body=body)
        wait_for(lambda: rec.seen(("add", "done")))
        kube.request(
            "PATCH",
            object_path("v1", "pods", ns, "done") + "/status",
            body={"status": {"phase": "Succeeded"}},
            content_type="application/merge-patch+json",
        )
        # leaving the field selector's set is a DELETED watch event
        wait_for(lambda: rec.seen(("delete", "done")))
        assert inf.get(f"{ns}/running") is not None and inf.get(f"{ns}/done") is None
    finally:
        inf.stop()


def test_pdbs_use_v1beta1_where_v1_is_not_served(kube: KubeClient) -> None:
    res = pdb_resource(kube)
    assert res is not None
    version = kube.request("GET", "/version")
    minor = int("".join(ch for ch in version["minor"] if ch.isdigit()))
    assert res.api_version == ("policy/v1" if minor >= 21 else "policy/v1beta1")
    inf = Informer(kube, res)
    inf.start()
    try:
        assert inf.wait_for_sync(10)
    finally:
        inf.stop()


def test_storage_capacities_are_read_where_a_beta_or_ga_version_is_served(kube: KubeClient) -> None:
    """CSIStorageCapacity: storage.k8s.io/v1 from 1.24, v1beta1 from 1.21; 1.20 serves it only as
    alpha (off by default), where policyd runs without the informer, as kube-scheduler 1.20 skips the
    capacity check."""
    res = capacity_resource(kube)
    version = kube.request("GET", "/version")
    minor = int("".join(ch for ch in version["minor"] if ch.isdigit()))
    if minor < 21:
        assert res is None
        return
    assert res is not None
    assert res.api_version == ("storage.k8s.io/v1" if minor >= 24 else "storage.k8s.io/v1beta1")


def test_relist_reconciles_deletion_missed_while_stopped(kube: KubeClient, k8s: KubeTestContext) -> None:
    ns = k8s.namespace
    configmap(kube, ns, "gone", {})
    configmap(kube, ns, "stays", {})
    rec = Recorder()
    inf = cm_informer(kube, ns, rec)
    inf.start()
    assert inf.wait_for_sync(10)
    inf.stop()
    kube.request("DELETE", object_path("v1", "configmaps", ns, "gone"))
    configmap(kube, ns, "new", {})
    inf.relist()
    assert rec.seen(("delete", "gone")) and rec.seen(("add", "new"))
    assert not rec.seen(("delete", "stays"))
    assert inf.relists == 2


def test_watch_from_expired_version_relists(
    kube: KubeClient, k8s: KubeTestContext, control_plane: LocalControlPlane
) -> None:
    """Resuming after an apiserver restart from a version older than its fresh watch cache gets
    410 Gone; the relist then finds the deletion that happened while the informer was away."""
    ns = k8s.namespace
    configmap(kube, ns, "victim", {})
    configmap(kube, ns, "stays", {})
    rec = Recorder()
    inf = cm_informer(kube, ns, rec, max_backoff=1.0)
    inf.start()
    assert inf.wait_for_sync(10)
    inf.stop()
    kube.request("DELETE", object_path("v1", "configmaps", ns, "victim"))
    control_plane.restart_apiserver()  # the new watch cache starts after the deletion
    inf.start()
    try:
        wait_for(lambda: rec.seen(("delete", "victim")), timeout=20)
        assert inf.relists == 2
        assert not rec.seen(("delete", "stays"))
        configmap(kube, ns, "later", {})
        wait_for(lambda: rec.seen(("add", "later")))
    finally:
        inf.stop()


def test_watch_survives_apiserver_restart(
    kube: KubeClient, k8s: KubeTestContext, control_plane: LocalControlPlane
) -> None:
    ns = k8s.namespace
    rec = Recorder()
    inf = cm_informer(kube, ns, rec, max_backoff=1.0)
    inf.start()
    try:
        assert inf.wait_for_sync(10)
        configmap(kube, ns, "first", {})
        wait_for(lambda: rec.seen(("add", "first")))
        control_plane.restart_apiserver()
        configmap(kube, ns, "second", {})
        kube.request("DELETE", object_path("v1", "configmaps", ns, "first"))
        wait_for(lambda: rec.seen(("add", "second")) and rec.seen(("delete", "first")), timeout=30)
    finally:
        inf.stop()
