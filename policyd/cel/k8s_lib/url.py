"""Kubernetes' URL library: `url`, `isURL` and the `getScheme` ... `getQuery` accessors.

A URL is an absolute URI or an absolute path, parsed as Go's `net/url` does for a request URI
(`url.ParseRequestURI`, then `url.Parse` for the parts): the scheme is lower-cased, the authority is
`[userinfo@]host[:port]` with a numeric port, path escapes must be valid, control characters are
rejected. `getEscapedPath` re-escapes the path as Go's `URL.EscapedPath`; `getQuery` returns every
value of every key (`?a=1&a=2` -> `{'a': ['1', '2']}`), unescaped, `+` meaning a space. Parsed URLs
are memoised (they are immutable).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.library_types import URL_TYPE
from policyd.cel.types import BOOL, STRING, ListType, MapType
from policyd.errors import CelEvalError

_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_HOST_OK = _ALNUM | frozenset("!$&'()*+,;=:[]<>\"-_.~%")
_PATH_KEEP = _ALNUM | frozenset("-_.~$&+,/:;=@")
_PATH_VALID = _PATH_KEEP | frozenset("!'()*[]%")
_USER_OK = _ALNUM | frozenset("-._:~!$&'()*+,;=%@")


class URLError(Exception):
    """Why a string is not a URL (Go's messages)."""


@dataclass(frozen=True)
class URL:
    """A `kubernetes.URL` value: the parts Go's url.Parse keeps; equal when written the same."""

    text: str
    scheme: str = field(compare=False)
    host: str = field(compare=False)
    path: str = field(compare=False)
    raw_path: str = field(compare=False)
    raw_query: str = field(compare=False)
    cel_type_name: ClassVar[str] = URL_TYPE.name

    def __str__(self) -> str:
        return self.text


def _unhex(c: str) -> int:
    return int(c, 16)


def _unescape(s: str, host: bool = False) -> str:
    """Go's url.unescape for paths and hosts: % escapes must be complete; hosts allow few characters."""
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c == "%":
            h = s[i + 1 : i + 3]
            if len(h) < 2 or any(x not in "0123456789abcdefABCDEF" for x in h):
                raise URLError(f'invalid URL escape "{s[i : i + 3]}"')
            out.append(_unhex(h))
            i += 3
            continue
        if host and ord(c) < 0x80 and c not in _HOST_OK:
            raise URLError(f'invalid character "{c}" in host name')
        out.extend(c.encode("utf-8", "surrogatepass"))
        i += 1
    return out.decode("utf-8", "surrogateescape")


def _escape_path(path: str) -> str:
    out = []
    for b in path.encode("utf-8", "surrogateescape"):
        c = chr(b)
        out.append(c if b < 0x80 and c in _PATH_KEEP else f"%{b:02X}")
    return "".join(out)


def _valid_port(colon_port: str) -> bool:
    return colon_port == "" or (colon_port[0] == ":" and all(c in "0123456789" for c in colon_port[1:]))


def _parse_host(host: str) -> str:
    if host.startswith("["):
        end = host.rfind("]")
        if end < 0:
            raise URLError("missing ']' in host")
        if not _valid_port(host[end + 1 :]):
            raise URLError(f'invalid port "{host[end + 1 :]}" after host')
    else:
        colon = host.rfind(":")
        if colon >= 0 and not _valid_port(host[colon:]):
            raise URLError(f'invalid port "{host[colon:]}" after host')
    return _unescape(host, host=True)


def _scheme(raw: str) -> tuple[str, str]:
    for i, c in enumerate(raw):
        if c.isascii() and c.isalpha():
            continue
        if c.isascii() and (c.isdigit() or c in "+-."):
            if i == 0:
                return "", raw
            continue
        if c == ":":
            if i == 0:
                raise URLError("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return "", raw
    return "", raw


@functools.lru_cache(maxsize=4096)
def parse_url(raw: str) -> URL:
    """Parse a request URI as Go's url.ParseRequestURI (then url.Parse); raises URLError."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise URLError("net/url: invalid control character in URL")
    if raw == "":
        raise URLError("empty url")
    # ParseRequestURI validates the whole text; url.Parse then splits off a fragment
    _parse(raw, via_request=True)
    return _parse(raw.partition("#")[0], via_request=False, text=raw)


def _parse(raw: str, *, via_request: bool, text: str | None = None) -> URL:
    if raw == "*":
        return URL(text or raw, "", "", "*", "", "")
    scheme, rest = _scheme(raw)
    scheme = scheme.lower()
    if rest.endswith("?") and rest.count("?") == 1:
        rest, query = rest[:-1], ""
    else:
        rest, _, query = rest.partition("?")
    if not rest.startswith("/"):
        if scheme:
            return URL(text or raw, scheme, "", "", "", query)  # opaque, e.g. mailto:x
        if via_request:
            raise URLError("invalid URI for request")
        if ":" in rest.partition("/")[0]:
            raise URLError("first path segment in URL cannot contain colon")
    host = ""
    if (scheme or (not via_request and not rest.startswith("///"))) and rest.startswith("//"):
        authority, slash, tail = rest[2:].partition("/")
        rest = slash + tail
        userinfo, at, hostport = authority.rpartition("@")
        if at and any(c not in _USER_OK for c in userinfo if ord(c) < 0x80):
            raise URLError("net/url: invalid userinfo")
        host = _parse_host(hostport)
    path = _unescape(rest)
    raw_path = rest if rest != _escape_path(path) else ""
    return URL(text or raw, scheme, host, path, raw_path, query)


def parse_authority(authority: str) -> str:
    """The host (`host[:port]`, unescaped) Go's url.Parse finds in `//` + `authority`; raises URLError."""
    raw = "//" + authority
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise URLError("net/url: invalid control character in URL")
    return _parse(raw.partition("#")[0], via_request=False).host


def _url(v: Any, name: str) -> URL:
    return rt.receiver(v, URL, name)


def url(text: Any) -> URL:
    """`url(string)`: parse an absolute URI or absolute path; anything else is an error."""
    if type(text) is not str:
        raise rt.no_overload("url", text)
    try:
        return parse_url(text)
    except URLError as e:
        raise CelEvalError(f"URL parse error during conversion from string: parse {text!r}: {e}") from None


def url_issue(text: Any) -> str | None:
    """Why `text` is not a request URI (Go's message), or None."""
    try:
        parse_url(text)
    except URLError as e:
        return f"parse {text!r}: {e}"
    return None


def is_url(text: Any) -> bool:
    """`isURL(string)`."""
    if type(text) is not str:
        raise rt.no_overload("isURL", text)
    return url_issue(text) is None


def get_scheme(u: Any) -> str:
    """`url.getScheme()`."""
    return _url(u, "getScheme").scheme


def get_host(u: Any) -> str:
    """`url.getHost()`: host and port, IPv6 in brackets."""
    return _url(u, "getHost").host


def _split_host_port(host: str) -> tuple[str, str]:
    colon = host.rfind(":")
    hostname, port = (
        (host[:colon], host[colon + 1 :]) if colon >= 0 and _valid_port(host[colon:]) else (host, "")
    )
    if hostname.startswith("[") and hostname.endswith("]"):
        hostname = hostname[1:-1]
    return hostname, port


def get_hostname(u: Any) -> str:
    """`url.getHostname()`: the host without port, IPv6 without brackets."""
    return _split_host_port(_url(u, "getHostname").host)[0]


def get_port(u: Any) -> str:
    """`url.getPort()`: the port, "" when absent."""
    return _split_host_port(_url(u, "getPort").host)[1]


def get_escaped_path(u: Any) -> str:
    """`url.getEscapedPath()`: the path, escaped as Go's URL.EscapedPath."""
    parsed = _url(u, "getEscapedPath")
    raw = parsed.raw_path
    if raw and all(c in _PATH_VALID or ord(c) >= 0x80 for c in raw):
        try:
            if _unescape(raw) == parsed.path:
                return raw
        except URLError:
            pass
    if parsed.path == "*":
        return "*"
    return _escape_path(parsed.path)


def _query_unescape(s: str) -> str:
    return _unescape(s.replace("+", " "))


def get_query(u: Any) -> dict[str, list[str]]:
    """`url.getQuery()`: key -> every value, unescaped (pairs with bad escapes or ';' are skipped)."""
    out: dict[str, list[str]] = {}
    for pair in _url(u, "getQuery").raw_query.split("&"):
        if pair == "" or ";" in pair:
            continue
        key, _, value = pair.partition("=")
        try:
            k, v = _query_unescape(key), _query_unescape(value)
        except URLError:
            continue
        out.setdefault(k, []).append(v)
    return out


def _m(oid: str, result: Any, impl: Any) -> Overload:
    return Overload(oid, (URL_TYPE,), result, member=True, impl=impl)


@functools.cache
def url_functions() -> dict[str, FunctionDecl]:
    """The URL library's declarations, by function name."""
    decls = [
        FunctionDecl("url", (Overload("string_to_url", (STRING,), URL_TYPE, impl=url),)),
        FunctionDecl("isURL", (Overload("is_url_string", (STRING,), BOOL, impl=is_url),)),
        FunctionDecl("getScheme", (_m("url_get_scheme", STRING, get_scheme),)),
        FunctionDecl("getHost", (_m("url_get_host", STRING, get_host),)),
        FunctionDecl("getHostname", (_m("url_get_hostname", STRING, get_hostname),)),
        FunctionDecl("getPort", (_m("url_get_port", STRING, get_port),)),
        FunctionDecl("getEscapedPath", (_m("url_get_escaped_path", STRING, get_escaped_path),)),
        FunctionDecl("getQuery", (_m("url_get_query", MapType(STRING, ListType(STRING)), get_query),)),
    ]
    return {d.name: d for d in decls}
