"""Framework: percentageOfNodesToScore, round robin, nominated pods, normalisation, selection."""

from __future__ import annotations

import random

import pytest

from policyd.scheduler.algorithm import (
    NodeScore,
    ProfileRunner,
    filter_with_nominated,
    normalize,
    num_feasible_nodes_to_find,
    score_nodes,
    select_host,
)
from tests.unit.scheduler.fakes import FakeEvaluator, FakeNode, FakePod, FakeProfile, node_obj


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [(1, 1), (99, 99), (100, 100), (500, 230), (1000, 420), (5000, 500), (6000, 300), (10000, 500)],
)
def test_num_feasible_nodes_to_find(nodes: int, expected: int) -> None:
    assert num_feasible_nodes_to_find(nodes) == expected


def test_explicit_percentage() -> None:
    assert num_feasible_nodes_to_find(1000, 50) == 500
    assert num_feasible_nodes_to_find(1000, 1) == 100


@pytest.mark.parametrize(
    ("mode", "raw", "expected"),
    [
        ("none", [3, 7], [3, 7]),
        ("max", [1, 2, 3], [33, 66, 100]),
        ("max", [0, 0], [0, 0]),
        ("reverse", [1, 2, 3], [67, 34, 0]),
        ("reverse", [0, 0], [100, 100]),
        ("minmax", [10, 15, 20], [0, 50, 100]),
        ("minmax", [5, 5], [0, 0]),
        ("reverse-minmax", [10, 15, 20], [100, 50, 0]),
        ("max", [-1, 3], [-33, 100]),
    ],
)
def test_normalize_integer_arithmetic(mode: str, raw: list[int], expected: list[int]) -> None:
    assert normalize(raw, mode) == expected  # type: ignore[arg-type]


def test_select_host_picks_the_best_and_breaks_ties_at_random() -> None:
    scores = [NodeScore("a", 5), NodeScore("b", 9), NodeScore("c", 9), NodeScore("d", 1)]
    assert {select_host(scores, random.Random(s)).node for s in range(50)} == {"b", "c"}
    seeded = [select_host(scores, random.Random(7)).node for _ in range(3)]
    assert len(set(seeded)) == 1


def test_weighted_sum_with_raw_truncated() -> None:
    profile = FakeProfile(normalize="max")
    nodes = [FakeNode(node_obj("a", 1000)), FakeNode(node_obj("b", 4000))]
    pod = FakePod("p", cpu=500)
    scores = score_nodes(profile, FakeEvaluator(profile, pod.cel), nodes)
    assert [s.rules[0].raw for s in scores] == [50, 87]  # 87.5 truncated
    assert [s.total for s in scores] == [57, 100]


def test_round_robin_start_over_many_nodes() -> None:
    profile = FakeProfile()
    nodes = [FakeNode(node_obj(f"n{i:03}", 1000)) for i in range(200)]
    pod = FakePod("p", cpu=100)
    runner = ProfileRunner(random.Random(0))
    first = runner.schedule(profile, FakeEvaluator(profile, pod.cel), pod, nodes, lambda n: [])
    assert first.feasible == 100 and first.evaluated == 100
    second = runner.schedule(profile, FakeEvaluator(profile, pod.cel), pod, nodes, lambda n: [])
    assert second.evaluated == 100
    chosen = {first.node, second.node}
    assert any(n is not None and int(n[1:]) < 100 for n in chosen)
    assert any(n is not None and int(n[1:]) >= 100 for n in chosen)


def test_nominated_pods_of_higher_or_equal_priority_count() -> None:
    profile = FakeProfile()
    node = FakeNode(node_obj("a", 1000))
    pod = FakePod("p", cpu=600, priority=5)
    evaluator = FakeEvaluator(profile, pod.cel)
    high = FakePod("high", cpu=500, priority=10)
    low = FakePod("low", cpu=500, priority=1)
    assert filter_with_nominated(evaluator, pod, node, lambda n: [low]) is None
    failure = filter_with_nominated(evaluator, pod, node, lambda n: [high])
    assert failure is not None and failure.reasons == ("Insufficient cpu",)
    assert filter_with_nominated(evaluator, pod, node, lambda n: [pod]) is None  # itself never counts


def test_nominated_node_is_tried_first() -> None:
    profile = FakeProfile()
    nodes = [FakeNode(node_obj("big", 8000)), FakeNode(node_obj("small", 1000))]
    pod = FakePod("p", cpu=100)
    runner = ProfileRunner(random.Random(0))
    result = runner.schedule(
        profile, FakeEvaluator(profile, pod.cel), pod, nodes, lambda n: [], nominated_node=nodes[1]
    )
    assert result.node == "small"
