"""Kubernetes' CEL libraries (k8s.io/apiserver/pkg/cel/library), the authorizer-free parts.

`k8s_libraries()` returns the declarations of quantity, lists, regex, URLs, semver, IP and CIDR
(shared with cel-go's network extension), named formats, JSONPatch key escaping, image references and
the pod helpers; each library is its own module under
`policyd.cel.k8s_lib` (IP and CIDR: `policyd.cel.ext.network`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from policyd.cel import regex
from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.k8s_lib.formats import format_functions
from policyd.cel.k8s_lib.image import image_functions
from policyd.cel.k8s_lib.jsonpatch import jsonpatch_functions
from policyd.cel.k8s_lib.lists import list_functions
from policyd.cel.k8s_lib.pod import pod_functions
from policyd.cel.k8s_lib.quantity import quantity_functions
from policyd.cel.k8s_lib.semver import semver_functions
from policyd.cel.k8s_lib.url import url_functions
from policyd.cel.types import INT, STRING, CelType, ListType


@functools.cache
def regex_functions() -> dict[str, FunctionDecl]:
    """Kubernetes' regex library: `find` and `findAll` (RE2; a literal pattern is checked)."""
    pattern = ((1, regex.pattern_issue),)
    strings = ListType(STRING)

    def member(oid: str, params: tuple[CelType, ...], result: CelType, impl: Callable[..., Any]) -> Overload:
        return Overload(oid, params, result, member=True, impl=impl, literal_checks=pattern)

    decls = [
        FunctionDecl("find", (member("string_find_string", (STRING, STRING), STRING, regex.find),)),
        FunctionDecl(
            "findAll",
            (
                member("string_find_all_string", (STRING, STRING), strings, regex.find_all),
                member("string_find_all_string_int", (STRING, STRING, INT), strings, regex.find_all),
            ),
        ),
    ]
    return {d.name: d for d in decls}


def k8s_libraries() -> tuple[dict[str, FunctionDecl], ...]:
    """The Kubernetes CEL libraries' declarations, one dict per library (`policyd.cel.library` merges them)."""
    return (
        quantity_functions(),
        list_functions(),
        regex_functions(),
        url_functions(),
        semver_functions(),
        format_functions(),
        jsonpatch_functions(),
        image_functions(),
        pod_functions(),
    )
