"""Lowering of filter / score expressions to vectorised plans over node columns (compile time).

`lower_policy(checked)` lowers each filter and score of a checked policy (`policyd.policy.checked`):
`lower(expr, lets, closure)` takes a checked CEL AST (and the ASTs of the lets it needs) and returns an
`ExprPlan` (`policyd.evaluation.plans`) when the expression reads nothing of the node but the columns of
`policyd.evaluation.columns.NodeColumns` (resource maps with constant keys, labels, taints, name,
podCount, unschedulable, ready) and does not pass the node to a `cluster` function; otherwise None,
and the runtime keeps the per-node generated function. The plans run in `policyd.evaluation`
(`plans`, `interpreter`); what they cannot reproduce exactly for one pod they leave to the per-node
functions at evaluation time.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from policyd.cel import syntax as ast
from policyd.cel.walk import (
    NOTHING_BOUND,
    Bound,
    Scoped,
    free_names,
    is_field_of,
    is_free,
    nodes,
    scoped_children,
    walk,
)
from policyd.evaluation.interpreter import NODE_FIELDS, FunctionTable
from policyd.evaluation.plans import ExprPlan, PolicyPlan
from policyd.policy import syntax as ir
from policyd.policy.checked import CheckedPolicy
from policyd.policy.env import Context, policy_env

# ------------------------------------------------------------------------------------------------
# static analysis


def _is_node_use(e: ast.Expr, bound: Bound) -> bool:
    """True for a read of the node: `node.<field>` or the bare `node` identifier."""
    return is_field_of(e, "node", bound) or is_free(e, "node", bound)


def _node_children(e: ast.Expr, bound: Bound) -> tuple[Scoped, ...]:
    """Children to search for node uses (a `node.<field>` use is whole)."""
    return () if is_field_of(e, "node", bound) else scoped_children(e, bound)


def _node_uses(e: ast.Expr, bound: Bound = NOTHING_BOUND) -> list[ast.Expr]:
    """Every way `e` reads `node`: `node.<field>` selections, or the bare `node` identifier."""
    return [n for n, names in walk(e, bound, _node_children) if _is_node_use(n, names)]


def _unguarded_children(e: ast.Expr, bound: Bound) -> tuple[Scoped, ...]:
    """Children evaluated whatever the pod: a comprehension's loop over a pod-only range is guarded.

    A body over a pod-only range (`pod.hostPorts.all(w, ... node.usedPorts ...)`) runs only for pods
    where the range is non-empty; a non-column read there raises `Unsupported` at evaluation instead.
    """
    kids = _node_children(e, bound)
    if isinstance(e, ast.Comprehension) and not _node_uses(e.iter_range, bound):
        rng, init, _, _, result = kids
        return (rng, init, result)
    return kids


def _cluster_node_args(e: ast.Expr) -> set[int]:
    """Identities of bare `node` arguments of `cluster.<function>(...)` calls in `e`."""
    out: set[int] = set()
    for node, bound in walk(e):
        if isinstance(node, ast.Call) and node.target is not None and is_free(node.target, "cluster", bound):
            out |= {id(a) for a in node.args if is_free(a, "node", bound)}
    return out


def _supported_statically(exprs: Sequence[ast.Expr], per_row: bool = False) -> bool:
    """True when every node read of `exprs` (a rule and its let closure) outside pod-guarded
    comprehension bodies is a column.

    With `per_row`, the node may also be passed whole to a cluster function (evaluated once per row:
    worth it for scores over the feasible rows only).
    """
    for e in exprs:
        allowed = _cluster_node_args(e) if per_row else set()
        for use, bound in walk(e, into=_unguarded_children):
            if not _is_node_use(use, bound) or id(use) in allowed:
                continue
            if not isinstance(use, ast.Select) or use.field not in NODE_FIELDS:
                return False
    return True


def _is_labels(e: ast.Expr, bound: Bound) -> bool:
    """True for `node.labels` on the free `node`."""
    return (
        is_field_of(e, "node", bound)
        and isinstance(e, ast.Select)
        and e.field == "labels"
        and not e.test_only
    )


def reads_labels_by_key(exprs: Sequence[ast.Expr]) -> bool:
    """True when `exprs` (a rule and its let closure) read the node only by looking labels up by key:
    `node.labels[k]`, `k in node.labels`, `node.labels.k`, `has(node.labels.k)`.

    Such a rule gives every node with the same values under the keys it looked up the same verdict
    (for one pod), so it can be decided once per such class of nodes
    (`policyd.evaluation.label_classes`). A whole-map use of `node.labels` (a comprehension over
    it, an equality, an argument) or any other node field makes it False.
    """
    for e in exprs:
        keyed: set[int] = set()
        for n, bound in walk(e):
            if isinstance(n, ast.Call) and n.target is None and len(n.args) == 2:
                if n.function == "_[_]" and _is_labels(n.args[0], bound):
                    keyed.add(id(n.args[0]))
                elif n.function == "@in" and _is_labels(n.args[1], bound):
                    keyed.add(id(n.args[1]))
            elif isinstance(n, ast.Select) and _is_labels(n.operand, bound):
                keyed.add(id(n.operand))
        for use, bound in walk(e, into=_node_children):
            if _is_node_use(use, bound) and id(use) not in keyed:
                return False
    return True


@functools.cache
def plan_functions() -> FunctionTable:
    """The functions plans may call: the filter context's (one table per process)."""
    return FunctionTable(policy_env(Context.FILTER).functions)


def checked_types(expr: ast.Expr, check_types: Mapping[int, Any]) -> dict[int, Any]:
    """Checked types of `expr`'s nodes keyed by node identity (ids repeat across separate parses)."""
    return {id(node): check_types[node.id] for node in nodes(expr) if node.id in check_types}


def lower(
    expr: ast.Expr,
    lets: Mapping[str, ast.Expr],
    closure: tuple[str, ...],
    kind: str = "filter",
    types: Mapping[int, Any] | None = None,
) -> ExprPlan | None:
    """A vectorised plan of a filter (`kind="filter"`) or score expression, or None when per-node only.

    `closure` names the lets (of `lets`) the expression needs, dependencies first; `types` maps
    `id(node)` to checked types (`checked_types`) for the expression and its lets: typed field
    selections on absent fields read the zero value as the generated code does.
    """
    needed = [lets[name] for name in closure]
    if not _supported_statically([expr, *needed], per_row=kind == "score"):
        return None
    if any("victim" in free_names(let) for let in needed):
        return None
    return ExprPlan(expr, lets, closure, kind, plan_functions(), dict(types or {}))


def lower_policy(checked: CheckedPolicy) -> PolicyPlan:
    """Plans for every filter and score rule of a checked policy."""
    policy = checked.policy
    lets = {name: let.checked.ast for name, let in checked.lets.items()}
    types: dict[int, Any] = {}
    for let in checked.lets.values():
        types.update(checked_types(let.checked.ast, let.checked.result.types))

    def plan(expr: ir.Expression, kind: str) -> ExprPlan | None:
        result = checked.of(expr)
        if not result.ok:
            return None
        own = checked_types(expr.ast, result.result.types)
        return lower(expr.ast, lets, result.lets, kind, {**types, **own})

    filters = tuple(plan(rule.expr, "filter") for rule in policy.filters)
    scores = tuple(plan(rule.expr, "score") for rule in policy.scores)
    for p in (*filters, *scores):
        if p is not None:
            types.update(p.types)
    return PolicyPlan(lets, filters, scores, plan_functions(), types)
