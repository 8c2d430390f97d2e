"""VolumeBinding as kube-scheduler's volume binder decides it (framework/plugins/volumebinding/binder.go,
component-helpers storage/volume FindMatchingVolume).

`pod_claims` is the PreFilter: it resolves the pod's claims into bound ones, ones to bind on the chosen
node (WaitForFirstConsumer) and a pod-level error (a missing or deleted claim, unbound claims of an
Immediate class). `find_pod_volumes` is the Filter for one node: every bound claim's PV must accept the
node (`spec.nodeAffinity`), every claim to bind needs an available matching PV (smallest first, each PV
used once) or a class that can provision there, with room for it where the class's CSI driver
publishes its capacity (CSIStorageCapacity); it also returns the `PodVolumeBindings` PreBind carries
out when the pod is placed on that node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from policyd.errors import PolicydError
from policyd.quantity import parse_quantity, to_int
from policyd.scheduler.cluster.selectors import LabelSelector, node_selector_terms_match, parse_label_selector
from policyd.scheduler.cluster.volume_claims import (
    CelObject,
    access_modes,
    claim_class,
    claim_key,
    claim_uses,
    delay_binding,
    fully_bound,
    lookup_error,
    volume_class,
)
from policyd.scheduler.cluster.volume_store import (
    ANN_SELECTED_NODE,
    KubeObject,
    PodVolumeBindings,
    StaticBinding,
    VolumeStore,
)

REASON_NODE_CONFLICT = "node(s) had volume node affinity conflict"
REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
REASON_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
# the order kube-scheduler appends its reasons in
REASONS = (REASON_NODE_CONFLICT, REASON_BIND_CONFLICT, REASON_NOT_ENOUGH_SPACE, REASON_PV_NOT_EXIST)
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"


@dataclass(frozen=True)
class PodClaims:
    """The pod's claims after PreFilter: bound, to bind on the node (delayed binding), or an error."""

    error: str = ""
    bound: tuple[KubeObject, ...] = ()
    to_bind: tuple[KubeObject, ...] = ()
    names: tuple[str, ...] = ()  # the pod's claim names, in spec order

    @property
    def active(self) -> bool:
        """True when some claim needs a per-node check."""
        return bool(self.bound or self.to_bind)


def pod_claims(pod: CelObject, store: VolumeStore) -> PodClaims:
    """VolumeBinding PreFilter (GetPodVolumeClaims): resolve and classify the pod's claims."""
    bound: list[KubeObject] = []
    to_bind: list[KubeObject] = []
    immediate = False
    names: list[str] = []
    for use in claim_uses(pod):
        claim, error = lookup_error(pod, use, store)
        if claim is None:
            return PodClaims(error=error, names=(use.name,))
        names.append(use.name)
        if fully_bound(claim):
            bound.append(claim)
        elif delay_binding(claim, store) and not (claim.get("spec") or {}).get("volumeName"):
            to_bind.append(claim)
        else:
            immediate = True  # prebound or Immediate: the PV controller should have bound it
    if immediate:
        return PodClaims(error=REASON_UNBOUND_IMMEDIATE, names=tuple(names))
    return PodClaims(bound=tuple(bound), to_bind=tuple(to_bind), names=tuple(names))


def pv_accepts(pv: KubeObject, node_labels: Mapping[str, str]) -> bool:
    """CheckNodeAffinity: the PV's required node affinity matches a node with these labels."""
    required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
    if required is None:
        return True
    return node_selector_terms_match(
        required.get("nodeSelectorTerms") or (), {"labels": node_labels, "name": ""}
    )


def _storage(obj: KubeObject, path: str) -> Fraction:
    spec = obj.get("spec") or {}
    section = (spec.get("resources") or {}).get("requests") if path == "requests" else spec.get("capacity")
    raw = (section or {}).get("storage")
    if raw is None:
        return Fraction(0)
    try:
        return parse_quantity(raw)
    except (PolicydError, ValueError):
        return Fraction(0)


def _bound_to(pv: KubeObject, claim: KubeObject) -> bool:
    """IsVolumeBoundToClaim: claimRef names the claim (and its uid, when set)."""
    ref = (pv.get("spec") or {}).get("claimRef")
    if not ref:
        return False
    meta = claim.get("metadata") or {}
    if ref.get("name") != meta.get("name") or (ref.get("namespace") or "default") != (
        meta.get("namespace") or "default"
    ):
        return False
    return not ref.get("uid") or ref.get("uid") == meta.get("uid")


def _selector(claim: KubeObject) -> LabelSelector | None:
    raw = (claim.get("spec") or {}).get("selector")
    return None if raw is None else parse_label_selector(raw)


def find_matching_volume(
    claim: KubeObject, volumes: Sequence[KubeObject], node_labels: Mapping[str, str], excluded: set[str]
) -> KubeObject | None:
    """FindMatchingVolume (scheduler path, delayed binding): a PV pre-bound to the claim, else the
    smallest available PV of its class that fits its size, modes, selector and the node."""
    requested = _storage(claim, "requests")
    wanted_class = claim_class(claim)
    selector = _selector(claim)
    claim_mode = (claim.get("spec") or {}).get("volumeMode") or "Filesystem"
    smallest: KubeObject | None = None
    smallest_size = Fraction(0)
    for pv in volumes:
        meta, spec = pv.get("metadata") or {}, pv.get("spec") or {}
        if meta.get("name") in excluded:
            continue
        if spec.get("claimRef") and not _bound_to(pv, claim):
            continue
        size = _storage(pv, "capacity")
        if size < requested:
            continue
        if (spec.get("volumeMode") or "Filesystem") != claim_mode:
            continue
        if meta.get("deletionTimestamp"):
            continue
        fits_node = pv_accepts(pv, node_labels)
        if _bound_to(pv, claim):
            return pv if fits_node else None
        if (pv.get("status") or {}).get("phase") != "Available":
            continue
        if selector is not None and not selector.matches(meta.get("labels") or {}):
            continue
        if volume_class(pv) != wanted_class or not fits_node:
            continue
        if not set(access_modes(claim)) <= set(access_modes(pv)):
            continue
        if smallest is None or size < smallest_size:
            smallest, smallest_size = pv, size
    return smallest


def _topology_matches(terms: Sequence[Mapping[str, Any]], node_labels: Mapping[str, str]) -> bool:
    """MatchTopologySelectorTerms: no terms match everything; else some term's every expression."""
    if not terms:
        return True
    for term in terms:
        exprs = term.get("matchLabelExpressions") or ()
        if all(
            e.get("key") in node_labels and node_labels[e["key"]] in (e.get("values") or ()) for e in exprs
        ):
            return True
    return False


def _provision_reason(claim: KubeObject, store: VolumeStore, node_labels: Mapping[str, str]) -> str:
    """checkVolumeProvisions for one claim: "" when its class can provision on the node, with room."""
    name = claim_class(claim)
    if not name:
        return f'no class for claim "{claim_key(claim)}"'
    sc = store.storage_class(name)
    if sc is None:
        return f'failed to find storage class "{name}"'
    provisioner = str(sc.get("provisioner") or "")
    if not provisioner or provisioner == NOT_SUPPORTED_PROVISIONER:
        return REASON_BIND_CONFLICT
    if not _topology_matches(sc.get("allowedTopologies") or (), node_labels):
        return REASON_BIND_CONFLICT
    if not _has_enough_capacity(provisioner, claim, name, store, node_labels):
        return REASON_NOT_ENOUGH_SPACE
    return ""


def _has_enough_capacity(
    provisioner: str, claim: KubeObject, class_name: str, store: VolumeStore, node_labels: Mapping[str, str]
) -> bool:
    """hasEnoughCapacity: checked only for a CSI driver with `storageCapacity: true`; then some
    CSIStorageCapacity of the class whose node topology selects the node must hold the requested size
    (its maximumVolumeSize, else its capacity; both as whole bytes rounded up, as Quantity.Value)."""
    requests = ((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}
    if "storage" not in requests:
        return True
    driver = store.csi_driver(provisioner)
    if driver is None or (driver.get("spec") or {}).get("storageCapacity") is not True:
        return True
    size = to_int(_storage(claim, "requests"))
    return any(
        c.room >= size and c.topology.matches(node_labels)
        for c in store.capacities_near(class_name, node_labels)
    )


def _by_size(claim: KubeObject) -> Fraction:
    return _storage(claim, "requests")


def find_pod_volumes(
    claims: PodClaims, store: VolumeStore, node: CelObject
) -> tuple[dict[str, str], PodVolumeBindings]:
    """FindPodVolumes for one node: claim name -> reason ("" fits), and the bindings PreBind would do."""
    name = str(node.get("name", ""))
    labels: Mapping[str, str] = node.get("labels") or {}
    verdicts: dict[str, str] = {}
    for claim in claims.bound:
        claim_name = str((claim.get("metadata") or {}).get("name", ""))
        pv = store.volume(str((claim.get("spec") or {}).get("volumeName", "")))
        if pv is None:
            verdicts[claim_name] = REASON_PV_NOT_EXIST
        else:
            verdicts[claim_name] = "" if pv_accepts(pv, labels) else REASON_NODE_CONFLICT
    static: list[StaticBinding] = []
    provision: list[str] = []
    to_match: list[KubeObject] = []
    # claims already given this node (selected-node), then those no PV fits
    to_provision: list[KubeObject] = []
    keys = tuple(claim_key(c) for c in (*claims.bound, *claims.to_bind))
    for claim in claims.to_bind:
        selected = ((claim.get("metadata") or {}).get("annotations") or {}).get(ANN_SELECTED_NODE)
        if selected is None:
            to_match.append(claim)
        elif selected == name:
            to_provision.append(claim)
        else:  # provisioned for another node: kube-scheduler looks at no other claim to bind
            for other in claims.to_bind:
                verdicts[_claim_name(other)] = REASON_BIND_CONFLICT if other is claim else ""
            return verdicts, PodVolumeBindings(node=name, claims=keys)
    chosen: set[str] = set()
    by_class: dict[str, list[KubeObject]] = {}
    for claim in sorted(to_match, key=_by_size):
        claim_name = str((claim.get("metadata") or {}).get("name", ""))
        wanted = claim_class(claim)
        if wanted not in by_class:
            by_class[wanted] = [pv for pv in store.volumes() if volume_class(pv) == wanted]
        pv = find_matching_volume(claim, by_class[wanted], labels, chosen)
        if pv is not None:
            pv_name = str((pv.get("metadata") or {}).get("name", ""))
            chosen.add(pv_name)
            static.append(StaticBinding(pv_name, claim_key(claim)))
            verdicts[claim_name] = ""
        else:
            to_provision.append(claim)
    failed = False
    for claim in to_provision:  # checkVolumeProvisions stops at the first claim it cannot provision
        reason = "" if failed else _provision_reason(claim, store, labels)
        verdicts[_claim_name(claim)] = reason
        failed = failed or bool(reason)
        if not failed:
            provision.append(claim_key(claim))
    return verdicts, PodVolumeBindings(
        node=name, static=tuple(static), provision=tuple(provision), claims=keys
    )


def _claim_name(claim: KubeObject) -> str:
    return str((claim.get("metadata") or {}).get("name", ""))
