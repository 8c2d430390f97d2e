"""RE2 semantics of `matches`, `find` and `findAll`; malformed literal patterns fail at check time."""

from __future__ import annotations

from typing import Any

import pytest

from policyd.cel.program import CelCompileError, compile_expression
from policyd.errors import CelEvalError
from policyd.policy.loader import load_texts
from tests.unit.cel.library_cases import ENV, ev


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("'abc'.matches('^a.c$')", True),
        ("matches('xyz', 'y')", True),
        (r"'héllo'.matches('^\\pL+$')", True),  # Unicode classes are RE2, not Python re
        (r"'ab12'.matches('\\d\\d\\z')", True),
        ("'abc'.find('b+')", "b"),
        ("'abc'.find('z')", ""),
        ("'a1b22c333'.findAll('[0-9]+')", ["1", "22", "333"]),
        ("'a1b22c333'.findAll('[0-9]+', 2)", ["1", "22"]),
        ("'a1b22c333'.findAll('[0-9]+', 0)", []),
        # Go's FindAllString: an empty match right after the previous match is skipped
        ("'baaa'.findAll('a*')", ["", "aaa"]),
        ("'abc'.findAll('')", ["", "", "", ""]),
        # RE2 leftmost-first alternation, as Go
        ("'abc'.find('a|ab')", "a"),
        # k8s regex_test cases
        ("'abc 123'.find('[0-9]+')", "123"),
        ("'abc 123'.find('xyz')", ""),
        ("'123 abc 456'.findAll('[0-9]+')", ["123", "456"]),
        ("'123 abc 456'.findAll('xyz')", []),
    ],
)
def test_regex_functions(text: str, expected: Any) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("'abc'.matches('a(')", 15),
        ("s.find('[z-a]')", 8),
        ("s.findAll('(?=x)')", 11),  # lookahead is not RE2 syntax
        ("s.findAll('x{2,1}', 1)", 11),
        ("matches(s, '*')", 12),
    ],
)
def test_malformed_literal_pattern_is_a_check_error_at_the_pattern(text: str, column: int) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_expression(text, ENV)
    assert "error parsing regexp: " in info.value.message
    assert (info.value.line, info.value.column) == (1, column)


# Kubernetes' validation_test.go: `find`/`findAll` report Go's regexp error, `matches` cel-go's
# "invalid matches argument"; RE2 and Go name some error codes differently
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("s.find(')')", "error parsing regexp: unexpected ): `)`"),
        ("s.findAll(')', 1)", "error parsing regexp: unexpected ): `)`"),
        ("s.find('(a')", "error parsing regexp: missing closing ): `(a`"),
        ("s.find('[a')", "error parsing regexp: missing closing ]: `[a`"),
        ("s.find('a{2,1}')", "error parsing regexp: invalid repeat count: `{2,1}`"),
        ("s.find('*')", "error parsing regexp: missing argument to repetition operator: `*`"),
        ("s.find('a\\\\')", "error parsing regexp: trailing backslash at end of expression: ``"),
        (
            "s.matches('x++')",
            "invalid matches argument: error parsing regexp: invalid nested repetition operator: `++`",
        ),
        ("s.matches(')')", "invalid matches argument: error parsing regexp: unexpected ): `)`"),
    ],
)
def test_malformed_literal_pattern_is_reported_in_go_s_words(text: str, message: str) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_expression(text, ENV)
    assert info.value.message == message


def test_malformed_computed_pattern_is_a_runtime_error() -> None:
    compiled = compile_expression("'abc'.matches(s)", ENV)
    assert compiled.evaluate({"s": "b"}) is True
    with pytest.raises(CelEvalError) as info:
        compiled.evaluate({"s": "a("})
    assert str(info.value) == "error parsing regexp: missing closing ): `a(`"


def test_backreferences_are_rejected() -> None:
    with pytest.raises(CelCompileError):
        compile_expression(r"'aa'.matches('(a)\\1')", ENV)


POLICY = """policy bad-literals {
  profiles = ["policyd"]
  match = true

  filter TeamName {
    expr = "team" in pod.labels &&
      pod.labels["team"].matches("^(ml|data")
  }
  filter Subnet {
    expr = cidr("10.0.0.0/33").containsIP(node.labels["ip"])
  }
}
"""
# A malformed CIDR (or IP) literal is no check error: as in Kubernetes, only evaluating it fails.


def test_lint_reports_malformed_literals_at_their_file_position() -> None:
    result = load_texts({"team.policy": POLICY})
    found = [(d.span.line, d.span.column, d.message.split(":")[0]) for d in result.errors]
    assert found == [(7, 34, "invalid matches argument")]
