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

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from policyd.errors import PolicydError
from policyd.quantity import parse_quantity, to_int
from policyd.scheduler.cluster.selectors import LabelSelector, parse_label_selector

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


@dataclass(frozen=True)
class PublishedCapacity:
    """A CSIStorageCapacity as VolumeBinding reads it: the largest volume it allows, in bytes
    (`maximumVolumeSize`, else `capacity`, rounded up as Quantity.Value), and the nodes it serves."""

    obj: KubeObject
    room: int
    topology: LabelSelector


@dataclass
class _ClassCapacities:
    """The capacities of one StorageClass: those whose topology has matchLabels by one of its pairs
    (a node can only match them through its own labels), the others apart."""

    keyed: dict[tuple[str, str], list[PublishedCapacity]] = field(default_factory=dict)
    unkeyed: list[PublishedCapacity] = field(default_factory=list)


def _index_capacities(capacities: Iterable[KubeObject]) -> dict[str, _ClassCapacities]:
    index: dict[str, _ClassCapacities] = {}
    for capacity in capacities:
        topology = capacity.get("nodeTopology")
        if not isinstance(topology, Mapping):
            continue  # no topology: available on no node
        limit = capacity.get("maximumVolumeSize")
        size = capacity.get("capacity") if limit is None else limit
        if size is None:
            continue  # no size: it holds no volume
        try:
            selector = parse_label_selector(topology)
            room = to_int(parse_quantity(size))
        except (PolicydError, ValueError, TypeError, AttributeError):
            continue  # a size or topology kube-scheduler cannot convert: it holds no volume anywhere
        entry = index.setdefault(str(capacity.get("storageClassName") or ""), _ClassCapacities())
        published = PublishedCapacity(capacity, room, selector)
        labels = topology.get("matchLabels") or {}
        if isinstance(labels, Mapping) and labels:
            key, value = min(labels.items())
            entry.keyed.setdefault((str(key), str(value)), []).append(published)
        else:
            entry.unkeyed.append(published)
    return index


class VolumeStore:
    """Storage objects by kind and key, with the claims of assumed pods (scheduling thread only)."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, KubeObject]] = {kind: {} for kind in STORAGE_KINDS}
        # pod key -> (kind, key, the informer's object before the assume) of what it assumed
        self._assumed: dict[str, list[tuple[str, str, KubeObject | None]]] = {}
        self.generation = 0
        self._capacity_index: dict[str, _ClassCapacities] | None = None  # built when first read

    # -- informer side ------------------------------------------------------------------------

    def upsert(self, kind: str, obj: KubeObject) -> None:
        """An object was added or changed (replaces an assumed copy of it)."""
        key = object_key(kind, obj)
        self._objects[kind][key] = obj
        if kind == CSI_STORAGE_CAPACITY:
            self._capacity_index = None
        for entries in self._assumed.values():
            entries[:] = [e for e in entries if (e[0], e[1]) != (kind, key)]
        self.generation += 1

    def remove(self, kind: str, obj: KubeObject) -> None:
        """An object was deleted."""
        self._objects[kind].pop(object_key(kind, obj), None)
        if kind == CSI_STORAGE_CAPACITY:
            self._capacity_index = None
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

    def capacities_near(self, class_name: str, node_labels: Mapping[str, str]) -> Iterator[PublishedCapacity]:
        """The CSIStorageCapacities of `class_name` whose node topology may select a node labelled
        `node_labels` (a superset: the caller matches the topology); one without a size or a topology,
        or with one that does not parse, holds nothing anywhere and is left out."""
        if self._capacity_index is None:
            self._capacity_index = _index_capacities(self._objects[CSI_STORAGE_CAPACITY].values())
        entry = self._capacity_index.get(class_name)
        if entry is None:
            return
        yield from entry.unkeyed
        for pair in node_labels.items():
            yield from entry.keyed.get(pair, ())

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
