"""Column arithmetic, comparisons, conversions and logic of a plan evaluation (numpy over every row).

Each operation reproduces the CEL runtime's result exactly or raises `Unsupported` (int64 arithmetic
near overflow); errors travel in the columns' error masks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from policyd.evaluation.columnar import (
    COMPARE,
    INT_SAFE,
    AnyArray,
    Cat,
    Num,
    Unsupported,
    cat_to_num,
    num_kind,
    or_err,
    per_category,
    scalar_and,
    scalar_kind,
    scalar_or,
    truth,
)


def logic(op: str, a: Any, b: Any, n: int) -> Any:
    """CEL `&&` / `||` of node-dependent values (per category for categoricals, else over columns)."""
    if isinstance(a, Cat) and isinstance(b, Cat | bool) or isinstance(b, Cat) and isinstance(a, bool):
        return per_category(scalar_and if op == "_&&_" else scalar_or, [a, b], n)
    ta, ea = truth(a, n)
    tb, eb = truth(b, n)
    fa, fb = ~ta & ~ea, ~tb & ~eb
    if op == "_&&_":
        decided_false = fa | fb
        err = (ea | eb) & ~decided_false
        return Num(ta & tb & ~err, err if err.any() else None)
    decided_true = ta | tb
    err = (ea | eb) & ~decided_true
    return Num(decided_true, err if err.any() else None)


def to_num(v: Any, n: int) -> Num | None:
    """A value as a column over `n` rows, or None when it does not fit the column model."""
    if isinstance(v, Num):
        return v
    if isinstance(v, Cat):
        return cat_to_num(v)
    k = scalar_kind(v)
    if k == "o":
        return None
    dtype = {"b": bool, "i": np.int64, "f": np.float64}[k]
    return Num(np.full(n, v, dtype=dtype))


def _max_abs(x: Num) -> float:
    if len(x.values) == 0:
        return 0.0
    return float(np.max(np.abs(x.values.astype(np.float64))))


def column_op(op: str, args: list[Any], n: int) -> Any:
    """Column arithmetic / comparison; None when the operands do not fit the column model."""
    nums = [to_num(a, n) for a in args]
    if any(x is None for x in nums):
        return None
    xs: list[Num] = [x for x in nums if x is not None]
    kinds = [num_kind(x) for x in xs]
    err = None
    for operand in xs:
        err = or_err(err, operand.err)
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
        if op in COMPARE:
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
            err = or_err(err, zero)
        return Num(out, err)


def convert(fn: str, x: Any, n: int) -> Any:
    """`int(column)` / `double(column)`; None when not a plain column conversion."""
    if not isinstance(x, Num):
        return None
    kind = num_kind(x)
    if fn == "double" and kind in "if":
        return Num(x.values.astype(np.float64), x.err)
    if fn == "int" and kind == "i":
        return x
    if fn == "int" and kind == "f":
        v = x.values
        bad = np.isnan(v) | ~((v > -9223372036854775808.0) & (v < 9223372036854775808.0))
        safe = np.where(bad, 0.0, v)
        return Num(np.trunc(safe).astype(np.int64), or_err(x.err, bad if bad.any() else None))
    return None
