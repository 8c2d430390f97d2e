"""Prometheus metrics with kube-scheduler's names under the `policyd_` prefix.

Every metric lives in the `CollectorRegistry` handed to `SchedulerMetrics` (a fresh one by default),
never in prometheus_client's global registry, so tests and several schedulers in one process each
get their own.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

PREFIX = "policyd_"

# kube-scheduler: exponential buckets 0.001 * 2^i, 15 buckets (attempt / algorithm durations)
DURATION_BUCKETS = tuple(0.001 * 2**i for i in range(15))
# plugin / rule evaluation: 0.00001 * 1.5^i, 20 buckets
RULE_BUCKETS = tuple(0.00001 * 1.5**i for i in range(20))
VICTIM_BUCKETS = tuple(float(2**i) for i in range(7))

RESULT_SCHEDULED = "scheduled"
RESULT_UNSCHEDULABLE = "unschedulable"
RESULT_ERROR = "error"

QUEUES = ("active", "backoff", "unschedulable", "gated")


class SchedulerMetrics:
    """The scheduler's metrics, registered in one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.schedule_attempts = Counter(
            PREFIX + "schedule_attempts_total",
            "Number of attempts to schedule pods, by the result and profile.",
            ["result", "profile"],
            registry=r,
        )
        self.scheduling_attempt_duration = Histogram(
            PREFIX + "scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding).",
            ["result", "profile"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.scheduling_algorithm_duration = Histogram(
            PREFIX + "scheduling_algorithm_duration_seconds",
            "Scheduling algorithm latency in seconds.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.pending_pods = Gauge(
            PREFIX + "pending_pods",
            "Number of pending pods, by the queue type.",
            ["queue"],
            registry=r,
        )
        self.queue_incoming_pods = Counter(
            PREFIX + "queue_incoming_pods_total",
            "Number of pods added to scheduling queues by event and queue type.",
            ["queue", "event"],
            registry=r,
        )
        self.preemption_attempts = Counter(
            PREFIX + "preemption_attempts_total",
            "Total preemption attempts in the cluster till now.",
            registry=r,
        )
        self.preemption_victims = Histogram(
            PREFIX + "preemption_victims",
            "Number of selected preemption victims.",
            buckets=VICTIM_BUCKETS,
            registry=r,
        )
        self.plugin_execution_duration = Histogram(
            PREFIX + "plugin_execution_duration_seconds",
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
        for queue in QUEUES:
            self.pending_pods.labels(queue=queue).set(0)

    # ---- recording helpers (what the runtime calls) ------------------------------------------------

    def observe_attempt(self, result: str, profile: str, seconds: float) -> None:
        """One scheduling attempt finished with `result` (scheduled / unschedulable / error)."""
        self.schedule_attempts.labels(result=result, profile=profile).inc()
        self.scheduling_attempt_duration.labels(result=result, profile=profile).observe(seconds)

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
        self.queue_incoming_pods.labels(queue=queue, event=event).inc()

    def observe_preemption(self, victims: int) -> None:
        """One preemption attempt that selected `victims` pods."""
        self.preemption_attempts.inc()
        self.preemption_victims.observe(victims)

    def observe_rule(
        self, policy: str, rule: str, extension_point: str, seconds: float, status: str = "Success"
    ) -> None:
        """One evaluation of a rule (filter / score / ...) took `seconds`."""
        self.plugin_execution_duration.labels(
            plugin=f"{policy}/{rule}", extension_point=extension_point, status=status
        ).observe(seconds)
        self.rule_evaluations.labels(policy=policy, rule=rule, extension_point=extension_point).inc()
        self.rule_evaluation_duration.labels(policy=policy, rule=rule, extension_point=extension_point).inc(
            seconds
        )

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
