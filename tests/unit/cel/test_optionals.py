"""Optional values: syntax (`a.?b`, `a[?k]`, `[?e]`, `{?k: v}`), functions, types, errors and cost."""

from __future__ import annotations

import re
from typing import Any

import pytest

from policyd.cel import syntax as ast
from policyd.cel.checker import check, format_type
from policyd.cel.cost import estimate
from policyd.cel.optional import optional_of
from policyd.cel.parser import parse_cel
from policyd.cel.program import CelCompileError, compile_expression, standard_env
from policyd.cel.types import DYN, INT, STRING, ObjectType, list_of, map_of
from policyd.cel.values import OPTIONAL_NONE, OptionalValue
from policyd.errors import CelError, CelEvalError

POD = ObjectType("Pod", {"name": STRING, "labels": map_of(STRING, STRING), "ports": list_of(INT)})
ENV = standard_env({"pod": POD, "m": map_of(STRING, INT), "d": DYN, "o": optional_of(INT)})


def ev(text: str, **activation: Any) -> Any:
    return compile_expression(text, ENV).evaluate(activation)


def type_text(text: str) -> str:
    return format_type(compile_expression(text, ENV).type)


def test_optional_syntax_parses_to_internal_calls_and_flags() -> None:
    sel = parse_cel("a.?b")
    assert isinstance(sel, ast.Call) and sel.function == ast.OPT_SELECT
    assert isinstance(sel.args[1], ast.Const) and sel.args[1].value == "b"
    idx = parse_cel("a[?0]")
    assert isinstance(idx, ast.Call) and idx.function == ast.OPT_INDEX
    lst = parse_cel("[1, ?x, 3]")
    assert isinstance(lst, ast.CreateList) and lst.optional_indices == (1,)
    mp = parse_cel("{'a': 1, ?'b': x}")
    assert isinstance(mp, ast.CreateMap) and [e.optional for e in mp.entries] == [False, True]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("optional.of(1).value()", 1),
        ("optional.of(1).hasValue()", True),
        ("optional.none().hasValue()", False),
        ("optional.none().orValue(7)", 7),
        ("optional.ofNonZeroValue(0).hasValue()", False),
        ("optional.ofNonZeroValue('').hasValue()", False),
        ("optional.ofNonZeroValue([]).hasValue()", False),
        ("optional.ofNonZeroValue([0]).hasValue()", True),
        # the zero timestamp is Go's zero time (Kubernetes' validation_test.go), the epoch is not zero
        ("optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00.000+00:00')) == optional.none()", True),
        ("optional.ofNonZeroValue(timestamp(0)).hasValue()", True),
        ("optional.ofNonZeroValue(duration('0s')).hasValue()", False),
        ("optional.none().or(optional.of(2)).value()", 2),
        ("optional.of(1).or(optional.of(2)).value()", 1),
        ("{'a': 1}.?a.value()", 1),
        ("{'a': 1}.?b.hasValue()", False),
        ("{'a': {'b': 2}}.?a.?b.orValue(0)", 2),
        ("{'a': {}}.?a.?b.?c.orValue(0)", 0),
        ("{'a': {'b': 2}}.?a.b.value()", 2),
        ("[1, 2][?1].value()", 2),
        ("[1, 2][?5].hasValue()", False),
        ("{1: 'x'}[?1].value()", "x"),
        ("optional.of([1, 2])[1].value()", 2),
        ("optional.of({'k': 'v'})['k'].value()", "v"),
        ("[0, ?optional.none(), ?optional.of(2)]", [0, 2]),
        ("{'a': 1, ?'b': optional.none(), ?'c': optional.of(3)}", {"a": 1, "c": 3}),
        ("optional.of(dyn(1)) == optional.of(1.0)", True),
        ("optional.none() == optional.none()", True),
        ("optional.of(1) != optional.none()", True),
        ("type(optional.none()) == optional_type", True),
        ("optional.of(2).optMap(x, x * 10).value()", 20),
        ("optional.none().optMap(x, x * 10).hasValue()", False),
        ("optional.of({'k': 1}).optFlatMap(m, m.?k).value()", 1),
        ("has({'a': {'b': 1}}.?a.b)", True),
        ("has({}.?a.b)", False),
        ("pod.?labels.orValue({}).size()", 0),
    ],
)
def test_optional_semantics(text: str, expected: Any) -> None:
    assert ev(text, pod={}) == expected


def test_optional_values_are_values_of_their_own_type() -> None:
    some = ev("optional.of(1)")
    assert isinstance(some, OptionalValue) and some.present and some.value == 1
    assert ev("optional.none()") is OPTIONAL_NONE
    assert ev("o.orValue(5)", o=OptionalValue(3, True)) == 3
    assert ev("o.orValue(5)", o=OPTIONAL_NONE) == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("optional.none().value()", "optional.none() dereference"),
        ("[?dyn(1)]", "no such overload"),
        ("{?'a': dyn(1)}", "no such overload"),
        ("dyn(1).?a", "no such overload"),
        ("{}.?a.value()", "optional.none() dereference"),
    ],
)
def test_optional_runtime_errors(text: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=re.escape(message)):
        compile_expression(text, ENV).evaluate({})


@pytest.mark.parametrize("text", ["{'a': ?1}", "a.?", "a[?]", "[??1]"])
def test_optional_syntax_errors(text: str) -> None:
    with pytest.raises(CelError, match="syntax error"):
        parse_cel(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("optional.of(1)", "optional_type(int)"),
        ("optional.none()", "optional_type(dyn)"),
        ("[optional.none(), optional.of(1)]", "list(optional_type(int))"),
        ("[optional.of(1), optional.of(dyn(1))]", "list(optional_type(dyn))"),
        ("m.?k", "optional_type(int)"),
        ("m[?'k']", "optional_type(int)"),
        ("pod.?name", "optional_type(string)"),
        ("pod.?ports.orValue([])", "list(int)"),
        ("o.value()", "int"),
        ("[?o, 2]", "list(int)"),
        ("{'x': 1, ?'y': o}", "map(string, int)"),
        ("d.?x", "optional_type(dyn)"),
        ("optional.of(pod).name", "optional_type(string)"),
    ],
)
def test_optional_types(text: str, expected: str) -> None:
    assert type_text(text) == expected


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("[1, ?2]", "an optional list element (?e) must be optional, found 'int'", 6),
        ("{?'a': 1}", "the value of an optional map entry (?k: v) must be optional, found 'int'", 8),
        ("pod.?nmae", "undefined field 'nmae' on type 'Pod'", 6),
        ("[1][?'a']", "found no matching overload for '_[?_]' applied to '(list(int), string)'", 4),
        (
            "o.orValue('x')",
            "found no matching overload for 'orValue' applied to 'optional_type(int).(string)'",
            10,
        ),
        ("1.hasValue()", "found no matching overload for 'hasValue' applied to 'int.()'", 11),
    ],
)
def test_optional_type_errors_name_the_position(text: str, message: str, column: int) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_expression(text, ENV)
    assert info.value.message == message
    assert (info.value.line, info.value.column) == (1, column)


def test_optional_constructs_have_a_cost() -> None:
    plain = parse_cel("m['k']")
    optional = parse_cel("m[?'k'].orValue(0)")
    assert estimate(optional, check(optional, ENV), ENV) > estimate(plain, check(plain, ENV), ENV)


def test_optional_selection_records_the_field_read() -> None:
    assert check(parse_cel("pod.?labels.orValue({})"), ENV).reads == frozenset({"pod.labels"})
    assert check(parse_cel("pod.?labels.?team"), ENV).reads == frozenset({"pod.labels"})
    assert check(parse_cel("m[?'k']"), ENV).reads == frozenset({"m"})
