"""JSON Schema validation of YAML documents, with every error at the YAML node it concerns.

`SchemaDocument` wraps one composed document (PyYAML nodes keep their marks): `validate` reports each
schema error at the node of its JSON path (an unknown field at its key, a missing one at its parent's
key), `duplicate_keys` reports mapping keys given twice. The YAML policy form and
`policyd.policy.documents.check_document` (test suites, configurations) share it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import jsonschema
import yaml

from policyd.errors import Diagnostic
from policyd.policy.source import SourceFile
from policyd.slips import did_you_mean, near_name
from policyd.yaml_loading import SafeLoader


def _path_text(path: Sequence[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "document"


def documents(source: SourceFile, diagnostics: list[Diagnostic]) -> Iterator[tuple[yaml.Node, Any]]:
    """The non-empty documents of a YAML file (composed node, constructed data); a YAML error ends them.

    A YAML syntax error is appended to `diagnostics` at its mark.
    """
    loader = SafeLoader(source.text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            data = loader.construct_document(node)
            if data is not None:
                yield node, data
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        offset = mark.index if mark is not None else 0
        message = f"invalid YAML: {e.problem or e.context or 'syntax error'}"
        diagnostics.append(source.diagnostic("error", message, offset, code="yaml"))
    except yaml.YAMLError as e:  # pragma: no cover - non-positioned PyYAML errors
        diagnostics.append(source.diagnostic("error", f"invalid YAML: {e}", 0, code="yaml"))
    finally:
        loader.dispose()


def _names(values: Sequence[Any], conjunction: str = "or") -> str:
    quoted = [repr(v) for v in values]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} {conjunction} {quoted[-1]}"


def _explained(error: jsonschema.ValidationError) -> tuple[jsonschema.ValidationError, str]:
    """The error to report and its message: a `oneOf`/`anyOf` names the real problem.

    jsonschema says only "not valid under any of the given schemas". When the branches are
    alternatives of required keys, the message names the keys; when every branch rejects the value's
    type, it names the types; otherwise the error of the best-matching branch whose type fits the value
    (jsonschema's `best_match` relevance) is reported in its place, at its own, deeper, path.
    """
    while error.validator in ("oneOf", "anyOf") and isinstance(error.validator_value, list):
        branches = error.validator_value
        if all(isinstance(b, dict) and set(b) == {"required"} for b in branches):
            keys = [k for b in branches for k in b["required"]]
            present = [k for k in keys if isinstance(error.instance, dict) and k in error.instance]
            if len(present) > 1:
                return error, f"has both {_names(present, 'and')}: give only one"
            return error, f"needs one of {_names(keys)}"
        if not error.context:  # a oneOf that more than one branch accepts
            return error, error.message
        direct = [e for e in error.context if not e.relative_path]
        if direct and all(e.validator == "type" for e in direct) and len(direct) == len(branches):
            types = [
                t
                for e in direct
                for t in ([e.validator_value] if isinstance(e.validator_value, str) else e.validator_value)
            ]
            return error, f"{error.instance!r} is not of type {_names(types)}"
        wrong_type = {e.relative_schema_path[0] for e in direct if e.validator == "type"}
        fitting = [e for e in error.context if e.relative_schema_path[0] not in wrong_type]
        error = jsonschema.exceptions.best_match(fitting or error.context) or error
    return error, error.message


class SchemaDocument:
    """One composed YAML document and the diagnostics found in it, reported at its nodes."""

    def __init__(self, source: SourceFile, root: yaml.Node, diagnostics: list[Diagnostic]) -> None:
        self.source = source
        self.root = root
        self.diagnostics = diagnostics

    # -- nodes -----------------------------------------------------------------------------------

    def error_at(self, node: yaml.Node, message: str, code: str) -> None:
        """Record an error spanning a YAML node (its first line when the node spans several)."""
        start = node.start_mark.index
        end = node.end_mark.index
        if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            end = start + 1
        self.diagnostics.append(self.source.diagnostic("error", message, start, end, code))

    def node_at(self, path: Sequence[Any]) -> tuple[yaml.Node, yaml.Node | None]:
        """The node at a JSON path and, when it is a mapping value, its key node."""
        node: yaml.Node = self.root
        key_node: yaml.Node | None = None
        for part in path:
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if k.value == part or (isinstance(part, int) and k.value == str(part)):
                        node, key_node = v, k
                        break
                else:
                    return node, key_node
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node, key_node = node.value[part], None
            else:
                return node, key_node
        return node, key_node

    def key_node(self, mapping: yaml.Node, key: str) -> yaml.Node | None:
        """The key node `key` of a mapping node."""
        if isinstance(mapping, yaml.MappingNode):
            for k, _ in mapping.value:
                if k.value == key:
                    return k
        return None

    def duplicate_keys(self, node: yaml.Node) -> bool:
        """Report mapping keys given twice anywhere under `node`; True when one was found."""
        found = False
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.value in seen:
                        self.error_at(k, f"duplicate key {k.value!r}", "duplicate-key")
                        found = True
                    seen.add(k.value)
                found = self.duplicate_keys(v) or found
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                found = self.duplicate_keys(item) or found
        return found

    # -- schema ----------------------------------------------------------------------------------

    def validate(self, data: Any, validator: jsonschema.Draft202012Validator) -> bool:
        """Validate against a schema; True when the document is valid."""
        errors = list(validator.iter_errors(data))
        first = len(self.diagnostics)
        for found in errors:
            error, message_text = _explained(found)
            path = list(error.absolute_path)
            node, key = self.node_at(path)
            where = _path_text(path)
            if error.validator == "additionalProperties" and isinstance(error.instance, dict):
                allowed = error.schema.get("properties", {})
                extras = [k for k in error.instance if k not in allowed]
                for extra in extras:
                    target = self.key_node(node, str(extra)) or node
                    names = ", ".join(allowed)
                    near = did_you_mean(near_name(str(extra), allowed))
                    message = f"{where}: unknown field {extra!r}{near} (allowed: {names})"
                    self.error_at(target, message, "schema")
                continue
            target = (
                (key or node) if error.validator == "required" else node
            )  # a missing field: its parent's key
            self.error_at(target, f"{where}: {message_text}", "schema")
        self.diagnostics[first:] = sorted(
            self.diagnostics[first:], key=lambda d: (d.span.line, d.span.column)
        )
        return not errors
