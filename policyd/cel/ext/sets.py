"""cel-go's sets extension: `sets.contains`, `sets.equivalent`, `sets.intersects` over lists.

Membership is CEL equality (`1 == 1.0`); duplicates do not matter.
"""

from __future__ import annotations

import functools
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.types import BOOL, ListType, TypeParam

T = TypeParam("T")
LIST_T = ListType(T)


def _list(v: Any, name: str, other: Any) -> list[Any] | tuple[Any, ...]:
    if isinstance(v, list | tuple):
        return v
    raise rt.no_overload(name, v, other)


def contains(a: Any, b: Any) -> bool:
    """`sets.contains(a, b)`: every element of `b` is in `a`."""
    outer, inner = _list(a, "sets.contains", b), _list(b, "sets.contains", a)
    return all(rt.in_(x, outer) for x in inner)


def equivalent(a: Any, b: Any) -> bool:
    """`sets.equivalent(a, b)`: `a` and `b` contain each other."""
    return contains(a, b) and contains(b, a)


def intersects(a: Any, b: Any) -> bool:
    """`sets.intersects(a, b)`: some element is in both."""
    left, right = _list(a, "sets.intersects", b), _list(b, "sets.intersects", a)
    return any(rt.in_(x, right) for x in left)


@functools.cache
def set_functions() -> dict[str, FunctionDecl]:
    """The sets extension's declarations, by (namespaced) function name."""
    decls = [
        FunctionDecl(
            "sets.contains", (Overload("list_sets_contains_list", (LIST_T, LIST_T), BOOL, impl=contains),)
        ),
        FunctionDecl(
            "sets.equivalent",
            (Overload("list_sets_equivalent_list", (LIST_T, LIST_T), BOOL, impl=equivalent),),
        ),
        FunctionDecl(
            "sets.intersects",
            (Overload("list_sets_intersects_list", (LIST_T, LIST_T), BOOL, impl=intersects),),
        ),
    ]
    return {d.name: d for d in decls}
