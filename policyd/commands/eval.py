"""`policyd eval EXPR [--var name=JSON ...]` and `policyd eval --batch` (JSON Lines, conformance protocol).

Batch input lines: `{"expr": "...", "bindings": {"x": <cel.expr.Value protojson>}, "container": "...",
"disableMacros": false}`; optional extensions: `"disableCheck": true` (skip the type checker) and
`"typeEnv": {"x": "list(int)"}` or `{"o": "optional_type(string)"}` (declared variable types; otherwise inferred from the bindings) and
`"checkOnly": true` (type-check only: the answer is `{"type": ...}`).
Output lines: `{"value": <cel.expr.Value protojson>}` or `{"error": "..."}`; a checked expression's
answer also carries `"type"`, its checked type as CEL writes it (`list(int)`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from typing import Any

from policyd.cel import protojson as pj
from policyd.cel.checker import format_type
from policyd.cel.optional import optional_of
from policyd.cel.program import CelCompileError, compile_expression, standard_env
from policyd.cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    CelType,
    ListType,
    MapType,
)
from policyd.cel.values import OPTIONAL_TYPE_NAME
from policyd.errors import CelError, PolicydError
from policyd.slips import did_you_mean
from policyd.yaml_loading import json_loads

_PRIMITIVES: dict[str, CelType] = {
    "bool": BOOL,
    "int": INT,
    "uint": UINT,
    "double": DOUBLE,
    "string": STRING,
    "bytes": BYTES,
    "null_type": NULL,
    "dyn": DYN,
    "type": TYPE,
    "timestamp": TIMESTAMP,
    "duration": DURATION,
    "google.protobuf.Timestamp": TIMESTAMP,
    "google.protobuf.Duration": DURATION,
}

_TOKEN = re.compile(r"\s*([A-Za-z_.][A-Za-z0-9_.]*|[(),])")


def parse_type(text: str) -> CelType:
    """`int`, `list(string)`, `map(string, dyn)`, `optional_type(int)` ... -> CelType; raises PolicydError."""
    tokens = _TOKEN.findall(text)
    pos = 0

    def one() -> CelType:
        nonlocal pos
        if pos >= len(tokens):
            raise PolicydError(f"invalid type {text!r}")
        name = tokens[pos]
        pos += 1
        if name in ("list", "map", OPTIONAL_TYPE_NAME) and pos < len(tokens) and tokens[pos] == "(":
            pos += 1
            args = [one()]
            while tokens[pos] == ",":
                pos += 1
                args.append(one())
            if tokens[pos] != ")":
                raise PolicydError(f"invalid type {text!r}")
            pos += 1
            if name == "list" and len(args) == 1:
                return ListType(args[0])
            if name == "map" and len(args) == 2:
                return MapType(args[0], args[1])
            if name == OPTIONAL_TYPE_NAME and len(args) == 1:
                return optional_of(args[0])
            raise PolicydError(f"invalid type {text!r}")
        if name in _PRIMITIVES:
            return _PRIMITIVES[name]
        raise PolicydError(f"unknown type {name!r}")

    try:
        result = one()
    except IndexError:
        raise PolicydError(f"invalid type {text!r}") from None
    if pos != len(tokens):
        raise PolicydError(f"invalid type {text!r}")
    return result


def evaluate_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """Answer one batch request: `{"value": ...}` or `{"error": ...}`; never raises."""
    try:
        if not isinstance(request, Mapping) or not isinstance(request.get("expr"), str):
            return {"error": "request must be an object with a string 'expr'"}
        raw_bindings = request.get("bindings") or {}
        if not isinstance(raw_bindings, Mapping):
            return {"error": "'bindings' must be an object"}
        try:
            bindings = {str(k): pj.from_json(v) for k, v in raw_bindings.items()}
        except RecursionError:  # the value decoder recurses per level
            return {"error": "'bindings' nested too deeply"}
        types: dict[str, CelType] = {name: pj.infer_type(v) for name, v in bindings.items()}
        for name, t in (request.get("typeEnv") or {}).items():
            types[str(name)] = parse_type(str(t))
        env = standard_env(
            types,
            container=str(request.get("container") or ""),
            macros=not bool(request.get("disableMacros", False)),
        )
        compiled = compile_expression(
            request["expr"], env, check=not bool(request.get("disableCheck", False))
        )
        answer: dict[str, Any] = {}
        if compiled.check_result is not None:
            answer["type"] = format_type(compiled.type)
        if request.get("checkOnly") and compiled.check_result is not None:
            return answer
        return {"value": pj.to_json(compiled.evaluate(bindings)), **answer}
    except PolicydError as e:
        return {"error": str(e) or type(e).__name__}
    except RecursionError:
        return {"error": "expression nested too deeply"}
    except Exception as e:  # noqa: BLE001 - a bad line must never stop the batch
        return {"error": f"internal error: {type(e).__name__}: {e}"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    parser.add_argument("expr", nargs="?", help="CEL expression to evaluate")
    parser.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="bind a variable to a JSON value (numbers: int when integral, else double)",
    )
    parser.add_argument("--batch", action="store_true", help="read JSON Lines requests from stdin")


def _display(v: Any) -> Any:
    from policyd.cel.runtime import format_double, to_string
    from policyd.cel.values import Duration, OptionalValue, Timestamp, TypeValue, UInt

    if isinstance(v, OptionalValue):
        return f"optional.of({_display(v.value)})" if v.present else "optional.none()"
    if isinstance(v, UInt):
        return f"{int(v)}u"
    if isinstance(v, bool) or v is None or isinstance(v, int | str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, float):
        return format_double(v)
    if isinstance(v, bytes):
        return repr(v)[1:]
    if isinstance(v, Timestamp | Duration):
        return f"{type(v).__name__.lower()}({json.dumps(to_string(v))})"
    if isinstance(v, TypeValue):
        return v.name
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_display(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_display(k)}: {_display(x)}" for k, x in v.items()) + "}"
    return str(v)


def compile_error_text(expr: str, error: CelError) -> str:
    """What is wrong with `expr`, for a person: every checker issue (or the one error) as
    `error: LINE:COLUMN: message`, the name an unknown one is a slip of, and the line with a caret
    under the place (the batch protocol keeps cel-go's bare message instead)."""
    lines = expr.split("\n")
    issues = error.issues if isinstance(error, CelCompileError) else ()
    found: list[tuple[str, int, int, str | None]] = []
    for issue in issues:
        before = expr[: issue.offset]
        column = issue.offset - (before.rfind("\n") + 1) + 1
        found.append((issue.message, before.count("\n") + 1, column, issue.near))
    out = []
    for message, line, column, near in found or [(error.message, error.line, error.column, None)]:
        out.append(f"error: {line}:{column}: {message}{did_you_mean(near)}\n")
        if 1 <= line <= len(lines):
            out.append(f" | {lines[line - 1]}\n | {' ' * (column - 1)}^\n")
    return "".join(out)


def _run_batch() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json_loads(line)
        except ValueError as e:
            answer: dict[str, Any] = {"error": f"invalid JSON: {e}"}
        else:
            answer = evaluate_request(request)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    if args.batch:
        return _run_batch()
    if not args.expr:
        print("policyd eval: an expression (or --batch) is required", file=sys.stderr)
        return 2
    bindings: dict[str, Any] = {}
    for item in args.var:
        name, sep, text = item.partition("=")
        if not sep:
            print(f"policyd eval: --var needs NAME=JSON, got {item!r}", file=sys.stderr)
            return 2
        try:
            bindings[name] = json_loads(text)
        except ValueError as e:
            print(f"policyd eval: invalid JSON for {name}: {e}", file=sys.stderr)
            return 2
    try:
        env = standard_env({k: pj.infer_type(v) for k, v in bindings.items()})
        value = compile_expression(args.expr, env).evaluate(bindings)
    except CelError as e:
        print(compile_error_text(args.expr, e), file=sys.stderr, end="")
        return 1
    except PolicydError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(_display(value))
    return 0
