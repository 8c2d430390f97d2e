"""Kubernetes' named formats: `format.named(name)`, `format.<name>()` and `<Format>.validate(s)`.

`validate` returns an empty optional when `s` has the format, else an optional list of the reasons,
worded as Kubernetes' validation messages (k8s.io/apimachinery/pkg/util/validation). Formats:
dns1123Label, dns1123Subdomain, dns1035Label, qualifiedName, portName, the three `...Prefix` forms (a
trailing dash allowed, for generateName), labelValue, uri, uuid, byte (base64), date, datetime.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import re2

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.k8s_lib.url import url_issue
from policyd.cel.library_types import FORMAT_TYPE
from policyd.cel.optional import optional_of
from policyd.cel.types import STRING, ListType
from policyd.cel.values import OPTIONAL_NONE, OptionalValue

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = _LABEL + "(\\." + _LABEL + ")*"
_DNS1035 = "[a-z]([-a-z0-9]*[a-z0-9])?"
_KEY = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = "(" + _KEY + ")?"
_UUID = "(?i)^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$"
_TIME = "^([0-9]{2}):([0-9]{2}):([0-9]{2})(\\.[0-9]+)?(z|[+-][0-9]{2}:[0-9]{2})$"


@functools.cache
def _whole(pattern: str) -> Any:
    return re2.compile(pattern if pattern.startswith("(?i)") else f"^(?:{pattern})$")


def _matches(pattern: str, s: str) -> bool:
    return _whole(pattern).search(s) is not None


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    shown = "".join(f"{' or ' if i else ''}'{e}', " for i, e in enumerate(examples))
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def dns1123_label(s: str) -> list[str]:
    """Why `s` is not an RFC 1123 label (Kubernetes' IsDNS1123Label)."""
    errs = [_max_len(63)] if len(s) > 63 else []
    if not _matches(_LABEL, s):
        if _matches(_SUBDOMAIN, s):
            errs.append("must not contain dots")
        else:
            msg = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"  # noqa: E501
            errs.append(_regex_error(msg, _LABEL, "my-name", "123-abc"))
    return errs


def dns1123_subdomain(s: str) -> list[str]:
    """Why `s` is not an RFC 1123 subdomain (Kubernetes' IsDNS1123Subdomain)."""
    errs = [_max_len(253)] if len(s) > 253 else []
    if not _matches(_SUBDOMAIN, s):
        msg = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"  # noqa: E501
        errs.append(_regex_error(msg, _SUBDOMAIN, "example.com"))
    return errs


def dns1035_label(s: str) -> list[str]:
    """Why `s` is not an RFC 1035 label (Kubernetes' IsDNS1035Label)."""
    errs = [_max_len(63)] if len(s) > 63 else []
    if not _matches(_DNS1035, s):
        msg = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character"  # noqa: E501
        errs.append(_regex_error(msg, _DNS1035, "my-name", "abc-123"))
    return errs


_KEY_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"


def qualified_name(s: str) -> list[str]:
    """Why `s` is not a qualified name such as a label key (Kubernetes' IsQualifiedName)."""
    parts = s.split("/")
    errs: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain(prefix)]
    else:
        return [
            "a valid label key "
            + _regex_error(_KEY_MSG, _KEY, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len(63))
    if not _matches(_KEY, name):
        errs.append("name part " + _regex_error(_KEY_MSG, _KEY, "MyName", "my.name", "123-abc"))
    return errs


_PORT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")


def port_name(s: str) -> list[str]:
    """Why `s` is not a port name (Kubernetes' IsValidPortName: at most 15 of `a-z0-9-`, a letter among
    them, no `--`, no dash at either end)."""
    errs = [_max_len(15)] if len(s) > 15 else []
    if not s or not _PORT_NAME_CHARS.issuperset(s):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if _LETTERS.isdisjoint(s):
        errs.append("must contain at least one letter or number (a-z, 0-9)")
    if "--" in s:
        errs.append("must not contain consecutive hyphens")
    if s.startswith("-") or s.endswith("-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def label_value(s: str) -> list[str]:
    """Why `s` is not a label value (Kubernetes' IsValidLabelValue)."""
    errs = [_max_len(63)] if len(s) > 63 else []
    if not _matches(_LABEL_VALUE, s):
        msg = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"  # noqa: E501
        errs.append(_regex_error(msg, _LABEL_VALUE, "MyValue", "my_value", "12345"))
    return errs


def _prefix(check: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """The `...Prefix` form: a trailing dash is allowed (Kubernetes' maskTrailingDash)."""

    def masked(s: str) -> list[str]:
        return check(s[:-2] + "a" if len(s) > 1 and s.endswith("-") else s)

    return masked


def _uri(s: str) -> list[str]:
    issue = url_issue(s)
    return [] if issue is None else [issue]


def _uuid(s: str) -> list[str]:
    return [] if _matches(_UUID, s) else ["does not match the UUID format"]


def _byte(s: str) -> list[str]:
    try:
        base64.b64decode(s.replace("\r", "").replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        return ["invalid base64"]
    return []


def _is_date(s: str) -> bool:
    if len(s) != 10 or s[4] != "-" or s[7] != "-" or not s.replace("-", "").isdigit():
        return False
    try:
        dt.date(int(s[:4]), int(s[5:7]), int(s[8:]))
    except ValueError:
        return False
    return True


def _date(s: str) -> list[str]:
    return [] if _is_date(s) else ["invalid date"]


def _datetime(s: str) -> list[str]:
    lowered = s.lower()
    date, sep, time = lowered.partition("t")
    m = _whole(_TIME).search(time) if sep and _is_date(date) else None
    valid = m is not None and int(m.group(1)) <= 23 and int(m.group(2)) <= 59 and int(m.group(3)) <= 59
    return [] if valid else ["invalid datetime"]


@dataclass(frozen=True)
class NamedFormat:
    """A `kubernetes.NamedFormat` value: a name and its validation."""

    name: str
    check: Callable[[str], list[str]] = field(compare=False)
    cel_type_name: ClassVar[str] = FORMAT_TYPE.name


FORMATS: dict[str, NamedFormat] = {
    key: NamedFormat(name, check)
    for key, name, check in (
        ("dns1123Label", "DNS1123Label", dns1123_label),
        ("dns1123Subdomain", "DNS1123Subdomain", dns1123_subdomain),
        ("dns1035Label", "DNS1035Label", dns1035_label),
        ("qualifiedName", "QualifiedName", qualified_name),
        ("portName", "PortName", port_name),
        ("dns1123LabelPrefix", "DNS1123LabelPrefix", _prefix(dns1123_label)),
        ("dns1123SubdomainPrefix", "DNS1123SubdomainPrefix", _prefix(dns1123_subdomain)),
        ("dns1035LabelPrefix", "DNS1035LabelPrefix", _prefix(dns1035_label)),
        ("labelValue", "LabelValue", label_value),
        ("uri", "URI", _uri),
        ("uuid", "uuid", _uuid),
        ("byte", "byte", _byte),
        ("date", "date", _date),
        ("datetime", "datetime", _datetime),
    )
}
"""The named formats by the name `format.named()` and `format.<name>()` use."""


def named(name: Any) -> OptionalValue:
    """`format.named(name)`: the format, or none when there is no such format."""
    if type(name) is not str:
        raise rt.no_overload("format.named", name)
    found = FORMATS.get(name)
    return OPTIONAL_NONE if found is None else OptionalValue(found, True)


def validate(f: Any, s: Any) -> OptionalValue:
    """`<Format>.validate(s)`: none when `s` has the format, else the list of reasons."""
    if type(f) is not NamedFormat or type(s) is not str:
        raise rt.no_overload("validate", f, s)
    errors = f.check(s)
    return OptionalValue(errors, True) if errors else OPTIONAL_NONE


def _constant(f: NamedFormat) -> Callable[[], NamedFormat]:
    def get() -> NamedFormat:
        return f

    return get


@functools.cache
def format_functions() -> dict[str, FunctionDecl]:
    """The named-format library's declarations, by (namespaced) function name."""
    decls = [
        FunctionDecl(
            "format.named", (Overload("format-named", (STRING,), optional_of(FORMAT_TYPE), impl=named),)
        ),
        FunctionDecl(
            "validate",
            (
                Overload(
                    "format-validate",
                    (FORMAT_TYPE, STRING),
                    optional_of(ListType(STRING)),
                    member=True,
                    impl=validate,
                ),
            ),
        ),
    ]
    decls += [
        FunctionDecl(f"format.{key}", (Overload(f"format.{key}", (), FORMAT_TYPE, impl=_constant(f)),))
        for key, f in FORMATS.items()
    ]
    return {d.name: d for d in decls}
