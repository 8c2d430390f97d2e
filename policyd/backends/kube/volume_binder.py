"""PreBind of VolumeBinding against the API server (kube-scheduler's volume binder, BindPodVolumes).

For each PV chosen for a claim, the PV is updated with `spec.claimRef` naming the claim (and the
`pv.kubernetes.io/bound-by-controller` annotation); each claim to provision is updated with the
`volume.kubernetes.io/selected-node` annotation. The PV controller (kube-controller-manager) and the
provisioner then bind the claims; the binder waits, reading the informers' claims, until every claim
of the pod is fully bound (`spec.volumeName` and `pv.kubernetes.io/bind-completed`), or fails with a
`BindError` (an update refused, a provisioning given up, the timeout): the scheduler then forgets the
assumed pod and requeues it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from policyd.backends.kube.client import JSON, ApiError, KubeClient, object_path
from policyd.scheduler.backend import BindError
from policyd.scheduler.cluster.volume_claims import fully_bound
from policyd.scheduler.cluster.volume_store import (
    ANN_SELECTED_NODE,
    PodVolumeBindings,
    with_claim_ref,
    with_selected_node,
)

log = logging.getLogger(__name__)

# kube-scheduler's VolumeBindingArgs.bindTimeoutSeconds default
DEFAULT_BIND_TIMEOUT = 600.0
POLL_INTERVAL = 0.1

Lookup = Callable[[str], JSON | None]


def _claim_path(key: str) -> str:
    ns, _, name = key.partition("/")
    return object_path("v1", "persistentvolumeclaims", ns, name)


class VolumeBinder:
    """Writes a pod's volume bindings and waits for the PV controller to complete them."""

    def __init__(
        self,
        client: KubeClient,
        volume: Lookup,
        claim: Lookup,
        *,
        timeout: float = DEFAULT_BIND_TIMEOUT,
        stopping: threading.Event | None = None,
    ) -> None:
        """`volume` / `claim` read the informers' PVs by name and claims by `namespace/name`."""
        self.client = client
        self._volume = volume
        self._claim = claim
        self.timeout = timeout
        self._stopping = stopping or threading.Event()

    def bind(self, pod_key: str, bindings: PodVolumeBindings) -> None:
        """Update the PVs and claims, then wait until every claim of the pod is bound (BindError)."""
        try:
            for static in bindings.static:
                pv, claim = self._volume(static.pv), self._claim(static.claim)
                if pv is None or claim is None:
                    raise BindError(
                        f"binding volumes: persistentvolume {static.pv} or claim {static.claim} gone"
                    )
                body = {"apiVersion": "v1", "kind": "PersistentVolume", **with_claim_ref(pv, claim)}
                self.client.request("PUT", object_path("v1", "persistentvolumes", None, static.pv), body=body)
                log.info("volume bound pod=%s pv=%s claim=%s", pod_key, static.pv, static.claim)
            for key in bindings.provision:
                claim = self._claim(key)
                if claim is None:
                    raise BindError(f"binding volumes: persistentvolumeclaim {key} gone")
                body = {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    **with_selected_node(claim, bindings.node),
                }
                self.client.request("PUT", _claim_path(key), body=body)
                log.info("volume provisioning requested pod=%s claim=%s node=%s", pod_key, key, bindings.node)
        except ApiError as err:
            raise BindError(f"binding volumes: {err}", retry=True) from None
        self._wait(bindings)

    def _wait(self, bindings: PodVolumeBindings) -> None:
        """Block until every claim is fully bound; BindError on a reset selection or the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            pending = [key for key in bindings.claims if not self._bound(key)]
            if not pending:
                return
            for key in bindings.provision:
                claim = self._claim(key)
                annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
                if key in pending and claim is not None and ANN_SELECTED_NODE not in annotations:
                    raise BindError(f"binding volumes: selectedNode annotation reset for PVC {key}")
            if time.monotonic() >= deadline or self._stopping.is_set():
                raise BindError(
                    f"binding volumes: timed out waiting for the condition (claims {', '.join(pending)})"
                )
            self._stopping.wait(POLL_INTERVAL)

    def _bound(self, key: str) -> bool:
        claim = self._claim(key)
        return claim is not None and fully_bound(claim)
