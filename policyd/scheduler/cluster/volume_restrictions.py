"""VolumeRestrictions (framework/plugins/volumerestrictions): disks a node cannot mount twice, and
ReadWriteOncePod claims already in use.

A disk is named by an id per conflict domain: a GCE PD by its name, an AWS EBS volume by its id (never
shared, even read-only), an ISCSI volume by its IQN, an RBD image by monitor, pool and image (one id per
monitor, so overlapping monitor lists share an id). Two uses of one id conflict unless both are
read-only. `pod_disks` lists the pod's disks; `node_disks` maps each id used by the pods on a node to
whether every use there is read-only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policyd.scheduler.cluster.volume_claims import CelObject, access_modes, claim_uses, pod_volumes
from policyd.scheduler.cluster.volume_store import VolumeStore

REASON_DISK_CONFLICT = "node(s) had no available disk"
REASON_RWOP_CONFLICT = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)
READ_WRITE_ONCE_POD = "ReadWriteOncePod"


def _disks_of_volume(vol: Mapping[str, Any]) -> list[tuple[str, bool]]:
    gce = vol.get("gcePersistentDisk")
    if gce is not None:
        return [(f"gce-pd/{gce.get('pdName', '')}", bool(gce.get("readOnly")))]
    ebs = vol.get("awsElasticBlockStore")
    if ebs is not None:
        return [(f"aws-ebs/{ebs.get('volumeID', '')}", False)]
    iscsi = vol.get("iscsi")
    if iscsi is not None:
        return [(f"iscsi/{iscsi.get('iqn', '')}", bool(iscsi.get("readOnly")))]
    rbd = vol.get("rbd")
    if rbd is not None:
        pool, image = rbd.get("pool") or "rbd", rbd.get("image", "")
        read_only = bool(rbd.get("readOnly"))
        return [(f"rbd/{mon}/{pool}/{image}", read_only) for mon in rbd.get("monitors") or ()]
    return []


def pod_disks(pod: CelObject) -> list[dict[str, Any]]:
    """The pod's conflict-checked disks: `{id, readOnly}` per disk (and per RBD monitor)."""
    return [{"id": i, "readOnly": ro} for vol in pod_volumes(pod) for i, ro in _disks_of_volume(vol)]


def node_disks(pods: Iterable[CelObject]) -> dict[str, bool]:
    """Disk id -> True when every use of it by `pods` (a node's pods) is read-only."""
    out: dict[str, bool] = {}
    for pod in pods:
        for vol in pod_volumes(pod):
            for disk, read_only in _disks_of_volume(vol):
                out[disk] = out.get(disk, True) and read_only
    return out


def read_write_once_pod_claims(pod: CelObject, store: VolumeStore) -> set[str]:
    """Keys (`namespace/name`) of the pod's existing claims with the ReadWriteOncePod access mode."""
    ns = str(pod.get("namespace") or "default")
    out: set[str] = set()
    for use in claim_uses(pod):
        claim = store.claim(ns, use.name)
        if claim is not None and READ_WRITE_ONCE_POD in access_modes(claim):
            out.add(f"{ns}/{use.name}")
    return out


def read_write_once_pod_in_use(pod: CelObject, store: VolumeStore, placed: Iterable[CelObject]) -> bool:
    """Some placed pod (other than `pod`) uses one of the pod's ReadWriteOncePod claims."""
    wanted = read_write_once_pod_claims(pod, store)
    if not wanted:
        return False
    for other in placed:
        if other.get("uid") == pod.get("uid") and other.get("name") == pod.get("name"):
            continue
        ns = str(other.get("namespace") or "default")
        if any(f"{ns}/{use.name}" in wanted for use in claim_uses(other)):
            return True
    return False
