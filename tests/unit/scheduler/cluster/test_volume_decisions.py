"""The volume plugins' decisions one by one: PV matching, claim classification, disks, limits, zones,
and the store's assume / forget."""

from __future__ import annotations

from typing import Any

from policyd.scheduler.cluster.volume_binding import (
    REASON_BIND_CONFLICT,
    REASON_NODE_CONFLICT,
    REASON_PV_NOT_EXIST,
    REASON_UNBOUND_IMMEDIATE,
    find_matching_volume,
    find_pod_volumes,
    pod_claims,
)
from policyd.scheduler.cluster.volume_limits import volume_limit
from policyd.scheduler.cluster.volume_restrictions import node_disks, pod_disks
from policyd.scheduler.cluster.volume_store import (
    ANN_SELECTED_NODE,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
    PodVolumeBindings,
    StaticBinding,
    VolumeStore,
)
from policyd.scheduler.cluster.volume_zone import volume_topologies


def pv(name: str, size: str = "1Gi", **spec: Any) -> dict[str, Any]:
    status = {"phase": spec.pop("phase", "Available")}
    labels = spec.pop("labels", {})
    base = {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local"}
    return {"metadata": {"name": name, "labels": labels}, "spec": {**base, **spec}, "status": status}


def pvc(name: str, size: str = "1Gi", **spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", {})
    base = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
        "storageClassName": "local",
    }
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": annotations},
        "spec": {**base, **spec},
    }


def pod(*volumes: dict[str, Any], name: str = "p") -> dict[str, Any]:
    return {"name": name, "namespace": "default", "uid": f"uid-{name}", "spec": {"volumes": list(volumes)}}


def uses(claim: str) -> dict[str, Any]:
    return {"name": claim, "persistentVolumeClaim": {"claimName": claim}}


def hostname_affinity(host: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}
    return {"required": {"nodeSelectorTerms": [term]}}


def store_of(*objects: tuple[str, dict[str, Any]]) -> VolumeStore:
    store = VolumeStore()
    for kind, obj in objects:
        store.upsert(kind, obj)
    return store


WFFC = (
    STORAGE_CLASS,
    {
        "metadata": {"name": "local"},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    },
)
N1 = {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}
N2 = {"name": "n2", "labels": {"kubernetes.io/hostname": "n2"}}


def test_matching_prefers_the_smallest_fitting_available_pv() -> None:
    claim = pvc("c", "2Gi")
    volumes = [
        pv("too-small", "1Gi"),
        pv("big", "10Gi"),
        pv("fits", "3Gi"),
        pv("released", "2Gi", phase="Released"),
        pv("other-class", "2Gi", storageClassName="slow"),
        pv("wrong-mode", "2Gi", accessModes=["ReadOnlyMany"]),
        pv("block", "2Gi", volumeMode="Block"),
        pv("elsewhere", "2Gi", nodeAffinity=hostname_affinity("n2")),
    ]
    found = find_matching_volume(claim, volumes, N1["labels"], set())
    assert found is not None and found["metadata"]["name"] == "fits"
    assert find_matching_volume(claim, volumes, N1["labels"], {"fits"})["metadata"]["name"] == "big"  # type: ignore[index]


def test_a_prebound_pv_wins_and_a_selector_filters() -> None:
    claim = pvc("c", selector={"matchLabels": {"tier": "gold"}})
    prebound = pv("mine", "5Gi", claimRef={"namespace": "default", "name": "c"}, phase="Pending")
    gold = pv("gold", labels={"tier": "gold"})
    plain = pv("plain")
    assert find_matching_volume(claim, [plain, gold, prebound], {}, set())["metadata"]["name"] == "mine"  # type: ignore[index]
    assert find_matching_volume(claim, [plain, gold], {}, set())["metadata"]["name"] == "gold"  # type: ignore[index]
    taken = pv("taken", claimRef={"namespace": "default", "name": "other"})
    assert find_matching_volume(pvc("c"), [taken], {}, set()) is None


def test_claims_are_classified_as_prefilter_does() -> None:
    bound = pvc("bound", volumeName="v", annotations={"pv.kubernetes.io/bind-completed": "yes"})
    store = store_of(WFFC, (PERSISTENT_VOLUME_CLAIM, bound), (PERSISTENT_VOLUME_CLAIM, pvc("late")))
    claims = pod_claims(pod(uses("bound"), uses("late")), store)
    assert claims.error == "" and len(claims.bound) == 1 and len(claims.to_bind) == 1
    assert pod_claims(pod(uses("nope")), store).error == 'persistentvolumeclaim "nope" not found'
    immediate = store_of((PERSISTENT_VOLUME_CLAIM, pvc("c", storageClassName="")))
    assert pod_claims(pod(uses("c")), immediate).error == REASON_UNBOUND_IMMEDIATE
    ephemeral = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}
    assert pod_claims(pod(ephemeral), store).error == (
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch"'
    )


def test_node_verdicts_and_bindings() -> None:
    bound = pvc("bound", volumeName="local-n1", annotations={"pv.kubernetes.io/bind-completed": "yes"})
    dangling = pvc("dangling", volumeName="gone", annotations={"pv.kubernetes.io/bind-completed": "yes"})
    store = store_of(
        WFFC,
        (PERSISTENT_VOLUME, pv("local-n1", nodeAffinity=hostname_affinity("n1"), phase="Bound")),
        (PERSISTENT_VOLUME, pv("free-n1", nodeAffinity=hostname_affinity("n1"))),
        (PERSISTENT_VOLUME_CLAIM, bound),
        (PERSISTENT_VOLUME_CLAIM, dangling),
        (PERSISTENT_VOLUME_CLAIM, pvc("late")),
    )
    claims = pod_claims(pod(uses("bound"), uses("late")), store)
    verdicts, bindings = find_pod_volumes(claims, store, N1)
    assert verdicts == {"bound": "", "late": ""}
    assert bindings.static == (StaticBinding("free-n1", "default/late"),)
    assert bindings.claims == ("default/bound", "default/late")
    verdicts, _ = find_pod_volumes(claims, store, N2)
    assert verdicts == {"bound": REASON_NODE_CONFLICT, "late": REASON_BIND_CONFLICT}
    verdicts, _ = find_pod_volumes(pod_claims(pod(uses("dangling")), store), store, N1)
    assert verdicts == {"dangling": REASON_PV_NOT_EXIST}


def test_selected_node_and_provisioning() -> None:
    topology = [{"matchLabelExpressions": [{"key": "kubernetes.io/hostname", "values": ["n2"]}]}]
    csi = (
        STORAGE_CLASS,
        {
            "metadata": {"name": "csi"},
            "provisioner": "csi.example.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": topology,
        },
    )
    store = store_of(csi, (PERSISTENT_VOLUME_CLAIM, pvc("c", storageClassName="csi")))
    claims = pod_claims(pod(uses("c")), store)
    assert find_pod_volumes(claims, store, N1)[0] == {"c": REASON_BIND_CONFLICT}
    verdicts, bindings = find_pod_volumes(claims, store, N2)
    assert verdicts == {"c": ""} and bindings.provision == ("default/c",)
    selected = pvc("c", storageClassName="csi", annotations={ANN_SELECTED_NODE: "n1"})
    store.upsert(PERSISTENT_VOLUME_CLAIM, selected)
    claims = pod_claims(pod(uses("c")), store)
    assert find_pod_volumes(claims, store, N1)[0] == {"c": ""}
    assert find_pod_volumes(claims, store, N2)[0] == {"c": REASON_BIND_CONFLICT}


def test_assume_marks_and_forget_restores() -> None:
    store = store_of(WFFC, (PERSISTENT_VOLUME, pv("v")), (PERSISTENT_VOLUME_CLAIM, pvc("c")))
    bindings = PodVolumeBindings(node="n1", static=(StaticBinding("v", "default/c"),), claims=("default/c",))
    store.assume("default/p", bindings)
    assumed = store.volume("v")
    assert assumed is not None and assumed["spec"]["claimRef"]["name"] == "c"
    # another claim can no longer take it
    assert find_matching_volume(pvc("other"), list(store.volumes()), {}, set()) is None
    store.forget("default/p")
    restored = store.volume("v")
    assert restored is not None and "claimRef" not in restored["spec"]


def test_disks_conflict_unless_both_read_only() -> None:
    rbd = {"name": "r", "rbd": {"monitors": ["m1", "m2"], "image": "img", "readOnly": True}}
    assert pod_disks(pod(rbd)) == [
        {"id": "rbd/m1/rbd/img", "readOnly": True},
        {"id": "rbd/m2/rbd/img", "readOnly": True},
    ]
    ebs = {"name": "e", "awsElasticBlockStore": {"volumeID": "vol-1", "readOnly": True}}
    rbd_rw = {"name": "r", "rbd": {"monitors": ["m2"], "image": "img"}}
    assert node_disks([pod(rbd), pod(ebs, name="q")]) == {
        "rbd/m1/rbd/img": True,
        "rbd/m2/rbd/img": True,
        "aws-ebs/vol-1": False,
    }
    assert node_disks([pod(rbd), pod(rbd_rw, name="q")])["rbd/m2/rbd/img"] is False


def test_limits_count_unique_volumes_and_follow_migration() -> None:
    def ebs(volume_id: str) -> dict[str, Any]:
        return {"name": volume_id, "awsElasticBlockStore": {"volumeID": volume_id}}

    node = {"name": "n1", "labels": {"node.kubernetes.io/instance-type": "m5.large"}, "allocatable": {}}
    store = VolumeStore()
    running = [pod(ebs("a"), ebs("b"), name="r")]
    assert volume_limit(pod(ebs("b"), ebs("c")), node, running, store, "kubernetes.io/aws-ebs") == {
        "key": "attachable-volumes-aws-ebs",
        "limit": 25,  # a Nitro instance type
        "attached": 2,
        "requested": 1,
    }
    csinode = {
        "metadata": {
            "name": "n1",
            "annotations": {"storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs"},
        },
        "spec": {"drivers": [{"name": "ebs.csi.aws.com", "allocatable": {"count": 3}}]},
    }
    store.upsert("CSINode", csinode)
    got = volume_limit(pod(ebs("b"), ebs("c")), node, running, store, "kubernetes.io/aws-ebs")
    assert got == {"key": "ebs.csi.aws.com", "limit": 3, "attached": 2, "requested": 1}


def test_zones_of_bound_volumes() -> None:
    bound = pvc("c", volumeName="v", annotations={"pv.kubernetes.io/bind-completed": "yes"})
    labels = {"failure-domain.beta.kubernetes.io/zone": "a__b", "topology.kubernetes.io/region": "r"}
    store = store_of(
        WFFC,
        (PERSISTENT_VOLUME, pv("v", labels=labels)),
        (PERSISTENT_VOLUME_CLAIM, bound),
        (PERSISTENT_VOLUME_CLAIM, pvc("late")),
    )
    zones, error = volume_topologies(pod(uses("c"), uses("late")), store)
    assert error == ""
    assert zones == [
        {
            "key": "failure-domain.beta.kubernetes.io/zone",
            "gaKey": "topology.kubernetes.io/zone",
            "values": ["a", "b"],
        },
        {"key": "topology.kubernetes.io/region", "gaKey": "topology.kubernetes.io/region", "values": ["r"]},
    ]
    missing = pvc("m", volumeName="gone", annotations={"pv.kubernetes.io/bind-completed": "yes"})
    store.upsert(PERSISTENT_VOLUME_CLAIM, missing)
    assert volume_topologies(pod(uses("m")), store) == ([], 'persistentvolume "gone" not found')


def test_csi_limit_from_the_csinode_else_node_allocatable() -> None:
    bound = pvc("c", volumeName="v", annotations={"pv.kubernetes.io/bind-completed": "yes"})
    store = store_of(
        (PERSISTENT_VOLUME, pv("v", csi={"driver": "d.example.com", "volumeHandle": "h"})),
        (PERSISTENT_VOLUME_CLAIM, bound),
    )
    node = {"name": "n1", "allocatable": {"attachable-volumes-csi-d.example.com": 4}}
    assert volume_limit(pod(uses("c")), node, [], store, "d.example.com") == {
        "key": "d.example.com",
        "limit": 4,
        "attached": 0,
        "requested": 1,
    }
    store.upsert(
        "CSINode",
        {
            "metadata": {"name": "n1"},
            "spec": {"drivers": [{"name": "d.example.com", "allocatable": {"count": 2}}]},
        },
    )
    assert volume_limit(pod(uses("c")), node, [], store, "d.example.com")["limit"] == 2
    assert volume_limit(pod(uses("c")), {"name": "n2"}, [], store, "d.example.com")["limit"] == -1
