"""The collector thresholds a scheduler sets (raised to the scheduler's, never lowered), and the
scheduling objects the collector never has to find."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from policyd.scheduler import collector
from tests.builders import make_node, make_pod, pod_affinity, pod_affinity_term, spread_constraint
from tests.unit.scheduler.group_path_cases import Case, policies, run


@pytest.fixture
def thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_defaults_are_raised(thresholds: None) -> None:
    gc.set_threshold(700, 10, 10)
    collector.tune()
    assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, collector.MIDDLE_THRESHOLD, 10)


def test_higher_settings_are_kept(thresholds: None) -> None:
    gc.set_threshold(100_000, 50, 7)
    collector.tune()
    assert gc.get_threshold() == (100_000, 50, 7)


def test_scheduling_leaves_no_cyclic_garbage() -> None:
    """What a scheduling cycle makes (cluster functions and their tables and states, evaluators,
    failures) is freed by reference counting as soon as it is dropped: none of it waits in a
    reference cycle for the collector, whose runs walk every young object."""
    zone = "topology.kubernetes.io/zone"
    nodes = [make_node(f"n{i}", cpu="2", labels={zone: f"z{i % 3}"}) for i in range(60)]
    # low-priority pods fill every node; the high-priority ones preempt them (nominations included)
    assigned = [make_pod(f"low-{i}", cpu="1500m", priority=0, node_name=f"n{i}") for i in range(60)]
    spread = [spread_constraint({"app": "web"}, zone, 1)]
    anti = pod_affinity(anti_required=[pod_affinity_term({"app": "db"})])
    pending = [
        *(make_pod(f"web-{i}", cpu="1", labels={"app": "web"}, spread=spread, priority=10) for i in range(6)),
        *(make_pod(f"db-{i}", cpu="1", labels={"app": "db"}, affinity=anti, priority=10) for i in range(4)),
    ]
    case = Case(nodes=nodes, assigned=assigned, pending=pending)
    policies(*case.extra)  # compiled first: compiling is not what is looked at
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        outcome = run(case, reuse=True, explain=False)
        gc.collect()
        cyclic = sorted(
            {type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("policyd.")}
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert all(outcome.placements[f"default/{p['metadata']['name']}"] for p in pending)
    assert cyclic == []
