"""What the playground page asks for: its requests read, policy text linted and compiled, cluster text
loaded, and an attempt turned into a heatmap.

A request names its texts (the names are labels for diagnostics and select the policy form, never
paths: nothing is read from disk but the shipped default.policy). Policy text goes through the loader
and compiler `policyd lint` and `policyd simulate` use, with the same CEL cost limits. The run itself
is `policyd.commands.playground.run_request` (the simulate command's code path); the selected pod's
last attempt becomes a nodes x rules heatmap (`scheduler.attempts.explain_rows`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policyd import shipped
from policyd.backends.cluster_file import ClusterObjects, load_cluster_text
from policyd.compiler.profiles import compile_sources
from policyd.errors import ClusterDataError, Diagnostic, PolicyError
from policyd.framework import CompiledPolicySet
from policyd.policy.loader import POLICY_SUFFIXES, load_texts
from policyd.scheduler.attempts import Attempt, RuleCell, explain_rows

# the shipped policy a page's policy may extend, loaded beside it when the request asks for it
BASE_POLICY_NAME = "default.policy"
# a cluster larger than this is refused before scheduling (the run is also bounded in time)
MAX_NODES = 500
MAX_PODS = 2000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class RequestError(Exception):
    """A request the playground refuses: a message and the diagnostics (file, line, column) behind it."""

    def __init__(self, message: str, diagnostics: tuple[dict[str, object], ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.diagnostics = diagnostics

    def to_json(self) -> dict[str, Any]:
        """The JSON error body: `error` and `diagnostics`."""
        return {"error": self.message, "diagnostics": list(self.diagnostics)}


@dataclass(frozen=True)
class PolicyInput:
    """The page's policy text, its name (`.policy`: text form, `.yaml`/`.yml`: YAML) and whether the
    shipped default.policy is loaded beside it."""

    name: str
    text: str
    with_default: bool

    def texts(self) -> dict[str, str]:
        """The policy set by name, as `load_texts` takes it."""
        out = (
            {BASE_POLICY_NAME: shipped.default_policy().read_text(encoding="utf-8")}
            if self.with_default
            else {}
        )
        out[self.name] = self.text
        return out


@dataclass(frozen=True)
class RunInput:
    """A run: the policy, the cluster text and its name, the seed, and the pod to explain (None: as
    `simulate --explain` picks one)."""

    policy: PolicyInput
    cluster_name: str
    cluster_text: str
    seed: int
    pod: str | None


def _field(doc: Mapping[str, Any], key: str, kind: type, default: Any = None) -> Any:
    value = doc.get(key, default)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RequestError(f"request field {key!r} must be a {kind.__name__}")
    return value


def _name(value: str, key: str, suffixes: tuple[str, ...]) -> str:
    if not _NAME.fullmatch(value) or not value.endswith(suffixes):
        raise RequestError(
            f"request field {key!r}: {value!r} is not a file name ending in {', '.join(suffixes)}"
        )
    return value


def policy_input(doc: Any) -> PolicyInput:
    """The policy part of a lint or run request (`policy`: {name, text}, `withDefault`)."""
    if not isinstance(doc, dict):
        raise RequestError("the request body must be a JSON object")
    policy = _field(doc, "policy", dict)
    name = _name(_field(policy, "name", str, "playground.policy"), "policy.name", POLICY_SUFFIXES)
    with_default = _field(doc, "withDefault", bool, False)
    if with_default and name == BASE_POLICY_NAME:
        raise RequestError(f"the page's policy cannot be named {BASE_POLICY_NAME} beside the shipped one")
    return PolicyInput(name, _field(policy, "text", str), with_default)


def run_input(doc: Any) -> RunInput:
    """A run request: the policy part, `cluster` {name, text}, `seed` and `pod`."""
    policy = policy_input(doc)
    cluster = _field(doc, "cluster", dict)
    name = _name(_field(cluster, "name", str, "cluster.yaml"), "cluster.name", (".yaml", ".yml", ".json"))
    pod = doc.get("pod")
    if pod is not None and not isinstance(pod, str):
        raise RequestError("request field 'pod' must be a string (namespace/name) or null")
    return RunInput(policy, name, _field(cluster, "text", str), _field(doc, "seed", int, 0), pod or None)


def _sorted(diagnostics: list[Diagnostic]) -> list[dict[str, object]]:
    ordered = sorted(diagnostics, key=lambda d: (d.span.file, d.span.line, d.span.column, d.message))
    return [d.to_json() for d in ordered]


def lint(doc: Any) -> dict[str, Any]:
    """`POST /api/lint`: every diagnostic `policyd lint` reports for the policy set."""
    policy = policy_input(doc)
    result = load_texts(policy.texts())
    return {"diagnostics": _sorted(result.diagnostics), "profiles": sorted(result.profiles)}


def _cluster_problems(err: ClusterDataError, source: str) -> tuple[dict[str, object], ...]:
    """The loader's `source:line[:column]: message` lines as diagnostics; a line without a place
    (`source: message`, or any other) has no line and column, as `Diagnostic.to_json` gives them."""
    at = re.compile(rf"{re.escape(source)}:(\d+)(?::(\d+))?:? (.*)")
    out: list[dict[str, object]] = []
    for line in str(err).splitlines():
        m = at.fullmatch(line)
        row, column, message = (
            (int(m[1]), int(m[2] or 1), m[3]) if m else (None, None, line.removeprefix(f"{source}: "))
        )
        out.append({"file": source, "line": row, "column": column, "severity": "error", "message": message})
    return tuple(out)


def load_cluster(name: str, text: str) -> ClusterObjects:
    """The cluster text's objects, within the size limits (RequestError naming the line otherwise)."""
    try:
        objects = load_cluster_text(text, name)
    except ClusterDataError as err:
        raise RequestError(f"{name}: the cluster cannot be loaded", _cluster_problems(err, name)) from None
    if len(objects.nodes) > MAX_NODES or len(objects.pods) > MAX_PODS:
        raise RequestError(
            f"{name}: {len(objects.nodes)} nodes and {len(objects.pods)} pods: the playground schedules "
            f"at most {MAX_NODES} nodes and {MAX_PODS} pods (use `policyd simulate` for larger clusters)"
        )
    return objects


def compiled_policies(policy: PolicyInput) -> CompiledPolicySet:
    """The policy set compiled as `policyd simulate` compiles files (RequestError with its diagnostics)."""
    try:
        compiled = compile_sources(policy.texts(), generation=1)
    except PolicyError as err:
        raise RequestError("the policy has errors", tuple(_sorted(err.diagnostics))) from None
    if not compiled.profiles:
        raise RequestError("the policy set declares no scheduler profile: no pod can be scheduled")
    return compiled


def _cell(cell: RuleCell) -> dict[str, Any]:
    out: dict[str, Any] = {"verdict": cell.verdict}
    if cell.reasons:
        out["reasons"] = list(cell.reasons)
    if cell.score is not None:
        out.update(raw=cell.score.raw, normalized=cell.score.normalized, weighted=cell.score.weighted)
        if cell.score.error is not None:
            out["error"] = cell.score.error
    return out


def heatmap(attempt: Attempt) -> dict[str, Any]:
    """One attempt as nodes (columns) x rules (rows): filter verdicts and score parts per cell."""
    return {
        "pod": attempt.pod,
        "attempt": attempt.number,
        "profile": attempt.profile,
        "result": attempt.result,
        "node": attempt.chosen,
        "message": attempt.message,
        "nominatedNode": attempt.nominated_node,
        "nodes": [
            {"name": rec.node, "feasible": rec.feasible, "total": rec.score.total if rec.score else None}
            for rec in attempt.nodes
        ],
        "rows": [
            {"kind": row.kind, "rule": row.label, "cells": [_cell(c) for c in row.cells]}
            for row in explain_rows(attempt)
        ],
    }
