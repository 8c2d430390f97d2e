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
