"""cel-go's math extension: greatest/least, rounding, abs/sign/sqrt, float tests, bit operations."""

from __future__ import annotations

import math
from typing import Any

import pytest

from policyd.cel.program import CelCompileError, compile_expression
from policyd.cel.values import UInt
from policyd.errors import CelEvalError
from tests.unit.cel.library_cases import ENV, ev


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("math.greatest(-5)", -5),
        ("math.greatest(1, 1.0)", 1),  # the first of equal values wins, with its type
        ("math.greatest(5u, -7)", UInt(5)),
        ("math.greatest(5.4, 10, 3u, -5.0, 1.797693e308)", 1.797693e308),
        ("math.greatest([5.4, 10.5, 3u, -5.0, 3.5])", 10.5),
        ("math.greatest(xs)", 3),
        ("math.least(-3, 3u)", -3),
        ("math.least(9223372036854775807, 1)", 1),
        ("math.least([dyn(5.4), dyn(10u), dyn(-5.0)])", -5.0),
        ("math.ceil(1.2)", 2.0),
        ("math.ceil(-1.2)", -1.0),
        ("math.floor(-1.2)", -2.0),
        ("math.round(2.5)", 3.0),  # half away from zero, not to even
        ("math.round(-2.5)", -3.0),
        ("math.round(0.49999999999999994)", 0.0),
        ("math.trunc(-1.9)", -1.0),
        ("math.abs(-5)", 5),
        ("math.abs(-5.5)", 5.5),
        ("math.abs(5u)", UInt(5)),
        ("math.sign(-42)", -1),
        ("math.sign(0u)", UInt(0)),
        ("math.sign(-0.3)", -1.0),
        ("math.sqrt(49)", 7.0),
        ("math.sqrt(2.25)", 1.5),
        ("math.isInf(1.0 / 0.0)", True),
        ("math.isNaN(0.0 / 0.0)", True),
        ("math.isFinite(1.2)", True),
        ("math.bitAnd(3, 5)", 1),
        ("math.bitOr(3u, 5u)", UInt(7)),
        ("math.bitXor(3, 5)", 6),
        ("math.bitNot(1)", -2),
        ("math.bitNot(0u)", UInt(18446744073709551615)),
        ("math.bitShiftLeft(1, 2)", 4),
        ("math.bitShiftLeft(1, 63)", -9223372036854775808),  # wraps as Go's int64
        ("math.bitShiftLeft(1, 64)", 0),
        ("math.bitShiftLeft(1u, 65)", UInt(0)),
        ("math.bitShiftRight(-1024, 3)", 2305843009213693824),  # a logical shift
        ("math.bitShiftRight(1024u, 64)", UInt(0)),
    ],
)
def test_math_functions(text: str, expected: Any) -> None:
    got = ev(text, xs=[1, 3, 2])
    assert got == expected and type(got) is type(expected)


def test_nan_results() -> None:
    assert math.isnan(ev("math.sqrt(-1)"))
    assert math.isnan(ev("math.sign(0.0 / 0.0)"))
    assert ev("math.ceil(1.0 / 0.0)") == math.inf


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("math.abs(-9223372036854775808)", "int64 overflow"),
        ("math.greatest([])", "argument must not be empty"),
        ("math.bitShiftLeft(1, -2)", "negative offset"),
        ("math.greatest(dyn('a'), 1)", "no such overload"),
    ],
)
def test_math_errors(text: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=message):
        ev(text)


@pytest.mark.parametrize(
    "text",
    [
        "math.greatest()",
        "math.greatest('a')",
        "math.least(1, 'b')",
        "math.greatest(1, 2, 'c')",
        "math.ceil(1)",
    ],
)
def test_math_check_errors(text: str) -> None:
    with pytest.raises(CelCompileError):
        compile_expression(text, ENV)


def test_greatest_of_one_type_keeps_the_type() -> None:
    assert str(compile_expression("math.greatest(1, 2)", ENV).type) == "int"
    assert str(compile_expression("math.least([1.0, 2.0])", ENV).type) == "double"
