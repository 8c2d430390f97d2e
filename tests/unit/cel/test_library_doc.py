"""Every example of docs/LANGUAGE.md's "CEL libraries" section (lines `expression  // => result`) holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from policyd.cel import runtime as rt
from policyd.cel.program import compile_expression, standard_env

LANGUAGE_DOC = Path(__file__).resolve().parents[3] / "docs" / "LANGUAGE.md"
_BLOCK = re.compile(r"^```cel\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SECTION = "## CEL libraries"


def library_examples() -> list[tuple[str, str]]:
    """(expression, expected) of every example line in the section; a line without `// =>` is an error."""
    text = LANGUAGE_DOC.read_text(encoding="utf-8")
    start = text.index(_SECTION)
    end = text.find("\n## ", start + len(_SECTION))
    section = text[start:] if end < 0 else text[start:end]
    examples: list[tuple[str, str]] = []
    for block in _BLOCK.findall(section):
        for line in block.splitlines():
            if not line.strip():
                continue
            expr, sep, expected = line.partition("  // => ")
            if not sep:
                raise ValueError(f"docs/LANGUAGE.md: a cel example line without '  // => ': {line!r}")
            examples.append((expr.strip(), expected.strip()))
    return examples


EXAMPLES = library_examples()


def test_the_section_has_examples_of_each_library() -> None:
    calls = " ".join(expr for expr, _ in EXAMPLES)
    for name in (".format(", ".findAll(", "cidr(", "ip(", "url(", "semver(", "math.", "sets."):
        assert name in calls


@pytest.mark.parametrize(("expr", "expected"), EXAMPLES, ids=[e for e, _ in EXAMPLES])
def test_library_doc_example(expr: str, expected: str) -> None:
    env = standard_env()
    got = compile_expression(expr, env).evaluate({})
    want = compile_expression(expected, env).evaluate({})
    assert rt.eq(got, want), f"{expr} evaluated to {got!r}, the doc says {expected}"
