"""The cache boundary: Kubernetes pod/node dicts -> `PodInfo` / `NodeInfo` with CEL-visible dicts.

With projection.py (typed fields) and resources.py (requests) this is the only code that reads raw API
dicts (docs/DESIGN.md, "CEL-visible objects"). A pod is
converted once, when it enters the cache; a node's allocation (`requested`, `free`, `pods`, ...) is
maintained incrementally as pods are added and removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from policyd.cel.types import INT
from policyd.cel.values import Timestamp
from policyd.errors import ClusterDataError
from policyd.policy import k8s_types as kt
from policyd.scheduler.cluster.affinity_terms import has_pod_affinity
from policyd.scheduler.cluster.projection import NANOS, cel_timestamp, mapping, project
from policyd.scheduler.cluster.resources import (
    ALWAYS_REQUESTED,
    pod_resources,
    quantities,
    status_resources,
    to_ints,
)

# the API server's default spec.schedulerName (kube-scheduler's); policyd's own: framework.DEFAULT_PROFILE
API_DEFAULT_SCHEDULER_NAME = "default-scheduler"


def normalized_image_name(name: str) -> str:
    """Add `:latest` to an untagged image name (as kube-scheduler's ImageLocality does)."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


# ----------------------------------------------------------------------------------------------
# pods


@dataclass(frozen=True, eq=False)
class PodInfo:
    """A pod as the scheduler sees it, converted once at the cache boundary (identity equality)."""

    key: str
    uid: str
    name: str
    namespace: str
    scheduler_name: str
    node_name: str
    nominated_node_name: str
    priority: int
    preemption_policy: str
    deleting: bool
    requests: dict[str, int]
    non_zero_requests: dict[str, int]
    host_ports: tuple[tuple[str, int, str], ...]
    images: tuple[str, ...]
    labels: dict[str, str]
    # seconds since the epoch; 0.0 / None when unset
    creation_timestamp: float
    start_time: float | None
    owner_key: str
    phase: str
    # names of spec.schedulingGates: the pod waits at PreEnqueue until the list is empty
    scheduling_gates: tuple[str, ...]
    # the original API dict, for back-ends only (binding, events); never read on the hot path
    raw: Mapping[str, Any] = field(repr=False)
    # the CEL-visible dict (docs/DESIGN.md, `Pod`)
    cel: dict[str, Any] = field(repr=False)

    def with_node(self, node_name: str) -> PodInfo:
        """A copy bound (or assumed) to `node_name`."""
        cel = dict(self.cel)
        cel["nodeName"] = node_name
        return _evolve(self, node_name=node_name, cel=cel)

    def with_nominated_node(self, node_name: str) -> PodInfo:
        """A copy with `nominatedNodeName` set ("" clears it)."""
        cel = dict(self.cel)
        cel["nominatedNodeName"] = node_name
        return replace(self, nominated_node_name=node_name, cel=cel)


def _status_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def _evolve(info: PodInfo, **changes: Any) -> PodInfo:
    """`dataclasses.replace` for the hot path: a copy of the frozen `info` with `changes` set."""
    copy = object.__new__(PodInfo)
    copy.__dict__.update(info.__dict__)
    copy.__dict__.update(changes)
    return copy


def _containers(spec: Mapping[str, Any], name: str, where: str) -> list[Mapping[str, Any]]:
    """spec.containers / spec.initContainers as a list of mappings."""
    raw = spec.get(name) or []
    if not isinstance(raw, list):
        raise ClusterDataError(f"{where}.{name}: expected a list")
    return [mapping(c, f"{where}.{name}[{i}]") for i, c in enumerate(raw)]


def _host_ports(containers: Iterable[Mapping[str, Any]], where: str) -> list[dict[str, Any]]:
    """HostPort dicts of every container port with hostPort > 0 (defaults 0.0.0.0 / TCP)."""
    out: list[dict[str, Any]] = []
    for c in containers:
        for i, p in enumerate(c.get("ports") or []):
            p = mapping(p, f"{where}.ports[{i}]")
            port = project(p.get("hostPort", 0), INT, f"{where}.ports[{i}].hostPort")
            if port > 0:
                out.append(
                    {
                        "hostIP": str(p.get("hostIP") or "0.0.0.0"),
                        "hostPort": port,
                        "protocol": str(p.get("protocol") or "TCP"),
                    }
                )
    return out


def _owner_key(meta: Mapping[str, Any]) -> str:
    """`Kind/name` of the controller owner reference, "" if none."""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return f"{ref.get('kind', '')}/{ref.get('name', '')}"
    return ""


def _epoch(ts: Timestamp | None) -> float | None:
    """Seconds since the epoch of a projected timestamp (None when unset)."""
    return None if ts is None else ts.ns / NANOS


def pod_info(obj: Mapping[str, Any]) -> PodInfo:
    """Convert a Kubernetes pod dict (API JSON shape) into a `PodInfo`; raises ClusterDataError."""
    meta = mapping(obj.get("metadata"), "pod: metadata")
    name = meta.get("name")
    namespace = meta.get("namespace") or "default"
    if not name or not isinstance(name, str):
        raise ClusterDataError(f"pod in namespace {namespace!r}: metadata.name is missing")
    key = f"{namespace}/{name}"
    where = f"pod {key}"
    spec = mapping(obj.get("spec"), f"{where}: spec")
    status = mapping(obj.get("status"), f"{where}: status")

    metadata = project(meta, kt.OBJECT_META, f"{where}: metadata")
    metadata["namespace"] = namespace
    cel_spec = project(spec, kt.POD_SPEC, f"{where}: spec")
    cel_status = project(status, kt.POD_STATUS, f"{where}: status")

    containers = _containers(spec, "containers", f"{where}: spec")
    inits = _containers(spec, "initContainers", f"{where}: spec")
    requests, non_zero, limits = pod_resources(spec, containers, inits, where, status)

    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    host_ports = _host_ports([*containers, *sidecars], f"{where}: spec.containers")
    images = [normalized_image_name(str(c.get("image") or "")) for c in [*inits, *containers]]
    labels = metadata.get("labels", {})
    priority = cel_spec.get("priority", 0)
    scheduler_name = cel_spec.get("schedulerName") or API_DEFAULT_SCHEDULER_NAME
    preemption_policy = cel_spec.get("preemptionPolicy") or "PreemptLowerPriority"
    node_name = cel_spec.get("nodeName", "")
    nominated = cel_status.get("nominatedNodeName", "")
    deleting = meta.get("deletionTimestamp") is not None
    owner_key = _owner_key(meta)
    phase = cel_status.get("phase", "")
    created = _epoch(metadata.get("creationTimestamp"))
    started = _epoch(cel_status.get("startTime"))
    zero_ts = cel_timestamp(0)

    cel: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": metadata.get("uid", ""),
        "labels": labels,
        "annotations": metadata.get("annotations", {}),
        "schedulerName": scheduler_name,
        "priority": priority,
        "preemptionPolicy": preemption_policy,
        "nodeName": node_name,
        "nominatedNodeName": nominated,
        "requests": requests,
        "nonZeroRequests": non_zero,
        "limits": limits,
        "hostPorts": host_ports,
        "images": images,
        "tolerations": cel_spec.get("tolerations", []),
        "nodeSelector": cel_spec.get("nodeSelector", {}),
        "creationTimestamp": metadata.get("creationTimestamp", zero_ts),
        "startTime": cel_status.get("startTime", zero_ts),
        "deleting": deleting,
        "phase": phase,
        "ownerKey": owner_key,
        "metadata": metadata,
        "spec": cel_spec,
        "status": cel_status,
    }
    # absent stays absent, so `has(pod.affinity)` / `has(pod.topologySpreadConstraints)` work
    if "affinity" in cel_spec:
        cel["affinity"] = cel_spec["affinity"]
    if "topologySpreadConstraints" in cel_spec:
        cel["topologySpreadConstraints"] = cel_spec["topologySpreadConstraints"]

    return PodInfo(
        key=key,
        uid=cel["uid"],
        name=name,
        namespace=namespace,
        scheduler_name=scheduler_name,
        node_name=node_name,
        nominated_node_name=nominated,
        priority=priority,
        preemption_policy=preemption_policy,
        deleting=deleting,
        requests=requests,
        non_zero_requests=cel["nonZeroRequests"],
        host_ports=tuple((p["hostIP"], p["hostPort"], p["protocol"]) for p in host_ports),
        images=tuple(images),
        labels=labels,
        creation_timestamp=created or 0.0,
        start_time=started,
        owner_key=owner_key,
        phase=phase,
        scheduling_gates=tuple(str(g.get("name", "")) for g in cel_spec.get("schedulingGates", [])),
        raw=obj,
        cel=cel,
    )


_META_VOLATILE = ("resourceVersion", "managedFields")
# metadata a graceful deletion sets (deletionTimestamp, its grace period, and generation + 1 where the
# object has one): an update that changes only these is derived too, not converted afresh
_META_DELETION = ("deletionTimestamp", "deletionGracePeriodSeconds", "generation")
_META_DERIVED = _META_VOLATILE + _META_DELETION
_DELETION_KEYS = frozenset(_META_DELETION)


def _without(d: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def pod_info_update(prev: PodInfo, obj: Mapping[str, Any]) -> PodInfo:
    """The `PodInfo` of `obj`, a later version of the pod `prev` was made from.

    When only spec.nodeName, status, metadata.resourceVersion and the metadata of a graceful
    deletion changed (a bind, a condition, a nomination, a deletion's first step: most pod updates a
    scheduler sees), it is derived from `prev` without converting the spec again; otherwise it is
    converted afresh (`pod_info`), also when the status parts its requests depend on changed (an
    in-place resize). Both give equal objects.
    """
    old = prev.raw
    meta, old_meta = obj.get("metadata"), old.get("metadata")
    spec, old_spec = obj.get("spec"), old.get("spec")
    if not (
        isinstance(meta, dict)
        and isinstance(old_meta, dict)
        and isinstance(spec, dict)
        and isinstance(old_spec, dict)
        and isinstance(spec.get("nodeName", ""), str)
        and isinstance(meta.get("resourceVersion", ""), str)
        and _without(meta, _META_DERIVED) == _without(old_meta, _META_DERIVED)
        and _without(spec, ("nodeName",)) == _without(old_spec, ("nodeName",))
        and status_resources(_status_of(obj)) == status_resources(_status_of(old))
    ):
        return pod_info(obj)
    where = f"pod {prev.key}"
    status = mapping(obj.get("status"), f"{where}: status")
    cel_status = project(status, kt.POD_STATUS, f"{where}: status")
    node_name = spec.get("nodeName") or ""
    metadata = dict(prev.cel["metadata"])
    if meta.get("resourceVersion") is None:
        metadata.pop("resourceVersion", None)
    else:
        metadata["resourceVersion"] = meta["resourceVersion"]
    if not (_DELETION_KEYS.isdisjoint(meta) and _DELETION_KEYS.isdisjoint(metadata)):
        for k in _META_DELETION:
            metadata.pop(k, None)
        deletion = {k: meta[k] for k in _META_DELETION if k in meta}
        metadata.update(project(deletion, kt.OBJECT_META, f"{where}: metadata"))
    cel_spec = dict(prev.cel["spec"])
    if spec.get("nodeName") is None:
        cel_spec.pop("nodeName", None)
    else:
        cel_spec["nodeName"] = spec["nodeName"]
    nominated = cel_status.get("nominatedNodeName", "")
    phase = cel_status.get("phase", "")
    cel = dict(prev.cel)
    cel["nodeName"] = node_name
    cel["nominatedNodeName"] = nominated
    cel["phase"] = phase
    cel["startTime"] = cel_status.get("startTime", cel_timestamp(0))
    cel["metadata"] = metadata
    cel["spec"] = cel_spec
    cel["status"] = cel_status
    deleting = meta.get("deletionTimestamp") is not None
    cel["deleting"] = deleting
    return _evolve(
        prev,
        node_name=node_name,
        nominated_node_name=nominated,
        deleting=deleting,
        phase=phase,
        start_time=_epoch(cel_status.get("startTime")),
        raw=obj,
        cel=cel,
    )


# ----------------------------------------------------------------------------------------------
# nodes


@dataclass(eq=False)
class NodeInfo:
    """A node and the pods on it, owned by the runtime cache; `.cel` is kept up to date in place.

    Node-level parts of `.cel` (labels, taints, allocatable, ...) are shared between clones and must be
    treated as read-only; allocation parts (`requested`, `free`, `pods`, ...) are per instance.
    """

    name: str
    uid: str
    labels: dict[str, str]
    taints: list[dict[str, Any]]
    allocatable: dict[str, int]
    capacity: dict[str, int]
    images: dict[str, int]
    ready: bool
    unschedulable: bool
    raw: Mapping[str, Any] = field(repr=False)
    pods: dict[str, PodInfo] = field(default_factory=dict, repr=False)
    cel: dict[str, Any] = field(default_factory=dict, repr=False)
    # pods on the node with inter-pod (anti-)affinity terms (kube-scheduler's PodsWithAffinity, counted)
    affinity_pods: int = field(default=0, repr=False)

    # -- node updates

    def update_node(self, obj: Mapping[str, Any]) -> None:
        """Replace the node object (labels, taints, allocatable...) keeping the pods on it."""
        fresh = node_info(obj)
        if fresh.name != self.name:
            raise ClusterDataError(f"node {self.name}: update carries another name {fresh.name!r}")
        pods = list(self.pods.values())
        used_ports = self.cel.get("usedPorts", [])
        for f in ("uid", "labels", "taints", "allocatable", "capacity", "images", "ready", "unschedulable"):
            setattr(self, f, getattr(fresh, f))
        self.raw = fresh.raw
        self.pods = {}
        self.affinity_pods = 0
        self.cel.clear()  # in place: holders of `.cel` see the new node
        self.cel.update(fresh.cel)
        for pv in pods:
            self.add_pod(pv)
        self.cel["usedPorts"] = used_ports  # a node update leaves them as they were (see `_forget`)

    # -- pod accounting (incremental)

    def add_pod(self, pv: PodInfo) -> None:
        """Count `pv` against this node (replacing an earlier version of the same pod)."""
        if pv.key in self.pods:
            self.remove_pod(self.pods[pv.key])
        self.pods[pv.key] = pv
        self.cel["pods"].append(pv.cel)
        self._count(pv)
        self.cel["podCount"] = len(self.pods)

    def replace_pod(self, pv: PodInfo) -> None:
        """Count `pv` instead of the earlier version of the same pod, in that version's place among
        the node's pods (added at the end when the pod is not on the node).

        kube-scheduler confirms an assumed pod without touching its node (the pod keeps its place),
        where removing and adding it again would move it to the end; the order of a node's pods
        decides which equal-priority victims preemption reprieves."""
        old = self.pods.get(pv.key)
        if old is None:
            self.add_pod(pv)
            return
        if old is pv:
            return
        at = list(self.pods).index(pv.key)
        self._forget(old)
        self.pods[pv.key] = pv  # an existing key keeps its place
        self.cel["pods"][at] = pv.cel
        self._count(pv)

    def remove_pod(self, pv: PodInfo) -> bool:
        """Stop counting the pod with `pv.key`; False when it was not on this node."""
        if pv.key not in self.pods:
            return False
        self._remove((pv,))
        return True

    def _remove(self, pvs: Iterable[PodInfo]) -> None:
        """Stop counting `pvs`, one after another as kube-scheduler's NodeInfo.RemovePod does: the
        node's last pod takes a removed pod's place (in `pods` and in the CEL list, which holds the
        same pods in the same order). The order of a node's pods is the order preemption collects its
        potential victims in, and with equal priorities that order decides which are reprieved. One
        pass over the node's pods at most."""
        pods, cels = self.pods, self.cel["pods"]
        keys = [pv.key for pv in pvs if pv.key in pods]
        if len(keys) == 1 and next(reversed(pods)) == keys[0]:  # the last pod: nothing moves
            self._forget(pods.pop(keys[0]))
            cels.pop()
        elif keys:
            order = list(pods.values())
            at = {p.key: i for i, p in enumerate(order)}
            for key in keys:
                i = at.pop(key, None)
                if i is None:  # named twice
                    continue
                old, last = order[i], order.pop()
                if last is not old:
                    order[i] = last
                    at[last.key] = i
                self._forget(old)
            pods.clear()
            pods.update((p.key, p) for p in order)
            cels[:] = [p.cel for p in order]
        self.cel["podCount"] = len(pods)

    def _count(self, pv: PodInfo) -> None:
        """Put a placed pod's requests and host ports on the node (what `_forget` takes off)."""
        self._account(pv, 1)
        if has_pod_affinity(pv.cel):
            self.affinity_pods += 1
        self.cel["usedPorts"].extend(pv.cel["hostPorts"])

    def _forget(self, old: PodInfo) -> None:
        """Take a removed pod's requests and host ports off the node.

        The node's used ports are a set, as kube-scheduler's NodeInfo.UsedPorts (HostPortInfo): a
        removed pod's (hostIP, hostPort, protocol) leaves it even when another pod on the node still
        declares it (two pods bound to one node by name may). So a preemption that evicts one of them
        frees the port for the preemptor, as in kube-scheduler (the differential run s53-44)."""
        self._account(old, -1)
        if has_pod_affinity(old.cel):
            self.affinity_pods -= 1
        if old.host_ports:
            gone = set(old.host_ports)
            self.cel["usedPorts"] = [
                p for p in self.cel["usedPorts"] if (p["hostIP"], p["hostPort"], p["protocol"]) not in gone
            ]

    def _account(self, pv: PodInfo, sign: int) -> None:
        """Add (sign 1) or subtract (sign -1) the pod's requests."""
        requested: dict[str, int] = self.cel["requested"]
        free: dict[str, int] = self.cel["free"]
        for res, amount in pv.requests.items():
            requested[res] = requested.get(res, 0) + sign * amount
            if res in free:
                free[res] -= sign * amount
        requested["pods"] = requested.get("pods", 0) + sign
        if "pods" in free:
            free["pods"] -= sign
        non_zero: dict[str, int] = self.cel["nonZeroRequested"]
        for res, amount in pv.non_zero_requests.items():
            non_zero[res] = non_zero.get(res, 0) + sign * amount

    # -- copies for what-if evaluation

    def _copy(self) -> NodeInfo:
        """A copy sharing node-level data, with its own allocation state."""
        copy = NodeInfo(
            name=self.name,
            uid=self.uid,
            labels=self.labels,
            taints=self.taints,
            allocatable=self.allocatable,
            capacity=self.capacity,
            images=self.images,
            ready=self.ready,
            unschedulable=self.unschedulable,
            raw=self.raw,
        )
        copy.cel = dict(self.cel)
        copy.cel["requested"] = dict(self.cel["requested"])
        copy.cel["free"] = dict(self.cel["free"])
        copy.cel["nonZeroRequested"] = dict(self.cel["nonZeroRequested"])
        copy.cel["pods"] = list(self.cel["pods"])
        copy.cel["usedPorts"] = list(self.cel["usedPorts"])
        copy.pods = dict(self.pods)
        copy.affinity_pods = self.affinity_pods
        return copy

    def clone_without(self, pods: Iterable[PodInfo]) -> NodeInfo:
        """A copy of this node with `pods` removed (preemption's what-if)."""
        copy = self._copy()
        copy._remove(pods)
        return copy

    def with_pods(self, pods: Iterable[PodInfo]) -> NodeInfo:
        """A copy of this node with `pods` added (nominated pods, for filtering)."""
        copy = self._copy()
        for pv in pods:
            copy.add_pod(pv)
        return copy


def _node_ready(conditions: list[dict[str, Any]]) -> bool:
    """True when the Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    """Convert a Kubernetes node dict into a `NodeInfo` with no pods; raises ClusterDataError."""
    meta = mapping(obj.get("metadata"), "node: metadata")
    name = meta.get("name")
    if not name or not isinstance(name, str):
        raise ClusterDataError("node: metadata.name is missing")
    where = f"node {name}"
    spec = mapping(obj.get("spec"), f"{where}: spec")
    status = mapping(obj.get("status"), f"{where}: status")
    metadata = project(meta, kt.OBJECT_META, f"{where}: metadata")
    cel_spec = project(spec, kt.NODE_SPEC, f"{where}: spec")
    cel_status = project(status, kt.NODE_STATUS, f"{where}: status")

    capacity = to_ints(
        quantities(status.get("capacity"), f"{where}: status.capacity"), f"{where}: status.capacity"
    )
    if status.get("allocatable") is None:
        allocatable = dict(capacity)  # hand-written objects often give only one of the two
    else:
        allocatable = to_ints(
            quantities(status.get("allocatable"), f"{where}: status.allocatable"),
            f"{where}: status.allocatable",
        )
    images: dict[str, int] = {}
    for image in cel_status.get("images", []):
        for image_name in image.get("names", []):
            images[image_name] = image.get("sizeBytes", 0)
    taints = cel_spec.get("taints", [])
    labels = metadata.get("labels", {})
    ready = _node_ready(cel_status.get("conditions", []))
    unschedulable = cel_spec.get("unschedulable", False)

    requested = dict.fromkeys(allocatable, 0)
    requested["pods"] = 0
    for res in ALWAYS_REQUESTED:
        requested.setdefault(res, 0)
    cel: dict[str, Any] = {
        "name": name,
        "uid": metadata.get("uid", ""),
        "labels": labels,
        "annotations": metadata.get("annotations", {}),
        "unschedulable": unschedulable,
        "taints": taints,
        "allocatable": allocatable,
        "capacity": capacity,
        "requested": requested,
        "nonZeroRequested": {"cpu": 0, "memory": 0},
        "free": dict(allocatable),
        "pods": [],
        "podCount": 0,
        "usedPorts": [],
        "images": images,
        "ready": ready,
        "metadata": metadata,
        "spec": cel_spec,
        "status": cel_status,
    }
    return NodeInfo(
        name=name,
        uid=cel["uid"],
        labels=labels,
        taints=taints,
        allocatable=allocatable,
        capacity=capacity,
        images=images,
        ready=ready,
        unschedulable=unschedulable,
        raw=obj,
        cel=cel,
    )
