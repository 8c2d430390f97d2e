"""The CEL cost estimator: per-node costs, size hints, string traversal, comprehensions, the report."""

from __future__ import annotations

import math

import pytest

from policyd.cel import syntax as ast
from policyd.cel.checker import check
from policyd.cel.cost import (
    DEFAULT_LIST_SIZE,
    DEFAULT_STRING_SIZE,
    LIST_CREATE_COST,
    MAP_CREATE_COST,
    CostReport,
    cost_report,
    estimate,
)
from policyd.cel.env import CelEnv, FunctionDecl, Overload
from policyd.cel.parser import parse_cel
from policyd.cel.stdlib import standard_functions
from policyd.cel.types import DYN, INT, STRING, ObjectType, list_of, map_of

TOLERATION = ObjectType("Toleration", {"key": STRING})
POD = ObjectType(
    "Pod",
    {"name": STRING, "priority": INT, "tolerations": list_of(TOLERATION), "labels": map_of(STRING, STRING)},
)
NODE = ObjectType("Node", {"name": STRING, "pods": list_of(POD), "labels": map_of(STRING, STRING)})


def env(**changes: object) -> CelEnv:
    functions = dict(standard_functions())
    functions["pods"] = FunctionDecl("pods", (Overload("cluster_pods", (DYN,), list_of(POD), member=True),))
    functions["quota"] = FunctionDecl(
        "quota", (Overload("quota_list", (list_of(STRING),), INT, cost=lambda n: 7 * n),)
    )
    base = CelEnv(variables={"pod": POD, "node": NODE, "cluster": DYN, "x": INT}, functions=functions)
    return base.extend(**changes)


def cost(text: str, e: CelEnv | None = None) -> int:
    e = e or env()
    expr = parse_cel(text)
    result = check(expr, e)
    assert result.issues == ()
    return estimate(expr, result, e)


def test_leaf_costs() -> None:
    assert cost("1") == 0
    assert cost("x") == 1
    assert cost("pod.priority") == 2  # identifier + field
    assert cost("x + 1") == 2  # identifier + one operation


def test_literal_creation_costs() -> None:
    assert cost("[]") == LIST_CREATE_COST
    assert cost("[x, x]") == LIST_CREATE_COST + 2
    assert cost("{'a': x}") == MAP_CREATE_COST + 1


def test_estimate_without_check_result_matches() -> None:
    e = env()
    expr = parse_cel("node.pods.all(p, p.priority > x)")
    assert estimate(expr, None, e) == estimate(expr, check(expr, e), e)


def test_comprehension_scales_with_size_hint() -> None:
    text = "node.pods.all(p, p.priority > 0)"
    small = cost(text, env(size_hints={"node.pods": 10}))
    large = cost(text, env(size_hints={"node.pods": 110}))
    default = cost(text)
    per_item = (large - small) // 100
    assert per_item > 0
    assert large - small == 100 * per_item
    assert default - small == (DEFAULT_LIST_SIZE - 10) * per_item


def test_list_literal_range_is_exact() -> None:
    one = cost("[1].exists(e, e > x)")
    three = cost("[1, 2, 3].exists(e, e > x)")
    assert three > one
    assert cost("[].exists(e, e > x)") < one


def test_nested_comprehensions_multiply() -> None:
    hints = {"node.pods": 110, "pod.tolerations": 20, "node.pods.@items.tolerations": 20}
    e = env(size_hints=hints)
    inner = cost("pod.tolerations.exists(t, t.key == 'a')", e)
    nested = cost("node.pods.all(p, p.tolerations.exists(t, t.key == 'a'))", e)
    assert nested > 110 * inner
    hints_small = dict(hints, **{"node.pods.@items.tolerations": 2})
    assert (
        cost("node.pods.all(p, p.tolerations.exists(t, t.key == 'a'))", env(size_hints=hints_small)) < nested
    )


def test_string_operations_are_proportional_to_size() -> None:
    short = env(size_hints={"pod.name": 10})
    long = env(size_hints={"pod.name": 1000})
    for text in ("pod.name.contains('abc')", "pod.name.matches('a+b')", "pod.name + pod.name == 'x'"):
        assert cost(text, long) > cost(text, short)
    # startsWith traverses the argument, not the receiver
    assert cost("pod.name.startsWith('a')", long) == cost("pod.name.startsWith('a')", short)
    assert cost("'a'.startsWith(pod.name)", long) > cost("'a'.startsWith(pod.name)", short)
    # contains on a default-sized string: the product of both traversals
    contains = cost("pod.name.contains('abcdefghijklmnopqrst')")
    assert contains == 2 + math.ceil(DEFAULT_STRING_SIZE * 0.1) * math.ceil(20 * 0.1)


def test_in_list_costs_list_size() -> None:
    assert cost("x in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]") > cost("x in [1]")


def test_declared_overload_cost_receives_sizes() -> None:
    small = cost("quota(['a'])")
    big = cost("quota(['a', 'b', 'c'])")
    assert big - small == 7 * (3 - 1)  # the declared cost: 7 per element (constants cost 0)


def test_logical_operators_and_conditional() -> None:
    heavy = "node.pods.exists(p, p.priority > 0)"
    assert cost(f"x > 0 && {heavy}") == cost("x > 0") + cost(heavy)
    assert cost(f"x > 0 ? {heavy} : false") == cost("x > 0") + cost(heavy)


def test_call_result_size_from_hint_of_receiver_path() -> None:
    text = "cluster.pods().exists(q, q.priority > 0)"
    assert cost(text, env(size_hints={"cluster.pods": 5000})) > 10 * cost(
        text, env(size_hints={"cluster.pods": 100})
    )


# -- the report ---------------------------------------------------------------------------------------------


def test_report_names_nested_comprehensions_and_points_at_the_inner_one() -> None:
    text = "cluster.pods().all(q, node.pods.exists(p, p.name == q.name))"
    e = env(size_hints={"node.pods": 110, "cluster.pods": 5000})
    expr = parse_cel(text)
    report = cost_report(expr, check(expr, e), e)
    assert report.total == estimate(expr, None, e)
    assert report.detail == "comprehension over node.pods nested in a comprehension over cluster.pods()"
    inner = text.index("node.pods.exists(") + len("node.pods.exists")
    assert report.hotspot_offset == inner
    assert report.message(1_000_000).startswith(
        f"estimated cost {report.total:,} exceeds the limit 1,000,000: "
    )


def test_report_points_at_expensive_call_without_comprehension() -> None:
    text = "x > 0 && pod.name.matches('a.*b.*c.*d')"
    e = env(size_hints={"pod.name": 100_000})
    report = cost_report(parse_cel(text), None, e)
    assert report.detail == "call to 'matches'"
    assert report.hotspot_offset == text.index("(")


@pytest.mark.parametrize(
    ("text", "range_desc"),
    [
        ("[1, 2, 3].all(e, e > x)", "a list literal"),
        ("node.labels.all(k, k != '')", "node.labels"),
        ("node.pods.map(p, p.name).all(n, n.matches('a.*b.*c'))", "the result of map()"),
        ("node.pods.map(p, p.name.matches('a.*b.*c')).all(n, n)", "node.pods"),
    ],
)
def test_report_describes_ranges(text: str, range_desc: str) -> None:
    report = cost_report(parse_cel(text), None, env())
    assert report.detail == f"comprehension over {range_desc}"


def test_hand_built_tree_without_parser() -> None:
    call = ast.Call("_+_", (ast.Ident("x", id=1, offset=0), ast.Const(1, id=2, offset=4)), id=3, offset=2)
    assert estimate(call, None, env()) == 2
    assert isinstance(cost_report(call, None, env()), CostReport)
