"""The Scheduler: wiring of queue, cache, algorithm, preemption, permit and binder.

Its halves live beside it in kube-scheduler's shape: `eventhandlers` (cluster objects from the
back-end into the cache and the queue) and `schedule_one` (one scheduling cycle, the story of one
pod). This module builds the parts and runs the loops: `run` is the loop of `policyd run`;
`run_until_settled` drives a fake clock for `policyd simulate` and `policyd test`.
"""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from policyd.framework import CompiledPolicySet, RuleRef
from policyd.scheduler import collector
from policyd.scheduler.algorithm.nominated import NominatedRows
from policyd.scheduler.algorithm.reuse import GroupCache
from policyd.scheduler.algorithm.schedule import Algorithm
from policyd.scheduler.attempts import AttemptLog
from policyd.scheduler.backend import Arrivals, ClusterBackend, KubeObject
from policyd.scheduler.binder import Binder
from policyd.scheduler.cache import Cache
from policyd.scheduler.clock import Clock, FakeClock, RealClock
from policyd.scheduler.cluster import objects
from policyd.scheduler.cluster.functions import cluster_functions_factory
from policyd.scheduler.cluster.volume_store import PodVolumeBindings, VolumeStore
from policyd.scheduler.cluster.workloads import WorkloadIndex
from policyd.scheduler.eventhandlers import PodInfoFactory
from policyd.scheduler.metrics import SchedulerMetrics
from policyd.scheduler.options import SchedulerOptions
from policyd.scheduler.pdb import BudgetIndex
from policyd.scheduler.permit import Permits
from policyd.scheduler.preemption_reuse import DryRunCache
from policyd.scheduler.queue import SchedulingQueue
from policyd.scheduler.schedule_one import PENDING_REFRESH_SECONDS, ClusterFunctionsFactory, SchedulingCycle
from policyd.scheduler.snapshot import PodInfoLike, Snapshot


class Scheduler(SchedulingCycle):
    """Schedules the pending pods a back-end delivers, with the profiles of a compiled policy set."""

    def __init__(
        self,
        policies: CompiledPolicySet,
        backend: ClusterBackend,
        *,
        clock: Clock | None = None,
        options: SchedulerOptions | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        collector.tune()
        self.options = options or SchedulerOptions()
        self.clock: Clock = clock or RealClock()
        self.backend = backend
        self._policies = policies
        self._pod_info: PodInfoFactory = objects.pod_info
        # an updated pod's view is derived from the one held when only status or nodeName moved
        self._pod_info_update: Callable[[Any, KubeObject], PodInfoLike] = objects.pod_info_update
        # the Services and controllers selecting pods (system default spread constraints)
        self.workloads = WorkloadIndex()
        # PVs, PVCs, StorageClasses, CSINodes, CSIDrivers, with the claims of assumed pods
        self.volumes = VolumeStore()
        self._volume_bindings: dict[str, PodVolumeBindings] = {}  # pod key -> what its PreBind does
        # one ClusterIndex per scheduler, kept across cycles
        self._cluster_functions: ClusterFunctionsFactory = cluster_functions_factory(
            workloads=self.workloads, volume_store=self.volumes
        )
        self.queue = SchedulingQueue(self.clock, self.options.queue)
        self.cache = Cache(objects.node_info, self.clock, ttl=self.options.assumed_ttl)
        self.snapshot = Snapshot()
        self.budgets = BudgetIndex()
        self.permits = Permits(self.clock)
        # a back-end that binds in memory gains nothing from bind threads but GIL hand-offs
        self.binder = Binder(backend, 0 if backend.binds_in_memory else self.options.bind_workers)
        self.attempts = AttemptLog(self.options.attempt_log_pods, self.options.attempt_log_detailed)
        self.victims: list[str] = []
        self.given_up: set[str] = set()
        self._rng = random.Random(self.options.seed)
        self.algorithm = Algorithm(
            self._rng,
            self.options.percentage_of_nodes_to_score,
            groups=GroupCache() if self.options.reuse_node_results else None,
        )
        self.preemption_cache = DryRunCache() if self.options.reuse_node_results else None
        self.nominated_rows = NominatedRows()  # the queue's nominations per snapshot row
        self._inbox: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = collections.deque()
        self._inbox_lock = threading.Condition()
        self.synced = threading.Event()
        self.metrics = metrics
        if metrics is not None:
            metrics.watch_rule_errors(self.rule_errors)
        self._attempt_started: dict[str, float] = {}  # pod key -> perf_counter at its cycle's start
        self._moves_pending: dict[str, None] | None = None
        self._pending_refreshed = -PENDING_REFRESH_SECONDS
        self._parked_counted = -1

    def rule_errors(self) -> list[tuple[str, str, str, int]]:
        """(policy, rule, extension point, count) of the rules of the policy set in force whose
        evaluations failed (`policyd_rule_errors_total`); a policy several profiles build on once."""
        policies: dict[int, list[tuple[RuleRef, str, int]]] = {}
        for profile in self._policies.profiles.values():
            policies.update(profile.rule_errors())
        return [
            (ref.policy, ref.name, point, count) for rules in policies.values() for ref, point, count in rules
        ]

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
        self,
        max_cycles: int = 1_000_000,
        progress: Callable[[int], None] | None = None,
        arrivals: Arrivals | None = None,
    ) -> int:
        """Schedule until nothing is left to try, skipping waits on the fake clock; returns cycles run.

        With `arrivals`, pods still to be created count as something to wait for: the clock moves
        to the next creation when nothing else is due before it.
        """
        if not isinstance(self.clock, FakeClock):
            raise TypeError("run_until_settled needs a FakeClock")
        cycles = 0
        while cycles < max_cycles:
            if arrivals is not None:
                arrivals.deliver_arrivals(self.clock.now())
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
            next_arrival = arrivals.next_arrival() if arrivals is not None else None
            wake = [
                t
                for t in (self.queue.next_backoff_expiry(), self.permits.next_deadline(), next_arrival)
                if t is not None
            ]
            if not wake:
                break
            self.clock.advance_to(min(wake))
        self._refresh_pending(final=True)
        return cycles

    def unschedulable(self) -> list[str]:
        """Keys of pods parked as unschedulable or given up."""
        parked = {qp.key for qp in self.queue.unschedulable_pods()}
        return sorted(parked | self.given_up)

    def nominated_pods_on(self, node: str) -> Sequence[PodInfoLike]:
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
