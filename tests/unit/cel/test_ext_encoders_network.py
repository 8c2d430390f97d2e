"""cel-go's encoders extension and the IP / CIDR library (cel-spec network_ext, Kubernetes ip/cidr)."""

from __future__ import annotations

from typing import Any

import pytest

from policyd.cel.program import CelCompileError, compile_expression
from policyd.errors import CelEvalError
from tests.unit.cel.library_cases import ENV, ev


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("base64.encode(b'hello')", "aGVsbG8="),
        ("base64.decode('aGVsbG8=')", b"hello"),
        ("base64.decode('aGVsbG8')", b"hello"),  # unpadded
        ("base64.decode(base64.encode(b'\\x00\\xff'))", b"\x00\xff"),
    ],
)
def test_base64(text: str, expected: Any) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize("text", ["base64.decode('a')", "base64.decode('aGVs*G8=')", "base64.decode(s)"])
def test_base64_decode_errors(text: str) -> None:
    with pytest.raises(CelEvalError, match="illegal base64 data"):
        ev(text, s="aGV=sbG8")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("string(ip('192.168.0.1'))", "192.168.0.1"),
        ("string(ip('2001:DB8::68'))", "2001:db8::68"),
        ("isIP('192.168.0.1')", True),
        ("isIP('192.168.0.01')", False),  # leading zeros, as Go's netip
        ("isIP('fe80::1%en0')", False),
        ("ip.isCanonical('127.0.0.1')", True),
        ("ip.isCanonical('2001:DB8::68')", False),
        ("ip.isCanonical('2001:db8:0:0:0:0:0:68')", False),
        ("ip('192.168.0.1').family()", 4),
        ("ip('::1').family()", 6),
        ("ip('0.0.0.0').isUnspecified()", True),
        ("ip('::').isUnspecified()", True),
        ("ip('127.0.0.5').isLoopback()", True),
        ("ip('::1').isLoopback()", True),
        ("ip('224.0.0.1').isLinkLocalMulticast()", True),
        ("ip('224.0.1.1').isLinkLocalMulticast()", False),
        ("ip('ff02::1').isLinkLocalMulticast()", True),
        ("ip('169.254.169.254').isLinkLocalUnicast()", True),
        ("ip('fe80::1').isLinkLocalUnicast()", True),
        ("ip('fd80::1').isLinkLocalUnicast()", False),
        ("ip('192.168.0.1').isGlobalUnicast()", True),  # private addresses are global unicast in Go
        ("ip('255.255.255.255').isGlobalUnicast()", False),
        ("ip('ff00::1').isGlobalUnicast()", False),
        ("ip('2001:db8::1') == ip('2001:DB8::1')", True),
        ("ip('127.0.0.1') == ip('10.0.0.1')", False),
        ("type(ip('192.168.0.1')) == net.IP", True),
        ("type(cidr('10.0.0.0/8')) == net.CIDR", True),
        ("isCIDR('10.0.0.0/8')", True),
        ("isCIDR('10.0.0.0/33')", False),
        ("isCIDR('10.0.0.0/08')", False),
        ("cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))", True),
        ("cidr('192.168.0.0/24').containsIP('192.168.1.1')", False),
        ("cidr('2001:db8::/32').containsIP(ip('192.168.1.1'))", False),
        ("cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/25'))", True),
        ("cidr('192.168.0.0/24').containsCIDR('192.168.0.0/23')", False),
        ("cidr('10.0.0.0/8').containsCIDR('10.0.0.0/8')", True),
        ("cidr('192.168.0.1/24').ip() == ip('192.168.0.1')", True),
        ("string(cidr('192.168.0.1/24').masked())", "192.168.0.0/24"),
        ("cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')", True),
        ("cidr('192.168.0.0/24').prefixLength()", 24),
        ("string(cidr('2001:db8::/32'))", "2001:db8::/32"),
        ("cidr('192.168.0.0/24').isMask()", True),
        ("cidr('192.168.0.1/24').isMask()", False),
        ("cidr('127.0.0.1/24') == cidr('127.0.0.1/24')", True),
        ("cidr('2001:db8::/32') == cidr('10.0.0.1/32')", False),
        ("ip(s).family()", 6),
    ],
)
def test_network(text: str, expected: Any) -> None:
    assert ev(text, s="::2") == expected


# Kubernetes' library/ip.go and cidr.go wrap Go's netip errors (ip_test.go and cidr_test.go compare the
# texts exactly); netip's reasons and the parts of the text they point at, quoted as Go's %q
_PARSE = "parse error during conversion from string"
_NETWORK = "network address parse error during conversion from string: "


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "192.168.0.1.0",
            f'IP Address "192.168.0.1.0" {_PARSE}: ParseAddr("192.168.0.1.0"): IPv4 address too long',
        ),
        (
            "2001:db8:::68",
            f'IP Address "2001:db8:::68" {_PARSE}: ParseAddr("2001:db8:::68"): '
            'each colon-separated field must have at least one digit (at ":68")',
        ),
        ("1.2.3", f'IP Address "1.2.3" {_PARSE}: ParseAddr("1.2.3"): IPv4 address too short'),
        (
            "1.2.3.04",
            f'IP Address "1.2.3.04" {_PARSE}: ParseAddr("1.2.3.04"): IPv4 field has octet with leading zero',
        ),
        ("1.2.3.256", f'IP Address "1.2.3.256" {_PARSE}: ParseAddr("1.2.3.256"): IPv4 field has value >255'),
        (
            "1..2.3",
            f'IP Address "1..2.3" {_PARSE}: ParseAddr("1..2.3"): IPv4 field must have at least one digit (at ".2.3")',
        ),
        ("host", f'IP Address "host" {_PARSE}: ParseAddr("host"): unable to parse IP'),
        ("1::2::3", f'IP Address "1::2::3" {_PARSE}: ParseAddr("1::2::3"): multiple :: in address (at ":3")'),
        (
            "1:2:3:4:5:6:7:8::",
            f'IP Address "1:2:3:4:5:6:7:8::" {_PARSE}: ParseAddr("1:2:3:4:5:6:7:8::"): '
            "the :: must expand to at least one field of zeros",
        ),
        ("1:2:3", f'IP Address "1:2:3" {_PARSE}: ParseAddr("1:2:3"): address string too short'),
        ("fe80::1%en0", 'IP address "fe80::1%en0" with zone value is not allowed'),
        ("::ffff:192.168.0.1", 'IPv4-mapped IPv6 address "::ffff:192.168.0.1" is not allowed'),
    ],
)
def test_malformed_addresses_are_runtime_errors(value: str, message: str) -> None:
    with pytest.raises(CelEvalError) as info:
        ev("ip(s)", s=value)
    assert str(info.value) == message
    assert ev("isIP(s)", s=value) is False


def test_addresses_netip_takes_python_s_parser_does_not_follow_netip() -> None:
    # netip splits the zone at the first '%' (any text after it) and takes a group of more than four
    # hex digits with leading zeros
    with pytest.raises(CelEvalError) as info:
        ev("ip(s)", s="fe80::7%eth%0")
    assert str(info.value) == 'IP address "fe80::7%eth%0" with zone value is not allowed'
    assert ev("string(ip(s))", s="2001:db8::0da4a") == "2001:db8::da4a"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("192.168.0.0/", f'{_NETWORK}{_NETWORK}netip.ParsePrefix("192.168.0.0/"): bad bits after slash: ""'),
        ("2001:db8::/", f'{_NETWORK}{_NETWORK}netip.ParsePrefix("2001:db8::/"): bad bits after slash: ""'),
        ("10.0.0.0/08", f'{_NETWORK}{_NETWORK}netip.ParsePrefix("10.0.0.0/08"): bad bits after slash: "08"'),
        ("10.0.0.0/33", f'{_NETWORK}{_NETWORK}netip.ParsePrefix("10.0.0.0/33"): prefix length out of range'),
        ("10.0.0.0", f"{_NETWORK}{_NETWORK}netip.ParsePrefix(\"10.0.0.0\"): no '/'"),
        (
            "1.2.3/8",
            f'{_NETWORK}{_NETWORK}netip.ParsePrefix("1.2.3/8"): ParseAddr("1.2.3"): IPv4 address too short',
        ),
        (
            "fe80::1%eth0/64",
            f'{_NETWORK}{_NETWORK}netip.ParsePrefix("fe80::1%eth0/64"): IPv6 zones cannot be present in a prefix',
        ),
        ("::ffff:1.2.3.4/120", f'{_NETWORK}IPv4-mapped IPv6 address "::ffff:1.2.3.4/120" is not allowed'),
    ],
)
def test_malformed_cidrs_are_runtime_errors(value: str, message: str) -> None:
    with pytest.raises(CelEvalError) as info:
        ev("cidr(s)", s=value)
    assert str(info.value) == message
    assert ev("isCIDR(s)", s=value) is False


@pytest.mark.parametrize("text", ["ip('10.1.2')", "cidr('10.0.0.0/')", "cidr('fe80::1%eth0/64')"])
def test_malformed_literals_are_runtime_errors(text: str) -> None:
    # As in Kubernetes' ip_test/cidr_test ("parse invalid ipv4"): the expression compiles, evaluating it fails.
    compiled = compile_expression(text, ENV)
    with pytest.raises(CelEvalError, match="parse error|zone"):
        compiled.evaluate()


def test_a_malformed_literal_not_evaluated_is_no_error() -> None:
    assert ev("s == 'v4' && ip('10.1.2').family() == 4", s="v6") is False


def test_is_ip_rejects_a_cidr_at_check_time() -> None:
    with pytest.raises(
        CelCompileError, match=r"found no matching overload for 'isIP' applied to '\(net.CIDR\)'"
    ):
        compile_expression("isIP(cidr('192.168.0.0/24'))", ENV)


def test_format_of_an_ip_is_an_error() -> None:
    with pytest.raises(CelEvalError, match="string clause can only be used on"):
        ev("'%s'.format([[ip('10.0.0.1')]])")


def test_dynamic_values_dispatch_to_the_library() -> None:
    assert ev("string(dyn(ip('1.2.3.4')))") == "1.2.3.4"
    assert ev("string(dyn(cidr('::1/128')))") == "::1/128"
    assert ev("dyn(cidr('10.0.0.0/8')).containsIP('10.0.0.1')") is True
