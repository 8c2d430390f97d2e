"""Static cost estimate of a CEL expression, in the spirit of Kubernetes' CEL cost budget.

The unit is cel-go's: roughly one cheap operation (an identifier or field lookup, an integer add, a
comparison). The estimate is a worst case over the size estimates below; it bounds run time so lint
can reject an expression that would be slow on a large cluster.

Costs (cel-go's checker/cost.go constants):
- constant 0; identifier 1; field selection 1 (+ operand); `has()` 1 (+ operand);
- list literal 10, map literal 30, message literal 40 (+ elements);
- a call: the largest `Overload.cost(*sizes)` of its candidate overloads when declared (sizes are the
  size estimates of receiver and arguments, 1 for scalars), else the built-in rules below, else 1;
  plus the cost of its target and arguments;
- string traversals cost `ceil(size * 0.1)`: `startsWith`, `endsWith` (the argument), string/bytes `+`
  (both operands), equality/ordering of strings, bytes, lists and maps (the smaller operand);
  `contains` is the product of both traversals; `matches` is `regex_cost(size, pattern)`,
  `ceil((size + 1) * 0.1) * ceil(pattern * 0.25)`; `x in list` costs the list size; the library
  functions (cel-go extensions, Kubernetes' libraries) declare theirs (`policyd.cel.library_costs`);
- `&&`, `||`: the sum of both operands; `c ? a : b`: `c` plus the dearer branch; `dyn(x)`: 1 + `x`;
- a comprehension: range + init + result + size(range) x (condition + step); nested comprehensions
  therefore multiply.

Size estimates (elements of a list/map, characters of a string): exact for literals, summed for `+`,
the range size for `map`/`filter` results, else `env.size_hints[path]` where `path` is the field path
from a declared variable (`node.pods`, `pod.tolerations`, `node.labels`; elements add `@items` for
lists, `@keys`/`@values` for maps: `pod.tolerations.@items.key`; a receiver-style call on a variable
adds the function name: `cluster.pods`), else the defaults `DEFAULT_LIST_SIZE` (lists and maps) and
`DEFAULT_STRING_SIZE` (strings and bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from policyd.cel import syntax as ast
from policyd.cel.checker import check
from policyd.cel.env import CelEnv, CheckResult, Overload
from policyd.cel.types import BYTES, STRING, CelType, DynType, ListType, MapType

DEFAULT_LIST_SIZE = 100
"""Elements assumed in a list or map with no size hint."""
DEFAULT_STRING_SIZE = 256
"""Characters assumed in a string (or bytes) with no size hint (names are at most 253)."""

CONST_COST = 0
SELECT_AND_IDENT_COST = 1
LIST_CREATE_COST = 10
MAP_CREATE_COST = 30
MESSAGE_CREATE_COST = 40
STRING_TRAVERSAL_FACTOR = 0.1
REGEX_FACTOR = 0.25

_REGEX_FUNCTIONS = frozenset({"matches"})
_ORDER_OPERATORS = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"})


@dataclass(frozen=True)
class CostReport:
    """The estimated cost of an expression and where most of it comes from."""

    total: int
    # offset of the most expensive part (the innermost comprehension on the dearest path, or the call)
    hotspot_offset: int
    # e.g. "comprehension over node.pods nested in a comprehension over cluster.pods"
    detail: str

    def message(self, limit: int) -> str:
        """The lint message for an expression over `limit`."""
        return f"estimated cost {self.total:,} exceeds the limit {limit:,}: {self.detail}"


def estimate(expr: ast.Expr, result: CheckResult | None, env: CelEnv) -> int:
    """Worst-case estimated cost of evaluating `expr` once (`result`: its check result, or None)."""
    return cost_report(expr, result, env).total


def cost_report(expr: ast.Expr, result: CheckResult | None, env: CelEnv) -> CostReport:
    """The estimated cost of `expr` with its hotspot (offset and description) for lint messages."""
    estimator = _Estimator(result if result is not None else check(expr, env), env)
    root = estimator.visit(expr)
    return _hotspot(root)


# -- estimation ----------------------------------------------------------------------------------------


@dataclass
class _Est:
    """Cost of one node (with its children), its size estimate and field path, for the report."""

    node: ast.Expr
    cost: int
    size: int | None = None
    path: str | None = None
    # (child estimate, multiplier) pairs: how the children contribute to `cost`
    children: list[tuple[_Est, int]] = field(default_factory=list)
    # description of the range, for comprehensions
    range_desc: str | None = None


@dataclass(frozen=True)
class _Local:
    path: str | None
    size: int | None


def _traverse(size: int) -> int:
    return math.ceil(size * STRING_TRAVERSAL_FACTOR)


def regex_cost(text_size: int, pattern_size: int) -> int:
    """Cost of matching a regular expression of `pattern_size` characters against `text_size` characters."""
    return max(1, _traverse(text_size + 1) * math.ceil(pattern_size * REGEX_FACTOR))


class _Estimator:
    """One walk over one expression with its checked types."""

    def __init__(self, result: CheckResult, env: CelEnv) -> None:
        self.result = result
        self.env = env
        self._scopes: list[dict[str, _Local]] = []

    # -- sizes ---------------------------------------------------------------------------------------

    def _type(self, e: ast.Expr) -> CelType | None:
        return self.result.types.get(e.id)

    def size(self, est: _Est) -> int:
        """Size estimate of a value: computed, hinted by path, or the default for its type."""
        if est.size is not None:
            return est.size
        if est.path is not None and est.path in self.env.size_hints:
            return self.env.size_hints[est.path]
        t = self._type(est.node)
        if t == STRING or t == BYTES:
            return DEFAULT_STRING_SIZE
        if isinstance(t, ListType | MapType | DynType) or t is None:
            return DEFAULT_LIST_SIZE
        return 1

    def _local(self, name: str) -> _Local | None:
        for scope in reversed(self._scopes):
            if name in scope:
                return scope[name]
        return None

    # -- dispatch -----------------------------------------------------------------------------------

    def visit(self, e: ast.Expr) -> _Est:
        """Estimate `e` and its children."""
        if isinstance(e, ast.Const):
            value = e.value
            size = len(value) if isinstance(value, str | bytes) else None
            return _Est(e, CONST_COST, size=size)
        if isinstance(e, ast.Ident):
            return self._ident(e)
        if isinstance(e, ast.Select):
            return self._select(e)
        if isinstance(e, ast.Call):
            return self._call(e)
        if isinstance(e, ast.CreateList):
            kids = [self.visit(x) for x in e.elements]
            return self._sum(e, LIST_CREATE_COST, kids, size=len(e.elements))
        if isinstance(e, ast.CreateMap):
            kids = [self.visit(x) for entry in e.entries for x in (entry.key, entry.value)]
            return self._sum(e, MAP_CREATE_COST, kids, size=len(e.entries))
        if isinstance(e, ast.CreateMessage):
            kids = [self.visit(f.value) for f in e.fields]
            return self._sum(e, MESSAGE_CREATE_COST, kids)
        if isinstance(e, ast.Comprehension):
            return self._comprehension(e)
        return _Est(e, 1)  # pragma: no cover - the Expr union is closed

    @staticmethod
    def _sum(
        e: ast.Expr, own: int, kids: list[_Est], size: int | None = None, path: str | None = None
    ) -> _Est:
        return _Est(e, own + sum(k.cost for k in kids), size=size, path=path, children=[(k, 1) for k in kids])

    def _ident(self, e: ast.Ident) -> _Est:
        local = self._local(e.name)
        if local is not None:
            return _Est(e, SELECT_AND_IDENT_COST, size=local.size, path=local.path)
        return _Est(e, SELECT_AND_IDENT_COST, path=self.result.references.get(e.id, e.name.lstrip(".")))

    def _select(self, e: ast.Select) -> _Est:
        if e.id in self.result.references and not e.test_only:
            # a dotted name that resolved to a variable or a type name: one lookup
            return _Est(e, SELECT_AND_IDENT_COST, path=self.result.references[e.id])
        operand = self.visit(e.operand)
        path = None if operand.path is None else f"{operand.path}.{e.field}"
        return self._sum(e, SELECT_AND_IDENT_COST, [operand], path=None if e.test_only else path)

    # -- calls -----------------------------------------------------------------------------------------

    def _overloads(self, e: ast.Call) -> list[Overload]:
        name = self.result.references.get(e.id, e.function)
        decl = self.env.functions.get(name)
        ids = set(self.result.overloads.get(e.id, ()))
        if decl is None or not ids:
            return []
        return [o for o in decl.overloads if o.id in ids]

    def _call(self, e: ast.Call) -> _Est:
        namespaced = e.id in self.result.references
        target = self.visit(e.target) if e.target is not None and not namespaced else None
        args = [self.visit(a) for a in e.args]
        operands = ([target] if target is not None else []) + args
        fn = e.function
        kids_cost = sum(k.cost for k in operands)
        children = [(k, 1) for k in operands]

        if fn == "_?_:_" and len(args) == 3:
            cond, a, b = args
            dear = a if a.cost >= b.cost else b
            sizes = [x.size for x in (a, b) if x.size is not None]
            return _Est(
                e,
                cond.cost + dear.cost,
                size=max(sizes) if len(sizes) == 2 else None,
                children=[(cond, 1), (dear, 1)],
            )
        if fn in ("_&&_", "_||_"):
            return _Est(e, kids_cost, children=children)
        if fn == "dyn" and len(args) == 1:
            return _Est(e, 1 + args[0].cost, size=args[0].size, path=args[0].path, children=children)

        own, size, path = self._call_cost(e, target, args)
        return _Est(e, own + kids_cost, size=size, path=path, children=children)

    def _call_cost(
        self, e: ast.Call, target: _Est | None, args: list[_Est]
    ) -> tuple[int, int | None, str | None]:
        """(own cost, result size, result path) of a call, excluding its operands."""
        operands = ([target] if target is not None else []) + args
        sizes = [self.size(o) if self._sized(o) else 1 for o in operands]
        fn = e.function
        size: int | None = None
        path: str | None = None

        if fn == "_[_]" and len(args) == 2:
            container_type = self._type(args[0].node)
            suffix = "@values" if isinstance(container_type, MapType) else "@items"
            path = None if args[0].path is None else f"{args[0].path}.{suffix}"
        elif target is not None and target.path is not None:
            path = f"{target.path}.{fn}"
        elif fn == "_+_" and len(args) == 2 and all(self._sized(a) for a in args):
            size = self.size(args[0]) + self.size(args[1])

        declared = [o.cost(*sizes) for o in self._overloads(e) if o.cost is not None]
        if declared:
            return max(declared), size, path
        return self._builtin_cost(e, target, args, sizes), size, path

    def _sized(self, est: _Est) -> bool:
        t = self._type(est.node)
        return t == STRING or t == BYTES or isinstance(t, ListType | MapType) or est.size is not None

    def _builtin_cost(self, e: ast.Call, target: _Est | None, args: list[_Est], sizes: list[int]) -> int:
        fn = e.function
        if target is not None and len(args) == 1:
            receiver = self.size(target)
            argument = self.size(args[0])
            if fn == "contains" and self._type(target.node) in (STRING, BYTES):
                return max(1, _traverse(receiver) * _traverse(argument))
            if fn in _REGEX_FUNCTIONS:
                return regex_cost(receiver, argument)
            if fn in ("startsWith", "endsWith"):
                return max(1, _traverse(argument))
        if fn in _REGEX_FUNCTIONS and len(args) == 2 and target is None:
            return regex_cost(self.size(args[0]), self.size(args[1]))
        if fn == "_+_" and len(args) == 2:
            t = self._type(args[0].node)
            if t == STRING or t == BYTES:
                return max(1, _traverse(sizes[0] + sizes[1]))
            return 1
        if fn in _ORDER_OPERATORS and len(args) == 2:
            if all(self._sized(a) for a in args):
                return max(1, _traverse(min(sizes)))
            return 1
        if fn == "@in" and len(args) == 2:
            return max(1, sizes[1]) if isinstance(self._type(args[1].node), ListType | DynType) else 1
        return 1

    # -- comprehensions --------------------------------------------------------------------------------

    def _comprehension(self, e: ast.Comprehension) -> _Est:
        rng = self.visit(e.iter_range)
        init = self.visit(e.accu_init)
        count = self.size(rng)
        range_type = self._type(e.iter_range)
        suffix = "@keys" if isinstance(range_type, MapType) else "@items"
        elem_path = None if rng.path is None else f"{rng.path}.{suffix}"
        accu_size = count if isinstance(e.accu_init, ast.CreateList | ast.CreateMap) else init.size
        self._scopes.append({e.accu_var: _Local(None, accu_size)})
        loop_vars = {e.iter_var: _Local(elem_path, None)}
        if e.iter_var2:
            # two variables: index or key first, then the element or value
            second = "@values" if isinstance(range_type, MapType) else "@items"
            loop_vars = {
                e.iter_var: _Local(None if isinstance(range_type, ListType) else elem_path, None),
                e.iter_var2: _Local(None if rng.path is None else f"{rng.path}.{second}", None),
            }
        self._scopes.append(loop_vars)
        cond = self.visit(e.loop_condition)
        step = self.visit(e.loop_step)
        self._scopes.pop()
        result = self.visit(e.result)
        self._scopes.pop()
        total = rng.cost + init.cost + result.cost + count * (cond.cost + step.cost)
        return _Est(
            e,
            total,
            size=accu_size if e.result is not None and isinstance(e.result, ast.Ident) else None,
            children=[(rng, 1), (init, 1), (cond, count), (step, count), (result, 1)],
            range_desc=_describe(e.iter_range, rng),
        )


# positions of the loop condition and step among a comprehension estimate's children
_LOOP_CHILDREN = slice(2, 4)


def _describe(e: ast.Expr, est: _Est) -> str:
    """How a comprehension's range reads in a message."""
    if est.path is not None and not est.path.startswith("@"):
        return est.path if not isinstance(e, ast.Call) else f"{est.path}()"
    if isinstance(e, ast.CreateList):
        return "a list literal"
    if isinstance(e, ast.CreateMap):
        return "a map literal"
    if isinstance(e, ast.Comprehension):
        return f"the result of {e.macro or 'a comprehension'}()"
    if isinstance(e, ast.Call):
        return f"the result of {e.function}()"
    return "an expression"


# -- the report ------------------------------------------------------------------------------------------


def _hotspot(root: _Est) -> CostReport:
    """Follow the dearest child from the root; report the innermost comprehension whose loop is on it."""
    path: list[_Est] = [root]
    loops: list[_Est] = []  # comprehensions whose loop body the dearest path goes through
    node = root
    while node.children:
        child, mult = max(node.children, key=lambda cm: cm[0].cost * cm[1])
        if child.cost * mult == 0:
            break
        if isinstance(node.node, ast.Comprehension) and any(
            child is c for c, _ in node.children[_LOOP_CHILDREN]
        ):
            loops.append(node)
        path.append(child)
        node = child
    if loops:
        inner = loops[-1]
        parts = [f"comprehension over {inner.range_desc}"]
        parts += [f"a comprehension over {c.range_desc}" for c in reversed(loops[:-1])]
        return CostReport(root.cost, inner.node.offset, " nested in ".join(parts))

    def own(n: _Est) -> int:
        return n.cost - sum(c.cost * m for c, m in n.children)

    dearest = max(path, key=own)
    what = dearest.node
    if isinstance(what, ast.Call):
        detail = f"call to '{what.function}'"
    else:
        detail = "the expression"
    return CostReport(root.cost, what.offset, detail)
