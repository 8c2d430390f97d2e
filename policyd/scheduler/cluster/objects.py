"""The cache boundary: Kubernetes pod/node dicts -> `PodInfo` / `NodeInfo` with CEL-visible dicts.

This is the only module that reads raw API dicts (docs/DESIGN.md, "CEL-visible objects"). A pod is
converted once, when it enters the cache; a node's allocation (`requested`, `free`, `pods`, ...) is
maintained incrementally as pods are added and removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

from policyd.cel.types import (
    INT,
    TIMESTAMP,
    CelType,
    ListType,
    MapType,
    ObjectType,
    PrimitiveType,
)
from policyd.cel.values import Timestamp
from policyd.errors import CelEvalError, ClusterDataError
from policyd.policy import k8s_types as kt
from policyd.quantity import QuantityError, parse_quantity, to_int, to_milli

__all__ = [
    "API_DEFAULT_SCHEDULER_NAME",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "NodeInfo",
    "NodeInfo",
    "PodInfo",
    "cel_timestamp",
    "node_info",
    "normalized_image_name",
    "parse_time",
    "pod_info",
    "resource_value",
]

# the API server's default spec.schedulerName (kube-scheduler's); policyd's own: framework.DEFAULT_PROFILE
API_DEFAULT_SCHEDULER_NAME = "default-scheduler"
# kube-scheduler's scoring defaults for containers without cpu/memory requests (GetNonzeroRequests).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
_NON_ZERO_DEFAULTS = {"cpu": Fraction(1, 10), "memory": Fraction(DEFAULT_MEMORY_REQUEST)}
_ALWAYS_REQUESTED = ("cpu", "memory", "ephemeral-storage")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# ----------------------------------------------------------------------------------------------
# scalar conversions


def resource_value(name: str, q: Fraction) -> int:
    """The integer policyd uses for a quantity of resource `name` (cpu: millicores, else units)."""
    return to_milli(q) if name == "cpu" else to_int(q)


_TIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})"
)
_NANOS = 1_000_000_000


def parse_time(text: str) -> int:
    """Parse an RFC 3339 timestamp (as Kubernetes writes them) to nanoseconds since the epoch."""
    m = _TIME_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"invalid RFC 3339 timestamp {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        dt = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError as e:
        raise ValueError(f"invalid RFC 3339 timestamp {text!r}: {e}") from None
    tz = m.group(8)
    if tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        dt -= sign * timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6]))
    nanos = int((m.group(7) or "").ljust(9, "0"))
    return (dt - _EPOCH) // timedelta(seconds=1) * _NANOS + nanos


def _datetime_ns(dt: datetime) -> int:
    """Nanoseconds since the epoch of a datetime (naive ones, as YAML loaders produce, are UTC)."""
    dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt
    return (dt - _EPOCH) // timedelta(microseconds=1) * 1000


def cel_timestamp(ns: int) -> Timestamp:
    """The CEL runtime value of a timestamp given in nanoseconds since the epoch."""
    return Timestamp(ns)


def normalized_image_name(name: str) -> str:
    """Add `:latest` to an untagged image name (as kube-scheduler's ImageLocality does)."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


# ----------------------------------------------------------------------------------------------
# typed projection of raw objects onto the declared Kubernetes shapes


class _Mismatch(Exception):
    """A value does not fit its declared type; `path` is filled in while unwinding."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


def _project(value: Any, t: CelType, where: str) -> Any:
    """Convert a raw JSON value to the runtime representation of declared type `t`."""
    try:
        return _convert(value, t)
    except _Mismatch as e:
        raise ClusterDataError(f"{where}{''.join(reversed(e.path))}: {e.message}") from None


def _convert(value: Any, t: CelType) -> Any:
    """`_project` without error context (added by the caller while unwinding)."""
    if isinstance(t, PrimitiveType):
        name = t.name
        if name == "string":
            if isinstance(value, str):
                return value
            if isinstance(value, bool):
                return "true" if value else "false"
            if isinstance(value, int | float):
                return str(value)
            raise _Mismatch(f"expected a string, got {type(value).__name__}")
        if name == "int":
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise _Mismatch(f"expected an integer, got {value!r}")
        if name == "bool":
            if isinstance(value, bool):
                return value
            raise _Mismatch(f"expected a boolean, got {value!r}")
        if t == TIMESTAMP:
            if isinstance(value, datetime):
                return cel_timestamp(_datetime_ns(value))
            if not isinstance(value, str):
                raise _Mismatch(f"expected an RFC 3339 timestamp, got {value!r}")
            try:
                return cel_timestamp(parse_time(value))
            except (ValueError, CelEvalError) as e:
                raise _Mismatch(str(e)) from None
        return value
    if isinstance(t, ObjectType):
        if type(value) is not dict and not isinstance(value, Mapping):
            raise _Mismatch(f"expected an object, got {type(value).__name__}")
        out: dict[str, Any] = {}
        for key, v in value.items():
            if v is None:
                continue
            ft = t.fields.get(key)
            if ft is not None:
                try:
                    out[key] = _convert(v, ft)
                except _Mismatch as e:
                    e.path.append(f".{key}")
                    raise
        return out
    if isinstance(t, ListType):
        if type(value) is not list and not isinstance(value, list | tuple):
            raise _Mismatch(f"expected a list, got {type(value).__name__}")
        elem = t.elem
        items: list[Any] = []
        for i, v in enumerate(value):
            if v is None:
                continue
            try:
                items.append(_convert(v, elem))
            except _Mismatch as e:
                e.path.append(f"[{i}]")
                raise
        return items
    if isinstance(t, MapType):
        if type(value) is not dict and not isinstance(value, Mapping):
            raise _Mismatch(f"expected a map, got {type(value).__name__}")
        entries: dict[Any, Any] = {}
        for k, v in value.items():
            if v is None:
                continue
            try:
                entries[_convert(k, t.key)] = _convert(v, t.value)
            except _Mismatch as e:
                e.path.append(f".{k}")
                raise
        return entries
    return value  # dyn: as is


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    """`value` as a mapping; None reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ClusterDataError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _quantities(raw: Any, where: str) -> dict[str, Fraction]:
    """A ResourceList (name -> quantity) parsed exactly."""
    out: dict[str, Fraction] = {}
    for name, q in _mapping(raw, where).items():
        if q is None:
            continue
        try:
            out[str(name)] = parse_quantity(q)
        except QuantityError as e:
            raise ClusterDataError(f"{where}.{name}: {e}") from None
    return out


def _to_ints(quantities: Mapping[str, Fraction]) -> dict[str, int]:
    """Scale parsed quantities to policyd's integer units."""
    return {name: resource_value(name, q) for name, q in quantities.items()}


def _add(total: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    """total += more, per resource."""
    for name, q in more.items():
        total[name] = total.get(name, Fraction(0)) + q


def _max_into(total: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    """total = max(total, other), per resource."""
    for name, q in other.items():
        if name not in total or q > total[name]:
            total[name] = q


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
    return [_mapping(c, f"{where}.{name}[{i}]") for i, c in enumerate(raw)]


def _container_requests(c: Mapping[str, Any], where: str) -> dict[str, Fraction]:
    """A container's requests; limits stand in for missing requests (API server defaulting)."""
    resources = _mapping(c.get("resources"), f"{where}.resources")
    requests = _quantities(resources.get("requests"), f"{where}.resources.requests")
    limits = _quantities(resources.get("limits"), f"{where}.resources.limits")
    for name, q in limits.items():
        requests.setdefault(name, q)
    return requests


def _non_zero(requests: Mapping[str, Fraction]) -> dict[str, Fraction]:
    """cpu and memory of one container, with the scoring defaults when missing."""
    return {name: requests.get(name, default) for name, default in _NON_ZERO_DEFAULTS.items()}


def _effective(
    containers: list[dict[str, Fraction]],
    inits: list[tuple[dict[str, Fraction], bool]],
    overhead: Mapping[str, Fraction],
) -> dict[str, Fraction]:
    """max(sum(containers), max(init containers)) + overhead, with KEP-753 sidecars."""
    total: dict[str, Fraction] = {}
    for reqs in containers:
        _add(total, reqs)
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for reqs, restartable in inits:
        if restartable:
            # a sidecar keeps running: it adds to the pod's steady state and to every later init
            _add(total, reqs)
            _add(sidecars, reqs)
            _max_into(init_peak, sidecars)
        else:
            during = dict(reqs)
            _add(during, sidecars)
            _max_into(init_peak, during)
    _max_into(total, init_peak)
    _add(total, overhead)
    return total


def _host_ports(containers: Iterable[Mapping[str, Any]], where: str) -> list[dict[str, Any]]:
    """HostPort dicts of every container port with hostPort > 0 (defaults 0.0.0.0 / TCP)."""
    out: list[dict[str, Any]] = []
    for c in containers:
        for i, p in enumerate(c.get("ports") or []):
            p = _mapping(p, f"{where}.ports[{i}]")
            port = _project(p.get("hostPort", 0), INT, f"{where}.ports[{i}].hostPort")
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
    return None if ts is None else ts.ns / _NANOS


_RESOURCE_MEMO: dict[str, tuple[dict[str, int], dict[str, int], dict[str, int]]] = {}
_RESOURCE_MEMO_SIZE = 4096


def _pod_resources(
    spec: Mapping[str, Any],
    containers: list[Mapping[str, Any]],
    inits: list[Mapping[str, Any]],
    where: str,
) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Effective requests, non-zero requests and limits of a pod (fresh dicts).

    Memoised by the text of the containers' resources: pods of one workload share them, and exact
    quantity arithmetic is the costly part of converting a pod.
    """
    key = repr(
        (
            [c.get("resources") for c in containers],
            [(c.get("resources"), c.get("restartPolicy")) for c in inits],
            spec.get("overhead"),
        )
    )
    hit = _RESOURCE_MEMO.get(key)
    if hit is None:
        hit = _compute_resources(spec, containers, inits, where)
        if len(_RESOURCE_MEMO) >= _RESOURCE_MEMO_SIZE:
            _RESOURCE_MEMO.clear()
        _RESOURCE_MEMO[key] = hit
    return dict(hit[0]), dict(hit[1]), dict(hit[2])


def _compute_resources(
    spec: Mapping[str, Any],
    containers: list[Mapping[str, Any]],
    inits: list[Mapping[str, Any]],
    where: str,
) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    c_reqs = [_container_requests(c, f"{where}: spec.containers[{i}]") for i, c in enumerate(containers)]
    i_reqs = [_container_requests(c, f"{where}: spec.initContainers[{i}]") for i, c in enumerate(inits)]
    restartable = [c.get("restartPolicy") == "Always" for c in inits]
    overhead = _quantities(spec.get("overhead"), f"{where}: spec.overhead")

    effective = _effective(c_reqs, list(zip(i_reqs, restartable, strict=True)), overhead)
    for res in _ALWAYS_REQUESTED:
        effective.setdefault(res, Fraction(0))
    non_zero = _effective(
        [_non_zero(r) for r in c_reqs],
        [(_non_zero(r), rs) for r, rs in zip(i_reqs, restartable, strict=True)],
        {k: v for k, v in overhead.items() if k in _NON_ZERO_DEFAULTS},
    )
    limits: dict[str, Fraction] = {}
    for i, c in enumerate(containers):
        resources = _mapping(c.get("resources"), f"{where}: spec.containers[{i}].resources")
        _add(limits, _quantities(resources.get("limits"), f"{where}: spec.containers[{i}].resources.limits"))
    return _to_ints(effective), _to_ints(non_zero), _to_ints(limits)


def pod_info(obj: Mapping[str, Any]) -> PodInfo:
    """Convert a Kubernetes pod dict (API JSON shape) into a `PodInfo`; raises ClusterDataError."""
    meta = _mapping(obj.get("metadata"), "pod: metadata")
    name = meta.get("name")
    namespace = meta.get("namespace") or "default"
    if not name or not isinstance(name, str):
        raise ClusterDataError(f"pod in namespace {namespace!r}: metadata.name is missing")
    key = f"{namespace}/{name}"
    where = f"pod {key}"
    spec = _mapping(obj.get("spec"), f"{where}: spec")
    status = _mapping(obj.get("status"), f"{where}: status")

    metadata = _project(meta, kt.OBJECT_META, f"{where}: metadata")
    metadata["namespace"] = namespace
    cel_spec = _project(spec, kt.POD_SPEC, f"{where}: spec")
    cel_status = _project(status, kt.POD_STATUS, f"{where}: status")

    containers = _containers(spec, "containers", f"{where}: spec")
    inits = _containers(spec, "initContainers", f"{where}: spec")
    requests, non_zero, limits = _pod_resources(spec, containers, inits, where)

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
        raw=obj,
        cel=cel,
    )


_META_VOLATILE = ("resourceVersion", "managedFields")


def _without(d: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def pod_info_update(prev: PodInfo, obj: Mapping[str, Any]) -> PodInfo:
    """The `PodInfo` of `obj`, a later version of the pod `prev` was made from.

    When only spec.nodeName, status and metadata.resourceVersion changed (a bind, a condition, a
    nomination: most pod updates a scheduler sees), it is derived from `prev` without converting
    the spec again; otherwise it is converted afresh (`pod_info`). Both give equal objects.
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
        and _without(meta, _META_VOLATILE) == _without(old_meta, _META_VOLATILE)
        and _without(spec, ("nodeName",)) == _without(old_spec, ("nodeName",))
    ):
        return pod_info(obj)
    where = f"pod {prev.key}"
    status = _mapping(obj.get("status"), f"{where}: status")
    cel_status = _project(status, kt.POD_STATUS, f"{where}: status")
    node_name = spec.get("nodeName") or ""
    metadata = dict(prev.cel["metadata"])
    if meta.get("resourceVersion") is None:
        metadata.pop("resourceVersion", None)
    else:
        metadata["resourceVersion"] = meta["resourceVersion"]
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
    return _evolve(
        prev,
        node_name=node_name,
        nominated_node_name=nominated,
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

    # -- node updates

    def update_node(self, obj: Mapping[str, Any]) -> None:
        """Replace the node object (labels, taints, allocatable...) keeping the pods on it."""
        fresh = node_info(obj)
        if fresh.name != self.name:
            raise ClusterDataError(f"node {self.name}: update carries another name {fresh.name!r}")
        pods = list(self.pods.values())
        for f in ("uid", "labels", "taints", "allocatable", "capacity", "images", "ready", "unschedulable"):
            setattr(self, f, getattr(fresh, f))
        self.raw = fresh.raw
        self.pods = {}
        self.cel.clear()  # in place: holders of `.cel` see the new node
        self.cel.update(fresh.cel)
        for pv in pods:
            self.add_pod(pv)

    # -- pod accounting (incremental)

    def add_pod(self, pv: PodInfo) -> None:
        """Count `pv` against this node (replacing an earlier version of the same pod)."""
        if pv.key in self.pods:
            self.remove_pod(self.pods[pv.key])
        self.pods[pv.key] = pv
        self._account(pv, 1)
        self.cel["pods"].append(pv.cel)
        self.cel["usedPorts"].extend(pv.cel["hostPorts"])
        self.cel["podCount"] = len(self.pods)

    def remove_pod(self, pv: PodInfo) -> bool:
        """Stop counting the pod with `pv.key`; False when it was not on this node."""
        old = self.pods.pop(pv.key, None)
        if old is None:
            return False
        self._account(old, -1)
        pods: list[dict[str, Any]] = self.cel["pods"]
        for i, c in enumerate(pods):
            if c is old.cel:
                del pods[i]
                break
        ports: list[dict[str, Any]] = self.cel["usedPorts"]
        for p in old.cel["hostPorts"]:
            for i, q in enumerate(ports):
                if q is p:
                    del ports[i]
                    break
        self.cel["podCount"] = len(self.pods)
        return True

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
        return copy

    def clone_without(self, pods: Iterable[PodInfo]) -> NodeInfo:
        """A copy of this node with `pods` removed (preemption's what-if)."""
        copy = self._copy()
        for pv in pods:
            copy.remove_pod(pv)
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
    meta = _mapping(obj.get("metadata"), "node: metadata")
    name = meta.get("name")
    if not name or not isinstance(name, str):
        raise ClusterDataError("node: metadata.name is missing")
    where = f"node {name}"
    spec = _mapping(obj.get("spec"), f"{where}: spec")
    status = _mapping(obj.get("status"), f"{where}: status")
    metadata = _project(meta, kt.OBJECT_META, f"{where}: metadata")
    cel_spec = _project(spec, kt.NODE_SPEC, f"{where}: spec")
    cel_status = _project(status, kt.NODE_STATUS, f"{where}: status")

    capacity = _to_ints(_quantities(status.get("capacity"), f"{where}: status.capacity"))
    if status.get("allocatable") is None:
        allocatable = dict(capacity)  # hand-written objects often give only one of the two
    else:
        allocatable = _to_ints(_quantities(status.get("allocatable"), f"{where}: status.allocatable"))
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
    for res in _ALWAYS_REQUESTED:
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
