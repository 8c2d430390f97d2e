"""Seeded random scenarios over what Kubernetes 1.20's API carries.

Nodes: varied capacity (cpu, memory, pods, an extended resource), labels (hostname, zone, disk, a
numeric tier), taints (NoSchedule, PreferNoSchedule, NoExecute), unschedulable, images with sizes.
Pods: requests, init containers, overhead (a RuntimeClass), extended resources, host ports, node
selectors, required and preferred node affinity, hard and soft topology spread, required and preferred
pod (anti-)affinity, tolerations, priorities (with preemptionPolicy Never), PDBs; existing pods bound.
With `objects`, also what selects pods and what they mount (`_objects`, drawn from a generator of its
own after the rest): Services, ReplicaSets and StatefulSets owning pods (the system default spreading),
StorageClasses, PersistentVolumes and claims (bound, unbound with Immediate or WaitForFirstConsumer
binding), CSINodes with attach limits, inline GCE persistent disks, and a class that provisions
(`_provisioning`, from a generator of its own again) with claims that have no PV.
The same (seed, index, large, objects) always gives the same scenario.
"""

from __future__ import annotations

import copy
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


def generate(seed: int, index: int, large: bool = False, objects: bool = False) -> Scenario:
    """Scenario `index` of the series `seed` (3-8 nodes, 3-9 pods; `large`: 8-12 nodes, 10-40 pods;
    `objects`: with workloads and volumes, see the module docstring)."""
    rng = random.Random(f"{seed}/{index}" + ("/large" if large else ""))
    name = f"{'l' if large else 's'}{'o' if objects else ''}{seed}-{index}"
    nodes = [_node(rng, f"{name}-n{i}") for i in range(rng.randint(8, 12) if large else rng.randint(3, 8))]
    node_names = [n["metadata"]["name"] for n in nodes]
    existing = [_pod(rng, name, f"e{i}", bound_to=rng.choice(node_names)) for i in range(rng.randint(0, 6))]
    pending = [_pod(rng, name, f"p{i}") for i in range(rng.randint(10, 40) if large else rng.randint(3, 9))]
    pdbs = [_pdb(rng, name, f"pdb{i}") for i in range(rng.choice((0, 0, 1, 2)))]
    extra: tuple[Obj, ...] = ()
    if objects:
        extra = _objects(random.Random(f"{seed}/{index}/objects"), name, nodes, existing + pending)
    return Scenario(name, tuple(nodes), tuple(existing), tuple(pdbs), tuple(pending), objects=extra)


# ---- workloads and volumes (objects=True) ---------------------------------------------------------

CSI_DRIVER = "csi.example.com"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"


def _objects(rng: random.Random, scenario: str, nodes: list[Obj], pods: list[Obj]) -> tuple[Obj, ...]:
    """Workloads selecting `pods` and volumes for them to mount (the pods are changed in place)."""
    out = _workloads(rng, scenario, pods)
    out += _storage(rng, scenario, nodes, pods)
    # drawn from an RNG of its own, so the scenarios of the earlier --objects series stay as they were
    out += _provisioning(random.Random(f"{scenario}/provisioning"), scenario, nodes, pods)
    return tuple(out)


def _workloads(rng: random.Random, scenario: str, pods: list[Obj]) -> list[Obj]:
    """Services selecting an app's pods; ReplicaSets and StatefulSets owning some of them (no
    controller runs: they only give kube-scheduler's default spreading its selector)."""
    out: list[Obj] = []
    for app in APPS:
        if rng.random() < 0.4:
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": f"svc-{app}", "namespace": scenario},
                    "spec": {"selector": {"app": app}, "ports": [{"port": 80}]},
                }
            )
        kind = rng.choice(("ReplicaSet", "ReplicaSet", "StatefulSet", None))
        if kind is None:
            continue
        owner = f"{kind.lower()}-{app}"
        selector: Obj = {"matchLabels": {"app": app}}
        if rng.random() < 0.3:  # a selector narrower than the pods' label
            selector = {
                "matchLabels": {"app": app},
                "matchExpressions": [{"key": "tier", "operator": "Exists"}],
            }
        spec: Obj = {
            "replicas": 0,
            "selector": selector,
            "template": {
                "metadata": {"labels": {"app": app, "tier": "x"}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/web:1.0"}]},
            },
        }
        if kind == "StatefulSet":
            spec["serviceName"] = f"svc-{app}"
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": kind,
                "metadata": {"name": owner, "namespace": scenario},
                "spec": spec,
            }
        )
        for pod in pods:
            if pod["metadata"]["labels"].get("app") == app and rng.random() < 0.7:
                pod["metadata"]["labels"]["tier"] = "x"
                pod["metadata"]["ownerReferences"] = [
                    {
                        "apiVersion": "apps/v1",
                        "kind": kind,
                        "name": owner,
                        "uid": f"00000000-0000-0000-0000-{rng.randrange(16**12):012x}",
                        "controller": True,
                    }
                ]
    return out


def _storage(rng: random.Random, scenario: str, nodes: list[Obj], pods: list[Obj]) -> list[Obj]:
    """StorageClasses, PVs (node or zone affinity, zone labels, CSI or local), claims bound to some,
    CSINodes with attach limits; some pods mount claims or inline GCE disks."""
    if rng.random() < 0.25:
        return []
    node_names = [n["metadata"]["name"] for n in nodes]
    zones = sorted({n["metadata"]["labels"][ZONE] for n in nodes if ZONE in n["metadata"]["labels"]})
    immediate, wffc = f"{scenario}-immediate", f"{scenario}-wffc"
    out: list[Obj] = [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": NO_PROVISIONER,
            "volumeBindingMode": mode,
        }
        for name, mode in ((immediate, "Immediate"), (wffc, "WaitForFirstConsumer"))
    ]
    for node in node_names:
        if rng.random() < 0.5:
            out.append(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "CSINode",
                    "metadata": {"name": node},
                    "spec": {
                        "drivers": [
                            {"name": CSI_DRIVER, "nodeID": node, "allocatable": {"count": rng.randint(1, 2)}}
                        ]
                    },
                }
            )
    claims: list[str] = []
    for i in range(rng.randint(1, 6)):
        pv_name, claim = f"{scenario}-pv{i}", f"c{i}"
        cls = rng.choice((immediate, wffc, wffc))
        pv: Obj = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "labels": {}},
            "spec": {
                "capacity": {"storage": f"{rng.choice((1, 5, 10))}Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": cls,
                "persistentVolumeReclaimPolicy": "Retain",
            },
        }
        if rng.random() < 0.6:
            pv["spec"]["csi"] = {"driver": CSI_DRIVER, "volumeHandle": f"{scenario}-h{i}"}
        else:
            pv["spec"]["local"] = {"path": f"/mnt/{pv_name}"}
        affinity = rng.choice(("node", "zone", "zone-label", "none") if zones else ("node", "none"))
        if affinity == "node" or "local" in pv["spec"]:
            key, values = HOSTNAME, rng.sample(node_names, rng.randint(1, min(2, len(node_names))))
        elif affinity == "zone":
            key, values = ZONE, rng.sample(zones, 1)
        else:
            key, values = "", []
        if key:
            pv["spec"]["nodeAffinity"] = {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
                    ]
                }
            }
        if affinity == "zone-label":
            pv["metadata"]["labels"][ZONE] = rng.choice(zones)
        pvc = _claim(scenario, claim, cls)
        bound = cls == immediate and rng.random() < 0.8 or rng.random() < 0.4
        if bound:  # as the PV controller leaves a bound pair
            pvc["metadata"]["annotations"] = {BIND_COMPLETED: "yes"}
            pvc["spec"]["volumeName"] = pv_name
            pvc["status"] = {
                "phase": "Bound",
                "accessModes": ["ReadWriteOnce"],
                "capacity": dict(pv["spec"]["capacity"]),
            }
            pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": scenario, "name": claim}
            pv["status"] = {"phase": "Bound"}
        else:
            pv["status"] = {"phase": "Available"}
            pvc["status"] = {"phase": "Pending"}
        out += [pv, pvc]
        claims.append(claim)
        if not bound and cls == wffc and rng.random() < 0.5:  # another claim the same PVs may satisfy
            extra = {**copy.deepcopy(pvc), "metadata": {"name": f"c{i}b", "namespace": scenario}}
            out.append(extra)
            claims.append(f"c{i}b")
    disks = [f"{scenario}-disk{i}" for i in range(rng.randint(0, 2))]
    for pod in pods:
        volumes: list[Obj] = []
        if claims and rng.random() < 0.35:
            for claim in rng.sample(claims, rng.choice((1, 1, 2)) if len(claims) > 1 else 1):
                volumes.append({"name": f"v-{claim}", "persistentVolumeClaim": {"claimName": claim}})
        if disks and rng.random() < 0.25:
            disk = {"pdName": rng.choice(disks), "fsType": "ext4"}
            if rng.random() < 0.4:
                disk["readOnly"] = True
            volumes.append({"name": "disk", "gcePersistentDisk": disk})
        if volumes:
            pod["spec"]["volumes"] = volumes
    return out


def _provisioning(rng: random.Random, scenario: str, nodes: list[Obj], pods: list[Obj]) -> list[Obj]:
    """A WaitForFirstConsumer class that provisions (the CSI driver with attach limits, or another;
    some allowed in one zone only) and claims of it with no PV; some pods mount one."""
    if rng.random() < 0.4:
        return []
    zones = sorted({n["metadata"]["labels"][ZONE] for n in nodes if ZONE in n["metadata"]["labels"]})
    cls: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": f"{scenario}-dynamic"},
        "provisioner": rng.choice((CSI_DRIVER, "nfs.example.com")),
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    if zones and rng.random() < 0.5:
        only = [{"key": ZONE, "values": rng.sample(zones, 1)}]
        cls["allowedTopologies"] = [{"matchLabelExpressions": only}]
    claims = [f"d{i}" for i in range(rng.randint(1, 3))]
    out = [cls]
    for claim in claims:
        out.append({**_claim(scenario, claim, cls["metadata"]["name"]), "status": {"phase": "Pending"}})
    for pod in pods:
        if rng.random() < 0.3:
            claim = rng.choice(claims)
            volume = {"name": f"v-{claim}", "persistentVolumeClaim": {"claimName": claim}}
            pod["spec"]["volumes"] = [*pod["spec"].get("volumes", []), volume]
    return out


def _claim(scenario: str, name: str, cls: str) -> Obj:
    """A 1Gi ReadWriteOnce claim of class `cls`."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": scenario},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": cls,
        },
    }


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
