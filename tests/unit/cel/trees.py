"""Syntax-tree builders for walker tests, and the hand-written walkers `policyd.cel.walk` replaced.

The old walkers are kept verbatim as oracles: every analysis built on the one walker must give
their results, except where an old walker was wrong on comprehension scopes (the iteration variable
is bound in the loop condition and step only, the accumulator also in the result).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from hypothesis import strategies as st

from policyd.cel import syntax as ast
from policyd.cel.codegen import container_candidates
from policyd.cel.env import CelEnv
from policyd.evaluation.interpreter import NODE_FIELDS

NAMES = ("pod", "node", "cluster", "x", "y", ast.ACCUMULATOR, "app")
FIELDS = ("labels", "name", "requests", "free", "images", "podCount", "zone")


def _leaves() -> st.SearchStrategy[ast.Expr]:
    consts = st.one_of(st.integers(-2, 2), st.sampled_from(["a", "zone"]), st.booleans())
    return st.one_of(
        st.builds(lambda v: ast.Const(v), consts),
        st.builds(lambda n: ast.Ident(n), st.sampled_from(NAMES)),
    )


def _extend(kids: st.SearchStrategy[ast.Expr]) -> st.SearchStrategy[ast.Expr]:
    names = st.sampled_from(NAMES)
    return st.one_of(
        st.builds(lambda o, f, t: ast.Select(o, f, t), kids, st.sampled_from(FIELDS), st.booleans()),
        st.builds(
            lambda f, a: ast.Call(f, tuple(a)),
            st.sampled_from(["_==_", "_&&_", "size", "_[_]", "@in"]),
            st.lists(kids, max_size=3),
        ),
        st.builds(
            lambda f, t, a: ast.Call(f, tuple(a), t),
            st.sampled_from(["nodeCount", "spread", "startsWith"]),
            st.one_of(kids, st.just(ast.Ident("cluster"))),
            st.lists(st.one_of(kids, st.sampled_from([ast.Ident("node"), ast.Ident("pod")])), max_size=2),
        ),
        st.builds(lambda xs: ast.CreateList(tuple(xs)), st.lists(kids, max_size=3)),
        st.builds(
            lambda kv: ast.CreateMap(tuple(ast.MapEntry(k, v) for k, v in kv)),
            st.lists(st.tuples(kids, kids), max_size=2),
        ),
        st.builds(
            lambda fs: ast.CreateMessage("M", tuple(ast.FieldInit(f"f{i}", v) for i, v in enumerate(fs))),
            st.lists(kids, max_size=2),
        ),
        st.builds(
            lambda iv, rng, av, init, cond, step, res: ast.Comprehension(iv, rng, av, init, cond, step, res),
            names,
            kids,
            names,
            kids,
            kids,
            kids,
            kids,
        ),
    )


TREES: st.SearchStrategy[ast.Expr] = st.recursive(_leaves(), _extend, max_leaves=20)


def trees() -> st.SearchStrategy[ast.Expr]:
    """Random CEL syntax trees over a few names (comprehensions with any parts, shadowing included)."""
    return TREES


def generic_children(e: Any) -> list[Any]:
    """Sub-expressions by the dataclass fields of a node (independent of `walk.children`)."""
    out: list[Any] = []
    fields = dict(vars(e))
    target = fields.pop("target", None)  # a call's receiver is evaluated before its arguments
    for value in (target, *fields.values()):
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, ast.MapEntry | ast.FieldInit):
                out += generic_children(v)
            elif isinstance(v, ast.Node):
                out.append(v)
    return out


def spec_scopes(
    e: ast.Expr, bound: frozenset[str] = frozenset()
) -> Iterator[tuple[ast.Expr, frozenset[str]]]:
    """Every node with its bound names by cel-spec's rule, written recursively."""
    yield e, bound
    if isinstance(e, ast.Comprehension):
        loop = bound | {e.iter_var, e.accu_var}
        yield from spec_scopes(e.iter_range, bound)
        yield from spec_scopes(e.accu_init, bound)
        yield from spec_scopes(e.loop_condition, loop)
        yield from spec_scopes(e.loop_step, loop)
        yield from spec_scopes(e.result, bound | {e.accu_var})
        return
    for child in generic_children(e):
        yield from spec_scopes(child, bound)


def binds(e: ast.Expr, names: set[str]) -> bool:
    """True when a comprehension in `e` binds one of `names`."""
    return any(
        isinstance(n, ast.Comprehension) and {n.iter_var, n.accu_var} & names for n, _ in spec_scopes(e)
    )


def iter_var_in_result(e: ast.Expr) -> bool:
    """True when some comprehension's result reads its own iteration variable (not its accumulator)."""
    for n, _ in spec_scopes(e):
        if isinstance(n, ast.Comprehension) and n.iter_var != n.accu_var:
            if any(
                isinstance(m, ast.Ident) and m.name == n.iter_var and n.iter_var not in b
                for m, b in spec_scopes(n.result)
            ):
                return True
    return False


# -- the old walkers (oracles) ------------------------------------------------------------------------


def old_loader_idents(node: ast.Expr, bound: frozenset[str] = frozenset()) -> Iterator[ast.Ident]:
    """policyd.policy.loader.idents: free identifiers (comprehension variables excluded)."""
    if isinstance(node, ast.Ident):
        if node.name not in bound:
            yield node
    elif isinstance(node, ast.Select):
        yield from old_loader_idents(node.operand, bound)
    elif isinstance(node, ast.Call):
        if node.target is not None:
            yield from old_loader_idents(node.target, bound)
        for arg in node.args:
            yield from old_loader_idents(arg, bound)
    elif isinstance(node, ast.CreateList):
        for element in node.elements:
            yield from old_loader_idents(element, bound)
    elif isinstance(node, ast.CreateMap):
        for entry in node.entries:
            yield from old_loader_idents(entry.key, bound)
            yield from old_loader_idents(entry.value, bound)
    elif isinstance(node, ast.CreateMessage):
        for init in node.fields:
            yield from old_loader_idents(init.value, bound)
    elif isinstance(node, ast.Comprehension):
        yield from old_loader_idents(node.iter_range, bound)
        yield from old_loader_idents(node.accu_init, bound)
        inner = bound | {node.iter_var, node.accu_var}
        yield from old_loader_idents(node.loop_condition, inner)
        yield from old_loader_idents(node.loop_step, inner)
        yield from old_loader_idents(node.result, bound | {node.accu_var})


# policyd.compiler.lowering's static analysis (its `_free_idents` and `_node_uses` bound the iteration
# variable in the comprehension result too: wrong)


def old_free_idents(e: ast.Expr, bound: frozenset[str] = frozenset()) -> set[str]:
    """Names referenced by `e` that are not comprehension variables bound inside it."""
    out: set[str] = set()
    if isinstance(e, ast.Ident):
        if e.name not in bound:
            out.add(e.name)
    elif isinstance(e, ast.Select):
        out |= old_free_idents(e.operand, bound)
    elif isinstance(e, ast.Call):
        if e.target is not None:
            out |= old_free_idents(e.target, bound)
        for a in e.args:
            out |= old_free_idents(a, bound)
    elif isinstance(e, ast.CreateList):
        for x in e.elements:
            out |= old_free_idents(x, bound)
    elif isinstance(e, ast.CreateMap):
        for entry in e.entries:
            out |= old_free_idents(entry.key, bound) | old_free_idents(entry.value, bound)
    elif isinstance(e, ast.CreateMessage):
        for f in e.fields:
            out |= old_free_idents(f.value, bound)
    elif isinstance(e, ast.Comprehension):
        out |= old_free_idents(e.iter_range, bound) | old_free_idents(e.accu_init, bound)
        inner = bound | {e.iter_var, e.accu_var}
        for part in (e.loop_condition, e.loop_step, e.result):
            out |= old_free_idents(part, inner)
    return out


def old_node_uses(e: ast.Expr, bound: frozenset[str] = frozenset()) -> list[ast.Expr]:
    """Every way `e` reads `node`: `node.<field>` selections, or the bare `node` identifier."""
    if isinstance(e, ast.Select) and isinstance(e.operand, ast.Ident) and e.operand.name == "node":
        return [] if "node" in bound else [e]
    if isinstance(e, ast.Ident):
        return [e] if e.name == "node" and "node" not in bound else []
    out: list[ast.Expr] = []
    if isinstance(e, ast.Select):
        out += old_node_uses(e.operand, bound)
    elif isinstance(e, ast.Call):
        for a in (e.target, *e.args) if e.target is not None else e.args:
            out += old_node_uses(a, bound)
    elif isinstance(e, ast.CreateList):
        for x in e.elements:
            out += old_node_uses(x, bound)
    elif isinstance(e, ast.CreateMap):
        for entry in e.entries:
            out += old_node_uses(entry.key, bound) + old_node_uses(entry.value, bound)
    elif isinstance(e, ast.CreateMessage):
        for f in e.fields:
            out += old_node_uses(f.value, bound)
    elif isinstance(e, ast.Comprehension):
        out += old_node_uses(e.iter_range, bound) + old_node_uses(e.accu_init, bound)
        inner = bound | {e.iter_var, e.accu_var}
        for part in (e.loop_condition, e.loop_step, e.result):
            out += old_node_uses(part, inner)
    return out


def old_let_closure(expr: ast.Expr, lets: Mapping[str, ast.Expr]) -> list[str]:
    """Lets `expr` uses, transitively, dependencies first."""
    out: list[str] = []

    def visit(name: str, seen: frozenset[str]) -> None:
        if name in out or name in seen:
            return
        for dep in sorted(old_free_idents(lets[name]) & lets.keys()):
            visit(dep, seen | {name})
        out.append(name)

    for name in sorted(old_free_idents(expr) & lets.keys()):
        visit(name, frozenset())
    return out


def old_unguarded(e: ast.Expr) -> list[ast.Expr]:
    """The parts of `e` evaluated whatever the pod: all but bodies of comprehensions over pod values.

    A body over a pod-only range (`pod.hostPorts.all(w, ... node.usedPorts ...)`) runs only for pods
    where the range is non-empty; a non-column read there raises `Unsupported` at evaluation instead.
    """
    if isinstance(e, ast.Comprehension):
        parts = [e.iter_range, e.accu_init, e.result]
        if old_node_uses(e.iter_range):
            parts += [e.loop_condition, e.loop_step]
        return [p for part in parts for p in old_unguarded(part)]
    children: list[ast.Expr] = []
    if isinstance(e, ast.Select):
        children = [e.operand]
    elif isinstance(e, ast.Call):
        children = [*((e.target,) if e.target is not None else ()), *e.args]
    elif isinstance(e, ast.CreateList):
        children = list(e.elements)
    elif isinstance(e, ast.CreateMap):
        children = [x for entry in e.entries for x in (entry.key, entry.value)]
    elif isinstance(e, ast.CreateMessage):
        children = [f.value for f in e.fields]
    if isinstance(e, ast.Select) and isinstance(e.operand, ast.Ident):
        return [e]
    if isinstance(e, ast.Ident):
        return [e]
    return [p for child in children for p in old_unguarded(child)]


def old_cluster_node_args(e: ast.Expr) -> set[int]:
    """Identities of bare `node` arguments of `cluster.<function>(...)` calls in `e`."""
    out: set[int] = set()
    for node in old_walk(e):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.target, ast.Ident)
            and node.target.name == "cluster"
        ):
            out |= {id(a) for a in node.args if isinstance(a, ast.Ident) and a.name == "node"}
    return out


def old_supported_statically(expr: ast.Expr, lets: Mapping[str, ast.Expr], per_row: bool = False) -> bool:
    """True when every node read outside pod-guarded comprehension bodies is a column.

    With `per_row`, the node may also be passed whole to the cluster view (evaluated once per row:
    worth it for scores over the feasible rows only).
    """
    for e in [expr, *(lets[n] for n in old_let_closure(expr, lets))]:
        allowed = old_cluster_node_args(e) if per_row else set()
        for part in old_unguarded(e):
            for use in old_node_uses(part):
                if id(use) in allowed:
                    continue
                if not isinstance(use, ast.Select) or use.field not in NODE_FIELDS:
                    return False
    return True


def old_walk(e: ast.Expr) -> list[ast.Expr]:
    """Every syntax node of `e`."""
    out: list[ast.Expr] = [e]
    if isinstance(e, ast.Select):
        out += old_walk(e.operand)
    elif isinstance(e, ast.Call):
        for a in (e.target, *e.args) if e.target is not None else e.args:
            out += old_walk(a)
    elif isinstance(e, ast.CreateList):
        for x in e.elements:
            out += old_walk(x)
    elif isinstance(e, ast.CreateMap):
        for entry in e.entries:
            out += old_walk(entry.key) + old_walk(entry.value)
    elif isinstance(e, ast.CreateMessage):
        for f in e.fields:
            out += old_walk(f.value)
    elif isinstance(e, ast.Comprehension):
        for part in (e.iter_range, e.accu_init, e.loop_condition, e.loop_step, e.result):
            out += old_walk(part)
    return out


def old_pod_fields(e: Any, out: set[str]) -> bool:
    """Add the top-level `pod.<field>` names `e` reads to `out`; False when `pod` is used whole.

    `pod` as an argument of a `cluster.<function>(...)` call is not a whole use: the runtime notices
    calls into the cluster view while it evaluates a node and does not reuse such results.
    """
    if isinstance(e, ast.Select) and isinstance(e.operand, ast.Ident) and e.operand.name == "pod":
        out.add(e.field)
        return True
    if isinstance(e, ast.Ident):
        return e.name != "pod"
    if isinstance(e, ast.Call):
        cluster_call = isinstance(e.target, ast.Ident) and e.target.name == "cluster"
        parts = list(e.args) + ([e.target] if e.target is not None else [])
        for a in parts:
            if cluster_call and isinstance(a, ast.Ident) and a.name == "pod":
                continue
            if not old_pod_fields(a, out):
                return False
        return True
    if isinstance(e, ast.Select):
        return old_pod_fields(e.operand, out)
    if isinstance(e, ast.CreateList):
        return all(old_pod_fields(x, out) for x in e.elements)
    if isinstance(e, ast.CreateMap):
        return all(old_pod_fields(x.key, out) and old_pod_fields(x.value, out) for x in e.entries)
    if isinstance(e, ast.CreateMessage):
        return all(old_pod_fields(f.value, out) for f in e.fields)
    if isinstance(e, ast.Comprehension):
        loop = (e.iter_range, e.accu_init, e.loop_condition, e.loop_step, e.result)
        return all(old_pod_fields(x, out) for x in loop)
    return True


def old_reads_of(expr: ast.Expr, env: CelEnv) -> frozenset[str]:
    """Field paths read (`var` or `var.field`) by a simple AST walk (fallback without the checker)."""
    out: set[str] = set()

    def declared(name: str) -> str | None:
        for cand in container_candidates(name, env.container):
            if cand in env.variables:
                return cand
        return None

    def walk(e: Any, locals_: frozenset[str]) -> None:
        if isinstance(e, ast.Select) and isinstance(e.operand, ast.Ident) and e.operand.name not in locals_:
            var = declared(e.operand.name)
            if var is not None:
                out.add(var if var == "cluster" else f"{var}.{e.field}")
                return
        if isinstance(e, ast.Ident):
            if e.name not in locals_:
                var = declared(e.name)
                if var is not None:
                    out.add(var)
            return
        if isinstance(e, ast.Comprehension):
            walk(e.iter_range, locals_)
            walk(e.accu_init, locals_)
            inner = locals_ | {e.iter_var, e.accu_var}
            for sub in (e.loop_condition, e.loop_step):
                walk(sub, inner)
            walk(e.result, locals_ | {e.accu_var})
            return
        if isinstance(e, ast.Node):
            for value in vars(e).values():
                if isinstance(value, tuple):
                    for v in value:
                        walk(v, locals_)
                elif isinstance(value, ast.Node):
                    walk(value, locals_)

    walk(expr, frozenset())
    return frozenset(out)
