"""cel-go's lists and sets extensions (cases from cel-go's lists_test.go and sets_test.go)."""

from __future__ import annotations

import pytest

from policyd.cel.ext.lists import sort_by_associated_keys
from policyd.cel.program import CelCompileError, compile_expression, library_functions
from policyd.errors import CelError, CelEvalError
from tests.unit.cel.library_cases import ENV, ev


@pytest.mark.parametrize(
    "text",
    [
        "lists.range(4) == [0, 1, 2, 3]",
        "lists.range(0) == []",
        "[5, 1, 2, 3].reverse() == [3, 2, 1, 5]",
        "[].reverse() == []",
        "['are', 'you', 'as', 'bored'].reverse() == ['bored', 'as', 'you', 'are']",
        "[false, true, true].reverse().reverse() == [false, true, true]",
        "[1, 2, 3, 4].slice(0, 4) == [1, 2, 3, 4]",
        "[1, 2, 3, 4].slice(0, 0) == []",
        "[1, 2, 3, 4].slice(4, 4) == []",
        "[1, 2, 3, 4].slice(1, 3) == [2, 3]",
        "dyn([]).flatten() == []",
        "dyn([1, 2, 3, 4]).flatten() == [1, 2, 3, 4]",
        "[1, [2, [3, 4]]].flatten() == [1, 2, [3, 4]]",
        "[1, 2, [], [], [3, 4]].flatten() == [1, 2, 3, 4]",
        "[1, [2, [3, 4]]].flatten(2) == [1, 2, 3, 4]",
        "[1, [2, [3, [4]]]].flatten(0) == [1, [2, [3, [4]]]]",
        "[].sort() == []",
        "[1].sort() == [1]",
        "[4, 3, 2, 1].sort() == [1, 2, 3, 4]",
        "['d', 'a', 'b', 'c'].sort() == ['a', 'b', 'c', 'd']",
        "[duration('2s'), duration('1s')].sort() == [duration('1s'), duration('2s')]",
        "[].distinct() == []",
        "[-2, 5, -2, 1, 1, 5, -2, 1].distinct() == [-2, 5, 1]",
        "['c', 'a', 'a', 'b', 'a', 'b', 'c', 'c'].distinct() == ['c', 'a', 'b']",
        "[1, 2.0, 'c', 3, 'c', 1].distinct() == [1, 2.0, 'c', 3]",
        "[1, 1.0, 2].distinct() == [1, 2]",
        "[[1], [1], [2]].distinct() == [[1], [2]]",
        "sets.contains([], [])",
        "sets.contains([1], [])",
        "sets.contains([1], [1, 1])",
        "sets.contains([1, 2, 3, 4], [2, 3])",
        "sets.contains([1], [1.0, 1])",
        "sets.contains([1, 2.0, 3u], [1.0, 2u, 3])",
        "sets.contains([[1], [2, 3]], [[2, 3.0]])",
        "!sets.contains([1], [2])",
        "!sets.contains([1], ['1', 1])",
        "!sets.contains([1], [1.1, 1u])",
        "sets.equivalent([], [])",
        "sets.equivalent([1], [1, 1])",
        "sets.equivalent([1, 2, 3], [3u, 2.0, 1])",
        "sets.equivalent([[1.0], [2, 3]], [[1], [2, 3.0]])",
        "!sets.equivalent([2, 1], [1])",
        "!sets.equivalent([1, 2], [1u, 2, 2.3])",
        "sets.intersects([1], [1.0, 2])",
        "sets.intersects([[1], [2, 3]], [[1, 2], [2, 3.0]])",
        "!sets.intersects([], [])",
        "!sets.intersects([1], [2])",
        "sets.contains(xs, [2])",
    ],
)
def test_list_and_set_functions(text: str) -> None:
    assert ev(text, xs=[1, 2, 3]) is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2, 3, 4].slice(3, 0)", "start index must be less than or equal to end index"),
        ("[1, 2, 3, 4].slice(0, 10)", "list is length 4"),
        ("[1, 2, 3, 4].slice(-5, 10)", "negative indexes not supported"),
        ("[1, [2, [3, [4]]]].flatten(-1)", "level must be non-negative"),
        ("dyn(['d', 3, 2, 'c']).sort()", "list elements must have the same type"),
        ("dyn([[1], [2]]).sort()", "list elements must be comparable"),
    ],
)
def test_list_errors(text: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=message):
        ev(text)


def test_sort_by_associated_keys_the_function_sortby_expands_to() -> None:
    assert sort_by_associated_keys([-3, 1, -5, -2, 4], [-9, -1, -25, -4, -16]) == [-5, 4, -3, -2, 1]
    assert "@sortByAssociatedKeys" in library_functions()
    with pytest.raises(CelEvalError, match="same size as the associated keys list"):
        sort_by_associated_keys([1, 2], [1])


def test_sort_of_mixed_literal_is_rejected_by_the_checker() -> None:
    with pytest.raises(CelCompileError, match="no matching overload for 'sort'"):
        compile_expression("[{'a': 1}].sort()", ENV)


def test_lists_range_is_typed() -> None:
    assert str(compile_expression("lists.range(3)", ENV).type) == "list(int)"
    assert str(compile_expression("[1, 2].slice(0, 1)", ENV).type) == "list(int)"


def test_first_and_last_are_optional() -> None:
    assert ev("[1, 2, 3].first().value()") == 1
    assert ev("[1, 2, 3].last().value()") == 3
    assert ev("xs.first().hasValue()", xs=[]) is False
    assert ev("xs.last().orValue(7)", xs=[]) == 7
    assert str(compile_expression("[1, 2].first()", ENV).type) == "optional_type(int)"


@pytest.mark.parametrize(
    "text",
    [  # cel-go's lists_test.go
        "[].sortBy(e, e) == []",
        "['a'].sortBy(e, e) == ['a']",
        "[-3, 1, -5, -2, 4].sortBy(e, -(e * e)) == [-5, 4, -3, -2, 1]",
        "[-3, 1, -5, -2, 4].map(e, e * 2).sortBy(e, -(e * e)) == [-10, 8, -6, -4, 2]",
        "lists.range(3).sortBy(e, -e) == [2, 1, 0]",
        "['a', 'c', 'b', 'first'].sortBy(e, e == 'first' ? '' : e) == ['first', 'a', 'b', 'c']",
        "[{'name': 'foo', 'score': 0}, {'name': 'bar', 'score': -10}, {'name': 'baz', 'score': 1000}]"
        ".sortBy(e, e.score).map(e, e.name) == ['bar', 'foo', 'baz']",
        "cel.bind(l, [3, 1, 2], l.sortBy(x, x)) == [1, 2, 3]",
    ],
)
def test_sort_by_macro(text: str) -> None:
    assert ev(text) is True


def test_sort_by_evaluates_its_list_once_and_checks_its_keys() -> None:
    """`l.sortBy(v, key)` is `@sortByAssociatedKeys(l, l.map(v, key))` with `l` bound once."""
    from policyd.cel import syntax as ast
    from policyd.cel.parser import parse_cel
    from policyd.cel.walk import nodes

    tree = parse_cel("[3, 1, 2].sortBy(x, x)")
    assert isinstance(tree, ast.Comprehension) and tree.accu_var == "@__sortBy_input__"
    assert sum(isinstance(n, ast.CreateList) and len(n.elements) == 3 for n in nodes(tree)) == 1
    with pytest.raises(CelError, match="argument is not an identifier in sortBy"):
        parse_cel("[1].sortBy(1, 2)")
    with pytest.raises(CelCompileError, match="no matching overload for '@sortByAssociatedKeys'"):
        compile_expression("[1].sortBy(x, [x])", ENV)
    with pytest.raises(CelEvalError, match="must have the same type"):
        ev("[1, 2].sortBy(x, x == 1 ? dyn('a') : 2)")
