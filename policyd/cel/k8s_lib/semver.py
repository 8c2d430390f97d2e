"""Kubernetes' semver library: `semver(s[, normalize])`, `isSemver`, `major/minor/patch`, comparisons.

Parsing follows blang/semver (what Kubernetes uses): `MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`, numbers
without leading zeros, pre-release identifiers numeric (no leading zeros) or alphanumerics and `-`.
With `normalize` a leading `v` is dropped, missing minor/patch become 0 and leading zeros are removed
(`semver('v01.2', true)` is 1.2.0). Ordering is semver precedence; build metadata does not count.
Parsed versions are memoised (they are immutable).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.env import member_overload as _m
from policyd.cel.library_types import SEMVER_TYPE
from policyd.cel.types import BOOL, INT, STRING
from policyd.errors import CelEvalError

_DIGITS = frozenset("0123456789")
_IDENT = _DIGITS | frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")
_UINT64_MAX = (1 << 64) - 1


class SemverError(Exception):
    """Why a string is not a semantic version (blang/semver's messages)."""


@dataclass(frozen=True, eq=False)
class Semver:
    """A `kubernetes.Semver` value; equal when of equal precedence (build metadata ignored)."""

    major: int
    minor: int
    patch: int
    pre: tuple[str | int, ...] = ()
    build: tuple[str, ...] = ()
    cel_type_name: ClassVar[str] = SEMVER_TYPE.name

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by semver precedence (build metadata ignored)."""
        mine, theirs = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        if not self.pre or not other.pre:
            return (not self.pre) - (not other.pre)
        for a, b in zip(self.pre, other.pre, strict=False):
            if a == b:
                continue
            if isinstance(a, int) != isinstance(b, int):
                return -1 if isinstance(a, int) else 1
            return -1 if a < b else 1  # type: ignore[operator]
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))


def _number(text: str, what: str) -> int:
    if not text or any(c not in _DIGITS for c in text):
        raise SemverError(f"Invalid character(s) found in {what} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {text!r}")
    value = int(text)
    if value > _UINT64_MAX:
        raise SemverError(f"{what} number {text!r} out of range")
    return value


def _prerelease(part: str) -> str | int:
    if part == "":
        raise SemverError("Prerelease is empty")
    if all(c in _DIGITS for c in part):
        if len(part) > 1 and part[0] == "0":
            raise SemverError(f"Prerelease number must not contain leading zeroes {part!r}")
        return int(part)
    if any(c not in _IDENT for c in part):
        raise SemverError(f"Invalid character(s) found in prerelease {part!r}")
    return part


@functools.lru_cache(maxsize=4096)
def parse_semver(text: str) -> Semver:
    """Parse a strict semantic version; raises SemverError."""
    if text == "":
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    patch_text = parts[2]
    build: tuple[str, ...] = ()
    pre: tuple[str | int, ...] = ()
    if "+" in patch_text:
        patch_text, _, build_text = patch_text.partition("+")
        build = tuple(build_text.split("."))
        for b in build:
            if b == "":
                raise SemverError("Build meta data is empty")
            if any(c not in _IDENT for c in b):
                raise SemverError(f"Invalid character(s) found in build meta data {b!r}")
    if "-" in patch_text:
        patch_text, _, pre_text = patch_text.partition("-")
        pre = tuple(_prerelease(p) for p in pre_text.split("."))
    return Semver(
        _number(parts[0], "major"), _number(parts[1], "minor"), _number(patch_text, "patch"), pre, build
    )


def normalize_and_parse(text: str) -> Semver:
    """Parse after Kubernetes' normalization (no `v`, missing minor/patch as 0, no leading zeros)."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or p[0] not in _DIGITS:
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))


def _parse(text: Any, normalize: Any, name: str) -> Semver:
    if type(text) is not str or type(normalize) is not bool:
        raise rt.no_overload(name, text, normalize)
    return normalize_and_parse(text) if normalize else parse_semver(text)


def semver(text: Any, normalize: Any = False) -> Semver:
    """`semver(string[, normalize])`: parse a semantic version; malformed text is an error."""
    try:
        return _parse(text, normalize, "semver")
    except SemverError as e:
        raise CelEvalError(str(e)) from None


def is_semver(text: Any, normalize: Any = False) -> bool:
    """`isSemver(string[, normalize])`."""
    try:
        _parse(text, normalize, "isSemver")
    except SemverError:
        return False
    return True


def _v(v: Any, name: str) -> Semver:
    return rt.receiver(v, Semver, name)


def major(v: Any) -> int:
    """`semver.major()`."""
    return _v(v, "major").major


def minor(v: Any) -> int:
    """`semver.minor()`."""
    return _v(v, "minor").minor


def patch(v: Any) -> int:
    """`semver.patch()`."""
    return _v(v, "patch").patch


def is_greater_than(a: Any, b: Any) -> bool:
    """`semver.isGreaterThan(other)`."""
    return _v(a, "isGreaterThan").compare(_v(b, "isGreaterThan")) == 1


def is_less_than(a: Any, b: Any) -> bool:
    """`semver.isLessThan(other)`."""
    return _v(a, "isLessThan").compare(_v(b, "isLessThan")) == -1


def compare_to(a: Any, b: Any) -> int:
    """`semver.compareTo(other)`: -1, 0 or 1."""
    return _v(a, "compareTo").compare(_v(b, "compareTo"))


@functools.cache
def semver_functions() -> dict[str, FunctionDecl]:
    """The semver library's declarations, by function name."""
    s = SEMVER_TYPE
    decls = [
        FunctionDecl(
            "semver",
            (
                Overload("string_to_semver", (STRING,), s, impl=semver),
                Overload("string_bool_to_semver", (STRING, BOOL), s, impl=semver),
            ),
        ),
        FunctionDecl(
            "isSemver",
            (
                Overload("is_semver_string", (STRING,), BOOL, impl=is_semver),
                Overload("is_semver_string_bool", (STRING, BOOL), BOOL, impl=is_semver),
            ),
        ),
        FunctionDecl("major", (_m("semver_major", (s,), INT, major),)),
        FunctionDecl("minor", (_m("semver_minor", (s,), INT, minor),)),
        FunctionDecl("patch", (_m("semver_patch", (s,), INT, patch),)),
        FunctionDecl("isGreaterThan", (_m("semver_is_greater_than", (s, s), BOOL, is_greater_than),)),
        FunctionDecl("isLessThan", (_m("semver_is_less_than", (s, s), BOOL, is_less_than),)),
        FunctionDecl("compareTo", (_m("semver_compare_to", (s, s), INT, compare_to),)),
    ]
    return {d.name: d for d in decls}
