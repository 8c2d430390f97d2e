"""The values of a columnar plan evaluation and the operations on them that need no interpreter.

Values are scalars (pod-only parts: plain CEL runtime values; an error is an `EvalErr` value so `&&`,
`||` absorb it as CEL does), `Num` (a numpy column of bool, int64 or float64 with an error mask) and
`Cat` (a categorical column: codes into a list of values; an operation on it runs once per distinct
value), plus the references to the node and its maps (`NODE`, `LABELS`, `MapRef`) the interpreter
resolves through the columns. `Unsupported` says a plan cannot evaluate an expression exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from policyd.cel import runtime as rt

BoolArray = npt.NDArray[np.bool_]
AnyArray = npt.NDArray[Any]

INT_SAFE = float(2**62)


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
    # the categorical it was computed from value by value, when it was (same rows; `per_category`
    # then pairs it with others over the same codes instead of recoding the column)
    over: Cat | None = None


@dataclass
class Cat:
    """A node-dependent categorical value: `values[codes[row]]` (values may hold `EvalErr`)."""

    codes: npt.NDArray[np.intp]
    values: list[Any]
    # value -> code of `values[:strings]`, all strings, when the column keeps that index (labels):
    # `x in map` then looks up the map's keys instead of testing every value
    index: Mapping[Any, int] | None = None
    strings: int = 0


class NodeRef:
    """The `node` variable (resolved through its fields)."""


@dataclass(frozen=True)
class MapRef:
    """`node.<resource map>`: only indexing and `in` with a pod-only key are columns."""

    name: str


class LabelsRef:
    """`node.labels`: indexing and `in` use the per-key columns; anything else the whole-map column."""


NODE = NodeRef()
LABELS = LabelsRef()

ARITH = {"_+_": rt.add, "_-_": rt.sub, "_*_": rt.mul, "_/_": rt.div, "_%_": rt.mod}
COMPARE = {"_==_": rt.eq, "_!=_": rt.ne, "_<_": rt.lt, "_<=_": rt.le, "_>_": rt.gt, "_>=_": rt.ge}
OPERATORS: dict[str, Callable[..., Any]] = {
    **ARITH,
    **COMPARE,
    "-_": rt.neg,
    "!_": rt.logical_not,
    "_[_]": rt.index,
    "@in": rt.in_,
}
LOGIC = frozenset({"_&&_", "_||_", "_?_:_", "@not_strictly_false"})


_NODE_DEPENDENT = frozenset({Num, Cat, NodeRef, MapRef, LabelsRef})  # final classes: no subclasses


def is_scalar(v: Any) -> bool:
    """True for a pod-only value (not a column, categorical or node reference)."""
    return type(v) not in _NODE_DEPENDENT


def all_scalar(values: Iterable[Any]) -> bool:
    """True when every value is pod-only."""
    return _NODE_DEPENDENT.isdisjoint(map(type, values))


def scalar_kind(v: Any) -> str:
    """'b', 'i', 'f' for scalars usable in a column, else 'o'."""
    t = type(v)
    if t is bool:
        return "b"
    if t is int:
        return "i"
    if t is float:
        return "f"
    return "o"


def num_kind(n: Num) -> str:
    """'b', 'i', 'f' for a bool / int64 / float64 column, else 'o'."""
    return {"b": "b", "i": "i", "f": "f"}.get(n.values.dtype.kind, "o")


def or_err(a: BoolArray | None, b: BoolArray | None) -> BoolArray | None:
    """The union of two error masks (None: no errors)."""
    if a is None:
        return b
    if b is None:
        return a
    return a | b


def err_of(value: Any, n: int) -> BoolArray | None:
    """Error mask of a value (None: no errors)."""
    if isinstance(value, Num):
        return value.err
    if isinstance(value, Cat):
        bad = np.fromiter((isinstance(v, EvalErr) for v in value.values), dtype=bool, count=len(value.values))
        return bad[value.codes] if bad.any() else None
    if isinstance(value, EvalErr):
        return np.ones(n, dtype=bool)
    return None


def cat_to_num(c: Cat) -> Num | None:
    """A categorical of bool / int / float values (errors allowed) as a column, else None."""
    kinds = {scalar_kind(v) for v in c.values if not isinstance(v, EvalErr)}
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
        uniq, inverse = dense_unique(x.values.astype(np.intp), 2)
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
    """Any value as a categorical over `n` rows."""
    if isinstance(value, Cat):
        return value
    if isinstance(value, Num):
        return value.over if value.over is not None else _num_to_cat(value)
    return Cat(np.zeros(n, dtype=np.intp), [value])


def dense_unique(codes: AnyArray, bound: int) -> tuple[AnyArray, AnyArray]:
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
    uniq, inverse = dense_unique(joint, total)
    tuples = []
    for j in uniq.tolist():
        parts = []
        for c in reversed(cats):
            parts.append(j % len(c.values))
            j //= len(c.values)
        tuples.append(tuple(reversed(parts)))
    return inverse.astype(np.intp), tuples


def _present(cat: Cat) -> tuple[list[Any], npt.NDArray[np.intp]]:
    """The values `cat`'s rows use and the rows' codes into them (the whole vocabulary when small)."""
    values = cat.values
    if len(values) > len(cat.codes) + 64:
        # a vocabulary larger than the rows (hostnames over a window): only the codes present
        uniq, inverse = np.unique(cat.codes, return_inverse=True)
        return [values[c] for c in uniq.tolist()], inverse.astype(np.intp)
    return values, cat.codes


def _column(codes: npt.NDArray[np.intp], results: list[Any]) -> Cat | Num:
    """Per-value results as a column: bools (and errors) as a bool `Num` with an error mask, so `!`,
    `&&`, `||` stay vectorised; anything else as a categorical."""
    kinds = set(map(type, results))
    if kinds == {bool}:
        return Num(np.array(results, dtype=bool)[codes], over=Cat(codes, results))
    if kinds == {bool, EvalErr}:
        bad = np.fromiter((type(r) is EvalErr for r in results), dtype=bool, count=len(results))
        true = np.fromiter((r is True for r in results), dtype=bool, count=len(results))
        err = bad[codes]
        return Num(true[codes], err if err.any() else None, over=Cat(codes, results))
    return Cat(codes, results)


def _per_value(fn: Callable[..., Any], args: list[Any], pos: int, cat: Cat) -> Cat | Num:
    """`per_category` with one categorical argument, at `pos`: `fn` once per value present."""
    before, after = args[:pos], args[pos + 1 :]
    present, codes = _present(cat)
    if not before and not after:
        return _column(codes, [fn(v) for v in present])
    return _column(codes, [fn(*before, v, *after) for v in present])


def member_of(cat: Cat, container: Any) -> Cat | Num:
    """CEL `x in container` for a categorical `x` and a pod-only map: a string's membership is a
    dictionary lookup (`runtime.map_lookup`); other values (errors, numbers) take the operator."""
    index, strings = cat.index, cat.strings
    if index is not None and isinstance(container, Mapping):
        values = cat.values
        if len(values) > len(cat.codes) + 64:
            # a vocabulary larger than the rows (hostnames over a window): only the codes present
            uniq, inverse = np.unique(cat.codes, return_inverse=True)
            used, codes = uniq, inverse.astype(np.intp)
        else:
            used, codes = np.arange(len(values)), cat.codes
        if len(container) < len(used):  # look the map's keys up among the values
            hit = np.zeros(len(values), dtype=bool)
            common = container.keys() & index.keys()  # strings only: the index holds nothing else
            if common:
                found = np.fromiter(map(index.__getitem__, common), dtype=np.intp, count=len(common))
                hit[found[found < strings]] = True
            true = hit[used]
        else:  # look the values (the strings among them) up in the map, in C
            true = np.zeros(len(used), dtype=bool)
            named = np.flatnonzero(used < strings)
            if named.size:
                keys = map(values.__getitem__, used[named].tolist())
                true[named] = np.fromiter(map(container.__contains__, keys), dtype=bool, count=named.size)
        results: list[Any] = true.tolist()
        bad = np.zeros(len(used), dtype=bool)
        for i in np.flatnonzero(used >= strings).tolist():  # values outside the index (a missing key)
            r = results[i] = guarded(rt.in_)(values[used[i]], container)
            true[i], bad[i] = r is True, type(r) is not bool
        err = bad[codes]
        # `over`: what it was computed from, so it pairs with other reads of the label without recoding
        return Num(true[codes] & ~err, err if err.any() else None, over=Cat(codes, results))
    present, codes = _present(cat)
    slow = guarded(rt.in_)
    return _column(codes, [v in container if type(v) is str else slow(v, container) for v in present])


def per_category(fn: Callable[..., Any], args: list[Any], n: int) -> Any:
    """Apply scalar `fn` once per distinct combination of categorical arguments."""
    cat_positions = [i for i, a in enumerate(args) if not is_scalar(a)]
    if not cat_positions:
        return fn(*args)
    cats = [_as_cat(args[i], n) for i in cat_positions]
    if len(cats) == 1:
        return _per_value(fn, args, cat_positions[0], cats[0])
    codes, combos = _combine(cats)
    values = []
    for combo in combos:
        scalar_args = list(args)
        for pos, cat, code in zip(cat_positions, cats, combo, strict=True):
            scalar_args[pos] = cat.values[code]
        values.append(fn(*scalar_args))
    return _column(codes, values)


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
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


def scalar_and(a: Any, b: Any) -> Any:
    """CEL `&&` of two scalars (an error absorbed by a false side)."""
    if a is False or b is False:
        return False
    if a is True and b is True:
        return True
    if isinstance(a, EvalErr):
        return a
    if isinstance(b, EvalErr):
        return b
    return EvalErr(str(rt.no_overload("_&&_", a, b)))


def scalar_or(a: Any, b: Any) -> Any:
    """CEL `||` of two scalars (an error absorbed by a true side)."""
    if a is True or b is True:
        return True
    if a is False and b is False:
        return False
    if isinstance(a, EvalErr):
        return a
    if isinstance(b, EvalErr):
        return b
    return EvalErr(str(rt.no_overload("_||_", a, b)))


def scalar_ternary(c: Any, a: Any, b: Any) -> Any:
    """CEL `c ? a : b` of scalars."""
    if c is True:
        return a
    if c is False:
        return b
    if isinstance(c, EvalErr):
        return c
    return EvalErr(str(rt.no_overload("_?_:_", c)))


def not_strictly_false(a: Any) -> bool:
    """CEL `@not_strictly_false`: True unless `a` is False."""
    return a is not False


# ------------------------------------------------------------------------------------------------
# vector operations


def truth(v: Any, n: int) -> tuple[BoolArray, BoolArray]:
    """(value is True, value is an error or not a bool) per node."""
    if is_scalar(v):
        if v is True or v is False:
            return np.full(n, v, dtype=bool), np.zeros(n, dtype=bool)
        return np.zeros(n, dtype=bool), np.ones(n, dtype=bool)
    if isinstance(v, Cat):
        true = np.array([x is True for x in v.values], dtype=bool)
        bad = np.array([x is not True and x is not False for x in v.values], dtype=bool)
        return true[v.codes], bad[v.codes]
    if num_kind(v) != "b":
        return np.zeros(n, dtype=bool), np.ones(n, dtype=bool)
    bad = v.err if v.err is not None else np.zeros(n, dtype=bool)
    return v.values & ~bad, bad
