"""policyd's YAML document kinds, each checked against its own schema with errors at file:line:col.

| kind                   | schema (policyd/schemas)  | read by                          |
|------------------------|---------------------------|----------------------------------|
| `SchedulingPolicy`     | policy.schema.json        | the loader (`policyd.policy.loader`) |
| `PolicyTestSuite`      | policytest.schema.json    | `policyd test`                   |
| `PolicydConfiguration` | config.schema.json        | `policyd run --config`           |

`check_document(path)` reads a YAML file and checks every document against the schema of its kind
(errors at the YAML node they concern); a document whose kind is none of these is an error when it
looks meant as one (a policyd apiVersion, or a kind close to one: a misspelling), else a warning.
`policyd lint` and `policyd test` use it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

import jsonschema

from policyd import shipped
from policyd.errors import Diagnostic
from policyd.policy.source import SourceFile
from policyd.policy.yaml_schema import SchemaDocument, documents
from policyd.slips import did_you_mean, near_name

POLICY_KIND = "SchedulingPolicy"
SUITE_KIND = "PolicyTestSuite"
# kind -> shipped schema name
KIND_SCHEMAS: Mapping[str, str] = {
    POLICY_KIND: "policy",
    SUITE_KIND: "policytest",
    "PolicydConfiguration": "config",
}
API_GROUP = "policyd.io/"

_KIND_LINE = re.compile(r"^kind:\s*['\"]?([A-Za-z0-9]+)", re.MULTILINE)


@functools.cache
def _validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(shipped.schema(KIND_SCHEMAS[kind]))


def kinds_of(text: str) -> set[str]:
    """The top-level `kind:` values written in a YAML text (a quick look, without parsing)."""
    return set(_KIND_LINE.findall(text))


def check_document(path: str, text: str | None = None) -> list[Diagnostic]:
    """Check every document of a YAML file against its kind's schema; read the file unless `text` is given.

    An unreadable file raises OSError (the caller reports I/O apart from diagnostics).
    """
    if text is None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    source = SourceFile(path, text)
    diagnostics: list[Diagnostic] = []
    for node, data in documents(source, diagnostics):
        _check(SchemaDocument(source, node, diagnostics), data)
    return diagnostics


def _check(doc: SchemaDocument, data: object) -> None:
    """Check one document: its kind, then its schema."""
    if not isinstance(data, dict):
        doc.error_at(doc.root, "a policyd document is a mapping with apiVersion and kind", "schema")
        return
    kind = data.get("kind")
    if isinstance(kind, str) and kind in KIND_SCHEMAS:
        if not doc.duplicate_keys(doc.root):
            doc.validate(data, _validator(kind))
        return
    node, key = doc.node_at(["kind"])
    expected = ", ".join(KIND_SCHEMAS)
    if kind is None:
        doc.error_at(doc.root, f"document has no kind (expected one of {expected})", "kind")
        return
    if not isinstance(kind, str):
        doc.error_at(node, f"kind must be a string, one of {expected}", "kind")
        return
    near = near_name(str(kind), KIND_SCHEMAS)
    ours = str(data.get("apiVersion", "")).startswith(API_GROUP)
    if near is not None or ours:
        hint = did_you_mean(near) or f" (expected one of {expected})"
        doc.error_at(node, f"unknown kind {kind!r}{hint}", "kind")
        return
    start = node.start_mark.index
    message = f"not a policyd document (kind {kind!r}): not checked"
    doc.diagnostics.append(doc.source.diagnostic("warning", message, start, node.end_mark.index, "kind"))
