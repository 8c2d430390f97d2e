"""The YAML form (`apiVersion: policyd.io/v1alpha1`, `kind: SchedulingPolicy`) -> policy IR.

Each document is validated against `policyd/schemas/policy.schema.json` (JSON Schema Draft 2020-12); schema
errors are reported at the YAML node they concern (the composed node's marks). CEL in scalars is
parsed from the scalar's value and mapped back to the file with `SourceMap.for_yaml_scalar`.
"""

from __future__ import annotations

import functools
from typing import Any

import jsonschema
import yaml

from policyd import shipped
from policyd.cel.parser import parse_cel
from policyd.errors import CelError
from policyd.policy import syntax as ir
from policyd.policy.documents import KIND_SCHEMAS, POLICY_KIND
from policyd.policy.source import SourceFile, SourceMap
from policyd.policy.text_form import ParseResult
from policyd.policy.yaml_schema import SchemaDocument, documents

API_VERSION = "policyd.io/v1alpha1"
KIND = POLICY_KIND


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(shipped.schema("policy"))


def parse_policy_yaml(text: str, path: str = "<input>") -> ParseResult:
    """Parse every `SchedulingPolicy` document of a YAML file; problems become diagnostics."""
    source = SourceFile(path, text)
    result = ParseResult()
    for node, data in documents(source, result.diagnostics):
        _Document(source, node, result.diagnostics).build(data, result.policies)
    return result


class _Document(SchemaDocument):
    """One YAML document: schema validation at node positions, then the IR."""

    # -- IR --------------------------------------------------------------------------------------

    def build(self, data: Any, out: list[ir.Policy]) -> None:
        """Validate the document and append its policy to `out` when it is valid."""
        kind = data.get("kind") if isinstance(data, dict) else None
        if isinstance(kind, str) and kind in KIND_SCHEMAS and kind != KIND:
            node, _ = self.node_at(["kind"])
            message = f"this is a {kind} document, not a {KIND} (policyd lint checks it as one)"
            self.error_at(node, message, "kind")
            return
        if self.duplicate_keys(self.root) | (not self.validate(data, _validator())):
            return
        name_node, _ = self.node_at(["metadata", "name"])
        spec = data.get("spec") or {}
        policy = ir.Policy(
            name=self.name(name_node),
            file=self.source.path,
            profiles=tuple(spec.get("profiles", ir.DEFAULT_PROFILES)),
            match=self.expr(["spec", "match"]) if "match" in spec else None,
            lets=tuple(self.lets(spec)),
            filters=tuple(self.filters(spec)),
            scores=tuple(self.scores(spec)),
            queue=self.queue(spec, ["spec"])
            or self.queue(spec.get("overrides") or {}, ["spec", "overrides"]),
            preemption=self.preemption(spec, ["spec"])
            or self.preemption(spec.get("overrides") or {}, ["spec", "overrides"]),
            permits=tuple(self.permits(spec)),
            source_text=self.source.text,
            extends=tuple(self.extends(spec)),
            overrides=tuple(self.overrides(spec)),
        )
        for section in ("queue", "preemption"):
            if section in spec and section in (spec.get("overrides") or {}):
                key = self.key_node(self.node_at(["spec", "overrides"])[0], section)
                message = f"spec.overrides.{section}: a policy has one {section} section (spec.{section} is given too)"
                self.error_at(key or self.root, message, "duplicate-field")
        out.append(policy)

    def name(self, node: yaml.Node) -> ir.Name:
        """An `ir.Name` at a scalar node."""
        span = self.source.span(node.start_mark.index, node.end_mark.index)
        return ir.Name(str(node.value), span, self.source.line_text(span.line))

    def expr(self, path: list[Any]) -> ir.Expression | None:
        """The CEL expression at a JSON path (None after reporting a syntax error)."""
        node, _ = self.node_at(path)
        smap = SourceMap.for_yaml_scalar(self.source, node)
        text = str(node.value)
        if node.tag.endswith(":bool"):
            text = "true" if text.lower() in ("true", "yes", "on", "y") else "false"
            smap = SourceMap(self.source, node.start_mark.index)
        try:
            tree = parse_cel(text)
        except CelError as e:
            self.diagnostics.append(smap.diagnostic("error", e.message, e.offset, code="cel-syntax"))
            return None
        return ir.Expression(text, tree, smap, 0)

    def lets(self, spec: dict[str, Any]) -> list[ir.Let]:
        """`spec.lets`."""
        out: list[ir.Let] = []
        for i, _ in enumerate(spec.get("lets", ())):
            expr = self.expr(["spec", "lets", i, "expr"])
            if expr is not None:
                out.append(ir.Let(self.name(self.node_at(["spec", "lets", i, "name"])[0]), expr))
        return out

    def filters(self, spec: dict[str, Any]) -> list[ir.FilterRule]:
        """`spec.filters`."""
        out: list[ir.FilterRule] = []
        for i, item in enumerate(spec.get("filters", ())):
            base = ["spec", "filters", i]
            name = self.name(self.node_at([*base, "name"])[0])
            expr = self.expr([*base, "expr"])
            reason: ir.Expression | str | None = item.get("reason")
            if "reasonExpr" in item:
                if "reason" in item:
                    key = self.key_node(self.node_at(base)[0], "reasonExpr")
                    self.error_at(key or self.root, "reason and reasonExpr are exclusive", "schema")
                reason = self.expr([*base, "reasonExpr"])
            unresolvable: ir.Expression | bool = False
            if isinstance(item.get("unresolvable"), bool):
                unresolvable = item["unresolvable"]
            elif "unresolvable" in item:
                unresolvable = self.expr([*base, "unresolvable"]) or False
            if expr is not None:
                out.append(ir.FilterRule(name, expr, reason, unresolvable))
        return out

    def scores(self, spec: dict[str, Any]) -> list[ir.ScoreRule]:
        """`spec.scores`."""
        out: list[ir.ScoreRule] = []
        for i, item in enumerate(spec.get("scores", ())):
            base = ["spec", "scores", i]
            expr = self.expr([*base, "expr"])
            if expr is not None:
                name = self.name(self.node_at([*base, "name"])[0])
                out.append(
                    ir.ScoreRule(name, expr, int(item.get("weight", 1)), item.get("normalize", "none"))
                )
        return out

    def queue(self, parent: dict[str, Any], at: list[Any]) -> ir.Queue | None:
        """`spec.queue` (or, with `at` spec.overrides, `spec.overrides.queue`)."""
        if "queue" not in parent:
            return None
        keys: list[ir.QueueKey] = []
        for i, item in enumerate(parent["queue"].get("order", ())):
            expr = self.expr([*at, "queue", "order", i, "key"])
            if expr is not None:
                keys.append(ir.QueueKey(expr, "desc" if item.get("direction") == "desc" else "asc"))
        _, key = self.node_at([*at, "queue"])
        anchor = key or self.root
        span = self.source.span(anchor.start_mark.index, anchor.end_mark.index)
        return ir.Queue(tuple(keys), span, self.source.line_text(span.line), at[-1] == "overrides")

    def preemption(self, parent: dict[str, Any], at: list[Any]) -> ir.Preemption | None:
        """`spec.preemption` (or, with `at` spec.overrides, `spec.overrides.preemption`)."""
        if "preemption" not in parent:
            return None
        section = parent["preemption"] or {}
        base = [*at, "preemption"]
        enabled = self.expr([*base, "enabled"]) if "enabled" in section else None
        victims = self.expr([*base, "victims"]) if "victims" in section else None
        _, key = self.node_at(base)
        anchor = key or self.root
        span = self.source.span(anchor.start_mark.index, anchor.end_mark.index)
        honor = section.get("pdb", "honor") != "ignore"
        override = at[-1] == "overrides"
        return ir.Preemption(span, enabled, victims, honor, self.source.line_text(span.line), override)

    def extends(self, spec: dict[str, Any]) -> list[ir.Name]:
        """`spec.extends`: one policy name or a list of them."""
        if "extends" not in spec:
            return []
        if isinstance(spec["extends"], str):
            return [self.name(self.node_at(["spec", "extends"])[0])]
        return [self.name(self.node_at(["spec", "extends", i])[0]) for i in range(len(spec["extends"]))]

    def overrides(self, spec: dict[str, Any]) -> list[ir.RuleOverride]:
        """`spec.overrides.scores` and `spec.disable`, in that order."""
        out: list[ir.RuleOverride] = []
        for i, item in enumerate((spec.get("overrides") or {}).get("scores", ())):
            target = self.name(self.node_at(["spec", "overrides", "scores", i, "rule"])[0])
            out.append(ir.RuleOverride(target, weight=item.get("weight"), normalize=item.get("normalize")))
        for i, _ in enumerate(spec.get("disable", ())):
            out.append(ir.RuleOverride(self.name(self.node_at(["spec", "disable", i])[0]), disable=True))
        return out

    def permits(self, spec: dict[str, Any]) -> list[ir.Permit]:
        """`spec.permits`."""
        out: list[ir.Permit] = []
        for i, item in enumerate(spec.get("permits", ())):
            base = ["spec", "permits", i]
            group = self.expr([*base, "group"])
            min_member = self.expr([*base, "minMember"])
            timeout = self.expr([*base, "timeout"]) if "timeout" in item else None
            if group is not None and min_member is not None:
                name = self.name(self.node_at([*base, "name"])[0])
                out.append(ir.Permit(name, group, min_member, timeout))
        return out
