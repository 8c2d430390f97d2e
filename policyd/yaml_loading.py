"""YAML loaders whose every failure is a positioned `yaml.YAMLError`.

PyYAML's constructors turn a scalar into its tagged type with Python's own conversions, and a value
that does not convert escapes as a bare Python exception without a position: `!!int` with no value is
an IndexError, `!!bool maybe` a KeyError, `!!float x` a ValueError, `!!timestamp x` an AttributeError,
and the date `2020-02-30` (an implicit timestamp) a ValueError. Every loader policyd reads user text
with constructs through `Guarded`, which turns such a failure into a `yaml.constructor.ConstructorError`
at the value's mark, so the callers' handling of YAML errors (file, line, column) covers it.
"""

from __future__ import annotations

from typing import Any

import yaml

# what Python's conversions raise on a scalar they cannot read (int(), float(), base64, datetime, dict
# lookups of bool words, a regexp match that found nothing)
_CONVERSION_ERRORS = (ValueError, IndexError, KeyError, AttributeError, TypeError, OverflowError)


class Guarded(yaml.constructor.SafeConstructor):
    """A constructor whose failures on a value are `ConstructorError`s at the value."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except _CONVERSION_ERRORS as e:
            shown = repr(node.value) if isinstance(node, yaml.ScalarNode) else "the value"
            raise yaml.constructor.ConstructorError(
                None, None, f"{shown} is not a valid {_tag_name(node.tag)} ({_reason(e)})", node.start_mark
            ) from None


def _tag_name(tag: str) -> str:
    """`!!int` for `tag:yaml.org,2002:int`, other tags as written."""
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix) :] if tag.startswith(prefix) else tag


def _reason(error: Exception) -> str:
    """What Python said, or what the value lacks where that says nothing useful."""
    if isinstance(error, ValueError | OverflowError) and str(error):
        return str(error)
    return "not of that form"


class SafeLoader(yaml.SafeLoader, Guarded):
    """`yaml.SafeLoader` with `Guarded` construction."""


if hasattr(yaml, "CSafeLoader"):

    class FastSafeLoader(yaml.CSafeLoader, Guarded):
        """libyaml's safe loader (about 10x faster than PyYAML's own) with `Guarded` construction."""

else:  # pragma: no cover - PyYAML built without libyaml
    FastSafeLoader = SafeLoader  # type: ignore[misc,assignment]


def safe_load(stream: Any) -> Any:
    """`yaml.safe_load` whose failures are all `yaml.YAMLError`s."""
    return yaml.load(stream, Loader=SafeLoader)  # noqa: S506 - a safe loader


def safe_load_all(stream: Any) -> list[Any]:
    """Every document of `stream`, as `yaml.safe_load_all` gives them, failing only with `yaml.YAMLError`."""
    return list(yaml.load_all(stream, Loader=SafeLoader))  # noqa: S506 - a safe loader
