"""The vectorised evaluator: a pod's rules over many nodes at once, by the lowered plans.

`VectorisedEvaluator` answers `PodEvaluator.bulk_filter` / `bulk_scores` for the policies that apply
to one pod, over rows of `NodeColumns` (policyd.evaluation.plans). It reuses the pod-only lets
the per-node evaluator prepared (`GeneratedEvaluator.prepare`), so both evaluators see the same values.
A row a plan fails or is unsure about is left to the per-node functions; a rule without a plan, or a
plan that cannot evaluate this pod exactly, makes the whole answer None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from policyd import framework as pl
from policyd.evaluation.code import UNSET, CompiledPolicy, LetError, RuleLayout
from policyd.evaluation.columnar import EvalErr, Unsupported
from policyd.evaluation.label_classes import decide, decide_classes
from policyd.evaluation.plans import Evaluation, ExprPlan, PolicyPlan

# (profile index of the policy, its code, its pod-only let slots): a policy that applies to the pod
Part = tuple[int, CompiledPolicy, list[Any]]


class VectorisedEvaluator:
    """The lowered plans of the policies applying to one pod."""

    def __init__(
        self,
        pod: pl.CelObject,
        cluster: Any,
        parts: Sequence[Part],
        layout: RuleLayout,
    ) -> None:
        self.pod = pod
        self.cluster = cluster  # the cluster functions, seen through the per-node evaluator's call tracker
        self.parts = parts
        self.layout = layout

    def _plans(
        self, kind: str
    ) -> list[tuple[int, CompiledPolicy, list[Any], PolicyPlan, list[ExprPlan]]] | None:
        out = []
        for k, code, pod_slots in self.parts:
            plan = code.vector_plan()
            lowered = plan.filters if kind == "filter" else plan.scores
            rules = [r for r in lowered if r is not None]
            if len(rules) != len(lowered):
                return None  # a rule without a plan: the per-node functions answer
            out.append((k, code, pod_slots, plan, rules))
        return out

    def _evaluation(
        self, code: CompiledPolicy, pod_slots: list[Any], plan: PolicyPlan, columns: Any, rows: Any
    ) -> Evaluation:
        """A plan evaluation over `rows` that reuses the pod-only lets computed by `prepare`."""
        memo = plan.evaluation(columns, self.pod, self.cluster, rows=rows)
        for name, slot in code.pod_let_slots.items():
            value = pod_slots[slot]
            if value is UNSET:
                continue
            memo.know_let(name, EvalErr(value.message) if isinstance(value, LetError) else value)
        return memo

    def _verdict(
        self, verdict: Callable[..., Any], code: CompiledPolicy, pod_slots: list[Any]
    ) -> Callable[[Any], bool | None]:
        """A rule's generated verdict function on one node for this pod (fresh node-let slots)."""
        pod, cluster, node_slots = self.pod, self.cluster, code.node_slots
        return lambda node: verdict(pod, cluster, node, pod_slots, [UNSET] * node_slots)  # type: ignore[no-any-return]

    def bulk_filter(
        self, columns: pl.NodeTable, rows: pl.IntpArray, wanted: pl.BoolArray
    ) -> tuple[pl.Int8Array, pl.BoolArray] | None:
        """Verdicts of the `wanted` filter rules on `rows` by the plans (`RULE_UNKNOWN` where unsure
        or not wanted; rules of policies not applying pass), and per rule whether no cluster call
        depended on the node."""
        plans = self._plans("filter")
        if plans is None:
            return None
        out = np.full((len(rows), self.layout.n_filters), pl.RULE_PASS, dtype=np.int8)
        reusable = np.ones(self.layout.n_filters, dtype=bool)
        try:
            for k, code, pod_slots, plan, rules in plans:
                start = self.layout.filter_offsets[k]
                out[:, start : start + len(rules)] = pl.RULE_UNKNOWN
                if not wanted[start : start + len(rules)].any():
                    continue
                # a rule after one that called the cluster functions may read a let computed then
                self.cluster.called = False
                memo: Evaluation | None = None
                verdicts = code.filter_verdicts
                for j, rule in enumerate(rules):
                    if not wanted[start + j]:
                        continue
                    verdict = verdicts[j] if verdicts else None
                    decided = (
                        None
                        if verdict is None
                        else decide(self._verdict(verdict, code, pod_slots), columns, rows, rule.label_guess)
                    )
                    if decided is not None:
                        passed, unsure = decided
                    else:
                        if memo is None:
                            memo = self._evaluation(code, pod_slots, plan, columns, rows)
                        result = rule.evaluate(self.pod, columns, self.cluster, memo, rows=rows)
                        passed, unsure = result.values, result.unsure
                    out[:, start + j] = np.where(
                        unsure, pl.RULE_UNKNOWN, np.where(passed, pl.RULE_PASS, pl.RULE_FAIL)
                    )
                    reusable[start + j] = not self.cluster.called
        except Unsupported:
            return None
        return out, reusable

    def filter_by_classes(self, columns: pl.NodeTable, rules: Sequence[int]) -> pl.Int8Array | None:
        """The verdicts of filter `rules` (profile indexes) on every row, one column per rule, each
        decided once per class of nodes alike under the labels it reads (`label_classes.decide`);
        None when one of them reads more of the node, its nodes fall into too many classes, or its
        verdict called the cluster functions (it could not be kept for equivalent pods)."""
        offsets = self.layout.filter_offsets
        asked = []  # (column, policy code and pod-only slots, the rule's verdict function and plan)
        for k, code, pod_slots in self.parts:
            for i, rule in enumerate(rules):
                j = rule - offsets[k]
                if not 0 <= j < len(code.filters):
                    continue
                verdict = code.filter_verdicts[j] if code.filter_verdicts else None
                plan = code.vector_plan().filters[j]
                if verdict is None or plan is None:
                    return None
                asked.append((i, code, pod_slots, verdict, plan))
        decided_columns = []
        for i, code, pod_slots, verdict, plan in asked:
            self.cluster.called = False
            decided = decide_classes(self._verdict(verdict, code, pod_slots), columns, None, plan.label_guess)
            if decided is None or self.cluster.called:
                return None
            inverse, results = decided
            codes = [
                pl.RULE_PASS if r is True else pl.RULE_UNKNOWN if r is None else pl.RULE_FAIL for r in results
            ]
            decided_columns.append((i, np.array(codes, dtype=np.int8)[inverse]))
        out = np.full((len(columns), len(rules)), pl.RULE_PASS, dtype=np.int8)  # policies not applying pass
        for i, column in decided_columns:
            out[:, i] = column
        return out

    def bulk_scores(
        self, columns: pl.NodeTable, rows: pl.IntpArray, wanted: pl.BoolArray
    ) -> tuple[pl.FloatArray, pl.BoolArray] | None:
        """Raw scores of `rows` by the plans (one column per profile score rule; 0 in the columns of
        rules not `wanted`), and per rule whether reusable."""
        plans = self._plans("score")
        if plans is None:
            return None
        out = np.zeros((len(rows), self.layout.n_scores), dtype=np.float64)
        reusable = np.ones(self.layout.n_scores, dtype=bool)
        try:
            for k, code, pod_slots, plan, rules in plans:
                # a rule after one that called the cluster functions may read a let computed then
                self.cluster.called = False
                memo = self._evaluation(code, pod_slots, plan, columns, rows)
                start = self.layout.score_offsets[k]
                for j, rule in enumerate(rules):
                    if not wanted[start + j]:
                        continue
                    result = rule.evaluate(self.pod, columns, self.cluster, memo, rows=rows)
                    out[:, start + j] = result.values
                    reusable[start + j] = not self.cluster.called
                    if result.failed is not None:
                        code.errors.score_failed(j, int(np.count_nonzero(result.failed)))
        except Unsupported:
            return None
        return out, reusable
