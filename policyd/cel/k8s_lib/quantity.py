"""Kubernetes' quantity library: `quantity(s)`, `isQuantity`, arithmetic and comparisons.

Declarations follow k8s.io/apiserver/pkg/cel/library/quantity.go; quantities are parsed by
`policyd.quantity` and carried as `policyd.cel.values.Quantity` (exact fractions).
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.env import member_overload as _m
from policyd.cel.library_types import QUANTITY_TYPE
from policyd.cel.types import BOOL, DOUBLE, INT, STRING
from policyd.cel.values import INT64_MAX, INT64_MIN, Quantity
from policyd.errors import CelEvalError
from policyd.quantity import format_quantity, parse_quantity

QUANTITY = QUANTITY_TYPE


def quantity(text: Any) -> Quantity:
    """`quantity(string)`: parse a Kubernetes quantity; malformed text is an error."""
    if type(text) is not str:
        raise rt.no_overload("quantity", text)
    try:
        return Quantity(parse_quantity(text), text)
    except Exception as e:  # noqa: BLE001 - any parse failure is a CEL error
        raise CelEvalError(f"invalid quantity {text!r}: {e}") from None


def is_quantity(text: Any) -> bool:
    """`isQuantity(string)`."""
    try:
        quantity(text)
    except CelEvalError:
        return False
    return True


def _q(v: Any) -> Fraction:
    if type(v) is Quantity:
        return v.value
    if type(v) is int:
        return Fraction(v)
    raise rt.no_overload("quantity operation", v)


def _format(value: Fraction) -> Quantity:
    return Quantity(value, format_quantity(value))


def q_add(a: Any, b: Any) -> Quantity:
    """`q.add(quantity|int)`."""
    return _format(_q(a) + _q(b))


def q_sub(a: Any, b: Any) -> Quantity:
    """`q.sub(quantity|int)`."""
    return _format(_q(a) - _q(b))


def q_is_greater_than(a: Any, b: Any) -> bool:
    """`q.isGreaterThan(q2)`."""
    return _q(a) > _q(b)


def q_is_less_than(a: Any, b: Any) -> bool:
    """`q.isLessThan(q2)`."""
    return _q(a) < _q(b)


def q_compare_to(a: Any, b: Any) -> int:
    """`q.compareTo(q2)`: -1, 0 or 1."""
    x, y = _q(a), _q(b)
    return (x > y) - (x < y)


def q_sign(a: Any) -> int:
    """`sign(q)`: -1, 0 or 1 (a global function in Kubernetes, though its docs write `q.sign()`)."""
    x = _q(a)
    return (x > 0) - (x < 0)


def q_is_integer(a: Any) -> bool:
    """`q.isInteger()`: the value is integral and fits int64."""
    x = _q(a)
    return x.denominator == 1 and INT64_MIN <= x.numerator <= INT64_MAX


def q_as_integer(a: Any) -> int:
    """`q.asInteger()`: error when not integral or out of int64 range."""
    if not q_is_integer(a):
        raise CelEvalError("cannot convert value to integer")
    return int(_q(a))


def q_as_approximate_float(a: Any) -> float:
    """`q.asApproximateFloat()`."""
    return float(_q(a))


@functools.cache
def quantity_functions() -> dict[str, FunctionDecl]:
    """The quantity library's declarations, by function name."""
    q = QUANTITY
    decls = [
        FunctionDecl("quantity", (Overload("string_to_quantity", (STRING,), q, impl=quantity),)),
        FunctionDecl("isQuantity", (Overload("is_quantity_string", (STRING,), BOOL, impl=is_quantity),)),
        FunctionDecl(
            "add",
            (
                _m("quantity_add", (q, q), q, q_add),
                _m("quantity_add_int", (q, INT), q, q_add),
            ),
        ),
        FunctionDecl(
            "sub",
            (
                _m("quantity_sub", (q, q), q, q_sub),
                _m("quantity_sub_int", (q, INT), q, q_sub),
            ),
        ),
        FunctionDecl("isGreaterThan", (_m("quantity_is_greater_than", (q, q), BOOL, q_is_greater_than),)),
        FunctionDecl("isLessThan", (_m("quantity_is_less_than", (q, q), BOOL, q_is_less_than),)),
        FunctionDecl("compareTo", (_m("quantity_compare_to", (q, q), INT, q_compare_to),)),
        FunctionDecl("sign", (Overload("quantity_sign", (q,), INT, impl=q_sign),)),
        FunctionDecl("isInteger", (_m("quantity_is_integer", (q,), BOOL, q_is_integer),)),
        FunctionDecl("asInteger", (_m("quantity_as_integer", (q,), INT, q_as_integer),)),
        FunctionDecl(
            "asApproximateFloat", (_m("quantity_as_approximate_float", (q,), DOUBLE, q_as_approximate_float),)
        ),
    ]
    return {d.name: d for d in decls}
