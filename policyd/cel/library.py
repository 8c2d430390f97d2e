"""The function library of every CEL environment: standard, optional values and two-variable
comprehensions, cel-go extensions, Kubernetes' libraries.

Libraries declare functions independently; a name several libraries declare (`indexOf` on strings and
lists, `string()` of IPs and CIDRs) gets the overloads of all of them, in library order.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from policyd.cel.comprehension import comprehension_functions
from policyd.cel.env import FunctionDecl
from policyd.cel.ext.library import extension_libraries
from policyd.cel.k8s import k8s_libraries
from policyd.cel.library_costs import with_costs
from policyd.cel.optional import optional_functions
from policyd.cel.stdlib import standard_functions


def merge_functions(*libraries: Mapping[str, FunctionDecl]) -> dict[str, FunctionDecl]:
    """One declaration per name with the overloads of every library (an overload id once)."""
    merged: dict[str, FunctionDecl] = {}
    for library in libraries:
        for name, decl in library.items():
            known = merged.get(name)
            if known is None:
                merged[name] = decl
                continue
            ids = {o.id for o in known.overloads}
            extra = tuple(o for o in decl.overloads if o.id not in ids)
            merged[name] = FunctionDecl(name, known.overloads + extra)
    return merged


@functools.cache
def _library() -> dict[str, FunctionDecl]:
    return merge_functions(
        standard_functions(),
        optional_functions(),
        comprehension_functions(),
        *(with_costs(lib) for lib in (*extension_libraries(), *k8s_libraries())),
    )


def library_functions() -> dict[str, FunctionDecl]:
    """The standard library, the cel-go extensions and the Kubernetes libraries (a fresh dict)."""
    return dict(_library())
