"""Runtime helpers called by generated CEL code: operators, equality, ordering, indexing, conversions.

Every helper implements CEL semantics on the value representation of `cel_types` and raises
`CelEvalError` for CEL runtime errors (overflow, division by zero, no such key, no such overload).
Generated code refers to these functions by name through its globals (see `cel_codegen`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from policyd.cel.types import (
    CelType,
    DynType,
    ListType,
    MapType,
    ObjectType,
    OpaqueType,
    PrimitiveType,
    TypeParam,
    TypeType,
)
from policyd.cel.values import (
    INT64_MAX,
    INT64_MIN,
    OPTIONAL_NONE,
    OPTIONAL_TYPE_NAME,
    UINT64_MAX,
    Duration,
    OptionalValue,
    Quantity,
    Timestamp,
    TypeValue,
    UInt,
    format_duration,
    format_timestamp,
    parse_duration,
    parse_timestamp,
)
from policyd.errors import CelEvalError

NUMBER_TYPES = (int, float)

EVAL_ERRORS: tuple[type[BaseException], ...] = (
    CelEvalError,
    LookupError,
    TypeError,
    ValueError,
    ArithmeticError,
    AttributeError,
    RecursionError,
)
"""Exceptions generated code may raise; all mean a CEL evaluation error."""


def as_eval_error(e: BaseException) -> CelEvalError:
    """A CelEvalError for any exception raised while evaluating generated code."""
    if isinstance(e, CelEvalError):
        return e
    if isinstance(e, KeyError):
        return CelEvalError(f"no such key: {e.args[0] if e.args else ''}")
    if isinstance(e, IndexError):
        return CelEvalError("index out of bounds")
    if isinstance(e, ZeroDivisionError):
        return CelEvalError("division by zero")
    if isinstance(e, TypeError | AttributeError):
        return CelEvalError(f"no such overload ({e})")
    return CelEvalError(str(e) or type(e).__name__)


def logic_result(op: str, a: Any, b: Any) -> bool:
    """The end of `a && b` / `a || b` when `a` did not decide: absorb or raise no-overload."""
    short = op == "_||_"
    if b is short:
        return short
    raise no_overload(op, a, b)


def value_matches(v: Any, t: CelType) -> bool:
    """True when runtime value `v` may stand for a parameter of static type `t`."""
    if isinstance(t, DynType | TypeParam):
        return True
    if isinstance(t, PrimitiveType):
        return type_name(v) == t.name
    if isinstance(t, ListType):
        return isinstance(v, list | tuple)
    if isinstance(t, MapType | ObjectType):
        return isinstance(v, Mapping)
    if isinstance(t, TypeType):
        return type(v) is TypeValue
    if isinstance(t, OpaqueType):
        return type_name(v) == t.name
    return False


class Dispatcher:
    """Calls the first overload of a function whose parameter types match the runtime arguments."""

    def __init__(self, name: str, overloads: tuple[Any, ...]) -> None:
        self.name = name
        self.overloads = overloads

    def __call__(self, *args: Any) -> Any:
        for o in self.overloads:
            if o.impl is not None and all(value_matches(a, t) for a, t in zip(args, o.params, strict=True)):
                return o.impl(*args)
        raise no_overload(self.name, *args)


def undeclared(name: str) -> Any:
    """Raise the runtime error of a reference to an undeclared variable or function."""
    raise CelEvalError(f"undeclared reference to '{name}'")


_WRAPPER_ZERO: dict[str, Any] = {
    "google.protobuf.BoolValue": False,
    "google.protobuf.BytesValue": b"",
    "google.protobuf.DoubleValue": 0.0,
    "google.protobuf.FloatValue": 0.0,
    "google.protobuf.Int32Value": 0,
    "google.protobuf.Int64Value": 0,
    "google.protobuf.UInt32Value": UInt(0),
    "google.protobuf.UInt64Value": UInt(0),
    "google.protobuf.StringValue": "",
}
MESSAGE_TYPES = frozenset(
    {
        *_WRAPPER_ZERO,
        "google.protobuf.Timestamp",
        "google.protobuf.Duration",
        "google.protobuf.Value",
        "google.protobuf.Struct",
        "google.protobuf.ListValue",
    }
)


def make_message(type_name: str, fields: dict[str, Any]) -> Any:
    """Construct a well-known protobuf message (`google.protobuf.Int64Value{value: 1}`) as a CEL value."""
    if type_name in _WRAPPER_ZERO:
        extra = set(fields) - {"value"}
        if extra:
            raise CelEvalError(f"no such field: {sorted(extra)[0]}")
        value = fields.get("value", _WRAPPER_ZERO[type_name])
        if type_name in ("google.protobuf.Int32Value",) and not -(2**31) <= value < 2**31:
            raise CelEvalError("int32 overflow")
        if type_name == "google.protobuf.UInt32Value" and not 0 <= value < 2**32:
            raise CelEvalError("uint32 overflow")
        if type_name == "google.protobuf.FloatValue" and isinstance(value, float):
            import struct

            try:
                value = struct.unpack("f", struct.pack("f", value))[0]
            except OverflowError:
                value = math.copysign(math.inf, value)
        return value
    if type_name in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        ns = int(fields.get("seconds", 0)) * 1_000_000_000 + int(fields.get("nanos", 0))
        return Timestamp(ns) if type_name.endswith("Timestamp") else Duration(ns)
    if type_name == "google.protobuf.Value":
        for key in ("null_value", "number_value", "string_value", "bool_value", "struct_value", "list_value"):
            if key in fields:
                return None if key == "null_value" else fields[key]
        return None
    if type_name == "google.protobuf.Struct":
        return dict(fields.get("fields", {}))
    if type_name == "google.protobuf.ListValue":
        return list(fields.get("values", []))
    raise CelEvalError(f"unknown message type '{type_name}'")


_T = TypeVar("_T")


def receiver(v: Any, cls: type[_T], name: str) -> _T:
    """`v` when it is exactly a `cls` (a library's value type), else the no-overload error of `name`."""
    if type(v) is cls:
        return v  # type: ignore[no-any-return]
    raise no_overload(name, v)


def no_overload(name: str, *args: Any) -> CelEvalError:
    """The `no such overload` error for a call of `name` on `args`."""
    kinds = ", ".join(type_name(a) for a in args)
    return CelEvalError(f"no such overload: {name}({kinds})")


def type_name(v: Any) -> str:
    """The CEL type name of a runtime value."""
    t = type(v)
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is UInt:
        return "uint"
    if t is float:
        return "double"
    if t is str:
        return "string"
    if t is bytes:
        return "bytes"
    if v is None:
        return "null_type"
    if isinstance(v, list | tuple):
        return "list"
    if isinstance(v, Mapping):
        return "map"
    if t is Timestamp:
        return "google.protobuf.Timestamp"
    if t is Duration:
        return "google.protobuf.Duration"
    if t is TypeValue:
        return "type"
    if t is Quantity:
        return "kubernetes.Quantity"
    if t is OptionalValue:
        return OPTIONAL_TYPE_NAME
    if isinstance(v, int):
        return "int"
    name = getattr(v, "cel_type_name", None)
    return str(name) if name else t.__name__


def list_arg(v: Any, name: str) -> list[Any] | tuple[Any, ...]:
    """`v` when it is a list, else the no-overload error of `name` (library functions' argument check)."""
    if isinstance(v, list | tuple):
        return v
    raise no_overload(name, v)


def string_arg(v: Any, name: str) -> str:
    """`v` when it is a string, else the no-overload error of `name`."""
    if type(v) is str:
        return v  # type: ignore[no-any-return]
    raise no_overload(name, v)


def int_arg(v: Any, name: str) -> int:
    """`v` when it is an int, else the no-overload error of `name`."""
    if type(v) is int:
        return v  # type: ignore[no-any-return]
    raise no_overload(name, v)


def cel_type(v: Any) -> TypeValue:
    """`type(v)`."""
    return TypeValue(type_name(v))


def check_int(n: int) -> int:
    """n if it fits int64, else an overflow error."""
    if INT64_MIN <= n <= INT64_MAX:
        return n
    raise CelEvalError("int64 overflow")


def check_uint(n: int) -> UInt:
    """n as UInt if it fits uint64, else an overflow error."""
    if 0 <= n <= UINT64_MAX:
        return UInt(n)
    raise CelEvalError("uint64 overflow")


def _is_int(v: Any) -> bool:
    t = type(v)
    return t is int or (t is not bool and t is not UInt and isinstance(v, int))


# -- arithmetic ----------------------------------------------------------------------------------


def add_int(a: int, b: int) -> int:
    """int + int with overflow check (statically typed fast path)."""
    r = a + b
    if INT64_MIN <= r <= INT64_MAX:
        return r
    raise CelEvalError("int64 overflow")


def sub_int(a: int, b: int) -> int:
    """int - int with overflow check."""
    r = a - b
    if INT64_MIN <= r <= INT64_MAX:
        return r
    raise CelEvalError("int64 overflow")


def mul_int(a: int, b: int) -> int:
    """int * int with overflow check."""
    r = a * b
    if INT64_MIN <= r <= INT64_MAX:
        return r
    raise CelEvalError("int64 overflow")


def div_int(a: int, b: int) -> int:
    """int / int truncating toward zero; division by zero and overflow are errors."""
    if b == 0:
        raise CelEvalError("division by zero")
    q = abs(a) // abs(b)
    r = q if (a >= 0) == (b >= 0) else -q
    return check_int(r)


def mod_int(a: int, b: int) -> int:
    """int % int with the sign of the dividend; modulus by zero is an error."""
    if b == 0:
        raise CelEvalError("modulus by zero")
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def add(a: Any, b: Any) -> Any:
    """`a + b` for any CEL operands."""
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return add_int(a, b)
        if ta is float or ta is str or ta is bytes:
            return a + b
        if ta is UInt:
            return check_uint(a + b)
        if ta is Duration:
            return Duration(a.ns + b.ns)
        if ta is list or ta is tuple:
            return [*a, *b]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return [*a, *b]
    if ta is Timestamp and tb is Duration:
        return Timestamp(a.ns + b.ns)
    if ta is Duration and tb is Timestamp:
        return Timestamp(a.ns + b.ns)
    if _is_int(a) and _is_int(b):
        return add_int(a, b)
    raise no_overload("_+_", a, b)


def sub(a: Any, b: Any) -> Any:
    """`a - b` for any CEL operands."""
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return sub_int(a, b)
        if ta is float:
            return a - b
        if ta is UInt:
            return check_uint(a - b)
        if ta is Duration:
            return Duration(a.ns - b.ns)
        if ta is Timestamp:
            return Duration(a.ns - b.ns)
    if ta is Timestamp and tb is Duration:
        return Timestamp(a.ns - b.ns)
    if _is_int(a) and _is_int(b):
        return sub_int(a, b)
    raise no_overload("_-_", a, b)


def mul(a: Any, b: Any) -> Any:
    """`a * b`."""
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return mul_int(a, b)
        if ta is float:
            return a * b
        if ta is UInt:
            return check_uint(a * b)
    if _is_int(a) and _is_int(b):
        return mul_int(a, b)
    raise no_overload("_*_", a, b)


def div(a: Any, b: Any) -> Any:
    """`a / b` (integer division truncates; by zero is an error; doubles follow IEEE)."""
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return div_int(a, b)
        if ta is float:
            if b == 0.0:
                if a == 0.0 or math.isnan(a):
                    return math.nan
                return math.copysign(math.inf, a) * math.copysign(1.0, b)
            return a / b
        if ta is UInt:
            if b == 0:
                raise CelEvalError("division by zero")
            return UInt(a // b)
    if _is_int(a) and _is_int(b):
        return div_int(a, b)
    raise no_overload("_/_", a, b)


def mod(a: Any, b: Any) -> Any:
    """`a % b` for int and uint."""
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return mod_int(a, b)
        if ta is UInt:
            if b == 0:
                raise CelEvalError("modulus by zero")
            return UInt(a % b)
    if _is_int(a) and _is_int(b):
        return mod_int(a, b)
    raise no_overload("_%_", a, b)


def neg(a: Any) -> Any:
    """`-a` for int and double."""
    t = type(a)
    if t is int:
        return check_int(-a)
    if t is float:
        return -a
    if t is Duration:
        return Duration(-a.ns)
    if _is_int(a):
        return check_int(-a)
    raise no_overload("-_", a)


def logical_not(a: Any) -> bool:
    """`!a` for bool."""
    if a is True:
        return False
    if a is False:
        return True
    raise no_overload("!_", a)


def require_bool(a: Any, op: str = "_?_:_") -> bool:
    """a if it is a bool, else a no-overload error (conditions of &&, ||, ternary)."""
    if a is True or a is False:
        return bool(a)
    raise no_overload(op, a)


# -- equality and ordering ---------------------------------------------------------------------


def _num(v: Any) -> bool:
    t = type(v)
    return t is int or t is float or t is UInt or (t is not bool and isinstance(v, int | float))


def eq(a: Any, b: Any) -> bool:
    """CEL `==`: heterogeneous numeric equality, deep equality of lists and maps, bool not a number."""
    ta, tb = type(a), type(b)
    if ta is tb and (ta is str or ta is int or ta is bool or ta is bytes):
        return bool(a == b)
    if _num(a):
        if not _num(b):
            return False
        if ta is float or tb is float:
            return float(a) == float(b)
        return bool(a == b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if a is None or b is None:
        return a is None and b is None
    if ta is OptionalValue or tb is OptionalValue:
        return ta is tb and a.present == b.present and (not a.present or eq(a.value, b.value))
    if isinstance(a, list | tuple):
        if not isinstance(b, list | tuple) or len(a) != len(b):
            return False
        return all(eq(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping):
        if not isinstance(b, Mapping) or len(a) != len(b):
            return False
        for k, v in a.items():
            found, other = map_lookup(b, k)
            if not found or not eq(v, other):
                return False
        return True
    if ta is not tb and not (isinstance(a, Mapping) and isinstance(b, Mapping)):
        return False
    return bool(a == b)


def ne(a: Any, b: Any) -> bool:
    """CEL `!=`."""
    return not eq(a, b)


def _ordered(a: Any, b: Any, op: str) -> tuple[Any, Any]:
    ta, tb = type(a), type(b)
    if ta is tb and ta in ORDERED_TYPES:
        return a, b
    if _num(a) and _num(b):
        if ta is float or tb is float:
            return float(a), float(b)
        return a, b
    raise no_overload(op, a, b)


ORDERED_TYPES = frozenset({int, float, UInt, str, bytes, bool, Timestamp, Duration})


def lt(a: Any, b: Any) -> bool:
    """CEL `<` (numbers compare across int, uint and double)."""
    x, y = _ordered(a, b, "_<_")
    return bool(x < y)


def le(a: Any, b: Any) -> bool:
    """CEL `<=`."""
    x, y = _ordered(a, b, "_<=_")
    return bool(x <= y)


def gt(a: Any, b: Any) -> bool:
    """CEL `>`."""
    x, y = _ordered(a, b, "_>_")
    return bool(x > y)


def ge(a: Any, b: Any) -> bool:
    """CEL `>=`."""
    x, y = _ordered(a, b, "_>=_")
    return bool(x >= y)


# -- containers ----------------------------------------------------------------------------------


class _BoolKey:
    """A bool key as a `CelMap` stores it: neither equal to nor hashed as the int 0 or 1."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is _BoolKey and other.value is self.value

    def __hash__(self) -> int:
        return hash((_BoolKey, self.value))

    def __repr__(self) -> str:
        return repr(self.value)


def _stored(key: Any) -> Any:
    return _BoolKey(key) if type(key) is bool else key


def _given(key: Any) -> Any:
    return key.value if type(key) is _BoolKey else key


class CelMap(dict[Any, Any]):
    """A CEL map with bool keys: a Python dict conflates `True` with `1` (and `False` with `0`), CEL's
    `{1: 'a', true: 'b'}` has two entries. The bool keys are stored as `_BoolKey`s and given back as
    bools by iteration, `keys()`, `items()` and lookups, so every reader of a mapping sees CEL's keys.
    Maps become one when a bool key is put in (`make_map`, `map_with`); other maps stay plain dicts.
    """

    def __init__(self, entries: Iterable[tuple[Any, Any]] = ()) -> None:
        super().__init__((_stored(k), v) for k, v in entries)

    def __iter__(self) -> Iterator[Any]:
        return (_given(k) for k in dict.__iter__(self))

    def keys(self) -> list[Any]:  # type: ignore[override]
        """The keys, bools as bools."""
        return list(self)

    def items(self) -> list[tuple[Any, Any]]:  # type: ignore[override]
        """The entries, bool keys as bools."""
        return [(_given(k), v) for k, v in dict.items(self)]

    def __getitem__(self, key: Any) -> Any:
        return dict.__getitem__(self, _stored(key))

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, _stored(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, _stored(key), value)

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of `key`, else `default`."""
        return dict.get(self, _stored(key), default)

    def copy(self) -> CelMap:
        """A shallow copy."""
        return CelMap(self.items())

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self.items()) + "}"


def map_with(m: dict[Any, Any], key: Any, value: Any) -> dict[Any, Any]:
    """`m` with `key` set to `value` (in place); a plain dict given a bool key becomes a `CelMap`."""
    if type(key) is bool and type(m) is not CelMap:
        m = CelMap(m.items())
    m[key] = value
    return m


def map_lookup(m: Mapping[Any, Any], key: Any) -> tuple[bool, Any]:
    """(found, value) for `key` in map `m`, with numeric key normalisation and bool kept apart."""
    tk = type(key)
    if tk is str:
        if key in m:
            return True, m[key]
        return False, None
    if type(m) is CelMap and (tk is bool or tk is int or tk is UInt):
        if key in m:  # bool keys are stored apart from ints: no ambiguity
            return True, m[key]
        return False, None
    if tk is bool:
        for k, v in m.items():
            if type(k) is bool and k == key:
                return True, v
        return False, None
    if tk is float:
        if not key.is_integer():
            return False, None
        key = int(key)
    elif not _num(key):
        return False, None
    try:
        value = m[key]
    except (KeyError, TypeError):
        return False, None
    if key == 0 or key == 1:
        # a bool key equal to 0/1 must not answer a numeric lookup (and vice versa)
        for stored in m:
            if stored == key:
                return type(stored) is not bool, (value if type(stored) is not bool else None)
    return True, value


def index(container: Any, key: Any) -> Any:
    """`container[key]` for lists (int index) and maps (no such key is an error); on an optional
    list or map, `optional[key]` is `optional[?key]`."""
    if type(container) is OptionalValue:
        return optional_index(container, key)
    if isinstance(container, list | tuple):
        tk = type(key)
        if tk is int or tk is UInt:
            i = int(key)
        elif tk is float and key.is_integer():
            i = int(key)
        else:
            raise no_overload("_[_]", container, key)
        if 0 <= i < len(container):
            return container[i]
        raise CelEvalError(f"index out of bounds: {i}")
    if isinstance(container, Mapping):
        if type(key) is str:
            try:
                return container[key]
            except KeyError:
                raise CelEvalError(f"no such key: {key}") from None
        found, value = map_lookup(container, key)
        if found:
            return value
        if key is None or isinstance(key, list | tuple | Mapping):
            raise no_overload("_[_]", container, key)
        raise CelEvalError(f"no such key: {key}")
    raise no_overload("_[_]", container, key)


def in_(value: Any, container: Any) -> bool:
    """CEL `value in container` for lists and maps."""
    tc = type(container)
    if tc is not list and tc is not tuple and isinstance(container, Mapping):
        return map_lookup(container, value)[0]
    if isinstance(container, list | tuple):
        tv = type(value)
        if tv is str or tv is int:
            for item in container:
                if type(item) is tv and item == value:
                    return True
            if tv is str:
                return False
        return any(eq(value, item) for item in container)
    raise no_overload("@in", value, container)


def select(obj: Any, field: str) -> Any:
    """`obj.field` on a map (missing key is an error); on an optional it is `obj.?field`."""
    if type(obj) is OptionalValue:
        return optional_select(obj, field)
    if isinstance(obj, Mapping):
        try:
            return obj[field]
        except KeyError:
            raise CelEvalError(f"no such key: {field}") from None
    attr = getattr(obj, "cel_select", None)
    if attr is not None:
        return attr(field)
    raise CelEvalError(f"type '{type_name(obj)}' does not support field selection")


def has(obj: Any, field: str) -> bool:
    """`has(obj.field)`: presence of a map key (an absent optional has no fields)."""
    if type(obj) is OptionalValue:
        return obj.present and has(obj.value, field)
    if isinstance(obj, Mapping):
        return field in obj
    attr = getattr(obj, "cel_has", None)
    if attr is not None:
        return bool(attr(field))
    raise CelEvalError(f"invalid type for has(): {type_name(obj)}")


# -- optional values (cel-go's optional library; the functions are declared in policyd.cel.optional) ---


def optional_select(obj: Any, field: str) -> OptionalValue:
    """`obj.?field`: the field of a map (or of an optional's map) as an optional, none when absent."""
    if type(obj) is OptionalValue:
        if not obj.present:
            return OPTIONAL_NONE
        obj = obj.value
    if isinstance(obj, Mapping):
        return OptionalValue(obj[field], True) if field in obj else OPTIONAL_NONE
    raise no_overload("_?._", obj, field)


def optional_index(container: Any, key: Any) -> OptionalValue:
    """`container[?key]`: a list element or map value as an optional, none when out of range or absent."""
    if type(container) is OptionalValue:
        if not container.present:
            return OPTIONAL_NONE
        container = container.value
    if isinstance(container, list | tuple):
        tk = type(key)
        if tk is int or tk is UInt or (tk is float and key.is_integer()):
            i = int(key)
            return OptionalValue(container[i], True) if 0 <= i < len(container) else OPTIONAL_NONE
        raise no_overload("_[?_]", container, key)
    if isinstance(container, Mapping):
        found, value = map_lookup(container, key)
        return OptionalValue(value, True) if found else OPTIONAL_NONE
    raise no_overload("_[?_]", container, key)


def make_map(entries: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A map literal; duplicate keys and unsupported key types are errors (bool keys: a `CelMap`)."""
    out: dict[Any, Any] = {}
    for k, v in entries:
        tk = type(k)
        if not (tk is str or tk is int or tk is bool or tk is UInt):
            raise CelEvalError(f"unsupported key type: {type_name(k)}")
        if map_lookup(out, k)[0]:
            raise CelEvalError(f"Failed with repeated key: {str(k).lower() if tk is bool else k}")
        out = map_with(out, k, v)
    return out


_RANGES = frozenset({list, tuple, dict})  # the common range types, told by exact type
_SIZED = _RANGES | {str}


def size(v: Any) -> int:
    """`size(v)` of a string (code points), bytes, list or map."""
    if type(v) in _SIZED or isinstance(v, str | bytes | list | tuple | Mapping):
        return len(v)
    raise no_overload("size", v)


def iterate(v: Any) -> Any:
    """The elements a comprehension ranges over: list elements or map keys."""
    if type(v) in _RANGES or isinstance(v, list | tuple | Mapping):
        return v
    raise CelEvalError(f"cannot range over {type_name(v)}")


# -- conversions ---------------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?\d+\Z")


def to_int(v: Any) -> int:
    """`int(v)`."""
    t = type(v)
    if t is int:
        return v  # type: ignore[no-any-return]
    if t is UInt:
        return check_int(int(v))
    if t is float:
        if math.isnan(v) or not (-9223372036854775808.0 < v < 9223372036854775808.0):
            raise CelEvalError("int range error")
        return int(v)
    if t is str:
        if not _INT_RE.match(v):
            raise CelEvalError(f"cannot convert {v!r} to int")
        return check_int(int(v))
    if t is Timestamp:
        return v.ns // 1_000_000_000  # type: ignore[no-any-return]
    if t is Duration:
        return v.ns  # type: ignore[no-any-return]
    raise no_overload("int", v)


def to_uint(v: Any) -> UInt:
    """`uint(v)`."""
    t = type(v)
    if t is UInt:
        return v  # type: ignore[no-any-return]
    if t is int:
        if v < 0:
            raise CelEvalError("uint range error")
        return check_uint(v)
    if t is float:
        if math.isnan(v) or not (-1.0 < v < 18446744073709551616.0):
            raise CelEvalError("uint range error")
        return UInt(int(v))
    if t is str:
        if not _INT_RE.match(v) or v.startswith("-"):
            raise CelEvalError(f"cannot convert {v!r} to uint")
        return check_uint(int(v))
    raise no_overload("uint", v)


_FLOAT_RE = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[Ii]nf(?:inity)?|NaN)\Z")


def to_double(v: Any) -> float:
    """`double(v)`."""
    t = type(v)
    if t is float:
        return v  # type: ignore[no-any-return]
    if t is int or t is UInt:
        return float(v)
    if t is str:
        if not _FLOAT_RE.match(v):
            raise CelEvalError(f"cannot convert {v!r} to double")
        return float(v)
    raise no_overload("double", v)


def format_double(f: float) -> str:
    """A double as Go's strconv.FormatFloat(f, 'g', -1, 64) prints it (cel-go's string(double))."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0.0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    mantissa, _, exp_text = f"{f:.17e}".partition("e")
    # shortest round-tripping digits come from repr()
    r = repr(abs(f))
    digits, _, rexp = r.partition("e")
    int_part, _, frac = digits.partition(".")
    exp10 = int(rexp) if rexp else 0
    if frac == "0":
        frac = ""
    all_digits = (int_part + frac).lstrip("0")
    # decimal exponent of the leading digit
    if int_part.strip("0"):
        lead_exp = len(int_part.lstrip("0")) - 1 + exp10
    else:
        lead_exp = -(len(frac) - len(frac.lstrip("0")) + 1) + exp10
    all_digits = all_digits.rstrip("0") or "0"
    sign = "-" if f < 0 else ""
    del mantissa, exp_text
    if lead_exp < -4 or lead_exp >= 6:  # Go: shortest %g switches to exponent form at 1e+06
        body = all_digits[0] + ("." + all_digits[1:] if len(all_digits) > 1 else "")
        return f"{sign}{body}e{'-' if lead_exp < 0 else '+'}{abs(lead_exp):02d}"
    if lead_exp < 0:
        return f"{sign}0.{'0' * (-lead_exp - 1)}{all_digits}"
    if len(all_digits) <= lead_exp + 1:
        return sign + all_digits + "0" * (lead_exp + 1 - len(all_digits))
    return f"{sign}{all_digits[: lead_exp + 1]}.{all_digits[lead_exp + 1 :]}"


def to_string(v: Any) -> str:
    """`string(v)`."""
    t = type(v)
    if t is str:
        return v  # type: ignore[no-any-return]
    if t is bool:
        return "true" if v else "false"
    if t is int or t is UInt:
        return str(int(v))
    if t is float:
        return format_double(v)
    if t is bytes:
        try:
            return v.decode("utf-8")  # type: ignore[no-any-return]
        except UnicodeDecodeError:
            raise CelEvalError("invalid UTF-8 in bytes") from None
    if t is Timestamp:
        return format_timestamp(v)
    if t is Duration:
        return format_duration(v)
    if t is Quantity:
        return str(v)
    raise no_overload("string", v)


def to_bytes(v: Any) -> bytes:
    """`bytes(v)`."""
    if type(v) is bytes:
        return v  # type: ignore[no-any-return]
    if type(v) is str:
        return v.encode("utf-8")  # type: ignore[no-any-return]
    raise no_overload("bytes", v)


_BOOL_STRINGS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True}
_BOOL_STRINGS.update({"0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False})


def to_bool(v: Any) -> bool:
    """`bool(v)`."""
    if type(v) is bool:
        return v  # type: ignore[no-any-return]
    if type(v) is str:
        if v in _BOOL_STRINGS:
            return _BOOL_STRINGS[v]
        raise CelEvalError(f"cannot convert {v!r} to bool")
    raise no_overload("bool", v)


def to_timestamp(v: Any) -> Timestamp:
    """`timestamp(v)` from an RFC 3339 string or Unix seconds."""
    t = type(v)
    if t is Timestamp:
        return v  # type: ignore[no-any-return]
    if t is str:
        return parse_timestamp(v)
    if t is int:
        return Timestamp(v * 1_000_000_000)
    raise no_overload("timestamp", v)


def to_duration(v: Any) -> Duration:
    """`duration(v)` from a Go-style duration string."""
    t = type(v)
    if t is Duration:
        return v  # type: ignore[no-any-return]
    if t is str:
        return parse_duration(v)
    if t is int:
        return Duration(v)
    raise no_overload("duration", v)


def dyn(v: Any) -> Any:
    """`dyn(v)`: the value itself."""
    return v


# -- strings -------------------------------------------------------------------------------------


def _str_args(name: str, *args: Any) -> None:
    for a in args:
        if type(a) is not str:
            raise no_overload(name, *args)


def contains(s: Any, sub: Any) -> bool:
    """`s.contains(sub)`."""
    _str_args("contains", s, sub)
    return bool(sub in s)


def starts_with(s: Any, prefix: Any) -> bool:
    """`s.startsWith(prefix)`."""
    _str_args("startsWith", s, prefix)
    return bool(s.startswith(prefix))


def ends_with(s: Any, suffix: Any) -> bool:
    """`s.endsWith(suffix)`."""
    _str_args("endsWith", s, suffix)
    return bool(s.endswith(suffix))
