"""The one generic traversal of the CEL syntax tree, with comprehension scopes.

Every analysis of an expression (free identifiers, field reads, node and pod uses, guarded parts)
walks the tree through `walk`; the type checker, the cost estimator and the code generators are
visitors with one method per node type and keep their own dispatch.

Scopes follow cel-spec: a comprehension binds its iteration variable (both of them, for the
two-variable macros) in `loop_condition` and `loop_step` only, and its accumulator in `loop_condition`, `loop_step` and `result`; neither is
bound in `iter_range` or `accu_init`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from policyd.cel import syntax as ast

Bound = frozenset[str]
Scoped = tuple[ast.Expr, Bound]
# a node's sub-expressions to visit, each with the names bound there
Children = Callable[[ast.Expr, Bound], tuple[Scoped, ...]]

NOTHING_BOUND: Bound = frozenset()


def children(e: ast.Expr) -> tuple[ast.Expr, ...]:
    """The direct sub-expressions of `e`, in evaluation order (a call's target before its args)."""
    if isinstance(e, ast.Select):
        return (e.operand,)
    if isinstance(e, ast.Call):
        return e.args if e.target is None else (e.target, *e.args)
    if isinstance(e, ast.CreateList):
        return e.elements
    if isinstance(e, ast.CreateMap):
        return tuple(x for entry in e.entries for x in (entry.key, entry.value))
    if isinstance(e, ast.CreateMessage):
        return tuple(f.value for f in e.fields)
    if isinstance(e, ast.Comprehension):
        return (e.iter_range, e.accu_init, e.loop_condition, e.loop_step, e.result)
    return ()


def scoped_children(e: ast.Expr, bound: Bound) -> tuple[Scoped, ...]:
    """The direct sub-expressions of `e`, each with the comprehension variables bound in it."""
    if isinstance(e, ast.Comprehension):
        loop = bound | {e.iter_var, e.accu_var} | ({e.iter_var2} if e.iter_var2 else set())
        return (
            (e.iter_range, bound),
            (e.accu_init, bound),
            (e.loop_condition, loop),
            (e.loop_step, loop),
            (e.result, bound | {e.accu_var}),
        )
    return tuple((child, bound) for child in children(e))


def walk(e: ast.Expr, bound: Bound = NOTHING_BOUND, into: Children = scoped_children) -> Iterator[Scoped]:
    """Every node of `e` in pre-order with the names bound there; `into` chooses what to descend into."""
    stack: list[Scoped] = [(e, bound)]
    while stack:
        node, names = stack.pop()
        yield node, names
        stack.extend(reversed(into(node, names)))


def nodes(e: ast.Expr) -> Iterator[ast.Expr]:
    """Every node of `e` in pre-order."""
    for node, _ in walk(e):
        yield node


def free_idents(e: ast.Expr, bound: Bound = NOTHING_BOUND) -> Iterator[ast.Ident]:
    """The identifiers of `e` not bound by a comprehension around them, in pre-order."""
    for node, names in walk(e, bound):
        if isinstance(node, ast.Ident) and node.name not in names:
            yield node


def free_names(e: ast.Expr) -> set[str]:
    """The names of `e`'s free identifiers."""
    return {ident.name for ident in free_idents(e)}


def is_field_of(e: ast.Expr, variable: str, bound: Bound) -> bool:
    """True when `e` is `<variable>.<field>` on the free variable (not a comprehension variable)."""
    return (
        isinstance(e, ast.Select)
        and isinstance(e.operand, ast.Ident)
        and e.operand.name == variable
        and variable not in bound
    )


def is_free(e: ast.Expr, variable: str, bound: Bound) -> bool:
    """True when `e` is the bare free identifier `variable`."""
    return isinstance(e, ast.Ident) and e.name == variable and variable not in bound


# levels a comprehension adds below it: its generated Python function nests a loop (and a condition)
COMPREHENSION_LEVELS = 3


def too_deep(e: ast.Expr, limit: int) -> ast.Expr | None:
    """The first node (in pre-order) more than `limit` levels below `e`'s top, or None: every pass
    over a tree (checker, cost, code generators) recurses once per level, and the code generators
    nest Python blocks per comprehension (which counts `COMPREHENSION_LEVELS`)."""
    stack: list[tuple[ast.Expr, int]] = [(e, 1)]
    while stack:
        node, level = stack.pop()
        if level > limit:
            return node
        below = level + (COMPREHENSION_LEVELS if isinstance(node, ast.Comprehension) else 1)
        stack.extend((child, below) for child in reversed(children(node)))
    return None
