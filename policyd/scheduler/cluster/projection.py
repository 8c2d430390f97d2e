"""Raw Kubernetes API values onto the declared CEL shapes (policyd.policy.k8s_types), and RFC 3339 times.

Part of the cache boundary (policyd.scheduler.cluster.objects): a value that does not fit its declared
type raises `ClusterDataError` with the path of the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from policyd.cel.types import TIMESTAMP, CelType, ListType, MapType, ObjectType, PrimitiveType
from policyd.cel.values import Timestamp
from policyd.errors import CelEvalError, ClusterDataError

NANOS = 1_000_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_TIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})"
)


def parse_time(text: str) -> int:
    """Parse an RFC 3339 timestamp (as Kubernetes writes them) to nanoseconds since the epoch."""
    m = _TIME_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"invalid RFC 3339 timestamp {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        dt = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError as e:
        raise ValueError(f"invalid RFC 3339 timestamp {text!r}: {e}") from None
    tz = m.group(8)
    if tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        dt -= sign * timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6]))
    nanos = int((m.group(7) or "").ljust(9, "0"))
    return (dt - _EPOCH) // timedelta(seconds=1) * NANOS + nanos


def _datetime_ns(dt: datetime) -> int:
    """Nanoseconds since the epoch of a datetime (naive ones, as YAML loaders produce, are UTC)."""
    dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt
    return (dt - _EPOCH) // timedelta(microseconds=1) * 1000


# RFC 3339 texts already parsed: Kubernetes writes times to the second, so the pods created in one
# burst share a few creation times (emptied when full)
MAX_PARSED_TIMES = 4096
_parsed_times: dict[str, Timestamp] = {}


def _timestamp_of_text(text: str) -> Timestamp:
    """The CEL timestamp of an RFC 3339 text (Timestamp values are immutable: one object per text)."""
    ts = _parsed_times.get(text)
    if ts is None:
        ts = cel_timestamp(parse_time(text))
        if len(_parsed_times) >= MAX_PARSED_TIMES:
            _parsed_times.clear()
        _parsed_times[text] = ts
    return ts


def cel_timestamp(ns: int) -> Timestamp:
    """The CEL runtime value of a timestamp given in nanoseconds since the epoch."""
    return Timestamp(ns)


class _Mismatch(Exception):
    """A value does not fit its declared type; `path` is filled in while unwinding."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


def project(value: Any, t: CelType, where: str) -> Any:
    """Convert a raw JSON value to the runtime representation of declared type `t`."""
    try:
        return converter(t)(value)
    except _Mismatch as e:
        raise ClusterDataError(f"{where}{''.join(reversed(e.path))}: {e.message}") from None


Converter = Callable[[Any], Any]

# declared type (by identity: the types are module constants, kept alive here) -> its converter
_converters: dict[int, tuple[CelType, Converter]] = {}


def converter(t: CelType) -> Converter:
    """The function converting raw values to type `t` (`project` without error context, added by
    the caller while unwinding), made once per type: every pod and node event converts through it,
    so what it does per value is decided once, not per value."""
    hit = _converters.get(id(t))
    if hit is None or hit[0] is not t:
        hit = _converters[id(t)] = (t, _make(t))
    return hit[1]


def _make(t: CelType) -> Converter:
    if isinstance(t, PrimitiveType):
        if t.name == "string":
            return _string
        if t.name == "int":
            return _int
        if t.name == "bool":
            return _bool
        if t == TIMESTAMP:
            return _timestamp
        return _as_is
    if isinstance(t, ObjectType):
        return _object(t)
    if isinstance(t, ListType):
        return _list(t)
    if isinstance(t, MapType):
        return _map(t)
    return _as_is  # dyn: as is


def _as_is(value: Any) -> Any:
    return value


def _string(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise _Mismatch(f"expected a string, got {type(value).__name__}")


def _int(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _Mismatch(f"expected an integer, got {value!r}")


def _bool(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    raise _Mismatch(f"expected a boolean, got {value!r}")


def _timestamp(value: Any) -> Any:
    if isinstance(value, datetime):
        return cel_timestamp(_datetime_ns(value))
    if not isinstance(value, str):
        raise _Mismatch(f"expected an RFC 3339 timestamp, got {value!r}")
    try:
        return _timestamp_of_text(value)
    except (ValueError, CelEvalError) as e:
        raise _Mismatch(str(e)) from None


def _object(t: ObjectType) -> Converter:
    declared = t.fields
    fields: dict[str, Converter] = {}  # filled on first use: a type may contain itself

    def convert(value: Any) -> Any:
        if type(value) is not dict and not isinstance(value, Mapping):
            raise _Mismatch(f"expected an object, got {type(value).__name__}")
        out: dict[str, Any] = {}
        for key, v in value.items():
            if v is None:
                continue
            fn = fields.get(key)
            if fn is None:
                ft = declared.get(key)
                if ft is None:
                    continue
                fn = fields[key] = converter(ft)
            try:
                out[key] = fn(v)
            except _Mismatch as e:
                e.path.append(f".{key}")
                raise
        return out

    return convert


def _list(t: ListType) -> Converter:
    elem: list[Converter | None] = [None]  # made on first use: a type may contain itself

    def convert(value: Any) -> Any:
        if type(value) is not list and not isinstance(value, list | tuple):
            raise _Mismatch(f"expected a list, got {type(value).__name__}")
        fn = elem[0]
        if fn is None:
            fn = elem[0] = converter(t.elem)
        items: list[Any] = []
        for i, v in enumerate(value):
            if v is None:
                continue
            try:
                items.append(fn(v))
            except _Mismatch as e:
                e.path.append(f"[{i}]")
                raise
        return items

    return convert


def _map(t: MapType) -> Converter:
    parts: list[tuple[Converter, Converter] | None] = [None]  # key and value converters, made on first use

    def convert(value: Any) -> Any:
        if type(value) is not dict and not isinstance(value, Mapping):
            raise _Mismatch(f"expected a map, got {type(value).__name__}")
        made = parts[0]
        if made is None:
            made = parts[0] = (converter(t.key), converter(t.value))
        key_fn, value_fn = made
        entries: dict[Any, Any] = {}
        for k, v in value.items():
            if v is None:
                continue
            try:
                entries[key_fn(k)] = value_fn(v)
            except _Mismatch as e:
                e.path.append(f".{k}")
                raise
        return entries

    return convert


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    """`value` as a mapping; None reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ClusterDataError(f"{where}: expected an object, got {type(value).__name__}")
    return value
