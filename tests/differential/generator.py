"""Seeded random scenarios over what Kubernetes 1.20's API carries.

Nodes: varied capacity (cpu, memory, pods, an extended resource), labels (hostname, zone, disk, a
numeric tier), taints (NoSchedule, PreferNoSchedule, NoExecute), unschedulable, images with sizes.
Pods: requests, init containers, overhead (a RuntimeClass), extended resources, host ports, node
selectors, required and preferred node affinity, hard and soft topology spread, required and preferred
pod (anti-)affinity, tolerations, priorities (with preemptionPolicy Never), PDBs; existing pods bound.
The same (seed, index) always gives the same scenario.
"""

from __future__ import annotations

import random
from typing import Any

from tests.differential.scenario import RUNTIME_CLASS, Obj, Scenario

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
GPU = "example.com/gpu"
APPS = ("web", "db", "cache")
IMAGES = {  # name -> size in bytes
    "registry.example/web:1.0": 350_000_000,
    "registry.example/db:2.1": 900_000_000,
    "registry.example/cache:3": 120_000_000,
    "registry.example/tools:latest": 40_000_000,
}
TAINT_KEYS = ("dedicated", "spot", "gpu")


def generate(seed: int, index: int, large: bool = False) -> Scenario:
    """Scenario `index` of the series `seed` (3-8 nodes, 3-9 pods; `large`: 8-12 nodes, 10-40 pods)."""
    rng = random.Random(f"{seed}/{index}" + ("/large" if large else ""))
    name = f"{'l' if large else 's'}{seed}-{index}"
    nodes = [_node(rng, f"{name}-n{i}") for i in range(rng.randint(8, 12) if large else rng.randint(3, 8))]
    node_names = [n["metadata"]["name"] for n in nodes]
    existing = [_pod(rng, name, f"e{i}", bound_to=rng.choice(node_names)) for i in range(rng.randint(0, 6))]
    pending = [_pod(rng, name, f"p{i}") for i in range(rng.randint(10, 40) if large else rng.randint(3, 9))]
    pdbs = [_pdb(rng, name, f"pdb{i}") for i in range(rng.choice((0, 0, 1, 2)))]
    return Scenario(name, tuple(nodes), tuple(existing), tuple(pdbs), tuple(pending))


def _quantity_cpu(millis: int) -> str:
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


def _node(rng: random.Random, name: str) -> Obj:
    cpu = rng.choice((1000, 2000, 4000, 8000))
    memory_gi = rng.choice((2, 4, 8, 16))
    pods = rng.choice((3, 5, 110, 110))
    allocatable: dict[str, str] = {
        "cpu": _quantity_cpu(cpu - rng.choice((0, 0, 100))),
        "memory": f"{memory_gi * 1024 - rng.choice((0, 256))}Mi",
        "pods": str(pods),
        "ephemeral-storage": "20Gi",
    }
    if rng.random() < 0.3:
        allocatable[GPU] = str(rng.randint(1, 2))
    labels = {HOSTNAME: name, "disk": rng.choice(("ssd", "hdd")), "tier": str(rng.randint(1, 5))}
    if rng.random() < 0.9:
        labels[ZONE] = rng.choice(("z1", "z2", "z3"))
    spec: dict[str, Any] = {}
    if rng.random() < 0.35:
        taints: dict[tuple[str, str], Obj] = {}  # unique by key and effect (API validation)
        for _ in range(rng.randint(1, 2)):
            key = rng.choice(TAINT_KEYS)
            effect = rng.choice(("NoSchedule", "PreferNoSchedule", "PreferNoSchedule", "NoExecute"))
            taints[key, effect] = {"key": key, "value": rng.choice(("a", "b")), "effect": effect}
        spec["taints"] = list(taints.values())
    if rng.random() < 0.05:
        spec["unschedulable"] = True
    images = [{"names": [image], "sizeBytes": size} for image, size in IMAGES.items() if rng.random() < 0.4]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "images": images,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _requirement(rng: random.Random) -> Obj:
    kind = rng.choice(("zone", "disk", "tier", "exists"))
    if kind == "zone":
        return {
            "key": ZONE,
            "operator": rng.choice(("In", "NotIn")),
            "values": rng.sample(["z1", "z2", "z3"], rng.randint(1, 2)),
        }
    if kind == "disk":
        return {"key": "disk", "operator": "In", "values": [rng.choice(("ssd", "hdd"))]}
    if kind == "tier":
        return {"key": "tier", "operator": rng.choice(("Gt", "Lt")), "values": [str(rng.randint(1, 5))]}
    return {"key": ZONE, "operator": rng.choice(("Exists", "DoesNotExist"))}


def _selector(rng: random.Random) -> Obj:
    if rng.random() < 0.8:
        return {"matchLabels": {"app": rng.choice(APPS)}}
    return {"matchExpressions": [{"key": "app", "operator": "In", "values": rng.sample(list(APPS), 2)}]}


def _pod_term(rng: random.Random) -> Obj:
    return {"labelSelector": _selector(rng), "topologyKey": rng.choice((ZONE, HOSTNAME))}


def _container(rng: random.Random, name: str, scale: float = 1.0) -> Obj:
    container: Obj = {"name": name, "image": rng.choice(list(IMAGES))}
    if rng.random() < 0.85:
        requests = {"cpu": _quantity_cpu(int(rng.choice((100, 250, 500, 1000, 1500)) * scale))}
        if rng.random() < 0.8:
            requests["memory"] = f"{int(rng.choice((64, 256, 512, 1024, 3072)) * scale)}Mi"
        container["resources"] = {"requests": requests}
    return container


def _pod(rng: random.Random, scenario: str, name: str, bound_to: str | None = None) -> Obj:
    app = rng.choice(APPS)
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,  # victims go at once: no kubelet runs
        "containers": [_container(rng, f"c{i}") for i in range(rng.choice((1, 1, 2)))],
    }
    if rng.random() < 0.2:
        spec["initContainers"] = [_container(rng, "init", scale=2.0)]
    if rng.random() < 0.1:
        spec["runtimeClassName"] = RUNTIME_CLASS["metadata"]["name"]
    if rng.random() < 0.15:
        resources = spec["containers"][0].setdefault("resources", {"requests": {}})
        resources.setdefault("requests", {})[GPU] = "1"
        resources["limits"] = {GPU: "1"}
    if rng.random() < 0.15:
        spec["containers"][0]["ports"] = [
            {"containerPort": 80, "hostPort": rng.choice((8080, 9090)), "protocol": "TCP"}
        ]
    if rng.random() < 0.12:
        spec["nodeSelector"] = {"disk": rng.choice(("ssd", "hdd"))}
    affinity: dict[str, Any] = {}
    node_affinity: dict[str, Any] = {}
    if rng.random() < 0.18:
        terms = [
            {"matchExpressions": [_requirement(rng) for _ in range(rng.randint(1, 2))]}
            for _ in range(rng.randint(1, 2))
        ]
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if rng.random() < 0.25:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(1, 100), "preference": {"matchExpressions": [_requirement(rng)]}}
            for _ in range(rng.randint(1, 2))
        ]
    if node_affinity:
        affinity["nodeAffinity"] = node_affinity
    pod_affinity: dict[str, Any] = {}
    anti: dict[str, Any] = {}
    if rng.random() < 0.1:
        pod_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = [_pod_term(rng)]
    if rng.random() < 0.15:
        anti["requiredDuringSchedulingIgnoredDuringExecution"] = [_pod_term(rng)]
    if rng.random() < 0.15:
        pod_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(1, 100), "podAffinityTerm": _pod_term(rng)}
        ]
    if rng.random() < 0.15:
        anti["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(1, 100), "podAffinityTerm": _pod_term(rng)}
        ]
    if pod_affinity:
        affinity["podAffinity"] = pod_affinity
    if anti:
        affinity["podAntiAffinity"] = anti
    if affinity:
        spec["affinity"] = affinity
    constraints = []
    for when, chance in (("DoNotSchedule", 0.15), ("ScheduleAnyway", 0.2)):
        if rng.random() < chance:
            constraints.append(
                {
                    "maxSkew": rng.randint(1, 2),
                    "topologyKey": rng.choice((ZONE, HOSTNAME)),
                    "whenUnsatisfiable": when,
                    "labelSelector": {"matchLabels": {"app": rng.choice((app, app, *APPS))}},
                }
            )
    if constraints:
        spec["topologySpreadConstraints"] = constraints
    if rng.random() < 0.3:
        spec["tolerations"] = [_toleration(rng) for _ in range(rng.randint(1, 2))]
    roll = rng.random()
    if roll < 0.5:
        spec["priorityClassName"] = rng.choice(("dh-low", "dh-mid", "dh-high", "dh-high-never"))
    if bound_to is not None:
        spec["nodeName"] = bound_to
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": scenario, "labels": {"app": app}},
        "spec": spec,
    }


def _toleration(rng: random.Random) -> Obj:
    operator = rng.choice(("Equal", "Exists", "Exists"))
    toleration: Obj = {
        "key": rng.choice((*TAINT_KEYS, "")) if operator == "Exists" else rng.choice(TAINT_KEYS)
    }
    if not toleration["key"]:
        del toleration["key"]
    toleration["operator"] = operator
    if operator == "Equal":
        toleration["value"] = rng.choice(("a", "b"))
    effect = rng.choice(("", "NoSchedule", "PreferNoSchedule", "NoExecute"))
    if effect:
        toleration["effect"] = effect
    return toleration


def _pdb(rng: random.Random, scenario: str, name: str) -> Obj:
    return {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": scenario},
        "spec": {"minAvailable": rng.randint(0, 2), "selector": {"matchLabels": {"app": rng.choice(APPS)}}},
        # what the disruption controller would write (none runs): how many matching pods may go
        "status": {
            "disruptionsAllowed": rng.randint(0, 1),
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "expectedPods": 0,
            "observedGeneration": 0,
        },
    }
