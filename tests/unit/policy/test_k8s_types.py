"""The declared CEL types of pod/node match the runtime dicts built by cluster/objects.py (the contract guard)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import kubernetes.client as k8s_client
import pytest

from policyd.cel.types import (
    BOOL,
    DYN,
    INT,
    STRING,
    TIMESTAMP,
    CelType,
    ListType,
    MapType,
    ObjectType,
)
from policyd.cel.values import Timestamp
from policyd.policy import k8s_types as kt
from policyd.scheduler.cluster.objects import node_info, pod_info
from tests.builders import (
    make_container,
    make_node,
    make_pod,
    make_sidecar,
    node_affinity,
    pod_affinity,
    pod_affinity_term,
    port,
    spread_constraint,
    taint,
    toleration,
)


def type_errors(value: Any, t: CelType, path: str) -> Iterator[str]:
    """Every place where `value` is not a runtime value of declared type `t`."""
    if isinstance(t, type(DYN)):
        return
    if t == STRING:
        ok = isinstance(value, str)
    elif t == INT:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif t == BOOL:
        ok = isinstance(value, bool)
    elif t == TIMESTAMP:
        ok = isinstance(value, Timestamp)
    elif isinstance(t, ListType):
        ok = isinstance(value, list | tuple)
        if ok:
            for i, v in enumerate(value):
                yield from type_errors(v, t.elem, f"{path}[{i}]")
    elif isinstance(t, MapType):
        ok = isinstance(value, Mapping)
        if ok:
            for k, v in value.items():
                yield from type_errors(k, t.key, f"{path} key {k!r}")
                yield from type_errors(v, t.value, f"{path}[{k!r}]")
    elif isinstance(t, ObjectType):
        ok = isinstance(value, Mapping)
        if ok:
            for k, v in value.items():
                ft = t.field_type(k)
                if ft is None:
                    yield f"{path}.{k}: not declared in {t.name}"
                else:
                    yield from type_errors(v, ft, f"{path}.{k}")
    else:
        ok = False
    if not ok:
        yield f"{path}: {type(value).__name__} is not {t}"


def rich_pod(**kw: Any) -> dict[str, Any]:
    """A pod using every scheduling-relevant feature."""
    return make_pod(
        "rich",
        namespace="team-a",
        containers=[
            make_container(
                "app",
                "500m",
                "1Gi",
                image="nginx",
                extended={"nvidia.com/gpu": 1},
                limits={"cpu": "1"},
                ports=[port(8080, 80, host_ip="10.0.0.1")],
            )
        ],
        init=[make_container("setup", "1"), make_sidecar("proxy", "100m", ports=[15001])],
        overhead={"cpu": "10m"},
        labels={"app": "web"},
        annotations={"note": "x"},
        tolerations=[toleration("gpu", "true", "NoSchedule", seconds=60), toleration()],
        affinity={
            **node_affinity(
                required=[[("zone", "In", ["a"]), ("gen", "Gt", ["3"])]],
                preferred=[(10, [("disk", "Exists", [])])],
                required_fields=[[("metadata.name", "NotIn", ["n9"])]],
            ),
            **pod_affinity(
                required=[pod_affinity_term({"app": "db"}, namespaces=["data"])],
                preferred=[(5, pod_affinity_term({"app": "cache"}))],
                anti_required=[pod_affinity_term({"app": "web"}, expressions=[("tier", "DoesNotExist", [])])],
                anti_preferred=[(1, pod_affinity_term({"app": "web"}, "topology.kubernetes.io/zone"))],
            ),
        },
        node_selector={"disk": "ssd"},
        spread=[spread_constraint({"app": "web"}, min_domains=2)],
        priority=100,
        priority_class="high",
        preemption_policy="Never",
        node_name="n1",
        nominated_node_name="n1",
        scheduler_name="policyd",
        start_time="2024-01-01T00:00:05Z",
        owner="ReplicaSet/web-1",
        deleting=True,
        **kw,
    )


def rich_node() -> dict[str, Any]:
    node = make_node(
        "n1",
        zone="a",
        taints=[taint("gpu", "true"), taint("spot", effect="PreferNoSchedule")],
        images=[(["nginx:latest", "docker.io/library/nginx:latest"], 1000)],
        extended={"nvidia.com/gpu": 4, "hugepages-2Mi": "1Gi"},
        unschedulable=True,
    )
    node["spec"]["taints"][0]["timeAdded"] = "2024-01-01T00:00:00Z"
    node["status"]["addresses"] = [{"type": "InternalIP", "address": "10.0.0.1"}]
    node["status"]["nodeInfo"] = {"architecture": "amd64", "kubeletVersion": "v1.30.0"}
    node["metadata"]["annotations"] = {"a": "b"}
    return node


def test_rich_pod_cel_dict_matches_declared_type() -> None:
    pv = pod_info(rich_pod())
    assert list(type_errors(pv.cel, kt.POD, "pod")) == []


def test_rich_pod_sets_every_declared_pod_field() -> None:
    pod = rich_pod()
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    cel = pod_info(pod).cel
    assert set(kt.POD.fields) == set(cel)
    assert list(type_errors(cel, kt.POD, "pod")) == []


def test_node_with_pods_matches_declared_type() -> None:
    ns = node_info(rich_node())
    ns.add_pod(pod_info(rich_pod()))
    ns.add_pod(pod_info(make_pod("plain", node_name="n1")))
    assert set(kt.NODE.fields) == set(ns.cel)
    assert list(type_errors(ns.cel, kt.NODE, "node")) == []
    assert list(type_errors(ns.clone_without([]).cel, kt.NODE, "node")) == []


def test_minimal_objects_match_declared_types() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    assert list(type_errors(pod_info(pod).cel, kt.POD, "pod")) == []
    assert list(type_errors(node_info({"metadata": {"name": "n"}}).cel, kt.NODE, "node")) == []


def test_the_walker_catches_mismatches() -> None:
    cel = dict(pod_info(rich_pod()).cel)
    cel["priority"] = "100"
    cel["bogus"] = 1
    errors = list(type_errors(cel, kt.POD, "pod"))
    assert any("pod.priority" in e for e in errors)
    assert any("pod.bogus" in e for e in errors)


def _k8s_types() -> list[ObjectType]:
    return [v for v in vars(kt).values() if isinstance(v, ObjectType) and v.name.startswith("k8s.")]


@pytest.mark.parametrize("obj_type", _k8s_types(), ids=lambda t: t.name)
def test_field_names_are_kubernetes_json_names(obj_type: ObjectType) -> None:
    short = obj_type.name.removeprefix("k8s.")
    model = getattr(k8s_client, f"V1{short}", None)
    if short == "HostPort":  # policyd's own shape: the host-port triple of a ContainerPort
        model = k8s_client.V1ContainerPort
    assert model is not None, f"no Kubernetes model for {short}"
    json_names = set(model.attribute_map.values())
    assert set(obj_type.fields) <= json_names


def test_policy_variables_and_size_hints() -> None:
    variables = kt.policy_variables()
    assert variables == {"pod": kt.POD, "node": kt.NODE, "victim": kt.POD}
    for path, size in kt.SIZE_HINTS.items():
        var, *fields = path.split(".")
        t: CelType | None = variables[var]
        for f in fields:
            assert isinstance(t, ObjectType), path
            t = t.field_type(f)
        assert isinstance(t, ListType | MapType), path
        assert size > 0
    assert kt.SIZE_HINTS["node.pods"] == 110
