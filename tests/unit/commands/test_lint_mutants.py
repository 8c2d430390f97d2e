"""`policyd lint` on mutated copies of the shipped policies and suites, each linted alone (the examples'
`extends default` is the shipped file): it never fails with an exception, and every error names the
mutant, a line within it and a column within that line.

The mutants are seeded, so a failure names a mutant that can be made again: one to three edits per
file, each deleting a token, replacing it or inserting one after it, drawn from the file's own tokens and
from a vocabulary of the language's and CEL's (keywords, operators, literals that do not parse, overflows,
bad escapes and regexes).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from policyd.commands.lint import load_paths

ROOT = Path(__file__).resolve().parents[3]
SOURCES = sorted(
    p
    for pattern in ("policies/*.policy", "policies/examples/*", "policies/tests/*.yaml")
    for p in ROOT.glob(pattern)
    if p.suffix in (".policy", ".yaml")
)
MUTANTS_PER_SEED = 40

TOKEN = re.compile(
    r'"(?:[^"\\\n]|\\.)*"|\d+(?:\.\d+)?|[A-Za-z_][A-Za-z0-9_.]*|==|!=|<=|>=|&&|\|\||[^\sA-Za-z0-9_]'
)
VOCABULARY = (
    "(", ")", "{", "}", "[", "]", ",", ":", "?", "!", "-", "+", "*", "/", "%", "=", "==", ".", "&&", "||",
    "in", "has", "size", "exists", "all", "map", "dyn", "type", "int", "true", "null",
    "node", "pod", "cluster", "let", "filter", "score", "weight", "expr", "reason", "match", "policy",
    "extends", "override", "disable", "profiles", "default", "normalize", "queue", "preemption",
    "1", "0", "-1", "1.5", "1u", "0x1F", "9223372036854775808", "1e400", "'x'", '"y"', "b'x'",
    "'\\x'", "'\\u12'", "r'\\d'", "[1,2][5]", "{}.a", "matches('(')", "duration('1x')",
    "quantity('1Gi')", "x.y.z", "\\", "#", "\n", "\t", "- ", "key: value", "[", "]:", "|",
)  # fmt: skip


def mutate(text: str, rng: random.Random) -> str:
    """`text` with one to three token edits."""
    for _ in range(rng.randint(1, 3)):
        tokens = [(m.start(), m.end()) for m in TOKEN.finditer(text)]
        if not tokens:
            break
        start, end = rng.choice(tokens)
        choice = rng.random()
        if choice < 0.3:
            text = text[:start] + text[end:]
        elif choice < 0.6:
            text = text[:start] + rng.choice(VOCABULARY) + text[end:]
        elif choice < 0.8:
            text = text[:end] + " " + rng.choice(VOCABULARY) + text[end:]
        else:
            other_start, other_end = rng.choice(tokens)
            text = text[:start] + text[other_start:other_end] + text[end:]
    return text


def test_the_sources_are_found() -> None:
    names = {p.name for p in SOURCES}
    assert {"default.policy", "gpu-binpack.policy", "protect-namespace.yaml", "default.yaml"} <= names


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_mutated_policies_get_located_errors_and_no_exception(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    with_errors = 0
    for i in range(MUTANTS_PER_SEED):
        source = rng.choice(SOURCES)
        text = mutate(source.read_text(encoding="utf-8"), rng)
        path = tmp_path / f"mutant-{i}{source.suffix}"
        path.write_text(text, encoding="utf-8")
        where = f"seed {seed}, mutant {i} of {source.name}"
        result = load_paths([str(path)])  # raises on a crash
        errors = [d for d in result.diagnostics if d.severity == "error"]
        with_errors += bool(errors)
        for d in errors:
            assert d.span.file == str(path), (where, d.format())
            lines = text.split("\n")
            assert 1 <= d.span.line <= len(lines), (where, d.format())
            assert 1 <= d.span.column <= len(lines[d.span.line - 1]) + 1, (where, d.format())
    # most edits break something; a lint that found nothing would pass the checks above vacuously
    assert with_errors >= MUTANTS_PER_SEED // 2
