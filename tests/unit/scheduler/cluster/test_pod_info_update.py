"""`pod_info_update` derives the same PodInfo `pod_info` converts, for every kind of pod update."""

from __future__ import annotations

import copy
from dataclasses import fields
from typing import Any

import pytest

from policyd.errors import ClusterDataError
from policyd.scheduler.cluster.objects import PodInfo, pod_info, pod_info_update

BASE: dict[str, Any] = {
    "metadata": {
        "name": "web-1",
        "namespace": "shop",
        "uid": "u-1",
        "resourceVersion": "10",
        "labels": {"app": "web"},
        "creationTimestamp": "2024-01-01T00:00:00Z",
    },
    "spec": {
        "schedulerName": "default-scheduler",
        "priority": 5,
        "containers": [
            {
                "name": "c",
                "image": "nginx",
                "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}},
                "ports": [{"containerPort": 80, "hostPort": 8080}],
            }
        ],
        "tolerations": [{"key": "k", "operator": "Exists"}],
    },
    "status": {"phase": "Pending"},
}


def _bound(obj: dict[str, Any]) -> None:
    obj["spec"]["nodeName"] = "n1"
    obj["metadata"]["resourceVersion"] = "11"
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]


def _nominated(obj: dict[str, Any]) -> None:
    obj["status"]["nominatedNodeName"] = "n2"
    obj["metadata"]["resourceVersion"] = "12"


def _running(obj: dict[str, Any]) -> None:
    _bound(obj)
    obj["status"].update(phase="Running", startTime="2024-01-01T00:01:00Z")


def _no_rv(obj: dict[str, Any]) -> None:
    del obj["metadata"]["resourceVersion"]
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]


def _relabelled(obj: dict[str, Any]) -> None:
    obj["metadata"]["labels"] = {"app": "db"}


def _resized(obj: dict[str, Any]) -> None:
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"


def _resized_in_place(obj: dict[str, Any]) -> None:
    name = obj["spec"]["containers"][0]["name"]
    obj.setdefault("status", {})["containerStatuses"] = [{"name": name, "allocatedResources": {"cpu": "3"}}]


def _deleting(obj: dict[str, Any]) -> None:
    obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:02:00Z"


def _terminating(obj: dict[str, Any]) -> None:
    """The first step of a graceful deletion of a bound pod, as the API server writes it."""
    _bound(obj)
    obj["metadata"].update(
        deletionTimestamp="2024-01-01T00:02:30Z", deletionGracePeriodSeconds=30, resourceVersion="13"
    )


def _generation_bumped(obj: dict[str, Any]) -> None:
    obj["metadata"]["generation"] = 2


def _same_info(a: PodInfo, b: PodInfo) -> None:
    for f in fields(PodInfo):
        if f.name != "raw":
            assert getattr(a, f.name) == getattr(b, f.name), f.name
    assert a.raw is not None and b.raw is not None


@pytest.mark.parametrize(
    "change",
    [
        _bound,
        _nominated,
        _running,
        _no_rv,
        _relabelled,
        _resized,
        _resized_in_place,
        _deleting,
        _terminating,
        _generation_bumped,
    ],
)
def test_update_equals_fresh_conversion(change: Any) -> None:
    prev = pod_info(BASE)
    new = copy.deepcopy(BASE)
    change(new)
    derived = pod_info_update(prev, new)
    _same_info(derived, pod_info(new))
    assert derived.raw is new


def test_assumed_pod_info_is_a_valid_base() -> None:
    """The cache holds `with_node` copies of queued pods; updates derive from them too."""
    prev = pod_info(BASE).with_node("n1")
    new = copy.deepcopy(BASE)
    _bound(new)
    _same_info(pod_info_update(prev, new), pod_info(new))


def test_derived_pod_info_does_not_share_mutable_parts() -> None:
    prev = pod_info(BASE)
    new = copy.deepcopy(BASE)
    _bound(new)
    derived = pod_info_update(prev, new)
    assert derived.cel["spec"] is not prev.cel["spec"]
    assert "nodeName" not in prev.cel["spec"]
    assert prev.cel["metadata"]["resourceVersion"] == "10"


@pytest.mark.parametrize("change", [_bound, _nominated, _terminating, _generation_bumped])
def test_spec_is_not_converted_again_when_only_status_or_deletion_metadata_moved(change: Any) -> None:
    """A bind, a nomination or a graceful deletion's first step keeps the pod's converted spec parts."""
    prev = pod_info(BASE)
    new = copy.deepcopy(BASE)
    change(new)
    derived = pod_info_update(prev, new)
    assert derived.requests is prev.requests
    assert derived.cel["tolerations"] is prev.cel["tolerations"]


def test_a_graceful_deletion_marks_the_pod_deleting() -> None:
    bound = copy.deepcopy(BASE)
    _bound(bound)
    prev = pod_info(bound)
    new = copy.deepcopy(bound)
    _terminating(new)
    derived = pod_info_update(prev, new)
    assert derived.deleting and derived.cel["deleting"]
    assert derived.cel["metadata"]["deletionGracePeriodSeconds"] == 30
    assert not prev.deleting and "deletionTimestamp" not in prev.cel["metadata"]


def test_bad_deletion_metadata_is_an_error_naming_the_field() -> None:
    prev = pod_info(BASE)
    new = copy.deepcopy(BASE)
    new["metadata"]["deletionGracePeriodSeconds"] = "soon"
    with pytest.raises(ClusterDataError, match=r"pod shop/web-1: metadata\.deletionGracePeriodSeconds"):
        pod_info_update(prev, new)
