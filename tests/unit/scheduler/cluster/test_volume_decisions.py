"""The volume plugins' decisions one by one: PV matching, claim classification, disks, limits, zones,
and the store's assume / forget."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from policyd.scheduler.cluster.selectors import parse_label_selector
from policyd.scheduler.cluster.volume_binding import (
    REASON_BIND_CONFLICT,
    REASON_NODE_CONFLICT,
    REASON_NOT_ENOUGH_SPACE,
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
    CSI_DRIVER,
    CSI_STORAGE_CAPACITY,
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
    selected = pvc("c", storageClassName="csi", annotations={ANN_SELECTED_NODE: "n2"})
    store.upsert(PERSISTENT_VOLUME_CLAIM, selected)
    claims = pod_claims(pod(uses("c")), store)
    assert find_pod_volumes(claims, store, N2)[0] == {"c": ""}
    assert find_pod_volumes(claims, store, N1)[0] == {"c": REASON_BIND_CONFLICT}
    # a node selected for a claim is still checked as one to provision: here outside the class's topology
    store.upsert(
        PERSISTENT_VOLUME_CLAIM, pvc("c", storageClassName="csi", annotations={ANN_SELECTED_NODE: "n1"})
    )
    claims = pod_claims(pod(uses("c")), store)
    assert find_pod_volumes(claims, store, N1)[0] == {"c": REASON_BIND_CONFLICT}


CAPACITY_CLASS = (
    STORAGE_CLASS,
    {
        "metadata": {"name": "fast"},
        "provisioner": "csi.example.com",
        "volumeBindingMode": "WaitForFirstConsumer",
    },
)


def capacity(name: str, size: str | None, zone: str | None, **extra: Any) -> tuple[str, dict[str, Any]]:
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": "kube-system"}, "storageClassName": "fast"}
    if size is not None:
        obj["capacity"] = size
    if zone is not None:
        obj["nodeTopology"] = {"matchLabels": {"zone": zone}}
    return CSI_STORAGE_CAPACITY, {**obj, **extra}


def driver(storage_capacity: bool | None) -> tuple[str, dict[str, Any]]:
    spec = {} if storage_capacity is None else {"storageCapacity": storage_capacity}
    return CSI_DRIVER, {"metadata": {"name": "csi.example.com"}, "spec": spec}


Z1 = {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "zone": "z1"}}
Z2 = {"name": "n2", "labels": {"kubernetes.io/hostname": "n2", "zone": "z2"}}


def test_provisioning_needs_published_capacity_where_the_driver_asks_for_it() -> None:
    claim = (PERSISTENT_VOLUME_CLAIM, pvc("c", "10Gi", storageClassName="fast"))
    room = capacity("z1-room", "20Gi", "z1"), capacity("z2-small", "5Gi", "z2")

    def verdicts(*objects: tuple[str, dict[str, Any]]) -> list[str]:
        store = store_of(CAPACITY_CLASS, claim, *objects)
        claims = pod_claims(pod(uses("c")), store)
        return [find_pod_volumes(claims, store, node)[0]["c"] for node in (Z1, Z2)]

    # no CSIDriver, or one that does not opt in: capacity is not looked at
    assert verdicts(*room) == ["", ""]
    assert verdicts(driver(None), *room) == ["", ""]
    assert verdicts(driver(False), *room) == ["", ""]
    # opted in: the zone's capacity must hold the claim's 10Gi
    assert verdicts(driver(True), *room) == ["", REASON_NOT_ENOUGH_SPACE]
    assert verdicts(driver(True)) == [REASON_NOT_ENOUGH_SPACE] * 2
    # maximumVolumeSize, when given, is the limit rather than the capacity
    capped = capacity("z1-capped", "20Gi", "z1", maximumVolumeSize="8Gi")
    assert verdicts(driver(True), capped) == [REASON_NOT_ENOUGH_SPACE] * 2
    # exactly the size is enough; a capacity of another class, or without a topology, is not
    assert verdicts(driver(True), capacity("z2-exact", "10Gi", "z2")) == [REASON_NOT_ENOUGH_SPACE, ""]
    other = capacity("z1-other", "20Gi", "z1", storageClassName="slow")
    assert verdicts(driver(True), other, capacity("nowhere", "20Gi", None)) == [REASON_NOT_ENOUGH_SPACE] * 2
    # an empty node topology selects every node
    assert verdicts(driver(True), capacity("all", "1Ti", None, nodeTopology={})) == ["", ""]


def test_provisioning_stops_at_the_first_claim_it_cannot_provision() -> None:
    topology = [{"matchLabelExpressions": [{"key": "zone", "values": ["z1"]}]}]
    zonal = (
        STORAGE_CLASS,
        {**CAPACITY_CLASS[1], "metadata": {"name": "zonal"}, "allowedTopologies": topology},
    )
    store = store_of(
        CAPACITY_CLASS,
        zonal,
        driver(True),
        capacity("z1-room", "20Gi", "z1"),
        capacity("z1-zonal", "5Gi", "z1", storageClassName="zonal"),
        (PERSISTENT_VOLUME_CLAIM, pvc("big", "50Gi", storageClassName="fast")),
        (PERSISTENT_VOLUME_CLAIM, pvc("small", "1Gi", storageClassName="zonal")),
    )
    claims = pod_claims(pod(uses("big"), uses("small")), store)
    # smallest first: "small" cannot be provisioned in z2, so "big" is not looked at there
    assert find_pod_volumes(claims, store, Z2)[0] == {"small": REASON_BIND_CONFLICT, "big": ""}
    verdicts, bindings = find_pod_volumes(claims, store, Z1)
    assert verdicts == {"small": "", "big": REASON_NOT_ENOUGH_SPACE}
    assert bindings.provision == ("default/small",)


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


def test_capacity_lookup_follows_updates_and_every_selector_form() -> None:
    store = store_of(
        CAPACITY_CLASS, driver(True), (PERSISTENT_VOLUME_CLAIM, pvc("c", "10Gi", storageClassName="fast"))
    )
    claims = pod_claims(pod(uses("c")), store)

    def verdicts() -> list[str]:
        return [find_pod_volumes(claims, store, node)[0]["c"] for node in (Z1, Z2)]

    assert verdicts() == [REASON_NOT_ENOUGH_SPACE] * 2
    # added after the first lookup, then grown, then removed
    store.upsert(*capacity("z1", "5Gi", "z1"))
    assert verdicts() == [REASON_NOT_ENOUGH_SPACE] * 2
    store.upsert(*capacity("z1", "50Gi", "z1"))
    assert verdicts() == ["", REASON_NOT_ENOUGH_SPACE]
    store.remove(*capacity("z1", "50Gi", "z1"))
    assert verdicts() == [REASON_NOT_ENOUGH_SPACE] * 2
    # matchLabels on two keys must both match; matchExpressions alone select too
    both = capacity(
        "host-z2", "50Gi", None, nodeTopology={"matchLabels": {"zone": "z2", "kubernetes.io/hostname": "n1"}}
    )
    store.upsert(*both)
    assert verdicts() == [REASON_NOT_ENOUGH_SPACE] * 2
    expr = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}
    store.upsert(*capacity("z2-expr", "50Gi", None, nodeTopology=expr))
    assert verdicts() == [REASON_NOT_ENOUGH_SPACE, ""]


_ZONES = st.sampled_from(["z1", "z2"])
_HOSTS = st.sampled_from(["n1", "n2", "n3"])
_TOPOLOGIES = st.one_of(
    st.none(),
    st.just({}),
    st.builds(lambda z: {"matchLabels": {"zone": z}}, _ZONES),
    st.builds(lambda z, h: {"matchLabels": {"zone": z, "kubernetes.io/hostname": h}}, _ZONES, _HOSTS),
    st.builds(lambda z: {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": [z]}]}, _ZONES),
    st.builds(
        lambda h, z: {
            "matchLabels": {"kubernetes.io/hostname": h},
            "matchExpressions": [{"key": "zone", "operator": "In", "values": [z]}],
        },
        _HOSTS,
        _ZONES,
    ),
)


@given(
    st.lists(st.tuples(st.sampled_from(["fast", "slow"]), _TOPOLOGIES), max_size=8),
    st.sampled_from(["fast", "slow"]),
    st.fixed_dictionaries({"zone": _ZONES, "kubernetes.io/hostname": _HOSTS}),
)
def test_the_capacity_index_finds_what_a_scan_of_every_capacity_finds(
    capacities: list[tuple[str, Any]], cls: str, labels: dict[str, str]
) -> None:
    store = VolumeStore()
    for i, (name, topology) in enumerate(capacities):
        obj = {"metadata": {"name": f"c{i}", "namespace": "ns"}, "storageClassName": name, "capacity": "1Gi"}
        if topology is not None:
            obj["nodeTopology"] = topology
        store.upsert(CSI_STORAGE_CAPACITY, obj)
    found = {
        c.obj["metadata"]["name"] for c in store.capacities_near(cls, labels) if c.topology.matches(labels)
    }
    scanned = {
        f"c{i}"
        for i, (name, topology) in enumerate(capacities)
        if name == cls and topology is not None and parse_label_selector(topology).matches(labels)
    }
    assert found == scanned
