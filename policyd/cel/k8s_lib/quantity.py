"""Kubernetes' quantity library: `quantity(s)`, `isQuantity`, arithmetic and comparisons.

Declarations follow k8s.io/apiserver/pkg/cel/library/quantity.go; quantities are parsed by
`policyd.quantity` and carried as `policyd.cel.values.Quantity` (exact fractions). `isInteger` and
`asInteger` are apimachinery's `Quantity.AsInt64`, which answers from how the value is held, not from
the value alone: `quantity("1000m").isInteger()` is false, as `quantity("1k")` is true. So each
quantity also carries that form (`int64Amount` or not), from parsing (`policyd.quantity.int64_amount`) and through
`add` / `sub` / `mul` / `div` / `divInt` as apimachinery's arithmetic keeps or leaves it.

`mul(int)`, `div(int)`, `div(int, digits)` and `divInt(int)` are the later library's (quantity.go with
apimachinery's `Quantity.Mul`, `QuoRound` and `QuoIntegerDivision`): `div` keeps `digits` decimal places
(4 unless given, at most 10), `divInt` none, both cutting toward zero; division by zero is an error. The
value stays exact where apimachinery caps a result at 2^63-1 in magnitude: that library's own test
expects `quantity("1329227995784915872903807060280344576").div(256)` to equal
`quantity("5192296858534827628530496329220096")`, which the cap would break; and a quotient whose last
kept digit is 0 keeps its fraction (`quantity("3").div(2)` is 1.5, where `QuoRound`'s int64 shortcut
drops the fraction of such a quotient and gives 1).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.env import member_overload as _m
from policyd.cel.library_types import QUANTITY_TYPE
from policyd.cel.types import BOOL, DOUBLE, INT, STRING
from policyd.cel.values import INT64_MAX, INT64_MIN, Quantity
from policyd.errors import CelEvalError
from policyd.quantity import QuantityError, format_quantity, int64_amount, parse_quantity

QUANTITY = QUANTITY_TYPE


def quantity(text: Any) -> Quantity:
    """`quantity(string)`: parse a Kubernetes quantity; malformed text is an error."""
    if type(text) is not str:
        raise rt.no_overload("quantity", text)
    try:
        value = parse_quantity(text)
    except QuantityError as e:  # apimachinery's error text, as the Kubernetes library reports it
        raise CelEvalError(e.reason) from None
    amount = int64_amount(text)
    return Quantity(value, text, amount)


# --- how apimachinery holds a quantity through arithmetic (int64Amount) ---------------------------


def _int64(v: int) -> int | None:
    return v if INT64_MIN <= v <= INT64_MAX else None


def _scaled(value: int, scale: int) -> int | None:
    """positiveScaleInt64: value x 10^scale, None on int64 overflow."""
    return _int64(value * 10**scale)


def _add_amounts(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    """int64Amount.Add: the sum at the smaller scale, None when it leaves int64."""
    (av, ascale), (bv, bscale) = a, b
    if bv == 0:
        return a
    if av == 0:
        return b
    if ascale > bscale:
        shifted = _scaled(av, ascale - bscale)
        total = None if shifted is None else _int64(shifted + bv)
        return None if total is None else (total, bscale)
    shifted = _scaled(bv, bscale - ascale)
    total = None if shifted is None else _int64(av + shifted)
    return None if total is None else (total, ascale)


def _arith(a: Any, b: Any, negate: bool) -> Quantity:
    x, y = _q(a), _q(b)
    value = x - y if negate else x + y
    ha, hb = _held(a), _held(b)
    amount = None
    if ha is not None and hb is not None and not (negate and hb[0] == INT64_MIN):
        amount = _add_amounts(ha, (-hb[0], hb[1]) if negate else hb)
    return Quantity(value, format_quantity(value), amount)


def _held(v: Any) -> tuple[int, int] | None:
    if type(v) is Quantity:
        return v.amount
    return (v, 0)  # an int operand: resource.NewQuantity(v, DecimalExponent)


def _int_operand(v: Any, name: str) -> int:
    if type(v) is not int:
        raise rt.no_overload(name, v)
    return v


def q_mul(a: Any, b: Any) -> Quantity:
    """`q.mul(int)`: the product; held as int64Amount while the mantissa times `b` fits int64."""
    factor = _int_operand(b, "mul")
    value = _q(a) * factor
    held = _held(a)
    amount = None
    if held is not None and (mantissa := _int64(held[0] * factor)) is not None:
        amount = (mantissa, held[1])
    return Quantity(value, format_quantity(value), amount)


DIV_DIGITS = 4  # `div(int)`: QuoRound's digits when none are given
MAX_DIV_DIGITS = 10


def _divide(a: Any, b: Any, digits: Any, name: str) -> Quantity:
    """The quotient cut toward zero to `digits` decimal places (`div`), or to a whole number (`divInt`)."""
    divisor = _int_operand(b, name)
    places = _int_operand(digits, name)
    x = _q(a)
    if divisor == 0:
        raise CelEvalError("division by zero")
    if places < 0:
        raise CelEvalError("negative rounding values are not allowed")
    if places > MAX_DIV_DIGITS:
        raise CelEvalError(
            f"the maximum value for rounding float division is {MAX_DIV_DIGITS} but {places} was passed"
        )
    unit = 10**places
    value = Fraction(math.trunc(x / divisor * unit), unit)
    # QuoIntegerDivision holds a whole result as int64Amount; QuoRound only one of an int64-held operand
    amount = None
    whole = value.denominator == 1 and (name == "divInt" or _as_int64(a) is not None)
    if whole and (v := _int64(value.numerator)) is not None:
        amount = (v, 0)
    return Quantity(value, format_quantity(value), amount)


def q_div(a: Any, b: Any, digits: Any = DIV_DIGITS) -> Quantity:
    """`q.div(int)` / `q.div(int, digits)`: the quotient cut toward zero to `digits` decimal places."""
    return _divide(a, b, digits, "div")


def q_div_int(a: Any, b: Any) -> Quantity:
    """`q.divInt(int)`: the integer quotient, cut toward zero."""
    return _divide(a, b, 0, "divInt")


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


def q_add(a: Any, b: Any) -> Quantity:
    """`q.add(quantity|int)`."""
    return _arith(a, b, negate=False)


def q_sub(a: Any, b: Any) -> Quantity:
    """`q.sub(quantity|int)`."""
    return _arith(a, b, negate=True)


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


def _as_int64(a: Any) -> int | None:
    """Quantity.AsInt64: only an int64Amount at scale 0 or above whose value fits int64."""
    _q(a)
    held = _held(a)
    if held is None or held[1] < 0:
        return None
    return _scaled(*held)


def q_is_integer(a: Any) -> bool:
    """`q.isInteger()`: `asInteger` would succeed."""
    return _as_int64(a) is not None


def q_as_integer(a: Any) -> int:
    """`q.asInteger()`: error when apimachinery cannot give the value as an int64 directly."""
    value = _as_int64(a)
    if value is None:
        raise CelEvalError("cannot convert value to integer")
    return value


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
        FunctionDecl("mul", (_m("quantity_multiply_int", (q, INT), q, q_mul),)),
        FunctionDecl(
            "div",
            (
                _m("quantity_divide_int_default_rounding", (q, INT), q, q_div),
                _m("quantity_divide_int_round", (q, INT, INT), q, q_div),
            ),
        ),
        FunctionDecl("divInt", (_m("quantity_divide_int", (q, INT), q, q_div_int),)),
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
