"""A live cluster read into cluster-file objects: what the scheduler's informers list, read-only.

`read_objects` lists (only `list` calls, paginated, through `Informer.relist`) exactly the resources
`ApiBackend` watches for the scheduler: nodes, non-terminal pods, PodDisruptionBudgets (policy/v1, or
v1beta1 on older servers), PriorityClasses, the workloads selecting pods (Services,
ReplicationControllers, ReplicaSets, StatefulSets) and the storage objects of the volume plugins (PVs,
PVCs, StorageClasses, CSINodes, CSIDrivers), and the Namespaces (their labels are what a namespace
selector matches; the cluster file keeps them). deploy/clusterrole.yaml grants all of these (read-only);
nothing else is read. Objects keep their spec and status (policies
may read any field) and lose the bookkeeping a cluster file does not need (managedFields,
resourceVersion, selfLink, generation, kubectl's last-applied annotation). The order is deterministic:
by kind (the order below), then namespace and name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from policyd.backends.cluster_file import ClusterObjects, cluster_objects
from policyd.backends.kube.client import JSON, KubeClient
from policyd.backends.kube.informer import (
    NODES,
    PODS,
    PRIORITY_CLASSES,
    STORAGE_RESOURCES,
    WORKLOADS,
    Informer,
    Resource,
    capacity_resource,
    pdb_resource,
)

__all__ = ["KIND_ORDER", "read_cluster", "read_objects", "render", "snapshot_document", "tidy"]

# kinds in the order a snapshot lists them: what others refer to first (classes, nodes, volumes), pods last
KIND_ORDER = (
    "Namespace",
    "PriorityClass",
    "StorageClass",
    "CSIDriver",
    "Node",
    "CSINode",
    "CSIStorageCapacity",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "PodDisruptionBudget",
    "Service",
    "ReplicationController",
    "ReplicaSet",
    "StatefulSet",
    "Pod",
)
NAMESPACES = Resource("v1", "namespaces", "Namespace")
# metadata a cluster file does not need: API bookkeeping, never read by a scheduler
DROPPED_METADATA = ("managedFields", "resourceVersion", "selfLink", "generation")
DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def resources(client: KubeClient) -> list[Resource]:
    """The collections the scheduler's informers list (PDBs and CSIStorageCapacities at the version the
    server serves)."""
    pdbs, capacities = pdb_resource(client), capacity_resource(client)
    return [
        NODES,
        NAMESPACES,
        PODS,
        *([pdbs] if pdbs is not None else []),
        PRIORITY_CLASSES,
        *WORKLOADS,
        *STORAGE_RESOURCES.values(),
        *([capacities] if capacities is not None else []),
    ]


def tidy(obj: Mapping[str, Any]) -> JSON:
    """`obj` without the bookkeeping a cluster file does not need (a copy; spec and status kept;
    apiVersion, kind and metadata first)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in DROPPED_METADATA}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in DROPPED_ANNOTATIONS}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    head = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": meta}
    return head | {k: v for k, v in obj.items() if k not in head}


def _order(obj: Mapping[str, Any]) -> tuple[int, str, str]:
    meta = obj.get("metadata") or {}
    return KIND_ORDER.index(str(obj["kind"])), str(meta.get("namespace") or ""), str(meta.get("name"))


def read_objects(client: KubeClient) -> list[JSON]:
    """Every object the scheduler reads, tidied, in snapshot order (raises `ApiError` / `PermissionDenied`)."""
    found: list[JSON] = []
    for resource in resources(client):
        lister = Informer(client, resource)  # its list only: never started, so it never watches
        lister.relist()
        found.extend(tidy(obj) for obj in lister.items())
    return sorted(found, key=_order)


def snapshot_document(objects: Iterable[Mapping[str, Any]]) -> JSON:
    """The cluster file of `objects`: one `kind: List`."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": [dict(o) for o in objects]}


def render(document: Mapping[str, Any], fmt: str) -> str:
    """`document` as `yaml` or `json` text (keys in the objects' own order)."""
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    return str(yaml.safe_dump(dict(document), sort_keys=False, default_flow_style=False))


def read_cluster(client: KubeClient) -> ClusterObjects:
    """The live cluster as cluster-file objects (as `load_cluster` would load its snapshot)."""
    return cluster_objects(read_objects(client), source=f"cluster {client.host}")
