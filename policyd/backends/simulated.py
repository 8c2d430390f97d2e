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

Storage objects (StorageClasses, CSIDrivers, CSINodes, PVs, PVCs) are delivered after the nodes. The
simulated cluster also plays the PV controller and a provisioner in `bind_volumes` (PreBind): a PV the
scheduler binds to a claim gets the claim bound to it at once (`spec.volumeName`, the bind-completed
annotations, phase Bound); a claim selected for provisioning on a node gets a new PV of its size and
class (`pvc-<claim uid>`, with node affinity on the node's values of the class's allowedTopologies keys).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from policyd.scheduler.backend import BindError, EventHandler, KubeObject
from policyd.scheduler.cluster.volume_claims import claim_class
from policyd.scheduler.cluster.volume_store import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
    PodVolumeBindings,
    object_key,
    with_claim_ref,
    with_selected_node,
)
from policyd.scheduler.snapshot import PodInfoLike

if TYPE_CHECKING:
    from policyd.backends.cluster_file import ClusterObjects

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
        storage: Sequence[KubeObject] = (),
        replay_arrivals: bool = False,
    ) -> None:
        """`storage`: StorageClasses, CSIDrivers, CSINodes, PVs and PVCs (each with its `kind`)."""
        self._lock = threading.RLock()
        self.replay_arrivals = replay_arrivals
        self._arrivals: list[tuple[float, int, KubeObject]] = []  # (offset, queue order, pod), sorted
        self._storage: dict[tuple[str, str], KubeObject] = {
            (str(o["kind"]), object_key(str(o["kind"]), o)): o for o in storage
        }
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

        return cls.from_objects(load_cluster(path), replay_arrivals=replay_arrivals)

    @classmethod
    def from_objects(cls, objects: ClusterObjects, *, replay_arrivals: bool = False) -> SimulatedCluster:
        """A simulated cluster of loaded cluster objects (a cluster file's, or a live cluster's)."""
        return cls(
            objects.nodes,
            objects.pods,
            objects.pdbs,
            workloads=objects.workloads,
            storage=objects.storage(),
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
            storage = list(self._storage.values())
        for node in nodes:
            handler.on_node_add(node)
        for obj in storage:
            handler.on_storage_add(str(obj["kind"]), obj)
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

    def bind_volumes(self, pod: PodInfoLike, bindings: PodVolumeBindings) -> None:
        """PreBind: bind the PVs and provision the claims, playing the PV controller and provisioner."""
        changes: list[tuple[KubeObject | None, KubeObject]] = []
        with self._lock:
            for static in bindings.static:
                pv = self._storage.get((PERSISTENT_VOLUME, static.pv))
                claim = self._storage.get((PERSISTENT_VOLUME_CLAIM, static.claim))
                if pv is None or claim is None:
                    raise BindError(
                        f"binding volumes: persistentvolume {static.pv!r} or claim {static.claim} gone"
                    )
                ref = (pv.get("spec") or {}).get("claimRef")
                if ref and (ref.get("namespace"), ref.get("name")) != tuple(static.claim.split("/", 1)):
                    raise BindError(
                        f"binding volumes: persistentvolume {static.pv!r} is bound to another claim"
                    )
                changes += self._bind_claim(with_claim_ref(pv, claim), claim)
            for key in bindings.provision:
                claim = self._storage.get((PERSISTENT_VOLUME_CLAIM, key))
                if claim is None:
                    raise BindError(f"binding volumes: persistentvolumeclaim {key} gone")
                changes.append((claim, with_selected_node(claim, bindings.node)))
                changes += self._bind_claim(self._provision(changes[-1][1], bindings.node), changes[-1][1])
            for _, new in changes:
                self._storage[(str(new["kind"]), object_key(str(new["kind"]), new))] = new
            handler = self._handler
        if handler is not None:
            for old, new in changes:
                if old is None:
                    handler.on_storage_add(str(new["kind"]), new)
                else:
                    handler.on_storage_update(str(new["kind"]), old, new)

    def _bind_claim(self, pv: KubeObject, claim: KubeObject) -> list[tuple[KubeObject | None, KubeObject]]:
        """The PV controller binding `claim` to `pv` (which already names it in claimRef)."""
        pv_meta = pv.get("metadata") or {}
        old_pv = self._storage.get((PERSISTENT_VOLUME, str(pv_meta.get("name", ""))))
        bound_pv = {**pv, "kind": PERSISTENT_VOLUME, "status": {**(pv.get("status") or {}), "phase": "Bound"}}
        meta = dict(claim.get("metadata") or {})
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            ANN_BIND_COMPLETED: "yes",
            ANN_BOUND_BY_CONTROLLER: "yes",
        }
        pv_spec = pv.get("spec") or {}
        status = {
            **(claim.get("status") or {}),
            "phase": "Bound",
            "accessModes": list(pv_spec.get("accessModes") or ()),
            "capacity": dict(pv_spec.get("capacity") or {}),
        }
        spec = {**(claim.get("spec") or {}), "volumeName": pv_meta.get("name", "")}
        old_claim = self._storage.get((PERSISTENT_VOLUME_CLAIM, object_key(PERSISTENT_VOLUME_CLAIM, claim)))
        return [(old_pv, bound_pv), (old_claim, {**claim, "metadata": meta, "spec": spec, "status": status})]

    def _provision(self, claim: KubeObject, node: str) -> dict[str, Any]:
        """The PV a provisioner creates for `claim` on `node`."""
        meta, spec = claim.get("metadata") or {}, claim.get("spec") or {}
        class_name = claim_class(claim)
        sc = self._storage.get((STORAGE_CLASS, class_name)) or {}
        node_labels = (self._nodes.get(node, {}).get("metadata") or {}).get("labels") or {}
        keys = sorted(
            {
                e.get("key")
                for t in sc.get("allowedTopologies") or ()
                for e in t.get("matchLabelExpressions") or ()
            }
        )
        pv_spec: dict[str, Any] = {
            "capacity": {
                "storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
            },
            "accessModes": list(spec.get("accessModes") or ()),
            "storageClassName": class_name,
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
        }
        if spec.get("volumeMode"):
            pv_spec["volumeMode"] = spec["volumeMode"]
        terms = [{"key": k, "operator": "In", "values": [node_labels[k]]} for k in keys if k in node_labels]
        if terms:
            pv_spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": terms}]}}
        name = f"pvc-{meta.get('uid') or str(meta.get('namespace', 'default')) + '-' + str(meta.get('name', ''))}"
        pv = {"apiVersion": "v1", "kind": PERSISTENT_VOLUME, "metadata": {"name": name}, "spec": pv_spec}
        return with_claim_ref(pv, claim)

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

    def delete_victims(self, pods: Sequence[PodInfoLike], in_order: bool = True) -> None:
        """Delete preemption victims at once, always in order."""
        for pod in pods:
            self.delete_pod(pod, None)

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

    def patch_pod_scheduled(
        self, pod: PodInfoLike, condition: Mapping[str, str], nominated_node: str = ""
    ) -> None:
        """Set the PodScheduled condition (and the nominated node when one is given)."""
        with self._lock:
            old = self._pods.get(pod.key)
            if old is None:
                return
            new = _copy_pod(old)
            self._set_condition(new, condition)
            if nominated_node:
                new["status"]["nominatedNodeName"] = nominated_node
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

    def add_storage(self, obj: KubeObject) -> None:
        """Create or replace a storage object (with its `kind`; delivered as an event)."""
        kind = str(obj["kind"])
        with self._lock:
            old = self._storage.get((kind, object_key(kind, obj)))
            self._storage[(kind, object_key(kind, obj))] = obj
            handler = self._handler
        if handler is not None:
            if old is None:
                handler.on_storage_add(kind, obj)
            else:
                handler.on_storage_update(kind, old, obj)

    def storage_object(self, kind: str, key: str) -> KubeObject | None:
        """A storage object by kind and key (`namespace/name` for claims)."""
        with self._lock:
            return self._storage.get((kind, key))

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
