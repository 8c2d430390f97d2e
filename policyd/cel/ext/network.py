"""IP addresses and CIDR ranges: cel-go's network extension and Kubernetes' `ip` / `cidr` libraries.

Both define the same functions on `net.IP` and `net.CIDR` with Go's `net/netip` semantics: IPv4
without leading zeros, IPv6 without zones, IPv4-mapped IPv6 addresses rejected; a CIDR keeps the
address it was written with (`cidr('10.0.0.1/8').ip()` is `10.0.0.1`; `masked()` clears host bits).
Malformed text is an evaluation error, a literal argument too (as in Kubernetes: `ip('1.2.3')`
compiles, and only fails if evaluated); parsed values are memoised (they are immutable), so a label
read on every node is parsed once.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from typing import Any, ClassVar

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.env import member_overload as _m
from policyd.cel.library_types import CIDR_TYPE, IP_TYPE
from policyd.cel.types import BOOL, INT, STRING
from policyd.errors import CelEvalError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class IP:
    """A `net.IP` value."""

    address: Address
    cel_type_name: ClassVar[str] = IP_TYPE.name

    def __str__(self) -> str:
        return str(self.address)


@dataclass(frozen=True)
class CIDR:
    """A `net.CIDR` value: an address and a prefix length (host bits kept)."""

    address: Address
    bits: int
    cel_type_name: ClassVar[str] = CIDR_TYPE.name

    def __str__(self) -> str:
        return f"{self.address}/{self.bits}"

    def mask(self) -> int:
        """The network mask as an integer of the address's width."""
        width = self.address.max_prefixlen
        return ((1 << width) - 1) ^ ((1 << (width - self.bits)) - 1)

    def network_address(self) -> Address:
        """The address with the host bits cleared."""
        return type(self.address)(int(self.address) & self.mask())


class _Invalid(Exception):
    """Why a string is not an IP address or CIDR, in Kubernetes' words."""


def go_quote(text: str) -> str:
    """Go's strconv.Quote (`%q`): double quotes; backslash, quote and non-printable characters escaped."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
_HEX = frozenset("0123456789abcdefABCDEF")


def _v4_problem(s: str) -> tuple[str, str] | None:
    """Why Go's netip rejects `s` as dotted IPv4 (its message, and the rest of `s` it points at), or None."""
    fields, value, digits = 0, 0, 0
    for i, ch in enumerate(s):
        if "0" <= ch <= "9":
            if digits == 1 and value == 0:
                return "IPv4 field has octet with leading zero", ""
            value, digits = value * 10 + ord(ch) - 48, digits + 1
            if value > 255:
                return "IPv4 field has value >255", ""
        elif ch == ".":
            if i == 0 or i == len(s) - 1 or s[i - 1] == ".":
                return "IPv4 field must have at least one digit", s[i:]
            if fields == 3:
                return "IPv4 address too long", ""
            fields, value, digits = fields + 1, 0, 0
        else:
            return "unexpected character", s[i:]
    return ("IPv4 address too short", "") if fields < 3 else None


def _v6_problem(text: str) -> tuple[str, str] | None:
    """Why Go's netip rejects `text` as IPv6 (message, the rest of the text it points at), or None."""
    s, percent, zone = text.partition("%")
    if percent and not zone:
        return "zone must be a non-empty string", ""
    filled, ellipsis = 0, -1  # bytes of the 16 filled, where the :: stands
    if s.startswith("::"):
        ellipsis, s = 0, s[2:]
        if not s:
            return None
    while filled < 16:
        off = 0
        while off < len(s) and s[off] in _HEX:
            off += 1
            if int(s[:off], 16) > 0xFFFF:
                return "IPv6 field has value >=2^16", s
        if off == 0:
            return "each colon-separated field must have at least one digit", s
        if off < len(s) and s[off] == ".":
            if ellipsis < 0 and filled != 12:
                return "embedded IPv4 address must replace the final 2 fields of the address", s
            if filled + 4 > 16:
                return "too many hex fields to fit an embedded IPv4 at the end of the address", s
            v4 = _v4_problem(s)
            if v4 is not None:
                return _addr_error(s, *v4), s
            s, filled = "", filled + 4
            break
        filled += 2
        s = s[off:]
        if not s:
            break
        if s[0] != ":":
            return "unexpected character, want colon", s
        if len(s) == 1:
            return "colon must be followed by more characters", s
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                return "multiple :: in address", s
            ellipsis, s = filled, s[1:]
            if not s:
                break
    if s:
        return "trailing garbage after address", s
    if filled < 16 and ellipsis < 0:
        return "address string too short", ""
    if filled == 16 and ellipsis >= 0:
        return "the :: must expand to at least one field of zeros", ""
    return None


def _addr_error(text: str, message: str, at: str) -> str:
    """netip's parseAddrError text."""
    where = f" (at {go_quote(at)})" if at else ""
    return f"ParseAddr({go_quote(text)}): {message}{where}"


def _netip_addr_error(text: str) -> str | None:
    """Go's `netip.ParseAddr(text)` error, or None when it parses: the kind is decided by the first
    '.', ':' or '%' (so "1.2.3.4%x" is checked as IPv4)."""
    for ch in text:
        if ch == ".":
            problem = _v4_problem(text)
            break
        if ch == ":":
            problem = _v6_problem(text)
            break
        if ch == "%":
            problem = ("missing IPv6 address", "")
            break
    else:
        problem = ("unable to parse IP", "")
    return None if problem is None else _addr_error(text, *problem)


def _value(text: str) -> Address:
    """The address of `text`, which netip took (`_netip_addr_error` is None) and which has no zone."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:  # netip takes a hex group of more than 4 digits with leading zeros (0da4a)
        groups = [g if "." in g else (g.lstrip("0") or "0") if g else g for g in text.split(":")]
        return ipaddress.ip_address(":".join(groups))


@functools.lru_cache(maxsize=4096)
def _parse_ip(text: str) -> IP:
    """Kubernetes' parseIPAddr: netip's address, no zone, not IPv4-mapped."""
    error = _netip_addr_error(text)
    if error is not None:
        raise _Invalid(f"IP Address {go_quote(text)} parse error during conversion from string: {error}")
    if "%" in text:  # netip took an IPv6 zone: any text after the '%'
        raise _Invalid(f"IP address {go_quote(text)} with zone value is not allowed")
    address = _value(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise _Invalid(f"IPv4-mapped IPv6 address {go_quote(text)} is not allowed")
    return IP(address)


_CIDR_ERROR = "network address parse error during conversion from string: "
_INT_MAX = 2**63 - 1


def _prefix_problem(text: str) -> str | None:
    """Go's `netip.ParsePrefix(text)` error message (after its `netip.ParsePrefix("...")`: ), or None."""
    head, slash, bits_text = text.rpartition("/")
    if not slash:
        return "no '/'"
    error = _netip_addr_error(head)
    if error is not None:
        return error
    if "%" in head:
        return "IPv6 zones cannot be present in a prefix"
    leading_ok = len(bits_text) <= 1 or "1" <= bits_text[0] <= "9"
    if not (leading_ok and bits_text.isascii() and bits_text.isdigit()):
        return f"bad bits after slash: {go_quote(bits_text)}"
    bits = int(bits_text)
    if bits > _INT_MAX:  # beyond strconv.Atoi
        return f"bad bits after slash: {go_quote(bits_text)}"
    if bits > (32 if "." in head and ":" not in head else 128):
        return "prefix length out of range"
    return None


@functools.lru_cache(maxsize=4096)
def _parse_cidr(text: str) -> CIDR:
    """Kubernetes' cidr(): netip's prefix, not IPv4-mapped; its errors wrapped as the library wraps
    them (twice for netip's own)."""
    problem = _prefix_problem(text)
    if problem is not None:
        raise _Invalid(f"{_CIDR_ERROR}{_CIDR_ERROR}netip.ParsePrefix({go_quote(text)}): {problem}")
    head, _, bits_text = text.rpartition("/")
    address = _value(head)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise _Invalid(f"{_CIDR_ERROR}IPv4-mapped IPv6 address {go_quote(text)} is not allowed")
    return CIDR(address, int(bits_text))


def ip(text: Any) -> IP:
    """`ip(string)`: parse an IP address; malformed text is an error."""
    try:
        return _parse_ip(rt.string_arg(text, "ip"))
    except _Invalid as e:
        raise CelEvalError(str(e)) from None


def cidr(text: Any) -> CIDR:
    """`cidr(string)`: parse a CIDR range; malformed text is an error."""
    try:
        return _parse_cidr(rt.string_arg(text, "cidr"))
    except _Invalid as e:
        raise CelEvalError(str(e)) from None


def ip_issue(text: Any) -> str | None:
    """Why `text` is not an IP address, or None."""
    try:
        _parse_ip(text) if type(text) is str else None
    except _Invalid as e:
        return str(e)
    return None


def cidr_issue(text: Any) -> str | None:
    """Why `text` is not a CIDR, or None."""
    try:
        _parse_cidr(text) if type(text) is str else None
    except _Invalid as e:
        return str(e)
    return None


def is_ip(text: Any) -> bool:
    """`isIP(string)`."""
    return ip_issue(rt.string_arg(text, "isIP")) is None


def is_cidr(text: Any) -> bool:
    """`isCIDR(string)`."""
    return cidr_issue(rt.string_arg(text, "isCIDR")) is None


def is_canonical(text: Any) -> bool:
    """`ip.isCanonical(string)`: the address is written as Go prints it (lowercase, RFC 5952)."""
    return str(ip(text)) == text


def _ip(v: Any, name: str) -> Address:
    return rt.receiver(v, IP, name).address


def _cidr(v: Any, name: str) -> CIDR:
    return rt.receiver(v, CIDR, name)


def _first16(a: Address) -> int:
    return int(a) >> 112 if a.version == 6 else -1


def family(v: Any) -> int:
    """`ip.family()`: 4 or 6."""
    return _ip(v, "family").version


def is_unspecified(v: Any) -> bool:
    """`ip.isUnspecified()`: 0.0.0.0 or ::."""
    return int(_ip(v, "isUnspecified")) == 0


def is_loopback(v: Any) -> bool:
    """`ip.isLoopback()`: 127.0.0.0/8 or ::1."""
    a = _ip(v, "isLoopback")
    return (int(a) >> 24) == 127 if a.version == 4 else int(a) == 1


def _is_multicast(a: Address) -> bool:
    return (int(a) >> 28) == 0xE if a.version == 4 else (_first16(a) >> 8) == 0xFF


def is_link_local_multicast(v: Any) -> bool:
    """`ip.isLinkLocalMulticast()`: 224.0.0.0/24 or ff02::/16 (any flags)."""
    a = _ip(v, "isLinkLocalMulticast")
    return (int(a) >> 8) == 0xE00000 if a.version == 4 else (_first16(a) & 0xFF0F) == 0xFF02


def _is_link_local_unicast(a: Address) -> bool:
    return (int(a) >> 16) == 0xA9FE if a.version == 4 else (_first16(a) & 0xFFC0) == 0xFE80


def is_link_local_unicast(v: Any) -> bool:
    """`ip.isLinkLocalUnicast()`: 169.254.0.0/16 or fe80::/10."""
    return _is_link_local_unicast(_ip(v, "isLinkLocalUnicast"))


def is_global_unicast(v: Any) -> bool:
    """`ip.isGlobalUnicast()`: as Go, any unicast address but unspecified, loopback, link-local, broadcast."""
    a = _ip(v, "isGlobalUnicast")
    if int(a) == 0 or (a.version == 4 and int(a) == 0xFFFFFFFF):
        return False
    loopback = (int(a) >> 24) == 127 if a.version == 4 else int(a) == 1
    return not (loopback or _is_multicast(a) or _is_link_local_unicast(a))


def ip_to_string(v: Any) -> str:
    """`string(ip)`."""
    return str(_ip(v, "string"))


def cidr_to_string(v: Any) -> str:
    """`string(cidr)`."""
    return str(_cidr(v, "string"))


def _contains(c: CIDR, a: Address) -> bool:
    mask = c.mask()
    return c.address.version == a.version and (int(a) & mask) == (int(c.address) & mask)


def contains_ip(c: Any, other: Any) -> bool:
    """`cidr.containsIP(ip | string)`."""
    r = _cidr(c, "containsIP")
    address = ip(other).address if type(other) is str else _ip(other, "containsIP")
    return _contains(r, address)


def contains_cidr(c: Any, other: Any) -> bool:
    """`cidr.containsCIDR(cidr | string)`: every address of `other` is in `c`."""
    r = _cidr(c, "containsCIDR")
    inner = cidr(other) if type(other) is str else _cidr(other, "containsCIDR")
    return inner.bits >= r.bits and _contains(r, inner.address)


def cidr_ip(c: Any) -> IP:
    """`cidr.ip()`: the address the range was written with."""
    return IP(_cidr(c, "ip").address)


def masked(c: Any) -> CIDR:
    """`cidr.masked()`: the range with its host bits cleared."""
    r = _cidr(c, "masked")
    return CIDR(r.network_address(), r.bits)


def prefix_length(c: Any) -> int:
    """`cidr.prefixLength()`."""
    return _cidr(c, "prefixLength").bits


def is_mask(c: Any) -> bool:
    """`cidr.isMask()`: the address has no host bits set."""
    r = _cidr(c, "isMask")
    return r.address == r.network_address()


@functools.cache
def network_functions() -> dict[str, FunctionDecl]:
    """The IP and CIDR declarations (cel-go's network extension = Kubernetes' ip and cidr libraries)."""
    ip_t, cidr_t = IP_TYPE, CIDR_TYPE
    decls = [
        FunctionDecl(
            "ip",
            (
                Overload("string_to_ip", (STRING,), ip_t, impl=ip),
                _m("cidr_ip", (cidr_t,), ip_t, cidr_ip),
            ),
        ),
        FunctionDecl(
            "cidr",
            (Overload("string_to_cidr", (STRING,), cidr_t, impl=cidr),),
        ),
        FunctionDecl("isIP", (Overload("is_ip", (STRING,), BOOL, impl=is_ip),)),
        FunctionDecl("isCIDR", (Overload("is_cidr", (STRING,), BOOL, impl=is_cidr),)),
        FunctionDecl("ip.isCanonical", (Overload("ip_is_canonical", (STRING,), BOOL, impl=is_canonical),)),
        FunctionDecl(
            "string",
            (
                Overload("ip_to_string", (ip_t,), STRING, impl=ip_to_string),
                Overload("cidr_to_string", (cidr_t,), STRING, impl=cidr_to_string),
            ),
        ),
        FunctionDecl("family", (_m("ip_family", (ip_t,), INT, family),)),
        FunctionDecl("isUnspecified", (_m("ip_is_unspecified", (ip_t,), BOOL, is_unspecified),)),
        FunctionDecl("isLoopback", (_m("ip_is_loopback", (ip_t,), BOOL, is_loopback),)),
        FunctionDecl(
            "isLinkLocalMulticast",
            (_m("ip_is_link_local_multicast", (ip_t,), BOOL, is_link_local_multicast),),
        ),
        FunctionDecl(
            "isLinkLocalUnicast", (_m("ip_is_link_local_unicast", (ip_t,), BOOL, is_link_local_unicast),)
        ),
        FunctionDecl("isGlobalUnicast", (_m("ip_is_global_unicast", (ip_t,), BOOL, is_global_unicast),)),
        FunctionDecl(
            "containsIP",
            (
                _m("cidr_contains_ip_ip", (cidr_t, ip_t), BOOL, contains_ip),
                _m("cidr_contains_ip_string", (cidr_t, STRING), BOOL, contains_ip),
            ),
        ),
        FunctionDecl(
            "containsCIDR",
            (
                _m("cidr_contains_cidr", (cidr_t, cidr_t), BOOL, contains_cidr),
                _m("cidr_contains_cidr_string", (cidr_t, STRING), BOOL, contains_cidr),
            ),
        ),
        FunctionDecl("masked", (_m("cidr_masked", (cidr_t,), cidr_t, masked),)),
        FunctionDecl("prefixLength", (_m("cidr_prefix_length", (cidr_t,), INT, prefix_length),)),
        FunctionDecl("isMask", (_m("cidr_is_mask", (cidr_t,), BOOL, is_mask),)),
    ]
    return {d.name: d for d in decls}
