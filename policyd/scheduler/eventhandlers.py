"""Event handlers: cluster objects from the back-end become cache and queue updates (kube-scheduler's
eventhandlers.go).

Back-ends call the `EventHandler` methods (`on_node_add`, `on_pod_update`, ...) from any thread; each
posts a closure to the scheduler's inbox, which the scheduling thread applies between cycles
(`apply_events`; docs/DESIGN.md "Snapshot"). Applying an event updates the cache or the queue and
moves the parked pods the event may wake (queueing hints: `CompiledProfile.wake_events`). A policy
generation change is one more event: every parked pod is retried.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

from policyd.errors import PolicydError
from policyd.framework import (
    EVENT_NODE_ADD,
    EVENT_NODE_ALLOCATABLE,
    EVENT_NODE_LABELS,
    EVENT_NODE_OTHER,
    EVENT_NODE_SPEC,
    EVENT_NODE_TAINTS,
    EVENT_POD_ASSIGNED_ADD,
    EVENT_POD_ASSIGNED_DELETE,
    EVENT_POD_ASSIGNED_SCALE_DOWN,
    EVENT_POD_ASSIGNED_UPDATE,
    EVENT_POLICY_CHANGE,
    EVENT_STORAGE_CHANGE,
    CompiledPolicySet,
    CompiledProfile,
)
from policyd.scheduler.backend import KubeObject
from policyd.scheduler.cache import Cache
from policyd.scheduler.clock import Clock
from policyd.scheduler.cluster.volume_store import PodVolumeBindings, VolumeStore
from policyd.scheduler.cluster.workloads import WorkloadIndex
from policyd.scheduler.metrics import SchedulerMetrics
from policyd.scheduler.options import SchedulerOptions
from policyd.scheduler.pdb import BudgetIndex
from policyd.scheduler.permit import Permits, WaitingPod
from policyd.scheduler.queue import QueuedPod, SchedulingQueue
from policyd.scheduler.snapshot import PodInfoLike

log = logging.getLogger(__name__)

DEFAULT_PROFILE = "policyd"
API_DEFAULT_SCHEDULER_NAME = "default-scheduler"
# kube-scheduler's queue_incoming_pods_total event labels for events that are not cluster events
EVENT_POD_ADD = "PodAdd"
EVENT_POD_UPDATE = "PodUpdate"
EVENT_GATES_ELIMINATED = "UpdatePodSchedulingGatesEliminated"

PodInfoFactory = Callable[[KubeObject], PodInfoLike]


def _node_change_events(old: KubeObject, new: KubeObject) -> list[str]:
    """Map a node update onto the event kinds of `wake_events`."""
    events = []
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    os_, ns = old.get("spec") or {}, new.get("spec") or {}
    ost, nst = old.get("status") or {}, new.get("status") or {}
    if om.get("labels") != nm.get("labels"):
        events.append(EVENT_NODE_LABELS)
    if os_.get("taints") != ns.get("taints"):
        events.append(EVENT_NODE_TAINTS)
    if ost.get("allocatable") != nst.get("allocatable"):
        events.append(EVENT_NODE_ALLOCATABLE)
    if {k: v for k, v in os_.items() if k != "taints"} != {k: v for k, v in ns.items() if k != "taints"}:
        events.append(EVENT_NODE_SPEC)
    if om.get("annotations") != nm.get("annotations") or {
        k: v for k, v in ost.items() if k != "allocatable"
    } != {k: v for k, v in nst.items() if k != "allocatable"}:
        events.append(EVENT_NODE_OTHER)
    return events


def _scaled_down(before: PodInfoLike, after: PodInfoLike) -> bool:
    """`after` requests less of some resource than `before` (an in-place resize down)."""
    now = after.cel.get("requests") or {}
    return any(now.get(name, 0) < value for name, value in (before.cel.get("requests") or {}).items())


def _spec_changed(old: KubeObject, new: KubeObject) -> bool:
    """True when a pod changed beyond its status and bookkeeping fields (kube-scheduler isPodUpdated)."""

    def strip(obj: KubeObject) -> dict[str, Any]:
        meta = {
            k: v
            for k, v in (obj.get("metadata") or {}).items()
            if k not in ("resourceVersion", "generation", "managedFields")
        }
        return {"metadata": meta, "spec": obj.get("spec")}

    return strip(old) != strip(new)


class EventHandlers:
    """The `EventHandler` half of the Scheduler: posting events and applying them to cache and queue."""

    # set by Scheduler.__init__
    options: SchedulerOptions
    clock: Clock
    queue: SchedulingQueue
    cache: Cache
    budgets: BudgetIndex
    workloads: WorkloadIndex
    volumes: VolumeStore
    _volume_bindings: dict[str, PodVolumeBindings]  # pod key -> what its PreBind does
    permits: Permits
    metrics: SchedulerMetrics | None
    given_up: set[str]
    synced: threading.Event
    _policies: CompiledPolicySet
    _pod_info: PodInfoFactory
    _pod_info_update: Callable[[Any, KubeObject], PodInfoLike]
    _inbox: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]]
    _inbox_lock: threading.Condition
    _attempt_started: dict[str, float]
    _moves_pending: dict[str, None] | None  # kinds of event seen in the batch being applied

    # ------------------------------------------------------------------ profiles

    @property
    def policies(self) -> CompiledPolicySet:
        """The compiled policy set in use."""
        return self._policies

    def profile_for(self, pod: PodInfoLike) -> CompiledProfile | None:
        """The profile scheduling `pod` (by spec.schedulerName), or None when it is not ours."""
        profiles = self._policies.profiles
        profile = profiles.get(pod.scheduler_name or API_DEFAULT_SCHEDULER_NAME)
        if profile is None and self.options.adopt_unknown_schedulers and profiles:
            profile = profiles.get(DEFAULT_PROFILE) or next(iter(profiles.values()))
        return profile

    def set_policies(self, policies: CompiledPolicySet) -> None:
        """Switch to a new policy generation; every parked pod is retried (thread-safe)."""
        self._post(self._apply_policies, policies)

    def _apply_policies(self, policies: CompiledPolicySet) -> None:
        self._policies = policies
        self.queue.set_profiles(self.profile_for)
        self._move(EVENT_POLICY_CHANGE)

    # ------------------------------------------------------------------ event handler (any thread)

    def on_node_add(self, obj: KubeObject) -> None:
        """A node appeared."""
        self._post(self._node_added, obj)

    def on_node_update(self, old: KubeObject, new: KubeObject) -> None:
        """A node changed."""
        self._post(self._node_updated, old, new)

    def on_node_delete(self, obj: KubeObject) -> None:
        """A node went away."""
        self._post(self._node_deleted, obj)

    def on_pod_add(self, obj: KubeObject) -> None:
        """A pod appeared."""
        self._post(self._pod_added, obj)

    def on_pod_update(self, old: KubeObject, new: KubeObject) -> None:
        """A pod changed."""
        self._post(self._pod_updated, old, new)

    def on_pod_delete(self, obj: KubeObject) -> None:
        """A pod went away."""
        self._post(self._pod_deleted, obj)

    def on_pdb_add(self, obj: KubeObject) -> None:
        """A PodDisruptionBudget appeared."""
        self._post(self.budgets.upsert, obj)

    def on_pdb_update(self, old: KubeObject, new: KubeObject) -> None:
        """A PodDisruptionBudget changed."""
        self._post(self.budgets.upsert, new)

    def on_pdb_delete(self, obj: KubeObject) -> None:
        """A PodDisruptionBudget went away."""
        self._post(self.budgets.remove, obj)

    def on_workload_add(self, kind: str, obj: KubeObject) -> None:
        """A Service / ReplicaSet / StatefulSet / ReplicationController appeared (default spread)."""
        self._post(self.workloads.upsert, kind, obj)

    def on_workload_update(self, kind: str, old: KubeObject, new: KubeObject) -> None:
        """A workload changed."""
        self._post(self.workloads.upsert, kind, new)

    def on_workload_delete(self, kind: str, obj: KubeObject) -> None:
        """A workload went away."""
        self._post(self.workloads.remove, kind, obj)

    def on_storage_add(self, kind: str, obj: KubeObject) -> None:
        """A PersistentVolume, PersistentVolumeClaim, StorageClass, CSINode or CSIDriver appeared."""
        self._post(self._storage_changed, kind, obj)

    def on_storage_update(self, kind: str, old: KubeObject, new: KubeObject) -> None:
        """A storage object changed."""
        self._post(self._storage_changed, kind, new)

    def on_storage_delete(self, kind: str, obj: KubeObject) -> None:
        """A storage object went away."""
        self._post(self._storage_deleted, kind, obj)

    def on_synced(self) -> None:
        """The back-end delivered its initial list."""
        self._post(lambda: self.synced.set())

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        with self._inbox_lock:
            self._inbox.append((fn, args))
            self._inbox_lock.notify_all()

    def apply_events(self) -> int:
        """Apply the cluster events queued when called (scheduling thread only); returns how many.

        Events posted meanwhile wait for the next call: during a burst of watch events (thousands of
        new pods) the watch thread posts as fast as they are applied, and draining until the inbox
        was empty kept the scheduling thread from its first cycle until the whole burst was in.
        """
        with self._inbox_lock:
            if not self._inbox:
                return 0
            batch, self._inbox = self._inbox, collections.deque()
        # the batch's moves are made once per kind of event, after the batch: a pod an event wakes
        # leaves the parked pods all the same, and a burst of 3000 victims' deletions with 500
        # preemptors parked no longer walks the parked pods 3000 times
        self._moves_pending = {}
        try:
            for fn, args in batch:
                try:
                    fn(*args)
                except PolicydError as exc:
                    log.warning("event rejected error=%s", exc)
        finally:
            kinds, self._moves_pending = self._moves_pending, None
            for kind in kinds:
                self._move_now(kind)
        return len(batch)

    # ------------------------------------------------------------------ applying events

    def _node_added(self, obj: KubeObject) -> None:
        self.cache.add_node(obj)
        self._move(EVENT_NODE_ADD)

    def _node_updated(self, old: KubeObject, new: KubeObject) -> None:
        self.cache.update_node(new)
        for kind in _node_change_events(old, new):
            self._move(kind)

    def _node_deleted(self, obj: KubeObject) -> None:
        self.cache.remove_node(obj["metadata"]["name"])

    def _storage_changed(self, kind: str, obj: KubeObject) -> None:
        self.volumes.upsert(kind, obj)
        self._move(EVENT_STORAGE_CHANGE)

    def _storage_deleted(self, kind: str, obj: KubeObject) -> None:
        self.volumes.remove(kind, obj)
        self._move(EVENT_STORAGE_CHANGE)

    def _pod_added(self, obj: KubeObject) -> None:
        pod = self._pod_info(obj)
        if pod.node_name:
            self._assigned_pod_added(pod)
            return
        profile = self.profile_for(pod)
        if profile is not None and not self._in_cycle(pod.key):
            self._enqueue(pod, profile, EVENT_POD_ADD)

    def _assigned_pod_added(self, pod: PodInfoLike) -> None:
        self.queue.delete(pod.key)
        self.cache.add_pod(pod)
        self._move(EVENT_POD_ASSIGNED_ADD)

    def _pod_updated(self, old: KubeObject, new: KubeObject) -> None:
        pod = self._updated_pod_info(new)
        was_assigned = bool((old.get("spec") or {}).get("nodeName"))
        if pod.node_name:
            if not was_assigned:
                self._assigned_pod_added(pod)
            else:
                before = self.cache.pod(pod.key)
                self.cache.update_pod(pod)
                self._move(EVENT_POD_ASSIGNED_UPDATE)
                if before is not None and _scaled_down(before, pod):
                    self._move(EVENT_POD_ASSIGNED_SCALE_DOWN)  # kube-scheduler's UpdatePodScaleDown
            return
        if pod.deleting:
            self._pending_pod_gone(pod.key)
            return
        if self._in_cycle(pod.key):
            return  # our own writes (nomination, conditions) on a pod we are placing
        if self.queue.get(pod.key) is not None:
            gated = self.queue.where(pod.key) == "gated"
            self.queue.update(pod, move=_spec_changed(old, new))
            if gated and self.metrics is not None and self.queue.where(pod.key) == "active":
                self.metrics.incoming("active", EVENT_GATES_ELIMINATED)
            return
        profile = self.profile_for(pod)
        if profile is not None and pod.key not in self.given_up:
            self._enqueue(pod, profile, EVENT_POD_UPDATE)

    def _updated_pod_info(self, obj: KubeObject) -> PodInfoLike:
        """The view of an updated pod, derived from the one we hold when only status/nodeName moved."""
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        prev = self.cache.pod(key)
        if prev is None:
            queued = self.queue.get(key)
            prev = queued.pod if queued is not None else None
        return self._pod_info(obj) if prev is None else self._pod_info_update(prev, obj)

    def _pod_deleted(self, obj: KubeObject) -> None:
        key = f"{(obj.get('metadata') or {}).get('namespace', 'default')}/{obj['metadata']['name']}"
        cached = self.cache.pod(key)
        if cached is not None and not self.cache.is_assumed(key):
            self.cache.remove_pod(key)
            self.queue.victim_gone(key)
            self._move(EVENT_POD_ASSIGNED_DELETE)
            return
        self._pending_pod_gone(key)

    def _pending_pod_gone(self, key: str) -> None:
        self.queue.delete(key)
        self._attempt_started.pop(key, None)
        for waiting in self.permits.reject_pod(key):
            self._reject_waiting(waiting, "pod of the group was deleted")
        self.cache.forget(key)
        self._forget_volumes(key)

    def _forget_volumes(self, key: str) -> None:
        """Undo the pod's assumed claim bindings (VolumeBinding Unreserve)."""
        if self._volume_bindings.pop(key, None) is not None:
            self.volumes.forget(key)

    def _in_cycle(self, key: str) -> bool:
        return self.cache.is_assumed(key) or self.permits.is_waiting(key)

    def _enqueue(self, pod: PodInfoLike, profile: CompiledProfile, event: str) -> None:
        """A pending pod enters activeQ, or waits gated (counted once, when it was not queued yet)."""
        if self.metrics is None:
            self.queue.add(pod, profile)
            return
        queued_before = self.queue.get(pod.key) is not None
        self.queue.add(pod, profile)
        where = self.queue.where(pod.key)
        if not queued_before and where is not None:
            self.metrics.incoming(where, event)

    def _move(self, kind: str) -> None:
        """Move parked pods woken by a cluster event (at the end of the batch being applied)."""
        if self._moves_pending is not None:
            self._moves_pending[kind] = None
        else:
            self._move_now(kind)

    def _move_now(self, kind: str) -> None:
        """Move parked pods woken by a cluster event, counting where each one went."""
        metrics = self.metrics
        if metrics is None:
            self.queue.move_on_event(kind)
            return
        now = self.clock.now()

        def count(qp: QueuedPod) -> bool:
            # the queue sends a moved pod to backoffQ while its backoff has not expired
            metrics.incoming("backoff" if qp.backoff_expiry > now else "active", kind)
            return True

        self.queue.move_on_event(kind, count)

    def _reject_waiting(self, waiting: WaitingPod, why: str) -> None:
        """Reject a pod waiting at permit (the scheduling cycle's permit stage implements it)."""
        raise NotImplementedError
