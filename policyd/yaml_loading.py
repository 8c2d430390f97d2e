"""YAML loaders whose every failure is a positioned `yaml.YAMLError`, and whose documents every later
pass can walk.

PyYAML's constructors turn a scalar into its tagged type with Python's own conversions, and a value
that does not convert escapes as a bare Python exception without a position: `!!int` with no value is
an IndexError, `!!bool maybe` a KeyError, `!!float x` a ValueError, `!!timestamp x` an AttributeError,
and the date `2020-02-30` (an implicit timestamp) a ValueError. Every loader policyd reads user text
with constructs through `Guarded`, which turns such a failure into a `yaml.constructor.ConstructorError`
at the value's mark, so the callers' handling of YAML errors (file, line, column) covers it.

Two shapes of valid YAML would otherwise stop a reader. Nesting: PyYAML's composer and constructor,
the schema validators and policyd's own walks recurse once per level, so 200 nested mappings were a
RecursionError; a document nested more than `MAX_NESTING` levels (Kubernetes objects use about 15,
with managedFields) is refused at the first node too deep. Aliases: a document of a few lines can
name one list ten times, that list another ten times, and so on (the "billion laughs"); constructed,
it shares the lists, but every walk over it visits each use, and linting a 1 KB policy of seven such
levels took 30 s. As go-yaml (which the API server uses) refuses "excessive aliasing", a document
whose values, counted through its aliases, exceed `MAX_EXPANDED` and ten times the nodes written is
refused.

JSON has the nesting problem too: `json_loads` makes a document nested past the decoder's recursion an
invalid document like any other, and `nested_deeper` finds one nested past a limit.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

import yaml

# what Python's conversions raise on a scalar they cannot read (int(), float(), base64, datetime, dict
# lookups of bool words, a regexp match that found nothing)
_CONVERSION_ERRORS = (ValueError, IndexError, KeyError, AttributeError, TypeError, OverflowError)
MAX_NESTING = 64  # levels of nested mappings and sequences in one document
MAX_EXPANDED = 1_000_000  # values in one document counted through its aliases


_Collection = yaml.nodes.CollectionNode
_IN_PROGRESS = -1


def _collections(node: yaml.Node) -> list[yaml.Node]:
    """The mappings and sequences directly under `node` (scalars are leaves of one level)."""
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair if isinstance(n, _Collection)]
    if isinstance(node, yaml.SequenceNode):
        return [n for n in node.value if isinstance(n, _Collection)]
    return []


def _refuse(message: str, at: yaml.Node | yaml.Event) -> NoReturn:
    raise yaml.composer.ComposerError(None, None, message, at.start_mark)  # type: ignore[arg-type]  # or libyaml's Mark


def check_shape(root: yaml.Node) -> None:
    """Raise a ComposerError when the document under `root` nests more than `MAX_NESTING` levels,
    refers to a node inside itself through an alias, or expands to too many values through its
    aliases. Walks the mappings and sequences written, each once."""
    if not isinstance(root, _Collection):
        return
    height: dict[int, int] = {}  # id(collection) -> levels of collections from it down
    shared = False  # a collection reached twice: through an alias
    # (node, None): to visit; (node, its collections): to measure, its collections measured
    stack: list[tuple[yaml.Node, list[yaml.Node] | None]] = [(root, None)]
    while stack:
        node, kids = stack.pop()
        key = id(node)
        if kids is not None:
            height[key] = 1 + max((height[id(c)] for c in kids), default=0)
            continue
        seen = height.get(key)
        if seen is not None:
            if seen == _IN_PROGRESS:
                _refuse("an alias refers to a node inside itself", node)
            shared = True
            continue
        height[key] = _IN_PROGRESS
        kids = _collections(node)
        stack.append((node, kids))
        stack.extend((child, None) for child in kids)
    if height[id(root)] > MAX_NESTING:
        node, level = root, 1
        while level <= MAX_NESTING:  # down the deepest path to the first collection past the limit
            node = max(_collections(node), key=lambda c: height[id(c)])
            level += 1
        _refuse(f"nested more than {MAX_NESTING} levels deep", node)
    if shared:
        _check_expansion(root, len(height))


def _check_expansion(root: yaml.Node, written: int) -> None:
    """Refuse a document whose values, counted through its aliases, are too many."""
    size: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            values = (
                node.value
                if isinstance(node, yaml.SequenceNode)
                else [n for pair in node.value for n in pair]
            )
            size[id(node)] = 1 + sum(size[id(n)] if isinstance(n, _Collection) else 1 for n in values)
            continue
        if id(node) not in size:
            stack.append((node, True))
            stack.extend((child, False) for child in _collections(node) if id(child) not in size)
    total = size[id(root)]
    if total > max(MAX_EXPANDED, 10 * written):
        _refuse(f"excessive aliasing: the document's aliases make {total:,} values of it", root)


def json_loads(text: str | bytes) -> Any:
    """`json.loads`, whose every failure is a ValueError (`json.JSONDecodeError` with its position, or
    `nested too deeply` for a document past the decoder's recursion, which recurses per level)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def nested_deeper(data: Any, limit: int) -> bool:
    """True when loaded data (dicts and lists, from JSON) nests more than `limit` levels deep."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, level = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if level > limit:
            return True
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return False


class Guarded(yaml.constructor.SafeConstructor):
    """A constructor whose failures on a value are `ConstructorError`s at the value, and which
    refuses a document its readers could not walk (`check_shape`) before constructing it."""

    def construct_document(self, node: yaml.Node) -> Any:
        check_shape(node)
        return super().construct_document(node)


def _guard(tag: str) -> None:
    """Register for `tag` its safe constructor wrapped: a conversion error is a ConstructorError at
    the value (only the scalar types that convert pay for the wrapper; strings, maps and lists not)."""
    construct = Guarded.yaml_constructors[tag]

    def guarded(loader: Guarded, node: yaml.Node) -> Any:
        try:
            return construct(loader, node)
        except yaml.YAMLError:
            raise
        except _CONVERSION_ERRORS as e:
            shown = repr(node.value) if isinstance(node, yaml.ScalarNode) else "the value"
            raise yaml.constructor.ConstructorError(
                None, None, f"{shown} is not a valid {_tag_name(tag)} ({_reason(e)})", node.start_mark
            ) from None

    Guarded.add_constructor(tag, guarded)  # type: ignore[type-var]  # the stubs want a whole loader class


for _type in ("int", "float", "bool", "timestamp", "binary"):
    _guard(f"tag:yaml.org,2002:{_type}")


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
    """`yaml.SafeLoader` with `Guarded` construction, whose composer stops past `MAX_NESTING` levels
    (it recurses per level; libyaml's has a limit of its own)."""

    _nesting = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if not isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            return super().compose_node(parent, index)
        self._nesting += 1
        try:
            if self._nesting > MAX_NESTING:
                _refuse(f"nested more than {MAX_NESTING} levels deep", event)
            return super().compose_node(parent, index)
        finally:
            self._nesting -= 1


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
