"""The real-cluster back-end: informers feed the scheduler; binds, deletions, events and status go to the API.

Writes:
- bind: POST pods/<name>/binding with metadata.uid = the pod's UID (so a re-created pod of the same
  name is never bound by mistake), all in flight at once on one request loop (`bind_async`,
  policyd.backends.kube.multiplex; PreBind with volumes and `bind` block on a binder worker instead). 409 (already bound / changed) and
  404 (gone) are reported as failures, never retried blindly: the runtime forgets the assumed pod and
  requeues or drops it, so a pod is never bound twice.
- victims: DELETE with the victim's own terminationGracePeriodSeconds and a UID precondition.
- Scheduled / FailedScheduling / Preempted events (aggregated, rate-limited), PodScheduled condition and
  nominatedNodeName through the status subresource.
Reads: list+watch informers for nodes, pods, PDBs, PriorityClasses, and the storage objects
(PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes, CSIDrivers); handlers forward
plain dicts to an `EventSink` (the scheduler) through its public methods only.
- volumes (PreBind): PV claimRef and claim selected-node updates, then a wait for the PV controller
  (policyd.backends.kube.volume_binder).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policyd.backends.kube.client import JSON, ApiError, KubeClient, PermissionDenied, object_path
from policyd.backends.kube.events import (
    STATUS_PATCH,
    EventRecorder,
    ObjectRef,
    nominated_status,
    status_path,
    unschedulable_status,
)
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
from policyd.backends.kube.multiplex import RequestLoop
from policyd.backends.kube.volume_binder import DEFAULT_BIND_TIMEOUT, VolumeBinder
from policyd.scheduler.backend import BindError, EventHandler
from policyd.scheduler.cluster.volume_store import (
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    PodVolumeBindings,
)
from policyd.scheduler.snapshot import PodInfoLike

log = logging.getLogger(__name__)

BOUND = "bound"
CONFLICT = "conflict"
GONE = "gone"
ERROR = "error"
# binds, deletions and status patches in flight at once, each on a connection of its own
# (kube-scheduler's HTTP/2 client multiplexes them on one). SchedulingBasic/500 end to end, quiet
# machine, two runs each: 64 connections bound 697 and 748 pods/s, 128 bound 950 and 967, every
# connection busy and binds waiting for one with 64. With the event recorder's 64, below
# kube-apiserver's default --max-mutating-requests-inflight (200).
WRITE_CONNECTIONS = 128


@dataclass(frozen=True)
class BindResult:
    """Outcome of one bind: `outcome` is bound / conflict / gone / error."""

    namespace: str
    name: str
    uid: str
    node: str
    outcome: str
    message: str = ""
    status: int = 0

    @property
    def ok(self) -> bool:
        """True when the API server accepted the binding."""
        return self.outcome == BOUND


def _nothing() -> None:
    pass


def split_key(pod: PodInfoLike) -> tuple[str, str]:
    """(namespace, name) of a PodInfo."""
    ns, _, name = pod.key.partition("/")
    return ns, name


class ApiBackend:
    """`ClusterBackend` over a real API server (policyd.scheduler.backend)."""

    # binds are HTTP requests: they run on the binder's worker pool
    binds_in_memory = False

    def __init__(
        self,
        client: KubeClient,
        *,
        identity: str = "",
        recorder: EventRecorder | None = None,
        sync_timeout: float = 120.0,
        volume_bind_timeout: float = DEFAULT_BIND_TIMEOUT,
    ) -> None:
        self.client = client
        self.identity = identity
        # Events get their own client and QPS budget (kube-scheduler's separate event clientset)
        self._event_client = client.sibling("policyd-events") if recorder is None else None
        self.recorder = recorder or EventRecorder(
            self._event_client or client, instance=identity or "policyd"
        )
        self.sync_timeout = sync_timeout
        self.informers: list[Informer] = []
        self.nodes: Informer | None = None
        self.pods: Informer | None = None
        self.pdbs: Informer | None = None
        self.priority_classes: Informer | None = None
        self.workloads: list[Informer] = []  # Services, ReplicationControllers, ReplicaSets, StatefulSets
        self.storage: dict[str, Informer] = {}  # kind -> informer
        self._stopping = threading.Event()
        self.volume_binder = VolumeBinder(
            client,
            lambda name: self._stored(PERSISTENT_VOLUME, name),
            lambda key: self._stored(PERSISTENT_VOLUME_CLAIM, key),
            timeout=volume_bind_timeout,
            stopping=self._stopping,
        )
        # binds, victim deletions and status patches: all in flight on one thread
        # (policyd.backends.kube.multiplex); a victim's deletion is never queued behind status patches
        # (a preemptor would be tried again before its victims were gone, fail, and back off longer)
        self.requests = RequestLoop(client, name="api-writes", max_connections=WRITE_CONNECTIONS)
        self._pending_lock = threading.Lock()  # guards the bind counts
        # pod key -> its status patches waiting for the one in flight (the request loop's thread only)
        self._status_queues: dict[str, collections.deque[Callable[[], JSON]]] = {}
        self._synced = threading.Event()
        self.bind_results: dict[str, int] = {BOUND: 0, CONFLICT: 0, GONE: 0, ERROR: 0}
        self.on_bind: Callable[[BindResult], None] | None = None
        # called with the error when RBAC forbids a call the back-end cannot do without
        self.on_fatal: Callable[[ApiError], None] | None = None

    # ---- read side --------------------------------------------------------------------------------

    def start(self, handler: EventHandler) -> None:
        """Start the informers (nodes first); `on_synced` once every initial list has been delivered."""
        self.nodes = Informer(
            self.client,
            NODES,
            on_add=handler.on_node_add,
            on_update=handler.on_node_update,
            on_delete=handler.on_node_delete,
            on_forbidden=self._forbidden,
        )
        self.pods = Informer(
            self.client,
            PODS,
            on_add=handler.on_pod_add,
            on_update=handler.on_pod_update,
            on_delete=handler.on_pod_delete,
            on_forbidden=self._forbidden,
        )
        pdbs = pdb_resource(self.client)
        if pdbs is not None:
            self.pdbs = Informer(
                self.client,
                pdbs,
                on_add=handler.on_pdb_add,
                on_update=handler.on_pdb_update,
                on_delete=handler.on_pdb_delete,
                on_forbidden=self._forbidden,
            )
        self.priority_classes = Informer(self.client, PRIORITY_CLASSES, on_forbidden=self._forbidden)
        self.workloads = [self._workload_informer(resource, handler) for resource in WORKLOADS]
        self.storage = {kind: self._storage_informer(res, handler) for kind, res in STORAGE_RESOURCES.items()}
        capacities = capacity_resource(self.client)
        if capacities is not None:
            self.storage[capacities.kind] = self._storage_informer(capacities, handler)
        self.informers = [
            i
            for i in (
                self.nodes,
                self.pdbs,
                self.priority_classes,
                *self.workloads,
                *self.storage.values(),
                self.pods,
            )
            if i is not None
        ]
        self.nodes.start()
        # nodes before pods: assigned pods find their node in the cache
        self.nodes.wait_for_sync(self.sync_timeout)
        for inf in self.informers:
            inf.start()

        def announce() -> None:
            if all(i.wait_for_sync(self.sync_timeout) for i in self.informers):
                self._synced.set()
                handler.on_synced()
            else:
                log.error("informer caches did not sync timeout=%.0fs", self.sync_timeout)

        threading.Thread(target=announce, name="informer-sync", daemon=True).start()

    def _workload_informer(self, resource: Resource, handler: EventHandler) -> Informer:
        """An informer delivering one workload kind (list items carry no kind: the resource names it)."""
        kind = resource.kind
        return Informer(
            self.client,
            resource,
            on_add=lambda obj: handler.on_workload_add(kind, obj),
            on_update=lambda old, new: handler.on_workload_update(kind, old, new),
            on_delete=lambda obj: handler.on_workload_delete(kind, obj),
            on_forbidden=self._forbidden,
        )

    def _storage_informer(self, resource: Resource, handler: EventHandler) -> Informer:
        kind = resource.kind
        return Informer(
            self.client,
            resource,
            on_add=lambda obj: handler.on_storage_add(kind, obj),
            on_update=lambda old, new: handler.on_storage_update(kind, old, new),
            on_delete=lambda obj: handler.on_storage_delete(kind, obj),
            on_forbidden=self._forbidden,
        )

    def _stored(self, kind: str, key: str) -> dict[str, Any] | None:
        informer = self.storage.get(kind)
        return None if informer is None else informer.get(key)

    def _forbidden(self, err: ApiError) -> None:
        log.error("permission denied err=%s", err)
        if self.on_fatal is not None:
            self.on_fatal(err)

    def has_synced(self) -> bool:
        """True once every informer delivered its initial list (and `on_synced` was called)."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until `has_synced()` (or timeout)."""
        return self._synced.wait(timeout)

    def stop(self) -> None:
        """Stop the informers, finish queued writes and events."""
        self._stopping.set()
        for inf in self.informers:
            inf.stop()
        self.flush(10.0)
        self.requests.stop()
        self.recorder.stop()
        if self._event_client is not None:
            self._event_client.close()

    # ---- write side -------------------------------------------------------------------------------

    def bind(self, pod: PodInfoLike, node: str) -> None:
        """POST the Binding (blocking); raises BindError (retry False when the pod is gone)."""
        ns, name = split_key(pod)
        error = self._bind_outcome(bind_pod(self.client, ns, name, pod.uid, node))
        if error is not None:
            raise error

    def bind_async(self, pod: PodInfoLike, node: str, done: Callable[[BindError | None], None]) -> None:
        """POST the Binding on the request loop; `done(error)` is called there once it is answered
        (None when bound, a BindError as `bind` raises it otherwise)."""
        ns, name = split_key(pod)

        def answered(_result: Any, err: ApiError | None) -> None:
            done(self._bind_outcome(bind_result(ns, name, pod.uid, node, err)))

        self.requests.submit(
            "POST", binding_path(ns, name), answered, body=binding_body(ns, name, pod.uid, node)
        )

    def _bind_outcome(self, result: BindResult) -> BindError | None:
        """Count and report one bind; the BindError of a refused one."""
        with self._pending_lock:
            self.bind_results[result.outcome] += 1
        if self.on_bind is not None:
            self.on_bind(result)
        if result.status == 403 and "is being terminated" not in result.message:
            self._forbidden(
                ApiError(403, "create", f"pods/{result.name}/binding", result.message, "Forbidden")
            )
        if not result.ok:
            return BindError(result.message, retry=result.outcome != GONE)
        return None

    def bind_volumes(self, pod: PodInfoLike, bindings: PodVolumeBindings) -> None:
        """PreBind: bind the pod's PVs / request provisioning, wait for the claims to be bound (BindError)."""
        self.volume_binder.bind(pod.key, bindings)

    def delete_victims(self, pods: Sequence[PodInfoLike], in_order: bool) -> None:
        """Delete victims (UID precondition; each with its own grace period),
        asynchronously on the request loop, never behind status patches. `in_order`: one after another,
        each DELETE sent once the one before was answered, as kube-scheduler's PrepareCandidate does (the
        watch then delivers their deletions in this order); else all at once. A failed deletion does not
        hold back the next."""
        if not in_order:
            for pod in pods:
                self._delete_victim(pod, _nothing)
            return
        waiting = collections.deque(pods)

        def next_victim() -> None:
            if waiting:
                self._delete_victim(waiting.popleft(), next_victim)

        next_victim()

    def _delete_victim(self, pod: PodInfoLike, then: Callable[[], None]) -> None:
        ns, name = split_key(pod)

        def answered(_result: Any, err: ApiError | None) -> None:
            if err is None:
                log.info("victim deleted pod=%s/%s", ns, name)
            elif err.status in (404, 409):
                log.info("victim already gone pod=%s/%s", ns, name)
            else:
                if isinstance(err, PermissionDenied):
                    self._forbidden(err)
                log.warning("victim deletion failed pod=%s/%s err=%s", ns, name, err)
            then()

        path = object_path("v1", "pods", ns, name)
        self.requests.submit("DELETE", path, answered, body=delete_options(pod.uid))

    def set_nominated_node(self, pod: PodInfoLike, node: str | None) -> None:
        """Set or clear status.nominatedNodeName, asynchronously (after the pod's earlier patches)."""
        self._patch_status(pod, lambda: nominated_status(node))

    def record_event(self, pod: PodInfoLike, event_type: str, reason: str, message: str) -> None:
        """Queue an Event about the pod (aggregated and rate-limited by the recorder)."""
        ns, name = split_key(pod)
        self.recorder.event(ObjectRef("Pod", ns, name, pod.uid), event_type, reason, message)

    def patch_pod_scheduled(
        self, pod: PodInfoLike, condition: Mapping[str, str], nominated_node: str = ""
    ) -> None:
        """Patch the PodScheduled condition (status/reason/message), and nominatedNodeName when one is
        given, in one patch, asynchronously."""
        cond = dict(condition)
        if cond.get("status", "False") == "False":
            message, reason = cond.get("message", ""), cond.get("reason", "Unschedulable")

            def status() -> JSON:
                patch = unschedulable_status(message, reason)
                if nominated_node:
                    patch.update(nominated_status(nominated_node))
                return patch

            self._patch_status(pod, status)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait for the writes in flight (binds, status patches, deletions) and events; False on timeout."""
        return self.requests.wait_idle(timeout) and self.recorder.flush(timeout)

    def _patch_status(self, pod: PodInfoLike, status: Callable[[], JSON]) -> None:
        """PATCH the pod's status subresource on the request loop: one pod's patches in the order
        made, one at a time (a later nomination must not be overtaken by an earlier one); different
        pods' at once. `status` builds the patch when it is sent."""
        self.requests.call_soon(lambda: self._queue_status(pod, status))

    def _queue_status(self, pod: PodInfoLike, status: Callable[[], JSON]) -> None:  # loop thread
        queued = self._status_queues.get(pod.key)
        if queued is not None:
            queued.append(status)
            return
        self._status_queues[pod.key] = collections.deque()
        self._send_status(pod, status)

    def _send_status(self, pod: PodInfoLike, status: Callable[[], JSON]) -> None:  # loop thread
        ns, name = split_key(pod)

        def answered(_result: Any, err: ApiError | None) -> None:
            if err is not None:
                if isinstance(err, PermissionDenied):
                    self._forbidden(err)
                if not err.not_found:
                    log.warning("pod status patch failed pod=%s err=%s", pod.key, err)
            queued = self._status_queues.get(pod.key)
            if queued:
                self._send_status(pod, queued.popleft())
            else:
                self._status_queues.pop(pod.key, None)

        body = {"status": status()}
        self.requests.submit("PATCH", status_path(ns, name), answered, body=body, content_type=STATUS_PATCH)


def binding_body(namespace: str, name: str, uid: str, node: str) -> dict[str, Any]:
    """The Binding of a pod to a node, guarded by the pod's UID."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def binding_path(namespace: str, name: str) -> str:
    """The pods/binding subresource of a pod."""
    return object_path("v1", "pods", namespace, name) + "/binding"


def bind_result(namespace: str, name: str, uid: str, node: str, err: ApiError | None) -> BindResult:
    """Classify the answer to a Binding: bound (no error), gone, conflict or error."""
    if err is None:
        return BindResult(namespace, name, uid, node, BOUND, status=201)
    if err.status == 409 and "UID" in err.message:
        outcome = GONE  # the name now belongs to another pod
    elif err.status == 409:
        outcome = CONFLICT  # already bound (by someone else)
    elif err.status == 404 or "is being terminated" in err.message:
        outcome = GONE
    else:
        outcome = ERROR
    log.info("bind failed pod=%s/%s node=%s outcome=%s err=%s", namespace, name, node, outcome, err)
    return BindResult(namespace, name, uid, node, outcome, str(err), err.status)


def bind_pod(client: KubeClient, namespace: str, name: str, uid: str, node: str) -> BindResult:
    """POST pods/<name>/binding guarded by the pod UID, and classify the answer."""
    body = binding_body(namespace, name, uid, node)
    try:
        client.request("POST", binding_path(namespace, name), body=body, decode=False)  # a Status
    except ApiError as err:
        return bind_result(namespace, name, uid, node, err)
    return bind_result(namespace, name, uid, node, None)


def delete_options(uid: str = "", grace: int | None = None) -> dict[str, Any]:
    """DeleteOptions with a UID precondition and a grace period (None: the pod's own)."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if grace is not None:
        body["gracePeriodSeconds"] = int(grace)
    if uid:
        body["preconditions"] = {"uid": uid}
    return body


# (verb, group, resource, namespace or "" for cluster-wide) of every call the back-end makes
REQUIRED_PERMISSIONS: tuple[tuple[str, str, str], ...] = (
    ("list", "", "nodes"),
    ("watch", "", "nodes"),
    ("list", "", "pods"),
    ("watch", "", "pods"),
    ("delete", "", "pods"),
    ("create", "", "pods/binding"),
    ("patch", "", "pods/status"),
    ("create", "", "events"),
    ("patch", "", "events"),
    ("list", "policy", "poddisruptionbudgets"),
    ("watch", "policy", "poddisruptionbudgets"),
    ("list", "scheduling.k8s.io", "priorityclasses"),
    ("watch", "scheduling.k8s.io", "priorityclasses"),
    ("list", "", "services"),
    ("watch", "", "services"),
    ("list", "", "replicationcontrollers"),
    ("watch", "", "replicationcontrollers"),
    ("list", "apps", "replicasets"),
    ("watch", "apps", "replicasets"),
    ("list", "apps", "statefulsets"),
    ("watch", "apps", "statefulsets"),
    # volume plugins: informers, and PreBind's PV claimRef / claim selected-node updates
    ("list", "", "persistentvolumes"),
    ("watch", "", "persistentvolumes"),
    ("update", "", "persistentvolumes"),
    ("list", "", "persistentvolumeclaims"),
    ("watch", "", "persistentvolumeclaims"),
    ("update", "", "persistentvolumeclaims"),
    ("list", "storage.k8s.io", "storageclasses"),
    ("watch", "storage.k8s.io", "storageclasses"),
    ("list", "storage.k8s.io", "csinodes"),
    ("watch", "storage.k8s.io", "csinodes"),
    ("list", "storage.k8s.io", "csidrivers"),
    ("watch", "storage.k8s.io", "csidrivers"),
    ("list", "storage.k8s.io", "csistoragecapacities"),
    ("watch", "storage.k8s.io", "csistoragecapacities"),
)
LEASE_PERMISSIONS = (
    ("get", "coordination.k8s.io", "leases"),
    ("create", "coordination.k8s.io", "leases"),
    ("update", "coordination.k8s.io", "leases"),
)
CONFIGMAP_PERMISSIONS = (("list", "", "configmaps"), ("watch", "", "configmaps"))


def missing_permissions(
    client: KubeClient,
    lease_namespace: str | None = None,
    configmap_namespaces: tuple[str, ...] = (),
    extra: tuple[tuple[str, str, str], ...] = (),
) -> list[str]:
    """Ask the API server (SelfSubjectAccessReview) which required permissions are missing, as `verb resource`."""
    checks: list[tuple[str, str, str, str]] = [(v, g, r, "") for v, g, r in (*REQUIRED_PERMISSIONS, *extra)]
    if lease_namespace:
        checks += [(v, g, r, lease_namespace) for v, g, r in LEASE_PERMISSIONS]
    for ns in configmap_namespaces:
        checks += [(v, g, r, ns) for v, g, r in CONFIGMAP_PERMISSIONS]
    missing = []
    for verb, group, resource, ns in checks:
        res, _, sub = resource.partition("/")
        attrs: dict[str, Any] = {"verb": verb, "group": group, "resource": res}
        if sub:
            attrs["subresource"] = sub
        if ns:
            attrs["namespace"] = ns
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs},
        }
        review = client.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body)
        if not (review.get("status") or {}).get("allowed"):
            full = f"{resource}.{group}" if group else resource
            missing.append(f"{verb} {full}" + (f" in namespace {ns}" if ns else ""))
    return missing
