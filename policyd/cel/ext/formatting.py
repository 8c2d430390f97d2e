"""`"...".format([args])`: cel-go's string formatting (its version 2 clauses).

Clauses: `%s` (any value: lists as `[a, b]`, maps as `{k: v}` sorted by formatted key), `%d`, `%f` and
`%e` with an optional precision (`%.3f`; default 6), `%b`, `%o`, `%x` / `%X` (ints, uints, strings and
bytes), and `%%`. NaN and infinities print as `NaN`, `Infinity`, `-Infinity`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.values import Duration, Timestamp, TypeValue, UInt, format_timestamp
from policyd.errors import CelEvalError

DEFAULT_PRECISION = 6


def _shortest_fixed(f: float) -> str:
    """A finite double in fixed notation with the fewest digits that round-trip (Go's 'f', -1)."""
    return format(Decimal(repr(f)).normalize(), "f")


def _special(f: float) -> str | None:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return None


def format_value(v: Any) -> str:
    """The `%s` text of a CEL value."""
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is int or t is UInt:
        return str(int(v))
    if t is float:
        return _special(v) or _shortest_fixed(v)
    if t is str:
        return str(v)
    if t is bytes:
        return bytes(v).decode("utf-8", "replace")
    if v is None:
        return "null"
    if t is Duration:
        return _shortest_fixed(v.ns / 1e9) + "s"
    if t is Timestamp:
        return format_timestamp(v)
    if t is TypeValue:
        return str(v.name)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        entries = sorted((format_value(k), format_value(x)) for k, x in v.items())
        return "{" + ", ".join(f"{k}: {x}" for k, x in entries) + "}"
    raise CelEvalError(
        "error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, "
        f"maps, lists, types, durations, and timestamps, was given {rt.type_name(v)}"
    )


def _decimal(v: Any, _precision: int) -> str:
    t = type(v)
    if t is int or t is UInt:
        return str(int(v))
    if t is float:
        return _special(v) or _shortest_fixed(v)
    raise CelEvalError(
        f"error during formatting: decimal clause can only be used on ints, uints, and doubles, was given {rt.type_name(v)}"
    )


def _float_clause(name: str, spec: str) -> Callable[[Any, int], str]:
    def clause(v: Any, precision: int) -> str:
        t = type(v)
        if t is int or t is UInt:
            return format(float(v), f".{precision}{spec}")
        if t is float:
            return _special(v) or format(v, f".{precision}{spec}")
        raise CelEvalError(
            f"error during formatting: {name} clause can only be used on ints, uints, and doubles, "
            f"was given {rt.type_name(v)}"
        )

    return clause


def _binary(v: Any, _precision: int) -> str:
    t = type(v)
    if t is bool:
        return "1" if v else "0"
    if t is int or t is UInt:
        return format(int(v), "b")
    raise CelEvalError(
        f"error during formatting: only ints, uints, and bools can be formatted as binary, was given {rt.type_name(v)}"
    )


def _octal(v: Any, _precision: int) -> str:
    t = type(v)
    if t is int or t is UInt:
        return format(int(v), "o")
    raise CelEvalError(
        f"error during formatting: octal clause can only be used on ints and uints, was given {rt.type_name(v)}"
    )


def _hex(upper: bool) -> Callable[[Any, int], str]:
    def clause(v: Any, _precision: int) -> str:
        t = type(v)
        if t is int or t is UInt:
            text = format(int(v), "x")
        elif t is str:
            text = v.encode("utf-8", "surrogatepass").hex()
        elif t is bytes:
            text = v.hex()
        else:
            raise CelEvalError(
                "error during formatting: only ints, uints, bytes, and strings can be formatted as hex, "
                f"was given {rt.type_name(v)}"
            )
        return text.upper() if upper else text

    return clause


_CLAUSES: dict[str, Callable[[Any, int], str]] = {
    "s": lambda v, _p: format_value(v),
    "d": _decimal,
    "f": _float_clause("fixed-point", "f"),
    "e": _float_clause("scientific", "e"),
    "b": _binary,
    "o": _octal,
    "x": _hex(False),
    "X": _hex(True),
}


def format_string(fmt: Any, args: Any) -> str:
    """`fmt.format(args)`: substitute each clause of `fmt` with the next element of `args`."""
    if type(fmt) is not str or not isinstance(args, list | tuple):
        raise rt.no_overload("format", fmt, args)
    out: list[str] = []
    i = 0
    arg_index = 0
    n = len(fmt)
    while i < n:
        c = fmt[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        if i + 1 < n and fmt[i + 1] == "%":
            out.append("%")
            i += 2
            continue
        if i + 1 >= n:
            raise CelEvalError("unexpected end of string")
        if arg_index >= len(args):
            raise CelEvalError(f"index {arg_index} out of range")
        i += 1
        precision = DEFAULT_PRECISION
        if fmt[i] == ".":
            j = i + 1
            while j < n and fmt[j].isascii() and fmt[j].isdigit():
                j += 1
            if j >= n:
                raise CelEvalError(
                    "could not parse formatting clause: error while parsing precision: "
                    "could not find end of precision specifier"
                )
            if j == i + 1:
                raise CelEvalError(
                    "could not parse formatting clause: error while parsing precision: "
                    "error while converting precision to integer"
                )
            precision = int(fmt[i + 1 : j])
            i = j
        verb = fmt[i]
        clause = _CLAUSES.get(verb)
        if clause is None:
            raise CelEvalError(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')
        out.append(clause(args[arg_index], precision))
        arg_index += 1
        i += 1
    return "".join(out)
