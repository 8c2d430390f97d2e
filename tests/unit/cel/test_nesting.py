"""Deeply nested expressions: refused with a positioned error past the limit, and within it parsed,
checked, compiled and run by every pass (the generated Python within Python's own nesting limits)."""

from __future__ import annotations

from pathlib import Path

import pytest

from policyd.cel import syntax as ast
from policyd.cel.parser import MAX_DEPTH, parse_cel
from policyd.cel.program import compile_expression, standard_env
from policyd.cel.types import INT
from policyd.cel.walk import children, too_deep
from policyd.cli import main
from policyd.errors import CelError, CelEvalError


def _height(e: ast.Expr) -> int:
    return 1 + max((_height(c) for c in children(e)), default=0)


def _run(text: str) -> object:
    return compile_expression(text, standard_env({})).evaluate({})


def test_repeated_not_and_minus_collapse_as_in_cel_go() -> None:
    even = parse_cel("!" * 5000 + "true")
    assert isinstance(even, ast.Const) and even.value is True
    odd = parse_cel("!" * 5001 + "x")
    assert isinstance(odd, ast.Call) and odd.function == "!_" and isinstance(odd.args[0], ast.Ident)
    assert _run("!" * 5001 + "true") is False
    assert _run("-" * 4000 + "(3)") == 3 and _run("-" * 4001 + "(3)") == -3
    assert _run("!!1") == 1  # cel-go: an even number of `!` is the operand itself, whatever its type


def test_a_long_logical_chain_is_balanced_and_keeps_its_meaning() -> None:
    terms = ["false"] * 999 + ["true"]
    tree = parse_cel(" || ".join(terms))
    assert _height(tree) <= 11  # log2(1000) + 1, not 1000
    assert _run(" || ".join(terms)) is True
    assert _run(" && ".join(["true"] * 1000)) is True
    # errors are absorbed as in the left-nested form: a false/true decides, else the error stays
    assert _run(" && ".join(["1 / 0 == 1"] + ["true"] * 300 + ["false"])) is False
    with pytest.raises(CelEvalError, match="division by zero"):
        _run(" || ".join(["1 / 0 == 1"] + ["false"] * 300))


@pytest.mark.parametrize(
    "text",
    [
        " + ".join(["1"] * (MAX_DEPTH + 1)),
        "true ? 1 : (" * MAX_DEPTH + "2" + ")" * MAX_DEPTH,
        "int(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH,
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        "".join(f"[1].all(x{i}, " for i in range(30)) + "true" + ")" * 30,  # comprehensions nest loops
    ],
)
def test_past_the_limit_an_expression_is_refused_where_it_gets_too_deep(text: str) -> None:
    with pytest.raises(CelError, match=r"expression nested too deeply \(more than 100 levels\)") as caught:
        parse_cel(text)
    assert 0 <= caught.value.offset < len(text)  # the node past the limit (a left-nested sum: its first term)


def _alternating(levels: int) -> str:
    text = "x > 0"
    for i in range(levels):
        text = f"(x > -{i} {'&&' if i % 2 else '||'} {text})"
    return text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (" + ".join(["x"] * (MAX_DEPTH - 1)), 99 * 2),
        # three brackets a level (`make_map([(k, v)])`): past Python's 200 unless moved into functions
        ("size(" + "{1: " * 90 + "x" + "}" * 90 + ")", 1),
        ("x > 5 ? 1 : (" * (MAX_DEPTH - 2) + "7" + ")" * (MAX_DEPTH - 2), 7),
        (_alternating(MAX_DEPTH - 2), True),  # error-absorbing `&&`/`||` functions, not nested blocks
        ("".join(f"[1].all(x{i}, " for i in range(24)) + "x > 0" + ")" * 24, True),
        ("".join(f"[1].map(y{i}, " for i in range(16)) + "x" + ")" * 16, [2]),
    ],
)
def test_within_the_limit_every_pass_handles_it(text: str, value: object) -> None:
    assert too_deep(parse_cel(text), MAX_DEPTH) is None
    result = compile_expression(text, standard_env({"x": INT})).evaluate({"x": 2})
    while isinstance(result, list) and len(result) == 1 and isinstance(result[0], list):
        result = result[0]
    assert result == value


def test_a_policy_with_a_hundred_conditions_lints_and_schedules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a left-nested chain of 100 `&&` generated 100 nested Python functions: IndentationError on load
    conditions = " && ".join(f'pod.namespace != "ns{i}"' for i in range(100))
    path = tmp_path / "deny.policy"
    path.write_text(
        'policy deny extends default {\n  profiles = ["policyd"]\n'
        f"  filter NotDenied {{ expr = {conditions} || node.labels.size() < 0 }}\n}}\n"
    )
    assert main(["lint", str(path)]) == 0
    assert main(["simulate", "--policies", str(path)]) == 0
    assert "scheduled" in capsys.readouterr().out
