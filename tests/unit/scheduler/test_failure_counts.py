"""Failures counted per distinct object give the FailedScheduling message and the rejecting rules that
counting every node gives; equal failures of the generated functions are one object."""

from __future__ import annotations

from collections import Counter
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policyd.evaluation import generated
from policyd.evaluation.generated import shared_failure
from policyd.framework import FilterFailure, RuleRef
from policyd.scheduler.algorithm.failures import (
    DeferredFailures,
    WindowFailures,
    window_failure_counts,
)
from policyd.scheduler.attempts import NO_NODE_AVAILABLE, fit_error_message
from tests.unit.scheduler.algorithm_oracle import failure_counts

RULES = [RuleRef("p", "Fit"), RuleRef("p", "Taints"), RuleRef("q", "Zone")]
REASONS = [("Insufficient cpu",), ("Insufficient cpu", "Insufficient memory"), ("node(s) didn't match zone",)]


def _message_counting_every_node(num_nodes: int, failures: list[FilterFailure]) -> str:
    histogram: Counter[str] = Counter()
    for failure in failures:
        for reason in failure.reasons:
            histogram[reason] += 1
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return NO_NODE_AVAILABLE.format(n=num_nodes) + ":" + (f" {', '.join(parts)}." if parts else "")


failure = st.builds(
    lambda rule, reasons, fresh: (
        FilterFailure(RULES[rule], REASONS[reasons])
        if fresh
        else shared_failure(RULES[rule], REASONS[reasons], False, False)
    ),
    st.integers(0, 2),
    st.integers(0, 2),
    st.booleans(),  # an unshared object equal to a shared one
)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(failure, max_size=40))
def test_counts_per_distinct_failure_give_the_per_node_message(failures: list[FilterFailure]) -> None:
    counts = failure_counts(failures)
    assert sum(n for _, n in counts) == len(failures)
    assert len({id(f) for f, _ in counts}) == len(counts)
    assert {f.rule for f, _ in counts} == {f.rule for f in failures}
    got = fit_error_message(len(failures) + 1, [(f.reasons, n) for f, n in counts])
    assert got == _message_counting_every_node(len(failures) + 1, failures)


@mock.patch.dict(generated._failures, clear=True)  # not emptied for being full during the test
def test_equal_failures_are_one_object() -> None:
    a = shared_failure(RULES[0], ("Insufficient cpu",), False, False)
    assert shared_failure(RULES[0], ("Insufficient cpu",), False, False) is a
    assert (
        shared_failure(RuleRef("p", "Fit"), ("Insufficient cpu",), False, False) is not a
    )  # another rule object
    assert shared_failure(RULES[0], ("Insufficient cpu",), False, True) is not a
    assert failure_counts([a, a, shared_failure(RULES[0], ("Insufficient cpu",), False, False)]) == [(a, 3)]


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    table=st.lists(failure, min_size=1, max_size=6),
    rows=st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.one_of(st.none(), failure)), max_size=40),
)
def test_window_counts_are_the_counts_of_the_window_failures(
    table: list[FilterFailure], rows: list[tuple[bool, int, FilterFailure | None]]
) -> None:
    """Counting a window's failures from the table indexes and the resolved failures (no step per
    row) gives `failure_counts` of the failures in window order (a resolved None is no failure)."""
    later = np.array([deferred for deferred, _, _ in rows], dtype=bool)
    at = np.array([i % len(table) for deferred, i, _ in rows if not deferred], dtype=np.intp)
    resolved = [f for deferred, _, f in rows if deferred]
    in_order: list[FilterFailure] = []
    known, deferred_failures = iter(at.tolist()), iter(resolved)
    for deferred, _, _ in rows:
        f = next(deferred_failures) if deferred else table[next(known)]
        if f is not None:
            in_order.append(f)
    got = window_failure_counts(table, at, later, resolved)
    want = failure_counts(in_order)
    assert [(id(f), n) for f, n in got] == [(id(f), n) for f, n in want]


def test_window_counts_of_many_distinct_failures() -> None:
    """More distinct table entries than are looked for one by one: the same counts, in window order."""
    table = [FilterFailure(RULES[i % 3], (f"reason {i}",)) for i in range(40)]
    table.append(table[7])  # one object at two indexes counts once
    at = np.array([(i * 17) % 41 for i in range(300)], dtype=np.intp)
    later = np.zeros(300, dtype=bool)
    got = window_failure_counts(table, at, later, [])
    want = failure_counts([table[i] for i in at.tolist()])
    assert len(got) == 40
    assert [(id(f), n) for f, n in got] == [(id(f), n) for f, n in want]


class _Evaluator:
    """Answers the per-node function from a table by node name and counts its calls."""

    def __init__(self, answers: dict[str, FilterFailure | None]) -> None:
        self.answers, self.calls, self.cluster_called = answers, 0, False

    def reset_cluster_called(self) -> None:
        self.cluster_called = False

    def filter(self, cel: dict[str, str]) -> FilterFailure | None:
        self.calls += 1
        return self.answers[cel["name"]]


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    table=st.lists(failure, min_size=1, max_size=6),
    rows=st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.one_of(st.none(), failure)), max_size=30),
    resolve_first=st.booleans(),
)
def test_window_failures_map_each_failing_node_to_its_failure_in_window_order(
    table: list[FilterFailure], rows: list[tuple[bool, int, FilterFailure | None]], resolve_first: bool
) -> None:
    """A window's failures by node name: the known rows' table entries and the deferred rows' failures
    from the per-node function (run once, on first read; a None from it is no failure), in window order."""
    names = np.array([f"node-{i}" for i in range(len(rows) + 3)], dtype=object)
    failing = np.array([len(rows) + 2 - i for i in range(len(rows))], dtype=np.intp)  # window order
    later = np.array([deferred for deferred, _, _ in rows], dtype=bool)
    at = np.array([i % len(table) for deferred, i, _ in rows if not deferred], dtype=np.intp)
    known = WindowFailures(names, failing[~later], table, at)
    want_known = {
        str(names[row]): table[i] for row, i in zip(failing[~later].tolist(), at.tolist(), strict=True)
    }
    assert len(known) == len(want_known)
    assert list(known.items()) == list(want_known.items())

    answers = {
        str(names[row]): f for row, (deferred, _, f) in zip(failing.tolist(), rows, strict=True) if deferred
    }
    evaluator = _Evaluator(answers)
    nodes = [mock.Mock(cel={"name": name}) for name in answers]
    for node, name in zip(nodes, answers, strict=True):
        node.name = name
    pending = DeferredFailures(evaluator, names, failing, known, nodes)  # type: ignore[arg-type]
    assert evaluator.calls == 0
    if resolve_first:
        assert pending.resolve() == list(answers.values())
    want = {}
    for row, (deferred, i, f) in zip(failing.tolist(), rows, strict=True):
        got = f if deferred else table[i % len(table)]
        if got is not None:
            want[str(names[row])] = got
    assert list(pending.items()) == list(want.items())
    assert len(pending) == len(want)
    assert evaluator.calls == len(nodes)  # once each, however often read
