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
from policyd.scheduler.algorithm.failures import failure_counts, window_failure_counts
from policyd.scheduler.attempts import NO_NODE_AVAILABLE, fit_error_message

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
