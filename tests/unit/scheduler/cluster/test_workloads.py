"""The system default spread selector from the Services and controllers selecting a pod
(kube-scheduler helper.DefaultSelector)."""

from __future__ import annotations

from typing import Any

from policyd.scheduler.cluster.selectors import LabelSelector, Requirement
from policyd.scheduler.cluster.spread_constraints import SCHEDULE_ANYWAY, spread_constraints
from policyd.scheduler.cluster.workloads import WorkloadIndex


def pod(labels: dict[str, str], owner: str = "", namespace: str = "default") -> dict[str, Any]:
    return {"name": "p", "namespace": namespace, "labels": labels, "ownerKey": owner}


def obj(name: str, spec: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def reqs(*pairs: tuple[str, str]) -> LabelSelector:
    return LabelSelector(tuple(Requirement(k, "In", (v,)) for k, v in pairs))


def test_services_selecting_the_pod_are_merged_others_ignored() -> None:
    index = WorkloadIndex()
    index.upsert("Service", obj("web", {"selector": {"app": "web"}}))
    index.upsert("Service", obj("tier", {"selector": {"tier": "front"}}))
    index.upsert("Service", obj("other", {"selector": {"app": "db"}}))
    index.upsert("Service", obj("headless", {}))  # no selector: selects nothing
    index.upsert("Service", obj("elsewhere", {"selector": {"app": "web"}}, namespace="team"))
    selector = index.default_selector(pod({"app": "web", "tier": "front", "v": "2"}))
    assert selector == reqs(("app", "web"), ("tier", "front"))
    assert index.default_selector(pod({"app": "cache"})) is None
    index.remove("Service", obj("tier", {}))
    assert index.default_selector(pod({"app": "web", "tier": "front"})) == reqs(("app", "web"))


def test_controller_selectors_are_anded_in() -> None:
    index = WorkloadIndex()
    index.upsert("Service", obj("web", {"selector": {"app": "web"}}))
    rs_selector = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "hash", "operator": "In", "values": ["h1"]}],
    }
    index.upsert("ReplicaSet", obj("web-h1", {"selector": rs_selector}))
    index.upsert("ReplicationController", obj("legacy", {"selector": {"app": "old"}}))
    selector = index.default_selector(pod({"app": "web", "hash": "h1"}, "ReplicaSet/web-h1"))
    assert selector is not None
    assert selector.matches({"app": "web", "hash": "h1", "x": "y"})
    assert not selector.matches({"app": "web", "hash": "h2"})
    assert index.default_selector(pod({"app": "old"}, "ReplicationController/legacy")) == reqs(("app", "old"))
    # a controller the index does not hold: only the Services count (kube-scheduler's failed Get)
    assert index.default_selector(pod({"app": "web"}, "StatefulSet/db")) == reqs(("app", "web"))


def test_default_constraints_use_the_selector_or_fall_back_to_an_unknown_controller() -> None:
    index = WorkloadIndex()
    index.upsert("Service", obj("web", {"selector": {"app": "web"}}))
    constraints, defaulted = spread_constraints(pod({"app": "web"}), SCHEDULE_ANYWAY, index)
    assert defaulted and [c.topology_key for c in constraints] == [
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    ]
    assert constraints[0].matches(pod({"app": "web", "other": "x"}))
    assert not constraints[0].matches(pod({"app": "db"}))
    # no Service, a ReplicaSet owner the index lacks (a cluster file without it): same-owner pods
    constraints, _ = spread_constraints(pod({"app": "db"}, "ReplicaSet/db-1"), SCHEDULE_ANYWAY, index)
    assert constraints and constraints[0].matches(pod({}, "ReplicaSet/db-1"))
    # a known ReplicaSet without matching Services: its selector, not the owner
    index.upsert("ReplicaSet", obj("db-1", {"selector": {"matchLabels": {"app": "db"}}}))
    constraints, _ = spread_constraints(pod({"app": "db"}, "ReplicaSet/db-1"), SCHEDULE_ANYWAY, index)
    assert constraints[0].matches(pod({"app": "db"}, "ReplicaSet/other"))
    # nothing selects a bare pod
    assert spread_constraints(pod({"app": "x"}), SCHEDULE_ANYWAY, index) == ([], True)
