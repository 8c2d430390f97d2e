"""The algorithm: window, nominated pods, normalisation and selection agree with the plain oracle."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from policyd.framework import ScoreRule
from policyd.scheduler.algorithm.feasibility import (
    filter_with_nominated,
    nominated_evaluator,
    num_feasible_nodes_to_find,
)
from policyd.scheduler.algorithm.nominated import NominatedRows
from policyd.scheduler.algorithm.reuse import GroupCache
from policyd.scheduler.algorithm.schedule import BULK_MIN, Algorithm, _need_groups
from policyd.scheduler.algorithm.scoring import normalize, normalize_alike, weigh
from policyd.scheduler.algorithm.selection import select_host
from policyd.scheduler.cache import Cache
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.queue import QueueConfig, SchedulingQueue
from policyd.scheduler.snapshot import Snapshot
from tests.unit.scheduler import algorithm_oracle as oracle
from tests.unit.scheduler.algorithm_oracle import failure_counts
from tests.unit.scheduler.fakes import (
    LEAST,
    FakeEvaluator,
    FakeNode,
    FakePod,
    FakeProfile,
    FixedNominations,
    node_obj,
)

MODES = ("none", "max", "reverse", "minmax", "reverse-minmax")


class _NoCluster:
    def prescore(self, pod: Mapping[str, Any], feasible: Sequence[Mapping[str, Any]]) -> None:
        pass

    def with_nominated(self, node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> _NoCluster:
        return self

    def reads_pods(self, pod: Mapping[str, Any]) -> bool:
        return False


def _snapshot(cpus: Sequence[int], pods: Sequence[FakePod] = ()) -> Snapshot:
    cache = Cache(FakeNode, FakeClock())
    for i, cpu in enumerate(cpus):
        cache.add_node(node_obj(f"n{i:03}", cpu))
    for pod in pods:
        cache.add_pod(pod)
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    return snapshot


def _schedule(
    algorithm: Algorithm,
    profile: FakeProfile,
    pod: FakePod,
    snapshot: Snapshot,
    nominated: Mapping[str, list[FakePod]] | None = None,
    nominated_node: str = "",
    explain: bool = False,
) -> Any:
    table = nominated or {}
    return algorithm.schedule_pod(
        profile,
        FakeEvaluator(profile, pod.cel),
        pod,
        snapshot,
        _NoCluster(),
        lambda name: table.get(name, []),
        NominatedRows().sync(snapshot, FixedNominations(table)),
        nominated_node=nominated_node,
        explain=explain,
    )


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
    assert oracle.normalize(raw, mode) == expected  # type: ignore[arg-type]
    assert normalize(np.array(raw, dtype=np.int64), mode).tolist() == expected  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    st.sampled_from(MODES),
    st.lists(st.integers(-(10**6), 10**6), max_size=12)
    | st.lists(st.integers(-(10**30), 10**30), max_size=6),
)
def test_normalize_agrees_with_the_plain_oracle(mode: str, raw: list[int]) -> None:
    small = all(abs(v) < 2**40 for v in raw)
    array = np.array(raw, dtype=np.int64 if small else object)
    assert [int(v) for v in normalize(array, mode).tolist()] == oracle.normalize(raw, mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("value", [-(10**20), -7, -1, 0, 1, 3, 100, 10**20])
def test_a_column_of_equal_scores_normalises_to_one_value(mode: str, value: int) -> None:
    column = np.array([value] * 3, dtype=np.int64 if abs(value) < 2**40 else object)
    assert [int(v) for v in normalize(column, mode).tolist()] == [normalize_alike(value, mode)] * 3  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    st.lists(st.tuples(st.integers(-1000, 1000), st.integers(-1000, 1000)), min_size=1, max_size=10),
    st.tuples(st.sampled_from(MODES), st.sampled_from(MODES)),
    st.tuples(st.integers(-5, 5), st.integers(-5, 5)),
    st.integers(0, 1000),
    st.tuples(st.booleans(), st.booleans()),
    st.sampled_from((np.int64, object)),
)
def test_weighted_totals_and_selection_agree_with_the_oracle(
    raw: list[tuple[int, int]],
    modes: tuple[str, str],
    weights: tuple[int, int],
    seed: int,
    flat: tuple[bool, bool],
    dtype: Any,
) -> None:
    """Totals with and without the normalised matrix kept (a column of equal raw scores is
    normalised once without it), over int64 and Python-int matrices."""
    raw = [tuple(raw[0][j] if flat[j] else r[j] for j in range(2)) for r in raw]
    rules = tuple(ScoreRule(LEAST, w, m) for m, w in zip(modes, weights, strict=True))  # type: ignore[arg-type]
    columns = [oracle.normalize([r[j] for r in raw], rules[j].normalize) for j in range(2)]
    totals = [sum(columns[j][i] * rules[j].weight for j in range(2)) for i in range(len(raw))]
    got, normalized = weigh(np.array(raw, dtype=dtype), rules, keep=True)
    assert got.tolist() == totals
    assert normalized is not None and normalized.T.tolist() == columns
    alone, none = weigh(np.array(raw, dtype=dtype), rules)
    assert none is None and [int(t) for t in alone.tolist()] == totals
    scores = [oracle.NodeScore(str(i), t) for i, t in enumerate(totals)]
    expected = oracle.select_host(scores, random.Random(seed)).node
    assert str(select_host(got, random.Random(seed))) == expected


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    st.integers(1, 70).flatmap(
        lambda rules: st.lists(
            st.lists(st.booleans(), min_size=rules, max_size=rules), min_size=1, max_size=3 * BULK_MIN
        )
    ),
    st.integers(0, 3),
)
def test_need_groups_ask_each_row_for_exactly_its_rules(rows: list[list[bool]], copies: int) -> None:
    """Every row needing a rule is in one group; a group of BULK_MIN rows or more is asked for
    exactly the rules each of its rows needs (only a group too small for a plan may hold others)."""
    need = np.array(rows * (1 + copies * BULK_MIN // len(rows)), dtype=bool)
    groups = _need_groups(need)
    members = np.concatenate([m for m, _ in groups]) if groups else np.zeros(0, dtype=np.intp)
    assert sorted(members.tolist()) == np.flatnonzero(need.any(axis=1)).tolist()
    for m, wanted in groups:
        assert m.size and wanted.any()
        if m.size >= BULK_MIN:
            assert (need[m] == wanted).all()
        else:
            assert (need[m] <= wanted).all()


def test_select_host_picks_the_best_and_breaks_ties_at_random() -> None:
    totals = np.array([5, 9, 9, 1])
    assert {select_host(totals, random.Random(s)) for s in range(50)} == {1, 2}
    assert select_host(np.array([1, 7, 3]), random.Random(0)) == 1


def test_weighted_sum_with_raw_truncated() -> None:
    profile = FakeProfile(normalize="max")
    snapshot = _snapshot([1000, 4000])
    result = _schedule(Algorithm(random.Random(0)), profile, FakePod("p", cpu=500), snapshot, explain=True)
    scores = result.scores.node_scores()
    assert [s.rules[0].raw for s in scores] == [50, 87]  # 87.5 truncated
    assert [s.total for s in scores] == [57, 100]
    assert result.node == "n001"


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    st.lists(st.integers(0, 4000), min_size=1, max_size=160),
    st.lists(st.integers(0, 3000), min_size=1, max_size=6),
    st.sampled_from(MODES),
    st.integers(0, 50),
    st.integers(0, 100),
)
def test_placements_agree_with_the_per_node_oracle(
    cpus: list[int], requests: list[int], mode: str, percentage: int, seed: int
) -> None:
    """Pods in turn over one snapshot: same nodes, failures, evaluated counts and scores."""
    _agree_with_the_oracle(cpus, requests, mode, percentage, seed)


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(
    st.integers(265, 1500),
    st.sampled_from((0.0, 0.3, 0.8, 0.97, 1.0)),
    st.lists(st.integers(500, 3000), min_size=1, max_size=5),
    st.sampled_from((0, 1, 5, 10)),
    st.integers(0, 100),
)
def test_windows_reaching_far_past_the_wanted_count_agree_with_the_oracle(
    n: int, failing: float, requests: list[int], percentage: int, seed: int
) -> None:
    """Clusters larger than the rows first looked at for a window (twice the wanted count and a
    margin), with runs of nodes too small for every pod: the window grows past them as the oracle's."""
    rng = random.Random(seed)
    cpus = [rng.randint(0, 400) if rng.random() < failing else rng.randint(3000, 4000) for _ in range(n)]
    _agree_with_the_oracle(cpus, requests, MODES[seed % len(MODES)], percentage, seed)


def _agree_with_the_oracle(
    cpus: list[int], requests: list[int], mode: str, percentage: int, seed: int
) -> None:
    profile = FakeProfile(normalize=mode)
    snapshot = _snapshot(cpus)
    algorithm = Algorithm(random.Random(seed), percentage)
    rng = random.Random(seed)
    start = 0
    for i, cpu in enumerate(requests):
        pod = FakePod(f"p{i}", cpu=cpu)
        got = _schedule(algorithm, profile, pod, snapshot)
        n = len(snapshot)
        want = oracle.place(
            profile,
            FakeEvaluator(profile, pod.cel),
            pod,
            snapshot.nodes(),
            start,
            num_feasible_nodes_to_find(n, percentage),
            lambda name: [],
            nominated_evaluator(profile, pod, _NoCluster()),
            rng,
        )
        start = (start + want.evaluated) % n
        assert (got.node, got.evaluated, got.failures) == (want.node, want.evaluated, want.failures)
        assert got.scores.by_node() == {s.node: s.total for s in want.scores}
        if got.node is None:  # counted without a step per node: as counting every node's failure
            assert got.failure_counts == failure_counts(got.failures.values())
        else:
            assert got.failure_counts is None


def test_round_robin_start_over_many_nodes() -> None:
    profile = FakeProfile()
    snapshot = _snapshot([1000] * 200)
    algorithm = Algorithm(random.Random(0))
    first = _schedule(algorithm, profile, FakePod("p", cpu=100), snapshot)
    assert first.feasible == 100 and first.evaluated == 100 and len(first.scores) == 100
    second = _schedule(algorithm, profile, FakePod("p", cpu=100), snapshot)
    assert second.evaluated == 100
    assert int(first.node[1:]) < 100 <= int(second.node[1:])


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
    snapshot = _snapshot([1000])
    algorithm = Algorithm(random.Random(0))
    result = _schedule(algorithm, profile, pod, snapshot, nominated={"n000": [high]})
    assert result.node is None and result.failures["n000"].reasons == ("Insufficient cpu",)
    assert _schedule(algorithm, profile, pod, snapshot, nominated={"n000": [low]}).node == "n000"


def test_nominated_node_is_tried_first_and_scored() -> None:
    profile = FakeProfile()
    snapshot = _snapshot([8000, 1000])
    result = _schedule(
        Algorithm(random.Random(0)), profile, FakePod("p", cpu=100), snapshot, nominated_node="n001"
    )
    assert (result.node, result.evaluated) == ("n001", 1)
    assert list(result.scores.by_node()) == ["n001"]


def test_explain_gives_every_rule_on_every_evaluated_node() -> None:
    profile = FakeProfile(zone="a")
    snapshot = _snapshot([1000, 4000, 100])
    result = _schedule(Algorithm(random.Random(0)), profile, FakePod("p", cpu=500), snapshot, explain=True)
    assert result.node is None
    assert sorted(result.all_results) == ["n000", "n001", "n002"]
    assert [r.passed for r in result.all_results["n002"]] == [False, False]


class _SharingEvaluator(FakeEvaluator):
    """A FakeEvaluator whose pods asking the same cpu form a group, and whose verdicts call no
    cluster function."""

    def signature(self) -> Any:  # type: ignore[override]
        return self.pod["requests"]["cpu"]

    @property
    def cluster_called(self) -> bool:
        return False


NOMINEES = [
    FakePod(f"nominee{i}", cpu=cpu, priority=prio)
    for i, (cpu, prio) in enumerate([(100, 10), (600, 10), (300, 1), (500, 5)])
]
nomination_op = st.one_of(
    st.tuples(st.just("nominate"), st.integers(0, len(NOMINEES) - 1), st.integers(0, 2)),
    st.tuples(st.just("clear"), st.integers(0, len(NOMINEES) - 1), st.just(0)),
    st.tuples(st.just("schedule"), st.sampled_from([500, 700]), st.sampled_from([1, 5, 10])),
)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.lists(nomination_op, min_size=1, max_size=30))
@example(
    [("nominate", 1, 0), ("schedule", 500, 1), ("clear", 1, 0), ("nominate", 0, 0), ("schedule", 500, 1)]
)
def test_group_verdicts_on_nominated_nodes_follow_the_nominations(ops: list[tuple[str, int, int]]) -> None:
    """Pods of one group scheduled while nominations come and go on unchanged nodes: the group's kept
    verdicts on nodes with nominated pods give what filtering every such node per pod gives."""
    profile = FakeProfile()
    snapshot = _snapshot([1000, 1000, 900])
    queue = SchedulingQueue(FakeClock(0.0), QueueConfig())
    shared, alone = Algorithm(random.Random(0), groups=GroupCache()), Algorithm(random.Random(0))
    rows = NominatedRows()
    for kind, a, b in ops:
        if kind == "nominate":
            queue.nominate(NOMINEES[a], f"n{b:03}")
        elif kind == "clear":
            queue.clear_nomination(NOMINEES[a].key)
        else:
            pod = FakePod("p", cpu=a, priority=b)
            got, want = (
                algorithm.schedule_pod(
                    profile,
                    evaluator(profile, pod.cel),
                    pod,
                    snapshot,
                    _NoCluster(),
                    queue.nominated_pods,
                    nominated_rows,
                )
                for algorithm, evaluator, nominated_rows in (
                    (shared, _SharingEvaluator, rows.sync(snapshot, queue)),
                    (alone, FakeEvaluator, NominatedRows().sync(snapshot, queue)),
                )
            )
            assert (got.node, dict(got.failures)) == (want.node, dict(want.failures))
