"""Which keys of a pod's leaf maps moved between two pods' values (run time of
`policyd.compiler.membership`).

`moved_keys(old, new, types)` walks two values of the same declared types together. They must be
alike everywhere except in the key sets of leaf maps (maps whose values are scalars; their values are
not compared: a rule accepted by `key_delta_safe` never reads them): lists of the same length, maps
that are not leaf maps and objects with the same keys in the same order, scalars equal and of the
same types. It returns the string keys in one leaf map but not in the other (numbers or other keys
never equal a label value), or None when the values differ in any other way.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from policyd.cel.types import CelType, ListType, MapType, ObjectType, OpaqueType, PrimitiveType
from policyd.evaluation.sameness import same_values


def is_leaf_map(t: CelType | None) -> bool:
    """A map whose values are scalars: only its keys are compared between two pods' values."""
    return isinstance(t, MapType) and isinstance(t.value, PrimitiveType | OpaqueType)


# declared type (by identity, kept alive here) -> `may_carry`: asked at every level of every walk of
# two pods' values, decided once per type (emptied when full: each policy load checks new types)
MAX_TYPES = 4096
_carrying: dict[int, tuple[CelType, bool]] = {}


def may_carry(t: CelType | None) -> bool:
    """True when a value of type `t` may hold a leaf map, or its type is not known exactly."""
    if t is None:
        return True
    hit = _carrying.get(id(t))
    if hit is None or hit[0] is not t:
        if len(_carrying) >= MAX_TYPES:
            _carrying.clear()
        hit = _carrying[id(t)] = (t, _may_carry(t, frozenset()))
    return hit[1]


def _may_carry(t: CelType | None, seen: frozenset[int]) -> bool:
    if isinstance(t, PrimitiveType | OpaqueType):
        return False
    if isinstance(t, MapType):
        return is_leaf_map(t) or _may_carry(t.key, seen) or _may_carry(t.value, seen)
    if isinstance(t, ListType):
        return _may_carry(t.elem, seen)
    if isinstance(t, ObjectType):
        if id(t) in seen:  # a type containing itself: its other fields decide
            return False
        inner = seen | {id(t)}
        return any(_may_carry(f, inner) for f in t.fields.values())
    return True  # dyn, type parameters, errors: not known


# (id of an old value, id of a new one, id of their type) -> (old, new, their moved keys or None)
Memo = dict[tuple[int, int, int], tuple[Any, Any, frozenset[str] | None]]


class _Differs(Exception):
    """The values differ other than in leaf map keys."""


def moved_keys(
    old: Any, new: Any, types: Sequence[CelType | None], memo: Memo | None = None
) -> frozenset[str] | None:
    """The string keys in one of a pair of corresponding leaf maps of `old` and `new` (tuples of one
    value per type of `types`) but not in the other; None when they differ in anything else (or
    either is not such a tuple). `memo` keeps the answers per pair of values for the next call (rules
    reading the same let compare the same two values)."""
    if type(old) is not tuple or type(new) is not tuple or not len(old) == len(new) == len(types):
        return None
    keys: set[str] = set()
    for a, b, t in zip(old, new, types, strict=True):
        hit = None if memo is None else memo.get((id(a), id(b), id(t)))
        if hit is None or hit[0] is not a or hit[1] is not b:
            found: set[str] = set()
            try:
                _walk(a, b, t, found)
                hit = (a, b, frozenset(found))
            except _Differs:
                hit = (a, b, None)
            if memo is not None:
                memo[(id(a), id(b), id(t))] = hit
        if hit[2] is None:
            return None
        keys |= hit[2]
    return frozenset(keys)


def _walk(a: Any, b: Any, t: CelType | None, keys: set[str]) -> None:
    if a is b:
        return
    if not may_carry(t):
        if not same_values(a, b):
            raise _Differs
        return
    if is_leaf_map(t):
        if type(a) is not dict or type(b) is not dict:
            raise _Differs
        added = list(itertools.filterfalse(a.__contains__, b))  # one pass in C (no set of either)
        keys.update(k for k in added if type(k) is str)
        if len(b) - len(added) < len(a):  # some of a's keys are not in b
            keys.update(k for k in itertools.filterfalse(b.__contains__, a) if type(k) is str)
        return
    if isinstance(t, ListType):
        if type(a) is not list or type(b) is not list or len(a) != len(b):
            raise _Differs
        for x, y in zip(a, b, strict=True):
            _walk(x, y, t.elem, keys)
        return
    if isinstance(t, MapType | ObjectType):
        if type(a) is not dict or type(b) is not dict or not same_values(list(a), list(b)):
            raise _Differs
        for k, x in a.items():
            field = t.value if isinstance(t, MapType) else t.fields.get(k)
            if field is None:
                raise _Differs
            _walk(x, b[k], field, keys)
        return
    raise _Differs  # a type not known exactly
