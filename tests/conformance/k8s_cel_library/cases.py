"""Kubernetes' CEL library test cases, as data: each case is an expression and the outcome Kubernetes' own
Go test expects for it.

Transcribed test data of the Kubernetes project (https://github.com/kubernetes/kubernetes), Apache License
2.0, see LICENSE in this directory. Only the facts were taken (expression, expected value or error, and the
declarations the Go test sets up); the Go code is not reproduced. Sources, with the (abbreviated) commit ids
of the stored versions read:

- staging/src/k8s.io/apiserver/pkg/cel/library/
  cidr_test.go 0f835890, ip_test.go 95f08499, quantity_test.go 16913111 (and the mul/div variant of
  quantity_test.go 0625d6cf; quantity.go 898b9f80 has no mul/div/divInt, 03bd7019 has), semver_test.go
  22935532, format_test.go 03bd7019 with format.go 0ea83df1 (ConstantFormats; ab0b97c4 adds portName),
  image_test.go c2a31ca3,
  pod_test.go 270b9d38, test.go b0d609f0, library_compatibility_test.go 04fad134;
- staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/validation_test.go
  (TestValidationExpressions; stored file id 57396223): its library-related cases. The lists, regex and URL
  library tests live there (there is no lists_test.go, regex_test.go or urls_test.go in the library
  directory), and so do the cases of the cel-go extension libraries and optionals that Kubernetes' CRD
  environment enables.

A case is a `Case`: `file` (the Go test file, with a [section] for validation_test.go), `name` (the Go test
case's name; validation_test.go's are "valid" / "error"), `expr`, `expect`, and optionally `self_schema` /
`self_obj` (`self` as a CRD schema declares and binds it) or `vars` (variables declared dyn).

Expectation kinds (`expect[0]`):
  ("val", python_value)            exact CEL value, type-strict (bool / int / double / string / list / map)
  ("dbl~", x, tol)                 a double within `tol` of `x`
  ("opaque", type_name, text)      a library value: its CEL type name and its string form
  ("image", {field: text})         a kubernetes.Image with every ImageReference field as given
  ("qty", type_name, text)         a kubernetes.Quantity equal (Cmp == 0) to quantity(text)
  ("optnone",)                     optional.none()
  ("optof", python_value)          optional.of(value)
  ("rterr", text, mode)            an evaluation error; mode as the Go test compares err.Error():
                                   "exact" (==), "regex" (regexp.MatchString) or "contains"
  ("compileerr", [regex, ...])     a compile (check) error; each regex must match one issue message
  ("verr", phase, text, column)    validation_test.go's "errors": an error containing `text`; phase
                                   "compile" | "runtime" | "any"; `text` is Kubernetes' text without the
                                   validator's prefix ("compile error: compilation failed: ERROR: <input>:L:C: ");
                                   column: the 1-based column Kubernetes reports, or None
  ("skip", reason)                 out of scope (cost, authorizer, test-only library)

`self_schema` describes field types: "int", "double", "string", "duration", "timestamp", ("list", t),
("map", t) (string keys) or ("obj", {field: t}). In `self_obj`, "@dur:<text>" / "@ts:<text>" stand for a
duration / timestamp, as Kubernetes converts strings of those formats.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

Expect = tuple[Any, ...]
Schema = str | tuple[str, Any]


class Case(TypedDict):
    """One transcribed case."""

    file: str
    name: str
    expr: str
    expect: Expect
    self_schema: NotRequired[dict[str, Schema]]
    self_obj: NotRequired[dict[str, Any]]
    vars: NotRequired[dict[str, Any]]


CASES: list[Case] = []


def add(
    file: str,
    name: str,
    expr: str,
    expect: Expect,
    *,
    self_schema: dict[str, Schema] | None = None,
    self_obj: dict[str, Any] | None = None,
    vars: dict[str, Any] | None = None,
) -> None:
    """Register one case."""
    case: Case = {"file": file, "name": name, "expr": expr, "expect": expect}
    if self_schema is not None:
        case["self_schema"] = self_schema
        case["self_obj"] = self_obj if self_obj is not None else {}
    if vars is not None:
        case["vars"] = vars
    CASES.append(case)


def val(v: Any) -> Expect:
    return ("val", v)


def img(image: str, registry: str, repository: str, *, tag: str = "", digest: str = "") -> Expect:
    """A kubernetes.Image whose every part is as given (Go compares the whole ImageReference)."""
    return (
        "image",
        {
            "Image": image,
            "Registry": registry,
            "Repository": repository,
            "Tag": tag,
            "Digest": digest,
            "Identifier": digest or tag,
        },
    )


def rterr(text: str, mode: str) -> Expect:
    return ("rterr", text, mode)


def ce(*patterns: str) -> Expect:
    return ("compileerr", list(patterns))


def verr(phase: str, text: str, column: int | None = None) -> Expect:
    return ("verr", phase, text, column)


T = val(True)
F = val(False)
# cel-go's cost figures are not values or errors; policyd's own estimator has its tests in
# tests/unit/cel/test_cost.py and test_library_costs.py
COST_REASON = "a cel-go cost figure (estimated / runtime cost), not a value or an error"

# ---------------------------------------------------------------------------------------------
# cidr_test.go  (env: library.IP(), library.CIDR(); runtime error compared with ==)
src = "cidr_test.go"
NETPFX = "network address parse error during conversion from string: network address parse error during conversion from string: "
add(
    src,
    "compilation error for cidr(int)",
    "cidr(192168)",
    ce(r"found no matching overload for 'cidr' applied to '\(int\)'"),
)
add(src, "parse ipv4", 'cidr(dyn("192.168.0.0/24"))', ("opaque", "net.CIDR", "192.168.0.0/24"))
# cidr_test.go 78fc8e44 writes it with a literal
add(src, "parse ipv4 (literal)", 'cidr("192.168.0.0/24")', ("opaque", "net.CIDR", "192.168.0.0/24"))
add(
    src,
    "parse invalid ipv4",
    'cidr("192.168.0.0/")',
    rterr(NETPFX + 'netip.ParsePrefix("192.168.0.0/"): bad bits after slash: ""', "exact"),
)
add(src, "contains IP ipv4 (IP)", 'cidr("192.168.0.0/24").containsIP(ip("192.168.0.1"))', T)
add(src, "does not contain IP ipv4 (IP)", 'cidr("192.168.0.0/24").containsIP(ip("192.168.1.1"))', F)
add(src, "contains IP ipv4 (string)", 'cidr("192.168.0.0/24").containsIP("192.168.0.1")', T)
add(src, "does not contain IP ipv4 (string)", 'cidr("192.168.0.0/24").containsIP("192.168.1.1")', F)
add(src, "contains CIDR ipv4 (CIDR)", 'cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.0/25"))', T)
add(src, "does not contain IP ipv4 (CIDR)", 'cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.0/23"))', F)
add(src, "contains CIDR ipv4 (string)", 'cidr("192.168.0.0/24").containsCIDR("192.168.0.0/25")', T)
add(src, "does not contain CIDR ipv4 (string)", 'cidr("192.168.0.0/24").containsCIDR("192.168.0.0/23")', F)
add(src, "returns IP ipv4", 'cidr("192.168.0.0/24").ip()', ("opaque", "net.IP", "192.168.0.0"))
add(src, "masks masked ipv4", 'cidr("192.168.0.0/24").masked()', ("opaque", "net.CIDR", "192.168.0.0/24"))
add(src, "masks unmasked ipv4", 'cidr("192.168.0.1/24").masked()', ("opaque", "net.CIDR", "192.168.0.0/24"))
add(src, "returns prefix length ipv4", 'cidr("192.168.0.0/24").prefixLength()', val(24))
add(src, "parse ipv6", 'cidr("2001:db8::/32")', ("opaque", "net.CIDR", "2001:db8::/32"))
add(
    src,
    "parse invalid ipv6",
    'cidr("2001:db8::/")',
    rterr(NETPFX + 'netip.ParsePrefix("2001:db8::/"): bad bits after slash: ""', "exact"),
)
add(src, "contains IP ipv6 (IP)", 'cidr("2001:db8::/32").containsIP(ip("2001:db8::1"))', T)
add(src, "does not contain IP ipv6 (IP)", 'cidr("2001:db8::/32").containsIP(ip("2001:dc8::1"))', F)
add(src, "contains IP ipv6 (string)", 'cidr("2001:db8::/32").containsIP("2001:db8::1")', T)
add(src, "does not contain IP ipv6 (string)", 'cidr("2001:db8::/32").containsIP("2001:dc8::1")', F)
add(src, "contains CIDR ipv6 (CIDR)", 'cidr("2001:db8::/32").containsCIDR(cidr("2001:db8::/33"))', T)
add(src, "does not contain IP ipv6 (CIDR)", 'cidr("2001:db8::/32").containsCIDR(cidr("2001:db8::/31"))', F)
add(src, "contains CIDR ipv6 (string)", 'cidr("2001:db8::/32").containsCIDR("2001:db8::/33")', T)
add(src, "does not contain CIDR ipv6 (string)", 'cidr("2001:db8::/32").containsCIDR("2001:db8::/31")', F)
add(src, "returns IP ipv6", 'cidr("2001:db8::/32").ip()', ("opaque", "net.IP", "2001:db8::"))
add(src, "masks masked ipv6", 'cidr("2001:db8::/32").masked()', ("opaque", "net.CIDR", "2001:db8::/32"))
add(src, "masks unmasked ipv6", 'cidr("2001:db8:1::/32").masked()', ("opaque", "net.CIDR", "2001:db8::/32"))
add(src, "returns prefix length ipv6", 'cidr("2001:db8::/32").prefixLength()', val(32))
add(src, "converting a CIDR to a string", 'string(cidr("192.168.0.0/24"))', val("192.168.0.0/24"))
add(src, "type of CIDR is net.CIDR", 'type(cidr("192.168.0.0/24")) == net.CIDR', T)

# ---------------------------------------------------------------------------------------------
# ip_test.go  (env: library.IP(), library.CIDR(); runtime error compared with ==)
src = "ip_test.go"
add(src, "parse ipv4", 'ip("192.168.0.1")', ("opaque", "net.IP", "192.168.0.1"))
add(
    src,
    "parse invalid ipv4",
    'ip("192.168.0.1.0")',
    rterr(
        'IP Address "192.168.0.1.0" parse error during conversion from string: ParseAddr("192.168.0.1.0"): IPv4 address too long',
        "exact",
    ),
)
add(src, "isIP valid ipv4", 'isIP("192.168.0.1")', T)
add(src, "isIP invalid ipv4", 'isIP("192.168.0.1.0")', F)
add(src, "ip.isCanonical valid ipv4", 'ip.isCanonical("127.0.0.1")', T)
add(
    src,
    "ip.isCanonical invalid ipv4",
    'ip.isCanonical("127.0.0.1.0")',
    rterr(
        'IP Address "127.0.0.1.0" parse error during conversion from string: ParseAddr("127.0.0.1.0"): IPv4 address too long',
        "exact",
    ),
)
add(src, "ipv4 family", 'ip("192.168.0.1").family()', val(4))
add(src, "ipv4 isUnspecified true", 'ip("0.0.0.0").isUnspecified()', T)
add(src, "ipv4 isUnspecified false", 'ip("127.0.0.1").isUnspecified()', F)
add(src, "ipv4 isLoopback true", 'ip("127.0.0.1").isLoopback()', T)
add(src, "ipv4 isLoopback false", 'ip("1.2.3.4").isLoopback()', F)
add(src, "ipv4 isLinkLocalMulticast true", 'ip("224.0.0.1").isLinkLocalMulticast()', T)
add(src, "ipv4 isLinkLocalMulticast false", 'ip("224.0.1.1").isLinkLocalMulticast()', F)
add(src, "ipv4 isLinkLocalUnicast true", 'ip("169.254.169.254").isLinkLocalUnicast()', T)
add(src, "ipv4 isLinkLocalUnicast false", 'ip("192.168.0.1").isLinkLocalUnicast()', F)
add(src, "ipv4 isGlobalUnicast true", 'ip("192.168.0.1").isGlobalUnicast()', T)
add(src, "ipv4 isGlobalUnicast false", 'ip("255.255.255.255").isGlobalUnicast()', F)
add(src, "parse ipv6", 'ip("2001:db8::68")', ("opaque", "net.IP", "2001:db8::68"))
add(
    src,
    "parse invalid ipv6",
    'ip("2001:db8:::68")',
    rterr(
        'IP Address "2001:db8:::68" parse error during conversion from string: ParseAddr("2001:db8:::68"): each colon-separated field must have at least one digit (at ":68")',
        "exact",
    ),
)
add(src, "isIP valid ipv6", 'isIP("2001:db8::68")', T)
add(src, "isIP invalid ipv4 (sic: ipv6)", 'isIP("2001:db8:::68")', F)
add(src, "ip.isCanonical valid ipv6", 'ip.isCanonical("2001:db8::68")', T)
add(src, "ip.isCanonical non-canonical ipv6", 'ip.isCanonical("2001:DB8::68")', F)
add(
    src,
    "ip.isCanonical invalid ipv6",
    'ip.isCanonical("2001:db8:::68")',
    rterr(
        'IP Address "2001:db8:::68" parse error during conversion from string: ParseAddr("2001:db8:::68"): each colon-separated field must have at least one digit (at ":68")',
        "exact",
    ),
)
add(src, "ipv6 family", 'ip("2001:db8::68").family()', val(6))
add(src, "ipv6 isUnspecified true", 'ip("::").isUnspecified()', T)
add(src, "ipv6 isUnspecified false", 'ip("::1").isUnspecified()', F)
add(src, "ipv6 isLoopback true", 'ip("::1").isLoopback()', T)
add(src, "ipv6 isLoopback false", 'ip("2001:db8::abcd").isLoopback()', F)
add(src, "ipv6 isLinkLocalMulticast true", 'ip("ff02::1").isLinkLocalMulticast()', T)
add(src, "ipv6 isLinkLocalMulticast false", 'ip("fd00::1").isLinkLocalMulticast()', F)
add(src, "ipv6 isLinkLocalUnicast true", 'ip("fe80::1").isLinkLocalUnicast()', T)
add(src, "ipv6 isLinkLocalUnicast false", 'ip("fd80::1").isLinkLocalUnicast()', F)
add(src, "ipv6 isGlobalUnicast true", 'ip("2001:db8::abcd").isGlobalUnicast()', T)
add(src, "ipv6 isGlobalUnicast false", 'ip("ff00::1").isGlobalUnicast()', F)
add(
    src,
    "passing cidr into isIP returns compile error",
    'isIP(cidr("192.168.0.0/24"))',
    ce(r"found no matching overload for 'isIP' applied to '\(net.CIDR\)'"),
)
add(src, "converting an IP address to a string", 'string(ip("192.168.0.1"))', val("192.168.0.1"))
add(src, "type of IP is net.IP", 'type(ip("192.168.0.1")) == net.IP', T)

# ---------------------------------------------------------------------------------------------
# quantity_test.go (env: OptionalTypes, ext.Strings, URLs, Regex, Lists, Quantity, Format; runtime err = regex)
src = "quantity_test.go"
add(src, "parse", 'quantity("12Mi")', ("qty", "kubernetes.Quantity", "12Mi"))
add(
    src,
    "parseInvalidSuffix",
    'quantity("10Mo")',
    rterr("quantities must match the regular expression.*", "regex"),
)
add(
    src,
    "parseInvalidSuffixPassesRegex",
    'quantity("10Mm")',
    rterr("unable to parse quantity's suffix", "regex"),
)
add(src, "isQuantity", 'isQuantity("20")', T)
add(src, "isQuantity_megabytes", 'isQuantity("20M")', T)
add(src, "isQuantity_mebibytes", 'isQuantity("20Mi")', T)
add(src, "isQuantity_invalidSuffix", 'isQuantity("20Mo")', F)
add(src, "isQuantity_passingRegex", 'isQuantity("10Mm")', F)
add(
    src,
    "isQuantity_noOverload",
    "isQuantity([1, 2, 3])",
    ce("found no matching overload for 'isQuantity' applied to.*"),
)
add(src, "equality_reflexivity", 'quantity("200M") == quantity("200M")', T)
add(
    src,
    "equality_symmetry",
    'quantity("200M") == quantity("0.2G") && quantity("0.2G") == quantity("200M")',
    T,
)
add(
    src,
    "equality_transitivity",
    'quantity("2M") == quantity("0.002G") && quantity("2000k") == quantity("2M") && quantity("0.002G") == quantity("2000k")',
    T,
)
add(src, "inequality", 'quantity("200M") == quantity("0.3G")', F)
add(src, "quantity_less", 'quantity("50M").isLessThan(quantity("50Mi"))', T)
add(src, "quantity_less_obvious", 'quantity("50M").isLessThan(quantity("100M"))', T)
add(src, "quantity_less_false", 'quantity("100M").isLessThan(quantity("50M"))', F)
add(src, "quantity_greater", 'quantity("50Mi").isGreaterThan(quantity("50M"))', T)
add(src, "quantity_greater_obvious", 'quantity("150Mi").isGreaterThan(quantity("100Mi"))', T)
add(src, "quantity_greater_false", 'quantity("50M").isGreaterThan(quantity("100M"))', F)
add(src, "compare_equal", 'quantity("200M").compareTo(quantity("0.2G"))', val(0))
add(src, "compare_less", 'quantity("50M").compareTo(quantity("50Mi"))', val(-1))
add(src, "compare_greater", 'quantity("50Mi").compareTo(quantity("50M"))', val(1))
add(src, "add_quantity", 'quantity("50k").add(quantity("20")) == quantity("50.02k")', T)
add(src, "add_int", 'quantity("50k").add(20).isLessThan(quantity("50020"))', F)
add(src, "sub_quantity", 'quantity("50k").sub(quantity("20")) == quantity("49.98k")', T)
add(src, "sub_int", 'quantity("50k").sub(20) == quantity("49980")', T)
add(src, "arith_chain_1", 'quantity("50k").add(20).sub(quantity("100k")).asInteger()', val(-49980))
add(src, "arith_chain", 'quantity("50k").add(20).sub(quantity("100k")).sub(-50000).asInteger()', val(20))
add(src, "as_integer", 'quantity("50k").asInteger()', val(50000))
add(
    src,
    "as_integer_error",
    'quantity("9999999999999999999999999999999999999G").asInteger()',
    rterr("cannot convert value to integer", "regex"),
)
add(src, "is_integer (big)", 'quantity("9999999999999999999999999999999999999G").isInteger()', F)
add(src, "is_integer", 'quantity("50").isInteger()', T)
add(src, "as_float", 'quantity("50.703k").asApproximateFloat()', val(50703.0))
# Only in some stored versions of quantity_test.go / quantity.go (0625d6cf / 03bd7019; the versions
# 16913111 / 898b9f80 have no mul/div/divInt); library_compatibility_test.go lists them under an
# unnumbered "Kubernetes <1.??>" release.
src = "quantity_test.go[mul/div variant]"
add(src, "multiply", 'quantity("50k").mul(2) == quantity("100000")', T)
add(src, "divide_float_result", 'quantity("10000").div(3).asApproximateFloat()', ("dbl~", 3333.3333, 0.0001))
add(src, "divide_scaled", 'quantity("10k").div(2) == quantity("5000")', T)
add(src, "integer_division", 'quantity("10000").divInt(3) == quantity("3333")', T)
# The later variant (lalitc375/kubernetes ff8e4d9b: quantity_test.go, with quantity.go's `div(int, int)`
# overload and the errors): its cases not in the variant above. `div_large_whole_number` expects the
# exact quotient, which apimachinery's cap at 2^63-1 in that commit's QuoRound would not give.
src = "quantity_test.go[mul/div later variant]"
add(src, "divide_zero_scale", 'quantity("10").div(2, 0) == quantity("5")', T)
add(
    src,
    "div_large_whole_number",
    'quantity("1329227995784915872903807060280344576").div(256) == quantity("5192296858534827628530496329220096")',
    T,
)
add(
    src,
    "large_integer_no_precision_loss",
    'quantity("1152921504606846976").divInt(2) == quantity("576460752303423488")',
    T,
)
add(
    src,
    "divide_float_custom_precision",
    'quantity("10000").div(3, 2).asApproximateFloat()',
    ("dbl~", 3333.33, 0.01),
)
add(src, "integer_division_by_zero", 'quantity("10000").divInt(0)', rterr("division by zero", "regex"))
add(src, "division_by_zero_default_round", 'quantity("10000").div(0)', rterr("division by zero", "regex"))
add(src, "division_by_zero_custom_round", 'quantity("10000").div(0, 2)', rterr("division by zero", "regex"))
add(
    src,
    "negative_rounding",
    'quantity("10000").div(3, -1)',
    rterr("negative rounding values are not allowed", "regex"),
)

# ---------------------------------------------------------------------------------------------
# semver_test.go (env: SemverLib(version); runtime err = regex). version 1 = normalize overloads.
src = "semver_test.go"
add(src, "parse", 'semver("1.2.3")', ("opaque", "kubernetes.Semver", "1.2.3"))
add(src, "parseInvalidVersion", 'semver("v1.0")', rterr("No Major.Minor.Patch elements found", "regex"))
add(src, "isSemver", 'isSemver("1.2.3-beta.1+build.1")', T)
add(src, "isSemver_empty_false", 'isSemver("")', F)
add(src, "isSemver_v_prefix_false", 'isSemver("v1.0.0")', F)
add(src, "isSemver_v_leading_whitespace_false", 'isSemver(" 1.0.0")', F)
add(src, "isSemver_v_contains_whitespace_false", 'isSemver("1. 0.0")', F)
add(src, "isSemver_v_trailing_whitespace_false", 'isSemver("1.0.0 ")', F)
add(src, "isSemver_leading_zeros_false", 'isSemver("01.01.01")', F)
add(src, "isSemver_major_only_false", 'isSemver("1")', F)
add(src, "isSemver_major_minor_only_false", 'isSemver("1.1")', F)
add(src, "isSemver_empty_normalize_false", 'isSemver("", true)', F)
add(src, "isSemver_v_leading_whitespace_normalize_false", 'isSemver(" 1.0.0", true)', F)
add(src, "isSemver_v_contains_whitespace_normalize_false", 'isSemver("1. 0.0", true)', F)
add(src, "isSemver_v_trailing_whitespace_normalize_false", 'isSemver("1.0.0 ", true)', F)
add(src, "isSemver_v_prefix_normalize_true", 'isSemver("v1.0.0", true)', T)
add(src, "isSemver_leading_zeros_normalize_true", 'isSemver("01.01.01", true)', T)
add(src, "isSemver_major_only_normalize_true", 'isSemver("1", true)', T)
add(src, "isSemver_major_minor_only_normalize_true", 'isSemver("1.1", true)', T)
add(
    src,
    "isSemver_noOverload",
    "isSemver([1, 2, 3])",
    ce("found no matching overload for 'isSemver' applied to.*"),
)
add(src, "equality_normalize", 'semver("v01.01", true) == semver("1.1.0")', T)
add(src, "equality_reflexivity", 'semver("1.2.3") == semver("1.2.3")', T)
add(src, "inequality", 'semver("1.2.3") == semver("1.0.0")', F)
add(src, "semver_less", 'semver("1.0.0").isLessThan(semver("1.2.3"))', T)
add(src, "semver_less_false", 'semver("1.0.0").isLessThan(semver("1.0.0"))', F)
add(src, "semver_greater", 'semver("1.2.3").isGreaterThan(semver("1.0.0"))', T)
add(src, "semver_greater_false", 'semver("1.0.0").isGreaterThan(semver("1.0.0"))', F)
add(src, "compare_equal", 'semver("1.2.3").compareTo(semver("1.2.3"))', val(0))
add(src, "compare_less", 'semver("1.0.0").compareTo(semver("1.2.3"))', val(-1))
add(src, "compare_greater", 'semver("1.2.3").compareTo(semver("1.0.0"))', val(1))
add(src, "major", 'semver("1.2.3").major()', val(1))
add(src, "minor", 'semver("1.2.3").minor()', val(2))
add(src, "patch", 'semver("1.2.3").patch()', val(3))

# ---------------------------------------------------------------------------------------------
# format_test.go (env as quantity_test; values are optionals)
src = "format_test.go"
MSG_LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
MSG_SUBDOMAIN = (
    r"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
    r"must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
MSG_1035 = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
MSG_QNAME = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
MSG_LABELVALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
    "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NONE = ("optnone",)
add(src, "example_usage_dns1123Label", 'format.dns1123Label().validate("my-label-name")', NONE)
add(src, "example_usage_dns1123Subdomain", 'format.dns1123Subdomain().validate("apiextensions.k8s.io")', NONE)
add(
    src,
    "example_usage_qualifiedName",
    'format.qualifiedName().validate("apiextensions.k8s.io/v1beta1")',
    NONE,
)
add(src, "example_usage_dns1123LabelPrefix", 'format.dns1123LabelPrefix().validate("my-label-prefix-")', NONE)
add(
    src,
    "example_usage_dns1123SubdomainPrefix",
    'format.dns1123SubdomainPrefix().validate("mysubdomain.prefix.-")',
    NONE,
)
add(src, "example_usage_dns1035LabelPrefix", 'format.dns1035LabelPrefix().validate("my-label-prefix-")', NONE)
add(src, "example_usage_uri", 'format.uri().validate("http://example.com")', NONE)
add(src, "example_usage_uuid", 'format.uuid().validate("123e4567-e89b-12d3-a456-426614174000")', NONE)
add(src, "example_usage_byte", 'format.byte().validate("aGVsbG8=")', NONE)
add(src, "example_usage_date", 'format.date().validate("2021-01-01")', NONE)
add(src, "example_usage_datetime", 'format.datetime().validate("2021-01-01T00:00:00Z")', NONE)
add(src, "dns1123Label", 'format.dns1123Label().validate("contains a space")', ("optof", [MSG_LABEL]))
add(
    src,
    "dns1123Subdomain",
    'format.dns1123Subdomain().validate("contains a space")',
    ("optof", [MSG_SUBDOMAIN]),
)
add(src, "dns1035Label", 'format.dns1035Label().validate("contains a space")', ("optof", [MSG_1035]))
add(src, "qualifiedName", 'format.qualifiedName().validate("contains a space")', ("optof", [MSG_QNAME]))
add(
    src,
    "dns1123LabelPrefix",
    'format.dns1123LabelPrefix().validate("contains a space-")',
    ("optof", [MSG_LABEL]),
)
add(
    src,
    "dns1123SubdomainPrefix",
    'format.dns1123SubdomainPrefix().validate("contains a space-")',
    ("optof", [MSG_SUBDOMAIN]),
)
add(
    src,
    "dns1035LabelPrefix",
    'format.dns1035LabelPrefix().validate("contains a space-")',
    ("optof", [MSG_1035]),
)
add(src, "dns1123Label_Success", 'format.dns1123Label().validate("my-label-name")', NONE)
add(src, "dns1123Subdomain_Success", 'format.dns1123Subdomain().validate("example.com")', NONE)
add(src, "dns1035Label_Success", 'format.dns1035Label().validate("my-label-name")', NONE)
add(src, "qualifiedName_Success", 'format.qualifiedName().validate("my.name")', NONE)
add(src, "byte_success", 'format.byte().validate("aGVsbG8=")', NONE)
add(src, "byte_failure", 'format.byte().validate("aGVsbG8")', ("optof", ["invalid base64"]))
add(src, "date_success", 'format.date().validate("2020-01-01")', NONE)
add(src, "date_failure", 'format.date().validate("2020-01-32")', ("optof", ["invalid date"]))
add(src, "datetime_success", 'format.datetime().validate("2020-01-01T00:00:00Z")', NONE)
add(
    src,
    "datetime_failure",
    'format.datetime().validate("2020-01-32T00:00:00Z")',
    ("optof", ["invalid datetime"]),
)
add(src, "unknown_format", 'format.named("unknown").hasValue()', F)
add(src, "labelValue_success", 'format.labelValue().validate("my-cool-label-Value")', NONE)
# Go source is a backtick string, so the CEL text holds the two characters backslash-n (a CEL escape).
add(
    src,
    "labelValue_failure",
    r'format.labelValue().validate("my-cool-label-Value!!\n\n!!!")',
    ("optof", [MSG_LABELVALUE]),
)
CONSTANT_FORMATS = [
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "portName",  # format.go ab0b97c4
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
]
for lhs in CONSTANT_FORMATS:
    add(src, "lookup and comparison", f'format.named("{lhs}").hasValue()', T)
    add(src, "comparison with lookup succeeds", f'format.named("{lhs}").value() == format.{lhs}()', T)
    for rhs in CONSTANT_FORMATS:
        if rhs != lhs:
            add(src, f"compare_{lhs}_{rhs}", f"format.{lhs}() == format.{rhs}()", F)

# ---------------------------------------------------------------------------------------------
# image_test.go c2a31ca3 (env: library.Image(); runtime err = regex). The library's later form, on
# distribution/reference: `image(s, normalize)`, no default registry or tag unless normalizing. (An
# earlier stored form, image_test.go c2a31ca3, parsed with go-containerregistry and defaulted the
# registry to index.docker.io and the tag to latest.)
src = "image_test.go"
D = "sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2"
R = "registry.k8s.io/kube-apiserver-arm64"
K8S_IMAGE = img(f"{R}:latest", "registry.k8s.io", "kube-apiserver-arm64", tag="latest")
add(src, "parse", f'image("{R}:latest")', K8S_IMAGE)
add(
    src,
    "parse_normalized",
    'image("kube-apiserver-arm64", true)',
    img(
        "docker.io/library/kube-apiserver-arm64:latest",
        "docker.io",
        "library/kube-apiserver-arm64",
        tag="latest",
    ),
)
add(
    src,
    "parse_non_normalized",
    'image("kube-apiserver-arm64", false)',
    img("kube-apiserver-arm64", "", "kube-apiserver-arm64"),
)
add(src, "parse_normalized_not_required", f'image("{R}:latest", true)', K8S_IMAGE)
add(src, "parse_normalized_not_required_disabled", f'image("{R}:latest", false)', K8S_IMAGE)
add(
    src,
    "parse_invalid_image",
    f'image("{R}:@")',
    rterr(f"failed to parse image: {R}:@, err: invalid reference format", "regex"),
)
add(src, "isImage", f'isImage("{R}:latest")', T)
add(src, "isImage_false", f'isImage("{R}:@")', F)
add(src, "isImage_noOverload", "isImage(0)", ce("found no matching overload for 'isImage' applied to.*"))
add(src, "contains_digest_no_identifier", f'image("{R}").containsDigest()', F)
add(src, "contains_digest_tag", f'image("{R}:latest").containsDigest()', F)
add(src, "contains_digest_true", f'image("{R}@{D}").containsDigest()', T)
add(src, "contains_digest_with_tag_true", f'image("{R}:latest@{D}").containsDigest()', T)
add(src, "registry", f'image("{R}").registry() == "registry.k8s.io"', T)
add(src, "no_registry", 'image("kube-apiserver-arm64:testtag").registry()', val(""))
add(src, "registry_normalized", 'image("kube-apiserver-arm64:testtag", true).registry()', val("docker.io"))
add(src, "registry_matches", f'image("{R}").registry().matches("(registry.k8s.io|ghcr.io)")', T)
add(src, "repository", f'image("{R}").repository() == "kube-apiserver-arm64"', T)
add(
    src,
    "repository_normalized",
    'image("kube-apiserver-arm64:testtag", true).repository()',
    val("library/kube-apiserver-arm64"),
)
add(src, "empty_identifier", f'image("{R}").identifier()', val(""))
add(src, "empty_identifier_not_normalized", f'image("{R}", false).identifier()', val(""))
add(src, "empty_identifier_normalized", f'image("{R}", true).identifier()', val("latest"))
add(src, "identifier_tag", f'image("{R}:testtag").identifier()', val("testtag"))
add(src, "identifer_digest", f'image("{R}@{D}").identifier()', val(D))
add(src, "identifer_digest_and_tag", f'image("{R}:latest@{D}").identifier()', val(D))
add(src, "tag", f'image("{R}:testtag").tag()', val("testtag"))
add(src, "empty_tag", f'image("{R}").tag()', val(""))
add(src, "empty_tag_not_normalized", f'image("{R}", false).tag()', val(""))
add(src, "empty_tag_normalized", f'image("{R}", true).tag()', val("latest"))
add(src, "no_tag", f'image("{R}@{D}").tag()', val(""))
add(src, "no_digest", f'image("{R}").digest()', val(""))
add(src, "digest_tag", f'image("{R}:testtag").digest()', val(""))
add(src, "digest", f'image("{R}@{D}").digest()', val(D))
NGINX_DIGEST = "sha256:ed6d2c43c8fbcd3eaa44c9dab6d94cb346234476230dc1681227aa72d07181ee"
add(src, "docker_ref_digest", f'image("docker.io/library/nginx@{NGINX_DIGEST}").digest()', val(NGINX_DIGEST))
add(src, "digest_digest_and_tag", f'image("{R}:latest@{D}").digest() == "{D}"', T)

# ---------------------------------------------------------------------------------------------
# pod_test.go (env: library.Pod(), variable spec: dyn; runtime err compared with ==)
src = "pod_test.go"


def _container(name: str, image: str) -> dict[str, str]:
    return {"name": name, "image": image}


add(
    src,
    "all three container types",
    "allContainers(spec).size()",
    val(4),
    vars={
        "spec": {
            "initContainers": [_container("init", "busybox")],
            "containers": [_container("main", "nginx"), _container("sidecar", "envoy")],
            "ephemeralContainers": [_container("debug", "alpine")],
        }
    },
)
add(
    src,
    "only regular containers",
    "allContainers(spec).size()",
    val(1),
    vars={"spec": {"containers": [_container("main", "nginx")]}},
)
add(src, "no containers at all", "allContainers(spec).size()", val(0), vars={"spec": {}})
add(
    src,
    "order is init then containers then ephemeral",
    "allContainers(spec)[0].name == 'init' && allContainers(spec)[1].name == 'main' && allContainers(spec)[2].name == 'debug'",
    T,
    vars={
        "spec": {
            "initContainers": [_container("init", "busybox")],
            "containers": [_container("main", "nginx")],
            "ephemeralContainers": [_container("debug", "alpine")],
        }
    },
)
add(
    src,
    "all() across all container types",
    "allContainers(spec).all(c, c.image.startsWith('myregistry.io/'))",
    T,
    vars={
        "spec": {
            "initContainers": [_container("init", "myregistry.io/busybox")],
            "containers": [_container("main", "myregistry.io/nginx")],
        }
    },
)
add(
    src,
    "all() fails when one image doesn't match",
    "allContainers(spec).all(c, c.image.startsWith('myregistry.io/'))",
    F,
    vars={"spec": {"containers": [_container("main", "docker.io/nginx")]}},
)
add(
    src,
    "empty init and ephemeral containers",
    "allContainers(spec).size()",
    val(1),
    vars={
        "spec": {"initContainers": [], "containers": [_container("main", "nginx")], "ephemeralContainers": []}
    },
)
add(
    src,
    "null fields are treated as empty",
    "allContainers(spec).size()",
    val(1),
    vars={
        "spec": {
            "initContainers": None,
            "containers": [_container("main", "nginx")],
            "ephemeralContainers": None,
        }
    },
)
add(
    src,
    "field present but not a list errors",
    "allContainers(spec).size()",
    rterr("allContainers: containers is present but is not a list (got string)", "exact"),
    vars={"spec": {"containers": "not-a-list"}},
)
_pod_spec = {
    "initContainers": [_container("init", "busybox")],
    "containers": [_container("main", "nginx"), _container("sidecar", "envoy")],
    "ephemeralContainers": [_container("debug", "alpine")],
}
_tmpl = {"spec": _pod_spec}
for wname, expr, obj in [
    ("Pod", "allContainers(spec.spec).size()", {"spec": _pod_spec}),
    ("PodTemplate", "allContainers(spec.template.spec).size()", {"template": _tmpl}),
    ("Deployment", "allContainers(spec.spec.template.spec).size()", {"spec": {"template": _tmpl}}),
    ("StatefulSet", "allContainers(spec.spec.template.spec).size()", {"spec": {"template": _tmpl}}),
    ("DaemonSet", "allContainers(spec.spec.template.spec).size()", {"spec": {"template": _tmpl}}),
    ("ReplicaSet", "allContainers(spec.spec.template.spec).size()", {"spec": {"template": _tmpl}}),
    ("Job", "allContainers(spec.spec.template.spec).size()", {"spec": {"template": _tmpl}}),
    (
        "CronJob",
        "allContainers(spec.spec.jobTemplate.spec.template.spec).size()",
        {"spec": {"jobTemplate": {"spec": {"template": _tmpl}}}},
    ),
]:
    add(src, f"WorkloadTypes/{wname}", expr, val(4), vars={"spec": obj})

# ---------------------------------------------------------------------------------------------
# Files of the library directory whose cases are out of scope (each one a skipped case, with its reason)
add(
    "test.go",
    "k8s.test test() library",
    "test()",
    ("skip", "test.go: a test-only helper library (k8s.test), not one Kubernetes ships"),
)
add("cost_test.go", "(whole file)", "-", ("skip", COST_REASON))
add(
    "authz (no test file in dir; authz.go)",
    "authorizer.*",
    "-",
    (
        "skip",
        "the authz library needs a Kubernetes authorizer; policyd has the authorizer-free libraries only",
    ),
)


LISTS_SCHEMA: dict[str, Schema] = {
    "ints": ("list", "int"),
    "unsortedInts": ("list", "int"),
    "emptyInts": ("list", "int"),
    "doubles": ("list", "double"),
    "unsortedDoubles": ("list", "double"),
    "emptyDoubles": ("list", "double"),
    "intBackedDoubles": ("list", "double"),
    "unsortedIntBackedDDoubles": ("list", "double"),
    "emptyIntBackedDDoubles": ("list", "double"),
    "durations": ("list", "duration"),
    "unsortedDurations": ("list", "duration"),
    "emptyDurations": ("list", "duration"),
    "strings": ("list", "string"),
    "unsortedStrings": ("list", "string"),
    "emptyStrings": ("list", "string"),
    "dates": ("list", "timestamp"),
    "unsortedDates": ("list", "timestamp"),
    "emptyDates": ("list", "timestamp"),
    "objs": ("list", ("obj", {"f1": "string", "f2": "string"})),
}
LISTS_OBJ: dict[str, Any] = {
    "ints": [1, 2, 2, 3],
    "unsortedInts": [2, 1],
    "emptyInts": [],
    "doubles": [1.0, 2.0, 2.0, 3.0],
    "unsortedDoubles": [2.0, 1.0],
    "emptyDoubles": [],
    "intBackedDoubles": [1.0, 2.0, 2.0, 3.0],
    "unsortedIntBackedDDoubles": [2.0, 1.0],
    "emptyIntBackedDDoubles": [],
    "durations": ["@dur:1s", "@dur:1m", "@dur:1m", "@dur:1h"],
    "unsortedDurations": ["@dur:1m", "@dur:1s"],
    "emptyDurations": [],
    "strings": ["a", "b", "b", "c"],
    "unsortedStrings": ["b", "a"],
    "emptyStrings": [],
    "dates": [
        "@ts:2000-01-01T00:00:00Z",
        "@ts:2000-02-01T00:00:00Z",
        "@ts:2000-02-01T00:00:00Z",
        "@ts:2010-01-01T00:00:00Z",
    ],
    "unsortedDates": ["@ts:2000-02-01T00:00:00Z", "@ts:2000-01-01T00:00:00Z"],
    "emptyDates": [],
    "objs": [{"f1": "a", "f2": "a"}, {"f1": "a", "f2": "b"}, {"f1": "a", "f2": "b"}, {"f1": "a", "f2": "c"}],
}

src = "validation_test.go[lists]"
for r in [
    "self.ints.sum() == 8",
    "self.ints.min() == 1",
    "self.ints.max() == 3",
    "self.emptyInts.sum() == 0",
    "self.ints.isSorted()",
    "self.emptyInts.isSorted()",
    "self.unsortedInts.isSorted() == false",
    "self.ints.indexOf(2) == 1",
    "self.ints.lastIndexOf(2) == 2",
    "self.ints.indexOf(10) == -1",
    "self.ints.lastIndexOf(10) == -1",
    "self.doubles.sum() == 8.0",
    "self.doubles.min() == 1.0",
    "self.doubles.max() == 3.0",
    "self.emptyDoubles.sum() == 0.0",
    "self.doubles.isSorted()",
    "self.emptyDoubles.isSorted()",
    "self.unsortedDoubles.isSorted() == false",
    "self.doubles.indexOf(2.0) == 1",
    "self.doubles.lastIndexOf(2.0) == 2",
    "self.doubles.indexOf(10.0) == -1",
    "self.doubles.lastIndexOf(10.0) == -1",
    "self.intBackedDoubles.sum() == 8.0",
    "self.intBackedDoubles.min() == 1.0",
    "self.intBackedDoubles.max() == 3.0",
    "self.emptyIntBackedDDoubles.sum() == 0.0",
    "self.intBackedDoubles.isSorted()",
    "self.emptyDoubles.isSorted()",
    "self.unsortedIntBackedDDoubles.isSorted() == false",
    "self.intBackedDoubles.indexOf(2.0) == 1",
    "self.intBackedDoubles.lastIndexOf(2.0) == 2",
    "self.intBackedDoubles.indexOf(10.0) == -1",
    "self.intBackedDoubles.lastIndexOf(10.0) == -1",
    "self.durations.sum() == duration('1h2m1s')",
    "self.durations.min() == duration('1s')",
    "self.durations.max() == duration('1h')",
    "self.emptyDurations.sum() == duration('0')",
    "self.durations.isSorted()",
    "self.emptyDurations.isSorted()",
    "self.unsortedDurations.isSorted() == false",
    "self.durations.indexOf(duration('1m')) == 1",
    "self.durations.lastIndexOf(duration('1m')) == 2",
    "self.durations.indexOf(duration('2m')) == -1",
    "self.durations.lastIndexOf(duration('2m')) == -1",
    "self.strings.min() == 'a'",
    "self.strings.max() == 'c'",
    "self.strings.isSorted()",
    "self.emptyStrings.isSorted()",
    "self.unsortedStrings.isSorted() == false",
    "self.strings.indexOf('b') == 1",
    "self.strings.lastIndexOf('b') == 2",
    "self.strings.indexOf('x') == -1",
    "self.strings.lastIndexOf('x') == -1",
    "self.dates.min() == timestamp('2000-01-01T00:00:00.000Z')",
    "self.dates.max() == timestamp('2010-01-01T00:00:00.000Z')",
    "self.dates.isSorted()",
    "self.emptyDates.isSorted()",
    "self.unsortedDates.isSorted() == false",
    "self.dates.indexOf(timestamp('2000-02-01T00:00:00.000Z')) == 1",
    "self.dates.lastIndexOf(timestamp('2000-02-01T00:00:00.000Z')) == 2",
    "self.dates.indexOf(timestamp('2005-02-01T00:00:00.000Z')) == -1",
    "self.dates.lastIndexOf(timestamp('2005-02-01T00:00:00.000Z')) == -1",
    "[[1], [2]].indexOf([1]) == 0",
    "[{'a': 1}, {'b': 2}].lastIndexOf({'b': 2}) == 1",
    "self.objs.indexOf(self.objs[1]) == 1",
    "self.objs.lastIndexOf(self.objs[1]) == 2",
    "([0] + self.emptyInts).min() == 0",
    "dyn([]).sum() == 0",
    "dyn([1, 2]).sum() == 3",
    "dyn([1.0, 2.0]).sum() == 3.0",
    "[].sum() == 0",
]:
    add(src, "valid", r, T, self_schema=LISTS_SCHEMA, self_obj=LISTS_OBJ)
for r, e in [
    ("self.emptyInts.min() == 1", verr("any", "min called on empty list")),
    ("self.emptyInts.max() == 3", verr("any", "max called on empty list")),
    ("self.emptyDoubles.min() == 1.0", verr("any", "min called on empty list")),
    ("self.emptyDoubles.max() == 3.0", verr("any", "max called on empty list")),
    ("self.emptyStrings.min() == 'a'", verr("any", "min called on empty list")),
    ("self.emptyStrings.max() == 'c'", verr("any", "max called on empty list")),
    (
        "['a', 'b'].sum() == 'c'",
        verr("compile", "found no matching overload for 'sum' applied to 'list(string).()"),
    ),
    (
        "[[1], [2]].min() == [1]",
        verr("compile", "found no matching overload for 'min' applied to 'list(list(int)).()"),
    ),
    (
        "[{'a': 1}, {'b': 2}].max() == {'b': 2}",
        verr("compile", "found no matching overload for 'max' applied to 'list(map(string, int)).()"),
    ),
]:
    add(src, "error", r, e, self_schema=LISTS_SCHEMA, self_obj=LISTS_OBJ)

src = "validation_test.go[regex]"
RX_SCHEMA, RX_OBJ = {"str": "string"}, {"str": "this is a 123 string 456"}
for r in [
    "self.str.find('[0-9]+') == '123'",
    "self.str.find('[0-9]+') != '456'",
    "self.str.find('xyz') == ''",
    "self.str.findAll('[0-9]+') == ['123', '456']",
    "self.str.findAll('[0-9]+', 0) == []",
    "self.str.findAll('[0-9]+', 1) == ['123']",
    "self.str.findAll('[0-9]+', 2) == ['123', '456']",
    "self.str.findAll('[0-9]+', 3) == ['123', '456']",
    "self.str.findAll('[0-9]+', -1) == ['123', '456']",
    "self.str.findAll('xyz') == []",
    "self.str.findAll('xyz', 1) == []",
]:
    add(src, "valid", r, T, self_schema=RX_SCHEMA, self_obj=RX_OBJ)
for r, e in [
    ("self.str.find(')') == ''", verr("compile", "error parsing regexp: unexpected ): `)`")),
    ("self.str.findAll(')') == []", verr("compile", "error parsing regexp: unexpected ): `)`")),
    ("self.str.findAll(')', 1) == []", verr("compile", "error parsing regexp: unexpected ): `)`")),
    ("self.str.matches('x++')", verr("any", "invalid matches argument")),
]:
    add(src, "error", r, e, self_schema=RX_SCHEMA, self_obj=RX_OBJ)

src = "validation_test.go[urls]"
URL_SCHEMA: dict[str, Schema] = {"url": "string"}
URL_OBJ: dict[str, Any] = {"url": "https://user:pass@kubernetes.io:80/docs/home?k1=a&k2=b&k2=c#anchor"}
for r in [
    "url('/path').getScheme() == ''",
    "url('https://example.com/').getScheme() == 'https'",
    "url('https://example.com:80/').getHost() == 'example.com:80'",
    "url('https://example.com/').getHost() == 'example.com'",
    "url('https://[::1]:80/').getHost() == '[::1]:80'",
    "url('https://[::1]/').getHost() == '[::1]'",
    "url('/path').getHost() == ''",
    "url('https://example.com:80/').getHostname() == 'example.com'",
    "url('https://127.0.0.1/').getHostname() == '127.0.0.1'",
    "url('https://[::1]/').getHostname() == '::1'",
    "url('/path').getHostname() == ''",
    "url('https://example.com:80/').getPort() == '80'",
    "url('https://example.com/').getPort() == ''",
    "url('/path').getPort() == ''",
    "url('https://example.com/path').getEscapedPath() == '/path'",
    "url('https://example.com/with space/').getEscapedPath() == '/with%20space/'",
    "url('https://example.com').getEscapedPath() == ''",
    "url('https://example.com/path?k1=a&k2=b&k2=c').getQuery() == { 'k1': ['a'], 'k2': ['b', 'c']}",
    "url('https://example.com/path?key with spaces=value with spaces').getQuery() == { 'key with spaces': ['value with spaces']}",
    "url('https://example.com/path?').getQuery() == {}",
    "url('https://example.com/path').getQuery() == {}",
    "url(self.url).getScheme() == 'https'",
    "url(self.url).getHost() == 'kubernetes.io:80'",
    "url(self.url).getHostname() == 'kubernetes.io'",
    "url(self.url).getPort() == '80'",
    "url(self.url).getEscapedPath() == '/docs/home'",
    "url(self.url).getQuery() == {'k1': ['a'], 'k2': ['b', 'c']}",
    "isURL('https://user:pass@example.com:80/path?query=val#fragment')",
    "isURL('/path') == true",
    "isURL('https://a:b:c/') == false",
    "isURL('../relative-path') == false",
]:
    add(src, "valid", r, T, self_schema=URL_SCHEMA, self_obj=URL_OBJ)

src = "validation_test.go[quantity]"
Q_SCHEMA, Q_OBJ = {"val1": "string", "val2": "string"}, {"val1": "20", "val2": "200M"}
for r in [
    "isQuantity(self.val1)",
    "isQuantity(self.val2)",
    'isQuantity("20Mi")',
    'quantity(self.val2) == quantity("0.2G") && quantity("0.2G") == quantity("200M")',
    'quantity("2M") == quantity("0.002G") && quantity("2000k") == quantity("2M") && quantity("0.002G") == quantity("2000k")',
    'quantity(self.val1).isLessThan(quantity("100M"))',
    'quantity(self.val2).isGreaterThan(quantity("50M"))',
    'quantity(self.val2).compareTo(quantity("0.2G")) == 0',
    'quantity("50k").add(quantity(self.val1)) == quantity("50.02k")',
    'quantity("50k").sub(quantity(self.val1)) == quantity("49980")',
    "quantity(self.val1).isInteger()",
]:
    add(src, "valid", r, T, self_schema=Q_SCHEMA, self_obj=Q_OBJ)

src = "validation_test.go[ip/cidr]"
for r in [
    'isIP("192.168.0.1")',
    'ip.isCanonical("127.0.0.1")',
    'ip("192.168.0.1").family() > 0',
    'ip("0.0.0.0").isUnspecified()',
    'ip("127.0.0.1").isLoopback()',
    'ip("224.0.0.1").isLinkLocalMulticast()',
    'ip("192.168.0.1").isGlobalUnicast()',
    'type(ip("192.168.0.1")) == net.IP',
    'cidr("192.168.0.0/24").containsIP(ip("192.168.0.1"))',
    'cidr("192.168.0.0/24").containsCIDR("192.168.0.0/25")',
    'cidr("2001:db8::/32").containsCIDR(cidr("2001:db8::/33"))',
    'type(cidr("2001:db8::/32").ip()) == net.IP',
    "cidr('192.168.0.0/24') == cidr('192.168.0.0/24').masked()",
    "cidr('192.168.0.0/16').prefixLength() == 16",
    "cidr('::1/128').ip().family() == 6",
]:
    add(src, "valid", r, T)

src = "validation_test.go[cost]"
for r in [
    "[1,2,3,4].isSorted()",
    "url('https:://kubernetes.io/').getHostname() != 'test'",
    "size('abc 123 def 123'.split(' ')) > 0",
    "size(['aa', 'bb', 'cc', 'd', 'e', 'f', 'g', 'h', 'i', 'j'].join(' ')) > 0",
]:
    add(src, "expectedCost", r, ("skip", COST_REASON))
add(
    "validation_test.go[authz]",
    "authorizer not supported",
    "authorizer.path('/healthz').check('get').allowed()",
    (
        "skip",
        "the authz library needs a Kubernetes authorizer; policyd has the authorizer-free libraries only",
    ),
)

# --- cel-go extension libraries and optionals, as Kubernetes' CRD environment exercises them ---------
src = "validation_test.go[ext strings/format]"
S_SCHEMA: dict[str, Schema] = {"val1": "string", "val2": "string"}
S_OBJ: dict[str, Any] = {"val1": "Rook takes 👑", "val2": "Rook takes 👑"}
for r in [
    "self.val1.startsWith('Rook')",
    "!self.val1.startsWith('knight')",
    "self.val1.contains('takes')",
    "!self.val1.contains('gives')",
    "self.val1.endsWith('👑')",
    "!self.val1.endsWith('pawn')",
    "self.val1.matches('^[^0-9]*$')",
    "!self.val1.matches('^[0-9]*$')",
    "type(self.val1) == string",
    "size(self.val1) == 12",
    "self.val1.charAt(3) == 'k'",
    "self.val1.indexOf('o') == 1",
    "self.val1.indexOf('o', 2) == 2",
    "self.val1.replace(' ', 'x') == 'Rookxtakesx👑'",
    "self.val1.replace(' ', 'x', 1) == 'Rookxtakes 👑'",
    "self.val1.split(' ') == ['Rook', 'takes', '👑']",
    "self.val1.split(' ', 2) == ['Rook', 'takes 👑']",
    "self.val1.substring(5) == 'takes 👑'",
    "self.val1.substring(0, 4) == 'Rook'",
    "self.val1.substring(4, 10).trim() == 'takes'",
    "self.val1.upperAscii() == 'ROOK TAKES 👑'",
    "self.val1.lowerAscii() == 'rook takes 👑'",
    "'%d %s %f %s %s'.format([1, 'abc', 1.0, duration('1m'), timestamp('2000-01-01T00:00:00.000Z')]) == '1 abc 1.000000 60s 2000-01-01T00:00:00Z'",
    "'%e'.format([3.14]) == '3.140000 × 10⁰⁰'",
    "'%o %o %o'.format([7, 8, 9]) == '7 10 11'",
    "'%b %b %b'.format([7, 8, 9]) == '111 1000 1001'",
]:
    add(src, "valid", r, T, self_schema=S_SCHEMA, self_obj=S_OBJ)
add(
    src,
    "error",
    "self.val1.matches(')')",
    verr("compile", "invalid matches argument", 19),
    self_schema=S_SCHEMA,
    self_obj=S_OBJ,
)

src = "validation_test.go[ext lists/sets]"
L_SCHEMA, L_OBJ = {"val1": ("list", "string")}, {"val1": ["a", "b", "c"]}
for r in [
    "self.val1.join('-') == 'a-b-c'",
    "['a', 'b', 'c'].join('-') == 'a-b-c'",
    "self.val1.join() == 'abc'",
    "['a', 'b', 'c'].join() == 'abc'",
    "sets.contains(['a', 'b'], [])",
    "sets.contains(['a', 'b'], ['b'])",
    "!sets.contains(['a', 'b'], ['c'])",
    "sets.equivalent([], [])",
    "sets.equivalent(['c', 'b', 'a'], ['b', 'c', 'a'])",
    "!sets.equivalent(['a', 'b'], ['b', 'c'])",
    "sets.intersects(['a', 'b'], ['b', 'c'])",
    "!sets.intersects([], [])",
    "!sets.intersects(['a', 'b'], [])",
    "!sets.intersects(['a', 'b'], ['c', 'd'])",
    "sets.contains([1, 2], [2])",
    "sets.contains([true, false], [false])",
    "sets.contains([1.25, 1.5], [1.5])",
    "sets.contains([{'a': 1}, {'b': 2}], [{'b': 2}])",
    "sets.contains([[1, 2], [3, 4]], [[3, 4]])",
    "sets.contains([timestamp('2000-01-01T00:00:00.000+01:00'), timestamp('2012-01-01T00:00:00.000+01:00')], [timestamp('2012-01-01T00:00:00.000+01:00')])",
    "sets.contains([duration('1h'), duration('2h')], [duration('2h')])",
    "sets.equivalent([1, 2], [1, 2])",
    "sets.equivalent([true, false], [true, false])",
    "sets.equivalent([1.25, 1.5], [1.25, 1.5])",
    "sets.equivalent([{'a': 1}, {'b': 2}], [{'a': 1}, {'b': 2}])",
    "sets.equivalent([[1, 2], [3, 4]], [[1, 2], [3, 4]])",
    "sets.equivalent([timestamp('2012-01-01T00:00:00.000+01:00')], [timestamp('2012-01-01T00:00:00.000+01:00')])",
    "sets.equivalent([duration('1h'), duration('2h')], [duration('1h'), duration('2h')])",
    "sets.intersects([1, 2], [2])",
    "sets.intersects([true, false], [false])",
    "sets.intersects([1.25, 1.5], [1.5])",
    "sets.intersects([{'a': 1}, {'b': 2}], [{'b': 2}])",
    "sets.intersects([[1, 2], [3, 4]], [[3, 4]])",
    "sets.intersects([timestamp('2000-01-01T00:00:00.000+01:00'), timestamp('2012-01-01T00:00:00.000+01:00')], [timestamp('2012-01-01T00:00:00.000+01:00')])",
    "sets.intersects([duration('1h'), duration('2h')], [duration('2h')])",
]:
    add(src, "valid", r, T, self_schema=L_SCHEMA, self_obj=L_OBJ)

src = "validation_test.go[optionals]"
O_SCHEMA: dict[str, Schema] = {
    "presentObj": ("obj", {"presentStr": "string"}),
    "absentObj": ("obj", {"absentStr": "string"}),
    "m": ("map", "string"),
    "l": ("list", "string"),
}
O_OBJ: dict[str, Any] = {"presentObj": {"presentStr": "value"}, "m": {"k": "v"}, "l": ["a"]}
for r in [
    "self.?presentObj.?presentStr == optional.of('value')",
    "self.presentObj.?presentStr == optional.of('value')",
    "self.presentObj.?presentStr.or(optional.of('nope')) == optional.of('value')",
    "self.presentObj.?presentStr.orValue('') == 'value'",
    "self.presentObj.?presentStr.hasValue() == true",
    "self.presentObj.?presentStr.optMap(v, v == 'value').hasValue()",
    "self.?absentObj.?absentStr == optional.none()",
    "self.?absentObj.?absentStr.or(optional.of('nope')) == optional.of('nope')",
    "self.?absentObj.?absentStr.orValue('nope') == 'nope'",
    "self.?absentObj.?absentStr.hasValue() == false",
    "self.?absentObj.?absentStr.optMap(v, v == 'value').hasValue() == false",
    "self.m[?'k'] == optional.of('v')",
    "self.m[?'k'].or(optional.of('nope')) == optional.of('v')",
    "self.m[?'k'].orValue('') == 'v'",
    "self.m[?'k'].hasValue() == true",
    "self.m[?'k'].optMap(v, v == 'v').hasValue()",
    "self.m[?'x'] == optional.none()",
    "self.m[?'x'].or(optional.of('nope')) == optional.of('nope')",
    "self.m[?'x'].orValue('nope') == 'nope'",
    "self.m[?'x'].hasValue() == false",
    "self.l[?0] == optional.of('a')",
    "self.l[?1] == optional.none()",
    "self.l[?0].orValue('') == 'a'",
    "self.l[?0].hasValue() == true",
    "self.l[?0].optMap(v, v == 'a').hasValue()",
    "self.l[?1].or(optional.of('nope')) == optional.of('nope')",
    "self.l[?1].orValue('nope') == 'nope'",
    "self.l[?1].hasValue() == false",
    "optional.ofNonZeroValue(1).hasValue()",
    "optional.ofNonZeroValue(uint(1)).hasValue()",
    "optional.ofNonZeroValue(1.1).hasValue()",
    "optional.ofNonZeroValue('a').hasValue()",
    "optional.ofNonZeroValue(true).hasValue()",
    "optional.ofNonZeroValue(['a']).hasValue()",
    "optional.ofNonZeroValue({'k': 'v'}).hasValue()",
    "optional.ofNonZeroValue(timestamp('2011-08-18T00:00:00.000+01:00')).hasValue()",
    "optional.ofNonZeroValue(duration('19h3m37s10ms')).hasValue()",
    "optional.ofNonZeroValue(null) == optional.none()",
    "optional.ofNonZeroValue(0) == optional.none()",
    "optional.ofNonZeroValue(uint(0)) == optional.none()",
    "optional.ofNonZeroValue(0.0) == optional.none()",
    "optional.ofNonZeroValue('') == optional.none()",
    "optional.ofNonZeroValue(false) == optional.none()",
    "optional.ofNonZeroValue([]) == optional.none()",
    "optional.ofNonZeroValue({}) == optional.none()",
    "optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00.000+00:00')) == optional.none()",
    "optional.ofNonZeroValue(duration('0s')) == optional.none()",
    "{?'k': optional.none(), 'k2': 'v2'} == {'k2': 'v2'}",
    "{?'k': optional.of('v'), 'k2': 'v2'} == {'k': 'v', 'k2': 'v2'}",
    "['a', ?optional.none(), 'c'] == ['a', 'c']",
    "['a', ?optional.of('v'), 'c'] == ['a', 'v', 'c']",
]:
    add(src, "valid", r, T, self_schema=O_SCHEMA, self_obj=O_OBJ)
add(
    src,
    "error",
    "self.absentObj.?absentStr == optional.none()",
    verr("runtime", "no such key: absentObj"),
    self_schema=O_SCHEMA,
    self_obj=O_OBJ,
)

src = "validation_test.go[stdlib literal checks]"
for r, e in [
    ("duration('1')", verr("compile", "invalid duration argument", 10)),
    ("duration('1d')", verr("compile", "invalid duration argument", 10)),
    ("duration('1us') < duration('1nns')", verr("compile", "invalid duration argument", 28)),
    ("timestamp('1000-00-00T00:00:00Z')", verr("compile", "invalid timestamp", 11)),
    ("timestamp('1000-01-01T00:00:00ZZ')", verr("compile", "invalid timestamp", 11)),
    ("timestamp(-62135596801)", verr("compile", "invalid timestamp", 11)),
    # cel.HomogeneousAggregateLiterals is an option of Kubernetes' CEL environment
    (
        "[1, 'a', false].filter(x, string(x) == 'a')",
        verr("compile", "expected type 'int' but found 'string'", 5),
    ),
    ("{'k1': 'a', 'k2': 1, 'k2': false}", verr("compile", "expected type 'string' but found 'int'")),
]:
    add(src, "error", r, e)

# ---------------------------------------------------------------------------------------------
# Later validation_test.go versions, stored only in forks of kubernetes/kubernetes: reckless-sherixx
# f3138894 ("ext lists version 3", "two variable comprehensions", "format") and mmorel-35 0b0abd6c (the
# last two). The Go test checks that an error contains the text; it does not say in which phase.
src = "validation_test.go[ext lists version 3]"
LV3_SCHEMA, LV3_OBJ = (
    {"val1": ("list", "int"), "val2": ("list", "int")},
    {"val1": [1, 2, 3], "val2": [1, 2, 3]},
)
for r in [
    "lists.range(4) == [0,1,2,3]",
    "lists.range(0) == []",
    "[5,1,2,3].reverse() == [3,2,1,5]",
    "[].reverse() == []",
    "[1].reverse() == [1]",
    "['are', 'you', 'as', 'bored', 'as', 'I', 'am'].reverse() == ['am', 'I', 'as', 'bored', 'as', 'you', 'are']",
    "[false, true, true].reverse().reverse() == [false, true, true]",
    "[1,2,3,4].slice(0, 4) == [1,2,3,4]",
    "[1,2,3,4].slice(0, 0) == []",
    "[1,2,3,4].slice(1, 1) == []",
    "[1,2,3,4].slice(4, 4) == []",
    "[1,2,3,4].slice(1, 3) == [2, 3]",
    "dyn([]).flatten() == []",
    "dyn([1,2,3,4]).flatten() == [1,2,3,4]",
    "[].sort() == []",
    "[1].sort() == [1]",
    "[4, 3, 2, 1].sort() == [1, 2, 3, 4]",
    '["d", "a", "b", "c"].sort() == ["a", "b", "c", "d"]',
    "[].sortBy(e, e) == []",
    '["a"].sortBy(e, e) == ["a"]',
    "[-3, 1, -5, -2, 4].sortBy(e, -(e * e)) == [-5, 4, -3, -2, 1]",
    "[-3, 1, -5, -2, 4].map(e, e * 2).sortBy(e, -(e * e)) == [-10, 8, -6, -4, 2]",
    "lists.range(3).sortBy(e, -e) == [2, 1, 0]",
    '["a", "c", "b", "first"].sortBy(e, e == "first" ? "" : e) == ["first", "a", "b", "c"]',
    "[{'name': 'foo'}, {'name': 'bar'}, {'name': 'baz'}].sortBy(e, e.name) == "
    "[{'name': 'bar'}, {'name': 'baz'}, {'name': 'foo'}]",
    "[].distinct() == []",
    "[1].distinct() == [1]",
    "[-2, 5, -2, 1, 1, 5, -2, 1].distinct() == [-2, 5, 1]",
    "['c', 'a', 'a', 'b', 'a', 'b', 'c', 'c'].distinct() == ['c', 'a', 'b']",
    "[[1], [1], [2]].distinct() == [[1], [2]]",
    "[{'name': 'a'}, {'name': 'b'}, {'name': 'a'}].distinct() == [{'name': 'a'}, {'name': 'b'}]",
    "[[1],[2],[3,4]].flatten() == [1,2,3,4]",
]:
    add(src, "valid", r, T, self_schema=LV3_SCHEMA, self_obj=LV3_OBJ)
for r, text in [
    (
        "[1,2,3,4].slice(3, 0) != [1,2]",
        "cannot slice(3, 0), start index must be less than or equal to end index",
    ),
    ("[1,2,3,4].slice(0, 10) != [1,2]", "cannot slice(0, 10), list is length 4"),
    ("[1,2,3,4].slice(-5, 10) != [1,2]", "cannot slice(-5, 10), negative indexes not supported"),
    ("[1,2,3,4].slice(-5, -3) != [1,2]", "cannot slice(-5, -3), negative indexes not supported"),
    # Kubernetes' text goes on with " evaluating rule: <rule>", the validator's own suffix
    ("[[1],[2],[3,4]].flatten(-1) == [1,2,3,4]", "level must be non-negative"),
    ('["d", 3, 2, "c"].sort() == ["a", "b", "c", "d"]', "expected type 'string' but found 'int'"),
]:
    add(src, "error", r, verr("any", text), self_schema=LV3_SCHEMA, self_obj=LV3_OBJ)

src = "validation_test.go[two variable comprehensions]"
for r in [
    "self.val.all(k, v, v > 0)",
    "self.val.exists(k, v, v == 2)",
    "self.val.existsOne(k, v, v == 2)",
    "self.val.transformMap(k, v, v > 1, v + 1).size() == 1",
    "self.val.transformMap(k, v, v + 1).size() == 2",
    "self.val.transformMapEntry(k, v, v > 1, {k + '2': v + 1}).size() == 1",
    "self.val.transformMapEntry(k, v, {k + '2': v + 1}).size() == 2",
]:
    add(src, "valid", r, T, self_schema={"val": ("map", "int")}, self_obj={"val": {"b": 1, "d": 2}})
LISTMAP_SCHEMA = {"listMap": ("list", ("obj", {"k": "string", "v": "string", "v2": "string"}))}
LISTMAP_OBJ = {"listMap": [{"k": "a1", "v": "b1"}, {"k": "a2", "v": "b2"}, {"k": "a3", "v": "b3", "v2": "z"}]}
for r in [
    "!self.listMap.all(i, m, has(m.v2) && m.v2 != 'z')",
    "self.listMap.exists(i, m, has(m.v2) && m.v2 == 'z')",
    "self.listMap.existsOne(i, m, has(m.v2) && m.v2 == 'z')",
    "self.listMap.transformList(i, m, has(m.v2) && m.v2 == 'z', m.v2).size() == 1",
    "self.listMap.transformList(i, m, m.v).size() == 3",
]:
    add(src, "valid", r, T, self_schema=LISTMAP_SCHEMA, self_obj=LISTMAP_OBJ)
for r in [
    "self.array.all(i, e, e > 0)",
    "self.array.exists(i, e, e > 2)",
    "self.array.existsOne(i, e, e > 4)",
    "self.array.transformList(i, e, e > 2, e * 2).size() > 0",
    "self.array.transformList(i, e, e * 2).size() > 0",
]:
    add(
        src,
        "valid",
        r,
        T,
        self_schema={"array": ("list", "int")},
        self_obj={"array": [1, 1, 2, 2, 3, 3, 4, 5]},
    )

src = "validation_test.go[format]"
for r in [
    'format.dns1123Label().validate("my-label-name") == optional.none()',
    'format.dns1123Subdomain().validate("apiextensions.k8s.io") == optional.none()',
    'format.qualifiedName().validate("apiextensions.k8s.io/v1beta1") == optional.none()',
    'format.dns1123LabelPrefix().validate("my-label-prefix-") == optional.none()',
    'format.dns1123SubdomainPrefix().validate("mysubdomain.prefix.-") == optional.none()',
    'format.dns1035LabelPrefix().validate("my-label-prefix-") == optional.none()',
    'format.uri().validate("http://example.com") == optional.none()',
    'format.uuid().validate("123e4567-e89b-12d3-a456-426614174000") == optional.none()',
    'format.byte().validate("aGVsbG8=") == optional.none()',
    'format.date().validate("2021-01-01") == optional.none()',
    'format.datetime().validate("2021-01-01T00:00:00Z") == optional.none()',
    'format.named("dns1123Label").value().validate("my-name") == optional.none()',
    # the CEL string holds \' escapes, as the Go test writes it
    'format.dns1123Label().validate("contains a space").value()[0] == "a lowercase RFC 1123 label must '
    "consist of lower case alphanumeric characters or \\'-\\', and must start and end with an alphanumeric "
    "character (e.g. \\'my-name\\',  or \\'123-abc\\', regex used for validation is "
    "\\'[a-z0-9]([-a-z0-9]*[a-z0-9])?\\')\"",
    '!format.named("unknown").hasValue()',
]:
    add(
        src,
        "valid",
        r,
        T,
        self_schema={"val1": "string", "val2": "string"},
        self_obj={"val1": "20", "val2": "200M"},
    )
