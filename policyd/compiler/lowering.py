"""Lowering of filter / score expressions to vectorised plans over node columns.

`lower_policy(checked)` lowers each filter and score of a checked policy (`policyd.policy.checked`):
`lower(expr, lets, closure)` takes a checked CEL AST (and the ASTs of the lets it needs) and returns an
`ExprPlan` when the expression reads nothing of the node but the columns of
`policyd.evaluation.columns.NodeColumns` (resource maps with constant keys, labels, taints, name,
podCount, unschedulable, ready) and does not pass the node to a `cluster` function; otherwise None,
and the runtime keeps the per-node generated function.

A plan is evaluated once per pod over every node at once. Values during evaluation are
- scalars (pod-only parts: plain CEL runtime values, computed once per pod with the CEL runtime's own
  operator implementations; an error is an `EvalErr` value so `&&`, `||` absorb it as CEL does),
- `Num`: a numpy column (bool, int64 or float64) with an error mask, for arithmetic and comparisons,
- `Cat`: a categorical column (codes into a list of values), for label values, taint lists and
  whatever is computed from them: an operation on categoricals runs once per distinct value.
Comprehensions over a pod-only range with a node-dependent body are unrolled per element (`all` is
an AND of columns, `filter` a bitmask categorical); comprehensions over a categorical range run once
per distinct value. Anything the plan cannot reproduce exactly (a node-dependent comprehension range
with a node-dependent body, int64 arithmetic near overflow, mixed types) raises `Unsupported` at
evaluation, and nodes whose result is an error come back in the `unsure` mask: the caller evaluates
those with the per-node function, which gives the exact CEL error text. Results are identical to the
generated per-node functions (tests/unit/compiler/test_lowering.py checks that property).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from policyd.cel import runtime as rt
from policyd.cel import syntax as ast
from policyd.cel.types import ObjectType, zero_value
from policyd.cel.values import UInt
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
from policyd.policy import syntax as ir
from policyd.policy.checked import CheckedPolicy
from policyd.policy.env import Context, policy_env

BoolArray = npt.NDArray[np.bool_]
AnyArray = npt.NDArray[Any]

INT_SAFE = float(2**62)

# node fields the columns hold; any other node field makes an expression per-node
RESOURCE_MAPS = frozenset({"allocatable", "requested", "nonZeroRequested", "capacity", "free"})
NODE_FIELDS = RESOURCE_MAPS | {"labels", "taints", "name", "images", "podCount", "unschedulable", "ready"}


class Unsupported(Exception):
    """The plan cannot evaluate this expression exactly for this pod (use the per-node function)."""


@dataclass(frozen=True)
class EvalErr:
    """A CEL evaluation error as a value."""

    message: str


@dataclass
class Num:
    """A node-dependent bool / int64 / float64 column with an error mask (None: no errors)."""

    values: AnyArray
    err: BoolArray | None = None


@dataclass
class Cat:
    """A node-dependent categorical value: `values[codes[row]]` (values may hold `EvalErr`)."""

    codes: npt.NDArray[np.intp]
    values: list[Any]


class _NodeRef:
    """The `node` variable (resolved through its fields)."""


@dataclass(frozen=True)
class _MapRef:
    """`node.<resource map>`: only indexing and `in` with a pod-only key are columns."""

    name: str


class _LabelsRef:
    """`node.labels`: indexing and `in` use the per-key columns; anything else the whole-map column."""


NODE = _NodeRef()
LABELS = _LabelsRef()

_ARITH = {"_+_": rt.add, "_-_": rt.sub, "_*_": rt.mul, "_/_": rt.div, "_%_": rt.mod}
_COMPARE = {"_==_": rt.eq, "_!=_": rt.ne, "_<_": rt.lt, "_<=_": rt.le, "_>_": rt.gt, "_>=_": rt.ge}
_OPERATORS: dict[str, Callable[..., Any]] = {
    **_ARITH,
    **_COMPARE,
    "-_": rt.neg,
    "!_": rt.logical_not,
    "_[_]": rt.index,
    "@in": rt.in_,
}
_LOGIC = frozenset({"_&&_", "_||_", "_?_:_", "@not_strictly_false"})


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


# ------------------------------------------------------------------------------------------------
# value helpers


def _is_scalar(v: Any) -> bool:
    return not isinstance(v, Num | Cat | _NodeRef | _MapRef | _LabelsRef)


def _kind(v: Any) -> str:
    """'b', 'i', 'f' for scalars usable in a column, else 'o'."""
    t = type(v)
    if t is bool:
        return "b"
    if t is int:
        return "i"
    if t is float:
        return "f"
    return "o"


def _num_kind(n: Num) -> str:
    return {"b": "b", "i": "i", "f": "f"}.get(n.values.dtype.kind, "o")


def _or_err(a: BoolArray | None, b: BoolArray | None) -> BoolArray | None:
    if a is None:
        return b
    if b is None:
        return a
    return a | b


def _err_of(value: Any, n: int) -> BoolArray | None:
    """Error mask of a value (None: no errors)."""
    if isinstance(value, Num):
        return value.err
    if isinstance(value, Cat):
        bad = np.fromiter((isinstance(v, EvalErr) for v in value.values), dtype=bool, count=len(value.values))
        return bad[value.codes] if bad.any() else None
    if isinstance(value, EvalErr):
        return np.ones(n, dtype=bool)
    return None


def _cat_to_num(c: Cat) -> Num | None:
    """A categorical of bool / int / float values (errors allowed) as a column, else None."""
    kinds = {_kind(v) for v in c.values if not isinstance(v, EvalErr)}
    if len(kinds) > 1 or (kinds and next(iter(kinds)) == "o"):
        return None
    kind = next(iter(kinds)) if kinds else "b"
    dtype = {"b": bool, "i": np.int64, "f": np.float64}[kind]
    bad = [isinstance(v, EvalErr) for v in c.values]
    table = np.array([False if b else v for v, b in zip(c.values, bad, strict=True)] or [False], dtype=dtype)
    err = np.array(bad or [False], dtype=bool)
    values = table[c.codes]
    return Num(values, err[c.codes] if any(bad) else None)


def _num_to_cat(x: Num) -> Cat:
    """A column as a categorical (one category per distinct value; errors one category)."""
    if x.values.dtype.kind == "b":
        uniq, inverse = _dense_unique(x.values.astype(np.intp), 2)
        values: list[Any] = [bool(v) for v in uniq]
    else:
        uniq, inverse = np.unique(x.values, return_inverse=True)
        values = [v.item() for v in uniq]
    codes = inverse.astype(np.intp)
    if x.err is not None and x.err.any():
        values.append(EvalErr("error"))
        codes = np.where(x.err, len(values) - 1, codes)
    return Cat(codes, values)


def _as_cat(value: Any, n: int) -> Cat:
    if isinstance(value, Cat):
        return value
    if isinstance(value, Num):
        return _num_to_cat(value)
    return Cat(np.zeros(n, dtype=np.intp), [value])


def _dense_unique(codes: AnyArray, bound: int) -> tuple[AnyArray, AnyArray]:
    """np.unique(codes, return_inverse=True) for non-negative codes below `bound` (linear when small)."""
    if bound > 4 * len(codes) + 1024:
        uniq, inverse = np.unique(codes, return_inverse=True)
        return uniq, inverse
    present = np.bincount(codes, minlength=bound) > 0
    uniq = np.flatnonzero(present)
    lut = np.cumsum(present) - 1
    return uniq, lut[codes]


def _combine(cats: list[Cat]) -> tuple[npt.NDArray[np.intp], list[tuple[int, ...]]]:
    """Joint codes of several categoricals and, per joint code, the tuple of member codes."""
    first = cats[0]
    if all(c.codes is first.codes for c in cats):
        if len(first.values) <= len(first.codes) + 64:
            return first.codes, [(i,) * len(cats) for i in range(len(first.values))]
        # a vocabulary larger than the rows (hostnames over a window): only the codes present
        uniq, inverse = np.unique(first.codes, return_inverse=True)
        return inverse.astype(np.intp), [(i,) * len(cats) for i in uniq.tolist()]
    joint = np.zeros(len(first.codes), dtype=np.int64)
    total = 1
    for c in cats:
        joint = joint * len(c.values) + c.codes
        total *= len(c.values)
    uniq, inverse = _dense_unique(joint, total)
    tuples = []
    for j in uniq.tolist():
        parts = []
        for c in reversed(cats):
            parts.append(j % len(c.values))
            j //= len(c.values)
        tuples.append(tuple(reversed(parts)))
    return inverse.astype(np.intp), tuples


def _per_category(fn: Callable[..., Any], args: list[Any], n: int) -> Any:
    """Apply scalar `fn` once per distinct combination of categorical arguments."""
    cat_positions = [i for i, a in enumerate(args) if not _is_scalar(a)]
    if not cat_positions:
        return fn(*args)
    cats = [_as_cat(args[i], n) for i in cat_positions]
    codes, combos = _combine(cats)
    values = []
    for combo in combos:
        scalar_args = list(args)
        for pos, cat, code in zip(cat_positions, cats, combo, strict=True):
            scalar_args[pos] = cat.values[code]
        values.append(fn(*scalar_args))
    return Cat(codes, values)


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` over scalars: an error argument propagates, a raised CEL error becomes an `EvalErr`."""

    def call(*args: Any) -> Any:
        for a in args:
            if isinstance(a, EvalErr):
                return a
        try:
            return fn(*args)
        except rt.EVAL_ERRORS as e:
            return EvalErr(str(rt.as_eval_error(e)))

    return call


def _scalar_and(a: Any, b: Any) -> Any:
    if a is False or b is False:
        return False
    if a is True and b is True:
        return True
    if isinstance(a, EvalErr):
        return a
    if isinstance(b, EvalErr):
        return b
    return EvalErr(str(rt.no_overload("_&&_", a, b)))


def _scalar_or(a: Any, b: Any) -> Any:
    if a is True or b is True:
        return True
    if a is False and b is False:
        return False
    if isinstance(a, EvalErr):
        return a
    if isinstance(b, EvalErr):
        return b
    return EvalErr(str(rt.no_overload("_||_", a, b)))


def _scalar_ternary(c: Any, a: Any, b: Any) -> Any:
    if c is True:
        return a
    if c is False:
        return b
    if isinstance(c, EvalErr):
        return c
    return EvalErr(str(rt.no_overload("_?_:_", c)))


def _not_strictly_false(a: Any) -> bool:
    return a is not False


# ------------------------------------------------------------------------------------------------
# vector operations


def _truth(v: Any, n: int) -> tuple[BoolArray, BoolArray]:
    """(value is True, value is an error or not a bool) per node."""
    if _is_scalar(v):
        if v is True or v is False:
            return np.full(n, v, dtype=bool), np.zeros(n, dtype=bool)
        return np.zeros(n, dtype=bool), np.ones(n, dtype=bool)
    if isinstance(v, Cat):
        true = np.array([x is True for x in v.values], dtype=bool)
        bad = np.array([x is not True and x is not False for x in v.values], dtype=bool)
        return true[v.codes], bad[v.codes]
    if _num_kind(v) != "b":
        return np.zeros(n, dtype=bool), np.ones(n, dtype=bool)
    bad = v.err if v.err is not None else np.zeros(n, dtype=bool)
    return v.values & ~bad, bad


def _logic(op: str, a: Any, b: Any, n: int) -> Any:
    if isinstance(a, Cat) and isinstance(b, Cat | bool) or isinstance(b, Cat) and isinstance(a, bool):
        return _per_category(_scalar_and if op == "_&&_" else _scalar_or, [a, b], n)
    ta, ea = _truth(a, n)
    tb, eb = _truth(b, n)
    fa, fb = ~ta & ~ea, ~tb & ~eb
    if op == "_&&_":
        decided_false = fa | fb
        err = (ea | eb) & ~decided_false
        return Num(ta & tb & ~err, err if err.any() else None)
    decided_true = ta | tb
    err = (ea | eb) & ~decided_true
    return Num(decided_true, err if err.any() else None)


def _to_num(v: Any, n: int) -> Num | None:
    if isinstance(v, Num):
        return v
    if isinstance(v, Cat):
        return _cat_to_num(v)
    k = _kind(v)
    if k == "o":
        return None
    dtype = {"b": bool, "i": np.int64, "f": np.float64}[k]
    return Num(np.full(n, v, dtype=dtype))


def _max_abs(x: Num) -> float:
    if len(x.values) == 0:
        return 0.0
    return float(np.max(np.abs(x.values.astype(np.float64))))


def _numeric(op: str, args: list[Any], n: int) -> Any:
    """Column arithmetic / comparison; None when the operands do not fit the column model."""
    nums = [_to_num(a, n) for a in args]
    if any(x is None for x in nums):
        return None
    xs: list[Num] = [x for x in nums if x is not None]
    kinds = [_num_kind(x) for x in xs]
    err = None
    for operand in xs:
        err = _or_err(err, operand.err)
    if op == "-_":
        (a,) = xs
        if kinds[0] == "i":
            if _max_abs(a) >= INT_SAFE:
                raise Unsupported("int64 range")
            return Num(-a.values, err)
        if kinds[0] == "f":
            return Num(-a.values, err)
        return Num(np.zeros(n, dtype=bool), np.ones(n, dtype=bool))
    a, b = xs
    ka, kb = kinds
    with np.errstate(all="ignore"):
        if op in _COMPARE:
            numeric = ka in "if" and kb in "if"
            if not numeric and ka != kb:
                if op == "_==_":
                    return Num(np.zeros(n, dtype=bool), err)
                if op == "_!=_":
                    return Num(np.ones(n, dtype=bool), err)
                return Num(np.zeros(n, dtype=bool), np.ones(n, dtype=bool))
            x: AnyArray = a.values
            y: AnyArray = b.values
            if numeric and ka != kb:
                x, y = x.astype(np.float64), y.astype(np.float64)
            fn: Any = {
                "_==_": np.equal,
                "_!=_": np.not_equal,
                "_<_": np.less,
                "_<=_": np.less_equal,
                "_>_": np.greater,
                "_>=_": np.greater_equal,
            }[op]
            return Num(fn(x, y), err)
        if ka != kb or ka == "b":
            return Num(np.zeros(n, dtype=bool), np.ones(n, dtype=bool))
        x, y = a.values, b.values
        if ka == "f":
            if op == "_%_":
                return Num(np.zeros(n, dtype=bool), np.ones(n, dtype=bool))
            fn = {"_+_": np.add, "_-_": np.subtract, "_*_": np.multiply, "_/_": np.divide}[op]
            return Num(fn(x, y), err)
        ma, mb = _max_abs(a), _max_abs(b)
        if op in ("_+_", "_-_"):
            if ma + mb >= INT_SAFE:
                raise Unsupported("int64 range")
            return Num(x + y if op == "_+_" else x - y, err)
        if op == "_*_":
            if ma * mb >= INT_SAFE:
                raise Unsupported("int64 range")
            return Num(x * y, err)
        if ma >= INT_SAFE:
            raise Unsupported("int64 range")
        zero = y == 0
        safe = np.where(zero, 1, y)
        if op == "_/_":
            q = np.abs(x) // np.abs(safe)
            out = np.where((x >= 0) == (safe >= 0), q, -q)
        else:
            r = np.abs(x) % np.abs(safe)
            out = np.where(x >= 0, r, -r)
        if zero.any():
            err = _or_err(err, zero)
        return Num(out, err)


def _convert(fn: str, x: Any, n: int) -> Any:
    """`int(column)` / `double(column)`; None when not a plain column conversion."""
    if not isinstance(x, Num):
        return None
    kind = _num_kind(x)
    if fn == "double" and kind in "if":
        return Num(x.values.astype(np.float64), x.err)
    if fn == "int" and kind == "i":
        return x
    if fn == "int" and kind == "f":
        v = x.values
        bad = np.isnan(v) | ~((v > -9223372036854775808.0) & (v < 9223372036854775808.0))
        safe = np.where(bad, 0.0, v)
        return Num(np.trunc(safe).astype(np.int64), _or_err(x.err, bad if bad.any() else None))
    return None


# ------------------------------------------------------------------------------------------------
# the evaluator


@functools.cache
def _functions() -> dict[str, Any]:
    return dict(policy_env(Context.FILTER).functions)


@functools.cache
def _dispatcher(fn: str, member: bool, arity: int) -> Callable[..., Any]:
    decl = _functions().get(fn)
    if decl is None:
        raise Unsupported(f"function {fn}")
    candidates = tuple(o for o in decl.overloads if o.member == member and len(o.params) == arity)
    if not candidates:
        raise Unsupported(f"function {fn}")
    if len(candidates) == 1 and candidates[0].impl is not None:
        return _guarded(candidates[0].impl)
    return _guarded(rt.Dispatcher(fn, candidates))


class _Evaluation:
    """One evaluation of plans for one pod over the columns (lets memoised across plans)."""

    def __init__(
        self,
        columns: Any,
        pod: Mapping[str, Any],
        cluster: Any,
        lets: Mapping[str, ast.Expr],
        types: Mapping[int, Any] | None = None,
        rows: Any = None,
    ) -> None:
        self.types = types or {}
        self.columns = columns
        self.rows: npt.NDArray[np.intp] | None = None if rows is None else np.asarray(rows, dtype=np.intp)
        self.n = len(columns) if self.rows is None else len(self.rows)
        self.pod = pod
        self.cluster = cluster
        self.lets = lets
        self.let_values: dict[str, Any] = {}
        self.env: dict[str, Any] = {}

    def let(self, name: str) -> Any:
        if name not in self.let_values:
            saved, self.env = self.env, {}
            try:
                self.let_values[name] = self.eval(self.lets[name])
            finally:
                self.env = saved
        return self.let_values[name]

    def eval(self, e: ast.Expr) -> Any:
        if isinstance(e, ast.Const):
            v = e.value
            if v is None or isinstance(v, ast.Null):
                return None
            if isinstance(v, ast.UInt):
                return UInt(v.value)
            return v
        if isinstance(e, ast.Ident):
            return self.ident(e.name)
        if isinstance(e, ast.Select):
            return self.select(e)
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, ast.CreateList):
            items = [self.eval(x) for x in e.elements]
            return _per_category(_guarded(lambda *xs: list(xs)), items, self.n)
        if isinstance(e, ast.CreateMap):
            parts: list[Any] = []
            for entry in e.entries:
                parts += [self.eval(entry.key), self.eval(entry.value)]
            return _per_category(
                _guarded(lambda *kv: rt.make_map(list(zip(kv[::2], kv[1::2], strict=True)))), parts, self.n
            )
        if isinstance(e, ast.Comprehension):
            return self.comprehension(e)
        raise Unsupported(type(e).__name__)

    def ident(self, name: str) -> Any:
        if name in self.env:
            return self.env[name]
        if name == "pod":
            return self.pod
        if name == "node":
            return NODE
        if name == "cluster":
            if self.cluster is None:
                raise Unsupported("no cluster functions")
            return self.cluster
        if name in self.lets:
            return self.let(name)
        raise Unsupported(f"identifier {name}")

    def take(self, column: AnyArray) -> AnyArray:
        """The evaluated rows of a full column."""
        return column[: self.n] if self.rows is None else column[self.rows]

    def node_field(self, field: str) -> Any:
        cols = self.columns
        if field in RESOURCE_MAPS:
            return _MapRef(field)
        if field == "labels":
            return LABELS
        if field == "podCount":
            return Num(self.take(cols.pod_count))
        if field == "unschedulable":
            return Num(self.take(cols.unschedulable))
        if field == "ready":
            return Num(self.take(cols.ready))
        if field in ("taints", "name", "images"):
            cat = cols.whole[field]
            return Cat(self.take(cat.codes).astype(np.intp), cat.values)
        raise Unsupported(f"node.{field} is not a column")

    def materialise(self, v: Any) -> Any:
        """A node reference as a value (whole-map categorical); other values unchanged."""
        if v is LABELS:
            cat = self.columns.whole["labels"]
            return Cat(self.take(cat.codes).astype(np.intp), cat.values)
        if isinstance(v, _NodeRef):
            # the whole node (e.g. passed to a cluster function): one category per evaluated row
            cels = self.columns.cels
            rows = range(self.n) if self.rows is None else self.rows.tolist()
            return Cat(np.arange(self.n, dtype=np.intp), [cels[r] for r in rows])
        if isinstance(v, _MapRef):
            raise Unsupported("whole node map")
        return v

    def select(self, e: ast.Select) -> Any:
        obj = self.eval(e.operand)
        if obj is NODE:
            if e.test_only:
                if e.field not in NODE_FIELDS:
                    raise Unsupported(f"has(node.{e.field})")
                return True
            return self.node_field(e.field)
        if isinstance(obj, _MapRef | _LabelsRef):
            if e.test_only:
                return self.member_in(e.field, obj)
            return self.index(obj, e.field)
        if not e.test_only:
            ot = self.types.get(id(e.operand))
            if isinstance(ot, ObjectType):
                ft = ot.field_type(e.field)
                if ft is not None:
                    zero = zero_value(ft)
                    typed = _guarded(lambda o: o.get(e.field, zero))
                    return _per_category(typed, [obj], self.n)
        fn = _guarded(rt.has if e.test_only else rt.select)
        return _per_category(lambda o: fn(o, e.field), [obj], self.n)

    def member_in(self, key: Any, ref: Any) -> Any:
        """`key in node.labels` / `key in node.<map>` for a pod-only string key."""
        n = self.n
        if isinstance(ref, _LabelsRef):
            cat = self.columns.labels.get(key)
            return Num(np.zeros(n, dtype=bool) if cat is None else self.take(cat.codes) >= 0)
        _, present = self.columns.column(ref.name, key)
        return Num(self.take(present).copy())

    def index(self, ref: Any, key: Any) -> Any:
        """`node.labels[key]` (categorical) / `node.<map>[key]` (column) for a pod-only string key."""
        missing = EvalErr(f"no such key: {key}")
        if isinstance(ref, _LabelsRef):
            cat = self.columns.labels.get(key)
            if cat is None:
                return missing
            codes = self.take(cat.codes).astype(np.intp)
            return Cat(np.where(codes < 0, len(cat.values), codes), [*cat.values, missing])
        values, present = self.columns.column(ref.name, key)
        values, present = self.take(values), self.take(present)
        absent = ~present
        return Num(values, absent if absent.any() else None)

    def call(self, e: ast.Call) -> Any:
        fn = e.function
        n = self.n
        if fn in _LOGIC:
            first = self.eval(e.args[0])
            if fn == "_&&_" and first is False or fn == "_||_" and first is True:
                return first  # decided whatever the other side is (an error included)
            if fn == "_?_:_" and _is_scalar(first):
                if first is True:
                    return self.eval(e.args[1])
                if first is False:
                    return self.eval(e.args[2])
                return first if isinstance(first, EvalErr) else _scalar_ternary(first, None, None)
            args = [first] + [self.eval(a) for a in e.args[1:]]
            if all(_is_scalar(a) for a in args):
                if fn == "_&&_":
                    return _scalar_and(*args)
                if fn == "_||_":
                    return _scalar_or(*args)
                if fn == "_?_:_":
                    return _scalar_ternary(*args)
                return _not_strictly_false(args[0])
            if fn == "@not_strictly_false":
                return _per_category(_not_strictly_false, [self.materialise(args[0])], n)
            if fn == "_?_:_":
                return self.ternary(*args)
            return _logic(fn, args[0], args[1], n)
        if e.target is not None:
            target = self.eval(e.target)
            if target is self.cluster and self.cluster is not None:
                args = [self.materialise(self.eval(a)) for a in e.args]
                impl = _dispatcher(fn, True, len(args) + 1)
                return _per_category(lambda *xs: impl(self.cluster, *xs), args, n)
            args = [self.materialise(target)] + [self.materialise(self.eval(a)) for a in e.args]
            return _per_category(_dispatcher(fn, True, len(args)), args, n)
        raw = [self.eval(a) for a in e.args]
        if fn in ("_[_]", "@in"):
            container, key = (raw[0], raw[1]) if fn == "_[_]" else (raw[1], raw[0])
            if isinstance(container, _MapRef | _LabelsRef):
                if not _is_scalar(key):
                    raise Unsupported("node-dependent key")
                if isinstance(key, EvalErr):
                    return key
                if type(key) is not str:
                    if isinstance(container, _MapRef):
                        raise Unsupported("non-string key")
                    container = self.materialise(container)
                else:
                    return self.index(container, key) if fn == "_[_]" else self.member_in(key, container)
                raw = [container, key] if fn == "_[_]" else [key, container]
        args = [self.materialise(a) for a in raw]
        if all(_is_scalar(a) for a in args):
            return self.scalar_call(fn, args, member=False)
        if (fn in _ARITH or fn in _COMPARE or fn == "-_") and any(isinstance(a, Num) for a in args):
            out = _numeric(fn, args, n)
            if out is not None:
                return out
        if fn == "!_" and isinstance(args[0], Num):
            t, bad = _truth(args[0], n)
            return Num(~t & ~bad, bad if bad.any() else None)
        if fn in ("int", "double"):
            out = _convert(fn, args[0], n)
            if out is not None:
                return out
        impl = _guarded(_OPERATORS[fn]) if fn in _OPERATORS else _dispatcher(fn, False, len(args))
        return _per_category(impl, args, n)

    def scalar_call(self, fn: str, args: list[Any], member: bool) -> Any:
        if fn in _OPERATORS:
            return _guarded(_OPERATORS[fn])(*args)
        return _dispatcher(fn, member, len(args))(*args)

    def ternary(self, c: Any, a: Any, b: Any) -> Any:
        n = self.n
        a, b = self.materialise(a), self.materialise(b)
        if isinstance(a, Num) or isinstance(b, Num):
            na, nb = _to_num(a, n), _to_num(b, n)
            if na is not None and nb is not None and _num_kind(na) == _num_kind(nb):
                t, bad = _truth(c, n)
                err = _or_err(bad if bad.any() else None, None)
                if na.err is not None:
                    err = _or_err(err, na.err & t)
                if nb.err is not None:
                    err = _or_err(err, nb.err & ~t & ~bad)
                return Num(np.where(t, na.values, nb.values), err)
        return _per_category(_scalar_ternary, [self.materialise(c), a, b], n)

    # -- comprehensions

    def comprehension(self, e: ast.Comprehension) -> Any:
        raw = self.eval(e.iter_range)
        if raw is LABELS and e.macro in ("all", "exists"):
            return self.quantify_labels(e)
        if _is_scalar(raw) and not isinstance(raw, EvalErr) and e.macro in ("filter", "map"):
            out = self.select_items(e, raw)
            if out is not None:
                return out
        rng = self.materialise(raw)
        if not _is_scalar(rng):
            # node-dependent range: run the whole fold once per distinct range value
            return _per_category(lambda r: self.fold(e, r, scalar_only=True), [rng], self.n)
        return self.fold(e, rng, scalar_only=False)

    def quantify_labels(self, e: ast.Comprehension) -> Any:
        """`node.labels.all(k, p)` / `exists`: one column pass per label key in the cluster."""
        n = self.n
        body = e.loop_step.args[1] if isinstance(e.loop_step, ast.Call) else e.loop_step
        want = e.macro == "all"
        decided = np.zeros(n, dtype=bool)  # some present key's body is False (all) / True (exists)
        bad = np.zeros(n, dtype=bool)
        saved = dict(self.env)
        try:
            for key, cat in self.columns.labels.items():
                present = self.take(cat.codes) >= 0
                if not present.any():
                    continue
                self.env[e.iter_var] = key
                true, err = _truth(self.materialise(self.eval(body)), n)
                hit = ~true & ~err if want else true
                decided |= present & hit
                bad |= present & err
        finally:
            self.env = saved
        err_mask = bad & ~decided
        result = ~decided if want else decided
        return Num(result & ~err_mask, err_mask if err_mask.any() else None)

    def select_items(self, e: ast.Comprehension, rng: Any) -> Any:
        """`list.filter(x, p)` / `list.map(x, p, f)` over a pod-only list with a node-dependent `p`.

        The result is a categorical over the subsets of the list that occur; None when `p` is
        pod-only (the plain fold is exact and cheap) or the transform depends on the node.
        """
        step = e.loop_step
        if not (isinstance(step, ast.Call) and step.function == "_?_:_"):
            return None  # two-argument map
        pred = step.args[0]
        appended = step.args[1]
        if not (isinstance(appended, ast.Call) and isinstance(appended.args[1], ast.CreateList)):
            return None
        transform = appended.args[1].elements[0]
        try:
            items = list(rt.iterate(rng))
        except rt.EVAL_ERRORS:
            return None
        if len(items) > 30:
            return None
        n = self.n
        saved = dict(self.env)
        outputs: list[Any] = []
        truths: list[tuple[BoolArray, BoolArray]] = []
        try:
            for item in items:
                self.env[e.iter_var] = item
                self.env[e.accu_var] = []
                p = self.materialise(self.eval(pred))
                out = self.eval(transform)
                if not _is_scalar(out):
                    raise Unsupported("node-dependent map transform")
                if _is_scalar(p) and not truths and not isinstance(p, EvalErr):
                    outputs.append((p, out))
                    continue
                outputs.append((p, out))
                truths.append(_truth(p, n) if not _is_scalar(p) else _truth(p, n))
        finally:
            self.env = saved
        if all(_is_scalar(p) for p, _ in outputs):
            return None
        code = np.zeros(n, dtype=np.int64)
        bad = np.zeros(n, dtype=bool)
        first_err: list[Any] = []
        for i, (p, _) in enumerate(outputs):
            true, err = _truth(p, n)
            code |= true.astype(np.int64) << i
            if err.any():
                bad |= err & ~np.zeros(n, dtype=bool)
                first_err.append(p)
        # an error in any element's predicate (or a non-bool predicate) makes the whole result an error
        uniq, inverse = (
            _dense_unique(code, 1 << len(outputs))
            if len(outputs) <= 16
            else np.unique(code, return_inverse=True)
        )
        values: list[Any] = []
        for c in uniq.tolist():
            values.append([out for i, (_, out) in enumerate(outputs) if c >> i & 1])
        codes = inverse.astype(np.intp)
        if bad.any():
            values.append(EvalErr("predicate error"))
            codes = np.where(bad, len(values) - 1, codes)
        return Cat(codes, values)

    def fold(self, e: ast.Comprehension, rng: Any, scalar_only: bool) -> Any:
        if isinstance(rng, EvalErr):
            return rng
        try:
            items = list(rt.iterate(rng))
        except rt.EVAL_ERRORS as exc:
            return EvalErr(str(rt.as_eval_error(exc)))
        saved = dict(self.env)
        try:
            accu = self.eval(e.accu_init)
            for item in items:
                self.env[e.iter_var] = item
                self.env[e.accu_var] = accu
                if _is_scalar(accu):
                    cond = self.eval(e.loop_condition)
                    if cond is False:
                        break
                step = self.eval(e.loop_step)
                if scalar_only and not _is_scalar(step):
                    raise Unsupported("node-dependent comprehension body over a node-dependent range")
                accu = step
            self.env[e.accu_var] = accu
            return self.eval(e.result)
        finally:
            self.env = saved


# ------------------------------------------------------------------------------------------------
# plans


@dataclass(frozen=True)
class VectorResult:
    """Per-node outcome of a plan: `values` (filters: passed) and `unsure` (evaluate per node)."""

    values: AnyArray
    unsure: BoolArray


@dataclass(frozen=True)
class ExprPlan:
    """A filter or score expression lowered to column evaluation."""

    expr: ast.Expr
    lets: Mapping[str, ast.Expr]
    closure: tuple[str, ...]
    kind: str  # "filter" | "score"
    types: Mapping[int, Any] = field(default_factory=dict)  # id(syntax node) -> checked type

    def evaluate(
        self,
        pod: Mapping[str, Any],
        columns: Any,
        cluster: Any = None,
        memo: Evaluation | None = None,
        rows: Any = None,
    ) -> VectorResult:
        """Evaluate for `pod` over the rows of `columns` (all, or `rows`); raises `Unsupported`."""
        ev = memo._ev if memo is not None else _Evaluation(columns, pod, cluster, self.lets, self.types, rows)
        n = ev.n
        unsure = np.zeros(n, dtype=bool)
        for name in self.closure:
            err = _err_of(ev.let(name), n)
            if err is not None:
                unsure |= err
        value = ev.eval(self.expr)
        if self.kind == "filter":
            true, bad = _truth(value, n)
            err = _err_of(value, n)
            if err is not None:
                unsure |= err
            if isinstance(value, Num) and _num_kind(value) != "b":
                true = np.zeros(n, dtype=bool)
            elif _is_scalar(value) and value is not True:
                true = np.zeros(n, dtype=bool)
            return VectorResult(true & ~unsure, unsure)
        return VectorResult(self._scores(value, n, unsure), np.zeros(n, dtype=bool))

    @staticmethod
    def _scores(value: Any, n: int, failed: BoolArray) -> AnyArray:
        def as_float(v: Any) -> float:
            if isinstance(v, EvalErr):
                return 0.0
            try:
                return float(v)
            except (TypeError, ValueError, OverflowError):
                return 0.0

        if isinstance(value, Num):
            if _num_kind(value) == "o":
                raise Unsupported("score type")
            out = value.values.astype(np.float64)
            if value.err is not None:
                out = np.where(value.err, 0.0, out)
        elif isinstance(value, Cat):
            table = np.array([as_float(v) for v in value.values], dtype=np.float64)
            out = table[value.codes]
        else:
            out = np.full(n, as_float(value), dtype=np.float64)
        return np.where(failed, 0.0, out)


class Evaluation:
    """Shared per-pod state for several plans of one policy (lets computed once)."""

    def __init__(
        self,
        columns: Any,
        pod: Mapping[str, Any],
        lets: Mapping[str, ast.Expr],
        cluster: Any = None,
        types: Mapping[int, Any] | None = None,
        rows: Any = None,
    ) -> None:
        self._ev = _Evaluation(columns, pod, cluster, lets, types, rows)

    def know_let(self, name: str, value: Any) -> None:
        """Use `value` for let `name` (computed elsewhere, e.g. a pod-only let) instead of evaluating it."""
        self._ev.let_values[name] = value


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
    return ExprPlan(expr, lets, closure, kind, dict(types or {}))


@dataclass(frozen=True)
class PolicyPlan:
    """Vectorised plans of one policy's rules, in rule order (None: that rule is per-node only)."""

    lets: Mapping[str, ast.Expr]
    filters: tuple[ExprPlan | None, ...]
    scores: tuple[ExprPlan | None, ...]
    types: Mapping[int, Any] = field(default_factory=dict)

    def evaluation(
        self, columns: Any, pod: Mapping[str, Any], cluster: Any = None, rows: Any = None
    ) -> Evaluation:
        """Per-pod state shared by this policy's plans (over `rows` of the columns, default all)."""
        return Evaluation(columns, pod, self.lets, cluster, self.types, rows)


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
    return PolicyPlan(lets, filters, scores, types)
