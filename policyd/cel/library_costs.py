"""Estimated costs of the library functions (cel-go extensions, Kubernetes' libraries), by overload id.

`with_costs` gives each library overload its `Overload.cost`, a function of the size estimates of
its receiver and arguments (characters of strings, elements of lists, 1 for scalars) that
`policyd.cel.cost` calls; the operators and the standard functions keep `policyd.cel.cost`'s rules.
The unit is cel-go's; a string scan costs a tenth of a unit per character, as in cel-go.

Overloads missing from `COSTS` cost 1 and are listed in `CONSTANT` (checked by a test), so a new
function cannot arrive without a decision about its cost.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

from policyd.cel.cost import DEFAULT_LIST_SIZE, DEFAULT_STRING_SIZE, STRING_TRAVERSAL_FACTOR, regex_cost
from policyd.cel.env import FunctionDecl

Cost = Callable[..., int]


def _scan(position: int) -> Cost:
    """A scan of the string at `position` (receiver 0)."""

    def cost(*sizes: int) -> int:
        return max(1, math.ceil(sizes[position] * STRING_TRAVERSAL_FACTOR))

    return cost


def _linear(position: int) -> Cost:
    """One step per element of the list at `position`."""

    def cost(*sizes: int) -> int:
        return max(1, sizes[position])

    return cost


def _quadratic(*sizes: int) -> int:
    return max(1, sizes[0] * sizes[0])


def _sort(*sizes: int) -> int:
    n = sizes[0]
    return max(1, n * max(1, math.ceil(math.log2(n + 1))))


def _product(*sizes: int) -> int:
    return max(1, sizes[0] * sizes[1])


def _arguments(*sizes: int) -> int:
    return max(1, len(sizes))


def _format(*sizes: int) -> int:
    return max(1, math.ceil(sizes[0] * STRING_TRAVERSAL_FACTOR)) + sizes[1]


def _regex(*sizes: int) -> int:
    return regex_cost(sizes[0], sizes[1])


def _constant(value: int) -> Cost:
    def cost(*_sizes: int) -> int:
        return value

    return cost


# a named format validates with regular expressions of at most 60 characters (Kubernetes' MaxRegexSize)
_FORMAT_PATTERN_SIZE = 60
_COMPARABLE = ("int", "uint", "double", "bool", "duration", "timestamp", "string", "bytes")

COSTS: dict[str, Cost] = {
    # strings
    **{
        oid: _scan(0)
        for oid in (
            "string_char_at_int",
            "string_index_of_string",
            "string_index_of_string_int",
            "string_last_index_of_string",
            "string_last_index_of_string_int",
            "string_lower_ascii",
            "string_upper_ascii",
            "string_replace_string_string",
            "string_replace_string_string_int",
            "string_split_string",
            "string_split_string_int",
            "string_substring_int",
            "string_substring_int_int",
            "string_trim",
            "string_reverse",
            "strings_quote",
            "string_jsonpatch_escapeKey_string",
            "base64_encode_bytes",
            "base64_decode_string",
            "string_to_ip",
            "string_to_cidr",
            "is_ip",
            "is_cidr",
            "ip_is_canonical",
            "string_to_quantity",
            "is_quantity_string",
            "string_to_url",
            "is_url_string",
            "string_to_semver",
            "string_bool_to_semver",
            "is_semver_string",
            "is_semver_string_bool",
        )
    },
    "string_format": _format,
    "list_join": _linear(0),
    "list_join_string": _linear(0),
    "string_find_string": _regex,
    "string_find_all_string": _regex,
    "string_find_all_string_int": _regex,
    "cidr_contains_ip_string": _scan(1),
    "cidr_contains_cidr_string": _scan(1),
    "url_get_escaped_path": _constant(math.ceil(DEFAULT_STRING_SIZE * STRING_TRAVERSAL_FACTOR)),
    "url_get_query": _constant(math.ceil(DEFAULT_STRING_SIZE * STRING_TRAVERSAL_FACTOR)),
    "format-validate": lambda *sizes: regex_cost(sizes[1], _FORMAT_PATTERN_SIZE),
    # lists and sets
    **{oid: _linear(0) for oid in ("list_slice", "list_flatten", "list_flatten_int", "list_reverse")},
    "list_distinct": _quadratic,
    **{f"list_{t}_sort": _sort for t in _COMPARABLE},
    **{f"list_{t}_sortByAssociatedKeys": _sort for t in _COMPARABLE},
    "lists_range": _constant(DEFAULT_LIST_SIZE),
    "list_sets_contains_list": _product,
    "list_sets_equivalent_list": _product,
    "list_sets_intersects_list": _product,
    **{f"list_{t}_sum_{t}": _linear(0) for t in ("int", "uint", "double", "duration")},
    **{f"list_{t}_{f}_{t}": _linear(0) for t in _COMPARABLE for f in ("min", "max")},
    **{f"list_{t}_is_sorted_bool": _linear(0) for t in _COMPARABLE},
    "list_a_index_of_int": _linear(0),
    "list_a_last_index_of_int": _linear(0),
    # math: over a list, one step per element; over arguments, one per argument
    **{f"math_{f}_list_{t}": _linear(0) for f in ("greatest", "least") for t in ("int", "uint", "double")},
}
"""Overload id -> cost of one call as a function of the operands' size estimates."""

CONSTANT_FUNCTIONS = frozenset(
    {
        "cidr",
        "ip",
        "string",
        "family",
        "isUnspecified",
        "isLoopback",
        "isLinkLocalMulticast",
        "isLinkLocalUnicast",
        "isGlobalUnicast",
        "containsIP",
        "containsCIDR",
        "masked",
        "prefixLength",
        "isMask",
        "add",
        "sub",
        "mul",
        "div",
        "divInt",
        "isGreaterThan",
        "isLessThan",
        "compareTo",
        "sign",
        "isInteger",
        "asInteger",
        "asApproximateFloat",
        "getScheme",
        "getHost",
        "getHostname",
        "getPort",
        "major",
        "minor",
        "patch",
        "format.named",
        "first",
        "last",
        "math.ceil",
        "math.floor",
        "math.round",
        "math.trunc",
        "math.isInf",
        "math.isNaN",
        "math.isFinite",
        "math.abs",
        "math.sign",
        "math.sqrt",
        "math.bitAnd",
        "math.bitOr",
        "math.bitXor",
        "math.bitNot",
        "math.bitShiftLeft",
        "math.bitShiftRight",
        # Kubernetes' image and pod libraries: cost.go has no case for them, so a call costs 1
        "image",
        "isImage",
        "containsDigest",
        "registry",
        "repository",
        "identifier",
        "tag",
        "digest",
        "allContainers",
    }
)
"""Functions whose overloads not in `COSTS` cost 1 (fixed-size operands, e.g. an IP or a number, or no
case in Kubernetes' cost estimator)."""


def _cost_of(decl: FunctionDecl, overload_id: str) -> Cost | None:
    if overload_id in COSTS:
        return COSTS[overload_id]
    if decl.name in ("math.greatest", "math.least"):
        return _arguments
    if decl.name.startswith("format."):
        return _constant(1)
    return None


def with_costs(library: Mapping[str, FunctionDecl]) -> dict[str, FunctionDecl]:
    """The library's declarations with each overload's `cost` from `COSTS` (or its fixed rule)."""
    out: dict[str, FunctionDecl] = {}
    for name, decl in library.items():
        overloads = tuple(
            o
            if o.cost is not None or _cost_of(decl, o.id) is None
            else dataclasses.replace(o, cost=_cost_of(decl, o.id))
            for o in decl.overloads
        )
        out[name] = FunctionDecl(name, overloads)
    return out
