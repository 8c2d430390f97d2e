"""The vendored CEL conformance data (cel-spec, Apache-2.0; provenance in cel-spec/README.md) and the
rules of the run: which files run, which tests are out of scope, and which failures are expected.

Every file of the simple suite runs. A test is out of scope only by `out_of_scope_reason` (it needs
protobuf messages or a proto type environment); every other test is in scope and counts towards the
pass rate of its file and of the whole suite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format

CEL_SPEC = Path(__file__).resolve().parent / "cel-spec"
PROTO_DIR = CEL_SPEC / "proto"
SUITE_DIR = CEL_SPEC / "suite"

# Every file must pass this share of its in-scope tests, and the whole suite too.
MIN_PASS_RATE = 0.95

# Individual known failures, "file/section/test" -> the reason. They count as failed in the table;
# a listed test that passes fails its file's test (the list must not go stale).
KNOWN_FAILURES: dict[str, str] = {
    # Python's protobuf text parser leaves the `\?` escape of a bytes field undecoded (C++ protobuf,
    # which cel-spec targets, decodes it to `?`): the expected value read here has a stray backslash.
    "parse/bytes_literals/triple_single_quoted_unescaped_punctuation": "`\\?` in an expected bytes value",
    "parse/bytes_literals/triple_double_quoted_unescaped_punctuation": "`\\?` in an expected bytes value",
}

# Text that marks a test as needing protobuf messages or a proto type environment.
_PROTO_MARKERS = ("TestAllTypes", "cel.expr.conformance.proto", "NestedTestAllTypes")


# The files whose value tests the unit checker test re-checks one by one (tests/unit/cel/test_checker.py).
SAMPLE = (
    "basic",
    "comparisons",
    "conversions",
    "integer_math",
    "lists",
    "logic",
    "macros",
    "string",
)


def sample_files() -> list[Path]:
    """The suite files of `SAMPLE`, in order (a missing one is an error, never a skip)."""
    files = [SUITE_DIR / f"{name}.textproto" for name in SAMPLE]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"vendored CEL conformance files missing: {', '.join(missing)}")
    return files


def suite_files() -> list[Path]:
    """Every file of the vendored simple suite, sorted (an empty suite directory is an error)."""
    files = sorted(SUITE_DIR.glob("*.textproto"))
    if not files:
        raise FileNotFoundError(f"no vendored CEL conformance files in {SUITE_DIR}")
    return files


def out_of_scope_reason(test: Any) -> str | None:
    """Why a SimpleTest is out of scope for a JSON-object engine, or None when it is in scope.

    The one rule: the test needs protobuf messages (`TestAllTypes` and friends, as values, bindings,
    expected results or a container) or declares a function or variable of a proto type.
    """
    text = text_format.MessageToString(test)
    if any(marker in text for marker in _PROTO_MARKERS):
        return "needs protobuf messages"
    for decl in test.type_env:
        d = json_format.MessageToDict(decl)
        if "function" in d:
            return "declares a function"
        if type_text(d.get("ident", {}).get("type", {"dyn": {}})) is None:
            return "declares a variable of a proto type"
    for expr_value in test.bindings.values():
        if "value" not in json_format.MessageToDict(expr_value):
            return "binds a non-value"
    return None


_PRIMITIVE_NAMES = {
    "BOOL": "bool",
    "INT64": "int",
    "UINT64": "uint",
    "DOUBLE": "double",
    "STRING": "string",
    "BYTES": "bytes",
}
_WELL_KNOWN = {"TIMESTAMP": "google.protobuf.Timestamp", "DURATION": "google.protobuf.Duration"}


def type_text(t: dict[str, Any]) -> str | None:
    """cel.expr.Type (JSON) -> the type text policyd prints and `policyd eval` accepts; None for proto types."""
    if "primitive" in t:
        return _PRIMITIVE_NAMES.get(t["primitive"])
    if "dyn" in t:
        return "dyn"
    if "null" in t:
        return "null_type"
    if "wellKnown" in t:
        return _WELL_KNOWN.get(t["wellKnown"])
    if "listType" in t:
        elem = type_text(t["listType"].get("elemType", {"dyn": {}}))
        return None if elem is None else f"list({elem})"
    if "mapType" in t:
        k = type_text(t["mapType"].get("keyType", {"dyn": {}}))
        v = type_text(t["mapType"].get("valueType", {"dyn": {}}))
        return None if k is None or v is None else f"map({k}, {v})"
    if "abstractType" in t:
        name = t["abstractType"].get("name", "")
        params = [type_text(p) for p in t["abstractType"].get("parameterTypes", [])]
        if any(p is None for p in params):
            return None
        return f"{name}({', '.join(p for p in params if p is not None)})" if params else name
    if "type" in t:
        of = type_text(t["type"]) if t["type"] else None
        return f"type({of})" if of is not None else "type"
    return None


@dataclass
class FileResult:
    """The outcome of one suite file: counts and the failing cases."""

    name: str
    passed: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)
    # known failures (KNOWN_FAILURES) that did fail, and those that passed (a stale list)
    known: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    @property
    def in_scope(self) -> int:
        """In-scope tests: every test the rule did not skip."""
        return self.passed + len(self.failures) + len(self.known)

    @property
    def rate(self) -> float:
        """Pass rate over the in-scope tests (1.0 for a file with none)."""
        return self.passed / self.in_scope if self.in_scope else 1.0
