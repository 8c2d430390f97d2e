"""Kubernetes' JSONPatch library (1.32): `jsonpatch.escapeKey(key)`.

A key escaped for a JSON Pointer path segment (RFC 6901): `~` becomes `~0` and `/` becomes `~1`, in
one pass, so `"/metadata/labels/" + jsonpatch.escapeKey("k8s.io/my~label")` is
`/metadata/labels/k8s.io~1my~0label`.
"""

from __future__ import annotations

import functools
from typing import Any

from policyd.cel import runtime as rt
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.types import STRING

_ESCAPES = str.maketrans({"~": "~0", "/": "~1"})


def escape_key(key: Any) -> str:
    """`jsonpatch.escapeKey(key)`."""
    return rt.string_arg(key, "jsonpatch.escapeKey").translate(_ESCAPES)


@functools.cache
def jsonpatch_functions() -> dict[str, FunctionDecl]:
    """The library's declarations (a namespaced global function)."""
    decl = FunctionDecl(
        "jsonpatch.escapeKey",
        (Overload("string_jsonpatch_escapeKey_string", (STRING,), STRING, impl=escape_key),),
    )
    return {decl.name: decl}
