"""The Scheduler: wiring of queue, cache, framework, preemption, permit and binder.

`schedule_one` reads as the story of one pod (kube-scheduler's scheduleOne): pop, skip, snapshot,
filter, preempt when nothing fits, score, select, assume, permit, bind asynchronously. Back-ends
deliver cluster objects through the `EventHandler` methods from any thread; those events are queued
and applied by the scheduling thread between cycles (docs/DESIGN.md "Snapshot"). `run` is the loop
of `policyd run`; `run_until_settled` drives a fake clock for `policyd simulate`.

Metrics (optional `SchedulerMetrics`): durations always come from `time.perf_counter`, never from the
scheduler's clock (a FakeClock does not move during a cycle). A compiled profile evaluates all its
rules in one generated function per node, so rule time is measured per profile and phase, once per
attempt (one perf_counter pair around filtering, one around scoring): `plugin_execution_duration`
carries `plugin="<profile>/filters"` (extension point Filter) and `"<profile>/scores"` (Score).
Pending-pod gauges are refreshed after a cycle at most every `PENDING_REFRESH_SECONDS` and whenever
the active queue runs empty (counting the queue walks every pending pod).
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
    EVENT_POD_ASSIGNED_UPDATE,
    EVENT_POLICY_CHANGE,
    ClusterFunctions,
    CompiledPolicySet,
    CompiledProfile,
    PodEvaluator,
)
from policyd.scheduler.algorithm.reuse import GroupCache
from policyd.scheduler.algorithm.schedule import Algorithm, ScheduleResult, reasons_by_node
from policyd.scheduler.attempts import (
    Attempt,
    AttemptLog,
    fit_error_message,
    preempted_message,
    scheduled_message,
    unschedulable_condition,
)
from policyd.scheduler.backend import BindError, ClusterBackend, KubeObject
from policyd.scheduler.binder import DEFAULT_BIND_WORKERS, Binder
from policyd.scheduler.cache import DEFAULT_ASSUMED_TTL, Cache, NodeFactory
from policyd.scheduler.clock import Clock, FakeClock, RealClock
from policyd.scheduler.cluster import views
from policyd.scheduler.cluster.cluster_index import cluster_view_factory
from policyd.scheduler.metrics import RESULT_ERROR, RESULT_SCHEDULED, RESULT_UNSCHEDULABLE, SchedulerMetrics
from policyd.scheduler.pdb import BudgetIndex
from policyd.scheduler.permit import Permits, WaitingPod
from policyd.scheduler.preemption import Candidate, find_preemption
from policyd.scheduler.queue import QueueConfig, QueuedPod, SchedulingQueue
from policyd.scheduler.snapshot import PodViewLike, Snapshot

log = logging.getLogger(__name__)

DEFAULT_PROFILE = "policyd"
DEFAULT_SCHEDULER_NAME = "default-scheduler"
NO_NODES_MESSAGE = "no nodes available to schedule pods"
PENDING_REFRESH_SECONDS = 1.0
# kube-scheduler's queue_incoming_pods_total event labels for events that are not cluster events
EVENT_POD_ADD = "PodAdd"
EVENT_POD_UPDATE = "PodUpdate"
EVENT_SCHEDULE_FAILURE = "ScheduleAttemptFailure"

PodViewFactory = Callable[[KubeObject], PodViewLike]
ClusterViewFactory = Callable[[Snapshot], ClusterFunctions]


@dataclass(frozen=True)
class SchedulerOptions:
    """Knobs of one Scheduler."""

    # schedule pods whose schedulerName matches no profile with the default profile (simulate: True)
    adopt_unknown_schedulers: bool = False
    percentage_of_nodes_to_score: int = 0  # 0: kube-scheduler's adaptive formula
    queue: QueueConfig = field(default_factory=QueueConfig)
    bind_workers: int = DEFAULT_BIND_WORKERS
    seed: int | None = None
    explain: bool = False  # record every filter rule's verdict on every node (filter_all)
    assumed_ttl: float = DEFAULT_ASSUMED_TTL
    max_attempts: int = 0  # 0: retry forever; else a pod failing that often is given up (simulate)
    # reuse node verdicts and raw scores between equivalent pods (framework.GroupCache); False: every
    # node is evaluated per pod (same results, slower; tests compare the two)
    reuse_node_results: bool = True
    # bounds of the attempt log (None: keep everything, as simulate and explain do)
    attempt_log_pods: int | None = 10000
    attempt_log_detailed: int | None = 1000


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


class Scheduler:
    """Schedules the pending pods a back-end delivers, with the profiles of a compiled policy set."""

    def __init__(
        self,
        policies: CompiledPolicySet,
        backend: ClusterBackend,
        *,
        clock: Clock | None = None,
        options: SchedulerOptions | None = None,
        pod_view: PodViewFactory | None = None,
        node_state: NodeFactory | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.options = options or SchedulerOptions()
        self.clock: Clock = clock or RealClock()
        self.backend = backend
        self._policies = policies
        self._pod_view = pod_view or views.pod_view
        # the default views derive an updated pod's view from the one held (a custom factory cannot)
        self._pod_view_update: Callable[[Any, KubeObject], PodViewLike] | None = (
            None if pod_view is not None else views.pod_view_update
        )
        # one ClusterIndex per scheduler, kept across cycles
        self._cluster_view: ClusterViewFactory = cluster_view_factory()
        self.queue = SchedulingQueue(self.clock, self.options.queue)
        self.cache = Cache(node_state or views.node_state, self.clock, ttl=self.options.assumed_ttl)
        self.snapshot = Snapshot()
        self.budgets = BudgetIndex()
        self.permits = Permits(self.clock)
        # a back-end that binds in memory gains nothing from bind threads but GIL hand-offs
        in_memory = bool(getattr(backend, "binds_in_memory", False))
        self.binder = Binder(backend, 0 if in_memory else self.options.bind_workers)
        self.attempts = AttemptLog(self.options.attempt_log_pods, self.options.attempt_log_detailed)
        self.victims: list[str] = []
        self.given_up: set[str] = set()
        self._rng = random.Random(self.options.seed)
        self._runner = Algorithm(
            self._rng,
            self.options.percentage_of_nodes_to_score,
            groups=GroupCache() if self.options.reuse_node_results else None,
        )
        self._inbox: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = collections.deque()
        self._inbox_lock = threading.Condition()
        self.synced = threading.Event()
        self.metrics = metrics
        self._attempt_started: dict[str, float] = {}  # pod key -> perf_counter at its cycle's start
        self._pending_refreshed = -PENDING_REFRESH_SECONDS

    # ------------------------------------------------------------------ profiles

    @property
    def policies(self) -> CompiledPolicySet:
        """The compiled policy set in use."""
        return self._policies

    def profile_for(self, pod: PodViewLike) -> CompiledProfile | None:
        """The profile scheduling `pod` (by spec.schedulerName), or None when it is not ours."""
        profiles = self._policies.profiles
        profile = profiles.get(pod.scheduler_name or DEFAULT_SCHEDULER_NAME)
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

    def on_synced(self) -> None:
        """The back-end delivered its initial list."""
        self._post(lambda: self.synced.set())

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        with self._inbox_lock:
            self._inbox.append((fn, args))
            self._inbox_lock.notify_all()

    def apply_events(self) -> int:
        """Apply queued cluster events (scheduling thread only); returns how many."""
        applied = 0
        while True:
            with self._inbox_lock:
                if not self._inbox:
                    return applied
                fn, args = self._inbox.popleft()
            try:
                fn(*args)
            except PolicydError as exc:
                log.warning("event rejected error=%s", exc)
            applied += 1

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

    def _pod_added(self, obj: KubeObject) -> None:
        pod = self._pod_view(obj)
        if pod.node_name:
            self._assigned_pod_added(pod)
            return
        profile = self.profile_for(pod)
        if profile is not None and not self._in_cycle(pod.key):
            self._enqueue(pod, profile, EVENT_POD_ADD)

    def _assigned_pod_added(self, pod: PodViewLike) -> None:
        self.queue.delete(pod.key)
        self.cache.add_pod(pod)
        self._move(EVENT_POD_ASSIGNED_ADD)

    def _pod_updated(self, old: KubeObject, new: KubeObject) -> None:
        pod = self._updated_view(new)
        was_assigned = bool((old.get("spec") or {}).get("nodeName"))
        if pod.node_name:
            if not was_assigned:
                self._assigned_pod_added(pod)
            else:
                self.cache.update_pod(pod)
                self._move(EVENT_POD_ASSIGNED_UPDATE)
            return
        if pod.deleting:
            self._pending_pod_gone(pod.key)
            return
        if self._in_cycle(pod.key):
            return  # our own writes (nomination, conditions) on a pod we are placing
        if self.queue.get(pod.key) is not None:
            self.queue.update(pod, move=_spec_changed(old, new))
            return
        profile = self.profile_for(pod)
        if profile is not None and pod.key not in self.given_up:
            self._enqueue(pod, profile, EVENT_POD_UPDATE)

    def _updated_view(self, obj: KubeObject) -> PodViewLike:
        """The view of an updated pod, derived from the one we hold when only status/nodeName moved."""
        if self._pod_view_update is None:
            return self._pod_view(obj)
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        prev = self.cache.pod(key)
        if prev is None:
            queued = self.queue.get(key)
            prev = queued.pod if queued is not None else None
        return self._pod_view(obj) if prev is None else self._pod_view_update(prev, obj)

    def _pod_deleted(self, obj: KubeObject) -> None:
        key = f"{(obj.get('metadata') or {}).get('namespace', 'default')}/{obj['metadata']['name']}"
        cached = self.cache.pod(key)
        if cached is not None and not self.cache.is_assumed(key):
            self.cache.remove_pod(key)
            self._move(EVENT_POD_ASSIGNED_DELETE)
            return
        self._pending_pod_gone(key)

    def _pending_pod_gone(self, key: str) -> None:
        self.queue.delete(key)
        self._attempt_started.pop(key, None)
        for waiting in self.permits.reject_pod(key):
            self._reject_waiting(waiting, "pod of the group was deleted")
        self.cache.forget(key)

    def _in_cycle(self, key: str) -> bool:
        return self.cache.is_assumed(key) or self.permits.is_waiting(key)

    def _enqueue(self, pod: PodViewLike, profile: CompiledProfile, event: str) -> None:
        """A pending pod enters activeQ (counted once, when it was not queued yet)."""
        if self.metrics is None:
            self.queue.add(pod, profile)
            return
        queued_before = self.queue.get(pod.key) is not None
        self.queue.add(pod, profile)
        if not queued_before and self.queue.get(pod.key) is not None:
            self.metrics.incoming("active", event)

    def _move(self, kind: str) -> None:
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

    # ------------------------------------------------------------------ the cycle

    def schedule_one(self) -> bool:
        """Schedule the next pod of the active queue; False when there is none."""
        self.apply_events()
        queued = self.queue.pop()
        if queued is None:
            self._refresh_pending(force=True)
            return False
        pod = queued.pod
        if pod.deleting or pod.node_name or self.cache.pod(pod.key) is not None:
            self.queue.done(pod.key)
            return True
        profile = queued.profile
        started = time.perf_counter()
        self.cache.update_snapshot(self.snapshot)
        snapshot = self.snapshot
        attempt = Attempt(
            pod=pod.key,
            number=queued.attempts,
            profile=profile.scheduler_name,
            generation=self._policies.generation,
            time=self.clock.now(),
            filter_rules=tuple(profile.filters),
            score_rules=tuple(s.rule for s in profile.scores),
        )
        try:
            result = self._find_node(profile, pod, snapshot)
        except PolicydError as exc:
            attempt.result, attempt.message = "error", str(exc)
            self.attempts.add(attempt)
            log.warning("scheduling error pod=%s error=%s", pod.key, exc)
            self.queue.add_backoff(queued)
            self._observe_attempt(RESULT_ERROR, profile, started, incoming="backoff")
            return True
        self._observe_algorithm(profile, result, started)
        attempt.node_names = snapshot.names()
        attempt.failures = result.failures
        attempt.filter_results = result.all_results
        if self.options.explain:  # the attempt log holds the scores only where they are shown
            attempt.scores = result.scores
        if result.node is None:
            self._handle_unschedulable(queued, profile, snapshot, result, attempt)
            self._observe_attempt(RESULT_UNSCHEDULABLE, profile, started, queued=queued)
        else:
            attempt.chosen, attempt.result = result.node, "scheduled"
            self.attempts.add(attempt)
            if self.metrics is not None:
                self._attempt_started[pod.key] = started  # observed when the bind returns
            self._assume_and_permit(queued, profile, result.node)
        self._refresh_pending()
        return True

    # ------------------------------------------------------------------ metrics

    def _observe_algorithm(self, profile: CompiledProfile, result: ScheduleResult, started: float) -> None:
        """Algorithm duration and the per-profile, per-phase rule time of one attempt."""
        metrics = self.metrics
        if metrics is None:
            return
        metrics.observe_algorithm(time.perf_counter() - started)
        name = profile.scheduler_name
        if result.evaluated:
            status = "Success" if result.node is not None else "Unschedulable"
            metrics.observe_rule(name, "filters", "Filter", result.filter_seconds, status)
        if len(result.scores) or result.score_seconds:
            metrics.observe_rule(name, "scores", "Score", result.score_seconds)

    def _observe_attempt(
        self,
        result: str,
        profile: CompiledProfile,
        started: float | None,
        *,
        queued: QueuedPod | None = None,
        incoming: str | None = None,
    ) -> None:
        """One attempt ended with `result`; the pod went back to a queue (`incoming`) or not."""
        metrics = self.metrics
        if metrics is None:
            return
        if started is not None:
            metrics.observe_attempt(result, profile.scheduler_name, time.perf_counter() - started)
        if queued is not None:
            # add_unschedulable parks the pod (stamping unschedulable_since) unless a move request
            # came during its cycle, in which case it goes to backoffQ
            current = self.queue.get(queued.key)
            if current is not None:
                parked = current.unschedulable_since == current.timestamp
                incoming = "unschedulable" if parked else "backoff"
        if incoming is not None:
            metrics.incoming(incoming, EVENT_SCHEDULE_FAILURE)

    def _refresh_pending(self, force: bool = False) -> None:
        """Set the pending-pods gauges (rate-limited: counting walks the queue)."""
        if self.metrics is None:
            return
        now = time.perf_counter()
        if not force and now - self._pending_refreshed < PENDING_REFRESH_SECONDS:
            return
        self._pending_refreshed = now
        pending = self.queue.pending()
        self.metrics.set_pending(pending["active"], pending["backoff"], pending["unschedulable"])

    def _evaluator(self, profile: CompiledProfile, pod: PodViewLike, snapshot: Snapshot) -> PodEvaluator:
        return profile.evaluator(pod.cel, self._cluster_view(snapshot))

    def _find_node(self, profile: CompiledProfile, pod: PodViewLike, snapshot: Snapshot) -> ScheduleResult:
        cluster = self._cluster_view(snapshot)
        evaluator = profile.evaluator(pod.cel, cluster)
        nominated = self.queue.nominated_node(pod.key) or pod.cel.get("nominatedNodeName") or ""
        return self._runner.schedule_pod(
            profile,
            evaluator,
            pod,
            snapshot,
            cluster,
            self.queue.nominated_pods,
            self.queue.nominated_nodes,
            nominated_node=nominated,
            explain=self.options.explain,
        )

    def _handle_unschedulable(
        self,
        queued: QueuedPod,
        profile: CompiledProfile,
        snapshot: Snapshot,
        result: ScheduleResult,
        attempt: Attempt,
    ) -> None:
        pod = queued.pod
        if len(snapshot) == 0:
            message = NO_NODES_MESSAGE
        else:
            outcome = find_preemption(
                profile,
                pod,
                snapshot,
                result.failures,
                lambda snap: self._evaluator(profile, pod, snap),
                self.queue.nominated_pods,
                self.budgets.all(),
                self.cache.all_pods(),
                rng=self._rng,
            )
            if self.metrics is not None:
                if outcome.candidate is not None:
                    self.metrics.observe_preemption(len(outcome.candidate.victims))
                else:
                    self.metrics.preemption_attempts.inc()
            if outcome.candidate is not None:
                self._prepare_candidate(pod, outcome.candidate)
                attempt.result = "nominated"
                attempt.nominated_node = outcome.candidate.node
                attempt.victims = [v.key for v in outcome.candidate.victims]
            message = fit_error_message(
                len(snapshot), reasons_by_node(result.failures), post_filter=outcome.message
            )
        attempt.message = message
        self.attempts.add(attempt)
        log.info("unschedulable pod=%s attempt=%d message=%r", pod.key, queued.attempts, message)
        self.backend.record_event(pod, "Warning", "FailedScheduling", message)
        self.backend.patch_pod_scheduled(pod, unschedulable_condition(message))
        self._requeue_unschedulable(queued, {f.rule for f in result.failures.values()})

    def _requeue_unschedulable(self, queued: QueuedPod, rules: set[Any]) -> None:
        limit = self.options.max_attempts
        if limit and queued.attempts >= limit:
            self.given_up.add(queued.key)
            self.queue.done(queued.key)
            return
        self.queue.add_unschedulable(queued, rules)

    def _prepare_candidate(self, pod: PodViewLike, candidate: Candidate) -> None:
        """Evict the victims, clear weaker nominations on the node, nominate the preemptor."""
        for victim in candidate.victims:
            self.backend.record_event(
                victim, "Normal", "Preempted", preempted_message(pod.uid, candidate.node)
            )
            self.backend.delete_pod(victim, None)
            self.victims.append(victim.key)
        for other in self.queue.nominated_pods(candidate.node):
            if other.key != pod.key and other.priority < pod.priority:
                self.queue.clear_nomination(other.key)
                self.backend.set_nominated_node(other, None)
        self.queue.nominate(pod, candidate.node)
        self.backend.set_nominated_node(pod, candidate.node)
        log.info("preempting pod=%s node=%s victims=%d", pod.key, candidate.node, len(candidate.victims))

    def _assume_and_permit(self, queued: QueuedPod, profile: CompiledProfile, node: str) -> None:
        assumed = queued.pod.with_node(node)  # type: ignore[attr-defined]
        self.cache.assume(assumed, node)
        self.queue.clear_nomination(queued.key)
        decision = self.permits.permit(profile, assumed.cel, queued.key, node, (queued, assumed))
        if decision.status == "wait":
            log.info("permit waiting pod=%s node=%s", queued.key, node)
            return
        for waiting in decision.released:
            released_queued, released_pod = waiting.payload
            self._bind(released_queued, released_pod, waiting.node)
        self._bind(queued, assumed, node)

    def _bind(self, queued: QueuedPod, assumed: PodViewLike, node: str) -> None:
        self.binder.submit(assumed, node, lambda pod, n, err: self._bind_done(queued, pod, n, err))

    def _bind_done(self, queued: QueuedPod, pod: PodViewLike, node: str, error: Exception | None) -> None:
        """Called on a binder worker when the bind returned."""
        if self.metrics is not None:
            self._observe_bind(queued, pod, error)
        if error is None:
            self.cache.finish_binding(pod.key)
            self.queue.done(pod.key)
            self.backend.record_event(pod, "Normal", "Scheduled", scheduled_message(pod.key, node))
            return
        self.cache.forget(pod.key)
        self.backend.record_event(pod, "Warning", "FailedScheduling", f"Binding rejected: {error}")
        if isinstance(error, BindError) and not error.retry:
            self.queue.done(pod.key)
        else:
            self.queue.add_backoff(queued)

    def _observe_bind(self, queued: QueuedPod, pod: PodViewLike, error: Exception | None) -> None:
        assert self.metrics is not None
        started = self._attempt_started.pop(pod.key, None)
        if error is None:
            self.metrics.observe_bind("bound")
            self._observe_attempt(RESULT_SCHEDULED, queued.profile, started)
            return
        if isinstance(error, BindError):
            self.metrics.observe_bind("conflict" if error.retry else "gone")
        else:
            self.metrics.observe_bind("error")
        retry = not isinstance(error, BindError) or error.retry
        self._observe_attempt(RESULT_ERROR, queued.profile, started, incoming="backoff" if retry else None)

    def _reject_waiting(self, waiting: WaitingPod, why: str) -> None:
        queued, pod = waiting.payload
        self.cache.forget(waiting.key)
        message = f"{why} at permit {waiting.rule.name}"
        self.attempts.add(
            Attempt(
                pod=waiting.key,
                number=queued.attempts,
                profile=queued.profile.scheduler_name,
                generation=self._policies.generation,
                time=self.clock.now(),
                result="rejected",
                message=message,
            )
        )
        if not pod.deleting:
            self.backend.record_event(pod, "Warning", "FailedScheduling", message)
        self._requeue_unschedulable(queued, {waiting.rule})
        self._observe_attempt(
            RESULT_UNSCHEDULABLE,
            queued.profile,
            self._attempt_started.pop(waiting.key, None),
            queued=queued,
        )

    # ------------------------------------------------------------------ housekeeping and loops

    def housekeeping(self) -> None:
        """Periodic work: queue flushes, assumed-pod expiry, permit timeouts."""
        self.queue.flush()
        self.cache.cleanup_expired()
        for waiting in self.permits.expire():
            self._reject_waiting(waiting, f"rejected due to timeout after waiting {waiting.timeout:g}s")

    def run(self, stop: threading.Event, idle_wait: float = 0.1) -> None:
        """The scheduling loop of `policyd run`, until `stop` is set."""
        while not stop.is_set():
            self.housekeeping()
            if not self.schedule_one():
                with self._inbox_lock:
                    if not self._inbox:
                        self._inbox_lock.wait(idle_wait)
        self.queue.close()
        self.binder.shutdown()

    def run_until_settled(
        self, max_cycles: int = 1_000_000, progress: Callable[[int], None] | None = None
    ) -> int:
        """Schedule until nothing is left to try, skipping waits on the fake clock; returns cycles run."""
        if not isinstance(self.clock, FakeClock):
            raise TypeError("run_until_settled needs a FakeClock")
        cycles = 0
        while cycles < max_cycles:
            self.apply_events()
            for waiting in self.permits.expire():
                self._reject_waiting(waiting, f"rejected due to timeout after waiting {waiting.timeout:g}s")
            self.queue.flush_backoff()
            if self.schedule_one():
                cycles += 1
                self.binder.wait_idle()  # determinism: bind results land before the next cycle
                if progress is not None:
                    progress(cycles)
                continue
            self.binder.wait_idle()
            if self.apply_events():
                continue
            wake = [
                t for t in (self.queue.next_backoff_expiry(), self.permits.next_deadline()) if t is not None
            ]
            if not wake:
                break
            self.clock.advance_to(min(wake))
        return cycles

    def unschedulable(self) -> list[str]:
        """Keys of pods parked as unschedulable or given up."""
        parked = {qp.key for qp in self.queue.unschedulable_pods()}
        return sorted(parked | self.given_up)

    def nominated_pods_on(self, node: str) -> Sequence[PodViewLike]:
        """Pods nominated to `node` (for explanations)."""
        return self.queue.nominated_pods(node)

    def describe(self) -> Mapping[str, Any]:
        """Queue sizes and in-flight work (debug, metrics)."""
        return {
            **self.queue.pending(),
            "binding": self.binder.in_flight(),
            "waiting": len(self.permits.waiting()),
            "nodes": self.cache.node_count(),
        }
