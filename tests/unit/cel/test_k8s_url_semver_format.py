"""Kubernetes' URL, semver and named-format libraries (cases from k8s.io/apiserver/pkg/cel/library)."""

from __future__ import annotations

from typing import Any

import pytest

from policyd.cel.program import CelCompileError, compile_expression
from policyd.errors import CelEvalError
from tests.unit.cel.library_cases import ENV, ev


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("isURL('https://user:pass@example.com:80/path?query=val#fragment')", True),
        ("isURL('/absolute-path')", True),
        ("isURL('https://a:b:c/')", False),
        ("isURL('../relative-path')", False),
        ("isURL('https://example.com/%zz')", False),
        ("isURL('http://exa mple.com/')", False),
        ("url('/path').getScheme()", ""),
        ("url('HTTPS://example.com/').getScheme()", "https"),
        ("url('https://example.com:80/').getHost()", "example.com:80"),
        ("url('https://[::1]:80/').getHost()", "[::1]:80"),
        ("url('/path').getHost()", ""),
        ("url('https://example.com:80/').getHostname()", "example.com"),
        ("url('https://[::1]:80/').getHostname()", "::1"),
        ("url('https://example.com:80/').getPort()", "80"),
        ("url('https://example.com/').getPort()", ""),
        ("url('https://example.com/path').getEscapedPath()", "/path"),
        ("url('https://example.com/path with spaces/').getEscapedPath()", "/path%20with%20spaces/"),
        ("url('https://example.com/a%2Fb').getEscapedPath()", "/a%2Fb"),
        ("url('https://example.com').getEscapedPath()", ""),
        ("url('https://example.com/path?k1=a&k2=b&k2=c').getQuery()", {"k1": ["a"], "k2": ["b", "c"]}),
        (
            "url('https://example.com/path?key with spaces=value with spaces').getQuery()",
            {"key with spaces": ["value with spaces"]},
        ),
        ("url('https://example.com/path?a=x+y%21').getQuery()", {"a": ["x y!"]}),
        ("url('https://example.com/path?').getQuery()", {}),
        ("url('https://example.com/a') == url('https://example.com/a')", True),
        ("type(url('/x')) == kubernetes.URL", True),
    ],
)
def test_url(text: str, expected: Any) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize("value", ["https://a:b:c/", "../relative-path", "", "http://x/\x7f"])
def test_url_errors(value: str) -> None:
    with pytest.raises(CelEvalError, match="URL parse error during conversion from string"):
        ev("url(s)", s=value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("isSemver('1.2.3-beta.1+build.1')", True),
        ("isSemver('')", False),
        ("isSemver('v1.0.0')", False),
        ("isSemver(' 1.0.0')", False),
        ("isSemver('1.0.0 ')", False),
        ("isSemver('01.01.01')", False),
        ("isSemver('1')", False),
        ("isSemver('1.1')", False),
        ("isSemver('', true)", False),
        ("isSemver(' 1.0.0', true)", False),
        ("isSemver('v1.0.0', true)", True),
        ("isSemver('01.01.01', true)", True),
        ("isSemver('1', true)", True),
        ("isSemver('1.1', true)", True),
        ("isSemver('1.1-alpha', true)", False),
        ("semver('v01.01', true) == semver('1.1.0')", True),
        ("semver('1.2.3') == semver('1.2.3')", True),
        ("semver('1.2.3+build.1') == semver('1.2.3')", True),  # build metadata does not count
        ("semver('1.2.3') == semver('1.0.0')", False),
        ("semver('1.0.0').isLessThan(semver('1.2.3'))", True),
        ("semver('1.0.0').isLessThan(semver('1.0.0'))", False),
        ("semver('1.2.3').isGreaterThan(semver('1.0.0'))", True),
        ("semver('1.2.3').compareTo(semver('1.2.3'))", 0),
        ("semver('1.0.0').compareTo(semver('1.2.3'))", -1),
        ("semver('1.2.3').compareTo(semver('1.0.0'))", 1),
        ("semver('1.0.0-alpha').compareTo(semver('1.0.0'))", -1),
        ("semver('1.0.0-alpha.1').compareTo(semver('1.0.0-alpha.beta'))", -1),  # numeric < alphanumeric
        ("semver('1.0.0-rc.1').compareTo(semver('1.0.0-beta.11'))", 1),
        ("semver('1.0.0-alpha').compareTo(semver('1.0.0-alpha.1'))", -1),
        ("semver('1.2.3').major()", 1),
        ("semver('1.2.3').minor()", 2),
        ("semver('1.2.3').patch()", 3),
        ("quantity('1Gi').isGreaterThan(quantity('1Mi'))", True),  # shared names keep quantity's overloads
    ],
)
def test_semver(text: str, expected: Any) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("v1.0", "No Major.Minor.Patch elements found"),
        ("200K", "No Major.Minor.Patch elements found"),
        ("01.1.1", "must not contain leading zeroes"),
        ("1.0.0-01", "Prerelease number must not contain leading zeroes"),
        ("1.0.0-", "Prerelease is empty"),
        ("1.0.0+a_b", "Invalid character"),
    ],
)
def test_semver_errors(value: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=message):
        ev("semver(s)", s=value)


def test_semver_rejects_a_list_at_check_time() -> None:
    with pytest.raises(CelCompileError, match="found no matching overload for 'isSemver'"):
        compile_expression("isSemver([1, 2, 3])", ENV)


@pytest.mark.parametrize(
    "text",
    [
        "format.dns1123Label().validate('my-label-name')",
        "format.dns1123Subdomain().validate('apiextensions.k8s.io')",
        "format.qualifiedName().validate('apiextensions.k8s.io/v1beta1')",
        "format.qualifiedName().validate('my.name')",
        "format.dns1123LabelPrefix().validate('my-label-prefix-')",
        "format.dns1123SubdomainPrefix().validate('mysubdomain.prefix.-')",
        "format.dns1035LabelPrefix().validate('my-label-prefix-')",
        "format.dns1035Label().validate('my-label-name')",
        "format.uri().validate('http://example.com')",
        "format.uuid().validate('123e4567-e89b-12d3-a456-426614174000')",
        "format.byte().validate('aGVsbG8=')",
        "format.date().validate('2021-01-01')",
        "format.datetime().validate('2021-01-01T00:00:00Z')",
        "format.labelValue().validate('my-cool-label-Value')",
        "format.labelValue().validate('')",
        "format.portName().validate('http')",
        "format.portName().validate('h2c-metrics-909')",  # 15 characters
        "format.portName().validate('9a')",
    ],
)
def test_valid_formats_validate_to_none(text: str) -> None:
    assert ev(f"{text}.hasValue()") is False


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        ("format.dns1123Label().validate('a.b')", ["must not contain dots"]),
        (
            "format.dns1123Label().validate('contains a space')",
            [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ],
        ),
        ("format.byte().validate('aGVsbG8')", ["invalid base64"]),
        ("format.date().validate('2020-01-32')", ["invalid date"]),
        ("format.datetime().validate('2020-01-32T00:00:00Z')", ["invalid datetime"]),
        ("format.uuid().validate('123')", ["does not match the UUID format"]),
        ("format.uri().validate('../x')", ["parse '../x': invalid URI for request"]),
        ("format.portName().validate('h2c-metrics-9090')", ["must be no more than 15 characters"]),
        (
            "format.portName().validate('HTTP')",
            [
                "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "must contain at least one letter or number (a-z, 0-9)",
            ],
        ),
        ("format.portName().validate('8080')", ["must contain at least one letter or number (a-z, 0-9)"]),
        ("format.portName().validate('a--b')", ["must not contain consecutive hyphens"]),
        ("format.portName().validate('-ab')", ["must not begin or end with a hyphen"]),
        (
            "format.portName().validate('')",
            [
                "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "must contain at least one letter or number (a-z, 0-9)",
            ],
        ),
    ],
)
def test_invalid_formats_validate_to_their_reasons(text: str, errors: list[str]) -> None:
    assert ev(f"{text}.value()") == errors


def test_format_errors_count_each_reason() -> None:
    result = ev("format.dns1123Label().validate(s)", s="X" * 64)
    assert (
        result.present and len(result.value) == 2 and result.value[0] == "must be no more than 63 characters"
    )
    assert (
        ev("format.qualifiedName().validate('a/b/c')").value[0].startswith("a valid label key must consist")
    )


def test_named_formats() -> None:
    assert ev("format.named('unknown').hasValue()") is False
    found = ev("format.named('dns1123Label')")
    assert found.present and found.value.name == "DNS1123Label"
