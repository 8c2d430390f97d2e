"""Scheduler metrics: kube-scheduler's names, labels and buckets; policyd's own under policyd_; one registry each."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from policyd.scheduler.metrics import SchedulerMetrics


def sample(m: SchedulerMetrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    return m.registry.get_sample_value(name, labels or {})


def test_registries_are_independent() -> None:
    a, b = SchedulerMetrics(), SchedulerMetrics(CollectorRegistry())
    a.observe_attempt("scheduled", "policyd", 0.01)
    assert sample(a, "scheduler_schedule_attempts_total", {"result": "scheduled", "profile": "policyd"}) == 1
    assert (
        sample(b, "scheduler_schedule_attempts_total", {"result": "scheduled", "profile": "policyd"}) is None
    )


def test_recording_helpers() -> None:
    m = SchedulerMetrics()
    m.observe_attempt("unschedulable", "p", 0.002)
    m.observe_algorithm(0.001)
    m.set_pending(3, 2, 1)
    m.incoming("active", "PodAdd")
    m.observe_preemption(4)
    m.observe_rule("gpu", "GPUFree", "Filter", 0.0001)
    m.observe_rule("gpu", "GPUFree", "Filter", 0.0003)
    m.observe_reload(True, generation=7)
    m.observe_reload(False)
    m.observe_bind("conflict")
    assert (
        sample(
            m,
            "scheduler_scheduling_attempt_duration_seconds_count",
            {"result": "unschedulable", "profile": "p"},
        )
        == 1
    )
    assert sample(m, "scheduler_scheduling_algorithm_duration_seconds_count") == 1
    assert sample(m, "scheduler_pending_pods", {"queue": "backoff"}) == 2
    assert sample(m, "scheduler_pending_pods", {"queue": "gated"}) == 0
    assert sample(m, "scheduler_queue_incoming_pods_total", {"queue": "active", "event": "PodAdd"}) == 1
    assert sample(m, "scheduler_preemption_attempts_total") == 1
    assert sample(m, "scheduler_preemption_victims_sum") == 4
    labels = {"policy": "gpu", "rule": "GPUFree", "extension_point": "Filter"}
    assert sample(m, "policyd_rule_evaluations_total", labels) == 2
    assert abs((sample(m, "policyd_rule_evaluation_seconds_total", labels) or 0) - 0.0004) < 1e-9
    assert (
        sample(
            m,
            "scheduler_plugin_execution_duration_seconds_count",
            {"plugin": "gpu/GPUFree", "extension_point": "Filter", "status": "Success"},
        )
        == 2
    )
    assert sample(m, "policyd_policy_reload_total", {"result": "success"}) == 1
    assert sample(m, "policyd_policy_reload_total", {"result": "error"}) == 1
    assert sample(m, "policyd_policy_last_reload_success") == 0
    assert sample(m, "policyd_policy_generation") == 7
    assert sample(m, "policyd_binding_total", {"result": "conflict"}) == 1


def test_exposition_text() -> None:
    m = SchedulerMetrics()
    m.observe_attempt("scheduled", "policyd", 0.5)
    text = m.exposition().decode()
    assert 'scheduler_schedule_attempts_total{profile="policyd",result="scheduled"} 1.0' in text
    assert "# TYPE scheduler_scheduling_attempt_duration_seconds histogram" in text


def test_bucket_layouts_are_kube_schedulers() -> None:
    """The histograms kube-scheduler also exports use its bucket layouts, so dashboards' `le` match."""
    m = SchedulerMetrics()
    m.observe_scheduled(20, 0.5)
    m.observe_preemption(3)
    text = m.exposition().decode()
    assert 'scheduler_pod_scheduling_sli_duration_seconds_bucket{attempts="15+",le="0.01"} 0.0' in text
    assert 'scheduler_pod_scheduling_sli_duration_seconds_bucket{attempts="15+",le="5242.88"} 1.0' in text
    assert 'scheduler_pod_scheduling_attempts_bucket{le="16.0"} 0.0' in text
    assert 'scheduler_preemption_victims_bucket{le="64.0"} 1.0' in text
    assert 'scheduler_scheduling_algorithm_duration_seconds_bucket{le="16.384"} 0.0' in text
    m.set_unschedulable({("p/Fit", "policyd"): 2})
    m.set_unschedulable({})
    assert (
        m.registry.get_sample_value("scheduler_unschedulable_pods", {"plugin": "p/Fit", "profile": "policyd"})
        == 0
    )
