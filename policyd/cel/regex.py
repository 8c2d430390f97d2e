"""Regular expressions with RE2 semantics (the `google-re2` engine): `matches`, `find`, `findAll`.

Patterns are RE2 syntax as in cel-go and Kubernetes (Go's `regexp`); a compiled pattern is cached.
A malformed pattern is a `CelEvalError` at run time and, when the pattern is a string literal, a
check-time error through `pattern_issue` (the overloads' `literal_checks`).

Results are memoised per (pattern, text): a scheduler asks the same question of the same label values
for many pods and nodes, and the RE2 binding costs microseconds per call.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

from policyd.cel import runtime as rt
from policyd.errors import CelEvalError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


class _InvalidPattern(Exception):
    """A pattern RE2 rejects, with Go's `regexp` error text for it (`go_error`)."""


# RE2's error codes (RegexpStatus::CodeText) -> Go regexp/syntax's ErrorCode texts for the same error
_GO_CODES = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "pattern too large - compile failed": "expression too large",
    "pattern too large - reverse compile failed": "expression too large",
}


def go_error(reason: str) -> str:
    """Go's `regexp.Compile` error for RE2's `reason` ("<code>: <fragment>"): `error parsing regexp:
    <code>: `<fragment>``, with Go's wording of the code (the same codes, some named differently; Go
    shows an empty fragment as ``)."""
    code, _, fragment = reason.partition(": ")
    return f"error parsing regexp: {_GO_CODES.get(code, code)}: `{fragment}`"


@lru_cache(maxsize=512)
def _compile(pattern: str) -> Any:
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as e:
        reason = e.args[0] if e.args else str(e)
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise _InvalidPattern(go_error(str(reason))) from None


def compile_pattern(pattern: str) -> Any:
    """The compiled RE2 pattern; a malformed one is a `CelEvalError` with Go's error text."""
    try:
        return _compile(pattern)
    except _InvalidPattern as e:
        raise CelEvalError(str(e)) from None


def pattern_issue(pattern: Any) -> str | None:
    """Why a literal pattern is not valid RE2 (Go's error text, as Kubernetes' `find` and `findAll`
    report it), or None: the check-time hook of the regex library's overloads."""
    if type(pattern) is not str:
        return None
    try:
        _compile(pattern)
    except _InvalidPattern as e:
        return str(e)
    return None


def matches_issue(pattern: Any) -> str | None:
    """`pattern_issue` for `matches`, worded as cel-go's regex literal validator words it."""
    issue = pattern_issue(pattern)
    return None if issue is None else f"invalid matches argument: {issue}"


def _strings(name: str, *args: Any) -> None:
    for a in args:
        if type(a) is not str:
            raise rt.no_overload(name, *args)


_MEMO_SIZE = 8192


@lru_cache(maxsize=_MEMO_SIZE)
def _matches(pattern: str, s: str) -> bool:
    return compile_pattern(pattern).search(s) is not None


@lru_cache(maxsize=_MEMO_SIZE)
def _find(pattern: str, s: str) -> str:
    m = compile_pattern(pattern).search(s)
    return "" if m is None else str(m.group(0))


def matches(s: Any, pattern: Any) -> bool:
    """`s.matches(pattern)`: the pattern matches a substring of `s`."""
    _strings("matches", s, pattern)
    return _matches(pattern, s)


def find(s: Any, pattern: Any) -> str:
    """`s.find(pattern)`: the leftmost match, "" when none."""
    _strings("find", s, pattern)
    return _find(pattern, s)


def find_all(s: Any, pattern: Any, limit: Any = -1) -> list[str]:
    """`s.findAll(pattern[, n])`: successive non-overlapping matches (at most n when n >= 0).

    As Go's `FindAllString`: an empty match right after the previous match is skipped.
    """
    _strings("findAll", s, pattern)
    if type(limit) is not int:
        raise rt.no_overload("findAll", s, pattern, limit)
    return list(_find_all(pattern, s, limit))


@lru_cache(maxsize=_MEMO_SIZE)
def _find_all(pattern: str, s: str, limit: int) -> tuple[str, ...]:
    regex = compile_pattern(pattern)
    out: list[str] = []
    pos = 0
    previous_end = -1
    while (limit < 0 or len(out) < limit) and pos <= len(s):
        m = regex.search(s, pos)
        if m is None:
            break
        start, end = m.span()
        if end == start == previous_end:
            pos = start + 1
            continue
        out.append(str(m.group(0)))
        previous_end = end
        pos = end if end > start else end + 1
    return tuple(out)
