"""A differential scenario: the API objects of one small cluster and the pods to schedule, in order.

A scenario is plain Kubernetes objects (as a user would `kubectl create` them): nodes (spec and status),
pods already bound (`spec.nodeName`), PodDisruptionBudgets (with the status the disruption controller
would write: no controller-manager runs), other objects (workloads, storage; with the status the PV
controller would write) and the pending pods, fed one at a time. Scenario files (YAML)
are what `regressions/` keeps; `python -m tests.differential --replay FILE` runs one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

# Cluster-scoped objects every scenario may refer to (created once per control plane).
PRIORITY_CLASSES: tuple[Obj, ...] = (
    {"metadata": {"name": "dh-low"}, "value": 10},
    {"metadata": {"name": "dh-mid"}, "value": 100},
    {"metadata": {"name": "dh-high"}, "value": 1000},
    {"metadata": {"name": "dh-high-never"}, "value": 1000, "preemptionPolicy": "Never"},
)
RUNTIME_CLASS: Obj = {
    "metadata": {"name": "dh-overhead"},
    "handler": "runc",
    "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
}


@dataclass(frozen=True)
class Scenario:
    """One cluster and its pending pods (fed in list order); `name` prefixes every object name."""

    name: str
    nodes: tuple[Obj, ...]
    existing: tuple[Obj, ...]
    pdbs: tuple[Obj, ...]
    pending: tuple[Obj, ...]
    # why a regression case exists (the disagreement it found, and how it was resolved)
    note: str = ""
    # other API objects, each with apiVersion and kind: Services, ReplicaSets, StatefulSets, claims (in
    # the namespace); StorageClasses, PersistentVolumes, CSINodes (cluster-scoped, named after the
    # scenario, CSINodes after its nodes)
    objects: tuple[Obj, ...] = ()

    @property
    def namespace(self) -> str:
        """The namespace of the scenario's pods and PDBs (its name)."""
        return self.name

    def to_yaml(self) -> str:
        """The scenario file text."""
        doc = {
            "name": self.name,
            "note": self.note,
            "nodes": list(self.nodes),
            "existing": list(self.existing),
            "pdbs": list(self.pdbs),
            "pending": list(self.pending),
        }
        if self.objects:
            doc["objects"] = list(self.objects)
        return yaml.safe_dump(doc, sort_keys=False, width=110)


def load_scenario(path: Path) -> Scenario:
    """Read a scenario file."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        raise ValueError(f"{path}: not a scenario file (a mapping with name, nodes, existing, pdbs, pending)")
    return Scenario(
        name=doc["name"],
        nodes=tuple(doc.get("nodes") or ()),
        existing=tuple(doc.get("existing") or ()),
        pdbs=tuple(doc.get("pdbs") or ()),
        pending=tuple(doc.get("pending") or ()),
        note=str(doc.get("note") or ""),
        objects=tuple(doc.get("objects") or ()),
    )


def pod_key(pod: Obj) -> str:
    """`namespace/name` of a pod object."""
    meta = pod["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"
