"""The YAML form: same IR as the text form, schema errors and CEL errors at file positions."""

from __future__ import annotations

from policyd.policy.source import SourceFile, SourceMap
from policyd.policy.text_form import parse_policy_text
from policyd.policy.yaml_form import parse_policy_yaml

DOC = """\
apiVersion: policyd.io/v1alpha1
kind: SchedulingPolicy
metadata:
  name: fit
spec:
  profiles: [policyd]
  lets:
    - name: cpu
      expr: pod.requests["cpu"]
  filters:
    - name: Fits
      expr: node.free["cpu"] >= cpu
      reason: Insufficient cpu
  scores:
    - {name: Least, expr: 'node.free[''cpu'']', weight: 2, normalize: max}
  queue:
    order:
      - {key: pod.priority, direction: desc}
  permits:
    - {name: gang, group: 'pod.labels["g"]', minMember: 3}
---
apiVersion: policyd.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: second}
spec: {}
"""

TEXT = """\
policy fit {
  let cpu = pod.requests["cpu"]
  filter Fits { expr = node.free["cpu"] >= cpu reason = "Insufficient cpu" }
  score Least { expr = node.free['cpu'] weight = 2 normalize = max }
  queue { order pod.priority desc }
  permit gang { group = pod.labels["g"] minMember = 3 }
}
"""


def test_yaml_and_text_give_the_same_ir() -> None:
    y = parse_policy_yaml(DOC, "f.yaml")
    t = parse_policy_text(TEXT, "f.policy")
    assert y.diagnostics == [] and t.diagnostics == []
    assert [p.name.value for p in y.policies] == ["fit", "second"]
    a, b = y.policies[0], t.policies[0]
    assert a.profiles == b.profiles
    assert [x.name.value for x in a.lets] == [x.name.value for x in b.lets]
    assert [(f.name.value, f.expr.text, f.reason) for f in a.filters] == [
        ("Fits", 'node.free["cpu"] >= cpu', "Insufficient cpu")
    ]
    assert b.filters[0].reason is not None
    assert [(s.weight, s.normalize) for s in a.scores] == [(s.weight, s.normalize) for s in b.scores]
    assert a.queue is not None and a.queue.keys[0].direction == "desc"
    assert a.scores[0].expr.text == "node.free['cpu']"
    assert (a.scores[0].expr.span.line, a.scores[0].expr.span.column) == (15, 28)


def _errors(text: str) -> list[tuple[int, int, str]]:
    return [(d.span.line, d.span.column, d.message) for d in parse_policy_yaml(text, "e.yaml").diagnostics]


def test_schema_errors_at_nodes() -> None:
    bad = DOC.replace("weight: 2", "weight: two").replace("reason: Insufficient cpu", "reasn: x")
    errors = _errors(bad)
    assert (13, 7) == errors[0][:2] and "unknown field 'reasn'" in errors[0][2]
    assert (15, 57) == errors[1][:2] and "is not of type 'integer'" in errors[1][2]


def test_missing_required_and_invalid_yaml() -> None:
    errors = _errors("apiVersion: policyd.io/v1alpha1\nkind: SchedulingPolicy\nspec: {}\n")
    assert errors == [(1, 1, "document: 'metadata' is a required property")]
    errors = _errors("a: [1, 2\n")
    assert errors[0][0] == 2 and "invalid YAML" in errors[0][2]


def test_cel_syntax_error_in_block_scalar() -> None:
    text = DOC.replace(
        '      expr: node.free["cpu"] >= cpu\n',
        "      expr: |\n        node.free['cpu'] >=\n          cpu )\n",
    )
    errors = _errors(text)
    assert errors == [(14, 15, "syntax error: unexpected ')'")]


def _node(text: str) -> tuple[SourceFile, object]:
    import yaml

    root = yaml.compose(text)
    assert isinstance(root, yaml.MappingNode)
    return SourceFile("s.yaml", text), root.value[0][1]


def test_source_map_quoted_and_folded_scalars() -> None:
    text = 'k: "a\\tb \\"c\\" d"\n'
    source, node = _node(text)
    smap = SourceMap.for_yaml_scalar(source, node)
    value = node.value  # type: ignore[attr-defined]
    assert value == 'a\tb "c" d'
    assert text[smap.file_offset(value.index("d"))] == "d"
    assert text[smap.file_offset(value.index("c"))] == "c"
    text = "k: >\n  a &&\n  b\n"
    source, node = _node(text)
    smap = SourceMap.for_yaml_scalar(source, node)
    assert node.value == "a && b\n"  # type: ignore[attr-defined]
    assert smap.span(node.value.index("b")).line == 3  # type: ignore[attr-defined]
    text = "k: a\n  && b\n"
    source, node = _node(text)
    smap = SourceMap.for_yaml_scalar(source, node)
    assert (smap.span(5).line, smap.span(5).column) == (2, 6)


def test_unresolvable_boolean_and_expression_are_accepted() -> None:
    """`unresolvable: true` matched both branches of the schema's oneOf and was rejected."""
    text = (
        "apiVersion: policyd.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: u}\nspec:\n  filters:\n"
        "    - {name: A, expr: node.ready, unresolvable: true}\n"
        "    - {name: B, expr: node.ready, unresolvable: 'pod.name == \"x\"'}\n"
    )
    result = parse_policy_yaml(text, "u.yaml")
    assert result.diagnostics == []
    a, b = result.policies[0].filters
    assert a.unresolvable is True
    assert not isinstance(b.unresolvable, bool) and b.unresolvable.text == 'pod.name == "x"'


def test_composition_fields_in_yaml() -> None:
    text = (
        "apiVersion: policyd.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: c}\nspec:\n"
        "  extends: [default]\n  overrides:\n    queue:\n      order: [{key: pod.name}]\n"
        "    scores: [{rule: default/ImageLocality, normalize: max}]\n  disable: [default/NodePorts]\n"
    )
    result = parse_policy_yaml(text, "c.yaml")
    assert result.diagnostics == []
    policy = result.policies[0]
    assert [n.value for n in policy.extends] == ["default"]
    assert policy.queue is not None and policy.queue.override
    assert [(o.target.value, o.disable, o.normalize) for o in policy.overrides] == [
        ("default/ImageLocality", False, "max"),
        ("default/NodePorts", True, None),
    ]
    bad = text.replace("default/NodePorts", "NodePorts")
    assert any(
        "does not match" in d.message and d.span.line == 10
        for d in parse_policy_yaml(bad, "c.yaml").diagnostics
    )
