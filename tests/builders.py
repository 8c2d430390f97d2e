"""Small builders of Kubernetes objects (API JSON shape, camelCase dicts) for tests.

    make_node("n1", cpu="4", memory="8Gi", labels={"zone": "a"}, taints=[taint("gpu", "true")])
    make_pod("p", cpu="500m", memory="1Gi", tolerations=[toleration("gpu")], node_name="n1")

Everything returned is a fresh plain dict that can be fed to `policyd.scheduler.cluster.objects`, written to a
cluster file with `yaml.safe_dump`, or tweaked by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Obj = dict[str, Any]
# (key, operator, values) as in a NodeSelectorRequirement / LabelSelectorRequirement
Requirement = tuple[str, str, Sequence[str]]

DEFAULT_IMAGE = "registry.k8s.io/pause:3.9"
DEFAULT_CREATION = "2024-01-01T00:00:00Z"


def _resources(
    cpu: str | None, memory: str | None, extended: Mapping[str, str | int] | None
) -> dict[str, str]:
    """A ResourceList from the common arguments."""
    out: dict[str, str] = {}
    if cpu is not None:
        out["cpu"] = cpu
    if memory is not None:
        out["memory"] = memory
    for name, q in (extended or {}).items():
        out[name] = str(q)
    return out


def port(host_port: int, container_port: int | None = None, protocol: str = "TCP", host_ip: str = "") -> Obj:
    """A ContainerPort exposing `host_port` on the node."""
    p: Obj = {"containerPort": container_port or host_port, "hostPort": host_port, "protocol": protocol}
    if host_ip:
        p["hostIP"] = host_ip
    return p


def make_container(
    name: str = "main",
    cpu: str | None = None,
    memory: str | None = None,
    *,
    image: str = DEFAULT_IMAGE,
    extended: Mapping[str, str | int] | None = None,
    limits: Mapping[str, str] | None = None,
    ports: Iterable[int | Obj] = (),
    restart_policy: str | None = None,
) -> Obj:
    """A container with the given requests (and limits, ports; `restart_policy="Always"`: a sidecar)."""
    c: Obj = {"name": name, "image": image}
    requests = _resources(cpu, memory, extended)
    resources: Obj = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = dict(limits)
    if resources:
        c["resources"] = resources
    port_list = [port(p) if isinstance(p, int) else dict(p) for p in ports]
    if port_list:
        c["ports"] = port_list
    if restart_policy is not None:
        c["restartPolicy"] = restart_policy
    return c


def make_sidecar(name: str, cpu: str | None = None, memory: str | None = None, **kw: Any) -> Obj:
    """A restartable init container (KEP-753 sidecar)."""
    return make_container(name, cpu, memory, restart_policy="Always", **kw)


def toleration(
    key: str = "",
    value: str | None = None,
    effect: str = "",
    operator: str | None = None,
    seconds: int | None = None,
) -> Obj:
    """A toleration; operator defaults to Equal with a value, Exists without."""
    t: Obj = {"operator": operator or ("Equal" if value is not None else "Exists")}
    if key:
        t["key"] = key
    if value is not None:
        t["value"] = value
    if effect:
        t["effect"] = effect
    if seconds is not None:
        t["tolerationSeconds"] = seconds
    return t


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Obj:
    """A node taint."""
    t: Obj = {"key": key, "effect": effect}
    if value:
        t["value"] = value
    return t


def requirement(key: str, operator: str, values: Sequence[str] = ()) -> Obj:
    """A NodeSelectorRequirement / LabelSelectorRequirement."""
    r: Obj = {"key": key, "operator": operator}
    if values:
        r["values"] = list(values)
    return r


def node_affinity(
    required: Sequence[Sequence[Requirement]] = (),
    preferred: Sequence[tuple[int, Sequence[Requirement]]] = (),
    required_fields: Sequence[Sequence[Requirement]] = (),
) -> Obj:
    """An Affinity with nodeAffinity: `required` is a list of terms (ORed) of requirements (ANDed)."""
    na: Obj = {}
    terms: list[Obj] = [{"matchExpressions": [requirement(*r) for r in term]} for term in required]
    terms += [{"matchFields": [requirement(*r) for r in term]} for term in required_fields]
    if terms:
        na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if preferred:
        na["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "preference": {"matchExpressions": [requirement(*r) for r in term]}}
            for w, term in preferred
        ]
    return {"nodeAffinity": na}


def label_selector(
    match_labels: Mapping[str, str] | None = None, expressions: Sequence[Requirement] = ()
) -> Obj:
    """A LabelSelector."""
    s: Obj = {}
    if match_labels:
        s["matchLabels"] = dict(match_labels)
    if expressions:
        s["matchExpressions"] = [requirement(*r) for r in expressions]
    return s


def pod_affinity_term(
    match_labels: Mapping[str, str],
    topology_key: str = "kubernetes.io/hostname",
    namespaces: Sequence[str] = (),
    expressions: Sequence[Requirement] = (),
) -> Obj:
    """A PodAffinityTerm selecting pods by labels within a topology domain."""
    t: Obj = {"labelSelector": label_selector(match_labels, expressions), "topologyKey": topology_key}
    if namespaces:
        t["namespaces"] = list(namespaces)
    return t


def pod_affinity(
    required: Sequence[Obj] = (),
    preferred: Sequence[tuple[int, Obj]] = (),
    anti_required: Sequence[Obj] = (),
    anti_preferred: Sequence[tuple[int, Obj]] = (),
) -> Obj:
    """An Affinity with podAffinity / podAntiAffinity built from `pod_affinity_term`s."""
    out: Obj = {}
    for field_name, req, pref in (
        ("podAffinity", required, preferred),
        ("podAntiAffinity", anti_required, anti_preferred),
    ):
        part: Obj = {}
        if req:
            part["requiredDuringSchedulingIgnoredDuringExecution"] = list(req)
        if pref:
            part["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "podAffinityTerm": t} for w, t in pref
            ]
        if part:
            out[field_name] = part
    return out


def spread_constraint(
    match_labels: Mapping[str, str],
    topology_key: str = "topology.kubernetes.io/zone",
    max_skew: int = 1,
    when_unsatisfiable: str = "DoNotSchedule",
    min_domains: int | None = None,
) -> Obj:
    """A TopologySpreadConstraint."""
    c: Obj = {
        "maxSkew": max_skew,
        "topologyKey": topology_key,
        "whenUnsatisfiable": when_unsatisfiable,
        "labelSelector": label_selector(match_labels),
    }
    if min_domains is not None:
        c["minDomains"] = min_domains
    return c


def make_pod(
    name: str,
    cpu: str | None = None,
    memory: str | None = None,
    *,
    namespace: str = "default",
    extended: Mapping[str, str | int] | None = None,
    limits: Mapping[str, str] | None = None,
    containers: Sequence[Obj] | None = None,
    init: Sequence[Obj] = (),
    overhead: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    tolerations: Sequence[Obj] = (),
    affinity: Obj | None = None,
    node_selector: Mapping[str, str] | None = None,
    spread: Sequence[Obj] = (),
    ports: Iterable[int | Obj] = (),
    image: str = DEFAULT_IMAGE,
    priority: int | None = None,
    priority_class: str | None = None,
    preemption_policy: str | None = None,
    node_name: str | None = None,
    nominated_node_name: str | None = None,
    scheduler_name: str | None = None,
    uid: str | None = None,
    creation: str | None = DEFAULT_CREATION,
    start_time: str | None = None,
    phase: str | None = None,
    owner: str | None = None,
    deleting: bool = False,
) -> Obj:
    """A pod; `cpu`/`memory`/`extended`/`ports` describe its single container unless `containers`."""
    if containers is None:
        containers = [
            make_container("main", cpu, memory, image=image, extended=extended, limits=limits, ports=ports)
        ]
    meta: Obj = {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}"}
    if creation is not None:
        meta["creationTimestamp"] = creation
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner:
        kind, _, owner_name = owner.partition("/")
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": kind,
                "name": owner_name,
                "uid": f"uid-{kind}-{owner_name}",
                "controller": True,
            }
        ]
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T01:00:00Z"
        meta["deletionGracePeriodSeconds"] = 30
    spec: Obj = {"containers": [dict(c) for c in containers]}
    if init:
        spec["initContainers"] = [dict(c) for c in init]
    if overhead:
        spec["overhead"] = dict(overhead)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if affinity:
        spec["affinity"] = affinity
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if spread:
        spec["topologySpreadConstraints"] = [dict(c) for c in spread]
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if preemption_policy is not None:
        spec["preemptionPolicy"] = preemption_policy
    if node_name is not None:
        spec["nodeName"] = node_name
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    status: Obj = {"phase": phase or ("Running" if node_name else "Pending")}
    if nominated_node_name is not None:
        status["nominatedNodeName"] = nominated_node_name
    if start_time is not None:
        status["startTime"] = start_time
    elif node_name:
        status["startTime"] = creation or DEFAULT_CREATION
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def make_node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    *,
    labels: Mapping[str, str] | None = None,
    zone: str | None = None,
    taints: Sequence[Obj] = (),
    images: Mapping[str, int] | Sequence[tuple[Sequence[str], int]] | None = None,
    extended: Mapping[str, str | int] | None = None,
    ephemeral_storage: str = "100Gi",
    capacity: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    uid: str | None = None,
) -> Obj:
    """A node with allocatable = capacity unless `capacity` is given; carries a hostname label."""
    node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    if zone is not None:
        node_labels["topology.kubernetes.io/zone"] = zone
    node_labels.update(labels or {})
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": ephemeral_storage}
    allocatable.update(_resources(None, None, extended))
    image_list: list[Obj] = []
    if isinstance(images, Mapping):
        image_list = [{"names": [n], "sizeBytes": size} for n, size in images.items()]
    elif images:
        image_list = [{"names": list(names), "sizeBytes": size} for names, size in images]
    spec: Obj = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    status: Obj = {
        "capacity": dict(capacity or allocatable),
        "allocatable": allocatable,
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastTransitionTime": DEFAULT_CREATION,
            }
        ],
    }
    if image_list:
        status["images"] = image_list
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": uid or f"uid-node-{name}", "labels": node_labels},
        "spec": spec,
        "status": status,
    }


def make_pdb(
    name: str,
    match_labels: Mapping[str, str],
    *,
    namespace: str = "default",
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    disruptions_allowed: int | None = None,
) -> Obj:
    """A policy/v1 PodDisruptionBudget (with status.disruptionsAllowed when given)."""
    spec: Obj = {"selector": label_selector(match_labels)}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    pdb: Obj = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    if disruptions_allowed is not None:
        pdb["status"] = {"disruptionsAllowed": disruptions_allowed}
    return pdb


def make_priority_class(
    name: str, value: int, *, global_default: bool = False, preemption_policy: str | None = None
) -> Obj:
    """A scheduling.k8s.io/v1 PriorityClass."""
    pc: Obj = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    if global_default:
        pc["globalDefault"] = True
    if preemption_policy is not None:
        pc["preemptionPolicy"] = preemption_policy
    return pc
