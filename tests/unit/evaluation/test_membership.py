"""`node.labels[k] in map` over a label column: the same truth and errors, row by row, as CEL's `in`
on each row's value, whichever side (the map's keys or the values present) is looked up."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policyd.cel import runtime as rt
from policyd.evaluation.columnar import Cat, EvalErr, Num, member_of
from policyd.evaluation.columns import Categorical

VOCABULARY = [f"host-{i}" for i in range(300)]


def label_cat(rows: list[int | None], vocabulary: int) -> Cat:
    """The categorical an interpreter makes of `node.labels[key]`: None rows lack the key."""
    column = Categorical(len(rows))
    for value in VOCABULARY[:vocabulary]:
        column.code_of(value)
    strings = len(column.values)
    codes = np.array([strings if r is None else r for r in rows], dtype=np.intp)
    return Cat(codes, [*column.values, EvalErr("no such key")], column.index, strings)


@settings(max_examples=80, deadline=None)
@given(
    vocabulary=st.sampled_from([5, 40, 300]),
    data=st.data(),
    keys=st.lists(st.sampled_from([*VOCABULARY, "other", 7, True]), max_size=120),
)
def test_membership_matches_cel_in_row_by_row(
    vocabulary: int, data: st.DataObject, keys: list[object]
) -> None:
    rows = data.draw(st.lists(st.one_of(st.none(), st.integers(0, vocabulary - 1)), min_size=1, max_size=30))
    container = {k: 1 for k in keys}
    cat = label_cat(rows, vocabulary)
    got = member_of(cat, container)
    assert isinstance(got, Num)
    for i, row in enumerate(rows):
        if row is None:
            assert got.err is not None and got.err[i]
            continue
        assert got.err is None or not got.err[i]
        assert bool(got.values[i]) is rt.in_(VOCABULARY[row], container)
    over = got.over
    assert over is not None
    assert [over.values[c] for c in over.codes] == [
        EvalErr("no such key") if r is None else got.values[i].item() for i, r in enumerate(rows)
    ]


@pytest.mark.parametrize("size", [1, 250])
def test_both_lookups_agree_on_a_window_of_a_large_vocabulary(size: int) -> None:
    cat = label_cat([3, 3, 17, 250, None, 299], 300)
    container = {VOCABULARY[i]: i for i in range(0, 300, 300 // size)}
    got = member_of(cat, container)
    want = [VOCABULARY[r] in container for r in (3, 3, 17, 250)]
    assert got.values[:4].tolist() == want
    assert got.err is not None and got.err.tolist() == [False] * 4 + [True, False]
