"""Vectorised plans of a policy's rules and their evaluation for one pod over node columns.

A plan (`ExprPlan`) is a filter or score expression the lowering (`policyd.compiler.lowering`) found
to read nothing of the node but columns: its checked AST, the lets it needs and their types. It is
evaluated once per pod over every node (or the given rows) by the `Interpreter`; nodes whose result
is an error come back in the `unsure` mask, and the caller evaluates those with the per-node function,
which gives the exact CEL error text. Results are identical to the generated per-node functions
(tests/unit/evaluation/test_plans.py checks that property).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policyd.cel import syntax as ast
from policyd.evaluation.columnar import (
    AnyArray,
    BoolArray,
    Cat,
    EvalErr,
    Num,
    Unsupported,
    err_of,
    is_scalar,
    num_kind,
    truth,
)
from policyd.evaluation.interpreter import FunctionTable, Interpreter
from policyd.evaluation.label_classes import Guess


@dataclass(frozen=True)
class VectorResult:
    """Per-node outcome of a plan: `values` (filters: passed) and `unsure` (evaluate per node);
    scores: `failed`, the nodes whose evaluation failed (they scored 0), or None when none did."""

    values: AnyArray
    unsure: BoolArray
    failed: BoolArray | None = None


@dataclass(frozen=True)
class ExprPlan:
    """A filter or score expression lowered to column evaluation."""

    expr: ast.Expr
    lets: Mapping[str, ast.Expr]
    closure: tuple[str, ...]
    kind: str  # "filter" | "score"
    functions: FunctionTable
    types: Mapping[int, Any] = field(default_factory=dict)  # id(syntax node) -> checked type
    field_zeros: dict[int, Any] = field(default_factory=dict, compare=False)  # the interpreters' cache
    # a filter decided by label classes: what its last evaluations learnt (`label_classes.decide`)
    label_guess: Guess = field(default_factory=Guess, compare=False)

    def evaluate(
        self,
        pod: Mapping[str, Any],
        columns: Any,
        cluster: Any = None,
        memo: Evaluation | None = None,
        rows: Any = None,
    ) -> VectorResult:
        """Evaluate for `pod` over the rows of `columns` (all, or `rows`); raises `Unsupported`."""
        ev = (
            memo._ev
            if memo is not None
            else Interpreter(
                columns, pod, cluster, self.lets, self.functions, self.types, rows, self.field_zeros
            )
        )
        n = ev.n
        unsure = np.zeros(n, dtype=bool)
        for name in self.closure:
            err = err_of(ev.let(name), n)
            if err is not None:
                unsure |= err
        value = ev.eval(self.expr)
        if self.kind == "filter":
            true, bad = truth(value, n)
            err = err_of(value, n)
            if err is not None:
                unsure |= err
            if isinstance(value, Num) and num_kind(value) != "b":
                true = np.zeros(n, dtype=bool)
            elif is_scalar(value) and value is not True:
                true = np.zeros(n, dtype=bool)
            return VectorResult(true & ~unsure, unsure)
        scores, failed = self._scores(value, n, unsure)
        return VectorResult(scores, np.zeros(n, dtype=bool), failed if failed.any() else None)

    @staticmethod
    def _scores(value: Any, n: int, failed: BoolArray) -> tuple[AnyArray, BoolArray]:
        """The raw scores, 0 where the evaluation failed (`failed`: where a let did), and where it failed."""
        if isinstance(value, Num):
            if num_kind(value) == "o":
                raise Unsupported("score type")
            out = value.values.astype(np.float64)
            if value.err is not None:
                failed = failed | value.err
        elif isinstance(value, Cat):
            # one pass over the values (a score by node name has one per node); the failed ones,
            # rare, are looked for only when there are some
            failures: list[Any] = []
            table = np.array([_as_float(v, failures) for v in value.values], dtype=np.float64)
            out = table[value.codes]
            if failures:
                bad = np.fromiter((_as_float(v, None) is None for v in value.values), dtype=bool)
                failed = failed | bad[value.codes]
        else:
            scalar = _as_float(value, None)
            out = np.full(n, 0.0 if scalar is None else scalar, dtype=np.float64)
            if scalar is None:
                failed = np.ones(n, dtype=bool)
        return np.where(failed, 0.0, out), failed


def _as_float(v: Any, failures: list[Any] | None) -> Any:
    """A score value as a float; for an error or a value that is no number, None, or, with a
    `failures` list, 0.0 after appending `v` to it."""
    if not isinstance(v, EvalErr):
        try:
            return float(v)
        except (TypeError, ValueError, OverflowError):
            pass
    if failures is None:
        return None
    failures.append(v)
    return 0.0


class Evaluation:
    """Shared per-pod state for several plans of one policy (lets computed once)."""

    def __init__(
        self,
        columns: Any,
        pod: Mapping[str, Any],
        lets: Mapping[str, ast.Expr],
        functions: FunctionTable,
        cluster: Any = None,
        types: Mapping[int, Any] | None = None,
        rows: Any = None,
        field_zeros: dict[int, Any] | None = None,
    ) -> None:
        self._ev = Interpreter(columns, pod, cluster, lets, functions, types, rows, field_zeros)

    def know_let(self, name: str, value: Any) -> None:
        """Use `value` for let `name` (computed elsewhere, e.g. a pod-only let) instead of evaluating it."""
        self._ev.let_values[name] = value


@dataclass(frozen=True)
class PolicyPlan:
    """Vectorised plans of one policy's rules, in rule order (None: that rule is per-node only)."""

    lets: Mapping[str, ast.Expr]
    filters: tuple[ExprPlan | None, ...]
    scores: tuple[ExprPlan | None, ...]
    functions: FunctionTable
    types: Mapping[int, Any] = field(default_factory=dict)
    field_zeros: dict[int, Any] = field(default_factory=dict, compare=False)  # the interpreters' cache

    def evaluation(
        self, columns: Any, pod: Mapping[str, Any], cluster: Any = None, rows: Any = None
    ) -> Evaluation:
        """Per-pod state shared by this policy's plans (over `rows` of the columns, default all)."""
        return Evaluation(
            columns, pod, self.lets, self.functions, cluster, self.types, rows, self.field_zeros
        )
