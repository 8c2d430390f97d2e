"""`policyd eval --batch` request handling (the conformance protocol)."""

from __future__ import annotations

import io
import json
import sys

import pytest

from policyd.cli import main
from policyd.commands.eval import evaluate_request


def test_batch_request_value_and_error() -> None:
    assert evaluate_request({"expr": "x * 2", "bindings": {"x": {"int64Value": "21"}}}) == {
        "value": {"int64Value": "42"},
        "type": "int",
    }
    assert evaluate_request({"expr": "[1, 2]"})["type"] == "list(int)"
    assert "type" not in evaluate_request({"expr": "1", "disableCheck": True})
    assert evaluate_request({"expr": "[1][3]", "checkOnly": True}) == {"type": "int"}
    assert "error" in evaluate_request({"expr": "1 / 0"})
    assert "error" in evaluate_request({"expr": "1 +"})
    assert "error" in evaluate_request({"bindings": {}})
    assert evaluate_request({"expr": "[1].all(x, x > 0)", "disableMacros": True}).keys() == {"error"}


def test_batch_cli_never_crashes(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    lines = ['{"expr": "2.5 + 1.0"}', "garbage", '{"expr": "timestamp(0)"}']
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["eval", "--batch"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out[0] == {"value": {"doubleValue": 3.5}, "type": "double"}
    assert "error" in out[1]
    assert out[2]["value"]["objectValue"]["value"] == "1970-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("expr", "shown"),
    [
        ("optional.of('x')", 'optional.of("x")'),
        ("optional.none()", "optional.none()"),
        ("[optional.of(1u)]", "[optional.of(1u)]"),
        ("{'a': optional.of(duration('1s'))}", '{"a": optional.of(duration("1s"))}'),
    ],
)
def test_eval_prints_optional_values_as_cel(
    expr: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", expr]) == 0
    assert capsys.readouterr().out == shown + "\n"


def test_batch_type_env_accepts_optional_types() -> None:
    assert evaluate_request(
        {"expr": "o.orValue('d')", "typeEnv": {"o": "optional_type(string)"}, "checkOnly": True}
    ) == {"type": "string"}
    found = evaluate_request(
        {"expr": "o.value()", "typeEnv": {"o": "optional_type(list(int))"}, "checkOnly": True}
    )
    assert found == {"type": "list(int)"}
    assert evaluate_request({"expr": "o", "typeEnv": {"o": "optional_type(int, int)"}}) == {
        "error": "invalid type 'optional_type(int, int)'"
    }


def test_a_bound_map_keeps_bool_and_int_keys_apart() -> None:
    entries = [
        {"key": {"int64Value": "1"}, "value": {"stringValue": "one"}},
        {"key": {"boolValue": True}, "value": {"stringValue": "yes"}},
    ]
    request = {
        "expr": "size(m) == 2 && m[1] == 'one' && m[true] == 'yes'",
        "bindings": {"m": {"mapValue": {"entries": entries}}},
    }
    request["typeEnv"] = {"m": "map(dyn, string)"}
    assert evaluate_request(request) == {"value": {"boolValue": True}, "type": "bool"}


def test_an_expression_that_does_not_compile_is_shown_with_every_issue_its_place_and_the_slip(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["eval", "size('a') +\n  sise('b') + nmbr", "--var", "number=1"]) == 1
    assert capsys.readouterr().err == (
        "error: 2:7: undeclared reference to 'sise' (in container '') (did you mean 'size'?)\n"
        " |   sise('b') + nmbr\n"
        " |       ^\n"
        "error: 2:15: undeclared reference to 'nmbr' (in container '') (did you mean 'number'?)\n"
        " |   sise('b') + nmbr\n"
        " |               ^\n"
    )
    assert main(["eval", "1 +"]) == 1
    assert (
        capsys.readouterr().err == "error: 1:4: syntax error: unexpected end of expression\n | 1 +\n |    ^\n"
    )


def test_the_batch_protocol_keeps_the_checkers_bare_message() -> None:
    assert evaluate_request({"expr": "sise('b')"}) == {
        "error": "undeclared reference to 'sise' (in container '')"
    }


def test_a_batch_line_nested_past_the_json_decoder_is_answered_and_the_batch_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = '{"expr": "1", "bindings": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    monkeypatch.setattr(sys, "stdin", io.StringIO(deep + '\n{"expr": "1 + 1"}\n'))
    assert main(["eval", "--batch"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out == [
        {"error": "invalid JSON: nested too deeply"},
        {"value": {"int64Value": "2"}, "type": "int"},
    ]


def test_a_var_nested_past_the_json_decoder_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert main(["eval", "--var", f"x={deep}", "size(x)"]) == 2
    assert capsys.readouterr().err == "policyd eval: invalid JSON for x: nested too deeply\n"


def test_a_binding_nested_past_the_value_decoder_is_named_as_the_problem() -> None:
    value: dict[str, object] = {"int64Value": "1"}
    for _ in range(2000):  # within the JSON decoder's recursion, past the value decoder's
        value = {"listValue": {"values": [value]}}
    assert evaluate_request({"expr": "1", "bindings": {"x": value}}) == {
        "error": "'bindings' nested too deeply"
    }
