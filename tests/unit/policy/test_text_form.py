"""The `.policy` text form: structure, positions, syntax errors."""

from __future__ import annotations

import pytest

from policyd.policy.text_form import parse_policy_text

FULL = """\
# a comment
policy gpu-binpack {
  profiles = ["policyd", "batch"]
  match = pod.priority > 0
  let gpus = pod.requests["nvidia.com/gpu"]
  filter GPUFree {
    expr = node.free["nvidia.com/gpu"] >= gpus
    reason = "Insufficient nvidia.com/gpu"
  }
  score Most {
    expr = node.labels.weight.size()
    weight = 5
    normalize = reverse-minmax
  }
  queue {
    order pod.priority desc
    order pod.creationTimestamp
  }
  preemption { victims = victim.priority < pod.priority pdb = ignore }
  permit gang { group = pod.labels["g"] minMember = 2 timeout = duration("60s") }
}
policy second { filter F { expr = true } }
"""


def test_full_policy_structure() -> None:
    result = parse_policy_text(FULL, "f.policy")
    assert result.diagnostics == []
    first, second = result.policies
    assert first.name.value == "gpu-binpack" and second.name.value == "second"
    assert first.profiles == ("policyd", "batch")
    assert second.profiles == ("policyd",)
    assert [let.name.value for let in first.lets] == ["gpus"]
    (rule,) = first.filters
    assert rule.expr.text == 'node.free["nvidia.com/gpu"] >= gpus'
    assert (rule.expr.span.line, rule.expr.span.column) == (7, 12)
    (score,) = first.scores
    assert (score.weight, score.normalize) == (5, "reverse-minmax")
    assert first.queue is not None
    assert [k.direction for k in first.queue.keys] == ["desc", "asc"]
    assert first.preemption is not None and not first.preemption.honor_pdb
    assert first.preemption.enabled is None
    assert first.permits[0].name.value == "gang"
    assert (first.name.span.line, first.name.span.column) == (2, 8)


def test_keywords_stay_field_names_after_dot() -> None:
    result = parse_policy_text("policy k { filter F { expr = node.labels.reason == node.labels.weight } }")
    assert result.diagnostics == []


def _error(text: str) -> tuple[int, int, str]:
    result = parse_policy_text(text, "e.policy")
    assert len(result.diagnostics) == 1
    d = result.diagnostics[0]
    return d.span.line, d.span.column, d.message


def test_syntax_error_positions_and_messages() -> None:
    line, col, msg = _error("policy a {\n  filter x {\n    expr reason = 1\n  }\n}\n")
    assert (line, col) == (3, 10)
    assert "expected '=' but found 'reason'" in msg
    line, col, msg = _error("policy a {\n  let = 3\n}\n")
    assert (line, col) == (2, 7) and "expected an identifier" in msg
    line, col, msg = _error("policy a {\n  filter x { expr = 1 + }\n}\n")
    assert (line, col) == (2, 25) and "expected an expression" in msg


def test_unexpected_character_and_eof() -> None:
    line, col, msg = _error("policy a {\n  filter x { expr = 1 ; }\n}\n")
    assert (line, col) == (2, 23) and "unexpected character ';'" in msg
    line, col, msg = _error("policy a {\n  filter x { expr = 1 }\n")
    assert (line, col) == (1, 10) and "'{' was never closed" in msg and "end of file" in msg


@pytest.mark.parametrize(
    ("item", "column", "found"),
    [
        ("letx = 1", 3, "'letx'"),
        ("filterF { expr = true }", 3, "'filterF'"),
        ("scoreS { expr = 1 }", 3, "'scoreS'"),
        ('permitP { group = "g" }', 3, "'permitP'"),
        ("overridequeue { order pod.priority }", 3, "'overridequeue'"),
        ("disabledefault/NodeName", 3, "'disabledefault/NodeName'"),
        ("queue { orderpod.priority }", 11, "'orderpod.priority'"),
        ("queue { order pod.priority descorder pod.name }", 30, "'descorder'"),
        ('filter F { expr = "a" inpod.labels }', 25, "'inpod.labels'"),
    ],
)
def test_a_keyword_glued_to_the_next_word_is_a_syntax_error(item: str, column: int, found: str) -> None:
    """The contextual lexer split `letx` into `let x` (and `inpod` into `in pod`): lint accepted them."""
    line, col, msg = _error(f"policy a extends default {{\n  {item}\n}}\n")
    assert (line, col) == (2, column) and msg.startswith("syntax error: expected ") and msg.endswith(found)


def test_glued_policy_and_extends_keywords_are_syntax_errors() -> None:
    assert _error("policya {\n}\n") == (
        1,
        1,
        "syntax error: expected 'policy' or end of file but found 'policya'",
    )
    line, col, msg = _error("policy a extendsdefault {\n}\n")
    assert (line, col) == (1, 10) and msg.startswith("syntax error: expected 'extends'")
    assert msg.endswith("but found 'extendsdefault'")


def test_semantic_field_errors() -> None:
    line, col, msg = _error("policy a {\n  score s { normalize = most expr = 1 }\n}\n")
    assert (line, col) == (2, 25) and "unknown normalize value 'most'" in msg
    line, col, msg = _error("policy a {\n  score s { weight = -1 expr = 1 }\n}\n")
    assert (line, col) == (2, 22) and "weight -1 is negative" in msg
    line, col, msg = _error(
        "policy a extends default {\n  override score default/ImageLocality { weight = -3 }\n}\n"
    )
    assert (line, col) == (2, 51) and "weight -3 is negative" in msg
    line, col, msg = _error('policy a {\n  filter f { reason = "x" }\n}\n')
    assert (line, col) == (2, 10) and "'expr' is required" in msg
    line, col, msg = _error("policy a {\n  match = true\n  match = false\n}\n")
    assert (line, col) == (3, 3) and "given twice" in msg
    line, col, msg = _error("policy a {\n  filter f { expr = let }\n}\n")
    assert (line, col) == (2, 21) and "reserved" in msg


def test_profile_names_are_checked_as_the_config_schema_checks_them() -> None:
    """`profiles = ["Bad Name"]` passed lint although no configuration can name that profile."""
    text = 'policy p {\n  profiles = ["Bad Name", "ok", "a\\"b"]\n}\n'
    found = [(d.span.line, d.span.column, d.message) for d in parse_policy_text(text, "p.policy").diagnostics]
    assert found == [
        (
            2,
            15,
            "profile name 'Bad Name' is not a valid scheduler name (lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit)",
        ),
        (2, 35, 'profile name "a\\"b": a scheduler name has no backslash escapes or quotes'),
    ]


def test_a_profile_or_a_base_listed_twice_is_an_error_in_either_form() -> None:
    from policyd.policy.yaml_form import parse_policy_yaml

    def text_errors(text: str) -> list[tuple[int, int, str]]:
        return [
            (d.span.line, d.span.column, d.message) for d in parse_policy_text(text, "p.policy").diagnostics
        ]

    def yaml_errors(spec: str) -> list[tuple[int, int, str]]:
        head = "apiVersion: policyd.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: p}\nspec:\n"
        return [
            (d.span.line, d.span.column, d.message)
            for d in parse_policy_yaml(head + spec, "p.yaml").diagnostics
        ]

    assert text_errors('policy p {\n  profiles = ["a", "b", "a"]\n}\n') == [
        (2, 25, "profile 'a' is listed twice")
    ]
    assert yaml_errors("  profiles: [a, b, a]\n") == [
        (5, 13, "spec.profiles: ['a', 'b', 'a'] has non-unique elements")
    ]
    assert text_errors("policy p extends default, b, default {\n}\n") == [(1, 30, "extends 'default' twice")]
    assert yaml_errors("  extends: [default, default]\n") == [
        (5, 12, "spec.extends: ['default', 'default'] has non-unique elements")
    ]


def test_profile_name_pattern_is_the_config_schemas() -> None:
    from policyd import shipped
    from policyd.policy.syntax import PROFILE_NAME

    item = shipped.schema("config")["properties"]["profiles"]["items"]["properties"]["schedulerName"]
    assert item["pattern"] == PROFILE_NAME.pattern
    policy_item = shipped.schema("policy")["properties"]["spec"]["properties"]["profiles"]["items"]
    assert policy_item["pattern"] == PROFILE_NAME.pattern


def test_composition_syntax() -> None:
    text = (
        "policy b extends default, other {\n"
        "  override queue { order pod.name asc }\n"
        "  override score default/ImageLocality { weight = 3 normalize = max }\n"
        "  disable default/NodePorts, other/F\n"
        "  override preemption { pdb = ignore }\n"
        "}\n"
    )
    result = parse_policy_text(text, "b.policy")
    assert result.diagnostics == []
    policy = result.policies[0]
    assert [n.value for n in policy.extends] == ["default", "other"]
    assert policy.queue is not None and policy.queue.override
    assert policy.preemption is not None and policy.preemption.override and not policy.preemption.honor_pdb
    assert [(o.target.value, o.disable, o.weight, o.normalize) for o in policy.overrides] == [
        ("default/ImageLocality", False, 3, "max"),
        ("default/NodePorts", True, None, None),
        ("other/F", True, None, None),
    ]
    empty = parse_policy_text("policy b extends a { override score a/S { } }", "b.policy").diagnostics
    assert [d.message for d in empty] == ["override score a/S: give 'weight' or 'normalize'"]


def _first_error(text: str) -> tuple[int, int, str]:
    d = parse_policy_text(text, "u.policy").diagnostics[0]
    return d.span.line, d.span.column, d.message


def test_unclosed_parenthesis_is_reported_where_it_was_opened() -> None:
    """It was reported at the next statement, lines below, without the place of the '('."""
    text = 'policy p {\n  filter F {\n    expr = node.labels.exists(k, (k == "a"\n    reason = "x"\n  }\n}\n'
    assert _first_error(text) == (
        3,
        34,
        "syntax error: '(' was never closed (the parser stopped at 4:5: expected ')' but found 'reason')",
    )


def test_unclosed_bracket_brace_and_string_are_reported_where_opened() -> None:
    bracket = _first_error("policy p {\n  filter F {\n    expr = [1, 2\n  }\n}\n")
    assert bracket[:2] == (3, 12) and bracket[2].startswith("syntax error: '[' was never closed")
    brace = _first_error("policy p {\n  filter F {\n    expr = true\n\n  filter G { expr = true }\n}\n")
    assert brace[:2] == (2, 12) and brace[2].startswith("syntax error: '{' was never closed")
    at_end = _first_error("policy p {\n  filter F { expr = true }\n")
    assert at_end[:2] == (1, 10) and "found end of file" in at_end[2]
    string = _first_error('policy p {\n  filter F {\n    expr = node.name == "abc\n  }\n}\n')
    assert string == (3, 25, "syntax error: unterminated string literal")


def test_balanced_multiline_error_keeps_the_parsers_place() -> None:
    text = "policy p {\n  filter F { expr = f(a,\n   b c) } # (\n  // also not a bracket: [\n}\n"
    assert _first_error(text) == (3, 6, "syntax error: expected an operator, ')', ',' or '{' but found 'c'")


def test_expected_terminals_include_the_cel_ones() -> None:
    """After `1 > 2` the message listed only 'expr', 'reason', 'unresolvable' or '}' (Lark's accepts()
    skips the imported `cel__` terminals), and after a policy name only 'extends' (the policy's `{` is
    CEL's `cel__LBRACE`); a missing POLICY/RULE read 'expected qualified'."""
    line, col, msg = _error("policy a {\n  filter F { expr = 1 > 2 pod }\n}\n")
    assert (line, col) == (2, 27)
    assert (
        msg == "syntax error: expected an operator, 'expr', 'reason', 'unresolvable' or '}' but found 'pod'"
    )
    assert _error("policy a b {\n}\n")[2] == "syntax error: expected 'extends' or '{' but found 'b'"
    assert _error("policy a {\n  disable x\n}\n")[2] == (
        "syntax error: expected a rule as POLICY/RULE but found 'x'"
    )
