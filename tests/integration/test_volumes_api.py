"""The volume rules against a real kube-apiserver: a pod whose claim does not exist stays pending with
kube-scheduler's FailedScheduling text (and is woken when the claim appears); a WaitForFirstConsumer
claim is bound to a matching PV in PreBind before the pod is bound; a claim to provision gets the
chosen node's selected-node annotation.

envtest runs no kube-controller-manager, so this test plays the PV controller's part where the
runtime needs it (kube-scheduler needs it too): it marks the PV Available, and once the scheduler has
written the PV's `spec.claimRef` it completes the claim's side of the binding (`spec.volumeName`, the
`pv.kubernetes.io/bind-completed` annotation), which PreBind waits for; for dynamic provisioning it
also plays the external provisioner (creates the PV).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from policyd.backends.kube.client import ApiError, KubeClient, object_path
from policyd.scheduler.scheduler import Scheduler

from .apiserver import KubeTestContext
from .test_api_backend import make_node, node_of, running, wait_for  # noqa: F401 - fixture running
from .test_preemption_api import events_of


def claim_pod(client: KubeClient, ns: str, name: str, claim: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "policyd",
            "nodeSelector": {"pool": ns},
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }
    client.request("POST", object_path("v1", "pods", ns), body=body)


def create_class(client: KubeClient, name: str, provisioner: str) -> None:
    """A WaitForFirstConsumer StorageClass."""
    body = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    client.request("POST", "/apis/storage.k8s.io/v1/storageclasses", body=body)


def create_volume(client: KubeClient, name: str, storage_class: str, **spec: Any) -> dict[str, Any]:
    """A 1Gi ReadWriteOnce PersistentVolume (`spec`: its source, claimRef, nodeAffinity...)."""
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            **spec,
        },
    }
    return client.request("POST", "/api/v1/persistentvolumes", body=body)


def create_claim(client: KubeClient, ns: str, name: str, storage_class: str, volume: str = "") -> None:
    """A ReadWriteOnce claim of 500Mi; with `volume`, already bound to it (the PV controller's work)."""
    meta: dict[str, Any] = {"name": name}
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
        "resources": {"requests": {"storage": "500Mi"}},
    }
    if volume:
        meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
        spec["volumeName"] = volume
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}
    client.request("POST", object_path("v1", "persistentvolumeclaims", ns), body=body)


def test_pod_with_a_missing_claim_stays_pending_until_the_claim_appears(
    kube: KubeClient,  # noqa: F811
    k8s: KubeTestContext,
    running: Callable[[], Scheduler],  # noqa: F811
) -> None:
    ns = k8s.namespace
    make_node(kube, f"{ns}-n1", labels={"pool": ns})
    running()
    claim_pod(kube, ns, "orphan", "missing")
    (event, *_) = wait_for(lambda: events_of(kube, ns, "orphan", "FailedScheduling"))
    assert 'persistentvolumeclaim "missing" not found' in event["message"]
    assert event["message"].startswith("0/")
    assert node_of(kube, ns, "orphan") == ""
    # the claim appears, already bound (the PV controller's work): the storage informers wake the pod
    pv_name = f"{ns}-late"
    create_volume(
        kube, pv_name, "", hostPath={"path": "/tmp/late"}, claimRef={"namespace": ns, "name": "missing"}
    )
    create_claim(kube, ns, "missing", "", volume=pv_name)
    assert wait_for(lambda: node_of(kube, ns, "orphan"), timeout=30) == f"{ns}-n1"


def play_pv_controller(client: KubeClient, pv_name: str, stop: threading.Event) -> Iterator[None]:
    """Complete the claim side of a binding once the PV names its claim (kube-controller-manager's part)."""
    while not stop.is_set():
        pv = client.request("GET", object_path("v1", "persistentvolumes", None, pv_name))
        ref = pv["spec"].get("claimRef")
        if ref:
            path = object_path("v1", "persistentvolumeclaims", ref["namespace"], ref["name"])
            claim = client.request("GET", path)
            claim["spec"]["volumeName"] = pv_name
            annotations = claim["metadata"].setdefault("annotations", {})
            annotations["pv.kubernetes.io/bind-completed"] = "yes"
            annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
            try:
                client.request("PUT", path, body=claim)
            except ApiError as err:
                if not err.conflict:
                    raise
                continue
            yield
            return
        stop.wait(0.1)


def test_wait_for_first_consumer_claim_is_bound_in_prebind(
    kube: KubeClient,  # noqa: F811
    k8s: KubeTestContext,
    running: Callable[[], Scheduler],  # noqa: F811
) -> None:
    ns = k8s.namespace
    node = f"{ns}-n1"
    make_node(kube, node, labels={"pool": ns})
    sc, pv_name = f"{ns}-local", f"{ns}-pv"
    create_class(kube, sc, "kubernetes.io/no-provisioner")
    term = {"matchExpressions": [{"key": "pool", "operator": "In", "values": [ns]}]}
    created = create_volume(
        kube,
        pv_name,
        sc,
        local={"path": "/mnt/disk"},
        nodeAffinity={"required": {"nodeSelectorTerms": [term]}},
    )
    created["status"] = {"phase": "Available"}  # the PV controller's part
    kube.request("PUT", object_path("v1", "persistentvolumes", None, pv_name) + "/status", body=created)
    create_claim(kube, ns, "data", sc)
    running()
    stop = threading.Event()
    done = threading.Event()

    def controller() -> None:
        for _ in play_pv_controller(kube, pv_name, stop):
            done.set()

    thread = threading.Thread(target=controller, daemon=True)
    thread.start()
    try:
        claim_pod(kube, ns, "consumer", "data")
        assert wait_for(lambda: node_of(kube, ns, "consumer"), timeout=30) == node
        assert done.is_set()  # the pod was bound only after its claim
        bound = kube.request("GET", object_path("v1", "persistentvolumes", None, pv_name))
        assert bound["spec"]["claimRef"]["name"] == "data"
        assert bound["spec"]["claimRef"]["namespace"] == ns
        assert bound["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    finally:
        stop.set()
        thread.join(5)


def test_dynamic_provisioning_gets_the_selected_node(
    kube: KubeClient,  # noqa: F811
    k8s: KubeTestContext,
    running: Callable[[], Scheduler],  # noqa: F811
) -> None:
    """PreBind annotates the claim with the chosen node; the test plays the external provisioner and
    the PV controller (create the PV, bind the claim), and the pod binds once its claim is bound."""
    ns = k8s.namespace
    node = f"{ns}-n1"
    make_node(kube, node, labels={"pool": ns})
    sc = f"{ns}-dynamic"
    claim_path = object_path("v1", "persistentvolumeclaims", ns, "scratch")
    create_class(kube, sc, "csi.example.com")
    create_claim(kube, ns, "scratch", sc)
    running()
    claim_pod(kube, ns, "writer", "scratch")

    def selected() -> str:
        annotations = kube.request("GET", claim_path)["metadata"].get("annotations") or {}
        return str(annotations.get("volume.kubernetes.io/selected-node", ""))

    assert wait_for(selected, timeout=30) == node
    assert node_of(kube, ns, "writer") == ""  # PreBind waits for the claim to be bound
    pv_name = f"{ns}-provisioned"
    create_volume(
        kube,
        pv_name,
        sc,
        csi={"driver": "csi.example.com", "volumeHandle": pv_name},
        claimRef={"namespace": ns, "name": "scratch"},
    )
    claim = kube.request("GET", claim_path)
    claim["spec"]["volumeName"] = pv_name
    claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
    kube.request("PUT", claim_path, body=claim)
    assert wait_for(lambda: node_of(kube, ns, "writer"), timeout=30) == node
