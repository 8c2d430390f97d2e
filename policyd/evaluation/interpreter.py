"""The interpreter of plans: one pod's expressions evaluated over the rows of `NodeColumns` at once.

`Interpreter` evaluates a checked CEL AST with the values of `policyd.evaluation.columnar`: pod-only
parts as scalars (with the CEL runtime's own operators), node reads as columns (`node.<map>[key]`,
`podCount`, ...) or categoricals (labels, taints, name, images). Comprehensions over a pod-only range
with a node-dependent body are unrolled per element (`all` is an AND of columns, `filter` a bitmask
categorical); comprehensions over a categorical range run once per distinct value. What cannot be
reproduced exactly (a node-dependent comprehension range with a node-dependent body, int64 arithmetic
near overflow, mixed types) raises `Unsupported`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from policyd.cel import runtime as rt
from policyd.cel import syntax as ast
from policyd.cel.env import FunctionDecl
from policyd.cel.types import ObjectType, zero_value
from policyd.cel.values import UInt
from policyd.evaluation.arithmetic import column_op, convert, logic, to_num
from policyd.evaluation.columnar import (
    ARITH,
    COMPARE,
    LABELS,
    LOGIC,
    NODE,
    OPERATORS,
    AnyArray,
    Cat,
    EvalErr,
    LabelsRef,
    MapRef,
    NodeRef,
    Num,
    Unsupported,
    all_scalar,
    dense_unique,
    guarded,
    is_scalar,
    member_of,
    not_strictly_false,
    num_kind,
    or_err,
    per_category,
    scalar_and,
    scalar_or,
    scalar_ternary,
    truth,
)

# node fields the columns hold; any other node field makes an expression per-node
RESOURCE_MAPS = frozenset({"allocatable", "requested", "nonZeroRequested", "capacity", "free"})
NODE_FIELDS = RESOURCE_MAPS | {"labels", "taints", "name", "images", "podCount", "unschedulable", "ready"}

_SELECT = guarded(rt.select)
_HAS = guarded(rt.has)
_GUARDED = {fn: guarded(impl) for fn, impl in OPERATORS.items()}  # the CEL operators over scalars
_REFS = frozenset({NodeRef, MapRef, LabelsRef})
_UNTYPED = object()  # a field selection on a value not of an object type
_UNSEEN = object()


class FunctionTable:
    """The CEL functions plans call (the filter context's declarations), each dispatcher made once."""

    def __init__(self, functions: Mapping[str, FunctionDecl]) -> None:
        self.functions = functions
        self._dispatchers: dict[tuple[str, bool, int], Callable[..., Any]] = {}

    def dispatcher(self, fn: str, member: bool, arity: int) -> Callable[..., Any]:
        """The guarded implementation of `fn` for this call shape; raises `Unsupported` when undeclared."""
        key = (fn, member, arity)
        impl = self._dispatchers.get(key)
        if impl is None:
            impl = self._dispatchers[key] = self._make(fn, member, arity)
        return impl

    def _make(self, fn: str, member: bool, arity: int) -> Callable[..., Any]:
        decl = self.functions.get(fn)
        if decl is None:
            raise Unsupported(f"function {fn}")
        candidates = tuple(o for o in decl.overloads if o.member == member and len(o.params) == arity)
        if not candidates:
            raise Unsupported(f"function {fn}")
        if len(candidates) == 1 and candidates[0].impl is not None:
            return guarded(candidates[0].impl)
        return guarded(rt.Dispatcher(fn, candidates))


class Interpreter:
    """One evaluation of plans for one pod over the columns (lets memoised across plans)."""

    def __init__(
        self,
        columns: Any,
        pod: Mapping[str, Any],
        cluster: Any,
        lets: Mapping[str, ast.Expr],
        functions: FunctionTable,
        types: Mapping[int, Any] | None = None,
        rows: Any = None,
        field_zeros: dict[int, Any] | None = None,
    ) -> None:
        self.functions = functions
        self.types = types or {}
        # id(Select) -> the zero value of the selected field, or _UNTYPED (the plan's, kept across pods)
        self.field_zeros: dict[int, Any] = {} if field_zeros is None else field_zeros
        self.columns = columns
        self.rows: npt.NDArray[np.intp] | None = None if rows is None else np.asarray(rows, dtype=np.intp)
        self.n = len(columns) if self.rows is None else len(self.rows)
        self.pod = pod
        self.cluster = cluster
        self.lets = lets
        self.let_values: dict[str, Any] = {}
        self.env: dict[str, Any] = {}
        self._labels: dict[str, Any] = {}  # `node.labels[key]` by key: one categorical per key

    def let(self, name: str) -> Any:
        if name not in self.let_values:
            saved, self.env = self.env, {}
            try:
                self.let_values[name] = self.eval(self.lets[name])
            finally:
                self.env = saved
        return self.let_values[name]

    def eval(self, e: ast.Expr) -> Any:
        if type(e) is ast.Call:  # the common kinds first, by exact type (no subclasses)
            return self.call(e)
        if type(e) is ast.Select:
            return self.select(e)
        if type(e) is ast.Ident:
            return self.ident(e.name)
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
            if e.optional_indices:
                raise Unsupported("optional list elements")
            items = [self.eval(x) for x in e.elements]
            return per_category(guarded(lambda *xs: list(xs)), items, self.n)
        if isinstance(e, ast.CreateMap):
            if any(entry.optional for entry in e.entries):
                raise Unsupported("optional map entries")
            parts: list[Any] = []
            for entry in e.entries:
                parts += [self.eval(entry.key), self.eval(entry.value)]
            return per_category(
                guarded(lambda *kv: rt.make_map(list(zip(kv[::2], kv[1::2], strict=True)))), parts, self.n
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
            return MapRef(field)
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
        if type(v) not in _REFS:
            return v
        if v is LABELS:
            cat = self.columns.whole["labels"]
            return Cat(self.take(cat.codes).astype(np.intp), cat.values)
        if isinstance(v, NodeRef):
            # the whole node (e.g. passed to a cluster function): one category per evaluated row
            cels = self.columns.cels
            rows = range(self.n) if self.rows is None else self.rows.tolist()
            return Cat(np.arange(self.n, dtype=np.intp), [cels[r] for r in rows])
        if isinstance(v, MapRef):
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
        if isinstance(obj, MapRef | LabelsRef):
            if e.test_only:
                return self.member_in(e.field, obj)
            return self.index(obj, e.field)
        if not e.test_only:
            zero = self.field_zero(e)
            if zero is not _UNTYPED:
                if type(obj) is dict:  # a pod-only object: its field, or the zero value
                    return obj.get(e.field, zero)
                typed = guarded(lambda o: o.get(e.field, zero))
                return per_category(typed, [obj], self.n)
        fn = _HAS if e.test_only else _SELECT
        if is_scalar(obj):
            return fn(obj, e.field)
        return per_category(lambda o: fn(o, e.field), [obj], self.n)

    def field_zero(self, e: ast.Select) -> Any:
        """The value an absent field selected by `e` reads as (its type's zero), or `_UNTYPED`."""
        zero = self.field_zeros.get(id(e), _UNSEEN)
        if zero is _UNSEEN:
            ot = self.types.get(id(e.operand))
            ft = ot.field_type(e.field) if isinstance(ot, ObjectType) else None
            zero = self.field_zeros[id(e)] = _UNTYPED if ft is None else zero_value(ft)
        return zero

    def member_in(self, key: Any, ref: Any) -> Any:
        """`key in node.labels` / `key in node.<map>` for a pod-only string key."""
        n = self.n
        if isinstance(ref, LabelsRef):
            cat = self.columns.labels.get(key)
            return Num(np.zeros(n, dtype=bool) if cat is None else self.take(cat.codes) >= 0)
        _, present = self.columns.column(ref.name, key)
        return Num(self.take(present).copy())

    def index(self, ref: Any, key: Any) -> Any:
        """`node.labels[key]` (categorical) / `node.<map>[key]` (column) for a pod-only string key."""
        missing = EvalErr(f"no such key: {key}")
        if isinstance(ref, LabelsRef):
            known = self._labels.get(key)
            if known is not None:
                return known
            cat = self.columns.labels.get(key)
            if cat is None:
                return missing
            codes = self.take(cat.codes).astype(np.intp)
            strings = len(cat.values)  # label values are strings, interned as themselves
            known = self._labels[key] = Cat(
                np.where(codes < 0, strings, codes), [*cat.values, missing], cat.index, strings
            )
            return known
        values, present = self.columns.column(ref.name, key)
        values, present = self.take(values), self.take(present)
        absent = ~present
        return Num(values, absent if absent.any() else None)

    def call(self, e: ast.Call) -> Any:
        fn = e.function
        n = self.n
        if fn in LOGIC:
            first = self.eval(e.args[0])
            if fn == "_&&_" and first is False or fn == "_||_" and first is True:
                return first  # decided whatever the other side is (an error included)
            if fn == "_?_:_" and is_scalar(first):
                if first is True:
                    return self.eval(e.args[1])
                if first is False:
                    return self.eval(e.args[2])
                return first if isinstance(first, EvalErr) else scalar_ternary(first, None, None)
            args = [first] + [self.eval(a) for a in e.args[1:]]
            if all_scalar(args):
                if fn == "_&&_":
                    return scalar_and(*args)
                if fn == "_||_":
                    return scalar_or(*args)
                if fn == "_?_:_":
                    return scalar_ternary(*args)
                return not_strictly_false(args[0])
            if fn == "@not_strictly_false":
                return per_category(not_strictly_false, [self.materialise(args[0])], n)
            if fn == "_?_:_":
                return self.ternary(*args)
            return logic(fn, args[0], args[1], n)
        if e.target is not None:
            target = self.eval(e.target)
            if target is self.cluster and self.cluster is not None:
                args = [self.materialise(self.eval(a)) for a in e.args]
                impl = self.functions.dispatcher(fn, True, len(args) + 1)
                return per_category(lambda *xs: impl(self.cluster, *xs), args, n)
            args = [self.materialise(target)] + [self.materialise(self.eval(a)) for a in e.args]
            return per_category(self.functions.dispatcher(fn, True, len(args)), args, n)
        raw = [self.eval(a) for a in e.args]
        if fn in ("_[_]", "@in"):
            container, key = (raw[0], raw[1]) if fn == "_[_]" else (raw[1], raw[0])
            if isinstance(container, MapRef | LabelsRef):
                if not is_scalar(key):
                    raise Unsupported("node-dependent key")
                if isinstance(key, EvalErr):
                    return key
                if type(key) is not str:
                    if isinstance(container, MapRef):
                        raise Unsupported("non-string key")
                    container = self.materialise(container)
                else:
                    return self.index(container, key) if fn == "_[_]" else self.member_in(key, container)
                raw = [container, key] if fn == "_[_]" else [key, container]
        args = [self.materialise(a) for a in raw]
        if all_scalar(args):
            return self.scalar_call(fn, args, member=False)
        if (fn in ARITH or fn in COMPARE or fn == "-_") and any(isinstance(a, Num) for a in args):
            out = column_op(fn, args, n)
            if out is not None:
                return out
        if fn == "@in" and isinstance(args[0], Cat) and isinstance(args[1], Mapping):
            return member_of(args[0], args[1])
        if fn == "!_" and isinstance(args[0], Num):
            t, bad = truth(args[0], n)
            return Num(~t & ~bad, bad if bad.any() else None)
        if fn in ("int", "double"):
            out = convert(fn, args[0], n)
            if out is not None:
                return out
        impl = _GUARDED.get(fn) or self.functions.dispatcher(fn, False, len(args))
        return per_category(impl, args, n)

    def scalar_call(self, fn: str, args: list[Any], member: bool) -> Any:
        impl = _GUARDED.get(fn) or self.functions.dispatcher(fn, member, len(args))
        return impl(*args)

    def ternary(self, c: Any, a: Any, b: Any) -> Any:
        n = self.n
        a, b = self.materialise(a), self.materialise(b)
        if isinstance(a, Num) or isinstance(b, Num):
            na, nb = to_num(a, n), to_num(b, n)
            if na is not None and nb is not None and num_kind(na) == num_kind(nb):
                t, bad = truth(c, n)
                err = or_err(bad if bad.any() else None, None)
                if na.err is not None:
                    err = or_err(err, na.err & t)
                if nb.err is not None:
                    err = or_err(err, nb.err & ~t & ~bad)
                return Num(np.where(t, na.values, nb.values), err)
        return per_category(scalar_ternary, [self.materialise(c), a, b], n)

    # -- comprehensions

    def comprehension(self, e: ast.Comprehension) -> Any:
        if e.iter_var2:
            raise Unsupported("two-variable comprehension")
        raw = self.eval(e.iter_range)
        if raw is LABELS and e.macro in ("all", "exists"):
            return self.quantify_labels(e)
        if is_scalar(raw) and not isinstance(raw, EvalErr) and e.macro in ("filter", "map"):
            out = self.select_items(e, raw)
            if out is not None:
                return out
        rng = self.materialise(raw)
        if not is_scalar(rng):
            # node-dependent range: run the whole fold once per distinct range value
            return per_category(lambda r: self.fold(e, r, scalar_only=True), [rng], self.n)
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
                true, err = truth(self.materialise(self.eval(body)), n)
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
        outputs: list[tuple[Any, Any]] = []  # (predicate, transformed element) per element
        try:
            for item in items:
                self.env[e.iter_var] = item
                self.env[e.accu_var] = []
                p = self.materialise(self.eval(pred))
                out = self.eval(transform)
                if not is_scalar(out):
                    raise Unsupported("node-dependent map transform")
                outputs.append((p, out))
        finally:
            self.env = saved
        if all_scalar(p for p, _ in outputs):
            return None
        code = np.zeros(n, dtype=np.int64)
        bad = np.zeros(n, dtype=bool)
        for i, (p, _) in enumerate(outputs):
            true, err = truth(p, n)
            code |= true.astype(np.int64) << i
            bad |= err
        # an error in any element's predicate (or a non-bool predicate) makes the whole result an error
        uniq, inverse = (
            dense_unique(code, 1 << len(outputs))
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
                if is_scalar(accu):
                    cond = self.eval(e.loop_condition)
                    if cond is False:
                        break
                step = self.eval(e.loop_step)
                if scalar_only and not is_scalar(step):
                    raise Unsupported("node-dependent comprehension body over a node-dependent range")
                accu = step
            self.env[e.accu_var] = accu
            return self.eval(e.result)
        finally:
            self.env = saved
