"""The `.policy` text form: structure, positions, syntax errors."""

from __future__ import annotations

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
    assert line == 2 and "end of file" in msg


def test_semantic_field_errors() -> None:
    line, col, msg = _error("policy a {\n  score s { normalize = most expr = 1 }\n}\n")
    assert (line, col) == (2, 25) and "unknown normalize value 'most'" in msg
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
