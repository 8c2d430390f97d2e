"""One scheduling cycle: the story of one pod (kube-scheduler's schedule_one.go).

`schedule_one` pops the next pod, skips it when it is gone or bound, takes the snapshot, places it
with the algorithm (policyd.scheduler.algorithm), and then either runs PostFilter (preemption) and
parks it, or assumes it, runs permit and binds it asynchronously. The bind's result comes back on a
binder worker (`_bind_done`).

Metrics (optional `SchedulerMetrics`): durations always come from `time.perf_counter`, never from the
scheduler's clock (a FakeClock does not move during a cycle). A compiled profile evaluates all its
rules in one generated function per node, so rule time is measured per profile and phase, once per
attempt (one perf_counter pair around filtering, one around scoring): `plugin_execution_duration`
carries `plugin="<profile>/filters"` (extension point Filter) and `"<profile>/scores"` (Score).
Pending-pod gauges are refreshed after a cycle at most every `PENDING_REFRESH_SECONDS`, when the
active queue runs empty at most every `IDLE_REFRESH_SECONDS` (the idle loop comes back within
`idle_wait`), and once more when `run_until_settled` ends; counting the parked pods per rejecting
rule walks them, so it is redone only when the parked set changed.
"""

from __future__ import annotations

import collections
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from policyd.errors import PolicydError
from policyd.framework import EVENT_POD_ASSIGNED_DELETE, ClusterFunctions, CompiledProfile, PodEvaluator
from policyd.scheduler.algorithm.feasibility import nominated_evaluator
from policyd.scheduler.algorithm.nominated import NominatedRows
from policyd.scheduler.algorithm.schedule import Algorithm, ScheduleResult
from policyd.scheduler.attempts import (
    Attempt,
    AttemptLog,
    fit_error_message,
    preempted_message,
    scheduled_message,
    unschedulable_condition,
)
from policyd.scheduler.backend import BindError, ClusterBackend
from policyd.scheduler.binder import Binder
from policyd.scheduler.cluster.volumes import pod_volume_bindings
from policyd.scheduler.eventhandlers import EventHandlers
from policyd.scheduler.metrics import RESULT_ERROR, RESULT_SCHEDULED, RESULT_UNSCHEDULABLE
from policyd.scheduler.permit import WaitingPod
from policyd.scheduler.preemption import Candidate, find_preemption, removal_order_may_matter
from policyd.scheduler.preemption_reuse import DryRunCache, SharedCycle
from policyd.scheduler.queue import QueuedPod
from policyd.scheduler.snapshot import PodInfoLike, Snapshot

log = logging.getLogger(__name__)

NO_NODES_MESSAGE = "no nodes available to schedule pods"
PENDING_REFRESH_SECONDS = 1.0
IDLE_REFRESH_SECONDS = 0.1
# kube-scheduler's queue_incoming_pods_total event label for a failed attempt
EVENT_SCHEDULE_FAILURE = "ScheduleAttemptFailure"

ClusterFunctionsFactory = Callable[[Snapshot], ClusterFunctions]


class SchedulingCycle(EventHandlers):
    """The scheduling-cycle half of the Scheduler: one pod from pop to bind."""

    # set by Scheduler.__init__
    backend: ClusterBackend
    snapshot: Snapshot
    binder: Binder
    attempts: AttemptLog
    victims: list[str]
    _rng: random.Random
    algorithm: Algorithm
    _cluster_functions: ClusterFunctionsFactory
    preemption_cache: DryRunCache | None
    nominated_rows: NominatedRows
    _pending_refreshed: float
    _parked_counted: int

    # ------------------------------------------------------------------ the cycle

    def schedule_one(self) -> bool:
        """Schedule the next pod of the active queue; False when there is none."""
        self.apply_events()
        queued = self.queue.pop()
        if queued is None:
            self._refresh_pending(idle=True)
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
        attempt.applied = result.applied
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
            metrics.observe_extension_point("Filter", status, name, result.filter_seconds)
        if len(result.scores) or result.score_seconds:
            metrics.observe_rule(name, "scores", "Score", result.score_seconds)
            metrics.observe_extension_point("Score", "Success", name, result.score_seconds)

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

    def _refresh_pending(self, idle: bool = False, final: bool = False) -> None:
        """Set the pending-pods gauges: after a cycle at most every `PENDING_REFRESH_SECONDS`, when the
        active queue ran empty (`idle`) at most every `IDLE_REFRESH_SECONDS`, and at once when `final`.

        The counts per sub-queue are the queue's own; the parked pods per rejecting rule are counted
        by walking them, only when the parked set changed since the last walk."""
        if self.metrics is None:
            return
        now = time.perf_counter()
        interval = 0.0 if final else IDLE_REFRESH_SECONDS if idle else PENDING_REFRESH_SECONDS
        if now - self._pending_refreshed < interval:
            return
        self._pending_refreshed = now
        changes = self.queue.parked_changes()
        if changes != self._parked_counted:
            self._parked_counted = changes
            counts: collections.Counter[tuple[str, str]] = collections.Counter()
            for parked in self.queue.unschedulable_pods():
                for rule in parked.rejected_by:
                    counts[(f"{rule.policy}/{rule.name}", parked.profile.scheduler_name)] += 1
            self.metrics.set_unschedulable(counts)
        pending = self.queue.pending()
        self.metrics.set_pending(
            pending["active"], pending["backoff"], pending["unschedulable"], pending["gated"]
        )

    def _evaluator(self, profile: CompiledProfile, pod: PodInfoLike, snapshot: Snapshot) -> PodEvaluator:
        return profile.evaluator(pod.cel, self._cluster_functions(snapshot))

    def _find_node(self, profile: CompiledProfile, pod: PodInfoLike, snapshot: Snapshot) -> ScheduleResult:
        cluster = self._cluster_functions(snapshot)
        evaluator = profile.evaluator(pod.cel, cluster)
        return self.algorithm.schedule_pod(
            profile,
            evaluator,
            pod,
            snapshot,
            cluster,
            self.queue.nominated_pods,
            self.nominated_rows.sync(snapshot, self.queue),
            nominated_node=self._nomination(pod),
            explain=self.options.explain,
        )

    def _nomination(self, pod: PodInfoLike) -> str:
        """The node `pod` is nominated to: this scheduler's own record first (its status write may not
        have landed yet), else the pod's `status.nominatedNodeName`; "" when none."""
        return self.queue.nominated_node(pod.key) or pod.cel.get("nominatedNodeName") or ""

    def _handle_unschedulable(
        self,
        queued: QueuedPod,
        profile: CompiledProfile,
        snapshot: Snapshot,
        result: ScheduleResult,
        attempt: Attempt,
    ) -> None:
        pod = queued.pod
        failures = result.failure_counts or []  # counted by the filter phase
        if len(snapshot) == 0:
            message = NO_NODES_MESSAGE
        else:
            cluster = self._cluster_functions(snapshot)
            cache = self.preemption_cache
            judges = (  # without reuse every what-if takes the exact path
                None
                if cache is None
                else SharedCycle(
                    profile.evaluator(pod.cel, cluster),
                    lambda: cluster.reads_pods(pod.cel),
                    nominated_evaluator(profile, pod, cluster),
                    cache,
                    self.nominated_rows.sync(snapshot, self.queue),
                )
            )
            outcome = find_preemption(
                profile,
                pod,
                snapshot,
                result.failures,
                lambda snap: self._evaluator(profile, pod, snap),
                self.queue.nominated_pods,
                self.budgets.all(),
                self.cache.all_pods,
                rng=self._rng,
                nominated_for=lambda snap: nominated_evaluator(profile, pod, self._cluster_functions(snap)),
                judges=judges,
                distinct=[f for f, _ in failures],
                nominated_node=self._nomination(pod),
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
                len(snapshot), [(f.reasons, nodes) for f, nodes in failures], post_filter=outcome.message
            )
        attempt.message = message
        self.attempts.add(attempt)
        log.info("unschedulable pod=%s attempt=%d message=%r", pod.key, queued.attempts, message)
        self.backend.record_event(pod, "Warning", "FailedScheduling", message)
        condition = unschedulable_condition(message)
        nominated = attempt.nominated_node or ""
        if status_changes(pod, condition, nominated):
            self.backend.patch_pod_scheduled(pod, condition, nominated)
        self._requeue_unschedulable(queued, {f.rule for f, _ in failures})

    def _requeue_unschedulable(self, queued: QueuedPod, rules: set[Any]) -> None:
        limit = self.options.max_attempts
        if limit and queued.attempts >= limit:
            self.given_up.add(queued.key)
            self.queue.done(queued.key)
            return
        self.queue.add_unschedulable(queued, rules)

    def _prepare_candidate(self, pod: PodInfoLike, candidate: Candidate) -> None:
        """Evict the victims, clear weaker nominations on the node, nominate the preemptor."""
        for victim in candidate.victims:
            self.backend.record_event(
                victim, "Normal", "Preempted", preempted_message(pod.uid, candidate.node)
            )
            self.victims.append(victim.key)
        node = self.snapshot.node(candidate.node)
        on_node = list(node.pods) if node is not None else []
        self.backend.delete_victims(candidate.victims, removal_order_may_matter(on_node, candidate.victims))
        for other in self.queue.nominated_pods(candidate.node):
            if other.key != pod.key and other.priority < pod.priority:
                self.queue.clear_nomination(other.key)
                self.backend.set_nominated_node(other, None)
        self.queue.nominate(pod, candidate.node)  # written with the PodScheduled condition
        self.queue.await_victims(pod.key, [victim.key for victim in candidate.victims])
        log.info("preempting pod=%s node=%s victims=%d", pod.key, candidate.node, len(candidate.victims))

    def _assume_and_permit(self, queued: QueuedPod, profile: CompiledProfile, node: str) -> None:
        assumed = queued.pod.with_node(node)  # type: ignore[attr-defined]
        self.cache.assume(assumed, node)
        self._assume_volumes(queued.key, assumed, node)
        self.queue.clear_nomination(queued.key)
        decision = self.permits.permit(profile, assumed.cel, queued.key, node, (queued, assumed))
        if decision.status == "wait":
            log.info("permit waiting pod=%s node=%s", queued.key, node)
            return
        for waiting in decision.released:
            released_queued, released_pod = waiting.payload
            self._observe_permit_wait(waiting, "Success")
            self._bind(released_queued, released_pod, waiting.node)
        self._bind(queued, assumed, node)

    def _assume_volumes(self, key: str, pod: PodInfoLike, node: str) -> None:
        """VolumeBinding Reserve: decide the pod's claim bindings on `node` and assume them."""
        info = self.snapshot.node(node)
        bindings = None if info is None else pod_volume_bindings(pod.cel, self.volumes, info.cel)
        if bindings is None or bindings.empty:
            return
        self.volumes.assume(key, bindings)
        self._volume_bindings[key] = bindings

    def _bind(self, queued: QueuedPod, assumed: PodInfoLike, node: str) -> None:
        volumes = self._volume_bindings.get(queued.key)
        self.binder.submit(assumed, node, lambda pod, n, err: self._bind_done(queued, pod, n, err), volumes)

    def _bind_done(self, queued: QueuedPod, pod: PodInfoLike, node: str, error: Exception | None) -> None:
        """Called on a binder worker when the bind returned."""
        if self.metrics is not None:
            self._observe_bind(queued, pod, error)
        if error is None:
            self._post(self._volumes_bound, pod.key)
            self.cache.finish_binding(pod.key)
            self.queue.done(pod.key)
            self.backend.record_event(pod, "Normal", "Scheduled", scheduled_message(pod.key, node))
            return
        self.cache.forget(pod.key)
        self._post(self._forget_volumes, pod.key)  # the store belongs to the scheduling thread
        self.backend.record_event(pod, "Warning", "FailedScheduling", f"Binding rejected: {error}")
        if isinstance(error, BindError) and not error.retry:
            self.queue.done(pod.key)
        else:
            self.queue.add_backoff(queued)

    def _volumes_bound(self, key: str) -> None:
        """PreBind and bind succeeded: the assumed claims stay until the informer replaces them."""
        if self._volume_bindings.pop(key, None) is not None:
            self.volumes.done(key)

    def _observe_bind(self, queued: QueuedPod, pod: PodInfoLike, error: Exception | None) -> None:
        assert self.metrics is not None
        started = self._attempt_started.pop(pod.key, None)
        if error is None:
            self.metrics.observe_bind("bound")
            self._observe_attempt(RESULT_SCHEDULED, queued.profile, started)
            self.metrics.observe_scheduled(queued.attempts, self.clock.now() - queued.initial_timestamp)
            return
        if isinstance(error, BindError):
            self.metrics.observe_bind("conflict" if error.retry else "gone")
        else:
            self.metrics.observe_bind("error")
        retry = not isinstance(error, BindError) or error.retry
        self._observe_attempt(RESULT_ERROR, queued.profile, started, incoming="backoff" if retry else None)

    def _observe_permit_wait(self, waiting: WaitingPod, result: str) -> None:
        """How long a pod waited at permit (on the scheduler's clock) before `result`."""
        if self.metrics is not None:
            waited = self.clock.now() - (waiting.deadline - waiting.timeout)
            self.metrics.observe_permit_wait(result, max(waited, 0.0))

    def _reject_waiting(self, waiting: WaitingPod, why: str) -> None:
        """Unreserve a pod rejected at permit and requeue it; the freed room wakes parked pods.

        As kube-scheduler's handleBindingCycleError: forgetting an assumed pod is an AssignedPodDelete
        event (its requests had counted on the node), so pods parked behind the gang move at once, and
        the rejected pod itself, whose cycle saw that move, goes to backoffQ rather than waiting for
        the periodic flush of parked pods.
        """
        queued, pod = waiting.payload
        self._observe_permit_wait(waiting, "Unschedulable")
        self.cache.forget(waiting.key)
        self._forget_volumes(waiting.key)
        self._move_now(EVENT_POD_ASSIGNED_DELETE)  # before the rejected pod is parked, even within a batch
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


def status_changes(pod: PodInfoLike, condition: Mapping[str, str], nominated_node: str) -> bool:
    """Whether writing `condition` (and `nominated_node`, when given) changes the pod's status as last
    seen: kube-scheduler's updatePod writes nothing when the PodScheduled condition has the same
    status, reason and message and the nominated node is unset or unchanged."""
    status = pod.cel.get("status") or {}
    if nominated_node and status.get("nominatedNodeName", "") != nominated_node:
        return True
    for old in status.get("conditions") or []:
        if old.get("type") == condition["type"]:
            return any(old.get(k, "") != condition[k] for k in ("status", "reason", "message"))
    return True
