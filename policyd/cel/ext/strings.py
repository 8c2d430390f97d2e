"""cel-go's strings extension: `charAt`, `indexOf`, `lastIndexOf`, `lowerAscii`, `upperAscii`, `replace`,
`split`, `substring`, `trim`, `join`, `reverse`, `strings.quote` and `format` (in `formatting.py`).

Positions and lengths count Unicode code points, as cel-go does; out-of-range positions are errors.
"""

from __future__ import annotations

import functools
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.env import member_overload as _m
from policyd.cel.ext.formatting import format_string
from policyd.cel.types import DYN, INT, STRING, ListType
from policyd.errors import CelEvalError


def lower_ascii(s: Any) -> str:
    """`s.lowerAscii()`: only ASCII letters change."""
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in rt.string_arg(s, "lowerAscii"))


def upper_ascii(s: Any) -> str:
    """`s.upperAscii()`: only ASCII letters change."""
    return "".join(c.upper() if "a" <= c <= "z" else c for c in rt.string_arg(s, "upperAscii"))


def split(s: Any, sep: Any, limit: Any = -1) -> list[str]:
    """`s.split(sep[, limit])` with Go's strings.SplitN semantics."""
    text, separator, n = rt.string_arg(s, "split"), rt.string_arg(sep, "split"), rt.int_arg(limit, "split")
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
    items = rt.list_arg(v, "join")
    for x in items:
        rt.string_arg(x, "join")
    return rt.string_arg(sep, "join").join(items)


def replace(s: Any, old: Any, new: Any, limit: Any = -1) -> str:
    """`s.replace(old, new[, n])` (n < 0: every occurrence)."""
    text, o, n_, k = (
        rt.string_arg(s, "replace"),
        rt.string_arg(old, "replace"),
        rt.string_arg(new, "replace"),
        rt.int_arg(limit, "replace"),
    )
    return text.replace(o, n_) if k < 0 else text.replace(o, n_, k)


_GO_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    chr(c) for c in range(0x2000, 0x200B)
)
_GO_SPACE_TEXT = "".join(sorted(_GO_SPACE))


def trim(s: Any) -> str:
    """`s.trim()`: strip leading and trailing Unicode white space (Go's unicode.IsSpace)."""
    return rt.string_arg(s, "trim").strip(_GO_SPACE_TEXT)


def _check_index(i: int, n: int) -> None:
    if i < 0 or i > n:
        raise CelEvalError(f"index out of range: {i}")


def index_of(s: Any, sub: Any, start: Any = 0) -> int:
    """`s.indexOf(sub[, start])` in code points; -1 when absent."""
    text, needle, offset = (
        rt.string_arg(s, "indexOf"),
        rt.string_arg(sub, "indexOf"),
        rt.int_arg(start, "indexOf"),
    )
    _check_index(offset, len(text))
    return text.find(needle, offset)


def last_index_of(s: Any, sub: Any, end: Any = None) -> int:
    """`s.lastIndexOf(sub[, end])` in code points: the last match starting at or before `end`."""
    text, needle = rt.string_arg(s, "lastIndexOf"), rt.string_arg(sub, "lastIndexOf")
    if end is None:
        return text.rfind(needle)
    offset = rt.int_arg(end, "lastIndexOf")
    _check_index(offset, len(text))
    return text.rfind(needle, 0, offset + len(needle))


def substring(s: Any, start: Any, end: Any = None) -> str:
    """`s.substring(start[, end])` in code points; bad ranges are errors."""
    text = rt.string_arg(s, "substring")
    a = rt.int_arg(start, "substring")
    b = len(text) if end is None else rt.int_arg(end, "substring")
    _check_index(a, len(text))
    _check_index(b, len(text))
    if a > b:
        raise CelEvalError(f"invalid substring range. start: {a}, end: {b}")
    return text[a:b]


def char_at(s: Any, i: Any) -> str:
    """`s.charAt(i)`: the code point at i ("" at the end)."""
    text, k = rt.string_arg(s, "charAt"), rt.int_arg(i, "charAt")
    _check_index(k, len(text))
    return text[k : k + 1]


def reverse(s: Any) -> str:
    """`s.reverse()`: the code points in reverse order."""
    return rt.string_arg(s, "reverse")[::-1]


_QUOTE_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def quote(s: Any) -> str:
    """`strings.quote(s)`: `s` in double quotes with escapes; invalid code points become U+FFFD."""
    text = rt.string_arg(s, "strings.quote")
    out = []
    for c in text:
        if 0xD800 <= ord(c) <= 0xDFFF:
            c = "\ufffd"
        out.append(_QUOTE_ESCAPES.get(c, c))
    return '"' + "".join(out) + '"'


@functools.cache
def string_functions() -> dict[str, FunctionDecl]:
    """The strings extension's declarations, by function name."""
    list_string = ListType(STRING)
    decls = [
        FunctionDecl("charAt", (_m("string_char_at_int", (STRING, INT), STRING, char_at),)),
        FunctionDecl(
            "indexOf",
            (
                _m("string_index_of_string", (STRING, STRING), INT, index_of),
                _m("string_index_of_string_int", (STRING, STRING, INT), INT, index_of),
            ),
        ),
        FunctionDecl(
            "lastIndexOf",
            (
                _m("string_last_index_of_string", (STRING, STRING), INT, last_index_of),
                _m("string_last_index_of_string_int", (STRING, STRING, INT), INT, last_index_of),
            ),
        ),
        FunctionDecl("lowerAscii", (_m("string_lower_ascii", (STRING,), STRING, lower_ascii),)),
        FunctionDecl("upperAscii", (_m("string_upper_ascii", (STRING,), STRING, upper_ascii),)),
        FunctionDecl(
            "replace",
            (
                _m("string_replace_string_string", (STRING, STRING, STRING), STRING, replace),
                _m("string_replace_string_string_int", (STRING, STRING, STRING, INT), STRING, replace),
            ),
        ),
        FunctionDecl(
            "split",
            (
                _m("string_split_string", (STRING, STRING), list_string, split),
                _m("string_split_string_int", (STRING, STRING, INT), list_string, split),
            ),
        ),
        FunctionDecl(
            "substring",
            (
                _m("string_substring_int", (STRING, INT), STRING, substring),
                _m("string_substring_int_int", (STRING, INT, INT), STRING, substring),
            ),
        ),
        FunctionDecl("trim", (_m("string_trim", (STRING,), STRING, trim),)),
        FunctionDecl(
            "join",
            (
                _m("list_join", (list_string,), STRING, join),
                _m("list_join_string", (list_string, STRING), STRING, join),
            ),
        ),
        FunctionDecl("reverse", (_m("string_reverse", (STRING,), STRING, reverse),)),
        FunctionDecl("strings.quote", (Overload("strings_quote", (STRING,), STRING, impl=quote),)),
        FunctionDecl("format", (_m("string_format", (STRING, ListType(DYN)), STRING, format_string),)),
    ]
    return {d.name: d for d in decls}
