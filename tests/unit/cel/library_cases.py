"""Shared helpers for the CEL library tests: evaluate an expression in the full library environment."""

from __future__ import annotations

from typing import Any

from policyd.cel.program import compile_expression, standard_env
from policyd.cel.types import DYN, INT, STRING, CelType, list_of

ENV = standard_env({"s": STRING, "n": INT, "xs": list_of(INT), "d": DYN})


def ev(text: str, env_types: dict[str, CelType] | None = None, **activation: Any) -> Any:
    """Compile `text` in the library environment (plus `env_types`) and evaluate it."""
    env = ENV if env_types is None else standard_env(env_types)
    return compile_expression(text, env).evaluate(activation)
