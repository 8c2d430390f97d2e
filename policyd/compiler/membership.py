"""Filter rules that see some of their pod-only maps only through node-label membership (compile time).

The anti-affinity filters read per-domain pod counts as `node.labels[t.topologyKey] in t.counts`,
and a bind changes those maps by one key: the node's hostname. For such a rule, two pods' pod-only
values that differ only in the keys of maps read this way give the same verdict (and reason) on
every node none of whose label values is one of those keys, so only those nodes are judged again
(`policyd.evaluation.map_keys` finds the keys at run time).

A map whose values are scalars (`map(string, int)`) is a *leaf map*. `key_delta_safe` accepts a rule
when every value that may hold a leaf map and comes from a pod-only let (a *carrying* value) is
used only to reach into it or to test a label against it:

- `x.f` and `has(x.f)` on an object or a map that is not a leaf map;
- `x[i]` on a list, or on a map that is not a leaf map;
- a comprehension over a list, or over a map that is not a leaf map (its keys);
- `node.labels[k] in m` (or `node.labels.k in m`) with `m` a leaf map, and `v in m` with `m` a map
  that is not a leaf map.

Anything else (`size(m)`, `m[k]` reading a leaf map's value, `k in m` with a pod-only `k`, equality,
a function argument, a list or map built from it, a carrying value stored in the accumulator of a
comprehension), a reference to `cluster`, or a type not known exactly (`dyn`) rejects the rule. Values
that cannot hold a leaf map are compared whole at run time and may be used in any way; the node may be
read in any way (an unchanged row reads the same node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policyd.cel import syntax as ast
from policyd.cel.types import INT, CelType, ListType, MapType, ObjectType
from policyd.evaluation.map_keys import is_leaf_map, may_carry

__all__ = ["is_leaf_map", "key_delta_safe", "may_carry"]


class _Rejected(Exception):
    """A carrying value is used in a way the analysis does not follow."""


def _reachable(t: CelType | None) -> bool:
    """A container whose parts may be reached without observing its keys beyond those named: an
    object, a list, or a map that is not a leaf map."""
    return isinstance(t, ObjectType | ListType) or (isinstance(t, MapType) and not is_leaf_map(t))


def _is_label_value(e: ast.Expr, env: Mapping[str, bool]) -> bool:
    """`node.labels[k]` or `node.labels.k` on the free `node`."""
    if isinstance(e, ast.Call) and e.function == "_[_]" and e.target is None and len(e.args) == 2:
        labels = e.args[0]
    elif isinstance(e, ast.Select) and not e.test_only:
        labels = e.operand
    else:
        return False
    return (
        isinstance(labels, ast.Select)
        and labels.field == "labels"
        and not labels.test_only
        and isinstance(labels.operand, ast.Ident)
        and labels.operand.name == "node"
        and "node" not in env
    )


class _Analysis:
    def __init__(self, types: Mapping[int, CelType]) -> None:
        self.types = types

    def type_of(self, e: ast.Expr) -> CelType | None:
        return self.types.get(id(e))

    def carries(self, e: ast.Expr, env: Mapping[str, bool]) -> bool:
        """Whether `e`'s value may hold a pod-only leaf map (raises `_Rejected` on a use not followed)."""
        if isinstance(e, ast.Const):
            return False
        if isinstance(e, ast.Ident):
            if e.name == "cluster" and e.name not in env:
                raise _Rejected("cluster")
            return env.get(e.name, False)
        if isinstance(e, ast.Select):
            if not self.carries(e.operand, env):
                return False
            operand_t = self.type_of(e.operand)
            if not _reachable(operand_t) or isinstance(operand_t, ListType):
                raise _Rejected("select")
            return not e.test_only and may_carry(self.type_of(e))
        if isinstance(e, ast.Call):
            return self.call(e, env)
        if isinstance(e, ast.Comprehension):
            return self.comprehension(e, env)
        if isinstance(e, ast.CreateList):
            parts: Sequence[ast.Expr] = e.elements
        elif isinstance(e, ast.CreateMap):
            parts = [x for entry in e.entries for x in (entry.key, entry.value)]
        elif isinstance(e, ast.CreateMessage):
            parts = [f.value for f in e.fields]
        else:
            raise _Rejected(type(e).__name__)
        if any(self.carries(p, env) for p in parts):
            raise _Rejected("built")
        return False

    def call(self, e: ast.Call, env: Mapping[str, bool]) -> bool:
        operands = [*([] if e.target is None else [e.target]), *e.args]
        carried = [self.carries(x, env) for x in operands]
        if not any(carried):
            return False
        if e.target is None and len(e.args) == 2:
            container_t = self.type_of(e.args[0] if e.function == "_[_]" else e.args[1])
            if e.function == "_[_]" and carried == [True, False] and _reachable(container_t):
                return may_carry(self.type_of(e))
            if e.function == "@in" and carried == [False, True]:
                if isinstance(container_t, MapType) and not is_leaf_map(container_t):
                    return False  # the keys of such a map are compared at run time
                if is_leaf_map(container_t) and _is_label_value(e.args[0], env):
                    return False
        raise _Rejected(e.function)

    def comprehension(self, e: ast.Comprehension, env: Mapping[str, bool]) -> bool:
        over = self.carries(e.iter_range, env)
        range_t = self.type_of(e.iter_range)
        if over and not (isinstance(range_t, ListType | MapType) and not is_leaf_map(range_t)):
            raise _Rejected("range")
        if self.carries(e.accu_init, env):
            raise _Rejected("accumulator")
        inner = dict(env)
        first: CelType | None
        second: CelType | None
        if isinstance(range_t, ListType):
            first, second = (INT, range_t.elem) if e.iter_var2 else (range_t.elem, None)
        elif isinstance(range_t, MapType):
            first, second = range_t.key, range_t.value
        else:
            first = second = None
        inner[e.iter_var] = over and may_carry(first)
        if e.iter_var2:
            inner[e.iter_var2] = over and may_carry(second)
        inner[e.accu_var] = False
        for part in (e.loop_condition, e.loop_step):
            if self.carries(part, inner):
                raise _Rejected("accumulator")
        return self.carries(e.result, inner)


def key_delta_safe(
    exprs: Sequence[ast.Expr],
    node_lets: Sequence[ast.Expr],
    pod_let_types: Mapping[str, CelType | None],
    node_let_names: Sequence[str],
    types: Mapping[int, CelType],
) -> bool:
    """True when `exprs` (a filter rule's verdict, reason and unresolvable) and the node-dependent
    lets they need (`node_lets`, named `node_let_names`, dependencies first) use every pod-only value
    that may hold a leaf map only as the module describes. `pod_let_types` are the types of the
    pod-only lets they read, `types` the checked types by `id(node)`."""
    analysis = _Analysis(types)
    env = {name: may_carry(t) for name, t in pod_let_types.items()}
    try:
        for name, let in zip(node_let_names, node_lets, strict=True):
            if analysis.carries(let, env):
                return False  # a node-dependent let holding such a value: not followed
            env[name] = False
        for e in exprs:
            analysis.carries(e, env)
    except _Rejected:
        return False
    return True
