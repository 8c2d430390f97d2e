"""The workloads that select pods (Services, ReplicaSets, StatefulSets, ReplicationControllers) and the
selector kube-scheduler's system default spread constraints use for a pod (helper.DefaultSelector).

The selector ANDs the `spec.selector` of every Service of the pod's namespace whose (non-empty)
selector matches the pod's labels, and the selector of the pod's controller when it is a
ReplicationController, ReplicaSet or StatefulSet the index knows. A controller the index does not
hold (a cluster file without it) falls back to the pods of the same controller (`ownerKey`):
kube-scheduler, whose informers always hold it, never sees that case. An empty selector means no
default constraints. The index is written by the scheduling thread only (cluster events) and read
by its cycles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policyd.scheduler.cluster.selectors import (
    CelObject,
    LabelSelector,
    Requirement,
    labels_of,
    parse_label_selector,
)

SERVICE = "Service"
REPLICA_SET = "ReplicaSet"
STATEFUL_SET = "StatefulSet"
REPLICATION_CONTROLLER = "ReplicationController"
WORKLOAD_KINDS = (SERVICE, REPLICA_SET, STATEFUL_SET, REPLICATION_CONTROLLER)
CONTROLLER_KINDS = (REPLICA_SET, STATEFUL_SET, REPLICATION_CONTROLLER)

Obj = Mapping[str, Any]


def _meta(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _set_selector(raw: Any) -> dict[str, str]:
    """A map selector (Service, ReplicationController spec.selector)."""
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


class WorkloadIndex:
    """Services and controllers by namespace and name, as the scheduler's informers deliver them."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {kind: {} for kind in WORKLOAD_KINDS}
        self._services_by_ns: dict[str, dict[str, dict[str, str]]] = {}
        self.generation = 0  # moves on every change: memoised selectors depend on it

    def upsert(self, kind: str, obj: Obj) -> None:
        """Add or replace a workload of `kind` (one of WORKLOAD_KINDS)."""
        ns, name = _meta(obj)
        self._objects[kind][(ns, name)] = obj
        if kind == SERVICE:
            self._services_by_ns.setdefault(ns, {})[name] = _set_selector(
                (obj.get("spec") or {}).get("selector")
            )
        self.generation += 1

    def remove(self, kind: str, obj: Obj) -> None:
        """Forget a workload of `kind`."""
        ns, name = _meta(obj)
        self._objects[kind].pop((ns, name), None)
        if kind == SERVICE:
            self._services_by_ns.get(ns, {}).pop(name, None)
        self.generation += 1

    def count(self, kind: str) -> int:
        """How many workloads of `kind` are known."""
        return len(self._objects[kind])

    def default_selector(self, pod: CelObject) -> LabelSelector | None:
        """The system default spread selector of `pod` (None: no default constraints)."""
        ns = str(pod.get("namespace") or "default")
        labels = labels_of(pod)
        merged: dict[str, str] = {}
        for selector in self._services_by_ns.get(ns, {}).values():
            if selector and all(labels.get(k) == v for k, v in selector.items()):
                merged.update(selector)
        requirements = [Requirement(k, "In", (v,)) for k, v in merged.items()]
        kind, _, name = str(pod.get("ownerKey") or "").partition("/")
        if kind in CONTROLLER_KINDS:
            controller = self._objects[kind].get((ns, name))
            raw = (controller.get("spec") or {}).get("selector") if controller is not None else None
            if controller is None:
                pass  # kube-scheduler: the lister's Get fails and only the Services count
            elif kind == REPLICATION_CONTROLLER:
                merged.update(_set_selector(raw))
                requirements = [Requirement(k, "In", (v,)) for k, v in merged.items()]
            elif isinstance(raw, Mapping):
                requirements.extend(parse_label_selector(raw).requirements)
        return LabelSelector(tuple(requirements)) if requirements else None

    def controller_known(self, pod: CelObject) -> bool:
        """True when the pod's controller is a ReplicaSet, StatefulSet or ReplicationController held here."""
        kind, _, name = str(pod.get("ownerKey") or "").partition("/")
        ns = str(pod.get("namespace") or "default")
        return kind in CONTROLLER_KINDS and (ns, name) in self._objects[kind]
