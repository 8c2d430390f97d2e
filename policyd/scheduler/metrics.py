"""Prometheus metrics: kube-scheduler's under its own names, policyd's own under the `policyd_` prefix.

The metrics kube-scheduler also exports (pkg/scheduler/metrics/metrics.go) carry its names, labels
and bucket layouts (`scheduler_schedule_attempts_total{result,profile}`, `scheduler_pending_pods{queue}`,
...), so kube-scheduler dashboards and alerts work unchanged; what only policyd has (rule evaluations,
policy reloads, binds) is `policyd_...`. Every metric lives in the `CollectorRegistry` handed to `SchedulerMetrics` (a fresh one by default),
never in prometheus_client's global registry, so tests and several schedulers in one process each
get their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

PREFIX = "policyd_"
KUBE = "scheduler_"  # kube-scheduler's subsystem


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """component-base's ExponentialBuckets: `count` upper bounds start * factor^i."""
    return tuple(start * factor**i for i in range(count))


# the bucket layouts of kube-scheduler's histograms
DURATION_BUCKETS = exponential_buckets(0.001, 2, 15)  # attempt, algorithm, permit wait
SLI_BUCKETS = exponential_buckets(0.01, 2, 20)  # pod scheduling SLI (10 ms .. ~88 min)
RULE_BUCKETS = exponential_buckets(0.00001, 1.5, 20)  # plugin execution
EXTENSION_POINT_BUCKETS = exponential_buckets(0.0001, 2, 12)  # framework extension point
VICTIM_BUCKETS = exponential_buckets(1, 2, 7)
ATTEMPTS_BUCKETS = exponential_buckets(1, 2, 5)

RESULT_SCHEDULED = "scheduled"
RESULT_UNSCHEDULABLE = "unschedulable"
RESULT_ERROR = "error"

# kube-scheduler's getAttemptsLabel: 15 attempts and more share the label "15+"
MAX_ATTEMPTS_LABEL = 15

QUEUES = ("active", "backoff", "unschedulable", "gated")


EventStats = Callable[[], tuple[int, int, int, int]]  # written, rate-limited, queue full, queued


class _EventCollector:
    """The Event recorder's counters, read when scraped (`EventRecorder.stats`)."""

    def __init__(self, stats: EventStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        written, limited, overflowed, queued = self._stats()
        yield CounterMetricFamily(
            PREFIX + "event_writes", "Event creates and updates the API server accepted.", value=written
        )
        dropped = CounterMetricFamily(
            PREFIX + "events_dropped",
            "Events not written: rate_limit (client-go's per-object spam filter) or queue_full.",
            labels=["reason"],
        )
        dropped.add_metric(["rate_limit"], limited)
        dropped.add_metric(["queue_full"], overflowed)
        yield dropped
        yield GaugeMetricFamily(
            PREFIX + "events_queued", "Events recorded and not written yet.", value=queued
        )


# (policy, rule, extension point, failed evaluations), read at each scrape
RuleErrorCounts = Callable[[], Iterable[tuple[str, str, str, int]]]


class _RuleErrorCollector:
    """`policyd_rule_errors_total`: the failed evaluations of each rule of the policy set in force
    (`CompiledProfile.rule_errors`), read when scraped from the scheduler's current source."""

    def __init__(self) -> None:
        self.source: RuleErrorCounts = lambda: ()

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            PREFIX + "rule_errors",
            "Rule evaluations that failed (a filter then rejects the node, a score is 0), by policy, "
            "rule and extension point, since the policy's text was compiled.",
            labels=["policy", "rule", "extension_point"],
        )
        for policy, rule, point, count in self.source():
            family.add_metric([policy, rule, point], count)
        yield family


class SchedulerMetrics:
    """The scheduler's metrics, registered in one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.schedule_attempts = Counter(
            KUBE + "schedule_attempts_total",
            "Number of attempts to schedule pods, by the result and profile.",
            ["result", "profile"],
            registry=r,
        )
        self.scheduling_attempt_duration = Histogram(
            KUBE + "scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding).",
            ["result", "profile"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.scheduling_algorithm_duration = Histogram(
            KUBE + "scheduling_algorithm_duration_seconds",
            "Scheduling algorithm latency in seconds.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.pending_pods = Gauge(
            KUBE + "pending_pods",
            "Number of pending pods, by the queue type.",
            ["queue"],
            registry=r,
        )
        self.queue_incoming_pods = Counter(
            KUBE + "queue_incoming_pods_total",
            "Number of pods added to scheduling queues by event and queue type.",
            ["queue", "event"],
            registry=r,
        )
        self.preemption_attempts = Counter(
            KUBE + "preemption_attempts_total",
            "Total preemption attempts in the cluster till now.",
            registry=r,
        )
        self.preemption_victims = Histogram(
            KUBE + "preemption_victims",
            "Number of selected preemption victims.",
            buckets=VICTIM_BUCKETS,
            registry=r,
        )
        self.pod_scheduling_sli_duration = Histogram(
            KUBE + "pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue "
            "and might involve multiple scheduling attempts.",
            ["attempts"],
            buckets=SLI_BUCKETS,
            registry=r,
        )
        self.pod_scheduling_attempts = Histogram(
            KUBE + "pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            buckets=ATTEMPTS_BUCKETS,
            registry=r,
        )
        self.unschedulable_pods = Gauge(
            KUBE + "unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge "
            "for all plugins that caused it to not schedule and so this metric have meaning only when "
            "broken down by plugin.",
            ["plugin", "profile"],
            registry=r,
        )
        self.framework_extension_point_duration = Histogram(
            KUBE + "framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"],
            buckets=EXTENSION_POINT_BUCKETS,
            registry=r,
        )
        self.permit_wait_duration = Histogram(
            KUBE + "permit_wait_duration_seconds",
            "Duration of waiting on permit.",
            ["result"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.plugin_execution_duration = Histogram(
            KUBE + "plugin_execution_duration_seconds",
            "Duration for running a policy rule at a specific extension point.",
            ["plugin", "extension_point", "status"],
            buckets=RULE_BUCKETS,
            registry=r,
        )
        self.rule_evaluations = Counter(
            PREFIX + "rule_evaluations_total",
            "Number of rule evaluations, by policy, rule and extension point.",
            ["policy", "rule", "extension_point"],
            registry=r,
        )
        self.rule_evaluation_duration = Counter(
            PREFIX + "rule_evaluation_seconds_total",
            "Total time spent evaluating each rule, by policy, rule and extension point.",
            ["policy", "rule", "extension_point"],
            registry=r,
        )
        self.policy_reload = Counter(
            PREFIX + "policy_reload_total",
            "Number of policy (re)loads, by result.",
            ["result"],
            registry=r,
        )
        self.policy_last_reload_success = Gauge(
            PREFIX + "policy_last_reload_success",
            "1 when the last policy reload succeeded, 0 when it failed.",
            registry=r,
        )
        self.policy_generation = Gauge(
            PREFIX + "policy_generation",
            "Generation number of the compiled policy set in use.",
            registry=r,
        )
        self.binds = Counter(
            PREFIX + "binding_total",
            "Number of bind requests, by result (bound, conflict, gone, error).",
            ["result"],
            registry=r,
        )
        self._unschedulable_labels: set[tuple[str, str]] = set()
        for queue in QUEUES:
            self.pending_pods.labels(queue=queue).set(0)
        self._rule_errors = _RuleErrorCollector()
        r.register(self._rule_errors)  # type: ignore[arg-type]

    def watch_events(self, stats: EventStats) -> None:
        """Export an Event recorder's counters (`policyd_event_writes_total`,
        `policyd_events_dropped_total{reason}`, `policyd_events_queued`), read at each scrape."""
        self.registry.register(_EventCollector(stats))  # type: ignore[arg-type]

    def watch_rule_errors(self, source: RuleErrorCounts) -> None:
        """Export `source`'s failed rule evaluations as `policyd_rule_errors_total` (the last
        scheduler to call this is the one read)."""
        self._rule_errors.source = source

    # ---- recording helpers (what the runtime calls) ------------------------------------------------

    def _child(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)` (label values in the metric's label order), looked up once: the
        client's `labels` validates and locks on every call, a dozen times per scheduled pod."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def observe_attempt(self, result: str, profile: str, seconds: float) -> None:
        """One scheduling attempt finished with `result` (scheduled / unschedulable / error)."""
        self._child(self.schedule_attempts, result, profile).inc()
        self._child(self.scheduling_attempt_duration, result, profile).observe(seconds)

    def observe_scheduled(self, attempts: int, seconds_since_queued: float) -> None:
        """A pod was bound after `attempts` attempts, `seconds_since_queued` after it entered the queue."""
        label = str(attempts) if attempts < MAX_ATTEMPTS_LABEL else f"{MAX_ATTEMPTS_LABEL}+"
        self._child(self.pod_scheduling_sli_duration, label).observe(seconds_since_queued)
        self.pod_scheduling_attempts.observe(attempts)

    def set_unschedulable(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Parked pods by (plugin, profile): every rule that rejected a pod counts it once."""
        for plugin, profile in list(self._unschedulable_labels - counts.keys()):
            self.unschedulable_pods.labels(plugin=plugin, profile=profile).set(0)
        for (plugin, profile), count in counts.items():
            self.unschedulable_pods.labels(plugin=plugin, profile=profile).set(count)
        self._unschedulable_labels |= set(counts)

    def observe_extension_point(
        self, extension_point: str, status: str, profile: str, seconds: float
    ) -> None:
        """All rules of one extension point (Filter, Score, PostFilter, ...) of one attempt took `seconds`."""
        self._child(self.framework_extension_point_duration, extension_point, status, profile).observe(
            seconds
        )

    def observe_permit_wait(self, result: str, seconds: float) -> None:
        """A pod waited `seconds` at permit and was then allowed or rejected (`result`)."""
        self.permit_wait_duration.labels(result=result).observe(seconds)

    def observe_algorithm(self, seconds: float) -> None:
        """The filter+score part of one attempt took `seconds`."""
        self.scheduling_algorithm_duration.observe(seconds)

    def set_pending(self, active: int, backoff: int, unschedulable: int, gated: int = 0) -> None:
        """Current queue lengths."""
        self.pending_pods.labels(queue="active").set(active)
        self.pending_pods.labels(queue="backoff").set(backoff)
        self.pending_pods.labels(queue="unschedulable").set(unschedulable)
        self.pending_pods.labels(queue="gated").set(gated)

    def incoming(self, queue: str, event: str) -> None:
        """A pod entered `queue` because of `event` (PodAdd, NodeAdd, ScheduleAttemptFailure...)."""
        self._child(self.queue_incoming_pods, queue, event).inc()

    def observe_preemption(self, victims: int) -> None:
        """One preemption attempt that selected `victims` pods."""
        self.preemption_attempts.inc()
        self.preemption_victims.observe(victims)

    def observe_rule(
        self, policy: str, rule: str, extension_point: str, seconds: float, status: str = "Success"
    ) -> None:
        """One evaluation of a rule (filter / score / ...) took `seconds`."""
        self._child(self.plugin_execution_duration, f"{policy}/{rule}", extension_point, status).observe(
            seconds
        )
        self._child(self.rule_evaluations, policy, rule, extension_point).inc()
        self._child(self.rule_evaluation_duration, policy, rule, extension_point).inc(seconds)

    def observe_reload(self, ok: bool, generation: int | None = None) -> None:
        """A policy load/reload finished; on success `generation` is the new set's generation."""
        self.policy_reload.labels(result="success" if ok else "error").inc()
        self.policy_last_reload_success.set(1 if ok else 0)
        if ok and generation is not None:
            self.policy_generation.set(generation)

    def observe_bind(self, result: str) -> None:
        """One bind finished with `result` (bound, conflict, gone, error)."""
        self.binds.labels(result=result).inc()

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)
