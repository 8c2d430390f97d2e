"""The shared dry run (cycle's evaluator, outcomes reused between equivalent preemptors) chooses the
victims and nominations the exact per-node dry run chooses (the scheduler without reuse takes it)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import make_node, make_pdb, make_pod
from tests.unit.scheduler.group_path_cases import Case, Step, cases, run

PROPERTY = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def _crowded(n: int, per_node: int, preemptors: int, priority: int = 100) -> Case:
    nodes = [make_node(f"n{i}", cpu="4", memory="32Gi") for i in range(n)]
    assigned = [
        make_pod(f"low{i}-{k}", cpu="900m", priority=k % 3, node_name=f"n{i}", labels={"app": f"a{k % 2}"})
        for i in range(n)
        for k in range(per_node)
    ]
    pending = [make_pod(f"high{j}", cpu="3", priority=priority) for j in range(preemptors)]
    return Case(nodes=nodes, assigned=assigned, pending=pending, extra=())


def _agree(case: Case) -> None:
    shared = run(case, reuse=True)
    exact = run(case, reuse=False, vectorise=False)
    assert shared.scheduler.preemption_cache is not None and exact.scheduler.preemption_cache is None
    assert shared.comparable() == exact.comparable()


def test_identical_preemptors_share_outcomes_and_choose_the_exact_victims() -> None:
    case = _crowded(30, 4, 12)
    shared = run(case, reuse=True)
    exact = run(case, reuse=False, vectorise=False)
    assert shared.comparable() == exact.comparable()
    assert len(shared.victims) == 12 * 3  # each preemptor evicts three of its node's four pods
    cache = shared.scheduler.preemption_cache
    assert cache is not None and cache.hits > cache.computed  # later preemptors reuse the outcomes


def test_a_node_changed_between_two_preemptors_is_dry_run_again() -> None:
    """Deleting a priority-1 pod of n3 after the first preemptor's cycle makes n3 the best candidate
    (highest victim priority 0): an outcome kept from before the change would evict the deleted pod."""
    case = _crowded(6, 4, 3)
    case.steps = [Step(1, ("delete-pod", "default/low3-1"))]
    shared = run(case, reuse=True)
    assert shared.comparable() == run(case, reuse=False, vectorise=False).comparable()
    assert "default/low3-1" not in shared.victims
    assert {"default/low3-0", "default/low3-3"} <= set(shared.victims)


def test_budgets_change_the_victims_alike() -> None:
    case = _crowded(12, 4, 6)
    case.pdbs = [make_pdb("pdb-a0", {"app": "a0"}, min_available=20)]
    _agree(case)


@PROPERTY
@given(cases(), st.integers(1, 4))
def test_random_crowded_clusters_choose_the_same_victims(case: Case, preemptors: int) -> None:
    case.pending = case.pending + [
        make_pod(f"zz-preemptor{j}", cpu="3", memory="1Gi", priority=5000) for j in range(preemptors)
    ]
    _agree(case)
