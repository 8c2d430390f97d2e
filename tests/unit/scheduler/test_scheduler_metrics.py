"""The Scheduler records kube-scheduler's metrics (a compiled policy on the simulated back-end)."""

from __future__ import annotations

from typing import Any

from policyd.backends.simulated import SimulatedCluster
from policyd.compiler.profiles import compile_sources
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.metrics import SchedulerMetrics
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions
from tests.builders import make_node, make_pod

POLICY = """
policy fit {
  filter Fit {
    expr = node.free["cpu"] >= pod.requests["cpu"]
    reason = "Insufficient cpu"
  }
  score LeastAllocated {
    expr = node.free["cpu"] * 100 / node.allocatable["cpu"]
    weight = 1
  }
}
"""


def run(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], texts: dict[str, str] | None = None
) -> tuple[SchedulerMetrics, SimulatedCluster]:
    """Schedule `pods` on `nodes` with the policies `texts` (POLICY by default) until settled."""
    metrics = SchedulerMetrics()
    cluster = SimulatedCluster(nodes, pods)
    sched = Scheduler(
        compile_sources(texts or {"p.policy": POLICY}, generation=1),
        cluster,
        clock=FakeClock(),
        options=SchedulerOptions(adopt_unknown_schedulers=True, bind_workers=0, seed=1),
        metrics=metrics,
    )
    cluster.start(sched)
    sched.run_until_settled()
    return metrics, cluster


def value(m: SchedulerMetrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def test_scheduled_unschedulable_and_preemption_are_counted() -> None:
    nodes = [make_node("a", cpu="2"), make_node("b", cpu="2")]
    pods = [
        make_pod("low-a", cpu="1500m", priority=1, node_name="a"),
        make_pod("low-b", cpu="1500m", priority=1, node_name="b"),
        make_pod("small-1", cpu="200m"),
        make_pod("small-2", cpu="200m"),
        make_pod("huge", cpu="8", priority=5),  # fits nowhere, even without victims
        make_pod("high", cpu="1", priority=100),  # fits after preempting one low pod
    ]
    m, cluster = run(nodes, pods)

    assert {cluster.node_of(f"default/small-{i}") for i in (1, 2)} <= {"a", "b"}
    assert cluster.node_of("default/high") in ("a", "b")
    assert cluster.node_of("default/huge") is None
    assert len(cluster.deleted) == 1

    attempts = "scheduler_schedule_attempts_total"
    scheduled = value(m, attempts, result="scheduled", profile="policyd")
    unschedulable = value(m, attempts, result="unschedulable", profile="policyd")
    assert scheduled == 3  # small-1, small-2, high (after preemption)
    assert unschedulable == 2  # huge (parked: no event can help it), high (nominated)
    assert value(m, attempts, result="error", profile="policyd") == 0
    total = scheduled + unschedulable
    assert (
        value(m, "scheduler_scheduling_attempt_duration_seconds_count", result="scheduled", profile="policyd")
        == 3
    )
    assert value(m, "scheduler_scheduling_algorithm_duration_seconds_count") == total

    # every unschedulable attempt runs PostFilter; one of them found a victim
    assert value(m, "scheduler_preemption_attempts_total") == 2
    assert value(m, "scheduler_preemption_victims_count") == 1
    assert value(m, "scheduler_preemption_victims_sum") == 1

    assert value(m, "policyd_binding_total", result="bound") == 3
    assert value(m, "scheduler_queue_incoming_pods_total", queue="active", event="PodAdd") == 4
    incoming = "scheduler_queue_incoming_pods_total"
    assert value(m, incoming, queue="unschedulable", event="ScheduleAttemptFailure") == 2
    # the victim's deletion woke the nominated pod, whose backoff had not expired on the fake clock
    assert value(m, incoming, queue="backoff", event="AssignedPodDelete") == 1

    # rule time per profile and phase, once per attempt that filtered / scored
    filters = "scheduler_plugin_execution_duration_seconds_count"
    assert value(m, filters, plugin="policyd/filters", extension_point="Filter", status="Unschedulable") == 2
    assert value(m, filters, plugin="policyd/filters", extension_point="Filter", status="Success") == 3
    scored = value(
        m, "policyd_rule_evaluations_total", policy="policyd", rule="scores", extension_point="Score"
    )
    assert scored == 3  # every attempt that found a node scored it (high: its nominated node)

    # kube-scheduler's per-pod histograms: three pods bound, high after two attempts
    assert value(m, "scheduler_pod_scheduling_attempts_count") == 3
    assert value(m, "scheduler_pod_scheduling_attempts_sum") == 4
    assert value(m, "scheduler_pod_scheduling_sli_duration_seconds_count", attempts="1") == 2
    assert value(m, "scheduler_pod_scheduling_sli_duration_seconds_count", attempts="2") == 1
    assert value(m, "scheduler_pod_scheduling_attempts_bucket", le="2.0") == 3
    point = "scheduler_framework_extension_point_duration_seconds_count"
    assert value(m, point, extension_point="Filter", status="Unschedulable", profile="policyd") == 2
    assert value(m, point, extension_point="Filter", status="Success", profile="policyd") == 3
    # the parked pod counted under the rule that rejected it (plugin = policy/rule)
    assert value(m, "scheduler_unschedulable_pods", plugin="fit/Fit", profile="policyd") == 1

    # settled: only huge is left, parked
    assert value(m, "scheduler_pending_pods", queue="unschedulable") == 1
    assert value(m, "scheduler_pending_pods", queue="active") == 0
    assert value(m, "scheduler_pending_pods", queue="backoff") == 0


def test_no_metrics_object_is_fine() -> None:
    cluster = SimulatedCluster([make_node("a")], [make_pod("p", cpu="100m")])
    sched = Scheduler(
        compile_sources({"p.policy": POLICY}, generation=1),
        cluster,
        clock=FakeClock(),
        options=SchedulerOptions(adopt_unknown_schedulers=True, bind_workers=0),
    )
    cluster.start(sched)
    sched.run_until_settled()
    assert cluster.node_of("default/p") == "a"


FAILING = """
policy NAME {
  filter Zone {
    expr = node.labels["zone"] == "a"
  }
  let gpus = node.free["example.com/gpu"]
  score Gpus {
    expr = gpus
  }
  score Half {
    expr = 100 / (node.free["cpu"] / 1000 - 3)
  }
}
"""


def rule_errors(
    name: str, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], layer: str = ""
) -> dict[tuple[str, str], float]:
    """The `policyd_rule_errors_total` samples of a run of FAILING as policy `name` (a compiled
    policy's counts live as long as its code, which compiling the same text again reuses), and of
    `layer` beside it: (rule, extension point) -> count."""
    texts = {f"{name}.policy": FAILING.replace("NAME", name)}
    if layer:
        texts["layer.policy"] = layer
    metrics, _ = run(nodes, pods, texts)
    samples = [
        (s.labels["rule"], s.labels["extension_point"], s.value)
        for family in metrics.registry.collect()
        if family.name == "policyd_rule_errors"
        for s in family.samples
        if s.labels["policy"] == name
    ]
    counted = {(rule, point): value for rule, point, value in samples}
    assert len(counted) == len(samples), samples  # one sample per rule
    return counted


def test_failed_rule_evaluations_are_counted_per_rule() -> None:
    """A filter that fails rejects the node, a score that fails is 0: both are counted."""
    nodes = [
        make_node("a", cpu="4", labels={"zone": "a"}),  # no gpu: Gpus fails; 4 - 3 = 1 cpu: Half passes
        make_node("b", cpu="4"),  # no zone label: Zone fails (before any score)
        make_node(
            "c", cpu="3", labels={"zone": "a"}, extended={"example.com/gpu": 2}
        ),  # Half: division by zero
    ]
    counted = rule_errors("few", nodes, [make_pod("p", cpu="100m")])
    assert counted == {("Zone", "Filter"): 1, ("Gpus", "Score"): 1, ("Half", "Score"): 1}


def test_failed_scores_are_counted_alike_by_the_plans_over_many_nodes() -> None:
    """Over 64 nodes the vectorised plans score them: each failed score is counted once all the same."""
    nodes = [make_node(f"n{i:02d}", cpu="4", labels={"zone": "a"}) for i in range(64)]
    counted = rule_errors("many", nodes, [make_pod("p", cpu="100m")])
    assert counted == {("Gpus", "Score"): 64}


def test_a_policy_two_profiles_build_on_is_counted_once() -> None:
    """The profile `policyd` (FAILING) and `other` (a layer over it) share its code: its count is the
    failed evaluations of both profiles' pods, reported once."""
    nodes = [make_node("a", cpu="4", labels={"zone": "a"}), make_node("b", cpu="4")]
    pods = [make_pod("p", cpu="100m"), make_pod("q", cpu="100m", scheduler_name="other")]
    layer = 'policy layer extends shared {\n  profiles = ["other"]\n}\n'
    counted = rule_errors("shared", nodes, pods, layer)
    assert counted[("Zone", "Filter")] == 2  # node b, once per pod
