"""Runs cel-spec's simple conformance tests through `policyd eval --batch`'s request handler."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, text_format

from policyd.cel import protojson as pj
from policyd.commands.eval import evaluate_request

from .cel_spec import sample_files
from .conftest import STATS

MIN_PASS_RATE = 0.95

_PRIMITIVE_NAMES = {
    "BOOL": "bool",
    "INT64": "int",
    "UINT64": "uint",
    "DOUBLE": "double",
    "STRING": "string",
    "BYTES": "bytes",
}
_WELL_KNOWN = {"TIMESTAMP": "timestamp", "DURATION": "duration"}


def _type_text(t: dict[str, Any]) -> str | None:
    """cel.expr.Type (JSON) -> the type text `policyd eval` accepts; None when it is a proto type."""
    if "primitive" in t:
        return _PRIMITIVE_NAMES.get(t["primitive"])
    if "dyn" in t:
        return "dyn"
    if "null" in t:
        return "null_type"
    if "wellKnown" in t:
        return _WELL_KNOWN.get(t["wellKnown"])
    if "listType" in t:
        elem = _type_text(t["listType"].get("elemType", {"dyn": {}}))
        return None if elem is None else f"list({elem})"
    if "mapType" in t:
        k = _type_text(t["mapType"].get("keyType", {"dyn": {}}))
        v = _type_text(t["mapType"].get("valueType", {"dyn": {}}))
        return None if k is None or v is None else f"map({k}, {v})"
    return None


def _request(test: Any) -> dict[str, Any] | None:
    """The batch request for one SimpleTest, or None when it is out of scope by the README rule."""
    text = text_format.MessageToString(test)
    if "TestAllTypes" in text or "cel.expr.conformance.proto" in text:
        return None
    type_env: dict[str, str] = {}
    for decl in test.type_env:
        d = json_format.MessageToDict(decl)
        if "function" in d:
            return None
        t = _type_text(d.get("ident", {}).get("type", {"dyn": {}}))
        if t is None:
            return None
        type_env[decl.name] = t
    bindings = {}
    for name, expr_value in test.bindings.items():
        d = json_format.MessageToDict(expr_value)
        if "value" not in d:
            return None
        bindings[name] = d["value"]
    return {
        "expr": test.expr,
        "bindings": bindings,
        "container": test.container,
        "disableMacros": test.disable_macros,
        "disableCheck": test.disable_check,
        "typeEnv": type_env,
    }


def _outcome(test: Any, answer: dict[str, Any]) -> bool:
    kind = test.WhichOneof("result_matcher")
    if kind in ("eval_error", "any_eval_errors"):
        return "error" in answer
    if kind in ("unknown", "any_unknowns"):
        return False
    if "error" in answer:
        return False
    got = pj.from_json(answer["value"])
    if kind == "value":
        expected = pj.from_json(json_format.MessageToDict(test.value))
    elif kind == "typed_result":
        expected = pj.from_json(json_format.MessageToDict(test.typed_result.result))
    else:
        expected = True
    return pj.same_value(got, expected)


def test_conformance(simple_pb2: Any) -> None:
    failures: list[str] = []
    for path in sample_files():
        test_file = text_format.Parse(path.read_text(), simple_pb2.SimpleTestFile())
        for section in test_file.section:
            for test in section.test:
                request = _request(test)
                if request is None:
                    STATS["skipped"] += 1
                    continue
                answer = evaluate_request(request)
                if _outcome(test, answer):
                    STATS["passed"] += 1
                else:
                    STATS["failed"] += 1
                    failures.append(f"{path.stem}/{section.name}/{test.name}: {test.expr!r} -> {answer}")
    total = STATS["passed"] + STATS["failed"]
    assert total > 0
    rate = STATS["passed"] / total
    assert rate >= MIN_PASS_RATE, f"pass rate {rate:.1%}; failures:\n" + "\n".join(failures)
