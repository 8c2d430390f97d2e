"""The volume rules of default.policy (VolumeBinding, VolumeRestrictions, VolumeZone, NodeVolumeLimits)
on the simulated cluster: placements, FailedScheduling texts, PreBind's claim binding."""

from __future__ import annotations

import functools
from typing import Any

from policyd import shipped
from policyd.backends.cluster_file import cluster_objects
from policyd.backends.simulated import SimulatedCluster
from policyd.commands.simulate import run_simulation
from policyd.compiler.profiles import compile_paths
from policyd.framework import CompiledPolicySet
from policyd.scheduler.backend import BindError
from policyd.scheduler.cluster.volume_store import PodVolumeBindings
from policyd.scheduler.scheduler import Scheduler
from policyd.scheduler.snapshot import PodInfoLike

ZONE = "topology.kubernetes.io/zone"


@functools.cache
def default_policies() -> CompiledPolicySet:
    return compile_paths([str(shipped.default_policy())], generation=1)


def node(name: str, zone: str = "", **allocatable: str) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, **({ZONE: zone} if zone else {})}
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", **allocatable},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, *volumes: dict[str, Any], node_name: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}],
        "volumes": list(volumes),
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
    }


def claim_volume(claim: str, name: str = "") -> dict[str, Any]:
    return {"name": name or claim, "persistentVolumeClaim": {"claimName": claim}}


def pvc(
    name: str, storage_class: str = "", size: str = "1Gi", volume: str = "", **extra: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    spec: dict[str, Any] = {
        "accessModes": extra.pop("modes", ["ReadWriteOnce"]),
        "resources": {"requests": {"storage": size}},
        "storageClassName": storage_class,
    }
    if volume:
        spec["volumeName"] = volume
        meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    return {"kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec, **extra}


def pv(
    name: str,
    storage_class: str = "",
    size: str = "1Gi",
    hosts: tuple[str, ...] = (),
    labels: dict[str, str] | None = None,
    claim: str = "",
    csi: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
    }
    if hosts:
        term = {
            "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(hosts)}]
        }
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    if claim:
        spec["claimRef"] = {"namespace": "default", "name": claim}
    if csi:
        spec["csi"] = {"driver": csi, "volumeHandle": name}
    return {"kind": "PersistentVolume", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def storage_class(
    name: str,
    mode: str = "WaitForFirstConsumer",
    provisioner: str = "kubernetes.io/no-provisioner",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
        **extra,
    }


def simulate(*objects: dict[str, Any]) -> tuple[Scheduler, SimulatedCluster]:
    loaded = cluster_objects(objects)
    cluster = SimulatedCluster(loaded.nodes, loaded.pods, loaded.pdbs, storage=loaded.storage())
    return run_simulation(default_policies(), cluster, seed=0, explain=False, max_attempts=1), cluster


def failed(cluster: SimulatedCluster, name: str) -> str:
    messages = [
        e.message for e in cluster.events if e.pod == f"default/{name}" and e.reason == "FailedScheduling"
    ]
    assert messages, f"no FailedScheduling for {name}"
    return messages[0]


def test_missing_claim_makes_the_pod_unschedulable_on_every_node() -> None:
    _, cluster = simulate(node("n1"), node("n2"), pod("p", claim_volume("data")))
    assert cluster.node_of("default/p") is None
    assert failed(cluster, "p").startswith(
        '0/2 nodes are available: 2 persistentvolumeclaim "data" not found.'
    )
    assert "Preemption is not helpful" in failed(cluster, "p")


def test_claim_being_deleted_is_unschedulable() -> None:
    claim = pvc("data", volume="pv1")
    claim["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    _, cluster = simulate(node("n1"), pv("pv1", claim="data"), claim, pod("p", claim_volume("data")))
    assert failed(cluster, "p").startswith(
        '0/1 nodes are available: 1 persistentvolumeclaim "data" is being deleted.'
    )


def test_unbound_immediate_claim() -> None:
    _, cluster = simulate(
        node("n1"),
        storage_class("fast", mode="Immediate"),
        pvc("data", "fast"),
        pod("p", claim_volume("data")),
    )
    assert cluster.node_of("default/p") is None
    assert "1 pod has unbound immediate PersistentVolumeClaims." in failed(cluster, "p")


def test_bound_claim_follows_its_pv_node_affinity() -> None:
    _, cluster = simulate(
        node("n1"),
        node("n2"),
        node("n3"),
        pv("local", hosts=("n2",), claim="data"),
        pvc("data", volume="local"),
        pod("p", claim_volume("data")),
    )
    assert cluster.node_of("default/p") == "n2"


def test_pv_node_affinity_conflict_on_every_node() -> None:
    _, cluster = simulate(
        node("n1"),
        pv("local", hosts=("gone",), claim="data"),
        pvc("data", volume="local"),
        pod("p", claim_volume("data")),
    )
    assert failed(cluster, "p").startswith(
        "0/1 nodes are available: 1 node(s) had volume node affinity conflict."
    )


def test_wait_for_first_consumer_binds_the_smallest_matching_pv_in_prebind() -> None:
    _, cluster = simulate(
        node("n1"),
        node("n2"),
        storage_class("local"),
        pv("big", "local", size="10Gi", hosts=("n1",)),
        pv("small", "local", size="2Gi", hosts=("n1",)),
        pv("tiny", "local", size="500Mi", hosts=("n1",)),
        pv("other-class", "", size="1Gi", hosts=("n2",)),
        pvc("data", "local", size="1Gi"),
        pod("p", claim_volume("data")),
    )
    assert cluster.node_of("default/p") == "n1"
    bound = cluster.storage_object("PersistentVolume", "small")
    assert bound is not None and bound["spec"]["claimRef"]["name"] == "data"
    assert bound["status"]["phase"] == "Bound"
    claim = cluster.storage_object("PersistentVolumeClaim", "default/data")
    assert claim is not None and claim["spec"]["volumeName"] == "small"
    assert claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"


def test_wait_for_first_consumer_without_a_matching_pv() -> None:
    _, cluster = simulate(
        node("n1"),
        storage_class("local"),
        pv("small", "local", size="500Mi", hosts=("n1",)),
        pvc("data", "local", size="1Gi"),
        pod("p", claim_volume("data")),
    )
    assert cluster.node_of("default/p") is None
    assert failed(cluster, "p").startswith(
        "0/1 nodes are available: 1 node(s) didn't find available persistent volumes to bind."
    )


def test_two_pods_do_not_get_the_same_pv() -> None:
    scheduler, cluster = simulate(
        node("n1"),
        storage_class("local"),
        pv("only", "local", hosts=("n1",)),
        pvc("a", "local"),
        pvc("b", "local"),
        pod("pa", claim_volume("a")),
        pod("pb", claim_volume("b")),
    )
    placed = {k: cluster.node_of(f"default/{k}") for k in ("pa", "pb")}
    assert sorted(v or "" for v in placed.values()) == ["", "n1"]
    assert len(scheduler.unschedulable()) == 1


def test_dynamic_provisioning_selects_the_node_allowed_by_the_class_topology() -> None:
    topology = [{"matchLabelExpressions": [{"key": ZONE, "values": ["b"]}]}]
    _, cluster = simulate(
        node("n1", zone="a"),
        node("n2", zone="b"),
        storage_class("csi", provisioner="csi.example.com", allowedTopologies=topology),
        pvc("data", "csi"),
        pod("p", claim_volume("data")),
    )
    assert cluster.node_of("default/p") == "n2"
    claim = cluster.storage_object("PersistentVolumeClaim", "default/data")
    assert claim is not None
    assert claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "n2"
    provisioned = cluster.storage_object("PersistentVolume", claim["spec"]["volumeName"])
    assert provisioned is not None and provisioned["spec"]["claimRef"]["name"] == "data"


def capacity(name: str, size: str, zone: str) -> dict[str, Any]:
    return {
        "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": "csi",
        "capacity": size,
        "nodeTopology": {"matchLabels": {ZONE: zone}},
    }


def test_dynamic_provisioning_goes_where_the_driver_publishes_room() -> None:
    driver = {"kind": "CSIDriver", "metadata": {"name": "csi.example.com"}, "spec": {"storageCapacity": True}}
    objects = (
        node("n1", zone="a"),
        node("n2", zone="b"),
        driver,
        storage_class("csi", provisioner="csi.example.com"),
        capacity("a", "5Gi", "a"),
        capacity("b", "100Gi", "b"),
        pvc("data", "csi", size="10Gi"),
        pod("p", claim_volume("data")),
    )
    _, cluster = simulate(*objects)
    assert cluster.node_of("default/p") == "n2"
    _, cluster = simulate(*objects[:5], capacity("b", "8Gi", "b"), *objects[6:])
    assert cluster.node_of("default/p") is None
    assert failed(cluster, "p").startswith(
        "0/2 nodes are available: 2 node(s) did not have enough free storage."
    )


def test_volume_zone_conflict() -> None:
    _, cluster = simulate(
        node("n1", zone="a"),
        node("n2", zone="b"),
        pv("disk", labels={ZONE: "b"}, claim="data"),
        pvc("data", volume="disk"),
        pod("p", claim_volume("data")),
    )
    assert cluster.node_of("default/p") == "n2"
    _, cluster = simulate(
        node("n1", zone="a"),
        pv("disk", labels={ZONE: "b__c"}, claim="data"),
        pvc("data", volume="disk"),
        pod("p", claim_volume("data")),
    )
    assert failed(cluster, "p").startswith("0/1 nodes are available: 1 node(s) had no available volume zone.")


def test_disk_conflict() -> None:
    gce = {"name": "d", "gcePersistentDisk": {"pdName": "disk-1"}}
    gce_ro = {"name": "d", "gcePersistentDisk": {"pdName": "disk-2", "readOnly": True}}
    _, cluster = simulate(
        node("n1"),
        node("n2"),
        pod("running", gce, gce_ro | {"name": "e"}, node_name="n1"),
        pod("p", gce),
        pod("reader", gce_ro, node_name=""),
    )
    assert cluster.node_of("default/p") == "n2"
    assert cluster.node_of("default/reader") in ("n1", "n2")
    _, cluster = simulate(node("n1"), pod("running", gce, node_name="n1"), pod("p", gce))
    assert failed(cluster, "p").startswith("0/1 nodes are available: 1 node(s) had no available disk.")


def test_read_write_once_pod_claim_in_use() -> None:
    _, cluster = simulate(
        node("n1"),
        node("n2"),
        pv("v", claim="data"),
        pvc("data", volume="v", modes=["ReadWriteOncePod"]),
        pod("running", claim_volume("data"), node_name="n1"),
        pod("p", claim_volume("data")),
    )
    assert failed(cluster, "p").startswith(
        "0/2 nodes are available: 2 node has pod using PersistentVolumeClaim with the same name and "
        "ReadWriteOncePod access mode."
    )


def test_csi_volume_limit_from_csinode() -> None:
    csinode = {
        "kind": "CSINode",
        "metadata": {"name": "n1"},
        "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "n1", "allocatable": {"count": 1}}]},
    }
    _, cluster = simulate(
        node("n1"),
        csinode,
        pv("v1", claim="c1", csi="csi.example.com"),
        pvc("c1", volume="v1"),
        pv("v2", claim="c2", csi="csi.example.com"),
        pvc("c2", volume="v2"),
        pod("running", claim_volume("c1"), node_name="n1"),
        pod("same", claim_volume("c1")),
        pod("p", claim_volume("c2")),
    )
    assert cluster.node_of("default/same") == "n1"  # an attached volume is not counted twice
    assert failed(cluster, "p").startswith("0/1 nodes are available: 1 node(s) exceed max volume count.")


def test_in_tree_limits_default_and_allocatable() -> None:
    def ebs(i: int) -> dict[str, Any]:
        return {"name": f"v{i}", "awsElasticBlockStore": {"volumeID": f"vol-{i}"}}

    _, cluster = simulate(
        node("n1", **{"attachable-volumes-aws-ebs": "2"}),
        pod("running", ebs(1), ebs(2), node_name="n1"),
        pod("p", ebs(3)),
    )
    assert failed(cluster, "p").startswith("0/1 nodes are available: 1 node(s) exceed max volume count.")
    _, cluster = simulate(node("n1"), pod("running", ebs(1), ebs(2), node_name="n1"), pod("p", ebs(3)))
    assert cluster.node_of("default/p") == "n1"  # default limit 39


class FailingPreBind(SimulatedCluster):
    """A cluster whose first PreBind fails (an API conflict, a timeout waiting for the PV controller)."""

    failures = 1

    def bind_volumes(self, pod: PodInfoLike, bindings: PodVolumeBindings) -> None:
        if self.failures:
            self.failures -= 1
            raise BindError("binding volumes: timed out waiting for the condition")
        super().bind_volumes(pod, bindings)


def test_a_failed_prebind_requeues_the_pod_and_releases_its_pv() -> None:
    first = pod("first", claim_volume("a"))
    first["spec"]["priority"] = 10  # scheduled first; its PreBind fails
    loaded = cluster_objects(
        [
            node("n1"),
            storage_class("local"),
            pv("only", "local", hosts=("n1",)),
            pvc("a", "local"),
            pvc("b", "local"),
            first,
            pod("second", claim_volume("b")),
        ]
    )
    cluster = FailingPreBind(loaded.nodes, loaded.pods, loaded.pdbs, storage=loaded.storage())
    scheduler = run_simulation(default_policies(), cluster, seed=0, explain=False, max_attempts=0)
    rejected = [
        e.message for e in cluster.events if e.pod == "default/first" and e.reason == "FailedScheduling"
    ]
    assert rejected[0] == "Binding rejected: binding volumes: timed out waiting for the condition"
    # while the first pod backs off, the PV it had assumed is free again for the second one
    assert cluster.node_of("default/second") == "n1"
    bound = cluster.storage_object("PersistentVolume", "only")
    assert bound is not None and bound["spec"]["claimRef"]["name"] == "b"
    assert cluster.node_of("default/first") is None
    assert "default/first" in scheduler.unschedulable()
