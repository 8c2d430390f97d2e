"""The cel-go extension libraries Kubernetes enables, in registration order."""

from __future__ import annotations

from policyd.cel.env import FunctionDecl
from policyd.cel.ext.strings import string_functions


def extension_libraries() -> tuple[dict[str, FunctionDecl], ...]:
    """The declarations of each extension library (`policyd.cel.library` merges them)."""
    return (string_functions(),)
