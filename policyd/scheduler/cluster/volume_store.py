"""The storage objects the volume rules read: PersistentVolumes, PersistentVolumeClaims, StorageClasses,
CSINodes, CSIDrivers and CSIStorageCapacities (kube-scheduler's listers plus the volume binder's assume
cache).

The scheduler owns one `VolumeStore`. Informer events are applied by the scheduling thread between
cycles (like every cache update), so a cycle sees a fixed set of objects. When a pod is assumed on a
node, the claims it binds are assumed here too (`assume`): the chosen PV carries the claim in its
`spec.claimRef`, a claim to provision carries the `volume.kubernetes.io/selected-node` annotation, so the
next pods of the queue do not pick the same PV before the API server reports the binding. `forget`
undoes it (bind failure, permit rejection); an informer update of an object replaces its assumed copy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

KubeObject = Mapping[str, Any]

PERSISTENT_VOLUME = "PersistentVolume"
PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
STORAGE_CLASS = "StorageClass"
CSI_NODE = "CSINode"
CSI_DRIVER = "CSIDriver"
CSI_STORAGE_CAPACITY = "CSIStorageCapacity"
STORAGE_KINDS = (
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
    CSI_NODE,
    CSI_DRIVER,
    CSI_STORAGE_CAPACITY,
)
NAMESPACED_STORAGE_KINDS = (PERSISTENT_VOLUME_CLAIM, CSI_STORAGE_CAPACITY)

ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"


def object_key(kind: str, obj: KubeObject) -> str:
    """`namespace/name` for a PersistentVolumeClaim or a CSIStorageCapacity, `name` for the
    cluster-scoped kinds."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    if kind in NAMESPACED_STORAGE_KINDS:
        return f"{meta.get('namespace') or 'default'}/{name}"
    return name


@dataclass(frozen=True)
class StaticBinding:
    """A claim to bind to an existing PV (kube-scheduler's BindingInfo)."""

    pv: str
    claim: str  # namespace/name


@dataclass(frozen=True)
class PodVolumeBindings:
    """What PreBind must do for one pod on one node: PVs to bind, claims to provision there."""

    node: str
    static: tuple[StaticBinding, ...] = ()
    provision: tuple[str, ...] = ()  # claim keys (namespace/name) to annotate with the node
    claims: tuple[str, ...] = ()  # every claim of the pod that must be bound before the pod

    @property
    def empty(self) -> bool:
        """True when nothing is to bind or provision."""
        return not self.static and not self.provision


def claim_ref(claim: KubeObject) -> dict[str, Any]:
    """The `spec.claimRef` of a PV bound to `claim` (reference.GetReference)."""
    meta = claim.get("metadata") or {}
    ref = {
        "kind": PERSISTENT_VOLUME_CLAIM,
        "apiVersion": "v1",
        "namespace": meta.get("namespace") or "default",
        "name": meta.get("name") or "",
        "uid": meta.get("uid") or "",
    }
    if meta.get("resourceVersion"):
        ref["resourceVersion"] = meta["resourceVersion"]
    return ref


def with_claim_ref(pv: KubeObject, claim: KubeObject) -> dict[str, Any]:
    """A copy of `pv` bound to `claim` as the volume binder writes it (claimRef + bound-by-controller)."""
    meta = dict(pv.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    annotations[ANN_BOUND_BY_CONTROLLER] = "yes"
    meta["annotations"] = annotations
    spec = dict(pv.get("spec") or {})
    spec["claimRef"] = claim_ref(claim)
    return {**pv, "metadata": meta, "spec": spec}


def with_selected_node(claim: KubeObject, node: str) -> dict[str, Any]:
    """A copy of `claim` annotated for dynamic provisioning on `node`."""
    meta = dict(claim.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ANN_SELECTED_NODE: node}
    return {**claim, "metadata": meta}


class VolumeStore:
    """Storage objects by kind and key, with the claims of assumed pods (scheduling thread only)."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, KubeObject]] = {kind: {} for kind in STORAGE_KINDS}
        # pod key -> (kind, key, the informer's object before the assume) of what it assumed
        self._assumed: dict[str, list[tuple[str, str, KubeObject | None]]] = {}
        self.generation = 0

    # -- informer side ------------------------------------------------------------------------

    def upsert(self, kind: str, obj: KubeObject) -> None:
        """An object was added or changed (replaces an assumed copy of it)."""
        key = object_key(kind, obj)
        self._objects[kind][key] = obj
        for entries in self._assumed.values():
            entries[:] = [e for e in entries if (e[0], e[1]) != (kind, key)]
        self.generation += 1

    def remove(self, kind: str, obj: KubeObject) -> None:
        """An object was deleted."""
        self._objects[kind].pop(object_key(kind, obj), None)
        self.generation += 1

    # -- reads ----------------------------------------------------------------------------------

    def get(self, kind: str, key: str) -> KubeObject | None:
        """The object of `kind` named `key` (`namespace/name` for claims), None when unknown."""
        return self._objects[kind].get(key)

    def claim(self, namespace: str, name: str) -> KubeObject | None:
        """A PersistentVolumeClaim."""
        return self._objects[PERSISTENT_VOLUME_CLAIM].get(f"{namespace}/{name}")

    def volume(self, name: str) -> KubeObject | None:
        """A PersistentVolume."""
        return self._objects[PERSISTENT_VOLUME].get(name)

    def storage_class(self, name: str) -> KubeObject | None:
        """A StorageClass."""
        return self._objects[STORAGE_CLASS].get(name)

    def csi_node(self, name: str) -> KubeObject | None:
        """The CSINode of a node."""
        return self._objects[CSI_NODE].get(name)

    def csi_driver(self, name: str) -> KubeObject | None:
        """A CSIDriver."""
        return self._objects[CSI_DRIVER].get(name)

    def volumes(self) -> Iterator[KubeObject]:
        """Every PersistentVolume."""
        return iter(self._objects[PERSISTENT_VOLUME].values())

    def capacities(self) -> Iterator[KubeObject]:
        """Every CSIStorageCapacity."""
        return iter(self._objects[CSI_STORAGE_CAPACITY].values())

    def count(self, kind: str) -> int:
        """Number of objects of `kind`."""
        return len(self._objects[kind])

    # -- assume cache ---------------------------------------------------------------------------

    def assume(self, pod_key: str, bindings: PodVolumeBindings) -> None:
        """Record the pod's bindings as if written: PVs get the claim, claims to provision the node."""
        entries: list[tuple[str, str, KubeObject | None]] = []
        for static in bindings.static:
            pv, claim = self.volume(static.pv), self._objects[PERSISTENT_VOLUME_CLAIM].get(static.claim)
            if pv is None or claim is None:
                continue
            entries.append((PERSISTENT_VOLUME, static.pv, pv))
            self._objects[PERSISTENT_VOLUME][static.pv] = with_claim_ref(pv, claim)
        for key in bindings.provision:
            claim = self._objects[PERSISTENT_VOLUME_CLAIM].get(key)
            if claim is None:
                continue
            entries.append((PERSISTENT_VOLUME_CLAIM, key, claim))
            self._objects[PERSISTENT_VOLUME_CLAIM][key] = with_selected_node(claim, bindings.node)
        if entries:
            self._assumed[pod_key] = entries
            self.generation += 1

    def forget(self, pod_key: str) -> None:
        """Undo the pod's assumed bindings that no informer update replaced since."""
        entries = self._assumed.pop(pod_key, None)
        if not entries:
            return
        for kind, key, original in entries:
            if original is not None:
                self._objects[kind][key] = original
        self.generation += 1

    def done(self, pod_key: str) -> None:
        """The pod's bindings were written: keep the assumed copies until the informer replaces them."""
        self._assumed.pop(pod_key, None)
