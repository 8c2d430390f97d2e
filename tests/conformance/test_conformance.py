"""Runs every file of cel-spec's simple conformance suite through `policyd eval --batch`'s request handler.

One test per file asserts that file's pass rate (listing its failing cases), and two tests assert the
overall rate. The per-file table is printed at the end of the run (conftest.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format, text_format

from policyd.cel import protojson as pj
from policyd.commands.eval import evaluate_request

from .cel_spec import (
    KNOWN_FAILURES,
    MIN_PASS_RATE,
    FileResult,
    out_of_scope_reason,
    suite_files,
    type_text,
)
from .conftest import RESULTS


def _request(test: Any) -> dict[str, Any]:
    """The batch request for one in-scope SimpleTest."""
    type_env: dict[str, str] = {}
    for decl in test.type_env:
        declared = type_text(json_format.MessageToDict(decl).get("ident", {}).get("type", {"dyn": {}}))
        assert declared is not None  # out_of_scope_reason rejected proto types
        type_env[decl.name] = declared
    bindings = {name: json_format.MessageToDict(v)["value"] for name, v in test.bindings.items()}
    return {
        "expr": test.expr,
        "bindings": bindings,
        "container": test.container,
        "disableMacros": test.disable_macros,
        "disableCheck": test.disable_check,
        "typeEnv": type_env,
        "checkOnly": test.check_only,
    }


def _outcome(test: Any, answer: dict[str, Any]) -> str | None:
    """None when `answer` is what the test expects, else what was wrong."""
    kind = test.WhichOneof("result_matcher")
    if kind in ("eval_error", "any_eval_errors"):
        return None if "error" in answer else f"expected an error, got {answer}"
    if kind in ("unknown", "any_unknowns"):
        return "unknown results are not supported"
    if "error" in answer:
        return f"error: {answer['error']}"
    if test.check_only and kind != "typed_result":
        return None
    if kind == "typed_result":
        expected_type = type_text(json_format.MessageToDict(test.typed_result.deduced_type))
        if expected_type is not None and answer.get("type") != expected_type:
            return f"deduced type {answer.get('type')}, expected {expected_type}"
        if not test.typed_result.HasField("result") or test.check_only:
            return None
        expected = pj.from_json(json_format.MessageToDict(test.typed_result.result))
    elif kind == "value":
        expected = pj.from_json(json_format.MessageToDict(test.value))
    else:
        expected = True
    got = pj.from_json(answer["value"])
    return None if pj.same_value(got, expected) else f"got {answer['value']}"


def run_file(path: Any, simple_pb2: Any) -> FileResult:
    """Run one suite file; every test is either skipped by the rule, passed, failed or a known failure."""
    result = FileResult(path.stem)
    test_file = text_format.Parse(path.read_text(encoding="utf-8"), simple_pb2.SimpleTestFile())
    for section in test_file.section:
        for test in section.test:
            if out_of_scope_reason(test) is not None:
                result.skipped += 1
                continue
            key = f"{path.stem}/{section.name}/{test.name}"
            problem = _outcome(test, evaluate_request(_request(test)))
            if key in KNOWN_FAILURES:
                (result.known if problem is not None else result.stale).append(key)
                if problem is None:
                    result.passed += 1
            elif problem is None:
                result.passed += 1
            else:
                result.failures.append(f"{key}: {test.expr!r}: {problem}")
    return result


@pytest.fixture(scope="session")
def conformance_results(simple_pb2: Any) -> dict[str, FileResult]:
    """Every suite file's result (run once per session; also printed as the table at the end)."""
    if not RESULTS:
        for path in suite_files():
            RESULTS[path.stem] = run_file(path, simple_pb2)
    return RESULTS


@pytest.mark.parametrize("name", [p.stem for p in suite_files()])
def test_file_pass_rate(name: str, conformance_results: dict[str, FileResult]) -> None:
    """Each file passes at least MIN_PASS_RATE of its in-scope tests; known failures stay failing."""
    r = conformance_results[name]
    assert not r.stale, f"listed in KNOWN_FAILURES but passing: {r.stale}"
    assert r.rate >= MIN_PASS_RATE, (
        f"{name}: {r.passed}/{r.in_scope} in-scope tests pass ({r.rate:.1%}); failing:\n"
        + "\n".join(r.failures)
    )


def _overall(results: dict[str, FileResult], names: set[str]) -> tuple[int, int]:
    chosen = [r for n, r in results.items() if n in names]
    return sum(r.passed for r in chosen), sum(r.in_scope for r in chosen)


def test_whole_suite_passes_overall(conformance_results: dict[str, FileResult]) -> None:
    """The whole simple suite passes at least MIN_PASS_RATE of its in-scope tests."""
    passed, in_scope = _overall(conformance_results, set(conformance_results))
    assert in_scope > 1500
    assert passed / in_scope >= MIN_PASS_RATE, f"{passed}/{in_scope}"
