"""cel-go's math extension: `math.greatest`, `math.least`, rounding, `abs`, `sign`, `sqrt`, the
floating-point tests and the bit operations, with cel-go's overflow and error semantics.

`math.greatest` / `math.least` take one number, one list of numbers, or 2 to `MAX_ARGS` numbers of any
numeric types (ints, uints and doubles compare as numbers; the first of equal values wins).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel import syntax as ast
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.types import BOOL, DOUBLE, DYN, INT, UINT, CelType, ListType
from policyd.cel.values import UInt
from policyd.errors import CelEvalError

MAX_ARGS = 32
"""The most arguments `math.greatest` / `math.least` accept in the variadic form (a list has no limit)."""

_MASK64 = (1 << 64) - 1
_NUMERIC: tuple[CelType, ...] = (INT, UINT, DOUBLE)


def _is_number(v: Any) -> bool:
    t = type(v)
    return t is int or t is UInt or t is float


def _extreme(name: str, values: Any, better: Callable[[Any, Any], bool]) -> Any:
    if not values:
        raise CelEvalError(f"{name}(list) argument must not be empty")
    best = values[0]
    if not _is_number(best):
        raise rt.no_overload(name, best)
    for v in values[1:]:
        if not _is_number(v):
            raise rt.no_overload(name, v)
        if better(v, best):
            best = v
    return best


def greatest(*args: Any) -> Any:
    """`math.greatest(...)`: the largest number of the arguments (or of the one list argument)."""
    values = args[0] if len(args) == 1 and isinstance(args[0], list | tuple) else args
    return _extreme("math.@max", values, rt.gt)


def least(*args: Any) -> Any:
    """`math.least(...)`: the smallest number of the arguments (or of the one list argument)."""
    values = args[0] if len(args) == 1 and isinstance(args[0], list | tuple) else args
    return _extreme("math.@min", values, rt.lt)


def _double(v: Any, name: str) -> float:
    if type(v) is float:
        return v  # type: ignore[no-any-return]
    raise rt.no_overload(name, v)


def _integral(v: Any, name: str, fn: Callable[[float], int]) -> float:
    x = _double(v, name)
    if math.isnan(x) or math.isinf(x):
        return x
    return math.copysign(float(fn(x)), x)


def ceil(v: Any) -> float:
    """`math.ceil(double)`."""
    return _integral(v, "math.ceil", math.ceil)


def floor(v: Any) -> float:
    """`math.floor(double)`."""
    return _integral(v, "math.floor", math.floor)


def trunc(v: Any) -> float:
    """`math.trunc(double)`: toward zero."""
    return _integral(v, "math.trunc", math.trunc)


def _round_half_away(x: float) -> int:
    t = math.trunc(x)
    return t + (1 if x > 0 else -1) if abs(x - t) >= 0.5 else t


def round_(v: Any) -> float:
    """`math.round(double)`: half away from zero (Go's math.Round)."""
    return _integral(v, "math.round", _round_half_away)


def is_inf(v: Any) -> bool:
    """`math.isInf(double)`."""
    return math.isinf(_double(v, "math.isInf"))


def is_nan(v: Any) -> bool:
    """`math.isNaN(double)`."""
    return math.isnan(_double(v, "math.isNaN"))


def is_finite(v: Any) -> bool:
    """`math.isFinite(double)`."""
    return math.isfinite(_double(v, "math.isFinite"))


def abs_(v: Any) -> Any:
    """`math.abs(number)`; the absolute value of the smallest int is an overflow."""
    t = type(v)
    if t is int:
        return rt.check_int(abs(v))
    if t is UInt:
        return v
    if t is float:
        return abs(v)
    raise rt.no_overload("math.abs", v)


def sign(v: Any) -> Any:
    """`math.sign(number)`: -1, 0 or 1 of the argument's type (NaN stays NaN)."""
    t = type(v)
    if t is int:
        return (v > 0) - (v < 0)
    if t is UInt:
        return UInt(1 if v else 0)
    if t is float:
        if math.isnan(v):
            return v
        return 1.0 if v > 0 else -1.0 if v < 0 else 0.0
    raise rt.no_overload("math.sign", v)


def sqrt(v: Any) -> float:
    """`math.sqrt(number)` as a double (NaN for negative numbers)."""
    if not _is_number(v):
        raise rt.no_overload("math.sqrt", v)
    x = float(v)
    if x < 0 or math.isnan(x):
        return math.nan
    return math.sqrt(x)


def _bits(name: str, a: Any, b: Any) -> None:
    if not (type(a) is type(b) and type(a) in (int, UInt)):
        raise rt.no_overload(name, a, b)


def _signed(n: int) -> int:
    n &= _MASK64
    return n - (1 << 64) if n >> 63 else n


def bit_and(a: Any, b: Any) -> Any:
    """`math.bitAnd(x, y)` of two ints or two uints."""
    _bits("math.bitAnd", a, b)
    return UInt(a & b) if type(a) is UInt else a & b


def bit_or(a: Any, b: Any) -> Any:
    """`math.bitOr(x, y)` of two ints or two uints."""
    _bits("math.bitOr", a, b)
    return UInt(a | b) if type(a) is UInt else a | b


def bit_xor(a: Any, b: Any) -> Any:
    """`math.bitXor(x, y)` of two ints or two uints."""
    _bits("math.bitXor", a, b)
    return UInt(a ^ b) if type(a) is UInt else a ^ b


def bit_not(a: Any) -> Any:
    """`math.bitNot(x)`: the bitwise complement of an int or a uint."""
    if type(a) is int:
        return ~a
    if type(a) is UInt:
        return UInt(~int(a) & _MASK64)
    raise rt.no_overload("math.bitNot", a)


def _shift(name: str, value: Any, bits: Any) -> int:
    if type(value) not in (int, UInt) or type(bits) is not int:
        raise rt.no_overload(name, value, bits)
    if bits < 0:
        raise CelEvalError(f"{name}() negative offset: {bits}")
    return int(bits)


def bit_shift_left(value: Any, bits: Any) -> Any:
    """`math.bitShiftLeft(x, n)`: bits shifted out of the 64 are lost."""
    n = _shift("math.bitShiftLeft", value, bits)
    shifted = (int(value) << n) & _MASK64 if n < 64 else 0
    return UInt(shifted) if type(value) is UInt else _signed(shifted)


def bit_shift_right(value: Any, bits: Any) -> Any:
    """`math.bitShiftRight(x, n)`: a logical shift (an int's sign bit is not extended)."""
    n = _shift("math.bitShiftRight", value, bits)
    shifted = (int(value) & _MASK64) >> n if n < 64 else 0
    return UInt(shifted) if type(value) is UInt else _signed(shifted)


def _numeric_literal(name: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        numeric = type(value) in (int, float) or isinstance(value, ast.UInt)
        return None if numeric else f"{name} simple literal arguments must be numeric"

    return check


def _extreme_decl(name: str, oid: str, impl: Callable[..., Any]) -> FunctionDecl:
    check = _numeric_literal(name)
    overloads: list[Overload] = []
    for t in _NUMERIC:
        tn = str(t)
        overloads.append(Overload(f"{oid}_{tn}", (t,), t, impl=impl, literal_checks=((0, check),)))
        overloads.append(Overload(f"{oid}_list_{tn}", (ListType(t),), t, impl=impl))
    for a in _NUMERIC:
        for b in _NUMERIC:
            result = a if a == b else DYN
            checks: tuple[tuple[int, Callable[[Any], str | None]], ...] = ((0, check), (1, check))
            overloads.append(Overload(f"{oid}_{a}_{b}", (a, b), result, impl=impl, literal_checks=checks))
    for n in range(3, MAX_ARGS + 1):
        checks = tuple((i, check) for i in range(n))  # every argument
        overloads.append(Overload(f"{oid}_dyn_{n}", (DYN,) * n, DYN, impl=impl, literal_checks=checks))
    return FunctionDecl(name, tuple(overloads))


def _g(name: str, *overloads: tuple[str, tuple[CelType, ...], CelType, Callable[..., Any]]) -> FunctionDecl:
    return FunctionDecl(
        name, tuple(Overload(oid, params, result, impl=impl) for oid, params, result, impl in overloads)
    )


@functools.cache
def math_functions() -> dict[str, FunctionDecl]:
    """The math extension's declarations, by (namespaced) function name."""
    decls = [
        _extreme_decl("math.greatest", "math_greatest", greatest),
        _extreme_decl("math.least", "math_least", least),
        _g("math.ceil", ("math_ceil_double", (DOUBLE,), DOUBLE, ceil)),
        _g("math.floor", ("math_floor_double", (DOUBLE,), DOUBLE, floor)),
        _g("math.round", ("math_round_double", (DOUBLE,), DOUBLE, round_)),
        _g("math.trunc", ("math_trunc_double", (DOUBLE,), DOUBLE, trunc)),
        _g("math.isInf", ("math_isInf_double", (DOUBLE,), BOOL, is_inf)),
        _g("math.isNaN", ("math_isNaN_double", (DOUBLE,), BOOL, is_nan)),
        _g("math.isFinite", ("math_isFinite_double", (DOUBLE,), BOOL, is_finite)),
        _g("math.abs", *((f"math_abs_{t}", (t,), t, abs_) for t in _NUMERIC)),
        _g("math.sign", *((f"math_sign_{t}", (t,), t, sign) for t in _NUMERIC)),
        _g("math.sqrt", *((f"math_sqrt_{t}", (t,), DOUBLE, sqrt) for t in _NUMERIC)),
        _g("math.bitAnd", *((f"math_bitAnd_{t}_{t}", (t, t), t, bit_and) for t in (INT, UINT))),
        _g("math.bitOr", *((f"math_bitOr_{t}_{t}", (t, t), t, bit_or) for t in (INT, UINT))),
        _g("math.bitXor", *((f"math_bitXor_{t}_{t}", (t, t), t, bit_xor) for t in (INT, UINT))),
        _g("math.bitNot", *((f"math_bitNot_{t}_{t}", (t,), t, bit_not) for t in (INT, UINT))),
        _g(
            "math.bitShiftLeft",
            *((f"math_bitShiftLeft_{t}_int", (t, INT), t, bit_shift_left) for t in (INT, UINT)),
        ),
        _g(
            "math.bitShiftRight",
            *((f"math_bitShiftRight_{t}_int", (t, INT), t, bit_shift_right) for t in (INT, UINT)),
        ),
    ]
    return {d.name: d for d in decls}
