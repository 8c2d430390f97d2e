"""The scheduling queue: activeQ, backoffQ and the unschedulable pods, with queueing hints.

Modelled on kube-scheduler's internal/queue/scheduling_queue.go. One lock guards the whole queue.
PreEnqueue: a pod with `spec.schedulingGates` is held apart as "gated" (counted in `pending()`, never
popped, never moved by cluster events) until an update removes its gates; then it enters activeQ.
Pods rejected by a cycle are parked with the rules that rejected them; a cluster event moves back only
the pods whose rejecting rules list that event in `profile.wake_events(rule)` (a policy change wakes
every pod). Time comes from an injectable clock; `flush(now)` does the periodic moves.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from policyd.framework import EVENT_POLICY_CHANGE, CompiledProfile, RuleRef
from policyd.scheduler.algorithm.nominated import NominationChanges
from policyd.scheduler.clock import Clock
from policyd.scheduler.snapshot import PodInfoLike

log = logging.getLogger(__name__)

BACKOFF_FLUSH_INTERVAL = 1.0
UNSCHEDULABLE_FLUSH_INTERVAL = 30.0
UNSCHEDULABLE_MAX_STAY = 300.0
# nomination changes kept for `nominations_since`; a reader further behind gets every nominated node
NOMINATION_LOG_LIMIT = 1 << 16


@dataclass
class QueuedPod:
    """A pending pod as the queue tracks it (kube-scheduler QueuedPodInfo)."""

    pod: PodInfoLike
    profile: CompiledProfile
    timestamp: float  # last time it entered the queue
    initial_timestamp: float  # first time it entered the queue
    attempts: int = 0
    unschedulable_since: float = 0.0
    rejected_by: frozenset[RuleRef] = frozenset()
    backoff_expiry: float = 0.0
    popped_cycle: int = 0
    seq: int = 0

    @property
    def key(self) -> str:
        """`namespace/name` of the pod."""
        return self.pod.key


# a deletion that failed or whose event was lost delays its preemptor's next attempt at most this long
VICTIMS_WAIT = 10.0


@dataclass(frozen=True)
class QueueConfig:
    """Backoff and flush timings (seconds)."""

    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    unschedulable_max_stay: float = UNSCHEDULABLE_MAX_STAY
    backoff_flush_interval: float = BACKOFF_FLUSH_INTERVAL
    unschedulable_flush_interval: float = UNSCHEDULABLE_FLUSH_INTERVAL
    # longest a preemptor waits for its victims to be seen deleted before events move it again
    victims_wait: float = VICTIMS_WAIT


@dataclass
class _Nominated:
    by_node: dict[str, dict[str, PodInfoLike]] = field(default_factory=dict)
    node_of: dict[str, str] = field(default_factory=dict)
    version: int = 0  # changes so far
    log: list[str] = field(default_factory=list)  # the node of each change after `base`
    base: int = 0

    def changed(self, node: str) -> None:
        """Log a change of the pods nominated to `node` (the oldest half dropped beyond the limit)."""
        self.version += 1
        self.log.append(node)
        if len(self.log) > NOMINATION_LOG_LIMIT:
            drop = len(self.log) // 2
            del self.log[:drop]
            self.base += drop


class _Placement(dict[str, str]):
    """key -> sub-queue, with the keys parked in unschedulablePods also kept apart (cluster events look
    at those only, not at every queued pod), the number of pods per sub-queue (the pending-pods gauges
    read it without a walk), and a count of changes to the parked set (`parked_changes`)."""

    def __init__(self) -> None:
        super().__init__()
        self.parked: dict[str, None] = {}
        self.counts: dict[str, int] = {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
        self.parked_changes = 0

    def __setitem__(self, key: str, where: str) -> None:
        self._forget(key)
        super().__setitem__(key, where)
        self.counts[where] = self.counts.get(where, 0) + 1
        if where == "unschedulable":
            self.parked[key] = None
            self.parked_changes += 1

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._forget(key)
        super().__delitem__(key)

    def pop(self, key: str, *default: Any) -> Any:  # type: ignore[override]
        self._forget(key)
        return super().pop(key, *default)

    def _forget(self, key: str) -> None:
        where = self.get(key)
        if where is None:
            return
        self.counts[where] -= 1
        if self.parked.pop(key, 0) is None:
            self.parked_changes += 1


class SchedulingQueue:
    """activeQ (heap by queue key), backoffQ (heap by expiry), unschedulable pods (map)."""

    def __init__(self, clock: Clock, config: QueueConfig | None = None) -> None:
        self._clock = clock
        self._config = config or QueueConfig()
        self._lock = threading.Condition()
        self._active: list[tuple[Any, ...]] = []
        self._backoff: list[tuple[float, int, str]] = []
        self._pods: dict[str, QueuedPod] = {}  # every pod in active/backoff/unschedulable
        self._where = _Placement()  # key -> "active" | "backoff" | "unschedulable" | "gated"
        self._in_flight: set[str] = set()
        self._seq = itertools.count()
        self._cycle = 0
        self._move_request_cycle = -1
        self._last_backoff_flush = clock.now()
        self._last_unschedulable_flush = clock.now()
        self._nominated = _Nominated()
        # preemptor -> (its victims not yet seen deleted, until when it waits for them); victim -> preemptor
        self._awaiting: dict[str, tuple[set[str], float]] = {}
        self._victim_of: dict[str, str] = {}
        self._closed = False

    # --- adding and popping ---

    def add(self, pod: PodInfoLike, profile: CompiledProfile) -> None:
        """A new (or updated, not yet queued) pending pod enters activeQ, or waits gated (PreEnqueue)."""
        if pod.deleting or pod.node_name:
            return
        with self._lock:
            if pod.key in self._pods:
                self._pods[pod.key].pod = pod
                return
            if pod.key in self._in_flight:
                return
            now = self._clock.now()
            qp = QueuedPod(pod=pod, profile=profile, timestamp=now, initial_timestamp=now)
            if pod.scheduling_gates:
                self._pods[pod.key] = qp
                self._where[pod.key] = "gated"
                log.debug("queue gated pod=%s gates=%s", pod.key, ",".join(pod.scheduling_gates))
                return
            self._push_active(qp)

    def pop(self, timeout: float | None = 0.0) -> QueuedPod | None:
        """The head of activeQ (None when empty after `timeout` seconds; None waits forever)."""
        with self._lock:
            if timeout is None or timeout > 0:
                self._lock.wait_for(lambda: bool(self._active) or self._closed, timeout)
            while self._active:
                entry = heapq.heappop(self._active)
                key = entry[-1]
                if self._where.get(key) != "active" or entry[-2] != self._pods[key].seq:
                    continue  # stale heap entry
                qp = self._pods.pop(key)
                del self._where[key]
                self._cycle += 1
                qp.popped_cycle = self._cycle
                qp.attempts += 1
                self._in_flight.add(key)
                return qp
            return None

    def close(self) -> None:
        """Wake every waiting `pop` (shutdown)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def done(self, key: str) -> None:
        """The cycle of `key` ended without requeueing it (scheduled, deleted, settled)."""
        with self._lock:
            self._in_flight.discard(key)

    def add_unschedulable(self, qp: QueuedPod, rejected_by: Iterable[RuleRef]) -> None:
        """Park a pod its cycle could not place; it goes to backoffQ if an event came meanwhile."""
        with self._lock:
            self._in_flight.discard(qp.key)
            if qp.pod.deleting:
                return
            now = self._clock.now()
            qp.rejected_by = frozenset(rejected_by)
            qp.timestamp = now
            qp.backoff_expiry = now + self.backoff_duration(qp.attempts)
            if self._move_request_cycle >= qp.popped_cycle and not self._awaits_victims(qp.key):
                self._push_backoff(qp)
            else:
                qp.unschedulable_since = now
                qp.seq = next(self._seq)
                self._pods[qp.key] = qp
                self._where[qp.key] = "unschedulable"

    def add_backoff(self, qp: QueuedPod) -> None:
        """Requeue after an error (bind failure, permit rejection) through backoffQ."""
        with self._lock:
            self._in_flight.discard(qp.key)
            if qp.pod.deleting:
                return
            now = self._clock.now()
            qp.timestamp = now
            qp.backoff_expiry = now + self.backoff_duration(qp.attempts)
            self._push_backoff(qp)

    def backoff_duration(self, attempts: int) -> float:
        """1 s doubling per attempt, capped (kube-scheduler calculateBackoffDuration)."""
        duration = self._config.initial_backoff
        for _ in range(1, max(attempts, 1)):
            duration *= 2
            if duration >= self._config.max_backoff:
                return self._config.max_backoff
        return min(duration, self._config.max_backoff)

    # --- updates from informers ---

    def update(self, pod: PodInfoLike, move: bool = True) -> None:
        """A queued pod changed: keep its place, drop it when bound or being deleted.

        `move`: the change may make a parked pod schedulable (a spec/metadata change, not status).
        """
        with self._lock:
            qp = self._pods.get(pod.key)
            if qp is None:
                return
            if pod.deleting or pod.node_name:
                self._remove_locked(pod.key)
                return
            qp.pod = pod
            if self._where[pod.key] == "gated":
                if not pod.scheduling_gates:  # the last gate was removed: PreEnqueue passes
                    qp.initial_timestamp = self._clock.now()
                    self._push_active(qp)
                return
            if move and self._where[pod.key] == "unschedulable":
                # a change to the pod itself may make it schedulable (kube-scheduler: PodUpdate)
                self._move_locked(qp)

    def delete(self, key: str) -> None:
        """Forget a pod (deleted or bound elsewhere)."""
        with self._lock:
            self._remove_locked(key)
            self._clear_nomination_locked(key)

    def move_on_event(self, kind: str, match: Callable[[QueuedPod], bool] | None = None) -> int:
        """Move parked pods whose rejecting rules wake on `kind`; returns how many moved."""
        with self._lock:
            self._move_request_cycle = self._cycle
            moved = 0
            awaiting, now = self._awaiting, self._clock.now()
            for key in list(self._where.parked):
                entry = awaiting.get(key)  # a preemptor waiting for its victims stays (see await_victims)
                if entry is not None:
                    if now < entry[1]:
                        continue
                    self._forget_victims_locked(key)
                qp = self._pods[key]
                if not self._wakes(qp, kind):
                    continue
                if match is not None and not match(qp):
                    continue
                self._move_locked(qp)
                moved += 1
            if moved:
                log.debug("queue move event=%s moved=%d", kind, moved)
            return moved

    # --- preemptors waiting for their victims ---

    def await_victims(self, key: str, victims: Iterable[str]) -> None:
        """The preemptor `key` had `victims` deleted: until each of them is seen gone (`victim_gone`),
        or `victims_wait` passed, cluster events do not move it (another pod's deletion would have it
        tried, fail and preempt again while its own victims are still in the cache, as kube-scheduler's
        asynchronous preemption keeps a preemptor back while its API calls are in flight)."""
        pending = set(victims)
        if not pending:
            return
        with self._lock:
            self._awaiting[key] = (pending, self._clock.now() + self._config.victims_wait)
            for victim in pending:
                self._victim_of[victim] = key

    def victim_gone(self, victim: str) -> None:
        """A victim was seen deleted: once the last of its preemptor's victims is gone, the preemptor
        moves with the deletion's event (AssignedPodDelete) as any parked pod does."""
        with self._lock:
            key = self._victim_of.pop(victim, None)
            entry = None if key is None else self._awaiting.get(key)
            if key is None or entry is None:
                return
            entry[0].discard(victim)
            if not entry[0]:
                del self._awaiting[key]

    def _awaits_victims(self, key: str) -> bool:
        entry = self._awaiting.get(key)
        if entry is None:
            return False
        if self._clock.now() < entry[1]:
            return True
        self._forget_victims_locked(key)
        return False

    def _forget_victims_locked(self, key: str) -> None:
        entry = self._awaiting.pop(key, None)
        if entry is not None:
            for victim in entry[0]:
                if self._victim_of.get(victim) == key:
                    del self._victim_of[victim]

    # --- periodic flushes ---

    def flush(self) -> None:
        """Run the due periodic moves: backoffQ -> activeQ (1 s), long-parked pods (30 s)."""
        now = self._clock.now()
        if now - self._last_backoff_flush >= self._config.backoff_flush_interval:
            self.flush_backoff()
        if now - self._last_unschedulable_flush >= self._config.unschedulable_flush_interval:
            self.flush_unschedulable()

    def flush_backoff(self) -> int:
        """Move every pod whose backoff expired to activeQ."""
        with self._lock:
            now = self._clock.now()
            self._last_backoff_flush = now
            moved = 0
            while self._backoff and self._backoff[0][0] <= now:
                _, seq, key = heapq.heappop(self._backoff)
                qp = self._pods.get(key)
                if qp is None or self._where.get(key) != "backoff" or qp.seq != seq:
                    continue
                self._push_active(qp, keep_timestamp=True)
                moved += 1
            return moved

    def flush_unschedulable(self) -> int:
        """Move pods parked longer than the maximum stay (5 min) back to active/backoff."""
        with self._lock:
            now = self._clock.now()
            self._last_unschedulable_flush = now
            due = [
                qp
                for key in self._where.parked
                if now - (qp := self._pods[key]).unschedulable_since >= self._config.unschedulable_max_stay
            ]
            for qp in due:
                self._move_locked(qp)
            return len(due)

    def next_backoff_expiry(self) -> float | None:
        """When the earliest pod in backoffQ becomes ready (None: backoffQ empty)."""
        with self._lock:
            while self._backoff:
                expiry, seq, key = self._backoff[0]
                qp = self._pods.get(key)
                if qp is not None and self._where.get(key) == "backoff" and qp.seq == seq:
                    return expiry
                heapq.heappop(self._backoff)
            return None

    # --- nominated pods ---

    def nominate(self, pod: PodInfoLike, node: str) -> None:
        """Record that `pod` is nominated to `node` (after preemption)."""
        with self._lock:
            self._clear_nomination_locked(pod.key)
            self._nominated.by_node.setdefault(node, {})[pod.key] = pod
            self._nominated.node_of[pod.key] = node
            self._nominated.changed(node)

    def clear_nomination(self, key: str) -> None:
        """Forget the nomination of `key`."""
        with self._lock:
            self._clear_nomination_locked(key)

    def nominated_node(self, key: str) -> str | None:
        """The node `key` is nominated to, if any."""
        with self._lock:
            return self._nominated.node_of.get(key)

    def nominated_pods(self, node: str) -> list[PodInfoLike]:
        """Pods nominated to `node`."""
        with self._lock:
            return list(self._nominated.by_node.get(node, {}).values())

    def nominated_nodes(self) -> list[str]:
        """Names of the nodes some pod is nominated to."""
        with self._lock:
            return [node for node, pods in self._nominated.by_node.items() if pods]

    def nominations_since(self, version: int) -> NominationChanges:
        """The pods now nominated to each node whose nominations changed after change `version` (to
        every nominated node, `complete`, when the log no longer reaches back that far)."""
        with self._lock:
            nominated = self._nominated
            by_node = nominated.by_node
            if version == nominated.version:
                return NominationChanges(version, {}, False)
            if version < nominated.base or version > nominated.version:
                pods = {node: tuple(on.values()) for node, on in by_node.items()}
                return NominationChanges(nominated.version, pods, True)
            changed = dict.fromkeys(nominated.log[version - nominated.base :])
            pods = {node: tuple(by_node[node].values()) if node in by_node else () for node in changed}
            return NominationChanges(nominated.version, pods, False)

    # --- introspection ---

    def pending(self) -> dict[str, int]:
        """Number of pods per sub-queue (metrics: pending_pods{queue})."""
        with self._lock:
            return dict(self._where.counts)

    def parked_changes(self) -> int:
        """A number that changes whenever a pod is parked in or leaves unschedulablePods."""
        with self._lock:
            return self._where.parked_changes

    def in_flight(self) -> int:
        """Pods popped whose cycle has not finished."""
        with self._lock:
            return len(self._in_flight)

    def unschedulable_pods(self) -> list[QueuedPod]:
        """The parked pods."""
        with self._lock:
            return [self._pods[k] for k in self._where.parked]

    def gated_pods(self) -> list[QueuedPod]:
        """The pods held at PreEnqueue by their scheduling gates."""
        with self._lock:
            return [self._pods[k] for k, where in self._where.items() if where == "gated"]

    def where(self, key: str) -> str | None:
        """The sub-queue of `key`: active, backoff, unschedulable or gated (None: not queued)."""
        with self._lock:
            return self._where.get(key)

    def get(self, key: str) -> QueuedPod | None:
        """The queued entry of `key` (active, backoff or unschedulable)."""
        with self._lock:
            return self._pods.get(key)

    def set_profiles(self, resolve: Callable[[PodInfoLike], CompiledProfile | None]) -> None:
        """Re-resolve every queued pod's profile after a policy change; drop pods with none."""
        with self._lock:
            for key in list(self._pods):
                profile = resolve(self._pods[key].pod)
                if profile is None:
                    self._remove_locked(key)
                else:
                    self._pods[key].profile = profile

    # --- internals (lock held) ---

    def _wakes(self, qp: QueuedPod, kind: str) -> bool:
        if kind == EVENT_POLICY_CHANGE or not qp.rejected_by:
            return True
        return any(kind in qp.profile.wake_events(rule) for rule in qp.rejected_by)

    def _move_locked(self, qp: QueuedPod) -> None:
        if qp.backoff_expiry > self._clock.now():
            self._push_backoff(qp)
        else:
            self._push_active(qp)

    def _push_active(self, qp: QueuedPod, keep_timestamp: bool = False) -> None:
        if not keep_timestamp:
            qp.timestamp = self._clock.now()
        qp.seq = next(self._seq)
        self._pods[qp.key] = qp
        self._where[qp.key] = "active"
        sort_key = tuple(qp.profile.queue_key(qp.pod.cel))
        heapq.heappush(self._active, (sort_key, qp.timestamp, qp.seq, qp.key))
        self._lock.notify()

    def _push_backoff(self, qp: QueuedPod) -> None:
        qp.seq = next(self._seq)
        self._pods[qp.key] = qp
        self._where[qp.key] = "backoff"
        heapq.heappush(self._backoff, (qp.backoff_expiry, qp.seq, qp.key))

    def _remove_locked(self, key: str) -> None:
        self._pods.pop(key, None)
        self._where.pop(key, None)
        self._forget_victims_locked(key)

    def _clear_nomination_locked(self, key: str) -> None:
        node = self._nominated.node_of.pop(key, None)
        if node is not None:
            pods = self._nominated.by_node.get(node, {})
            pods.pop(key, None)
            if not pods:
                self._nominated.by_node.pop(node, None)
            self._nominated.changed(node)
