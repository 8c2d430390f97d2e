"""Kubernetes' list library: sum, min, max, indexOf, lastIndexOf, isSorted, typed per element type."""

from __future__ import annotations

from typing import Any

import pytest

from policyd.cel.program import CelCompileError, compile_expression, standard_env
from policyd.cel.types import DOUBLE, DURATION, UINT, list_of
from policyd.cel.values import Duration, UInt
from policyd.errors import CelEvalError
from tests.unit.cel.library_cases import ENV, ev


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1, 2, 3].sum()", 6),
        ("[1.5, 2.5].sum()", 4.0),
        ("[1u, 2u].sum()", UInt(3)),
        ("[duration('1s'), duration('2m')].sum()", Duration(121_000_000_000)),
        ("[3, 1, 2].min()", 1),
        ("['b', 'a'].min()", "a"),
        ("[3, 1, 2].max()", 3),
        ("[timestamp('2024-01-01T00:00:00Z'), timestamp('2023-01-01T00:00:00Z')].max() > timestamp(0)", True),
        ("[1, 2, 3, 2].indexOf(2)", 1),
        ("[1, 2, 3, 2].lastIndexOf(2)", 3),
        ("[1, 2, 3].indexOf(4)", -1),
        ("dyn([1.0, 2.0]).indexOf(2)", 1),  # CEL equality across numeric types
        ("[1, 2, 2, 3].isSorted()", True),
        ("['b', 'a'].isSorted()", False),
        ("[].isSorted()", True),
    ],
)
def test_list_functions(text: str, expected: Any) -> None:
    got = ev(text)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(("t", "zero"), [(DOUBLE, 0.0), (UINT, UInt(0)), (DURATION, Duration(0))])
def test_sum_of_an_empty_list_is_the_zero_of_its_type(t: Any, zero: Any) -> None:
    got = compile_expression("xs.sum()", standard_env({"xs": list_of(t)})).evaluate({"xs": []})
    assert got == zero and type(got) is type(zero)


@pytest.mark.parametrize(("text", "message"), [("xs.min()", "min called on empty list"), ("xs.max()", "max")])
def test_min_max_of_an_empty_list_are_errors(text: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=message):
        ev(text, xs=[])


@pytest.mark.parametrize("text", ["[true].sum()", "['a'].sum()", "[[1]].min()", "[{'a': 1}].isSorted()"])
def test_element_types_outside_the_library_are_check_errors(text: str) -> None:
    with pytest.raises(CelCompileError, match="found no matching overload"):
        compile_expression(text, ENV)
