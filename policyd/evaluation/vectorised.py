"""The vectorised evaluator: a pod's rules over many nodes at once, by the lowered plans.

`VectorisedEvaluator` answers `PodEvaluator.bulk_filter` / `bulk_scores` for the policies that apply
to one pod, over rows of `NodeColumns` (policyd.evaluation.plans). It reuses the pod-only lets
the per-node evaluator prepared (`GeneratedEvaluator.prepare`), so both evaluators see the same values.
A row a plan fails or is unsure about is left to the per-node functions; a rule without a plan, or a
plan that cannot evaluate this pod exactly, makes the whole answer None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from policyd import framework as pl
from policyd.evaluation.code import UNSET, CompiledPolicy, LetError
from policyd.evaluation.columnar import EvalErr, Unsupported
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
        score_offsets: Sequence[int],
        n_scores: int,
    ) -> None:
        self.pod = pod
        self.cluster = cluster  # the cluster functions, seen through the per-node evaluator's call tracker
        self.parts = parts
        self.score_offsets = score_offsets
        self.n_scores = n_scores

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

    def bulk_filter(self, columns: pl.NodeTable, rows: pl.IntpArray) -> tuple[pl.BoolArray, bool] | None:
        """Rows passing every filter by the plans, and whether no cluster call depended on the node."""
        plans = self._plans("filter")
        if plans is None:
            return None
        passed = np.ones(len(rows), dtype=bool)
        self.cluster.called = False
        try:
            for _, code, pod_slots, plan, rules in plans:
                memo = self._evaluation(code, pod_slots, plan, columns, rows)
                for rule in rules:
                    passed &= rule.evaluate(self.pod, columns, self.cluster, memo, rows=rows).values
        except Unsupported:
            return None
        return passed, not self.cluster.called

    def bulk_scores(
        self, columns: pl.NodeTable, rows: pl.IntpArray, wanted: pl.BoolArray
    ) -> tuple[pl.FloatArray, pl.BoolArray] | None:
        """Raw scores of `rows` by the plans (one column per profile score rule; 0 in the columns of
        rules not `wanted`), and per rule whether reusable."""
        plans = self._plans("score")
        if plans is None:
            return None
        out = np.zeros((len(rows), self.n_scores), dtype=np.float64)
        reusable = np.ones(self.n_scores, dtype=bool)
        try:
            for k, code, pod_slots, plan, rules in plans:
                # a rule after one that called the cluster functions may read a let computed then
                self.cluster.called = False
                memo = self._evaluation(code, pod_slots, plan, columns, rows)
                start = self.score_offsets[k]
                for j, rule in enumerate(rules):
                    if not wanted[start + j]:
                        continue
                    out[:, start + j] = rule.evaluate(self.pod, columns, self.cluster, memo, rows=rows).values
                    reusable[start + j] = not self.cluster.called
        except Unsupported:
            return None
        return out, reusable
