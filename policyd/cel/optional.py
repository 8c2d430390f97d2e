"""Optional values (cel-go's optional library): the `optional_type(T)` type, its functions, and the
run-time helpers of optional list elements and map entries.

The value is `policyd.cel.values.OptionalValue`; selection, indexing, `has()` and equality on it are
in `policyd.cel.runtime` (`optional_select`, `optional_index`); the syntax (`a.?b`, `a[?k]`, `[?e]`,
`{?k: v}`, `optMap`, `optFlatMap`) is parsed by `policyd.cel.parser` and typed by the checker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.types import BOOL, INT, CelType, ListType, MapType, OpaqueType, TypeParam
from policyd.cel.values import (
    OPTIONAL_NONE,
    OPTIONAL_TYPE_NAME,
    Duration,
    OptionalValue,
    Timestamp,
    TypeValue,
)
from policyd.errors import CelEvalError

OPTIONAL_TYPE_VALUE = TypeValue(OPTIONAL_TYPE_NAME)


def optional_of(t: CelType) -> OpaqueType:
    """optional_type(t)."""
    return OpaqueType(OPTIONAL_TYPE_NAME, (t,))


def optional_param(t: CelType) -> CelType | None:
    """T of optional_type(T), or None when `t` is not an optional type."""
    if isinstance(t, OpaqueType) and t.name == OPTIONAL_TYPE_NAME and len(t.params) == 1:
        return t.params[0]
    return None


def of(value: Any) -> OptionalValue:
    """`optional.of(value)`."""
    return OptionalValue(value, True)


# cel-go's zero timestamp is Go's zero time.Time (time.IsZero): 0001-01-01T00:00:00Z, not the epoch
_GO_ZERO_TIME_NS = -62135596800 * 10**9


def _is_zero(value: Any) -> bool:
    if value is None or value is False:
        return True
    if type(value) is bool:
        return False
    if isinstance(value, int | float | str | bytes | list | tuple | Mapping):
        return not value
    if isinstance(value, Timestamp):
        return value.ns == _GO_ZERO_TIME_NS
    if isinstance(value, Duration):
        return value.ns == 0
    return False


def of_non_zero_value(value: Any) -> OptionalValue:
    """`optional.ofNonZeroValue(value)`: none for the zero value of its type (0, "", [], {}, null ...)."""
    return OPTIONAL_NONE if _is_zero(value) else OptionalValue(value, True)


def none() -> OptionalValue:
    """`optional.none()`."""
    return OPTIONAL_NONE


def _optional(value: Any, function: str) -> OptionalValue:
    if type(value) is not OptionalValue:
        raise rt.no_overload(function, value)
    return value


def has_value(o: Any) -> bool:
    """`o.hasValue()`."""
    return _optional(o, "hasValue").present


def value(o: Any) -> Any:
    """`o.value()`; an error on `optional.none()`."""
    opt = _optional(o, "value")
    if not opt.present:
        raise CelEvalError("optional.none() dereference")
    return opt.value


def or_value(o: Any, default: Any) -> Any:
    """`o.orValue(default)`."""
    opt = _optional(o, "orValue")
    return opt.value if opt.present else default


def or_optional(o: Any, other: Any) -> OptionalValue:
    """`o.or(other)`: `o` when it has a value, else `other` (an optional too)."""
    opt = _optional(o, "or")
    return opt if opt.present else _optional(other, "or")


def build_list(elements: list[Any], optional_indices: tuple[int, ...]) -> list[Any]:
    """A list literal with `?e` elements: those are unwrapped, or left out when absent."""
    out: list[Any] = []
    for i, element in enumerate(elements):
        if i in optional_indices:
            opt = _optional(element, "optional list element")
            if opt.present:
                out.append(opt.value)
        else:
            out.append(element)
    return out


def build_map(entries: list[tuple[Any, Any, bool]]) -> dict[Any, Any]:
    """A map literal with `?k: v` entries: their optional value is unwrapped, or the entry left out."""
    kept: list[tuple[Any, Any]] = []
    for key, entry_value, is_optional in entries:
        if is_optional:
            opt = _optional(entry_value, "optional map entry")
            if opt.present:
                kept.append((key, opt.value))
        else:
            kept.append((key, entry_value))
    return rt.make_map(kept)


_T = TypeParam("T")
_K = TypeParam("K")
_V = TypeParam("V")
_OPT_T = optional_of(_T)


def optional_functions() -> dict[str, FunctionDecl]:
    """The declarations of the optional library (also the `_[_]` overloads on optional lists and maps)."""
    decls = [
        FunctionDecl("optional.of", (Overload("optional_of", (_T,), _OPT_T, impl=of),)),
        FunctionDecl(
            "optional.ofNonZeroValue",
            (Overload("optional_ofNonZeroValue", (_T,), _OPT_T, impl=of_non_zero_value),),
        ),
        FunctionDecl("optional.none", (Overload("optional_none", (), _OPT_T, impl=none),)),
        FunctionDecl(
            "hasValue", (Overload("optional_hasValue", (_OPT_T,), BOOL, member=True, impl=has_value),)
        ),
        FunctionDecl("value", (Overload("optional_value", (_OPT_T,), _T, member=True, impl=value),)),
        FunctionDecl(
            "orValue", (Overload("optional_orValue_value", (_OPT_T, _T), _T, member=True, impl=or_value),)
        ),
        FunctionDecl(
            "or", (Overload("optional_or_optional", (_OPT_T, _OPT_T), _OPT_T, member=True, impl=or_optional),)
        ),
        FunctionDecl(
            "_[_]",
            (
                Overload(
                    "optional_list_index_int",
                    (optional_of(ListType(_V)), INT),
                    optional_of(_V),
                    impl=rt.index,
                ),
                Overload(
                    "optional_map_index_value",
                    (optional_of(MapType(_K, _V)), _K),
                    optional_of(_V),
                    impl=rt.index,
                ),
            ),
        ),
    ]
    return {d.name: d for d in decls}
