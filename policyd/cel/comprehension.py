"""Run-time helpers of the two-variable comprehensions (cel-go's comprehensions extension):
iteration over (index, value) of a list or (key, value) of a map, and `cel.@mapInsert`, the
accumulation step of `transformMap` and `transformMapEntry`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.syntax import MAP_INSERT
from policyd.cel.types import MapType, TypeParam
from policyd.cel.values import UInt
from policyd.errors import CelEvalError


def pairs(v: Any) -> Iterable[tuple[Any, Any]]:
    """(index, element) of a list or (key, value) of a map, for a two-variable comprehension."""
    if isinstance(v, list | tuple):
        return enumerate(v)
    if isinstance(v, Mapping):
        return v.items()
    raise CelEvalError(f"cannot range over {rt.type_name(v)}")


def map_insert(accu: dict[Any, Any], key_or_entry: Any, *value: Any) -> dict[Any, Any]:
    """`cel.@mapInsert(accu, key, value)` or `cel.@mapInsert(accu, {key: value, ...})`.

    `accu` is the comprehension's own accumulator (a fresh map per evaluation), so it is extended in
    place; a key already present is an error, as in cel-go.
    """
    if value:
        entries: Iterable[tuple[Any, Any]] = ((key_or_entry, value[0]),)
    elif isinstance(key_or_entry, Mapping):
        entries = key_or_entry.items()
    else:
        raise rt.no_overload("transformMapEntry", key_or_entry)
    for key, entry_value in entries:
        tk = type(key)
        if not (tk is str or tk is int or tk is bool or tk is UInt):
            raise CelEvalError(f"unsupported key type: {rt.type_name(key)}")
        if rt.map_lookup(accu, key)[0]:
            raise CelEvalError(f"insert failed: key {key!r} already exists")
        accu = rt.map_with(accu, key, entry_value)
    return accu


_K = TypeParam("K")
_V = TypeParam("V")


def comprehension_functions() -> dict[str, FunctionDecl]:
    """The declaration of `cel.@mapInsert` (only macros can call it: `@` starts no identifier)."""
    kv = MapType(_K, _V)
    return {
        MAP_INSERT: FunctionDecl(
            MAP_INSERT,
            (
                Overload("cel_mapInsert_map_key_value", (kv, _K, _V), kv, impl=map_insert),
                Overload("cel_mapInsert_map_map", (kv, kv), kv, impl=map_insert),
            ),
        )
    }
