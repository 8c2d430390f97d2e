"""A node's first filter pass with nominated pods, decided by the pod's own evaluator when they change
no pod-only value (`NominatedEvaluator.adds_nothing`), agrees with an evaluator over
`ClusterFunctions.with_nominated` for every node (the oracle: `adds_nothing` always False)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policyd.scheduler.algorithm import feasibility
from policyd.scheduler.algorithm.nominated import NominatedVerdicts
from policyd.scheduler.snapshot import PodInfoLike
from tests.builders import make_node, make_pod, pod_affinity, pod_affinity_term
from tests.unit.scheduler.group_path_cases import Case, Outcome, cases, run
from tests.unit.scheduler.test_group_path import PROPERTY as GROUP_PATH_PROPERTY

PROPERTY = settings(GROUP_PATH_PROPERTY, max_examples=30)


def _never(self: object, others: Sequence[PodInfoLike]) -> bool:
    return False


def _oracle(case: Case) -> Outcome:
    with mock.patch.object(feasibility._NominatedEvaluators, "adds_nothing", _never):
        return run(case, reuse=True)


def _crowded(n: int, preemptors: int, affinity: bool = False) -> Case:
    nodes = [make_node(f"n{i}", cpu="4", memory="32Gi") for i in range(n)]
    assigned = [
        make_pod(f"low{i}-{k}", cpu="900m", priority=k % 3, node_name=f"n{i}", labels={"app": "low"})
        for i in range(n)
        for k in range(4)
    ]
    # required anti-affinity (to no pod): nominated, such pods count in the first pass
    terms = pod_affinity(anti_required=[pod_affinity_term({"app": "nothing"})]) if affinity else None
    pending = [make_pod(f"high{j}", cpu="3", priority=100, affinity=terms) for j in range(preemptors)]
    return Case(nodes=nodes, assigned=assigned, pending=pending, extra=())


def test_preemptors_filter_nominated_nodes_with_their_own_evaluator() -> None:
    case = _crowded(12, 8)
    answers: list[bool] = []
    real = feasibility._NominatedEvaluators.adds_nothing

    def spy(self: feasibility._NominatedEvaluators, others: Sequence[PodInfoLike]) -> bool:
        answers.append(real(self, others))
        return answers[-1]

    with mock.patch.object(feasibility._NominatedEvaluators, "adds_nothing", spy):
        shared = run(case, reuse=True)
    assert answers and all(answers)  # every first pass was the preemptor's own evaluation
    assert shared.comparable() == _oracle(case).comparable()
    assert len(shared.victims) == 8 * 3


def test_nominated_pods_with_affinity_terms_get_evaluators_of_their_own() -> None:
    case = _crowded(12, 8, affinity=True)
    shared = run(case, reuse=True)
    assert shared.comparable() == _oracle(case).comparable()


@PROPERTY
@given(cases(), st.integers(1, 4))
def test_random_clusters_place_and_preempt_as_with_nominated_evaluators(case: Case, preemptors: int) -> None:
    case.pending = case.pending + [
        make_pod(f"zz-preemptor{j}", cpu="3", memory="1Gi", priority=5000) for j in range(preemptors)
    ]
    assert run(case, reuse=True).comparable() == _oracle(case).comparable()


def test_verdicts_on_plain_nominated_rows_are_kept_for_the_group() -> None:
    """Preemptors nominated one after another: later pods learn the verdicts on unchanged nodes with
    nominated pods from the group's columns, and place and preempt as when every such node is
    filtered per pod (the columns never answering)."""
    case = _crowded(12, 8)
    held: list[int] = []
    real = NominatedVerdicts.known

    def spy(self: NominatedVerdicts, *args: Any) -> Any:
        found = real(self, *args)
        held.append(int(found.sum()))
        return found

    def never(self: NominatedVerdicts, rows: Any, *args: Any) -> Any:
        return np.zeros(len(rows), dtype=bool)

    with mock.patch.object(NominatedVerdicts, "known", spy):
        shared = run(case, reuse=True)
    assert sum(held) > 0
    with mock.patch.object(NominatedVerdicts, "known", never):
        oracle = run(case, reuse=True)
    assert shared.comparable() == oracle.comparable() == _oracle(case).comparable()
    assert len(shared.victims) == 8 * 3


@PROPERTY
@given(cases(), st.lists(st.sampled_from([100, 300, 5000]), min_size=1, max_size=5))
def test_random_clusters_with_nominations_of_mixed_priorities(case: Case, priorities: list[int]) -> None:
    """Preemptors of several priorities: rows where only some nominated pods count, or the pod
    itself is nominated, are filtered per pod; the rest from the columns: the same placements."""
    case.pending = case.pending + [
        make_pod(f"zz-preemptor{j}", cpu="3", memory="1Gi", priority=p) for j, p in enumerate(priorities)
    ]
    assert run(case, reuse=True).comparable() == _oracle(case).comparable()
