"""Scaling a workload keeps what it measures: Preemption's setup pods still fill its nodes."""

from __future__ import annotations

from policyd.bench.workloads import CreatePods, workload


def _setup_pods(name: str, pods: float, nodes: float = 1.0) -> tuple[int, int, int]:
    wl = workload(name).scaled(pods, nodes)
    setup = sum(op.count for op in wl.ops if isinstance(op, CreatePods) and not op.collect_metrics)
    return wl.nodes, setup, wl.measured_pods


def test_scaled_preemption_shrinks_its_nodes_with_its_pods() -> None:
    # four 900m setup pods per 4-CPU node leave no room for a 3000m pod, at any scale
    assert _setup_pods("Preemption/5000", 1.0) == (5000, 20000, 5000)
    assert _setup_pods("Preemption/5000", 0.2) == (1000, 4000, 1000)
    assert _setup_pods("Preemption/500", 0.5) == (250, 1000, 250)


def test_node_scale_applies_on_top_of_it() -> None:
    assert _setup_pods("Preemption/5000", 0.2, 0.5) == (500, 4000, 1000)


def test_other_workloads_keep_their_nodes() -> None:
    assert _setup_pods("SchedulingBasic/5000", 0.2) == (5000, 200, 2000)
    assert _setup_pods("TopologySpreading/5000", 0.2, 0.5) == (2500, 1000, 400)
