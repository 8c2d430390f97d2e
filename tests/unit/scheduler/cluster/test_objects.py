"""PodInfo and NodeInfo at the cache boundary: effective requests, CEL dicts, incremental accounting."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policyd.cel.values import Timestamp
from policyd.errors import ClusterDataError
from policyd.scheduler.cluster import projection
from policyd.scheduler.cluster.objects import (
    NodeInfo,
    PodInfo,
    node_info,
    normalized_image_name,
    pod_info,
    pod_info_update,
)
from policyd.scheduler.cluster.projection import parse_time
from tests.builders import (
    make_container,
    make_node,
    make_pod,
    make_sidecar,
    node_affinity,
    pod_affinity_term,
    port,
    spread_constraint,
    taint,
    toleration,
)

GI = 1024**3
MI = 1024**2
_ALWAYS = ("cpu", "memory", "ephemeral-storage")


# ------------------------------------------------------------------------------------------ pods


def test_single_container_requests_in_policyd_units() -> None:
    pv = pod_info(make_pod("p", cpu="500m", memory="1Gi"))
    assert pv.key == "default/p"
    assert pv.requests == {"cpu": 500, "memory": GI, "ephemeral-storage": 0}
    assert pv.cel["requests"] is pv.requests
    assert pv.non_zero_requests == {"cpu": 500, "memory": GI}


def test_pod_without_requests_gets_scoring_defaults_only_in_non_zero() -> None:
    pv = pod_info(make_pod("p", containers=[make_container("a"), make_container("b", cpu="0")]))
    assert pv.requests == {"cpu": 0, "memory": 0, "ephemeral-storage": 0}
    # container a: both defaults; container b: explicit cpu 0 is kept, memory defaulted
    assert pv.non_zero_requests == {"cpu": 100, "memory": 2 * 200 * MI}


def test_containers_add_and_init_containers_take_the_max() -> None:
    pod = make_pod(
        "p",
        containers=[make_container("a", "200m", "100Mi"), make_container("b", "300m", "100Mi")],
        init=[make_container("i1", "1", "50Mi"), make_container("i2", "100m", "1Gi")],
    )
    pv = pod_info(pod)
    assert pv.requests["cpu"] == 1000
    assert pv.requests["memory"] == GI


def test_restartable_init_containers_follow_kep_753() -> None:
    pod = make_pod(
        "p",
        containers=[make_container("app", "100m")],
        init=[
            make_sidecar("s1", "200m"),
            make_container("i1", "500m"),
            make_sidecar("s2", "300m"),
            make_container("i2", "100m"),
        ],
    )
    # steady state 100+200+300 = 600; i1 runs beside s1: 500+200 = 700 is the peak
    assert pod_info(pod).requests["cpu"] == 700
    pod["spec"]["initContainers"][1]["resources"]["requests"]["cpu"] = "50m"
    # now the steady state dominates: i1 + s1 = 250, i2 + s1 + s2 = 600
    assert pod_info(pod).requests["cpu"] == 600


def test_overhead_is_added_to_requests_and_non_zero() -> None:
    pv = pod_info(make_pod("p", cpu="1", overhead={"cpu": "250m", "memory": "120Mi"}))
    assert pv.requests["cpu"] == 1250
    assert pv.requests["memory"] == 120 * MI
    assert pv.non_zero_requests == {"cpu": 1250, "memory": 200 * MI + 120 * MI}


def test_limits_stand_in_for_missing_requests_and_are_summed() -> None:
    pod = make_pod(
        "p",
        containers=[
            make_container("a", limits={"cpu": "2", "memory": "1Gi"}),
            make_container("b", cpu="100m", limits={"cpu": "1"}),
        ],
    )
    pv = pod_info(pod)
    assert pv.requests["cpu"] == 2100
    assert pv.requests["memory"] == GI
    assert pv.cel["limits"] == {"cpu": 3000, "memory": GI}


def test_pod_level_resources_replace_the_containers_aggregate() -> None:
    pod = make_pod(
        "p",
        containers=[
            make_container("a", "200m", "100Mi", extended={"nvidia.com/gpu": 1}),
            make_container("b"),
        ],
        overhead={"cpu": "50m"},
    )
    pod["spec"]["resources"] = {"requests": {"cpu": "1", "nvidia.com/gpu": "4"}, "limits": {"memory": "1Gi"}}
    pv = pod_info(pod)
    # cpu from the pod level, then the overhead; a resource the pod level cannot carry stays the
    # containers'; memory: a container requests it, so its pod-level request defaults to the aggregate
    assert pv.requests["cpu"] == 1050
    assert pv.requests["nvidia.com/gpu"] == 1
    assert pv.requests["memory"] == 100 * MI
    # scoring: the pod-level cpu, memory with container b's scoring default
    assert pv.non_zero_requests == {"cpu": 1050, "memory": 100 * MI + 200 * MI}
    assert pv.cel["limits"]["memory"] == GI
    assert pv.cel["spec"]["resources"]["requests"]["cpu"] == "1"


def test_a_pod_level_limit_is_the_request_when_no_container_requests_the_resource() -> None:
    pod = make_pod(
        "p", containers=[make_container("a"), make_container("b", extended={"hugepages-2Mi": "2Mi"})]
    )
    pod["spec"]["resources"] = {"limits": {"cpu": "2", "memory": "512Mi", "hugepages-2Mi": "8Mi"}}
    pv = pod_info(pod)
    assert (pv.requests["cpu"], pv.requests["memory"]) == (2000, 512 * MI)
    assert pv.non_zero_requests == {"cpu": 2000, "memory": 512 * MI}
    # hugepages cannot be overcommitted: the pod-level limit is the request even where a container asks
    assert pv.requests["hugepages-2Mi"] == 8 * MI


def _resized(spec_cpu: str, allocated: str | None, actual: str | None, infeasible: bool = False) -> PodInfo:
    pod = make_pod("p", containers=[make_container("a", spec_cpu, "100Mi"), make_container("b", "100m")])
    status: dict[str, Any] = {"containerStatuses": [{"name": "b", "allocatedResources": {"cpu": "100m"}}]}
    a: dict[str, Any] = {"name": "a"}
    if allocated is not None:
        a["allocatedResources"] = {"cpu": allocated, "memory": "100Mi"}
    if actual is not None:
        a["resources"] = {"requests": {"cpu": actual, "memory": "100Mi"}}
    status["containerStatuses"].append(a)
    if infeasible:
        status["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]
    pod["status"] = status
    return pod_info(pod)


def test_a_pod_resized_in_place_counts_the_most_of_spec_allocated_and_actual() -> None:
    # scaling up: the spec asks 2 while the containers still run with 500m
    assert _resized("2", "500m", "500m").requests["cpu"] == 2100
    # scaling down: the spec asks 200m, the kubelet still holds 1 for it
    assert _resized("200m", "1", "1").requests["cpu"] == 1100
    assert _resized("200m", "200m", "700m").requests["cpu"] == 800
    # the resize cannot be done: the spec no longer counts, what runs does
    assert _resized("4", "1", "1", infeasible=True).requests["cpu"] == 1100
    # allocated but not reported as running: the allocation stands in for it
    assert _resized("200m", "300m", None).non_zero_requests["cpu"] == 400


def test_a_status_only_resize_update_recomputes_the_requests() -> None:
    before = _resized("200m", "200m", "200m")
    after = pod_info_update(before, _resized("200m", "200m", "900m").raw)
    assert after.requests["cpu"] == 1000 and before.requests["cpu"] == 300


def test_extended_and_hugepages_resources_are_units_and_bytes() -> None:
    pv = pod_info(make_pod("p", cpu="1", extended={"nvidia.com/gpu": 2, "hugepages-2Mi": "64Mi"}))
    assert pv.requests["nvidia.com/gpu"] == 2
    assert pv.requests["hugepages-2Mi"] == 64 * MI


def test_amounts_beyond_64_bit_integers_are_refused_naming_the_object_and_resource() -> None:
    """kube-scheduler's int64 `MilliValue` of `10Ei` cpu wraps around to a negative number and numpy's
    int64 columns cannot hold it: the object is refused at the cache boundary, as other bad data is."""
    with pytest.raises(
        ClusterDataError, match=r"^node n1: status\.capacity\.cpu: 9223372036854775807000 mill"
    ):
        node_info(make_node("n1", cpu="10Ei"))
    assert (
        node_info(make_node("n1", cpu="9007199254740991", memory="10Ei")).allocatable["memory"] == 2**63 - 1
    )
    # each container's 5P cpu fits (5 * 10^18 millicores), their sum does not
    two = make_pod("x", containers=[make_container("a", cpu="5P"), make_container("b", cpu="5P")])
    with pytest.raises(
        ClusterDataError, match=r"^pod default/x: requests\.cpu: 10000000000000000000 millicores"
    ):
        pod_info(two)


def test_fractional_cpu_rounds_up_after_summing_exactly() -> None:
    pod = make_pod("p", containers=[make_container("a", "0.0005"), make_container("b", "0.0005")])
    assert pod_info(pod).requests["cpu"] == 1


def test_host_ports_default_ip_and_protocol_and_include_sidecars() -> None:
    pod = make_pod(
        "p",
        containers=[
            make_container(
                "a", ports=[8080, {"containerPort": 80}, port(53, protocol="UDP", host_ip="10.0.0.1")]
            )
        ],
        init=[make_sidecar("s", ports=[9090]), make_container("i", ports=[7070])],
    )
    pv = pod_info(pod)
    assert pv.cel["hostPorts"] == [
        {"hostIP": "0.0.0.0", "hostPort": 8080, "protocol": "TCP"},
        {"hostIP": "10.0.0.1", "hostPort": 53, "protocol": "UDP"},
        {"hostIP": "0.0.0.0", "hostPort": 9090, "protocol": "TCP"},
    ]
    assert pv.host_ports[1] == ("10.0.0.1", 53, "UDP")


@pytest.mark.parametrize(
    ("image", "normalised"),
    [
        ("nginx", "nginx:latest"),
        ("nginx:1.25", "nginx:1.25"),
        ("registry:5000/team/app", "registry:5000/team/app:latest"),
        ("registry:5000/team/app:v2", "registry:5000/team/app:v2"),
        ("busybox@sha256:abcd", "busybox@sha256:abcd"),
    ],
)
def test_image_names_are_normalised(image: str, normalised: str) -> None:
    assert normalized_image_name(image) == normalised
    assert pod_info(make_pod("p", image=image)).images == (normalised,)


def test_defaults_of_scheduling_fields() -> None:
    pv = pod_info(make_pod("p", namespace="ns1"))
    assert (pv.priority, pv.scheduler_name, pv.preemption_policy) == (
        0,
        "default-scheduler",
        "PreemptLowerPriority",
    )
    assert (pv.node_name, pv.nominated_node_name, pv.owner_key, pv.deleting) == ("", "", "", False)
    cel = pv.cel
    assert cel["priority"] == 0 and cel["schedulerName"] == "default-scheduler"
    assert cel["nodeName"] == "" and cel["nominatedNodeName"] == ""
    assert "affinity" not in cel and "topologySpreadConstraints" not in cel
    assert cel["tolerations"] == [] and cel["nodeSelector"] == {}
    assert cel["startTime"] == Timestamp(0)
    assert pv.start_time is None


def test_scheduling_fields_are_read() -> None:
    aff = node_affinity(required=[[("zone", "In", ["a", "b"])]])
    pv = pod_info(
        make_pod(
            "p",
            priority=1000,
            preemption_policy="Never",
            scheduler_name="policyd",
            node_name="n1",
            nominated_node_name="n2",
            owner="ReplicaSet/web-7d9",
            deleting=True,
            labels={"app": "web"},
            tolerations=[toleration("gpu", "true", "NoSchedule", seconds=30)],
            affinity=aff,
            node_selector={"disk": "ssd"},
            spread=[spread_constraint({"app": "web"})],
            creation="2024-03-01T10:00:00.5+01:00",
        )
    )
    assert pv.priority == 1000 and pv.preemption_policy == "Never" and pv.scheduler_name == "policyd"
    assert (pv.node_name, pv.nominated_node_name) == ("n1", "n2")
    assert pv.owner_key == "ReplicaSet/web-7d9"
    assert pv.deleting
    assert pv.creation_timestamp == datetime(2024, 3, 1, 9, 0, 0, 500000, tzinfo=UTC).timestamp()
    cel = pv.cel
    assert cel["tolerations"][0] == {
        "key": "gpu",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
        "tolerationSeconds": 30,
    }
    assert cel["affinity"] == aff
    assert cel["nodeSelector"] == {"disk": "ssd"}
    assert cel["topologySpreadConstraints"][0]["maxSkew"] == 1
    assert cel["creationTimestamp"].datetime() == datetime(2024, 3, 1, 9, 0, 0, 500000, tzinfo=UTC)
    assert cel["metadata"]["creationTimestamp"] == cel["creationTimestamp"]
    assert cel["phase"] == "Running"


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:01.000000001Z", 1_000_000_001),
        ("1970-01-01T01:00:00+01:00", 0),
        ("2024-01-01T00:00:00.25-00:30", (19723 * 86400 + 1800) * 10**9 + 250_000_000),
    ],
)
def test_timestamps_are_exact_nanoseconds(text: str, ns: int) -> None:
    assert parse_time(text) == ns
    pv = pod_info(make_pod("p", creation=text))
    assert pv.cel["creationTimestamp"] == Timestamp(ns)
    assert pv.creation_timestamp == ns / 10**9


def test_times_of_many_pods_are_each_their_own_text() -> None:
    """Parsed times are kept by text: pods sharing a creation time read it alike, and pods of more
    distinct times than are kept each read their own (the table is emptied when full)."""
    texts = [f"2024-01-01T00:00:{s:02d}Z" for s in range(10)] * 3
    want = [(19723 * 86400 + i % 10) * 10**9 for i in range(len(texts))]
    with mock.patch.object(projection, "MAX_PARSED_TIMES", 4):
        got = [pod_info(make_pod(f"p{i}", creation=t)).cel["creationTimestamp"] for i, t in enumerate(texts)]
        assert len(projection._parsed_times) <= 4
    assert got == [Timestamp(ns) for ns in want]
    with pytest.raises(ClusterDataError, match="creationTimestamp"):
        pod_info(make_pod("bad", creation="2024-13-01T00:00:00Z"))
    with pytest.raises(ClusterDataError, match="creationTimestamp"):  # an invalid text is never kept
        pod_info(make_pod("bad", creation="2024-13-01T00:00:00Z"))


def test_yaml_datetimes_are_accepted() -> None:
    pod = make_pod("p")
    pod["metadata"]["creationTimestamp"] = datetime(2024, 1, 1)  # what yaml.safe_load produces
    assert pod_info(pod).cel["creationTimestamp"].datetime() == datetime(2024, 1, 1, tzinfo=UTC)


def test_namespace_defaults_and_raw_is_kept() -> None:
    pod = make_pod("p")
    del pod["metadata"]["namespace"]
    pv = pod_info(pod)
    assert pv.key == "default/p" and pv.cel["metadata"]["namespace"] == "default"
    assert pv.raw is pod


def test_spec_quantities_stay_strings_and_unknown_fields_are_dropped() -> None:
    pod = make_pod("p", cpu="1")
    pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = 1024  # a YAML integer
    pod["spec"]["containers"][0]["livenessProbe"] = {"exec": {"command": ["true"]}}
    cel = pod_info(pod).cel
    assert cel["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1024"}
    assert "livenessProbe" not in cel["spec"]["containers"][0]


def test_with_node_copies_without_touching_the_original() -> None:
    pv = pod_info(make_pod("p", cpu="1"))
    bound = pv.with_node("n1")
    assert bound.node_name == "n1" and bound.cel["nodeName"] == "n1"
    assert pv.node_name == "" and pv.cel["nodeName"] == ""
    assert bound.with_nominated_node("n2").cel["nominatedNodeName"] == "n2"


def test_missing_name_is_a_cluster_data_error() -> None:
    pod = make_pod("p")
    del pod["metadata"]["name"]
    with pytest.raises(ClusterDataError, match="metadata.name"):
        pod_info(pod)


def test_malformed_quantity_names_object_and_field() -> None:
    pod = make_pod("p", cpu="lots", namespace="team")
    with pytest.raises(ClusterDataError) as info:
        pod_info(pod)
    msg = str(info.value)
    assert "team/p" in msg and "spec.containers[0].resources.requests.cpu" in msg and "lots" in msg


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        (("spec", "priority"), "high", "spec.priority"),
        (("metadata", "creationTimestamp"), "yesterday", "creationTimestamp"),
        (("spec", "tolerations"), {"key": "x"}, "spec.tolerations"),
        (("spec", "hostNetwork"), "yes", "spec.hostNetwork"),
        (
            ("spec", "tolerations"),
            [{"key": "a"}, {"key": "b", "tolerationSeconds": "soon"}],
            "spec.tolerations[1].tolerationSeconds: expected an integer",
        ),
        (
            ("spec", "nodeSelector"),
            {"zone": "a", "disk": ["ssd"]},
            "spec.nodeSelector.disk: expected a string",
        ),
    ],
)
def test_wrongly_typed_fields_are_reported(path: tuple[str, str], value: Any, fragment: str) -> None:
    pod = make_pod("p")
    pod[path[0]][path[1]] = value
    with pytest.raises(ClusterDataError, match=re.escape(fragment)):
        pod_info(pod)


# ------------------------------------------------------------------------------------------ nodes


def test_node_state_reads_node_fields() -> None:
    node = make_node(
        "n1",
        cpu="3500m",
        memory="16Gi",
        pods=50,
        zone="a",
        taints=[taint("gpu", "true")],
        images=[(["nginx:1.25", "docker.io/library/nginx:1.25"], 50_000_000)],
        extended={"nvidia.com/gpu": 4},
        unschedulable=True,
    )
    ns = node_info(node)
    assert ns.allocatable == {
        "cpu": 3500,
        "memory": 16 * GI,
        "pods": 50,
        "ephemeral-storage": 100 * GI,
        "nvidia.com/gpu": 4,
    }
    cel = ns.cel
    assert cel["labels"]["topology.kubernetes.io/zone"] == "a"
    assert cel["taints"] == [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]
    assert cel["images"] == {"nginx:1.25": 50_000_000, "docker.io/library/nginx:1.25": 50_000_000}
    assert cel["unschedulable"] is True and cel["ready"] is True
    assert cel["requested"]["pods"] == 0 and cel["requested"]["nvidia.com/gpu"] == 0
    assert cel["free"] == cel["allocatable"]
    assert cel["podCount"] == 0 and cel["pods"] == [] and cel["usedPorts"] == []
    assert node_info(make_node("n2", ready=False)).cel["ready"] is False


def test_allocatable_falls_back_to_capacity() -> None:
    node = make_node("n1", cpu="2")
    del node["status"]["allocatable"]
    assert node_info(node).cel["allocatable"]["cpu"] == 2000


def test_bad_nodes_are_reported() -> None:
    node = make_node("n1")
    node["status"]["allocatable"]["memory"] = "8 GB"
    with pytest.raises(ClusterDataError, match=r"node n1: status\.allocatable\.memory"):
        node_info(node)
    with pytest.raises(ClusterDataError, match="metadata.name"):
        node_info({"metadata": {}})


def _expected_allocation(ns: NodeInfo) -> dict[str, Any]:
    """Recompute the allocation part of a node's CEL dict from scratch."""
    requested = dict.fromkeys(ns.allocatable, 0)
    requested.update({"cpu": requested.get("cpu", 0), "memory": 0, "ephemeral-storage": 0})
    non_zero = {"cpu": 0, "memory": 0}
    for pv in ns.pods.values():
        for res, v in pv.requests.items():
            requested[res] = requested.get(res, 0) + v
        for res, v in pv.non_zero_requests.items():
            non_zero[res] += v
    requested["pods"] = len(ns.pods)
    return {
        "requested": requested,
        "nonZeroRequested": non_zero,
        "free": {k: v - requested[k] for k, v in ns.allocatable.items()},
        "podCount": len(ns.pods),
        "pods": sorted(pv.key for pv in ns.pods.values()),
    }


def _actual_allocation(ns: NodeInfo) -> dict[str, Any]:
    cel = ns.cel
    # a resource no pod requests any more may linger with 0 when the node does not offer it
    requested = {k: v for k, v in cel["requested"].items() if v or k in ns.allocatable or k in _ALWAYS}
    return {
        "requested": requested,
        "nonZeroRequested": cel["nonZeroRequested"],
        "free": cel["free"],
        "podCount": cel["podCount"],
        "pods": sorted(f"{p['namespace']}/{p['name']}" for p in cel["pods"]),
    }


def _used_ports(ns: NodeInfo) -> set[tuple[str, int, str]]:
    return {(p["hostIP"], p["hostPort"], p["protocol"]) for p in ns.cel["usedPorts"]}


_ANTI = {
    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_affinity_term({"app": "x"})]}
}


def _pod_pool() -> list[PodInfo]:
    return [
        pod_info(make_pod("a", cpu="500m", memory="1Gi", node_name="n1", ports=[80])),
        pod_info(make_pod("b", cpu="1", extended={"nvidia.com/gpu": 1}, node_name="n1", affinity=_ANTI)),
        pod_info(make_pod("c", node_name="n1", ports=[443, 80], affinity=_ANTI)),
        pod_info(make_pod("d", cpu="250m", memory="64Mi", init=[make_container("i", "2")], node_name="n1")),
        pod_info(make_pod("e", memory="2Gi", extended={"example.com/foo": 3}, node_name="n1")),
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=4)), max_size=25))
def test_incremental_accounting_matches_a_rebuild(ops: list[tuple[bool, int]]) -> None:
    pool = _pod_pool()
    ns = node_info(make_node("n1", extended={"nvidia.com/gpu": 2}))
    # kube-scheduler's HostPortInfo: a set, a removed pod's ports leave it (pods a and c share port 80)
    used: set[tuple[str, int, str]] = set()
    for add, i in ops:
        present = pool[i].key in ns.pods
        if present:  # removed (an add replaces the pod: remove, then add)
            used -= set(pool[i].host_ports)
        if add:
            used |= set(pool[i].host_ports)
            ns.add_pod(pool[i])
        else:
            assert ns.remove_pod(pool[i]) == present
        assert _actual_allocation(ns) == _expected_allocation(ns)
        assert _used_ports(ns) == used
        assert ns.affinity_pods == sum(1 for p in ns.pods.values() if p.key in ("default/b", "default/c"))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=4)), max_size=25))
def test_pods_keep_kube_schedulers_node_info_order(ops: list[tuple[bool, int]]) -> None:
    # kube-scheduler's NodeInfo.Pods is a Go slice: AddPod appends, RemovePod moves the last pod into
    # the removed one's place, and an update is a remove then an add
    pool = _pod_pool()
    ns = node_info(make_node("n1", extended={"nvidia.com/gpu": 2}))
    model: list[str] = []
    for add, i in ops:
        key = pool[i].key
        if key in model:
            at = model.index(key)
            model[at] = model[-1]
            model.pop()
        if add:
            model.append(key)
            ns.add_pod(pool[i])
        else:
            ns.remove_pod(pool[i])
        assert list(ns.pods) == model
        assert [c["name"] for c in ns.cel["pods"]] == [k.split("/")[1] for k in model]


@settings(max_examples=80, deadline=None)
@given(st.permutations(range(5)), st.lists(st.integers(min_value=0, max_value=4), max_size=6))
def test_removing_several_pods_at_once_is_removing_them_one_after_another(
    added: list[int], removed: list[int]
) -> None:
    pool = _pod_pool()
    ns = node_info(make_node("n1", extended={"nvidia.com/gpu": 2}))
    for i in added:
        ns.add_pod(pool[i])
    at_once = ns.clone_without([pool[i] for i in removed])
    one_by_one = ns.clone_without(())
    for i in removed:
        one_by_one.remove_pod(pool[i])
    assert list(at_once.pods) == list(one_by_one.pods)
    assert [c["name"] for c in at_once.cel["pods"]] == [c["name"] for c in one_by_one.cel["pods"]]
    assert _actual_allocation(at_once) == _expected_allocation(at_once) == _actual_allocation(one_by_one)
    assert _used_ports(at_once) == _used_ports(one_by_one)
    assert at_once.affinity_pods == one_by_one.affinity_pods == len({1, 2} & set(added) - set(removed))


def test_add_pod_twice_replaces_and_remove_reports_absence() -> None:
    ns = node_info(make_node("n1"))
    old = pod_info(make_pod("p", cpu="1", node_name="n1"))
    new = pod_info(make_pod("p", cpu="2", node_name="n1"))
    ns.add_pod(old)
    ns.add_pod(new)
    assert ns.cel["requested"]["cpu"] == 2000 and ns.cel["podCount"] == 1
    assert ns.cel["free"]["cpu"] == 2000 and ns.cel["free"]["pods"] == 109
    assert ns.remove_pod(old) is True  # removal is by key
    assert ns.remove_pod(old) is False
    assert ns.cel["requested"]["cpu"] == 0 and ns.cel["pods"] == []


def test_clone_without_and_with_pods_leave_the_original_alone() -> None:
    pool = _pod_pool()
    ns = node_info(make_node("n1", extended={"nvidia.com/gpu": 2}))
    for pv in pool[:3]:
        ns.add_pod(pv)
    before = _actual_allocation(ns)
    without = ns.clone_without([pool[0], pool[1]])
    assert _actual_allocation(without) == _expected_allocation(without)
    assert without.cel["requested"]["cpu"] == 0 and without.cel["podCount"] == 1
    assert without.cel["labels"] is ns.cel["labels"]  # node-level data is shared
    plus = ns.with_pods([pool[3]])
    assert plus.cel["podCount"] == 4
    assert _actual_allocation(plus) == _expected_allocation(plus)
    assert _actual_allocation(ns) == before


def test_used_ports_are_a_set_as_in_kube_scheduler() -> None:
    """Two pods bound to one node by name may declare one host port; removing either frees the port,
    as kube-scheduler's NodeInfo.RemovePod does (HostPortInfo.Remove), so a preemption evicting one of
    them lets a pod asking for the port in (differential run s53-44). A node update keeps them."""
    pool = _pod_pool()  # a: port 80; c: ports 443 and 80
    ns = node_info(make_node("n1", extended={"nvidia.com/gpu": 2}))
    for pv in pool[:3]:
        ns.add_pod(pv)
    port_80 = ("0.0.0.0", 80, "TCP")
    assert port_80 in _used_ports(ns)
    without_a = ns.clone_without([pool[0]])
    assert _used_ports(without_a) == {("0.0.0.0", 443, "TCP")}
    assert port_80 in _used_ports(ns)  # the original is left alone
    assert ns.remove_pod(pool[2])
    assert _used_ports(ns) == set()  # a still declares 80, yet it is free
    ns.update_node(make_node("n1", cpu="8", extended={"nvidia.com/gpu": 2}))
    assert _used_ports(ns) == set()
    ns.add_pod(pool[2])
    assert _used_ports(ns) == {port_80, ("0.0.0.0", 443, "TCP")}


def test_update_node_keeps_pods_and_updates_in_place() -> None:
    ns = node_info(make_node("n1", cpu="4"))
    cel = ns.cel
    ns.add_pod(pod_info(make_pod("p", cpu="1", node_name="n1", affinity=_ANTI)))
    ns.update_node(make_node("n1", cpu="8", labels={"tier": "gold"}, taints=[taint("t")]))
    assert ns.cel is cel
    assert cel["free"]["cpu"] == 7000 and cel["podCount"] == 1 and ns.affinity_pods == 1
    assert cel["labels"]["tier"] == "gold" and ns.taints[0]["key"] == "t"
    with pytest.raises(ClusterDataError):
        ns.update_node(make_node("other"))


def test_replace_pod_keeps_the_pods_place_and_recounts_it() -> None:
    n = node_info(make_node("n1", cpu="4"))
    a, b, c = (pod_info(make_pod(x, cpu="500m", node_name="n1")) for x in "abc")
    for pv in (a, b, c):
        n.add_pod(pv)
    bigger = pod_info(make_pod("a", cpu="1", node_name="n1", labels={"seen": "yes"}, ports=[8080]))
    n.replace_pod(bigger)
    assert list(n.pods) == [a.key, b.key, c.key]
    assert [p["metadata"]["name"] for p in n.cel["pods"]] == ["a", "b", "c"]
    assert n.cel["pods"][0] is bigger.cel
    assert n.cel["requested"]["cpu"] == 2000 and n.cel["requested"]["pods"] == 3
    assert [p["hostPort"] for p in n.cel["usedPorts"]] == [8080]
    n.replace_pod(pod_info(make_pod("a", cpu="500m", node_name="n1")))  # the port is gone again
    assert n.cel["usedPorts"] == [] and n.cel["requested"]["cpu"] == 1500
    n.add_pod(pod_info(make_pod("b", cpu="500m", node_name="n1")))  # adding again moves it last
    assert [p["metadata"]["name"] for p in n.cel["pods"]] == ["a", "c", "b"]
    d = pod_info(make_pod("d", cpu="250m", node_name="n1"))
    n.replace_pod(d)  # not on the node: added at the end
    assert list(n.pods)[-1] == d.key and n.cel["podCount"] == 4
