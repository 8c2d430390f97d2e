"""cel-go's lists extension (version 2): `slice`, `flatten`, `reverse`, `distinct`, `sort`,
`lists.range`, and `@sortByAssociatedKeys`, the function cel-go's `sortBy` macro expands to; with
`first()` and `last()` (optional values; cel-go declares them in its optional library).

Elements compare and match with CEL equality and ordering (`policyd.cel.runtime`); `sort` needs
elements of one comparable type.
"""

from __future__ import annotations

import functools
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.env import member_overload as _m
from policyd.cel.k8s_lib.lists import COMPARABLE
from policyd.cel.optional import optional_of
from policyd.cel.types import DYN, INT, ListType, TypeParam
from policyd.cel.values import OPTIONAL_NONE, OptionalValue
from policyd.errors import CelEvalError

T = TypeParam("T")
LIST_T = ListType(T)


def slice_(v: Any, start: Any, end: Any) -> list[Any]:
    """`list.slice(start, end)`: the elements from start (inclusive) to end (exclusive)."""
    items = rt.list_arg(v, "slice")
    if type(start) is not int or type(end) is not int:
        raise rt.no_overload("slice", v, start, end)
    if start < 0 or end < 0:
        raise CelEvalError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise CelEvalError(
            f"cannot slice({start}, {end}), start index must be less than or equal to end index"
        )
    if len(items) < end:
        raise CelEvalError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return list(items[start:end])


def _flatten(items: list[Any] | tuple[Any, ...], depth: int) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if depth > 0 and isinstance(x, list | tuple):
            out.extend(_flatten(x, depth - 1))
        else:
            out.append(x)
    return out


def flatten(v: Any, depth: Any = 1) -> list[Any]:
    """`list.flatten([depth])`: nested lists spliced in, `depth` levels deep (default 1)."""
    items = rt.list_arg(v, "flatten")
    if type(depth) is not int:
        raise rt.no_overload("flatten", v, depth)
    if depth < 0:
        raise CelEvalError("level must be non-negative")
    return _flatten(items, depth)


def reverse(v: Any) -> list[Any]:
    """`list.reverse()`."""
    return list(rt.list_arg(v, "reverse"))[::-1]


def distinct(v: Any) -> list[Any]:
    """`list.distinct()`: the first of each group of equal elements, in order (CEL equality)."""
    out: list[Any] = []
    for x in rt.list_arg(v, "distinct"):
        if not any(rt.eq(x, seen) for seen in out):
            out.append(x)
    return out


def _compare(a: Any, b: Any) -> int:
    return -1 if rt.lt(a, b) else (1 if rt.lt(b, a) else 0)


def sort_by_associated_keys(v: Any, keys: Any) -> list[Any]:
    """`@sortByAssociatedKeys(list, keys)`: the list ordered by the key at the same position."""
    items = rt.list_arg(v, "@sortByAssociatedKeys")
    key_list = rt.list_arg(keys, "@sortByAssociatedKeys")
    if len(items) != len(key_list):
        raise CelEvalError(
            "@sortByAssociatedKeys() expected a list of the same size as the associated keys list, "
            f"but got {len(items)} and {len(key_list)} elements respectively"
        )
    if not items:
        return []
    kind = type(key_list[0])
    if kind not in rt.ORDERED_TYPES:
        raise CelEvalError("list elements must be comparable")
    if any(type(k) is not kind for k in key_list):
        raise CelEvalError("list elements must have the same type")

    def by_key(i: int, j: int) -> int:
        return _compare(key_list[i], key_list[j])

    order = sorted(range(len(items)), key=functools.cmp_to_key(by_key))
    return [items[i] for i in order]


def sort(v: Any) -> list[Any]:
    """`list.sort()`: ascending; the elements must be of one comparable type."""
    return sort_by_associated_keys(v, v)


def first(v: Any) -> OptionalValue:
    """`list.first()`: the first element, none when the list is empty."""
    items = rt.list_arg(v, "first")
    return OptionalValue(items[0], True) if items else OPTIONAL_NONE


def last(v: Any) -> OptionalValue:
    """`list.last()`: the last element, none when the list is empty."""
    items = rt.list_arg(v, "last")
    return OptionalValue(items[-1], True) if items else OPTIONAL_NONE


def lists_range(n: Any) -> list[int]:
    """`lists.range(n)`: [0, 1, ..., n - 1] (empty when n <= 0)."""
    if type(n) is not int:
        raise rt.no_overload("lists.range", n)
    return list(range(n))


@functools.cache
def list_functions() -> dict[str, FunctionDecl]:
    """The lists extension's declarations, by function name."""
    decls = [
        FunctionDecl("slice", (_m("list_slice", (LIST_T, INT, INT), LIST_T, slice_),)),
        FunctionDecl(
            "flatten",
            (
                _m("list_flatten", (ListType(LIST_T),), LIST_T, flatten),
                _m("list_flatten_int", (ListType(DYN), INT), ListType(DYN), flatten),
            ),
        ),
        FunctionDecl("reverse", (_m("list_reverse", (LIST_T,), LIST_T, reverse),)),
        FunctionDecl("distinct", (_m("list_distinct", (LIST_T,), LIST_T, distinct),)),
        FunctionDecl(
            "sort", tuple(_m(f"list_{n}_sort", (ListType(t),), ListType(t), sort) for n, t in COMPARABLE)
        ),
        FunctionDecl(
            "@sortByAssociatedKeys",
            tuple(
                # a global function, as cel-go declares it (the `sortBy` macro calls it so)
                Overload(
                    f"list_{n}_sortByAssociatedKeys",
                    (LIST_T, ListType(t)),
                    LIST_T,
                    impl=sort_by_associated_keys,
                )
                for n, t in COMPARABLE
            ),
        ),
        FunctionDecl("first", (_m("list_first", (LIST_T,), optional_of(T), first),)),
        FunctionDecl("last", (_m("list_last", (LIST_T,), optional_of(T), last),)),
        FunctionDecl("lists.range", (Overload("lists_range", (INT,), ListType(INT), impl=lists_range),)),
    ]
    return {d.name: d for d in decls}
