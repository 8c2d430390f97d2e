"""The volume views of the `cluster` functions: what default.policy's volume rules read.

`pod_volumes` is the per-pod state (PreFilter of VolumeBinding, VolumeRestrictions, VolumeZone and
NodeVolumeLimits) the policy reads as `PodVolumes`; the per-node views are `volume_binding` (claim ->
reason on a node), `node_disks` and `volume_limit`. A pod without volumes costs one dict lookup.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from policyd.scheduler.cluster import volume_binding, volume_limits, volume_restrictions, volume_zone
from policyd.scheduler.cluster.volume_binding import PodClaims
from policyd.scheduler.cluster.volume_claims import CelObject, pod_volumes
from policyd.scheduler.cluster.volume_store import PodVolumeBindings, VolumeStore

NO_VOLUMES: dict[str, Any] = {
    "error": "",
    "claims": [],
    "disks": [],
    "readWriteOncePodConflict": False,
    "zones": [],
    "attachable": [],
}


def pod_volumes_state(
    pod: CelObject, claims: PodClaims, store: VolumeStore, placed: Iterable[CelObject]
) -> dict[str, Any]:
    """The pod's `PodVolumes` from its resolved `claims` (`placed`: every pod on a node of the
    snapshot, for ReadWriteOncePod)."""
    if not pod_volumes(pod):
        return NO_VOLUMES
    zones, zone_error = volume_zone.volume_topologies(pod, store)
    return {
        "error": claims.error or zone_error,
        "claims": [] if claims.error else list(claims.names),
        "disks": volume_restrictions.pod_disks(pod),
        "readWriteOncePodConflict": volume_restrictions.read_write_once_pod_in_use(pod, store, placed),
        "zones": zones,
        "attachable": volume_limits.pod_drivers(pod, store),
    }


def volume_binding_verdicts(claims: PodClaims, store: VolumeStore, node: CelObject) -> dict[str, str]:
    """Claim name -> "" when the node suits it, else kube-scheduler's VolumeBinding reason."""
    if claims.error:
        return dict.fromkeys(claims.names, claims.error)
    return volume_binding.find_pod_volumes(claims, store, node)[0]


def pod_volume_bindings(pod: CelObject, store: VolumeStore, node: CelObject) -> PodVolumeBindings | None:
    """What PreBind does for the pod on `node` (Reserve's decision); None when it has no claims."""
    if not pod_volumes(pod):  # most pods: nothing to resolve
        return None
    claims = volume_binding.pod_claims(pod, store)
    if claims.error or not claims.active:
        return None
    return volume_binding.find_pod_volumes(claims, store, node)[1]
