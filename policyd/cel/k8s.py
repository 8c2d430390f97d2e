"""The Kubernetes CEL library subset a scheduler needs: quantity, list, string and regex functions.

Declarations follow the Kubernetes CEL library (k8s.io/apiserver/pkg/cel/library); `k8s_functions()`
returns name -> FunctionDecl with implementations. Quantities are parsed by `policyd.quantity`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.types import BOOL, DOUBLE, INT, STRING, CelType, ListType, OpaqueType, TypeParam
from policyd.cel.values import INT64_MAX, INT64_MIN, Quantity
from policyd.errors import CelEvalError
from policyd.quantity import format_quantity, parse_quantity

QUANTITY = OpaqueType("kubernetes.Quantity")
A = TypeParam("A")
LIST_A = ListType(A)


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
    """`q.sign()`."""
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


# -- lists ---------------------------------------------------------------------------------------


def _list(v: Any, name: str) -> list[Any] | tuple[Any, ...]:
    if isinstance(v, list | tuple):
        return v
    raise rt.no_overload(name, v)


def list_sum(v: Any) -> Any:
    """`list.sum()` of ints, uints, doubles or durations (0 of the element type when empty)."""
    items = _list(v, "sum")
    if not items:
        return 0
    total = items[0]
    for x in items[1:]:
        total = rt.add(total, x)
    return total


def list_min(v: Any) -> Any:
    """`list.min()`; empty list is an error."""
    items = _list(v, "min")
    if not items:
        raise CelEvalError("min called on an empty list")
    best = items[0]
    for x in items[1:]:
        if rt.lt(x, best):
            best = x
    return best


def list_max(v: Any) -> Any:
    """`list.max()`; empty list is an error."""
    items = _list(v, "max")
    if not items:
        raise CelEvalError("max called on an empty list")
    best = items[0]
    for x in items[1:]:
        if rt.gt(x, best):
            best = x
    return best


def list_index_of(v: Any, x: Any) -> int:
    """`list.indexOf(x)`: first index, -1 when absent."""
    for i, item in enumerate(_list(v, "indexOf")):
        if rt.eq(item, x):
            return i
    return -1


def list_last_index_of(v: Any, x: Any) -> int:
    """`list.lastIndexOf(x)`: last index, -1 when absent."""
    items = _list(v, "lastIndexOf")
    for i in range(len(items) - 1, -1, -1):
        if rt.eq(items[i], x):
            return i
    return -1


def list_is_sorted(v: Any) -> bool:
    """`list.isSorted()`."""
    items = _list(v, "isSorted")
    return all(rt.le(items[i], items[i + 1]) for i in range(len(items) - 1))


# -- strings -------------------------------------------------------------------------------------


def _s(v: Any, name: str) -> str:
    if type(v) is str:
        return v
    raise rt.no_overload(name, v)


def _i(v: Any, name: str) -> int:
    if type(v) is int:
        return v
    raise rt.no_overload(name, v)


def lower_ascii(s: Any) -> str:
    """`s.lowerAscii()`: only ASCII letters change."""
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in _s(s, "lowerAscii"))


def upper_ascii(s: Any) -> str:
    """`s.upperAscii()`."""
    return "".join(c.upper() if "a" <= c <= "z" else c for c in _s(s, "upperAscii"))


def split(s: Any, sep: Any, limit: Any = -1) -> list[str]:
    """`s.split(sep[, limit])` with Go strings.SplitN semantics."""
    text, separator, n = _s(s, "split"), _s(sep, "split"), _i(limit, "split")
    if n == 0:
        return []
    if separator == "":
        chars = list(text)
        if 0 < n < len(chars):
            return [*chars[: n - 1], "".join(chars[n - 1 :])]
        return chars
    if n < 0:
        return text.split(separator)
    return text.split(separator, n - 1)


def join(v: Any, sep: Any = "") -> str:
    """`list.join([sep])` of strings."""
    items = _list(v, "join")
    for x in items:
        _s(x, "join")
    return _s(sep, "join").join(items)


def replace(s: Any, old: Any, new: Any, limit: Any = -1) -> str:
    """`s.replace(old, new[, n])` (n < 0: all)."""
    text, o, n_, k = _s(s, "replace"), _s(old, "replace"), _s(new, "replace"), _i(limit, "replace")
    return text.replace(o, n_) if k < 0 else text.replace(o, n_, k)


def trim(s: Any) -> str:
    """`s.trim()`: strip Unicode white space."""
    return _s(s, "trim").strip()


def _check_index(i: int, n: int) -> None:
    if i < 0 or i > n:
        raise CelEvalError(f"index out of range: {i}")


def index_of(s: Any, sub: Any, start: Any = 0) -> int:
    """`s.indexOf(sub[, start])` in code points; -1 when absent."""
    text, needle, offset = _s(s, "indexOf"), _s(sub, "indexOf"), _i(start, "indexOf")
    _check_index(offset, len(text))
    return text.find(needle, offset)


def last_index_of(s: Any, sub: Any, end: Any = None) -> int:
    """`s.lastIndexOf(sub[, end])` in code points; -1 when absent."""
    text, needle = _s(s, "lastIndexOf"), _s(sub, "lastIndexOf")
    if end is None:
        return text.rfind(needle)
    offset = _i(end, "lastIndexOf")
    _check_index(offset, len(text))
    return text.rfind(needle, 0, offset + len(needle))


def substring(s: Any, start: Any, end: Any = None) -> str:
    """`s.substring(start[, end])` in code points; bad ranges are errors."""
    text = _s(s, "substring")
    a = _i(start, "substring")
    b = len(text) if end is None else _i(end, "substring")
    _check_index(a, len(text))
    _check_index(b, len(text))
    if a > b:
        raise CelEvalError(f"invalid substring range: start {a} > end {b}")
    return text[a:b]


def char_at(s: Any, i: Any) -> str:
    """`s.charAt(i)`: the code point at i ("" at the end)."""
    text, k = _s(s, "charAt"), _i(i, "charAt")
    _check_index(k, len(text))
    return text[k : k + 1]


def find(s: Any, pattern: Any) -> str:
    """`s.find(regex)`: first match or ""."""
    m = rt.compile_regex(_s(pattern, "find")).search(_s(s, "find"))
    return m.group(0) if m else ""


def find_all(s: Any, pattern: Any, limit: Any = -1) -> list[str]:
    """`s.findAll(regex[, n])`: all (at most n) matches."""
    n = _i(limit, "findAll")
    if n == 0:
        return []
    out = [m.group(0) for m in rt.compile_regex(_s(pattern, "findAll")).finditer(_s(s, "find"))]
    return out if n < 0 else out[:n]


def _m(oid: str, params: tuple[CelType, ...], result: CelType, impl: Callable[..., Any]) -> Overload:
    return Overload(oid, params, result, member=True, impl=impl)


@functools.cache
def k8s_functions() -> dict[str, FunctionDecl]:
    """The Kubernetes CEL library declarations (quantity, lists, strings, regex), by name."""
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
        FunctionDecl("sign", (_m("quantity_sign", (q,), INT, q_sign),)),
        FunctionDecl("isInteger", (_m("quantity_is_integer", (q,), BOOL, q_is_integer),)),
        FunctionDecl("asInteger", (_m("quantity_as_integer", (q,), INT, q_as_integer),)),
        FunctionDecl(
            "asApproximateFloat", (_m("quantity_as_approximate_float", (q,), DOUBLE, q_as_approximate_float),)
        ),
        FunctionDecl("sum", (_m("list_sum", (LIST_A,), A, list_sum),)),
        FunctionDecl("min", (_m("list_min", (LIST_A,), A, list_min),)),
        FunctionDecl("max", (_m("list_max", (LIST_A,), A, list_max),)),
        FunctionDecl(
            "indexOf",
            (
                _m("list_a_index_of_int", (LIST_A, A), INT, list_index_of),
                _m("string_index_of", (STRING, STRING), INT, index_of),
                _m("string_index_of_offset", (STRING, STRING, INT), INT, index_of),
            ),
        ),
        FunctionDecl(
            "lastIndexOf",
            (
                _m("list_a_last_index_of_int", (LIST_A, A), INT, list_last_index_of),
                _m("string_last_index_of", (STRING, STRING), INT, last_index_of),
                _m("string_last_index_of_offset", (STRING, STRING, INT), INT, last_index_of),
            ),
        ),
        FunctionDecl("isSorted", (_m("list_is_sorted", (LIST_A,), BOOL, list_is_sorted),)),
        FunctionDecl("lowerAscii", (_m("string_lower_ascii", (STRING,), STRING, lower_ascii),)),
        FunctionDecl("upperAscii", (_m("string_upper_ascii", (STRING,), STRING, upper_ascii),)),
        FunctionDecl(
            "split",
            (
                _m("string_split_string", (STRING, STRING), ListType(STRING), split),
                _m("string_split_string_int", (STRING, STRING, INT), ListType(STRING), split),
            ),
        ),
        FunctionDecl(
            "join",
            (
                _m("list_join", (ListType(STRING),), STRING, join),
                _m("list_join_string", (ListType(STRING), STRING), STRING, join),
            ),
        ),
        FunctionDecl(
            "replace",
            (
                _m("string_replace_string_string", (STRING, STRING, STRING), STRING, replace),
                _m("string_replace_string_string_int", (STRING, STRING, STRING, INT), STRING, replace),
            ),
        ),
        FunctionDecl("trim", (_m("string_trim", (STRING,), STRING, trim),)),
        FunctionDecl(
            "substring",
            (
                _m("string_substring_int", (STRING, INT), STRING, substring),
                _m("string_substring_int_int", (STRING, INT, INT), STRING, substring),
            ),
        ),
        FunctionDecl("charAt", (_m("string_char_at_int", (STRING, INT), STRING, char_at),)),
        FunctionDecl("find", (_m("string_find_string", (STRING, STRING), STRING, find),)),
        FunctionDecl(
            "findAll",
            (
                _m("string_find_all_string", (STRING, STRING), ListType(STRING), find_all),
                _m("string_find_all_string_int", (STRING, STRING, INT), ListType(STRING), find_all),
            ),
        ),
    ]
    return {d.name: d for d in decls}
