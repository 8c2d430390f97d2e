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


def test_preemptors_of_rising_priority_meet_nominations_that_count_in_part() -> None:
    """Each preemptor outranks the last: the nominated pods count for none of the later ones' dry
    runs but their own (a row's kept outcome says which nominated pods it was decided with)."""
    case = _crowded(10, 4, 0)
    case.pending = [make_pod(f"high{j}", cpu="3", priority=100 + (j % 3) * 50) for j in range(9)]
    _agree(case)


@PROPERTY
@given(cases(), st.lists(st.sampled_from([100, 300, 5000]), min_size=1, max_size=5))
def test_preemptors_of_mixed_priorities_choose_the_same_victims(case: Case, priorities: list[int]) -> None:
    case.pending = case.pending + [
        make_pod(f"zz-preemptor{j}", cpu="3", memory="1Gi", priority=p) for j, p in enumerate(priorities)
    ]
    _agree(case)


def test_an_outcome_decided_with_a_nominated_pod_is_not_kept_once_it_is_gone() -> None:
    """A preempts on n0 and is nominated there; B's dry run counts A on n0 (no candidate). A is
    deleted, which leaves n0's pods as they are: C, equivalent to B, finds n0 a candidate (without A,
    evicting the last low-priority pod makes room) and must not reuse B's outcome."""
    nodes = [make_node("n0", cpu="4", memory="32Gi")]
    assigned = [
        make_pod("low1", cpu="900m", priority=0, node_name="n0"),
        make_pod("low2", cpu="900m", priority=0, node_name="n0"),
        make_pod("keep", cpu="1400m", priority=1000, node_name="n0"),
    ]
    pending = [
        make_pod("a", cpu="1", priority=300),
        make_pod("b", cpu="2", priority=100),
        make_pod("c", cpu="2", priority=100),
    ]
    case = Case(nodes=nodes, assigned=assigned, pending=pending, extra=())
    case.steps = [Step(2, ("delete-pod", "default/a"))]
    shared = run(case, reuse=True)
    assert shared.comparable() == run(case, reuse=False, vectorise=False).comparable()
    assert {"default/low1", "default/low2"} <= set(shared.victims)
