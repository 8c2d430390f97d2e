"""Cluster files are validated as the API server would: every violation names file, line, object, field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from policyd.backends.cluster_file import load_cluster_text
from policyd.errors import ClusterDataError


def node(name: str = "n1", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": status or {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }


def pod(name: str = "x", **spec: Any) -> dict[str, Any]:
    body = {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {**body, **spec}}


def errors(*objects: dict[str, Any]) -> list[str]:
    text = yaml.safe_dump_all(objects)
    with pytest.raises(ClusterDataError) as info:
        load_cluster_text(text, "c.yaml")
    return str(info.value).splitlines()


def resources(requests: dict[str, Any], limits: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    res: dict[str, Any] = {"requests": requests}
    if limits is not None:
        res["limits"] = limits
    return [{"name": "c", "image": "nginx", "resources": res}]


def test_a_valid_file_loads() -> None:
    loaded = load_cluster_text(yaml.safe_dump_all([node(), pod()]), "c.yaml")
    assert len(loaded.nodes) == 1 and len(loaded.pods) == 1


def test_invalid_quantity_names_file_line_object_and_field() -> None:
    bad = pod(containers=resources({"cpu": "abc"}))
    line = yaml.safe_dump_all([node(), bad]).splitlines().index("---") + 2  # the pod's first line
    assert errors(node(), bad) == [
        f'c.yaml:{line}: pod default/x: spec.containers[0].resources.requests.cpu: invalid quantity "abc"'
    ]


def test_negative_request_and_request_above_limit() -> None:
    bad = pod(containers=resources({"cpu": "-1", "memory": "2Gi"}, {"memory": "1Gi"}))
    assert [e.split(": ", 2)[2] for e in errors(bad)] == [
        'spec.containers[0].resources.requests.cpu: Invalid value: "-1": must be greater than or equal to 0',
        'spec.containers[0].resources.requests.memory: Invalid value: "2Gi": must be less than or equal to '
        "memory limit of 1Gi",
    ]


def test_pod_without_containers_and_without_spec() -> None:
    no_spec = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": "team"}}
    found = errors(pod("empty", containers=[]), no_spec)
    assert [e.split(": ", 1)[1] for e in found] == [
        "pod default/empty: spec.containers: Required value",
        "pod team/bare: spec: Required value",
    ]


def test_node_without_allocatable_or_capacity_and_bad_allocatable() -> None:
    found = errors(node("empty", conditions=[]), node("neg", allocatable={"cpu": "-2", "memory": "1Gx"}))
    assert [e.split(": ", 1)[1] for e in found] == [
        "node empty: status.allocatable: Required value: a node needs allocatable (or capacity) resources",
        'node neg: status.allocatable.cpu: Invalid value: "-2": must be greater than or equal to 0',
        'node neg: status.allocatable.memory: invalid quantity "1Gx"',
    ]


def test_shapes_enumerations_and_tolerations() -> None:
    bad = pod(
        tolerations=[{"key": "k", "operator": "Exists", "value": "v"}, {"operator": "Sometimes"}],
        topologySpreadConstraints=[
            {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
        ],
        priority="high",
    )
    found = [e.split(": ", 2)[2] for e in errors(bad)]
    assert found == [
        'spec.priority: Invalid value: "high": must be of type integer',
        'spec.tolerations[1].operator: Unsupported value: "Sometimes": supported values: "Exists", "Equal"',
        "spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than or equal to 1",
        "spec.tolerations[0].value: value must be empty when `operator` is 'Exists'",
        "spec.tolerations[1].operator: operator must be Exists when `key` is empty",
    ]


def test_pdb_with_both_bounds() -> None:
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b"},
        "spec": {"minAvailable": 1, "maxUnavailable": "x%"},
    }
    assert [e.split(": ", 1)[1] for e in errors(pdb)] == [
        "poddisruptionbudget default/b: spec: minAvailable and maxUnavailable cannot be both set",
        'poddisruptionbudget default/b: spec.maxUnavailable: Invalid value: "x%": must be an integer or a percentage',
    ]


def test_storage_capacity_sizes_are_quantities() -> None:
    bad = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": "fast-a", "namespace": "kube-system"},
        "storageClassName": "fast",
        "capacity": "lots",
        "maximumVolumeSize": "-1Gi",
    }
    found = errors(node(), bad)
    assert [e.split(": ", 1)[1] for e in found] == [
        'csistoragecapacity kube-system/fast-a: capacity: invalid quantity "lots"',
        'csistoragecapacity kube-system/fast-a: maximumVolumeSize: Invalid value: "-1Gi": must be greater than or equal to 0',
    ]


def test_pod_level_resources_load_and_their_quantities_are_checked() -> None:
    good = pod("x", resources={"requests": {"cpu": "2"}, "limits": {"memory": "1Gi"}})
    loaded = load_cluster_text(yaml.safe_dump_all([node(), good]), "c.yaml")
    assert loaded.pods[0]["spec"]["resources"]["requests"]["cpu"] == "2"
    found = errors(node(), pod("y", resources={"requests": {"cpu": "lots"}}))
    assert [e.split(": ", 1)[1] for e in found] == [
        'pod default/y: spec.resources.requests.cpu: invalid quantity "lots"'
    ]


def test_resize_status_quantities_are_checked() -> None:
    bad = pod("z")
    bad["status"] = {"containerStatuses": [{"name": "c", "allocatedResources": {"cpu": "lots"}}]}
    found = errors(node(), bad)
    assert [e.split(": ", 1)[1] for e in found] == [
        'pod default/z: status.containerStatuses[0].allocatedResources.cpu: invalid quantity "lots"'
    ]


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value in `value`, containers included."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _leaves(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _leaves(item, (*path, i))
    return found


def _replaced(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = dict(obj) if isinstance(obj, dict) else list(obj)
    copy[path[0]] = _replaced(obj[path[0]], path[1:], value)
    return copy


def test_the_fast_shape_check_agrees_with_the_full_one_on_every_value_of_the_wrong_shape() -> None:
    """jsonschema-rs says whether an object is valid and jsonschema words the errors of those it
    refuses, so an object it passed that jsonschema would refuse would lose its errors: every value of
    sample objects replaced by values of every other shape is judged alike by both."""
    from policyd.backends.validation import _shape_valid, _validators

    samples = [
        node(allocatable={"cpu": "4", "pods": "110"}, capacity={"cpu": "4"}),
        pod(
            tolerations=[{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
            priority=5,
            nodeName="n1",
            affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
        ),
        {
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "b", "namespace": "d"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}},
        },
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 10, "preemptionPolicy": "Never"},
        {"kind": "CSIStorageCapacity", "metadata": {"name": "c"}, "storageClassName": "s", "capacity": "1Gi"},
    ]
    shapes = [None, True, 0, -1, 2**31, 2**70, -(2**70), 1.5, "", "x", [], [{}], {}, {"x": 1}]
    judged = 0
    for sample in samples:
        kind, full = sample["kind"], _validators()[sample["kind"]]
        for path in _leaves(sample)[1:]:
            for shape in shapes:
                mutant = _replaced(sample, path, shape)
                assert _shape_valid(kind, mutant) == full.is_valid(mutant), (kind, path, shape)
                judged += 1
    assert judged > 500


def test_quantities_beyond_64_bit_integers_are_invalid() -> None:
    """`10Ei` cpu is 2^63-1 cores, more millicores than int64 holds; `10Ei` memory is 2^63-1 bytes
    (capped as apimachinery caps it) and fits."""
    big = node(allocatable={"cpu": "10Ei", "memory": "10Ei", "pods": "110"})
    assert [e.split(": ", 2)[2] for e in errors(big, pod(containers=resources({"cpu": "10E"})))] == [
        'status.allocatable.cpu: Invalid value: "10Ei": 9223372036854775807000 millicores is beyond the '
        "64-bit integers kube-scheduler counts in",
        'spec.containers[0].resources.requests.cpu: Invalid value: "10E": 10000000000000000000000 '
        "millicores is beyond the 64-bit integers kube-scheduler counts in",
    ]


def test_integers_beyond_their_api_types_are_invalid() -> None:
    """The API server decodes `priority`, a PriorityClass's `value` and `maxSkew` as int32 and
    `tolerationSeconds` as int64: a larger number is refused when the object is read."""
    bad = pod(priority=2**31, tolerations=[{"key": "a", "operator": "Exists", "tolerationSeconds": 2**70}])
    assert [e.split(": ", 2)[2] for e in errors(bad)] == [
        "spec.priority: Invalid value: 2147483648: must be less than or equal to 2147483647",
        "spec.tolerations[0].tolerationSeconds: Invalid value: 1180591620717411303424: must be less than or"
        " equal to 9223372036854775807",
    ]
