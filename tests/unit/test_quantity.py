"""Kubernetes quantity parsing, scaling and formatting, and the CEL quantity library."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policyd.cel.program import CelCompileError, compile_expression
from policyd.errors import CelEvalError, ClusterDataError, PolicydError
from policyd.quantity import (
    FORMAT_WRONG,
    SUFFIX_WRONG,
    QuantityError,
    format_quantity,
    parse_quantity,
    to_int,
    to_milli,
)
from tests.unit.cel.library_cases import ENV, ev


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("1.", Fraction(1)),
        (".5", Fraction(1, 2)),
        ("+2", Fraction(2)),
        ("-2k", Fraction(-2000)),
        ("100n", Fraction(100, 10**9)),
        ("3u", Fraction(3, 10**6)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(1024)),
        ("1Mi", Fraction(1024**2)),
        ("1.5Gi", Fraction(3 * 1024**3, 2)),
        ("1Ti", Fraction(1024**4)),
        ("1Pi", Fraction(1024**5)),
        ("1Ei", Fraction(1024**6)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("12e-3", Fraction(12, 1000)),
        ("2E+2", Fraction(200)),
        (7, Fraction(7)),
        (0.25, Fraction(1, 4)),
        (0.1, Fraction(1, 10)),
    ],
)
def test_parse_known_values(text: str | int | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "abc",
        "1Kb",
        "1ki",
        "1.2.3",
        "1e",
        "1e+",
        "i",
        "1mm",
        "--1",
        "1Gi1",
        "0x10",
        "1e999",
        # apimachinery's TestQuantityParse invalid list
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
    ],
)
def test_malformed_quantities_raise(text: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert repr(text) in str(info.value) or "range" in str(info.value)


# apimachinery's ParseQuantity: text its scanner cannot take is ErrFormatWrong, a suffix it took but does
# not know is ErrSuffix (the Kubernetes CEL library's quantity_test.go: "10Mo", "10Mm")
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("10Mo", FORMAT_WRONG),
        ("aoeu", FORMAT_WRONG),
        ("1.2.3", FORMAT_WRONG),
        ("", FORMAT_WRONG),
        ("1+1.0M", FORMAT_WRONG),
        ("10Mm", SUFFIX_WRONG),
        ("0.1mi", SUFFIX_WRONG),
        ("1i", SUFFIX_WRONG),
        ("-3.01e-", SUFFIX_WRONG),
    ],
)
def test_cel_quantity_reports_apimachinery_s_parse_error(text: str, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert info.value.reason == reason
    with pytest.raises(CelEvalError) as cel_info:
        ev(f"quantity({text!r})")
    assert str(cel_info.value) == reason
    assert ev(f"isQuantity({text!r})") is False


@pytest.mark.parametrize("text", ["+", "-", ".", "-.", "+.", "Mi", "Ki", "m", "k", "E", "e3", ".e5", "-Gi"])
def test_a_missing_number_reads_as_zero_as_in_apimachinery(text: str) -> None:
    """parseQuantityString turns an empty number into "0" (its own test parses "." and "-.")."""
    assert parse_quantity(text) == 0
    assert ev("isQuantity(s) && sign(quantity(s)) == 0", s=text) is True
    # held as int64Amount{0, scale}: AsInt64 answers false below scale 0 ("m" is 0 x 10^-3)
    assert ev("quantity(s).isInteger()", s=text) is (text != "m")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9Ei", 2**63 - 1),
        ("-9Ei", -(2**63 - 1)),
        ("8Ei", 2**63 - 1),
        ("9223372036854775807Ki", 2**63 - 1),
        ("7Ei", 7 * 2**60),
        ("10E", 10**19),  # a decimal suffix is not capped
        ("0.000000000001Ki", Fraction(2, 10**9)),  # rounds up to 2n
    ],
)
def test_binary_suffixes_are_capped_at_int64_as_in_apimachinery(text: str, expected: Fraction | int) -> None:
    assert parse_quantity(text) == expected


def test_error_is_value_error_and_policyd_error() -> None:
    with pytest.raises(ValueError):
        parse_quantity("nope")
    with pytest.raises(PolicydError):
        parse_quantity("nope")
    with pytest.raises(ClusterDataError):
        parse_quantity(True)
    with pytest.raises(QuantityError):
        parse_quantity(float("nan"))


def test_values_finer_than_nano_round_away_from_zero() -> None:
    assert parse_quantity("0.1n") == Fraction(1, 10**9)
    assert parse_quantity("-0.1n") == Fraction(-1, 10**9)
    assert parse_quantity("1.0000000001") == Fraction(1_000_000_001, 10**9)


@pytest.mark.parametrize(
    ("text", "milli", "value"),
    [
        ("500m", 500, 1),
        ("1", 1000, 1),
        ("0.0001", 1, 1),
        ("1.2345", 1235, 2),
        ("250u", 1, 1),
        ("1Gi", 1024**3 * 1000, 1024**3),
        ("-1.5", -1500, -2),
        ("0", 0, 0),
    ],
)
def test_scaling_rounds_up(text: str, milli: int, value: int) -> None:
    q = parse_quantity(text)
    assert to_milli(q) == milli
    assert to_int(q) == value


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (Fraction(0), False, "0"),
        (Fraction(1, 2), False, "500m"),
        (Fraction(1500), False, "1500"),
        (Fraction(2000), False, "2k"),
        (Fraction(3, 2000), False, "1500u"),
        (Fraction(-4 * 10**9), False, "-4G"),
        (Fraction(10**21), False, "1000E"),
        (Fraction(1024**3), True, "1Gi"),
        (Fraction(1536), True, "1536"),
        (Fraction(3 * 1024**2), True, "3Mi"),
        (Fraction(100), True, "100"),
        (Fraction(1, 2), True, "500m"),
        (Fraction(10**19), True, "10E"),  # above what a binary suffix parses to
        (Fraction(2**63 - 1024), True, "9007199254740991Ki"),
    ],
)
def test_format_canonical(value: Fraction, binary: bool, text: str) -> None:
    assert format_quantity(value, binary=binary) == text


_SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


@st.composite
def quantity_text(draw: st.DrawFn) -> str:
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.integers(min_value=0, max_value=10**6))
    frac = draw(st.one_of(st.just(""), st.integers(min_value=0, max_value=999).map(lambda d: f".{d}")))
    if draw(st.booleans()):
        suffix = draw(st.sampled_from(_SUFFIXES))
    else:
        suffix = f"e{draw(st.integers(min_value=-12, max_value=12))}"
    return f"{sign}{whole}{frac}{suffix}"


@given(quantity_text())
def test_format_parse_round_trip(text: str) -> None:
    q = parse_quantity(text)
    assert parse_quantity(format_quantity(q)) == q
    assert parse_quantity(format_quantity(q, binary=True)) == q


@given(quantity_text())
def test_parsed_values_are_nano_multiples_and_scaling_bounds(text: str) -> None:
    q = parse_quantity(text)
    assert (q * 10**9).denominator == 1
    milli = to_milli(q)
    assert abs(milli) >= abs(q * 1000)
    assert abs(milli) - abs(q * 1000) < 1
    assert (milli >= 0) == (q >= 0) or milli == 0


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_integers_parse_exactly(n: int) -> None:
    assert parse_quantity(str(n)) == n
    assert parse_quantity(n) == n
    assert to_int(parse_quantity(format_quantity(n, binary=True))) == n


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["Ki", "Mi", "Gi"]))
def test_binary_suffix_is_power_of_1024(n: int, suffix: str) -> None:
    power = {"Ki": 1, "Mi": 2, "Gi": 3}[suffix]
    assert parse_quantity(f"{n}{suffix}") == n * 1024**power


@pytest.mark.parametrize(("text", "expected"), [("-250m", -1), ("0", 0), ("+0.0", 0), ("3Gi", 1)])
def test_cel_sign_is_a_global_function(text: str, expected: int) -> None:
    assert ev("sign(quantity(s))", s=text) == expected


def test_cel_sign_has_no_receiver_form() -> None:
    # Kubernetes declares `sign` with cel.Overload (not MemberOverload): `q.sign()` does not check.
    with pytest.raises(CelCompileError, match="found no matching overload for 'sign'"):
        compile_expression("quantity('2').sign()", ENV)


@pytest.mark.parametrize(
    ("text", "integer"),
    [
        ("1k", True),  # held as 1 x 10^3
        ("3Gi", True),
        ("1e3", True),
        ("-5", True),
        ("1E", True),  # 10^18 still fits int64
        ("50.703k", True),  # 50703 at scale 0
        ("1000m", False),  # 1000 x 10^-3: a negative scale is never an int64 for apimachinery
        ("1.0", False),
        ("0.0", False),
        ("1.5Gi", False),  # a fraction with a binary suffix: inf.Dec
        ("9223372036854775807", False),  # 19 digits: beyond the fast path's 18
        ("1e19", False),  # 10^19 overflows int64
    ],
)
def test_cel_is_integer_follows_how_apimachinery_holds_the_quantity(text: str, integer: bool) -> None:
    assert ev("quantity(s).isInteger()", s=text) is integer
    if integer:
        assert ev("quantity(s).asInteger()", s=text) == int(parse_quantity(text))
    else:
        with pytest.raises(CelEvalError, match="cannot convert value to integer"):
            ev("quantity(s).asInteger()", s=text)


def test_cel_add_and_sub_keep_apimachinery_s_scale() -> None:
    # int64Amount.Add works at the smaller scale: a milli operand leaves the sum at 10^-3
    assert ev("quantity('1k').add(quantity('1000m')).isInteger()") is False
    assert ev("quantity('1k').add(quantity('1k')).asInteger()") == 2000
    assert ev("quantity('0').add(quantity('1000m')).isInteger()") is False
    assert ev("quantity('1500m').sub(quantity('500m')).isInteger()") is False
    assert ev("quantity('2').add(3).asInteger()") == 5
    # leaving int64 moves it to inf.Dec, never back
    assert ev("quantity('9e18').add(quantity('9e18')).isInteger()") is False
    assert ev("quantity('1.5Gi').sub(quantity('0.5Gi')).isInteger()") is False


def test_cel_mul_keeps_the_scale_while_the_mantissa_fits_int64() -> None:
    assert ev("quantity('1k').mul(3).asInteger()") == 3000
    assert ev("quantity('1500m').mul(2).isInteger()") is False  # 3000 x 10^-3: milli scale kept
    assert ev("quantity('1500m').mul(2) == quantity('3')") is True
    assert ev("quantity('9e18').mul(2).isInteger()") is False  # left int64: inf.Dec, exact
    assert ev("quantity('9e18').mul(2) == quantity('18e18')") is True
    assert ev("quantity('-2Gi').mul(-1) == quantity('2Gi')") is True


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("quantity('7').div(2)", Fraction(7, 2)),
        ("quantity('10').div(3)", Fraction(33333, 10000)),  # 4 places by default
        ("quantity('-10').div(3)", Fraction(-33333, 10000)),  # toward zero, not down
        ("quantity('10').div(3, 0)", Fraction(3)),
        ("quantity('2').div(3, 10)", Fraction(6666666666, 10**10)),
        ("quantity('-7').divInt(2)", Fraction(-3)),
        ("quantity('7').divInt(-2)", Fraction(-3)),
        ("quantity('7.9').divInt(1)", Fraction(7)),
        ("quantity('3').div(2)", Fraction(3, 2)),  # a last digit of zero keeps its fraction
    ],
)
def test_cel_div_cuts_toward_zero_at_its_digits(expr: str, value: Fraction) -> None:
    assert ev(expr).value == value


def test_cel_div_answers_integer_only_for_a_whole_quotient_of_an_int64_operand() -> None:
    assert ev("quantity('10k').div(2).asInteger()") == 5000
    assert ev("quantity('10').div(3).isInteger()") is False
    assert ev("quantity('1.5').div(1, 0).isInteger()") is False  # 15 x 10^-1 is not int64-held
    assert ev("quantity('1.5').divInt(1).asInteger()") == 1  # divInt always holds a whole result
    assert ev("quantity('1e19').divInt(10).asInteger()") == 10**18


@pytest.mark.parametrize(
    ("expr", "error"),
    [
        ("quantity('1').div(0)", "division by zero"),
        ("quantity('1').div(0, 2)", "division by zero"),
        ("quantity('1').divInt(0)", "division by zero"),
        ("quantity('1').div(0, -1)", "division by zero"),  # the divisor is checked first
        ("quantity('1').div(3, -1)", "negative rounding values are not allowed"),
        ("quantity('1').div(3, 11)", "the maximum value for rounding float division is 10 but 11 was passed"),
    ],
)
def test_cel_div_errors(expr: str, error: str) -> None:
    with pytest.raises(CelEvalError, match=error):
        ev(expr)


def test_cel_mul_and_div_take_an_int_operand_only() -> None:
    for expr in ("quantity('2').mul(quantity('3'))", "quantity('2').div(1.5)", "quantity('2').divInt('1')"):
        with pytest.raises(CelCompileError, match="found no matching overload"):
            compile_expression(expr, ENV)
