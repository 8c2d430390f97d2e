"""cel-go's strings extension: positions in code points, Go's trimming and splitting, quote, format."""

from __future__ import annotations

from typing import Any

import pytest

from policyd.cel.program import CelCompileError, compile_expression
from policyd.cel.values import UInt
from policyd.errors import CelEvalError
from tests.unit.cel.library_cases import ENV, ev


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("'tacocat'.charAt(3)", "o"),
        ("'tacocat'.charAt(7)", ""),
        ("'©αT'.charAt(1)", "α"),
        ("'tacocat'.indexOf('a')", 1),
        ("'tacocat'.indexOf('a', 3)", 5),
        ("'ta©o©αT'.indexOf('©', 3)", 4),
        ("'tacocat'.indexOf('')", 0),
        ("'tacocat'.lastIndexOf('a')", 5),
        ("'tacocat'.lastIndexOf('ac', 3)", 1),
        ("'tacocat'.lastIndexOf('at', 3)", -1),
        ("'TacoCat'.lowerAscii()", "tacocat"),
        ("'TacoCÆt'.lowerAscii()", "tacocÆt"),
        ("'tacoCat'.upperAscii()", "TACOCAT"),
        ("'12 days 12 hours'.replace('{0}', '2')", "12 days 12 hours"),
        ("'12 days 12 hours'.replace('12', '2', 1)", "2 days 12 hours"),
        ("'hello world'.split(' ')", ["hello", "world"]),
        ("'hello world events!'.split(' ', 2)", ["hello", "world events!"]),
        ("'hello'.split('', 2)", ["h", "ello"]),
        ("'hello'.split(' ', 0)", []),
        ("'tacocat'.substring(4)", "cat"),
        ("'tacocat'.substring(0, 4)", "taco"),
        ("'ta©o©αT'.substring(2, 6)", "©o©α"),
        ("' \\ttrim\\n '.trim()", "trim"),
        ("'\\u00a0\\u2000x\\u3000'.trim()", "x"),  # Go's unicode.IsSpace
        ("['x', 'y'].join()", "xy"),
        ("['x', 'y'].join('-')", "x-y"),
        ("[].join('-')", ""),
        ("'gums'.reverse()", "smug"),
        ("'ta©o©αT'.reverse()", "Tα©o©at"),
        ("strings.quote('first\\nsecond')", '"first\\nsecond"'),
        ("strings.quote('bell\\a \"q\" \\\\')", '"bell\\a \\"q\\" \\\\"'),
        ("strings.quote('завтра')", '"завтра"'),
    ],
)
def test_string_functions(text: str, expected: Any) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "'tacocat'.charAt(30)",
        "'tacocat'.charAt(-1)",
        "'tacocat'.indexOf('a', 30)",
        "'tacocat'.lastIndexOf('a', -1)",
        "'tacocat'.substring(40)",
        "'tacocat'.substring(4, 3)",
        "'tacocat'.substring(-1)",
    ],
)
def test_out_of_range_positions_are_errors(text: str) -> None:
    with pytest.raises(CelEvalError):
        ev(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("'%s and %s'.format(['a', 1])", "a and 1"),
        ("'%%%s%%'.format(['text'])", "%text%"),
        ("'%d %d'.format([-7, 3u])", "-7 3"),
        ("'%.3f'.format([1.2345])", "1.234"),
        ("'%.0f %.0f'.format([2.5, 3.5])", "2 4"),  # round half to even, as Go
        ("'%f'.format([2])", "2.000000"),
        ("'%.6e'.format([1052.032911275])", "1.052033e+03"),
        ("'%e'.format([3u])", "3.000000e+00"),
        ("'%b %b'.format([5, true])", "101 1"),
        ("'%o'.format([uint(65535)])", "177777"),
        ("'%x %X'.format([30, 30])", "1e 1E"),
        ("'%x'.format(['Hello world!'])", "48656c6c6f20776f726c6421"),
        ("'%X'.format([b'byte string'])", "6279746520737472696E67"),
        ("'%x'.format([-255])", "-ff"),
        ("'%s'.format([3.14])", "3.14"),
        ("'%s'.format([1e20])", "100000000000000000000"),
        ("'%s'.format([1.0])", "1"),
        (
            "'%d %f %e'.format([double('NaN'), double('Infinity'), double('-Infinity')])",
            "NaN Infinity -Infinity",
        ),
        ("'%s'.format([null])", "null"),
        ("'%s'.format([b'xyz'])", "xyz"),
        ("'%s'.format([type('x')])", "string"),
        ("'%s'.format([duration('1h45m47s')])", "6347s"),
        ("'%s'.format([duration('1.5s')])", "1.5s"),
        ("'%s'.format([timestamp('2023-02-03T23:31:20+00:00')])", "2023-02-03T23:31:20Z"),
        ("'%s'.format([['abc', 3.14, null, [9, 8]]])", "[abc, 3.14, null, [9, 8]]"),
        ("'%s'.format([{'b': 2, 'a': [1]}])", "{a: [1], b: 2}"),
        ("'%s'.format([{'strKey': 'x', 6: duration('422s')}])", "{6: 422s, strKey: x}"),
        ("'%d'.format([dyn(256u)])", "256"),
        ("s.format([n])", "7"),
    ],
)
def test_format(text: str, expected: str) -> None:
    assert ev(text, s="%d", n=7) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("'%s %s'.format(['one'])", "index 1 out of range"),
        ("'%'.format([1])", "unexpected end of string"),
        ("'%z'.format([1])", 'unrecognized formatting clause "z"'),
        (
            "'%d'.format(['x'])",
            "decimal clause can only be used on ints, uints, and doubles, was given string",
        ),
        ("'%b'.format([1.5])", "only ints, uints, and bools can be formatted as binary, was given double"),
        ("'%o'.format(['x'])", "octal clause can only be used on ints and uints"),
        ("'%x'.format([1.5])", "only ints, uints, bytes, and strings can be formatted as hex"),
        ("'%f'.format(['x'])", "fixed-point clause can only be used on ints, uints, and doubles"),
        ("'%e'.format([true])", "scientific clause can only be used on ints, uints, and doubles"),
        ("'%.f'.format([1.0])", "error while parsing precision"),
    ],
)
def test_format_errors(text: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=message.replace("(", r"\(")):
        ev(text)


def test_string_functions_reject_other_receivers_at_check_time() -> None:
    with pytest.raises(CelCompileError, match="found no matching overload for 'reverse'"):
        compile_expression("1.reverse()", ENV)
    with pytest.raises(CelCompileError, match="found no matching overload for 'strings.quote'"):
        compile_expression("strings.quote(1)", ENV)


def test_uint_formatting_keeps_uint_digits() -> None:
    assert ev("'%d'.format([18446744073709551615u])") == str(int(UInt(18446744073709551615)))
