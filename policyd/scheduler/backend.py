"""The cluster back-end interface: what both the simulated and the API-server back-ends implement.

A back-end delivers cluster objects to the scheduler (an `EventHandler`, list first then changes)
and carries out the scheduler's writes. `bind` blocks and is only ever called from the binder's
bounded worker pool (policyd.scheduler.binder), which makes binding asynchronous for the scheduling
loop; a back-end whose `binds_in_memory` is true (the simulated cluster) is bound inline, since
threads would only add GIL hand-offs to a bind that does no I/O. Every other write is cheap for the simulated back-end; a real back-end may queue them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from policyd.errors import PolicydError
from policyd.scheduler.cluster.volume_store import PodVolumeBindings
from policyd.scheduler.snapshot import PodInfoLike

KubeObject = Mapping[str, Any]


class BindError(PolicydError):
    """A bind was refused (conflict, pod gone, node gone); `retry` False drops the pod."""

    def __init__(self, message: str, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


class EventHandler(Protocol):
    """Receives cluster objects; called from any thread (watch threads, bind workers)."""

    def on_node_add(self, obj: KubeObject) -> None:
        """A node appeared."""
        ...

    def on_node_update(self, old: KubeObject, new: KubeObject) -> None:
        """A node changed."""
        ...

    def on_node_delete(self, obj: KubeObject) -> None:
        """A node went away."""
        ...

    def on_pod_add(self, obj: KubeObject) -> None:
        """A pod appeared (pending or assigned)."""
        ...

    def on_pod_update(self, old: KubeObject, new: KubeObject) -> None:
        """A pod changed (bound, labels, being deleted...)."""
        ...

    def on_pod_delete(self, obj: KubeObject) -> None:
        """A pod went away."""
        ...

    def on_pdb_add(self, obj: KubeObject) -> None:
        """A PodDisruptionBudget appeared."""
        ...

    def on_pdb_update(self, old: KubeObject, new: KubeObject) -> None:
        """A PodDisruptionBudget changed."""
        ...

    def on_pdb_delete(self, obj: KubeObject) -> None:
        """A PodDisruptionBudget went away."""
        ...

    def on_workload_add(self, kind: str, obj: KubeObject) -> None:
        """A Service, ReplicaSet, StatefulSet or ReplicationController (`kind`) appeared."""
        ...

    def on_workload_update(self, kind: str, old: KubeObject, new: KubeObject) -> None:
        """A Service, ReplicaSet, StatefulSet or ReplicationController changed."""
        ...

    def on_workload_delete(self, kind: str, obj: KubeObject) -> None:
        """A Service, ReplicaSet, StatefulSet or ReplicationController went away."""
        ...

    def on_storage_add(self, kind: str, obj: KubeObject) -> None:
        """A PersistentVolume, PersistentVolumeClaim, StorageClass, CSINode or CSIDriver appeared."""
        ...

    def on_storage_update(self, kind: str, old: KubeObject, new: KubeObject) -> None:
        """A storage object changed."""
        ...

    def on_storage_delete(self, kind: str, obj: KubeObject) -> None:
        """A storage object went away."""
        ...

    def on_synced(self) -> None:
        """The initial list of every kind has been delivered."""
        ...


@runtime_checkable
class AsyncBinds(Protocol):
    """A back-end that can bind without blocking a thread per bind (the API server's request loop)."""

    def bind_async(self, pod: PodInfoLike, node: str, done: Callable[[BindError | None], None]) -> None:
        """Send the bind; `done(error)` is called (on any thread) once it completed: None when bound."""
        ...


class ClusterBackend(Protocol):
    """A cluster the scheduler schedules into."""

    # True when `bind` completes in memory at once (no I/O): the binder then runs it inline
    binds_in_memory: bool

    def start(self, handler: EventHandler) -> None:
        """Deliver every current object to `handler`, call `on_synced`, then keep delivering changes."""
        ...

    def stop(self) -> None:
        """Stop delivering events and release resources."""
        ...

    def bind(self, pod: PodInfoLike, node: str) -> None:
        """Bind `pod` to `node` (blocking; raises BindError). Called from binder workers only."""
        ...

    def bind_volumes(self, pod: PodInfoLike, bindings: PodVolumeBindings) -> None:
        """PreBind (VolumeBinding): bind the PVs, mark claims to provision, and block until every claim of
        the pod is bound (raises BindError on failure or timeout). Called from binder workers only."""
        ...

    def delete_victims(self, pods: Sequence[PodInfoLike], in_order: bool) -> None:
        """Delete a preemptor's victims, each with its own grace period. `in_order`: one after another
        in this order, as kube-scheduler does, so the informers see them go in this order (it can set
        the order of the pods left on the node, NodeInfo's swap-remove); else all at once."""
        ...

    def set_nominated_node(self, pod: PodInfoLike, node: str | None) -> None:
        """Set (or clear, with None) status.nominatedNodeName."""
        ...

    def record_event(self, pod: PodInfoLike, event_type: str, reason: str, message: str) -> None:
        """Record an Event about `pod` (Normal/Warning; Scheduled, FailedScheduling, Preempted)."""
        ...

    def patch_pod_scheduled(
        self, pod: PodInfoLike, condition: Mapping[str, str], nominated_node: str = ""
    ) -> None:
        """Set the PodScheduled condition of `pod` (status, reason, message), and its nominated node
        when one is given, in one write (kube-scheduler's updatePod)."""
        ...


class Arrivals(Protocol):
    """A back-end that creates pending pods over time on a simulated clock (a replayed trace)."""

    def next_arrival(self) -> float | None:
        """The clock time of the next pod creation (None: nothing more arrives)."""
        ...

    def deliver_arrivals(self, now: float) -> int:
        """Create (deliver) every pod due at `now`; returns how many."""
        ...
