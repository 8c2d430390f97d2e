"""The CEL standard library: declarations with cel-spec overload ids, and their implementations.

`standard_functions()` returns name -> `FunctionDecl`; every `Overload.impl` is the Python callable
generated code calls when the checker resolved that overload. `STANDARD_TYPE_IDENTS` declares the
type identifiers (`int`, `string`, `google.protobuf.Timestamp`, ...) whose value is a type value.
"""

from __future__ import annotations

import datetime as _dt
import functools
import operator
import re
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from policyd.cel import regex
from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.ext import network
from policyd.cel.library_types import LIBRARY_TYPES
from policyd.cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    STRING,
    TIMESTAMP,
    UINT,
    CelType,
    ListType,
    MapType,
    TypeParam,
    TypeType,
)
from policyd.cel.values import Duration, Timestamp, TypeValue, UInt
from policyd.errors import CelEvalError

A = TypeParam("A")
B = TypeParam("B")
K = TypeParam("K")
V = TypeParam("V")
LIST_A = ListType(A)
MAP_KV = MapType(K, V)

STANDARD_TYPE_IDENTS: dict[str, CelType] = {
    "bool": TypeType(BOOL),
    "int": TypeType(INT),
    "uint": TypeType(UINT),
    "double": TypeType(DOUBLE),
    "string": TypeType(STRING),
    "bytes": TypeType(BYTES),
    "null_type": TypeType(NULL),
    "list": TypeType(ListType(DYN)),
    "map": TypeType(MapType(DYN, DYN)),
    "type": TypeType(TypeType()),
    "google.protobuf.Timestamp": TypeType(TIMESTAMP),
    "google.protobuf.Duration": TypeType(DURATION),
    **{name: TypeType(t) for name, t in LIBRARY_TYPES.items()},
}
"""Type identifiers: name -> static type of the identifier (its value is `TypeValue(name)`)."""

TYPE_VALUES: dict[str, TypeValue] = {name: TypeValue(name) for name in STANDARD_TYPE_IDENTS}


def _o(
    oid: str,
    params: tuple[CelType, ...],
    result: CelType,
    impl: Callable[..., Any],
    member: bool = False,
) -> Overload:
    return Overload(oid, params, result, member=member, impl=impl)


def _float_op(fn: Callable[[float, float], Any]) -> Callable[[float, float], Any]:
    return fn


def _uint_add(a: int, b: int) -> UInt:
    return rt.check_uint(a + b)


def _uint_sub(a: int, b: int) -> UInt:
    return rt.check_uint(a - b)


def _uint_mul(a: int, b: int) -> UInt:
    return rt.check_uint(a * b)


# -- timestamp / duration getters ----------------------------------------------------------------

_OFFSET_RE = re.compile(r"([+-]?)(\d{1,2}):(\d{2})\Z")


@functools.lru_cache(maxsize=256)
def _zone(name: str) -> _dt.tzinfo:
    m = _OFFSET_RE.match(name)
    if m:
        minutes = int(m.group(2)) * 60 + int(m.group(3))
        if m.group(1) == "-":
            minutes = -minutes
        return _dt.timezone(_dt.timedelta(minutes=minutes))
    if name.upper() == "UTC":
        return _dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CelEvalError(f"unknown time zone {name!r}") from None


def _local(ts: Any, tz: Any = None) -> _dt.datetime:
    if type(ts) is not Timestamp:
        raise rt.no_overload("timestamp getter", ts)
    if tz is None:
        return ts.datetime()
    if type(tz) is not str:
        raise rt.no_overload("timestamp getter", ts, tz)
    return ts.datetime(_zone(tz))


def get_full_year(ts: Any, tz: Any = None) -> int:
    """`ts.getFullYear([tz])`."""
    return _local(ts, tz).year


def get_month(ts: Any, tz: Any = None) -> int:
    """`ts.getMonth([tz])`: 0-based month."""
    return _local(ts, tz).month - 1


def get_day_of_year(ts: Any, tz: Any = None) -> int:
    """`ts.getDayOfYear([tz])`: 0-based day of the year."""
    return _local(ts, tz).timetuple().tm_yday - 1


def get_date(ts: Any, tz: Any = None) -> int:
    """`ts.getDate([tz])`: 1-based day of the month."""
    return _local(ts, tz).day


def get_day_of_month(ts: Any, tz: Any = None) -> int:
    """`ts.getDayOfMonth([tz])`: 0-based day of the month."""
    return _local(ts, tz).day - 1


def get_day_of_week(ts: Any, tz: Any = None) -> int:
    """`ts.getDayOfWeek([tz])`: 0 = Sunday."""
    return (_local(ts, tz).weekday() + 1) % 7


def get_hours(v: Any, tz: Any = None) -> int:
    """`getHours()` of a timestamp (hour of day) or a duration (whole hours)."""
    if type(v) is Duration and tz is None:
        return int(v.ns / 3_600_000_000_000)
    return _local(v, tz).hour


def get_minutes(v: Any, tz: Any = None) -> int:
    """`getMinutes()` of a timestamp (minute of hour) or a duration (whole minutes)."""
    if type(v) is Duration and tz is None:
        return int(v.ns / 60_000_000_000)
    return _local(v, tz).minute


def get_seconds(v: Any, tz: Any = None) -> int:
    """`getSeconds()` of a timestamp (second of minute) or a duration (whole seconds)."""
    if type(v) is Duration and tz is None:
        return int(v.ns / 1_000_000_000)
    return _local(v, tz).second


def get_milliseconds(v: Any, tz: Any = None) -> int:
    """`getMilliseconds()` of a timestamp (millisecond of second) or a duration (whole ms)."""
    if type(v) is Duration and tz is None:
        return int(v.ns / 1_000_000)
    _local(v, tz)
    return int(v.ns % 1_000_000_000) // 1_000_000


def _getter_overloads(name: str, oid: str, impl: Callable[..., int], with_duration: bool) -> FunctionDecl:
    overloads = [
        _o(f"timestamp_to_{oid}", (TIMESTAMP,), INT, impl, member=True),
        _o(f"timestamp_to_{oid}_with_tz", (TIMESTAMP, STRING), INT, impl, member=True),
    ]
    if with_duration:
        overloads.append(_o(f"duration_to_{oid}", (DURATION,), INT, impl, member=True))
    return FunctionDecl(name, tuple(overloads))


def _compare_decls(name: str, prefix: str, op: Callable[[Any, Any], bool]) -> FunctionDecl:
    same = [
        ("bool", BOOL),
        ("int64", INT),
        ("uint64", UINT),
        ("double", DOUBLE),
        ("string", STRING),
        ("bytes", BYTES),
        ("timestamp", TIMESTAMP),
        ("duration", DURATION),
    ]
    overloads = [_o(f"{prefix}_{n}", (t, t), BOOL, op) for n, t in same]
    nums = [("int64", INT), ("uint64", UINT), ("double", DOUBLE)]
    for n1, t1 in nums:
        for n2, t2 in nums:
            if n1 != n2:
                overloads.append(_o(f"{prefix}_{n1}_{n2}", (t1, t2), BOOL, op))
    return FunctionDecl(name, tuple(overloads))


_PATTERN_ARG = ((1, regex.matches_issue),)
"""The pattern of `matches` (second argument, or the argument of the member form) is checked when literal."""


def _size_str(s: str) -> int:
    return len(s)


@functools.cache
def standard_functions() -> dict[str, FunctionDecl]:
    """Every standard CEL function and operator declaration, by function name."""
    decls = [
        FunctionDecl(
            "_+_",
            (
                _o("add_int64", (INT, INT), INT, rt.add_int),
                _o("add_uint64", (UINT, UINT), UINT, _uint_add),
                _o("add_double", (DOUBLE, DOUBLE), DOUBLE, operator.add),
                _o("add_string", (STRING, STRING), STRING, operator.add),
                _o("add_bytes", (BYTES, BYTES), BYTES, operator.add),
                _o("add_list", (LIST_A, LIST_A), LIST_A, rt.add),
                _o("add_timestamp_duration", (TIMESTAMP, DURATION), TIMESTAMP, rt.add),
                _o("add_duration_timestamp", (DURATION, TIMESTAMP), TIMESTAMP, rt.add),
                _o("add_duration_duration", (DURATION, DURATION), DURATION, rt.add),
            ),
        ),
        FunctionDecl(
            "_-_",
            (
                _o("subtract_int64", (INT, INT), INT, rt.sub_int),
                _o("subtract_uint64", (UINT, UINT), UINT, _uint_sub),
                _o("subtract_double", (DOUBLE, DOUBLE), DOUBLE, operator.sub),
                _o("subtract_timestamp_timestamp", (TIMESTAMP, TIMESTAMP), DURATION, rt.sub),
                _o("subtract_timestamp_duration", (TIMESTAMP, DURATION), TIMESTAMP, rt.sub),
                _o("subtract_duration_duration", (DURATION, DURATION), DURATION, rt.sub),
            ),
        ),
        FunctionDecl(
            "_*_",
            (
                _o("multiply_int64", (INT, INT), INT, rt.mul_int),
                _o("multiply_uint64", (UINT, UINT), UINT, _uint_mul),
                _o("multiply_double", (DOUBLE, DOUBLE), DOUBLE, operator.mul),
            ),
        ),
        FunctionDecl(
            "_/_",
            (
                _o("divide_int64", (INT, INT), INT, rt.div_int),
                _o("divide_uint64", (UINT, UINT), UINT, rt.div),
                _o("divide_double", (DOUBLE, DOUBLE), DOUBLE, rt.div),
            ),
        ),
        FunctionDecl(
            "_%_",
            (
                _o("modulo_int64", (INT, INT), INT, rt.mod_int),
                _o("modulo_uint64", (UINT, UINT), UINT, rt.mod),
            ),
        ),
        FunctionDecl(
            "-_",
            (
                _o("negate_int64", (INT,), INT, rt.neg),
                _o("negate_double", (DOUBLE,), DOUBLE, operator.neg),
            ),
        ),
        FunctionDecl("!_", (_o("logical_not", (BOOL,), BOOL, rt.logical_not),)),
        FunctionDecl("_&&_", (_o("logical_and", (BOOL, BOOL), BOOL, operator.and_),)),
        FunctionDecl("_||_", (_o("logical_or", (BOOL, BOOL), BOOL, operator.or_),)),
        FunctionDecl("_?_:_", (_o("conditional", (BOOL, A, A), A, rt.dyn),)),
        FunctionDecl("@not_strictly_false", (_o("not_strictly_false", (BOOL,), BOOL, rt.dyn),)),
        FunctionDecl("_==_", (_o("equals", (A, A), BOOL, rt.eq),)),
        FunctionDecl("_!=_", (_o("not_equals", (A, A), BOOL, rt.ne),)),
        _compare_decls("_<_", "less", rt.lt),
        _compare_decls("_<=_", "less_equals", rt.le),
        _compare_decls("_>_", "greater", rt.gt),
        _compare_decls("_>=_", "greater_equals", rt.ge),
        FunctionDecl(
            "_[_]",
            (
                _o("index_list", (LIST_A, INT), A, rt.index),
                _o("index_map", (MAP_KV, K), V, rt.index),
            ),
        ),
        FunctionDecl(
            "@in",
            (
                _o("in_list", (A, LIST_A), BOOL, rt.in_),
                _o("in_map", (K, MAP_KV), BOOL, rt.in_),
            ),
        ),
        FunctionDecl(
            "size",
            (
                _o("size_string", (STRING,), INT, _size_str),
                _o("size_bytes", (BYTES,), INT, rt.size),
                _o("size_list", (LIST_A,), INT, rt.size),
                _o("size_map", (MAP_KV,), INT, rt.size),
                _o("string_size", (STRING,), INT, _size_str, member=True),
                _o("bytes_size", (BYTES,), INT, rt.size, member=True),
                _o("list_size", (LIST_A,), INT, rt.size, member=True),
                _o("map_size", (MAP_KV,), INT, rt.size, member=True),
            ),
        ),
        FunctionDecl("contains", (_o("contains_string", (STRING, STRING), BOOL, rt.contains, member=True),)),
        FunctionDecl(
            "startsWith", (_o("starts_with_string", (STRING, STRING), BOOL, rt.starts_with, member=True),)
        ),
        FunctionDecl(
            "endsWith", (_o("ends_with_string", (STRING, STRING), BOOL, rt.ends_with, member=True),)
        ),
        FunctionDecl(
            "matches",
            (
                Overload("matches", (STRING, STRING), BOOL, impl=regex.matches, literal_checks=_PATTERN_ARG),
                Overload(
                    "matches_string",
                    (STRING, STRING),
                    BOOL,
                    member=True,
                    impl=regex.matches,
                    literal_checks=_PATTERN_ARG,
                ),
            ),
        ),
        FunctionDecl(
            "int",
            (
                _o("int64_to_int64", (INT,), INT, rt.to_int),
                _o("uint64_to_int64", (UINT,), INT, rt.to_int),
                _o("double_to_int64", (DOUBLE,), INT, rt.to_int),
                _o("string_to_int64", (STRING,), INT, rt.to_int),
                _o("timestamp_to_int64", (TIMESTAMP,), INT, rt.to_int),
            ),
        ),
        FunctionDecl(
            "uint",
            (
                _o("uint64_to_uint64", (UINT,), UINT, rt.to_uint),
                _o("int64_to_uint64", (INT,), UINT, rt.to_uint),
                _o("double_to_uint64", (DOUBLE,), UINT, rt.to_uint),
                _o("string_to_uint64", (STRING,), UINT, rt.to_uint),
            ),
        ),
        FunctionDecl(
            "double",
            (
                _o("double_to_double", (DOUBLE,), DOUBLE, rt.to_double),
                _o("int64_to_double", (INT,), DOUBLE, rt.to_double),
                _o("uint64_to_double", (UINT,), DOUBLE, rt.to_double),
                _o("string_to_double", (STRING,), DOUBLE, rt.to_double),
            ),
        ),
        FunctionDecl(
            "string",
            (
                _o("string_to_string", (STRING,), STRING, rt.to_string),
                _o("int64_to_string", (INT,), STRING, rt.to_string),
                _o("uint64_to_string", (UINT,), STRING, rt.to_string),
                _o("double_to_string", (DOUBLE,), STRING, rt.to_string),
                _o("bytes_to_string", (BYTES,), STRING, rt.to_string),
                _o("bool_to_string", (BOOL,), STRING, rt.to_string),
                _o("timestamp_to_string", (TIMESTAMP,), STRING, rt.to_string),
                _o("duration_to_string", (DURATION,), STRING, rt.to_string),
            ),
        ),
        FunctionDecl(
            "bytes",
            (
                _o("bytes_to_bytes", (BYTES,), BYTES, rt.to_bytes),
                _o("string_to_bytes", (STRING,), BYTES, rt.to_bytes),
            ),
        ),
        FunctionDecl(
            "bool",
            (
                _o("bool_to_bool", (BOOL,), BOOL, rt.to_bool),
                _o("string_to_bool", (STRING,), BOOL, rt.to_bool),
            ),
        ),
        FunctionDecl(
            "timestamp",
            (
                _o("timestamp_to_timestamp", (TIMESTAMP,), TIMESTAMP, rt.to_timestamp),
                _o("string_to_timestamp", (STRING,), TIMESTAMP, rt.to_timestamp),
                _o("int64_to_timestamp", (INT,), TIMESTAMP, rt.to_timestamp),
            ),
        ),
        FunctionDecl(
            "duration",
            (
                _o("duration_to_duration", (DURATION,), DURATION, rt.to_duration),
                _o("string_to_duration", (STRING,), DURATION, rt.to_duration),
            ),
        ),
        FunctionDecl("dyn", (_o("to_dyn", (A,), DYN, rt.dyn),)),
        FunctionDecl("type", (_o("type", (A,), TypeType(A), rt.cel_type),)),
        _getter_overloads("getFullYear", "year", get_full_year, False),
        _getter_overloads("getMonth", "month", get_month, False),
        _getter_overloads("getDayOfYear", "day_of_year", get_day_of_year, False),
        _getter_overloads("getDayOfMonth", "day_of_month", get_day_of_month, False),
        _getter_overloads("getDate", "day_of_month_1_based", get_date, False),
        _getter_overloads("getDayOfWeek", "day_of_week", get_day_of_week, False),
        _getter_overloads("getHours", "hours", get_hours, True),
        _getter_overloads("getMinutes", "minutes", get_minutes, True),
        _getter_overloads("getSeconds", "seconds", get_seconds, True),
        _getter_overloads("getMilliseconds", "milliseconds", get_milliseconds, True),
    ]
    return {d.name: d for d in decls}


def _to_string(v: Any) -> str:
    """`string(v)` of any value, the library types (IP, CIDR) included."""
    if type(v) is network.IP or type(v) is network.CIDR:
        return str(v)
    return rt.to_string(v)


# Generic (dynamically dispatched) implementation of each standard function/operator, used by
# generated code when the checker did not resolve a single overload. Keys: (name, is_member).
DYNAMIC_IMPLS: dict[tuple[str, bool], Callable[..., Any]] = {
    ("_+_", False): rt.add,
    ("_-_", False): rt.sub,
    ("_*_", False): rt.mul,
    ("_/_", False): rt.div,
    ("_%_", False): rt.mod,
    ("-_", False): rt.neg,
    ("!_", False): rt.logical_not,
    ("_==_", False): rt.eq,
    ("_!=_", False): rt.ne,
    ("_<_", False): rt.lt,
    ("_<=_", False): rt.le,
    ("_>_", False): rt.gt,
    ("_>=_", False): rt.ge,
    ("_[_]", False): rt.index,
    ("@in", False): rt.in_,
    ("size", False): rt.size,
    ("size", True): rt.size,
    ("contains", True): rt.contains,
    ("startsWith", True): rt.starts_with,
    ("endsWith", True): rt.ends_with,
    ("matches", False): regex.matches,
    ("matches", True): regex.matches,
    ("int", False): rt.to_int,
    ("uint", False): rt.to_uint,
    ("double", False): rt.to_double,
    ("string", False): _to_string,
    ("bytes", False): rt.to_bytes,
    ("bool", False): rt.to_bool,
    ("timestamp", False): rt.to_timestamp,
    ("duration", False): rt.to_duration,
    ("dyn", False): rt.dyn,
    ("type", False): rt.cel_type,
    ("getFullYear", True): get_full_year,
    ("getMonth", True): get_month,
    ("getDayOfYear", True): get_day_of_year,
    ("getDayOfMonth", True): get_day_of_month,
    ("getDate", True): get_date,
    ("getDayOfWeek", True): get_day_of_week,
    ("getHours", True): get_hours,
    ("getMinutes", True): get_minutes,
    ("getSeconds", True): get_seconds,
    ("getMilliseconds", True): get_milliseconds,
}
