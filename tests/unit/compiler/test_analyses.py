"""The compiler's analyses on the one CEL walker give the old hand-written walkers' results.

Except where an old walker was wrong on comprehension scopes: codegen's `_pod_fields` ignored them
(a comprehension variable named `pod` counted as the pod) and lowering's `_node_uses` /
`_supported_statically` took a comprehension variable named `node` for the node.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyd.cel import syntax as ast
from policyd.cel.parser import parse_cel
from policyd.cel.walk import free_names
from policyd.compiler import lowering as vz
from policyd.compiler.codegen import pod_fields
from policyd.policy.checked import let_closure
from policyd.policy.loader import load_texts
from tests.unit.cel.trees import (
    binds,
    iter_var_in_result,
    old_let_closure,
    old_node_uses,
    old_pod_fields,
    old_supported_statically,
    trees,
)
from tests.unit.evaluation.test_plans import build_cluster, check_agreement, make_pod, nodes


def _old_pod_fields(e: ast.Expr) -> frozenset[str] | None:
    out: set[str] = set()
    return frozenset(out) if old_pod_fields(e, out) else None


@given(trees())
@settings(max_examples=300)
def test_pod_fields_are_codegens_without_a_variable_named_pod(e: ast.Expr) -> None:
    if not binds(e, {"pod", "cluster"}):
        assert pod_fields(e) == _old_pod_fields(e)


def test_codegen_pod_fields_ignored_comprehension_scopes() -> None:
    """codegen's `_pod_fields` took the iteration variable `pod` for the pod (wrong)."""
    e = parse_cel('pod.labels.all(pod, pod != "a")')
    assert _old_pod_fields(e) is None
    assert pod_fields(e) == frozenset({"labels"})


@given(trees())
@settings(max_examples=300)
def test_node_uses_are_lowerings_unless_a_result_reads_its_iteration_variable(e: ast.Expr) -> None:
    if not iter_var_in_result(e):
        assert [id(n) for n in vz._node_uses(e)] == [id(n) for n in old_node_uses(e)]


@given(trees(), trees(), st.booleans())
@settings(max_examples=300)
def test_supported_statically_is_lowerings_without_a_variable_named_node(
    expr: ast.Expr, let: ast.Expr, per_row: bool
) -> None:
    lets = {"app": let}
    if any(binds(e, {"node", "cluster"}) or iter_var_in_result(e) for e in (expr, let)):
        return
    closure = [lets[n] for n in let_closure(expr, {"app": []})]
    assert vz._supported_statically([expr, *closure], per_row) == old_supported_statically(
        expr, lets, per_row
    )


@given(trees(), trees(), trees())
def test_let_closure_is_lowerings_with_dependencies_first(expr: ast.Expr, a: ast.Expr, b: ast.Expr) -> None:
    lets = {"app": a, "y": b}
    deps = {name: [d for d in lets if d != name and d in free_names(e)] for name, e in lets.items()}
    got = let_closure(expr, deps)
    if not any(iter_var_in_result(e) for e in (expr, a, b)):
        assert set(got) == set(old_let_closure(expr, lets))
    if not ("y" in deps["app"] and "app" in deps["y"]):  # no cycle: every let after what it uses
        for i, name in enumerate(got):
            assert set(deps[name]) <= set(got[:i])


def test_lowering_took_an_iteration_variable_named_node_for_the_node() -> None:
    """Old `_supported_statically` kept this per node: `node` in the loop body is a label key."""
    e = parse_cel('node.labels.all(node, node != "gpu") && node.name != "n1"')
    assert not old_supported_statically(e, {})
    assert vz._supported_statically([e])


SHADOWING = """
policy p {
  filter F {
    expr = node.labels.all(node, node != "gpu" || size(node) > 5) && node.name != "n1"
  }
  score S {
    expr = node.labels.exists(node, node == "zone") ? 2 : 1
    weight = 1
  }
}
"""


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=nodes)
def test_plans_with_a_variable_named_node_match_the_per_node_functions(spec: list[object]) -> None:
    """The expressions the scopes fix newly lowers give the per-node verdicts and scores."""
    [checked] = load_texts({"p.policy": SHADOWING}).checked
    plan = vz.lower_policy(checked)
    assert None not in (*plan.filters, *plan.scores)
    check_agreement(SHADOWING, build_cluster(spec), make_pod("new", 100, 100))
