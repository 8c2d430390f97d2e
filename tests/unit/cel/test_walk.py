"""The one CEL tree walker: scopes by cel-spec, and the analyses built on it give the old walkers' results."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from policyd.cel import syntax as ast
from policyd.cel.checker import check
from policyd.cel.parser import parse_cel
from policyd.cel.program import reads_of, standard_env
from policyd.cel.types import DYN
from policyd.cel.walk import children, free_idents, free_names, nodes, walk
from tests.unit.cel.trees import (
    generic_children,
    old_free_idents,
    old_loader_idents,
    old_reads_of,
    old_walk,
    spec_scopes,
    trees,
)

ENV = standard_env({"pod": DYN, "node": DYN, "cluster": DYN, "x": DYN})


@given(trees())
def test_children_are_the_node_fields(e: ast.Expr) -> None:
    assert [id(c) for c in children(e)] == [id(c) for c in generic_children(e)]


@given(trees())
@settings(max_examples=300)
def test_walk_binds_names_as_cel_spec_says(e: ast.Expr) -> None:
    """Iteration variable: loop condition and step only; accumulator: those and the result."""
    got = [(id(n), b) for n, b in walk(e)]
    assert got == [(id(n), b) for n, b in spec_scopes(e)]


@given(trees())
def test_nodes_in_pre_order(e: ast.Expr) -> None:
    assert [id(n) for n in nodes(e)] == [id(n) for n in old_walk(e)]


@given(trees())
@settings(max_examples=300)
def test_free_idents_are_the_loaders(e: ast.Expr) -> None:
    """The loader's walker had the scopes right: same identifiers, same order."""
    assert [id(i) for i in free_idents(e)] == [id(i) for i in old_loader_idents(e)]


@given(trees())
@settings(max_examples=300)
def test_unchecked_reads_are_the_facades(e: ast.Expr) -> None:
    assert reads_of(e, ENV) == old_reads_of(e, ENV)


@given(trees())
def test_free_names_are_lowerings_except_an_iteration_variable_in_the_result(e: ast.Expr) -> None:
    """Lowering's `_free_idents` bound the iteration variable in the result too."""
    old = old_free_idents(e)
    new = free_names(e)
    assert old <= new
    extra = new - old
    for name in extra:  # only names the old walker hid as a comprehension's iteration variable
        assert any(isinstance(n, ast.Comprehension) and n.iter_var == name for n in nodes(e))


def _comprehension_reading_its_iter_var_in_result() -> ast.Comprehension:
    return ast.Comprehension(
        iter_var="node",
        iter_range=ast.CreateList(()),
        accu_var=ast.ACCUMULATOR,
        accu_init=ast.Const(True),
        loop_condition=ast.Const(True),
        loop_step=ast.Ident(ast.ACCUMULATOR),
        result=ast.Ident("node", id=7),
    )


def test_lowering_walker_was_wrong_on_the_result_scope() -> None:
    """policyd.compiler.lowering's `_free_idents` treated `node` in a result as the iteration variable.

    The checker resolves it to the declared variable (the iteration variable is not in scope in the
    result), as the loader's walker and `walk` do.
    """
    e = _comprehension_reading_its_iter_var_in_result()
    assert old_free_idents(e) == set()  # the old lowering walker: wrong
    assert free_names(e) == {"node"}
    assert [i.name for i in old_loader_idents(e)] == ["node"]
    assert check(e, ENV).references.get(7) == "node"


@pytest.mark.parametrize(
    "text",
    [
        "[1, 2].all(x, x > 0) && x == 1",
        "pod.labels.exists(pod, pod == 'a') || pod.name == 'b'",
        "[node].map(node, node.name).size() > x",
        "[1].exists(y, [2].all(x, x == y)) && x == 0",
        "{'a': 1}.exists_one(k, k == pod.name)",
        "[[1]].map(x, x.filter(x, x > 0))",
        "has(pod.spec) && node.labels.all(k, k in pod.labels)",
    ],
)
def test_free_declared_idents_are_what_the_checker_resolves(text: str) -> None:
    """An identifier `walk` finds free and declared is one the checker resolves to the variable."""
    e = parse_cel(text)
    result = check(e, ENV)
    assert not result.issues
    free = {i.id for i in free_idents(e) if i.name in ENV.variables}
    resolved = {n.id for n in nodes(e) if isinstance(n, ast.Ident) and n.id in result.references}
    assert free == resolved
