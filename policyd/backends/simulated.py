"""The simulated cluster: an in-memory back-end behind the same interface as the API server's.

Objects come from `policyd.backends.cluster_file.load_cluster` (priorities already resolved from
PriorityClasses). `start` delivers nodes, assigned pods, PDBs and the workloads selecting pods (Services,
ReplicaSets, StatefulSets, ReplicationControllers), then the pending pods in the
initial queue order (priority, then metadata.creationTimestamp, then file order). With
`replay_arrivals`, a pending pod is created only when the simulated clock reaches its
metadata.creationTimestamp, measured from the earliest pending pod's (which arrives at time 0): the
scheduler asks `next_arrival` when it would otherwise settle and `deliver_arrivals` what is due
(the `Arrivals` protocol of policyd.scheduler.backend), so a recorded trace replays in the order and
at the pace the cluster saw it. Binding sets
`spec.nodeName` (and clears `status.nominatedNodeName`, as the API server does on binding);
preemption deletes victims at once. Writes are delivered back to the scheduler as watch events.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policyd.scheduler.backend import BindError, EventHandler, KubeObject
from policyd.scheduler.snapshot import PodInfoLike

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordedEvent:
    """An Event the scheduler recorded."""

    pod: str
    type: str
    reason: str
    message: str


def _key(obj: KubeObject) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def _copy_pod(obj: KubeObject) -> dict[str, Any]:
    """A copy deep enough for the fields the simulator writes (spec, status, conditions)."""
    out = dict(obj)
    out["metadata"] = dict(obj.get("metadata") or {})
    out["spec"] = dict(obj.get("spec") or {})
    status = dict(obj.get("status") or {})
    if "conditions" in status:
        status["conditions"] = [dict(c) for c in status["conditions"]]
    out["status"] = status
    return out


def _timestamp(obj: KubeObject) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def _epoch(obj: KubeObject) -> float | None:
    """metadata.creationTimestamp in seconds since the epoch (None when unset; validated RFC 3339)."""
    text = _timestamp(obj)
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


class SimulatedCluster:
    """An in-memory cluster implementing `ClusterBackend` (one lock)."""

    # `bind` completes in memory at once: the scheduler's binder runs it inline (no worker threads)
    binds_in_memory = True

    def __init__(
        self,
        nodes: Sequence[KubeObject] = (),
        pods: Sequence[KubeObject] = (),
        pdbs: Sequence[KubeObject] = (),
        *,
        workloads: Sequence[KubeObject] = (),
        replay_arrivals: bool = False,
    ) -> None:
        self._lock = threading.RLock()
        self.replay_arrivals = replay_arrivals
        self._arrivals: list[tuple[float, int, KubeObject]] = []  # (offset, queue order, pod), sorted
        self._nodes = {str(n["metadata"]["name"]): n for n in nodes}
        self._pods: dict[str, dict[str, Any]] = {_key(p): _copy_pod(p) for p in pods}
        self._pdbs = list(pdbs)
        self._workloads = list(workloads)  # Services and controllers (system default spread)
        self._handler: EventHandler | None = None
        self.events: list[RecordedEvent] = []
        self.deleted: list[str] = []
        self.bind_count = 0

    @classmethod
    def from_file(cls, path: str, *, replay_arrivals: bool = False) -> SimulatedCluster:
        """Load a cluster file (YAML/JSON: kubectl get -o yaml, a List, multi-document)."""
        from policyd.backends.cluster_file import load_cluster

        objects = load_cluster(path)
        return cls(
            objects.nodes,
            objects.pods,
            objects.pdbs,
            workloads=objects.workloads,
            replay_arrivals=replay_arrivals,
        )

    # --- ClusterBackend ---

    def start(self, handler: EventHandler) -> None:
        """Deliver nodes, assigned pods, PDBs, then pending pods in initial queue order."""
        with self._lock:
            self._handler = handler
            nodes = list(self._nodes.values())
            pods = list(self._pods.values())
            pdbs = list(self._pdbs)
            workloads = list(self._workloads)
        for node in nodes:
            handler.on_node_add(node)
        for pod in pods:
            if (pod.get("spec") or {}).get("nodeName"):
                handler.on_pod_add(pod)
        for pdb in pdbs:
            handler.on_pdb_add(pdb)
        for workload in workloads:
            handler.on_workload_add(str(workload["kind"]), workload)
        pending = self.pending_in_queue_order(pods)
        if self.replay_arrivals:
            with self._lock:
                self._arrivals = self._schedule_arrivals(pending)
            pending = []
        for obj in pending:
            handler.on_pod_add(obj)
        handler.on_synced()
        if self.replay_arrivals:
            self.deliver_arrivals(0.0)

    @staticmethod
    def _schedule_arrivals(pending: Sequence[KubeObject]) -> list[tuple[float, int, KubeObject]]:
        """(offset from the earliest creationTimestamp, queue order, pod), sorted; unset: offset 0."""
        times = [_epoch(p) for p in pending]
        first = min((t for t in times if t is not None), default=0.0)
        return sorted(
            (
                (0.0 if t is None else t - first, i, p)
                for i, (t, p) in enumerate(zip(times, pending, strict=True))
            ),
            key=lambda a: (a[0], a[1]),
        )

    # --- Arrivals (replay_arrivals) ---

    def next_arrival(self) -> float | None:
        """When the next pending pod is created on the simulated clock (None: every pod arrived)."""
        with self._lock:
            return self._arrivals[0][0] if self._arrivals else None

    def deliver_arrivals(self, now: float) -> int:
        """Create every pending pod whose creation time has come; returns how many."""
        with self._lock:
            due = [a for a in self._arrivals if a[0] <= now]
            self._arrivals = self._arrivals[len(due) :]
            handler = self._handler
        if handler is not None:
            for _, _, pod in due:
                handler.on_pod_add(pod)
        return len(due)

    @staticmethod
    def pending_in_queue_order(pods: Sequence[KubeObject]) -> list[KubeObject]:
        """Pending pods sorted by priority (high first), creationTimestamp, file order."""
        pending = [(i, p) for i, p in enumerate(pods) if not (p.get("spec") or {}).get("nodeName")]
        pending.sort(
            key=lambda ip: (-int((ip[1].get("spec") or {}).get("priority") or 0), _timestamp(ip[1]), ip[0])
        )
        return [p for _, p in pending]

    def stop(self) -> None:
        """Stop delivering events."""
        with self._lock:
            self._handler = None

    def bind(self, pod: PodInfoLike, node: str) -> None:
        """Set spec.nodeName (refused for a vanished, replaced or already bound pod, or unknown node)."""
        with self._lock:
            old = self._pods.get(pod.key)
            if old is None:
                raise BindError(f"pods {pod.key!r} not found", retry=False)
            if pod.uid and (old.get("metadata") or {}).get("uid", pod.uid) != pod.uid:
                raise BindError(f"pod {pod.key} was replaced (uid mismatch)", retry=False)
            if old["spec"].get("nodeName"):
                raise BindError(
                    f"pod {pod.key} is already assigned to node {old['spec']['nodeName']!r}", retry=False
                )
            if node not in self._nodes:
                raise BindError(f"node {node!r} not found")
            new = _copy_pod(old)
            new["spec"]["nodeName"] = node
            new["status"].pop("nominatedNodeName", None)
            self._set_condition(new, {"type": "PodScheduled", "status": "True"})
            self._pods[pod.key] = new
            self.bind_count += 1
        self._emit_update(old, new)

    def delete_pod(self, pod: PodInfoLike, grace_seconds: int | None) -> None:
        """Delete a pod at once (the simulation has no kubelet to honour the grace period)."""
        with self._lock:
            old = self._pods.pop(pod.key, None)
            if old is None:
                return
            self.deleted.append(pod.key)
            handler = self._handler
        if handler is not None:
            handler.on_pod_delete(old)

    def set_nominated_node(self, pod: PodInfoLike, node: str | None) -> None:
        """Set or clear status.nominatedNodeName."""
        with self._lock:
            old = self._pods.get(pod.key)
            if old is None:
                return
            new = _copy_pod(old)
            if node:
                new["status"]["nominatedNodeName"] = node
            else:
                new["status"].pop("nominatedNodeName", None)
            self._pods[pod.key] = new
        self._emit_update(old, new)

    def record_event(self, pod: PodInfoLike, event_type: str, reason: str, message: str) -> None:
        """Keep the event in memory."""
        with self._lock:
            self.events.append(RecordedEvent(pod.key, event_type, reason, message))

    def patch_pod_scheduled(self, pod: PodInfoLike, condition: Mapping[str, str]) -> None:
        """Set the PodScheduled condition."""
        with self._lock:
            old = self._pods.get(pod.key)
            if old is None:
                return
            new = _copy_pod(old)
            self._set_condition(new, condition)
            self._pods[pod.key] = new
        self._emit_update(old, new)

    # --- test and CLI helpers ---

    def add_node(self, obj: KubeObject) -> None:
        """Create a node (delivered as an event)."""
        with self._lock:
            self._nodes[str(obj["metadata"]["name"])] = obj
            handler = self._handler
        if handler is not None:
            handler.on_node_add(obj)

    def add_pod(self, obj: KubeObject) -> None:
        """Create a pod (delivered as an event)."""
        with self._lock:
            self._pods[_key(obj)] = _copy_pod(obj)
            handler = self._handler
        if handler is not None:
            handler.on_pod_add(obj)

    def update_pod(self, obj: KubeObject) -> None:
        """Replace an existing pod (delivered as an update event), e.g. to remove scheduling gates."""
        key = _key(obj)
        with self._lock:
            old = self._pods.get(key)
            if old is None:
                raise KeyError(f"pod {key} not found")
            new = _copy_pod(obj)
            self._pods[key] = new
        self._emit_update(old, new)

    def pod(self, key: str) -> dict[str, Any] | None:
        """The current object of pod `key`."""
        with self._lock:
            return self._pods.get(key)

    def pods(self) -> list[dict[str, Any]]:
        """Every pod, in file order."""
        with self._lock:
            return list(self._pods.values())

    def node_of(self, key: str) -> str | None:
        """spec.nodeName of pod `key` (None: pending or gone)."""
        pod = self.pod(key)
        return (pod.get("spec") or {}).get("nodeName") or None if pod else None

    # --- internals ---

    @staticmethod
    def _set_condition(pod: dict[str, Any], condition: Mapping[str, str]) -> None:
        conditions = [c for c in pod["status"].get("conditions") or [] if c.get("type") != condition["type"]]
        conditions.append(dict(condition))
        pod["status"]["conditions"] = conditions

    def _emit_update(self, old: KubeObject, new: KubeObject) -> None:
        handler = self._handler
        if handler is not None:
            handler.on_pod_update(old, new)
