"""A pod's PersistentVolumeClaims as kube-scheduler resolves them (component-helpers storage/volume,
ephemeral volumes), shared by the VolumeBinding, VolumeRestrictions, VolumeZone and NodeVolumeLimits
views.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from policyd.scheduler.cluster.volume_store import (
    ANN_BIND_COMPLETED,
    ANN_STORAGE_CLASS,
    KubeObject,
    VolumeStore,
)

CelObject = Mapping[str, Any]


@dataclass(frozen=True)
class ClaimUse:
    """One volume of a pod that names a claim: the volume, the claim name, whether it is ephemeral."""

    volume: Mapping[str, Any]
    name: str
    ephemeral: bool


def pod_volumes(pod: CelObject) -> list[Mapping[str, Any]]:
    """spec.volumes of a CEL pod dict."""
    return list((pod.get("spec") or {}).get("volumes") or ())


def claim_uses(pod: CelObject) -> Iterator[ClaimUse]:
    """The volumes of the pod that reference a claim, in spec order (ephemeral: `<pod>-<volume>`)."""
    for vol in pod_volumes(pod):
        pvc = vol.get("persistentVolumeClaim")
        if pvc is not None:
            yield ClaimUse(vol, str(pvc.get("claimName") or ""), False)
        elif vol.get("ephemeral") is not None:
            yield ClaimUse(vol, f"{pod.get('name', '')}-{vol.get('name', '')}", True)


def owned_by(claim: KubeObject, pod: CelObject) -> bool:
    """True when the pod is the controller owner of the claim (generic ephemeral volumes)."""
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("uid") == pod.get("uid"):
            return True
    return False


def lookup_error(pod: CelObject, use: ClaimUse, store: VolumeStore) -> tuple[KubeObject | None, str]:
    """The claim of `use`, or None and kube-scheduler's error text (podHasPVCs: not found, lost, being
    deleted, an ephemeral claim the pod does not own)."""
    ns = str(pod.get("namespace") or "default")
    claim = store.claim(ns, use.name)
    if claim is None and use.ephemeral:
        return (
            None,
            f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{use.name}"',
        )
    if claim is None:
        return None, f'persistentvolumeclaim "{use.name}" not found'
    if (claim.get("status") or {}).get("phase") == "Lost":
        volume = (claim.get("spec") or {}).get("volumeName") or ""
        return None, f'persistentvolumeclaim "{use.name}" bound to non-existent persistentvolume "{volume}"'
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        return None, f'persistentvolumeclaim "{use.name}" is being deleted'
    if use.ephemeral and not owned_by(claim, pod):
        return (
            None,
            f"PVC {ns}/{use.name} was not created for pod {ns}/{pod.get('name', '')} (pod is not owner)",
        )
    return claim, ""


def claim_class(claim: KubeObject) -> str:
    """GetPersistentVolumeClaimClass: the beta annotation, else spec.storageClassName, else ""."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    if ANN_STORAGE_CLASS in annotations:
        return str(annotations[ANN_STORAGE_CLASS])
    return str((claim.get("spec") or {}).get("storageClassName") or "")


def volume_class(pv: KubeObject) -> str:
    """GetPersistentVolumeClass: the beta annotation, else spec.storageClassName, else ""."""
    return claim_class(pv)


def claim_key(claim: KubeObject) -> str:
    """`namespace/name` of a claim."""
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def fully_bound(claim: KubeObject) -> bool:
    """isPVCFullyBound: spec.volumeName set and the bind-completed annotation present."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return bool((claim.get("spec") or {}).get("volumeName")) and ANN_BIND_COMPLETED in annotations


def delay_binding(claim: KubeObject, store: VolumeStore) -> bool:
    """IsDelayBindingMode: the claim's StorageClass binds WaitForFirstConsumer (unknown class: no)."""
    name = claim_class(claim)
    if not name:
        return False
    sc = store.storage_class(name)
    if sc is None:
        return False
    return sc.get("volumeBindingMode") == "WaitForFirstConsumer"


def access_modes(obj: KubeObject) -> list[str]:
    """spec.accessModes of a claim or PV."""
    return [str(m) for m in (obj.get("spec") or {}).get("accessModes") or ()]
