"""Workloads modelled on kube-scheduler's scheduler_perf (test/integration/scheduler_perf).

A workload is a list of ops run in order: `CreateNodes(count, template)`, `CreatePods(count, template,
collect_metrics)` and `Barrier()` (wait until every pod created so far is bound or parked as
unschedulable). Templates are Kubernetes objects as dicts, copied from scheduler_perf's
`config/*.yaml`: node-default (pods 110, cpu 4, memory 32Gi), pod-default (cpu 100m, memory 500Mi),
pod-with-node-affinity, pod-with-topology-spreading, pod-with-pod-anti-affinity, pod-low-priority /
pod-high-priority (Preemption), pod-large-cpu (Unschedulable). `scaled(pods, nodes)` shrinks the pod
(and optionally node) counts for quick runs; where the setup pods fill the nodes (Preemption) the
nodes shrink with the pods, or nothing would be preempted.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

KubeObject = dict[str, Any]


def node_template(labels: Mapping[str, str] | None = None) -> KubeObject:
    """scheduler_perf's node-default.yaml (pods 110, cpu 4, memory 32Gi), Ready."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"generateName": "scheduler-perf-", "labels": dict(labels or {})},
        "spec": {},
        "status": {
            "capacity": {"pods": "110", "cpu": "4", "memory": "32Gi"},
            "allocatable": {"pods": "110", "cpu": "4", "memory": "32Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "phase": "Running",
        },
    }


def _container(cpu: str, memory: str, image: str = "registry.k8s.io/pause:3.10") -> dict[str, Any]:
    return {
        "image": image,
        "name": "pause",
        "ports": [{"containerPort": 80}],
        "resources": {
            "limits": {"cpu": cpu, "memory": memory},
            "requests": {"cpu": cpu, "memory": memory},
        },
    }


def pod_template(
    cpu: str = "100m",
    memory: str = "500Mi",
    *,
    labels: Mapping[str, str] | None = None,
    priority: int | None = None,
    spec: Mapping[str, Any] | None = None,
) -> KubeObject:
    """A scheduler_perf pause pod (pod-default.yaml: cpu 100m, memory 500Mi) with extra spec fields."""
    pod_spec: dict[str, Any] = {"containers": [_container(cpu, memory)]}
    if priority is not None:
        pod_spec["priority"] = priority
    pod_spec.update(copy.deepcopy(dict(spec or {})))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "pod-", "labels": dict(labels or {})},
        "spec": pod_spec,
    }


NODE_AFFINITY = {
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "topology.kubernetes.io/zone",
                                "operator": "In",
                                "values": ["zone1", "zone2"],
                            }
                        ]
                    }
                ]
            }
        }
    }
}

TOPOLOGY_SPREAD = {
    "topologySpreadConstraints": [
        {
            "maxSkew": 5,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"color": "blue"}},
        }
    ]
}

POD_ANTI_AFFINITY = {
    "affinity": {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"color": "green"}},
                    "topologyKey": "kubernetes.io/hostname",
                    "namespaces": ["sched-test", "sched-setup"],
                }
            ]
        }
    }
}


@dataclass(frozen=True)
class CreateNodes:
    """Create `count` nodes from `template`; label `key` cycles through `label_values` (if any)."""

    count: int
    template: KubeObject = field(default_factory=node_template)
    label_values: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class CreatePods:
    """Create `count` pods from `template` in `namespace`; measured when `collect_metrics`."""

    count: int
    template: KubeObject = field(default_factory=pod_template)
    collect_metrics: bool = False
    namespace: str = "sched-test"


@dataclass(frozen=True)
class Barrier:
    """Wait until every pod created so far is bound or parked as unschedulable."""


Op = CreateNodes | CreatePods | Barrier


@dataclass(frozen=True)
class Workload:
    """A named list of ops (a scheduler_perf test case at one size)."""

    name: str
    ops: tuple[Op, ...]
    description: str = ""
    # the setup pods fill the nodes (Preemption): fewer pods on as many nodes would leave room and
    # nothing would be preempted, so `scaled` shrinks the nodes with the pods
    fills_nodes: bool = False

    def scaled(self, pods: float, nodes: float = 1.0) -> Workload:
        """The same workload with pod counts times `pods` and node counts times `nodes` (at least 1);
        for a workload that `fills_nodes`, node counts times `pods * nodes`, keeping its shape."""
        if pods == 1 and nodes == 1:
            return self
        if self.fills_nodes:
            nodes *= pods

        def scale(op: Op) -> Op:
            if isinstance(op, CreatePods):
                return replace(op, count=max(1, round(op.count * pods)))
            if isinstance(op, CreateNodes):
                return replace(op, count=max(1, round(op.count * nodes)))
            return op

        return replace(self, ops=tuple(scale(op) for op in self.ops))

    @property
    def nodes(self) -> int:
        """Total nodes created."""
        return sum(op.count for op in self.ops if isinstance(op, CreateNodes))

    @property
    def measured_pods(self) -> int:
        """Total pods created by measured ops."""
        return sum(op.count for op in self.ops if isinstance(op, CreatePods) and op.collect_metrics)


ZONES = {"topology.kubernetes.io/zone": ("zone1",)}
MOONS = {"topology.kubernetes.io/zone": ("moon-1", "moon-2", "moon-3")}


def _basic(nodes: int) -> Workload:
    return Workload(
        f"SchedulingBasic/{nodes}Nodes",
        (
            CreateNodes(nodes),
            CreatePods(1000, namespace="sched-setup"),
            Barrier(),
            CreatePods(10000, collect_metrics=True),
            Barrier(),
        ),
        "pod-default pods on node-default nodes",
    )


def _node_affinity(nodes: int, init: int, measured: int) -> Workload:
    return Workload(
        f"SchedulingNodeAffinity/{nodes}Nodes",
        (
            CreateNodes(nodes, label_values=ZONES),
            CreatePods(init, pod_template(spec=NODE_AFFINITY), namespace="sched-setup"),
            Barrier(),
            CreatePods(measured, pod_template(spec=NODE_AFFINITY), collect_metrics=True),
            Barrier(),
        ),
        "required node affinity zone In [zone1, zone2]; every node in zone1",
    )


def _topology_spreading(nodes: int, init: int, measured: int) -> Workload:
    return Workload(
        f"TopologySpreading/{nodes}Nodes",
        (
            CreateNodes(nodes, label_values=MOONS),
            CreatePods(init, namespace="sched-setup"),
            Barrier(),
            CreatePods(
                measured, pod_template(labels={"color": "blue"}, spec=TOPOLOGY_SPREAD), collect_metrics=True
            ),
            Barrier(),
        ),
        "zone spread maxSkew 5 over 3 zones",
    )


def _pod_anti_affinity(nodes: int, init: int, measured: int) -> Workload:
    template = pod_template(labels={"color": "green"}, spec=POD_ANTI_AFFINITY)
    return Workload(
        f"SchedulingPodAntiAffinity/{nodes}Nodes",
        (
            CreateNodes(nodes),
            CreatePods(init, template, namespace="sched-setup"),
            Barrier(),
            CreatePods(measured, template, collect_metrics=True),
            Barrier(),
        ),
        "required hostname anti-affinity between all pods",
    )


def _preemption(nodes: int, init: int, measured: int) -> Workload:
    return Workload(
        f"Preemption/{nodes}Nodes",
        (
            CreateNodes(nodes),
            CreatePods(init, pod_template("900m"), namespace="sched-setup"),
            Barrier(),
            CreatePods(measured, pod_template("3000m", priority=10), collect_metrics=True),
            Barrier(),
        ),
        "low-priority 900m pods fill the nodes; high-priority 3000m pods preempt",
        fills_nodes=True,
    )


def _unschedulable(nodes: int, init: int, measured: int) -> Workload:
    return Workload(
        f"Unschedulable/{nodes}Nodes",
        (
            CreateNodes(nodes),
            CreatePods(init, pod_template("9"), namespace="sched-setup"),
            CreatePods(measured, collect_metrics=True),
            Barrier(),
        ),
        f"{init} pods asking 9 cpu never fit; pod-default pods are measured",
    )


# (init pods, measured pods) per size: the 5000-node sizes of scheduler_perf's performance-config,
# the 500-node ones of its 500Nodes variants (SchedulingBasic/500Nodes keeps the 5000-node pod counts,
# the size the end-to-end figures in the README and the issues were measured at)
WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        _basic(500),
        _basic(5000),
        _node_affinity(500, 500, 1000),
        _node_affinity(5000, 5000, 10000),
        _topology_spreading(500, 1000, 1000),
        _topology_spreading(5000, 5000, 2000),
        _pod_anti_affinity(500, 100, 400),
        _pod_anti_affinity(5000, 1000, 2000),
        _preemption(500, 2000, 500),
        _preemption(5000, 20000, 5000),
        _unschedulable(500, 200, 1000),
        _unschedulable(5000, 200, 10000),
        Workload(
            "Memory/5000Nodes",
            (
                CreateNodes(5000),
                CreatePods(20000, collect_metrics=True),
                Barrier(),
            ),
            "5000 nodes and 20000 pod-default pods scheduled and held (peak RSS is the figure)",
        ),
    )
}


def workload(name: str) -> Workload:
    """The workload named `name` (full name, `SchedulingBasic/500`, or a unique prefix)."""
    for candidate in (name, name + "Nodes", name + "/5000Nodes"):
        if candidate in WORKLOADS:
            return WORKLOADS[candidate]
    found = [w for n, w in WORKLOADS.items() if n.lower().startswith(name.lower())]
    if len(found) != 1:
        choices = ", ".join(WORKLOADS)
        raise KeyError(f"unknown or ambiguous workload {name!r} (one of: {choices})")
    return found[0]


def instantiate_node(op: CreateNodes, index: int) -> KubeObject:
    """The node object number `index` of a CreateNodes op (name, hostname label, cycled labels)."""
    obj = copy.deepcopy(op.template)
    meta = obj["metadata"]
    name = f"{meta.pop('generateName', 'node-')}{index}"
    meta["name"] = name
    meta["uid"] = f"uid-{name}"
    labels = meta.setdefault("labels", {})
    labels["kubernetes.io/hostname"] = name
    for key, values in op.label_values.items():
        labels[key] = values[index % len(values)]
    return obj


def instantiate_pod(op: CreatePods, index: int, prefix: str) -> KubeObject:
    """The pod object number `index` of a CreatePods op (`prefix` keeps names unique across ops)."""
    obj = copy.deepcopy(op.template)
    meta = obj["metadata"]
    name = f"{meta.pop('generateName', 'pod-')}{prefix}-{index}"
    meta["name"] = name
    meta["namespace"] = op.namespace
    meta["uid"] = f"uid-{op.namespace}-{name}"
    meta["creationTimestamp"] = "2024-01-01T00:00:00Z"
    obj["spec"].setdefault("schedulerName", "default-scheduler")
    return obj
