"""Two-variable comprehensions, `cel.bind` and `cel.block`: expansion, semantics, types, errors, cost."""

from __future__ import annotations

import re
from typing import Any

import pytest

from policyd.cel import syntax as ast
from policyd.cel.checker import check, format_type
from policyd.cel.cost import estimate
from policyd.cel.parser import parse_cel
from policyd.cel.program import compile_expression, standard_env
from policyd.cel.types import DYN, INT, STRING, list_of, map_of
from policyd.cel.walk import free_names
from policyd.errors import CelError, CelEvalError

ENV = standard_env({"xs": list_of(INT), "m": map_of(STRING, INT), "d": DYN}, size_hints={"xs": 10, "m": 10})


def ev(text: str, **activation: Any) -> Any:
    return compile_expression(text, ENV).evaluate(activation)


def type_text(text: str) -> str:
    return format_type(compile_expression(text, ENV).type)


def test_two_variable_macros_expand_to_comprehensions_with_two_variables() -> None:
    e = parse_cel("xs.all(i, v, v > i)")
    assert isinstance(e, ast.Comprehension)
    assert (e.iter_var, e.iter_var2, e.macro) == ("i", "v", "all")
    assert free_names(e) == {"xs"}
    one = parse_cel("xs.existsOne(v, v > 0)")
    assert isinstance(one, ast.Comprehension) and one.macro == "exists_one" and one.iter_var2 == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[10, 20, 30].all(i, v, v == (i + 1) * 10)", True),
        ("[10, 20, 30].exists(i, v, i == 2 && v == 30)", True),
        ("[10, 20, 30].existsOne(i, v, i == 1 && v == 20)", True),
        ("[10, 20, 30].exists_one(i, v, v > 0)", False),
        ("{'a': 1, 'b': 2}.all(k, v, k.size() == v || v == 2)", True),
        ("{'a': 1, 'b': 2}.exists(k, v, k == 'b' && v == 2)", True),
        ("[1, 2, 3].transformList(i, v, i * v)", [0, 2, 6]),
        ("[1, 2, 3].transformList(i, v, v != 2, i * v)", [0, 6]),
        ("{'a': 1, 'b': 2}.transformList(k, v, k + string(v))", ["a1", "b2"]),
        ("{'a': 1, 'b': 2}.transformMap(k, v, v * 10)", {"a": 10, "b": 20}),
        ("{'a': 1, 'b': 2}.transformMap(k, v, k != 'a', v * 10)", {"b": 20}),
        ("[5, 6].transformMap(i, v, v + i)", {0: 5, 1: 7}),
        ("{'a': 1, 'b': 2}.transformMapEntry(k, v, {string(v): k})", {"1": "a", "2": "b"}),
        ("{'a': 1}.transformMapEntry(k, v, v > 5, {k: v})", {}),
        ("[].all(i, v, false)", True),
        ("xs.transformList(i, v, v)", [4, 5]),
    ],
)
def test_two_variable_semantics(text: str, expected: Any) -> None:
    assert ev(text, xs=[4, 5]) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2].all(i, v, 1 / (i - i) == 0)", "division by zero"),
        ("{'a': 1, 'b': 1}.transformMapEntry(k, v, {'x': v})", "already exists"),
        ("dyn(1).all(i, v, true)", "cannot range over int"),
        ("[1].transformMapEntry(i, v, dyn(v))", "no such overload"),
    ],
)
def test_two_variable_errors(text: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=re.escape(message)):
        ev(text)


def test_error_absorption_in_two_variable_all_and_exists() -> None:
    # an element that decides the result absorbs another element's error, as in the one-variable macros
    assert ev("[0, 1].exists(i, v, 1 / v == 1)") is True
    assert ev("[0, 1].all(i, v, 1 / v == 2)") is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("xs.transformList(i, v, i)", "list(int)"),
        ("m.transformList(k, v, k)", "list(string)"),
        ("m.transformMap(k, v, v > 1)", "map(string, bool)"),
        ("xs.transformMap(i, v, string(v))", "map(int, string)"),
        ("m.transformMapEntry(k, v, {v: k})", "map(int, string)"),
        ("d.all(k, v, v == k)", "bool"),
        ("cel.bind(x, 'a', x + x)", "string"),
        ("cel.block([1, [cel.index(0)]], cel.index(1))", "list(int)"),
    ],
)
def test_types(text: str, expected: str) -> None:
    assert type_text(text) == expected


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("xs.all(i, v, v)", "found no matching overload for '_&&_' applied to '(bool, int)'", 7),
        (
            "xs.transformList(i, v, v + 'a')",
            "found no matching overload for '_+_' applied to '(int, string)'",
            26,
        ),
        (
            "m.transformMap(k, v, k, v)",
            "found no matching overload for '_?_:_' applied to '(string, map(string, int), map(dyn, dyn))'",
            15,
        ),
        ("xs.all(i, i, true)", "duplicate variable name 'i' in all() macro", 11),
        ("xs.all(i.j, v, true)", "argument is not an identifier in all() macro", 9),
        ("cel.bind(1, 2, 3)", "argument is not an identifier in cel.bind() macro", 10),
        ("cel.bind(x, 2)", "cel.bind() takes a variable, an initial value and an expression", 9),
        ("cel.index(0)", "undeclared reference to '@index0' (in container '')", 10),
        ("cel.block([cel.index(0)], 1)", "cel.index(0) refers to its own or a later slot", 21),
        ("cel.block([1, 2], cel.index(2))", "cel.index(2) refers to a slot the block lacks", 28),
        (
            "1.all(i, v, true)",
            "expression of type 'int' cannot be the range of a comprehension (must be list, map, or dynamic)",
            1,
        ),
    ],
)
def test_errors_name_the_position(text: str, message: str, column: int) -> None:
    with pytest.raises(CelError) as info:
        compile_expression(text, ENV)
    assert info.value.message == message
    assert (info.value.line, info.value.column) == (1, column)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cel.bind(x, 2, x * x)", 4),
        ("cel.bind(x, 2, cel.bind(y, x + 1, x * y))", 6),
        ("cel.bind(xs, [1], xs + xs)", [1, 1]),
        ("cel.bind(v, [1, 2], v.exists(e, e == 2))", True),
        ("cel.block([1, cel.index(0) + 1], cel.index(1) * 10)", 20),
        ("cel.block([[1, 2]], cel.index(0).map(cel.iterVar(0, 0), cel.iterVar(0, 0) + 1))", [2, 3]),
    ],
)
def test_bind_and_block(text: str, expected: Any) -> None:
    assert ev(text, xs=[9]) == expected


def test_bind_shadows_a_declared_variable_only_inside() -> None:
    assert ev("cel.bind(xs, [1], size(xs)) + size(xs)", xs=[7, 8]) == 3


def test_two_variable_comprehension_cost_multiplies_by_the_range() -> None:
    small = parse_cel("xs.all(i, v, v > i)")
    nested = parse_cel("xs.all(i, v, xs.exists(j, w, w > v))")
    cheap = estimate(small, check(small, ENV), ENV)
    dear = estimate(nested, check(nested, ENV), ENV)
    assert 10 <= cheap < dear
    assert dear >= 10 * 10


def test_block_slots_are_lazy_and_evaluated_once() -> None:
    # an unused slot's error never surfaces; a used one's does, and `||` still absorbs it
    assert ev("cel.block([1 / 0, 2], cel.index(1))") == 2
    with pytest.raises(CelEvalError, match="division by zero"):
        ev("cel.block([1 / 0 == 1], cel.index(0))")
    assert ev("cel.block([1 / 0 == 1], cel.index(0) || true)") is True
    assert ev("cel.block([[1, 2].map(x, x * 2)], cel.index(0) + cel.index(0))") == [2, 4, 2, 4]
    # cel.bind evaluates its value eagerly, as cel-go does
    with pytest.raises(CelEvalError, match="division by zero"):
        ev("cel.bind(x, 1 / 0, 2)")
