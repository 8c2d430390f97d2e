"""Kubernetes' list library: `sum`, `min`, `max`, `indexOf`, `lastIndexOf`, `isSorted` on lists.

As k8s.io/apiserver/pkg/cel/library/lists.go: element types must be comparable (ints, uints, doubles,
strings, bytes, bools, durations, timestamps); `min`/`max` of an empty list are errors.
"""

from __future__ import annotations

import functools
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl
from policyd.cel.env import member_overload as _m
from policyd.cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    INT,
    STRING,
    TIMESTAMP,
    UINT,
    CelType,
    ListType,
    TypeParam,
)
from policyd.cel.values import Duration, UInt
from policyd.errors import CelEvalError

A = TypeParam("A")
LIST_A = ListType(A)

SUMMABLE: tuple[tuple[str, CelType, Any], ...] = (
    ("int", INT, 0),
    ("uint", UINT, UInt(0)),
    ("double", DOUBLE, 0.0),
    ("duration", DURATION, Duration(0)),
)
"""Element types `sum()` accepts: (overload name, type, the sum of an empty list)."""
COMPARABLE: tuple[tuple[str, CelType], ...] = (
    ("int", INT),
    ("uint", UINT),
    ("double", DOUBLE),
    ("bool", BOOL),
    ("duration", DURATION),
    ("timestamp", TIMESTAMP),
    ("string", STRING),
    ("bytes", BYTES),
)
"""Element types `min()`, `max()` and `isSorted()` accept."""


def list_sum(v: Any, zero: Any = 0) -> Any:
    """`list.sum()` of ints, uints, doubles or durations (`zero`, of the element type, when empty)."""
    items = rt.list_arg(v, "sum")
    if not items:
        return zero
    total = items[0]
    for x in items[1:]:
        total = rt.add(total, x)
    return total


def _extreme(v: Any, name: str, better: Any) -> Any:
    items = rt.list_arg(v, name)
    if not items:
        raise CelEvalError(f"{name} called on empty list")
    best = items[0]
    for x in items[1:]:
        if better(x, best):
            best = x
    return best


def list_min(v: Any) -> Any:
    """`list.min()`: the first smallest element; an empty list is an error."""
    return _extreme(v, "min", rt.lt)


def list_max(v: Any) -> Any:
    """`list.max()`: the first largest element; an empty list is an error."""
    return _extreme(v, "max", rt.gt)


def list_index_of(v: Any, x: Any) -> int:
    """`list.indexOf(x)`: first index, -1 when absent."""
    for i, item in enumerate(rt.list_arg(v, "indexOf")):
        if rt.eq(item, x):
            return i
    return -1


def list_last_index_of(v: Any, x: Any) -> int:
    """`list.lastIndexOf(x)`: last index, -1 when absent."""
    items = rt.list_arg(v, "lastIndexOf")
    for i in range(len(items) - 1, -1, -1):
        if rt.eq(items[i], x):
            return i
    return -1


def list_is_sorted(v: Any) -> bool:
    """`list.isSorted()`."""
    items = rt.list_arg(v, "isSorted")
    return all(rt.le(items[i], items[i + 1]) for i in range(len(items) - 1))


@functools.cache
def list_functions() -> dict[str, FunctionDecl]:
    """The Kubernetes list library's declarations, by function name."""
    decls = [
        FunctionDecl(
            "sum",
            tuple(
                _m(f"list_{n}_sum_{n}", (ListType(t),), t, functools.partial(list_sum, zero=zero))
                for n, t, zero in SUMMABLE
            ),
        ),
        FunctionDecl(
            "min", tuple(_m(f"list_{n}_min_{n}", (ListType(t),), t, list_min) for n, t in COMPARABLE)
        ),
        FunctionDecl(
            "max", tuple(_m(f"list_{n}_max_{n}", (ListType(t),), t, list_max) for n, t in COMPARABLE)
        ),
        FunctionDecl("indexOf", (_m("list_a_index_of_int", (LIST_A, A), INT, list_index_of),)),
        FunctionDecl("lastIndexOf", (_m("list_a_last_index_of_int", (LIST_A, A), INT, list_last_index_of),)),
        FunctionDecl(
            "isSorted",
            tuple(
                _m(f"list_{n}_is_sorted_bool", (ListType(t),), BOOL, list_is_sorted) for n, t in COMPARABLE
            ),
        ),
    ]
    return {d.name: d for d in decls}
