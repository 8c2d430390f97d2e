"""The cel-go extension libraries Kubernetes enables, in registration order."""

from __future__ import annotations

from policyd.cel.env import FunctionDecl
from policyd.cel.ext.encoders import encoder_functions
from policyd.cel.ext.lists import list_functions
from policyd.cel.ext.math import math_functions
from policyd.cel.ext.network import network_functions
from policyd.cel.ext.sets import set_functions
from policyd.cel.ext.strings import string_functions


def extension_libraries() -> tuple[dict[str, FunctionDecl], ...]:
    """The declarations of each extension library (`policyd.cel.library` merges them)."""
    return (
        string_functions(),
        list_functions(),
        set_functions(),
        math_functions(),
        encoder_functions(),
        network_functions(),
    )
