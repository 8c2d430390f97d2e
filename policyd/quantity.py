"""Kubernetes resource quantities: exact parsing to `Fraction`, integer scaling, canonical formatting.

Grammar (apimachinery `resource.Quantity`):
`[+-]? (digits | digits.digits? | .digits?)? (Ki|Mi|Gi|Ti|Pi|Ei | n|u|m|k|M|G|T|P|E | [eE][+-]?digits)?`,
not empty. As in apimachinery's `ParseQuantity`, a missing number reads as 0 (`+`, `.`, `-.`, `Mi`,
`e3`), a non-zero value is rounded away from zero to a multiple of 1n (10^-9), and a value with a
binary suffix is capped at 2^63-1 in magnitude (`9Ei` is 9223372036854775807). Unlike apimachinery, an
exponent beyond 10^308 is an error rather than an exact number of that size.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from policyd.errors import ClusterDataError

__all__ = ["QuantityError", "format_quantity", "int64_amount", "parse_quantity", "to_int", "to_milli"]


class QuantityError(ClusterDataError, ValueError):
    """A string is not a valid Kubernetes quantity; `reason` is apimachinery's `ParseQuantity` error
    text for it where apimachinery has one (what the Kubernetes CEL library's `quantity()` reports)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


# apimachinery's ParseQuantity errors (ErrFormatWrong, ErrSuffix)
FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
SUFFIX_WRONG = "unable to parse quantity's suffix"
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")


_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXP = {exp: suffix for suffix, exp in _DECIMAL.items()}
_BINARY_BY_EXP = {exp: suffix for suffix, exp in _BINARY.items()}

_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]*)?"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))"
)
# Larger exponents are certainly a data error and would make exact arithmetic needlessly costly.
_MAX_EXPONENT = 308
_NANO = Fraction(1, 10**9)
_INT64_MAX = 2**63 - 1
_BINARY_CAP = _INT64_MAX  # apimachinery's maxAllowed, the bound of a quantity with a binary suffix


def parse_quantity(s: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity (`"500m"`, `"1Gi"`, `"1e3"`, `2`, `0.5`) to an exact Fraction."""
    if type(s) is str:
        return _parse_text(s)
    return _parse(s)


@functools.lru_cache(maxsize=4096)
def _parse_text(s: str) -> Fraction:
    """`parse_quantity` of a string, memoised: objects repeat the same few quantities."""
    return _parse(s)


def _parse(s: str | int | float) -> Fraction:
    if isinstance(s, bool):
        raise QuantityError(f"invalid quantity {s!r}: a boolean is not a quantity")
    if isinstance(s, int):
        return Fraction(s)
    if isinstance(s, float):
        if not math.isfinite(s):
            raise QuantityError(f"invalid quantity {s!r}: not a finite number")
        # repr() is the shortest decimal that round-trips, i.e. what the YAML/JSON source said.
        return _round_nano(Fraction(repr(s)))
    if not isinstance(s, str):
        raise QuantityError(f"invalid quantity {s!r}: expected a string or number")
    m = _QUANTITY_RE.fullmatch(s) if s else None
    if m is None:
        raise QuantityError(f"invalid quantity {s!r}", _why_invalid(s))
    value = _number(m.group("number"))
    if m.group("binary"):
        value *= 1024 ** _BINARY[m.group("binary")]
        if abs(value) > _BINARY_CAP:
            value = Fraction(_BINARY_CAP)
    else:
        if m.group("exp") is not None:
            exponent = int(m.group("exp"))
            if abs(exponent) > _MAX_EXPONENT:
                raise QuantityError(f"invalid quantity {s!r}: exponent out of range")
        else:
            exponent = _DECIMAL[m.group("decimal") or ""]
        value *= Fraction(10) ** exponent
    if m.group("sign") == "-":
        value = -value
    return _round_nano(value)


def _why_invalid(s: str) -> str:
    """apimachinery's error for a string the grammar rejects: its scanner (parseQuantityString) takes
    a sign, digits, one point and digits, then suffix letters, a sign and digits; text left over is
    ErrFormatWrong, a suffix it scanned but does not know is ErrSuffix."""
    i, n = 0, len(s)
    if i < n and s[i] in "+-":
        i += 1
    while i < n and s[i].isdigit() and s[i].isascii():
        i += 1
    if i < n and s[i] == ".":
        i += 1
        while i < n and s[i].isdigit() and s[i].isascii():
            i += 1
    while i < n and s[i] in _SUFFIX_CHARS:
        i += 1
    if i < n and s[i] in "+-":
        i += 1
    while i < n and s[i].isdigit() and s[i].isascii():
        i += 1
    return SUFFIX_WRONG if s and i == n else FORMAT_WRONG


def _number(text: str | None) -> Fraction:
    """The number before the suffix; none, or a lone point, is 0 (apimachinery's parseQuantityString)."""
    return Fraction(text) if text and text != "." else Fraction(0)


_MAX_INT64_FACTORS = 18  # decimal digits an int64 always holds (apimachinery's maxInt64Factors)


def int64_amount(s: str) -> tuple[int, int] | None:
    """How apimachinery's ParseQuantity holds the valid quantity `s`: an int64 mantissa and a decimal
    scale (`int64Amount`) when its digits fit 18 places at a scale of nano or above, or for a binary
    suffix when the integer is small enough for its rough precision bound; None for its inf.Dec form.
    (What the Kubernetes CEL library's `isInteger` answers from.)"""
    if s == "0":
        return (0, 0)
    m = _QUANTITY_RE.fullmatch(s) if s else None
    if m is None:
        return None
    whole, _, frac = (m.group("number") or "").partition(".")
    whole = whole.lstrip("0") or "0"
    mantissa = 1
    if m.group("binary"):
        if frac:
            return None
        exponent = 10 * _BINARY[m.group("binary")]
        mantissa = 1 << exponent
        precision = 15 - len(whole) - exponent * 3 // 10 - 1
        scale = 0
    else:
        scale = int(m.group("exp")) if m.group("exp") is not None else _DECIMAL[m.group("decimal") or ""]
        precision = _MAX_INT64_FACTORS - len(whole) - len(frac)
    scale -= len(frac)
    if precision < 0 or scale < -9:
        return None
    result = int(whole + frac) * mantissa
    if result > _INT64_MAX:
        return None
    return (-result if m.group("sign") == "-" else result, scale)


def _round_nano(value: Fraction) -> Fraction:
    """Round away from zero to a multiple of 10^-9, as apimachinery does on parse."""
    scaled = value / _NANO
    if scaled.denominator == 1:
        return value
    magnitude = math.ceil(abs(scaled))
    return Fraction(magnitude if value > 0 else -magnitude) * _NANO


def _round_away(value: Fraction) -> int:
    """Round away from zero to an integer (apimachinery's scaled-value rounding)."""
    return math.ceil(value) if value >= 0 else math.floor(value)


def to_milli(q: Fraction | int) -> int:
    """The value in thousandths, rounded up (Kubernetes `Quantity.MilliValue`)."""
    return _round_away(Fraction(q) * 1000)


def to_int(q: Fraction | int) -> int:
    """The integer value, rounded up (Kubernetes `Quantity.Value`)."""
    return _round_away(Fraction(q))


def format_quantity(q: Fraction | int, binary: bool = False) -> str:
    """Canonical Kubernetes form: integer mantissa with the largest suffix that keeps it exact.

    With `binary`, integers that are exact multiples of 1024 use Ki..Ei (as a BinarySI quantity) up
    to the 2^63-1 a binary suffix parses to at most; anything else uses the decimal suffixes n..E, so
    the text parses back to the value. Values finer than 1n are rounded as on parse.
    """
    value = _round_nano(Fraction(q))
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if binary and magnitude.denominator == 1 and 1024 <= magnitude <= _BINARY_CAP:
        mantissa = magnitude.numerator
        exp = 0
        while exp < 6 and mantissa % 1024 == 0:
            mantissa //= 1024
            exp += 1
        if exp > 0:
            return f"{sign}{mantissa}{_BINARY_BY_EXP[exp]}"
    # magnitude is a multiple of 1e-9: work with an integer count of nano-units.
    nanos = int(magnitude / _NANO)
    exp = -9
    while exp < 18 and nanos % 1000 == 0:
        nanos //= 1000
        exp += 3
    return f"{sign}{nanos}{_DECIMAL_BY_EXP[exp]}"
