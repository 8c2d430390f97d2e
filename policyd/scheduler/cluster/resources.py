"""A pod's resource requests as kube-scheduler counts them (effective requests, non-zero requests, limits).

Quantities are parsed exactly and scaled to policyd's integer units (cpu in millicores, else units).
Pod-level resources (`spec.resources`, PodLevelResources: beta and on by default since Kubernetes
1.34) replace the containers' aggregate for the resources they name (cpu, memory, hugepages-*), before
the overhead is added, as component-helpers' PodRequests and PodLimits do.

A pod being resized in place (InPlacePodVerticalScaling, on by default since 1.33) counts, per
resource, the most of what its spec asks, what the kubelet allocated to its containers
(`status.containerStatuses[].allocatedResources`) and what they run with (`...resources.requests`),
each aggregated over the containers as the spec is; when the resize is infeasible (the
PodResizePending condition, reason Infeasible), the spec is left out. kube-scheduler counts pods so
(`UseStatusResources`) since 1.33.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from policyd.errors import ClusterDataError
from policyd.quantity import QuantityError, parse_quantity, to_int, to_milli
from policyd.scheduler.cluster.projection import mapping

# kube-scheduler's scoring defaults for containers without cpu/memory requests (GetNonzeroRequests).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
_NON_ZERO_DEFAULTS = {
    "cpu": Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000),
    "memory": Fraction(DEFAULT_MEMORY_REQUEST),
}
# amounts and their sums are int64 in kube-scheduler: values at or beyond this are refused
INT64_BOUND = 2**63
# resources every pod's requests and every node's `requested` carry (0 when not requested)
ALWAYS_REQUESTED = ("cpu", "memory", "ephemeral-storage")


def resource_value(name: str, q: Fraction) -> int:
    """The integer policyd uses for a quantity of resource `name` (cpu: millicores, else units);
    QuantityError when it is beyond int64, the integers kube-scheduler computes in (its `MilliValue`
    of `10Ei` cpu wraps around to a negative number; policyd refuses the object instead)."""
    value = to_milli(q) if name == "cpu" else to_int(q)
    if not -INT64_BOUND <= value < INT64_BOUND:
        unit = "millicores" if name == "cpu" else "units"
        raise QuantityError(f"{value} {unit} is beyond the 64-bit integers kube-scheduler counts in")
    return value


def quantities(raw: Any, where: str) -> dict[str, Fraction]:
    """A ResourceList (name -> quantity) parsed exactly."""
    out: dict[str, Fraction] = {}
    for name, q in mapping(raw, where).items():
        if q is None:
            continue
        try:
            out[str(name)] = parse_quantity(q)
        except QuantityError as e:
            raise ClusterDataError(f"{where}.{name}: {e}") from None
    return out


def to_ints(parsed: Mapping[str, Fraction], where: str) -> dict[str, int]:
    """Scale parsed quantities to policyd's integer units; ClusterDataError (naming `where` and the
    resource) for one beyond them."""
    out: dict[str, int] = {}
    for name, q in parsed.items():
        try:
            out[name] = resource_value(name, q)
        except QuantityError as e:
            raise ClusterDataError(f"{where}.{name}: {e}") from None
    return out


def _add(total: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    """total += more, per resource."""
    for name, q in more.items():
        total[name] = total.get(name, Fraction(0)) + q


def _max_into(total: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    """total = max(total, other), per resource."""
    for name, q in other.items():
        if name not in total or q > total[name]:
            total[name] = q


def _container_requests(c: Mapping[str, Any], where: str) -> dict[str, Fraction]:
    """A container's requests; limits stand in for missing requests (API server defaulting)."""
    resources = mapping(c.get("resources"), f"{where}.resources")
    requests = quantities(resources.get("requests"), f"{where}.resources.requests")
    limits = quantities(resources.get("limits"), f"{where}.resources.limits")
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


_RESOURCE_MEMO: dict[bytes | str, tuple[dict[str, int], dict[str, int], dict[str, int]]] = {}
_RESOURCE_MEMO_SIZE = 4096


def status_resources(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a pod's status its requests depend on (in-place resize): each container's allocated
    and actual resources, and whether the resize is infeasible; () when there is none of it."""
    every = [
        (c.get("name"), c.get("allocatedResources"), _actual_requests(c))
        for part in ("containerStatuses", "initContainerStatuses")
        for c in status.get(part) or ()
        if isinstance(c, Mapping)
    ]
    statuses = [entry for entry in every if entry[1] is not None or entry[2] is not None]
    if not statuses:
        return ()
    infeasible = any(
        isinstance(c, Mapping) and c.get("type") == "PodResizePending" and c.get("reason") == "Infeasible"
        for c in status.get("conditions") or ()
    )
    return (tuple(statuses), infeasible)


def _actual_requests(container_status: Mapping[str, Any]) -> Any:
    resources = container_status.get("resources")
    return resources.get("requests") if isinstance(resources, Mapping) else None


def pod_resources(
    spec: Mapping[str, Any],
    containers: list[Mapping[str, Any]],
    inits: list[Mapping[str, Any]],
    where: str,
    status: Mapping[str, Any] | None = None,
) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Effective requests, non-zero requests and limits of a pod (fresh dicts).

    Memoised by the pickle of the containers' names and resources (and the resize status, which names
    containers): pods of one workload share them, and exact quantity arithmetic is the costly part of
    converting a pod.
    """
    resized = status_resources(status or {})
    read = (
        [(c.get("name"), c.get("resources")) for c in containers],
        [(c.get("name"), c.get("resources"), c.get("restartPolicy")) for c in inits],
        spec.get("overhead"),
        spec.get("resources"),
        resized,
    )
    try:  # equal pickles: equal values of the same types (cheaper than their text)
        key: bytes | str = pickle.dumps(read, pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - not picklable (never from JSON): its text, as before
        key = repr(read)
    hit = _RESOURCE_MEMO.get(key)
    if hit is None:
        hit = _compute_resources(spec, containers, inits, where, resized)
        if len(_RESOURCE_MEMO) >= _RESOURCE_MEMO_SIZE:
            _RESOURCE_MEMO.clear()
        _RESOURCE_MEMO[key] = hit
    return dict(hit[0]), dict(hit[1]), dict(hit[2])


def _compute_resources(
    spec: Mapping[str, Any],
    containers: list[Mapping[str, Any]],
    inits: list[Mapping[str, Any]],
    where: str,
    resized: tuple[Any, ...] = (),
) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    c_reqs = [_container_requests(c, f"{where}: spec.containers[{i}]") for i, c in enumerate(containers)]
    i_reqs = [_container_requests(c, f"{where}: spec.initContainers[{i}]") for i, c in enumerate(inits)]
    restartable = [c.get("restartPolicy") == "Always" for c in inits]
    overhead = quantities(spec.get("overhead"), f"{where}: spec.overhead")
    pod_requests, pod_limits = _pod_level(spec, [*c_reqs, *i_reqs], where)

    variants = _resize_variants(resized, containers, inits, c_reqs, i_reqs, where)
    effective: dict[str, Fraction] = {}
    non_zero: dict[str, Fraction] = {}
    for c_var, i_var in variants:
        inits_var = list(zip(i_var, restartable, strict=True))
        _max_into(effective, _effective(c_var, inits_var, {}))
        _max_into(
            non_zero,
            _effective([_non_zero(r) for r in c_var], [(_non_zero(r), rs) for r, rs in inits_var], {}),
        )
    effective.update(pod_requests)
    _add(effective, overhead)
    for res in ALWAYS_REQUESTED:
        effective.setdefault(res, Fraction(0))
    non_zero.update({k: v for k, v in pod_requests.items() if k in _NON_ZERO_DEFAULTS})
    _add(non_zero, {k: v for k, v in overhead.items() if k in _NON_ZERO_DEFAULTS})
    limits: dict[str, Fraction] = {}
    for i, c in enumerate(containers):
        resources = mapping(c.get("resources"), f"{where}: spec.containers[{i}].resources")
        _add(limits, quantities(resources.get("limits"), f"{where}: spec.containers[{i}].resources.limits"))
    limits.update(pod_limits)
    return (
        to_ints(effective, f"{where}: requests"),
        to_ints(non_zero, f"{where}: requests"),
        to_ints(limits, f"{where}: limits"),
    )


Requests = list[dict[str, Fraction]]


def _resize_variants(
    resized: tuple[Any, ...],
    containers: list[Mapping[str, Any]],
    inits: list[Mapping[str, Any]],
    c_reqs: Requests,
    i_reqs: Requests,
    where: str,
) -> list[tuple[Requests, Requests]]:
    """The per-container requests whose aggregates a pod counts the most of: the spec's alone, or with
    an in-place resize, the spec's (unless infeasible), the allocated and the actual ones
    (component-helpers' containerAllocatedRequests / containerActuatedRequests)."""
    if not resized:
        return [(c_reqs, i_reqs)]
    statuses, infeasible = resized
    by_name = {name: (allocated, actual) for name, allocated, actual in statuses}

    def pick(cs: list[Mapping[str, Any]], spec_reqs: Requests, actuated: bool) -> Requests:
        out: Requests = []
        for c, spec_r in zip(cs, spec_reqs, strict=True):
            allocated, actual = by_name.get(c.get("name"), (None, None))
            raw = actual if actuated and actual is not None else allocated
            if raw is not None:
                out.append(quantities(raw, f"{where}: status of container {c.get('name')}"))
            else:
                out.append({} if infeasible else spec_r)
        return out

    variants = [(pick(containers, c_reqs, False), pick(inits, i_reqs, False))]
    variants.append((pick(containers, c_reqs, True), pick(inits, i_reqs, True)))
    if not infeasible:
        variants.append((c_reqs, i_reqs))
    return variants


def _pod_level_resource(name: str) -> bool:
    """IsSupportedPodLevelResource: cpu, memory and hugepages."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _pod_level(
    spec: Mapping[str, Any], container_requests: list[dict[str, Fraction]], where: str
) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    """The pod-level requests and limits of the supported resources. A limit without a request
    defaults the request to itself (the API server's defaulting), except for cpu and memory when a
    container requests them: then the request defaults to the containers' aggregate, the value used
    without it."""
    resources = mapping(spec.get("resources"), f"{where}: spec.resources")
    if not resources:
        return {}, {}
    requests = quantities(resources.get("requests"), f"{where}: spec.resources.requests")
    limits = quantities(resources.get("limits"), f"{where}: spec.resources.limits")
    requests = {k: v for k, v in requests.items() if _pod_level_resource(k)}
    limits = {k: v for k, v in limits.items() if _pod_level_resource(k)}
    for name, limit in limits.items():
        overcommittable = not name.startswith("hugepages-")
        if name not in requests and not (overcommittable and any(name in r for r in container_requests)):
            requests[name] = limit
    return requests, limits
