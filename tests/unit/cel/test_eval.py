"""Behaviour of compiled CEL expressions: semantics, errors, fast paths and safety."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policyd.cel.program import compile_expression, standard_env
from policyd.cel.types import INT, STRING, ObjectType, list_of, map_of
from policyd.cel.values import Duration, Timestamp, TypeValue, UInt
from policyd.errors import CelError, CelEvalError

POD = ObjectType(
    "Pod",
    {"name": STRING, "priority": INT, "requests": map_of(STRING, INT), "labels": map_of(STRING, STRING)},
)
NODE = ObjectType("Node", {"free": map_of(STRING, INT), "taints": list_of(map_of(STRING, STRING))})
ENV = standard_env({"pod": POD, "node": NODE, "x": INT, "s": STRING})


def ev(text: str, **activation: Any) -> Any:
    return compile_expression(text, ENV).evaluate(activation)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("7 / 2", 3),
        ("-7 / 2", -3),
        ("-7 % 3", -1),
        ("1u + 2u", UInt(3)),
        ("dyn(1) == 1.0", True),
        ("1u < 2", True),
        ("dyn(true) == 1", False),
        ("dyn([1]) == dyn([true])", False),
        ("[1, 2] + [3]", [1, 2, 3]),
        ("'a' + 'b'", "ab"),
        ("b'a' + b'b'", b"ab"),
        ("2 in [1, 2]", True),
        ("'k' in {'k': 1}", True),
        ("dyn({1: 'a'})[1.0]", "a"),
        ("size('héllo')", 5),
        ("type(1) == int && type(type) == type", True),
        ("int(-3.9)", -3),
        ("uint(3.9)", UInt(3)),
        ("string(1.5)", "1.5"),
        ("double('2.5')", 2.5),
        ("string(b'\\xc3\\xa9')", "é"),
        ("int(timestamp('1970-01-01T00:01:00Z'))", 60),
        ("duration('1h2m3.5s')", Duration(3723_500_000_000)),
        ("timestamp('2024-03-01T10:00:00+02:00').getHours()", 8),
        ("timestamp('2024-03-01T10:00:00Z').getHours('America/New_York')", 5),
        ("timestamp('2024-01-01T00:00:00Z').getDayOfWeek()", 1),
        ("timestamp('2024-12-31T00:00:00Z').getDayOfYear()", 365),
        ("'abc'.matches('^a.c$')", True),
        ("[1, 2, 3].exists_one(v, v > 2)", True),
        ("[1, 2, 3].map(v, v > 1, v * 10)", [20, 30]),
        ("{'a': 1, 'b': 2}.filter(k, k != 'a')", ["b"]),
    ],
)
def test_values(text: str, expected: Any) -> None:
    got = ev(text)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    "text",
    [
        "9223372036854775807 + 1",
        "-9223372036854775808 - 1",
        "1 / 0",
        "1 % 0",
        "0u - 1u",
        "int(1e19)",
        "uint(-1)",
        "{'a': 1}['b']",
        "[1][1]",
        "[1][-1]",
        "dyn(1) + 1u",
        "string(b'\\xff')",
        "timestamp('not a time')",
        "'a'.matches('(' + '')",
        "{1: 1, 1: 2}",
    ],
)
def test_runtime_errors(text: str) -> None:
    with pytest.raises(CelEvalError):
        ev(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1/0 == 1 || true", True),
        ("true || 1/0 == 1", True),
        ("1/0 == 1 && false", False),
        ("false && 1/0 == 1", False),
        ("[0, 1].all(v, 1 / v > 0) || true", True),
        ("[0, 1].exists(v, 1 / v == 1)", True),
        ("[0, 1].all(v, 1 / v < 0)", False),
    ],
)
def test_error_absorption(text: str, expected: bool) -> None:
    assert ev(text) is expected


def test_error_not_absorbed() -> None:
    with pytest.raises(CelEvalError):
        ev("true && 1/0 == 1")
    with pytest.raises(CelEvalError):
        ev("[0, 1].all(v, 1 / v > 0)")


def test_object_fields_zero_values_and_has() -> None:
    pod = {"name": "p", "requests": {"cpu": 100}}
    assert ev("pod.priority", pod=pod) == 0
    assert ev("has(pod.priority)", pod=pod) is False
    assert ev("has(pod.requests)", pod=pod) is True
    assert ev("pod.labels", pod=pod) == {}
    with pytest.raises(CelEvalError):
        ev("pod.requests.memory", pod=pod)


def test_scheduler_expression_uses_fast_path() -> None:
    c = compile_expression("node.free.cpu >= pod.requests.cpu", ENV)
    assert c.params == ("node", "pod")
    assert "rt_" not in c.python_source
    assert c.fn({"free": {"cpu": 500}}, {"requests": {"cpu": 400}}) is True
    assert c.reads >= {"node.free", "pod.requests"}


def test_check_errors_carry_position() -> None:
    with pytest.raises(CelError) as info:
        compile_expression("pod.nosuchfield == 1", ENV)
    assert info.value.offset > 0
    with pytest.raises(CelError):
        compile_expression("1 + 'a'", ENV)


def test_timestamp_range() -> None:
    with pytest.raises(CelEvalError):
        ev("timestamp('9999-12-31T23:59:59Z') + duration('1s')")
    assert ev("timestamp('0001-01-01T00:00:00Z')") == Timestamp(-62135596800 * 10**9)
    assert ev("type(duration('1s'))") == TypeValue("google.protobuf.Duration")


@given(st.integers(min_value=-(2**40), max_value=2**40), st.integers(min_value=-(2**40), max_value=2**40))
def test_int_arithmetic_matches_python(a: int, b: int) -> None:
    c = compile_expression("x * 3 - x / 7 + x % 5", ENV)
    q = int(a / 7) if abs(a) < 2**52 else (abs(a) // 7) * (1 if a >= 0 else -1)
    r = abs(a) % 5 * (1 if a >= 0 else -1)
    assert c.evaluate({"x": a}) == a * 3 - q + r
    assert ev("x < 0 ? -x : x", x=b) == abs(b)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_string_double_roundtrip(f: float) -> None:
    c = compile_expression(
        "double(string(v))", standard_env({"v": standard_env().variables.get("v", INT)}), check=False
    )
    assert c.evaluate({"v": f}) == f or (math.isnan(f))


# -- safety --------------------------------------------------------------------------------------

HOSTILE = [
    '__import__("os").system("touch /tmp/policyd_pwned")',
    "x.__class__",
    '"".__class__.__mro__',
    "exec",
    "eval('1')",
    "open('/etc/passwd')",
    "__builtins__",
    "globals()",
    "pod.__dict__",
    "'\"\\'; import os; os.system(\"touch /tmp/policyd_pwned\") #'",
    "'''\n\"\"\"\\\\\n'''",
    "{'__class__': 1}.__class__",
    "[1].map(__import__, __import__)",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_no_python_escape(text: str, tmp_path: Any) -> None:
    marker = "/tmp/policyd_pwned"
    try:
        c = compile_expression(text, ENV)
    except CelError:
        pass
    else:
        try:
            value = c.evaluate({"x": 1, "s": "", "pod": {}, "node": {}})
        except CelEvalError:
            pass
        else:
            assert isinstance(value, str | int | bool | float | bytes | list | dict | TypeValue)
    assert not os.path.exists(marker)


def test_hostile_strings_are_plain_data() -> None:
    text = "'\"\\'; import os\\n#' + \"\\\\\" + '''x\"\"\"y'''"
    assert ev(text) == '"\'; import os\n#\\x"""y'


def test_identifiers_are_mangled() -> None:
    env = standard_env({"exec": INT, "open": INT, "__builtins__": INT})
    c = compile_expression("exec + open + __builtins__", env)
    assert c.evaluate({"exec": 1, "open": 2, "__builtins__": 3}) == 6
    assert "def _cel(v_exec, v_open, v___builtins__)" in c.python_source


def test_null_value_enum_constant_is_an_int_resolved_through_the_container() -> None:
    assert ev("google.protobuf.NullValue.NULL_VALUE") == 0
    env = standard_env(container="google.protobuf")
    assert compile_expression("Value{null_value: NullValue.NULL_VALUE} == null", env).evaluate({}) is True
    with pytest.raises(CelError, match="undeclared reference"):
        compile_expression("NullValue.NULL_VALUE", standard_env())


@pytest.mark.parametrize(
    "text",
    [
        "size({1: 'a', true: 'b'}) == 2",
        "size({0: 'a', false: 'b', 1: 'c', true: 'd'}) == 4",
        "{1: 'a', true: 'b'}[1] == 'a' && {1: 'a', true: 'b'}[true] == 'b'",
        "{0: 'a', false: 'b'}[false] == 'b' && {0: 'a', false: 'b'}[0.0] == 'a'",
        "!(true in {1: 'a'}.map(k, dyn(k))) && !(dyn(1) in {true: 'a'})",
        "{true: 1, 1: 2} == {1: 2, true: 1}",
        "dyn({true: 1}) != dyn({1: 1})",
        "{1: 'a', true: 'b'}.map(k, k) == [1, true]",
        "[1, 2].transformMap(i, v, v) == {0: 1, 1: 2} && {1: 'a', true: 'b'}.transformMap(k, v, v + '!')[true] == 'b!'",
        "{1: 'a', true: 'b'}[?true] == optional.of('b')",
        "'%s'.format([{1: 'value1', uint(2): 'value2', true: double('NaN')}]) == '{1: value1, 2: value2, true: NaN}'",
    ],
)
def test_bool_and_int_map_keys_never_collide(text: str) -> None:
    """Python's dict conflated `true` with `1`: `{1: 'a', true: 'b'}` had one entry."""
    assert ev(text) is True


def test_repeated_bool_key_is_an_error() -> None:
    with pytest.raises(CelEvalError, match="repeated key: true"):
        ev("{true: 1, true: 2}")
    with pytest.raises(CelEvalError, match="already exists"):
        ev("[true, true].transformMapEntry(i, v, {v: i})")
