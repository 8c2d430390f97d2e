"""VolumeZone (framework/plugins/volumezone) PreFilter: the zone and region labels of the PVs bound to
the pod's claims. The per-node check is policy (default.policy, `VolumeZone`): a node with any of the
topology labels must carry, for every PV label, the same key (or its GA name) with one of the values
(`a__b` lists several zones).
"""

from __future__ import annotations

from typing import Any

from policyd.scheduler.cluster.volume_claims import CelObject, claim_class, pod_volumes
from policyd.scheduler.cluster.volume_store import VolumeStore

TOPOLOGY_LABELS = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)
_GA = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
}


def volume_topologies(pod: CelObject, store: VolumeStore) -> tuple[list[dict[str, Any]], str]:
    """`{key, gaKey, values}` per topology label of the pod's bound PVs, or an error (getPVbyPod)."""
    out: list[dict[str, Any]] = []
    ns = str(pod.get("namespace") or "default")
    for vol in pod_volumes(pod):
        source = vol.get("persistentVolumeClaim")
        if source is None:
            continue
        name = str(source.get("claimName") or "")
        if not name:
            return [], "PersistentVolumeClaim had no name"
        claim = store.claim(ns, name)
        if claim is None:
            return [], f'persistentvolumeclaim "{name}" not found'
        pv_name = str((claim.get("spec") or {}).get("volumeName") or "")
        if not pv_name:
            class_name = claim_class(claim)
            if not class_name:
                return [], "PersistentVolumeClaim had no pv name and storageClass name"
            sc = store.storage_class(class_name)
            if sc is None:
                return [], f'storageclass.storage.k8s.io "{class_name}" not found'
            if sc.get("volumeBindingMode") == "WaitForFirstConsumer":
                continue
            return [], "PersistentVolume had no name"
        pv = store.volume(pv_name)
        if pv is None:
            return [], f'persistentvolume "{pv_name}" not found'
        labels = (pv.get("metadata") or {}).get("labels") or {}
        for key in TOPOLOGY_LABELS:
            if key in labels:
                values = sorted({z.strip() for z in str(labels[key]).split("__") if z.strip()})
                out.append({"key": key, "gaKey": _GA.get(key, key), "values": values})
    return out, ""
