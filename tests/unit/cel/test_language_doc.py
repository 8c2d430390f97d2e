"""Every CEL example in docs/LANGUAGE.md (`cel` blocks, lines `expression  // => result`) holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from policyd.cel import runtime as rt
from policyd.cel.program import compile_expression, standard_env

LANGUAGE_DOC = Path(__file__).resolve().parents[3] / "docs" / "LANGUAGE.md"
_BLOCK = re.compile(r"^```cel\n(.*?)^```", re.MULTILINE | re.DOTALL)


def doc_examples() -> list[tuple[str, str]]:
    """(expression, expected) of every example line; a line without `// =>` is an error."""
    examples: list[tuple[str, str]] = []
    for block in _BLOCK.findall(LANGUAGE_DOC.read_text(encoding="utf-8")):
        for line in block.splitlines():
            if not line.strip():
                continue
            expr, sep, expected = line.partition("  // => ")
            if not sep:
                raise ValueError(f"docs/LANGUAGE.md: a cel example line without '  // => ': {line!r}")
            examples.append((expr.strip(), expected.strip()))
    return examples


EXAMPLES = doc_examples()


def test_the_doc_has_examples_of_each_feature_and_library() -> None:
    calls = " ".join(expr for expr, _ in EXAMPLES)
    for name in (
        ".?",  # optionals
        "optional.of",
        ".transformList(",  # two-variable comprehensions
        "cel.bind(",
        ".format(",
        ".findAll(",
        "cidr(",
        "ip(",
        "url(",
        "semver(",
        "image(",
        "allContainers(",
        "math.",
        "sets.",
    ):
        assert name in calls, f"docs/LANGUAGE.md has no example of {name}"


@pytest.mark.parametrize(("expr", "expected"), EXAMPLES, ids=[e for e, _ in EXAMPLES])
def test_doc_example(expr: str, expected: str) -> None:
    env = standard_env()
    got = compile_expression(expr, env).evaluate({})
    want = compile_expression(expected, env).evaluate({})
    assert rt.eq(got, want), f"{expr} evaluated to {got!r}, the doc says {expected}"
