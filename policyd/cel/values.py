"""CEL runtime values that have no plain Python equivalent: uint, timestamp, duration, type, quantity,
optional."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import total_ordering

from policyd.errors import CelEvalError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
NANOS = 1_000_000_000

# Timestamps: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z (seconds since the Unix epoch)
TS_MIN_SECONDS = -62135596800
TS_MAX_SECONDS = 253402300799
# Durations: the range of an int64 count of nanoseconds (as cel-go), about +-292 years
DUR_MIN_NS = INT64_MIN
DUR_MAX_NS = INT64_MAX

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class UInt(int):
    """A CEL uint: a Python int kept distinct so `type()` and overloads can tell it from int."""

    __slots__ = ()

    def __new__(cls, value: int = 0) -> UInt:
        """A uint; raises CelEvalError outside 0..2**64-1."""
        v = int(value)
        if not 0 <= v <= UINT64_MAX:
            raise CelEvalError("uint overflow")
        return super().__new__(cls, v)

    def __repr__(self) -> str:
        return f"UInt({int(self)})"

    def __str__(self) -> str:
        return str(int(self))


@total_ordering
@dataclass(frozen=True, eq=False)
class Timestamp:
    """A point in time with nanosecond precision (nanoseconds since the Unix epoch, UTC)."""

    ns: int

    def __post_init__(self) -> None:
        if not TS_MIN_SECONDS * NANOS <= self.ns <= TS_MAX_SECONDS * NANOS + NANOS - 1:
            raise CelEvalError("timestamp out of range")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Timestamp) and other.ns == self.ns

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Timestamp):
            return NotImplemented
        return self.ns < other.ns

    def __hash__(self) -> int:
        return hash(("ts", self.ns))

    def __repr__(self) -> str:
        return f"Timestamp({self.ns})"

    def __str__(self) -> str:
        return format_timestamp(self)

    def datetime(self, tz: _dt.tzinfo = _dt.UTC) -> _dt.datetime:
        """The timestamp as an aware datetime (microsecond precision) in zone `tz`."""
        secs, nanos = divmod(self.ns, NANOS)
        return (_EPOCH + _dt.timedelta(seconds=secs, microseconds=nanos // 1000)).astimezone(tz)


@total_ordering
@dataclass(frozen=True, eq=False)
class Duration:
    """A signed span of time in nanoseconds."""

    ns: int

    def __post_init__(self) -> None:
        if not DUR_MIN_NS <= self.ns <= DUR_MAX_NS:
            raise CelEvalError("duration out of range")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other.ns == self.ns

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Duration):
            return NotImplemented
        return self.ns < other.ns

    def __hash__(self) -> int:
        return hash(("dur", self.ns))

    def __repr__(self) -> str:
        return f"Duration({self.ns})"

    def __str__(self) -> str:
        return format_duration(self)


@dataclass(frozen=True)
class TypeValue:
    """A CEL type as a runtime value (`type(1) == int`)."""

    name: str

    def __repr__(self) -> str:
        return f"TypeValue({self.name!r})"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class OptionalValue:
    """A CEL optional (`optional_type(T)`): a value that is present, or `optional.none()`.

    Equality is CEL equality of the contents; `policyd.cel.runtime.eq` implements it (it knows
    heterogeneous numbers), so this class does not define `__eq__` beyond identity.
    """

    value: object
    present: bool

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.present else "optional.none()"


OPTIONAL_NONE = OptionalValue(None, False)
OPTIONAL_TYPE_NAME = "optional_type"


@total_ordering
@dataclass(frozen=True, eq=False)
class Quantity:
    """A Kubernetes resource quantity (exact rational value) as in the Kubernetes CEL library.

    `amount` is how apimachinery holds it, which `isInteger` / `asInteger` depend on: an int64
    mantissa and a decimal scale (`int64Amount`), or None for its arbitrary-precision form (`inf.Dec`)."""

    value: Fraction
    text: str = ""
    amount: tuple[int, int] | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and other.value == self.value

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(("quantity", self.value))

    def __repr__(self) -> str:
        return f"Quantity({self.value!r}, {self.text!r})"

    def __str__(self) -> str:
        return self.text or str(self.value)


# -- timestamp / duration text forms -----------------------------------------------------------

_TS_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z"
)


def parse_timestamp(text: str) -> Timestamp:
    """An RFC 3339 timestamp; raises CelEvalError when malformed or out of range."""
    m = _TS_RE.match(text)
    if not m:
        raise CelEvalError(f"invalid timestamp {text!r}")
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    frac = m.group(7) or ""
    try:
        base = _dt.datetime(year, month, day, hour, minute, second, tzinfo=_dt.UTC)
    except ValueError:
        raise CelEvalError(f"invalid timestamp {text!r}") from None
    offset = 0
    if m.group(9):
        offset = (int(m.group(10)) * 60 + int(m.group(11))) * 60
        if m.group(9) == "-":
            offset = -offset
    delta = base - _EPOCH
    secs = delta.days * 86400 + delta.seconds - offset
    nanos = int(frac.ljust(9, "0")) if frac else 0
    return Timestamp(secs * NANOS + nanos)


def format_timestamp(ts: Timestamp) -> str:
    """RFC 3339 in UTC with the fraction trimmed of trailing zeros (Go's RFC3339Nano)."""
    secs, nanos = divmod(ts.ns, NANOS)
    d = _EPOCH + _dt.timedelta(seconds=secs)
    text = f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"
    if nanos:
        text += "." + f"{nanos:09d}".rstrip("0")
    return text + "Z"


_DUR_UNITS = {
    "h": 3600 * NANOS,
    "m": 60 * NANOS,
    "s": NANOS,
    "ms": 1_000_000,
    "us": 1000,
    "µs": 1000,
    "ns": 1,
}
_DUR_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")


def parse_duration(text: str) -> Duration:
    """A Go-style duration string such as `1h2m3.5s` or `-1.5s`; raises CelEvalError."""
    s = text
    sign = 1
    if s[:1] in "+-" and s:
        if s[0] == "-":
            sign = -1
        s = s[1:]
    if s == "0":
        return Duration(0)
    if not s:
        raise CelEvalError(f"invalid duration {text!r}")
    total = Fraction(0)
    pos = 0
    while pos < len(s):
        m = _DUR_PART.match(s, pos)
        if not m:
            raise CelEvalError(f"invalid duration {text!r}")
        total += Fraction(m.group(1)) * _DUR_UNITS[m.group(2)]
        pos = m.end()
    ns = int(total) * sign
    if not DUR_MIN_NS <= ns <= DUR_MAX_NS:
        raise CelEvalError("duration out of range")
    return Duration(ns)


def format_duration(d: Duration) -> str:
    """Seconds with a trimmed fraction and an `s` suffix (`3600s`, `1.5s`), as cel-go prints."""
    sign = "-" if d.ns < 0 else ""
    secs, nanos = divmod(abs(d.ns), NANOS)
    text = f"{sign}{secs}"
    if nanos:
        text += "." + f"{nanos:09d}".rstrip("0")
    return text + "s"


def freeze(value: object) -> Hashable:
    """A hashable key equal exactly when two CEL values built from maps and lists are equal and of
    the same types (1, 1.0 and true differ; map entry order does not matter).

    Raises TypeError for a leaf value that is not hashable or map keys that cannot be ordered.
    """
    t = type(value)
    if t in _LEAVES:  # the common leaves, told by exact type before the Mapping check
        return (t.__name__, value)
    if isinstance(value, Mapping):
        return ("m", tuple(sorted((freeze(k), freeze(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("l", tuple(freeze(v) for v in value))
    return (t.__name__, value)


_LEAVES = frozenset({str, int, bool, float})
