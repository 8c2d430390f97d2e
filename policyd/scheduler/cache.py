"""The scheduler cache: node states with their pods, assumed pods, and snapshot updates.

Modelled on kube-scheduler's internal/cache/cache.go. One lock guards the cache. A pod chosen by a
cycle is *assumed* (it counts against its node at once); the informer's observation of the bind
*confirms* it; a failed bind *forgets* it; an assumed pod whose bind finished but which is never
confirmed *expires* after `ttl` seconds. Pods of every scheduler count.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from policyd.errors import ClusterDataError
from policyd.scheduler.clock import Clock
from policyd.scheduler.cluster.resources import INT64_BOUND
from policyd.scheduler.snapshot import NodeInfoLike, PodInfoLike, Snapshot

log = logging.getLogger(__name__)

NodeFactory = Callable[[Mapping[str, Any]], NodeInfoLike]

DEFAULT_ASSUMED_TTL = 30.0
# a node's sums of its pods' amounts: (the node's CEL key, each pod's)
_SUMS = (("requested", "requests"), ("nonZeroRequested", "nonZeroRequests"))


def beyond_int64(state: NodeInfoLike, pod: PodInfoLike) -> str | None:
    """The resource whose sum on the node would leave the 64-bit integers with `pod` counted there (in
    place of its earlier version), if any. Only pods bound past the scheduler can get there (the ones
    it places fit); kube-scheduler's int64 sums wrap around, policyd does not count such a pod."""
    old = state.pods.get(pod.key)
    for total_key, pod_key in _SUMS:
        totals = state.cel.get(total_key) or {}
        earlier = (old.cel.get(pod_key) or {}) if old is not None else {}
        for res, amount in (pod.cel.get(pod_key) or {}).items():
            if totals.get(res, 0) - earlier.get(res, 0) + amount >= INT64_BOUND:
                return str(res)
    return None


@dataclass
class _PodEntry:
    pod: PodInfoLike
    node: str
    assumed: bool = False
    binding_finished: bool = False
    deadline: float | None = None


@dataclass
class _NodeEntry:
    state: NodeInfoLike | None  # None: pods seen before their node (kube-scheduler: imaginary node)
    generation: int
    obj: Mapping[str, Any] | None = None


class Cache:
    """Live node states, kept up to date incrementally; the source of every cycle's snapshot."""

    def __init__(self, node_factory: NodeFactory, clock: Clock, ttl: float = DEFAULT_ASSUMED_TTL) -> None:
        self._node_factory = node_factory
        self._clock = clock
        self._ttl = ttl
        self._lock = threading.RLock()
        self._nodes: dict[str, _NodeEntry] = {}
        self._pods: dict[str, _PodEntry] = {}
        self._orphans: dict[str, dict[str, PodInfoLike]] = {}  # node name -> pods waiting for it
        self._generation = 0
        # nodes changed since the last update of `_tracked` (the scheduler's snapshot): that snapshot
        # is brought up to date from this set instead of a walk over every node
        self._dirty: set[str] = set()
        self._tracked: Snapshot | None = None
        self._layout_dirty = False  # a node was removed since (its name may come back elsewhere)
        # assumed pods whose bind returned: the only ones `cleanup_expired` has to look at
        self._expiring: dict[str, None] = {}

    # --- nodes ---

    def add_node(self, obj: Mapping[str, Any]) -> None:
        """A node appeared (or was re-listed)."""
        name = obj["metadata"]["name"]
        with self._lock:
            entry = self._nodes.get(name)
            if entry is not None and entry.state is not None:
                self._update_node_locked(entry, obj)
                return
            state = self._node_factory(obj)
            for pod in self._orphans.pop(name, {}).values():
                resource = beyond_int64(state, pod)
                if resource is not None:
                    log.warning(
                        "pod not counted pod=%s node=%s resource=%s reason=sum beyond int64",
                        pod.key,
                        name,
                        resource,
                    )
                    self._pods.pop(pod.key, None)
                    continue
                state.add_pod(pod)
            self._nodes[name] = _NodeEntry(state=state, generation=self._bump(name), obj=obj)

    def update_node(self, obj: Mapping[str, Any]) -> None:
        """A node changed (labels, taints, allocatable, ...)."""
        name = obj["metadata"]["name"]
        with self._lock:
            entry = self._nodes.get(name)
            if entry is None or entry.state is None:
                self.add_node(obj)
                return
            self._update_node_locked(entry, obj)

    def remove_node(self, name: str) -> None:
        """A node was deleted; its pods stay known until their own delete events."""
        with self._lock:
            entry = self._nodes.pop(name, None)
            if entry is None:
                return
            self._bump(name)
            self._layout_dirty = True
            orphans = {k: e.pod for k, e in self._pods.items() if e.node == name}
            if orphans:
                self._orphans[name] = orphans

    def node_object(self, name: str) -> Mapping[str, Any] | None:
        """The last node object seen for `name`."""
        with self._lock:
            entry = self._nodes.get(name)
            return entry.obj if entry else None

    def node_count(self) -> int:
        """Number of known nodes."""
        with self._lock:
            return len(self._nodes)

    # --- assigned pods ---

    def add_pod(self, pod: PodInfoLike) -> None:
        """An assigned pod was observed; confirms it when it was assumed on the same node."""
        with self._lock:
            entry = self._pods.get(pod.key)
            confirming = entry is not None and entry.assumed and entry.node == pod.node_name
            node = self._nodes.get(pod.node_name)
            if not confirming and node is not None and node.state is not None:
                resource = beyond_int64(node.state, pod)
                if resource is not None:  # refused before anything changed: the cache stays as it was
                    raise ClusterDataError(
                        f"pod {pod.key}: node {pod.node_name}'s {resource} requests with this pod's are"
                        " beyond the 64-bit integers kube-scheduler counts in; the pod is not counted"
                    )
            self._pods[pod.key] = _PodEntry(pod=pod, node=pod.node_name)
            if entry is not None and confirming:
                # confirmed: the pod keeps its place on the node, as kube-scheduler's AddPod leaves it
                self._add_to_node(pod, entry.node, in_place=True)
                return
            if entry is not None:
                if entry.assumed:
                    log.warning("pod key=%s assumed=%s observed=%s", pod.key, entry.node, pod.node_name)
                self._remove_from_node(entry.pod, entry.node)
            self._add_to_node(pod, pod.node_name)

    def update_pod(self, pod: PodInfoLike) -> None:
        """An assigned pod changed (labels, requests, being deleted...)."""
        self.add_pod(pod)

    def remove_pod(self, key: str) -> None:
        """An assigned pod was deleted."""
        with self._lock:
            entry = self._pods.pop(key, None)
            if entry is not None:
                self._remove_from_node(entry.pod, entry.node)

    def pod(self, key: str) -> PodInfoLike | None:
        """The cached (assigned or assumed) pod `key`."""
        with self._lock:
            entry = self._pods.get(key)
            return entry.pod if entry else None

    def pods_on(self, node: str) -> list[PodInfoLike]:
        """Pods counted against `node`."""
        with self._lock:
            return [e.pod for e in self._pods.values() if e.node == node]

    def all_pods(self) -> list[PodInfoLike]:
        """Every cached pod (assigned and assumed)."""
        with self._lock:
            return [e.pod for e in self._pods.values()]

    # --- assume / confirm / forget / expire ---

    def assume(self, pod: PodInfoLike, node: str) -> None:
        """Count `pod` (a PodInfo with node_name == `node`) against `node` before the bind completes."""
        with self._lock:
            if pod.key in self._pods:
                raise ValueError(f"pod {pod.key} is already in the cache")
            self._pods[pod.key] = _PodEntry(pod=pod, node=node, assumed=True)
            self._add_to_node(pod, node)

    def finish_binding(self, key: str) -> None:
        """The bind call returned; the expiry clock of the assumed pod starts now."""
        with self._lock:
            entry = self._pods.get(key)
            if entry is not None and entry.assumed:
                entry.binding_finished = True
                entry.deadline = self._clock.now() + self._ttl
                self._expiring[key] = None

    def forget(self, key: str) -> None:
        """Undo an assume (bind failure, permit rejection)."""
        with self._lock:
            entry = self._pods.get(key)
            if entry is None or not entry.assumed:
                return
            del self._pods[key]
            self._remove_from_node(entry.pod, entry.node)

    def is_assumed(self, key: str) -> bool:
        """True while `key` is assumed and not yet confirmed."""
        with self._lock:
            entry = self._pods.get(key)
            return entry is not None and entry.assumed

    def cleanup_expired(self) -> list[str]:
        """Drop assumed pods whose bind finished more than `ttl` seconds ago and was never observed."""
        now = self._clock.now()
        expired: list[str] = []
        with self._lock:
            for key in list(self._expiring):
                entry = self._pods.get(key)
                if entry is None or not entry.assumed or not entry.binding_finished:
                    del self._expiring[key]  # confirmed, forgotten or removed since
                    continue
                if entry.deadline is not None and now >= entry.deadline:
                    log.warning("assumed pod expired pod=%s node=%s", key, entry.node)
                    del self._pods[key]
                    del self._expiring[key]
                    self._remove_from_node(entry.pod, entry.node)
                    expired.append(key)
        return expired

    # --- snapshot ---

    def update_snapshot(self, snapshot: Snapshot) -> None:
        """Bring `snapshot` up to date, copying only nodes changed since its last update.

        The snapshot updated last is tracked: when it comes back, only the nodes changed since
        (`_dirty`) are looked at; any other snapshot gets a walk over every node.
        """
        with self._lock:
            changed: dict[str, tuple[int, NodeInfoLike]] = {}
            if snapshot is self._tracked:
                layout_changed = self._layout_dirty
                for name in self._dirty:
                    entry = self._nodes.get(name)
                    if entry is None or entry.state is None:
                        layout_changed = layout_changed or name in snapshot
                        continue
                    layout_changed = layout_changed or name not in snapshot
                    changed[name] = (entry.generation, entry.state.clone_without(()))
                snapshot.store(self._order() if layout_changed else None, changed)
            else:
                known = snapshot.node_generations()
                order: list[str] = []
                for name, entry in self._nodes.items():
                    if entry.state is None:
                        continue
                    order.append(name)
                    if known.get(name) != entry.generation:
                        changed[name] = (entry.generation, entry.state.clone_without(()))
                snapshot.store(order, changed)
            self._dirty.clear()
            self._layout_dirty = False
            self._tracked = snapshot

    def _order(self) -> list[str]:
        return [name for name, entry in self._nodes.items() if entry.state is not None]

    # --- internals (lock held) ---

    def _bump(self, name: str) -> int:
        self._generation += 1
        self._dirty.add(name)
        return self._generation

    def _update_node_locked(self, entry: _NodeEntry, obj: Mapping[str, Any]) -> None:
        assert entry.state is not None
        entry.state.update_node(obj)
        entry.obj = obj
        entry.generation = self._bump(obj["metadata"]["name"])

    def _add_to_node(self, pod: PodInfoLike, node: str, in_place: bool = False) -> None:
        """Count `pod` on `node` (`in_place`: instead of its earlier version, in that one's place)."""
        entry = self._nodes.get(node)
        if entry is None or entry.state is None:
            self._orphans.setdefault(node, {})[pod.key] = pod
            return
        if in_place:
            entry.state.replace_pod(pod)
        else:
            entry.state.add_pod(pod)
        entry.generation = self._bump(node)

    def _remove_from_node(self, pod: PodInfoLike, node: str) -> None:
        entry = self._nodes.get(node)
        if entry is None or entry.state is None:
            orphans = self._orphans.get(node)
            if orphans is not None:
                orphans.pop(pod.key, None)
                if not orphans:
                    del self._orphans[node]
            return
        entry.state.remove_pod(pod)
        entry.generation = self._bump(node)
