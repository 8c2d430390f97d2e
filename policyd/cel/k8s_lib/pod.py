"""Kubernetes' pod library: `allContainers(spec)`, every container of a pod spec in one list.

The list holds `initContainers`, then `containers`, then `ephemeralContainers`; a field that is absent
or null counts as empty, one that is present but not a list is an error. A list (or any value that
is not a map) given as the spec has none of the fields; a scalar is no overload.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.types import DYN, list_of
from policyd.errors import CelEvalError

CONTAINER_FIELDS = ("initContainers", "containers", "ephemeralContainers")


def all_containers(spec: Any) -> list[Any]:
    """`allContainers(spec)`."""
    if isinstance(spec, list | tuple):
        return []  # indexing a list by a field name finds nothing
    if not isinstance(spec, Mapping):
        raise rt.no_overload("allContainers", spec)
    out: list[Any] = []
    for field in CONTAINER_FIELDS:
        value = spec.get(field)
        if value is None:
            continue
        if not isinstance(value, list | tuple):
            raise CelEvalError(
                f"allContainers: {field} is present but is not a list (got {rt.type_name(value)})"
            )
        out.extend(value)
    return out


@functools.cache
def pod_functions() -> dict[str, FunctionDecl]:
    """The pod library's declarations, by function name."""
    overload = Overload("pod_spec_all_containers", (DYN,), list_of(DYN), impl=all_containers)
    return {"allContainers": FunctionDecl("allContainers", (overload,))}
