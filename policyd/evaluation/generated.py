"""The per-node evaluator: a pod's rules by the generated functions of the policies applying to it.

`GeneratedEvaluator` is the `PodEvaluator` a compiled profile hands the scheduler for one pod. It
evaluates nodes one at a time with the generated Python functions (policyd.compiler.codegen) and
answers the many-node calls with the lowered plans (`VectorisedEvaluator`), over the same pod-only
lets. For the reuse cache in front of it (docs/DESIGN.md, "Equivalent pods") it offers
`signature()` (the pod fields node evaluations read), `prepare(phase)` (the pod-only lets of the
filters or scores, computed before any node so they can be compared between pods) and
`cluster_called` (whether the last node evaluation called the cluster functions, whose answers depend on
more than the pod and the node).
"""

from __future__ import annotations

import pickle
from collections.abc import Hashable, Sequence
from typing import Any

from policyd import framework as pl
from policyd.evaluation.code import UNSET, CompiledPolicy, RuleLayout
from policyd.evaluation.map_keys import Memo, moved_keys
from policyd.evaluation.vectorised import Part, VectorisedEvaluator

# equal failures are one object: the nodes a pod fails on alike share it, so that counting failures
# (FailedScheduling messages, the rules that rejected a pod) counts a few identities, not every node
MAX_SHARED_FAILURES = 4096
_failures: dict[tuple[Any, ...], pl.FilterFailure] = {}


def shared_failure(
    rule: pl.RuleRef, reasons: tuple[str, ...], error: bool, unresolvable: bool
) -> pl.FilterFailure:
    """The one `FilterFailure` of these fields (and this very rule object); the table is emptied
    when full."""
    key = (id(rule), rule, reasons, error, unresolvable)
    try:
        failure = _failures.get(key)
    except TypeError:  # a reason that is no string: unshared
        return pl.FilterFailure(rule, reasons, error=error, unresolvable=unresolvable)
    if failure is None:
        if len(_failures) >= MAX_SHARED_FAILURES:
            _failures.clear()
        failure = _failures[key] = pl.FilterFailure(rule, reasons, error=error, unresolvable=unresolvable)
    return failure


class ClusterCalls:
    """Stands in for the cluster functions during node evaluations and notes whether it was called."""

    __slots__ = ("called", "cluster")

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.called = False

    def __getattr__(self, name: str) -> Any:
        self.called = True
        return getattr(self.cluster, name)


class GeneratedEvaluator:
    """Per-pod evaluation against nodes (the `PodEvaluator` of one profile)."""

    def __init__(
        self,
        pod: pl.CelObject,
        cluster: Any,
        parts: Sequence[tuple[int, CompiledPolicy]],
        layout: RuleLayout,
        node_pod_fields: tuple[str, ...] | None,
    ) -> None:
        self.pod = pod
        self.calls = ClusterCalls(cluster)
        self.cluster: Any = cluster
        self.parts: list[Part] = [(k, code, [UNSET] * code.pod_slots) for k, code in parts]
        self.node: Any = None
        self.node_slots: list[list[Any]] = []
        self.layout = layout
        self.node_pod_fields = node_pod_fields
        self.vectorised = VectorisedEvaluator(pod, self.calls, self.parts, layout)
        self._moved: Memo = {}  # pod-only values compared by `rows_to_renew`
        self._labelled: dict[frozenset[str], pl.IntpArray] = {}  # and the rows their moved keys label

    # -- reuse across pods

    def signature(self) -> Hashable | None:
        """A hashable key equal for pods whose node evaluations read the same pod values, or None.

        The key is the pickle of the applying policies and the pod fields they read: equal pickles
        load as equal values of the same types (1, 1.0 and true differ). Pods whose maps list their
        entries in another order get other keys, which only costs their reuse."""
        fields = self.node_pod_fields
        if fields is None:
            return None
        pod = self.pod
        read = {f: pod[f] for f in fields if f in pod}
        try:
            return pickle.dumps((tuple(k for k, _, _ in self.parts), read), pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - a value that cannot be pickled: no reuse for this pod
            return None

    def prepare(self, phase: pl.EvaluationPhase) -> tuple[Any, ...]:
        """Compute the pod-only lets of `phase` ("filter" or "score"); returns one tuple per profile
        filter (or score) rule: the pod-only values that rule reads (() for policies not applying)."""
        layout = self.layout
        filters = phase == "filter"
        size = layout.n_filters if filters else layout.n_scores
        per_rule: list[tuple[Any, ...]] | None = None
        cluster = self.calls.cluster
        for k, code, pod_slots in self.parts:
            prepare = code.prepare_filter if filters else code.prepare_score
            values_of = code.filter_rule_values if filters else code.score_rule_values
            assert prepare is not None and values_of is not None
            prepare(self.pod, cluster, pod_slots)
            values = values_of(pod_slots)
            if len(values) == size:  # the profile's only policy: its rules are all of them
                return values
            if per_rule is None:
                per_rule = [()] * size
            start = (layout.filter_offsets if filters else layout.score_offsets)[k]
            per_rule[start : start + len(values)] = values
        return tuple(per_rule) if per_rule is not None else ((),) * size

    def applied(self) -> tuple[int, ...]:
        """Indexes into the profile's policies of those whose `match` holds for the pod."""
        return tuple(k for k, _, _ in self.parts)

    def track_cluster(self) -> None:
        """From now on node evaluations see the cluster functions through `ClusterCalls`."""
        self.cluster = self.calls

    @property
    def cluster_called(self) -> bool:
        """True when a node evaluation called the cluster functions since the last `reset_cluster_called`."""
        return self.calls.called

    def reset_cluster_called(self) -> None:
        """Start noting cluster function calls afresh."""
        self.calls.called = False

    # -- many nodes at once: the vectorised evaluator

    def bulk_filter(
        self, columns: pl.NodeTable, rows: pl.IntpArray, wanted: pl.BoolArray
    ) -> tuple[pl.Int8Array, pl.BoolArray] | None:
        """Verdicts of the `wanted` filter rules on `rows` by the vectorised plans, and per rule
        whether reusable (None: no plan)."""
        return self.vectorised.bulk_filter(columns, rows, wanted)

    def filter_by_classes(self, columns: pl.NodeTable, rules: Sequence[int]) -> pl.Int8Array | None:
        """Verdicts of filter `rules` on every row, decided per class of nodes alike under the labels
        each reads (None: one of them cannot be)."""
        return self.vectorised.filter_by_classes(columns, rules)

    def bulk_scores(
        self, columns: pl.NodeTable, rows: pl.IntpArray, wanted: pl.BoolArray
    ) -> tuple[pl.FloatArray, pl.BoolArray] | None:
        """Raw scores of `rows` for the `wanted` rules by the vectorised plans, and per rule whether reusable."""
        return self.vectorised.bulk_scores(columns, rows, wanted)

    def rows_to_renew(self, columns: pl.NodeTable, rule: int, old: Any, new: Any) -> pl.IntpArray | None:
        """The rows where filter `rule` may judge otherwise with pod-only values `new` than with `old`:
        those labelled with a key that moved in a leaf map the rule tests labels against, when that
        is all that differs (`policyd.compiler.membership`, `policyd.evaluation.map_keys`)."""
        offsets = self.layout.filter_offsets
        for k, code, _ in self.parts:
            j = rule - offsets[k]
            if 0 <= j < len(code.filters):
                types = code.filter_key_deltas[j] if code.filter_key_deltas else None
                keys = None if types is None else moved_keys(old, new, types, self._moved)
                if keys is None:
                    return None
                rows = self._labelled.get(keys)
                if rows is None:  # rules reading the same let move the same keys
                    rows = self._labelled[keys] = columns.rows_labelled(keys)
                return rows
        return None

    # -- one node at a time: the generated functions

    def _slots(self, node: pl.CelObject) -> list[list[Any]]:
        if node is not self.node:
            self.node = node
            self.node_slots = [[UNSET] * code.node_slots for _, code, _ in self.parts]
        return self.node_slots

    def filter(self, node: pl.CelObject) -> pl.FilterFailure | None:
        """The first failing filter rule for `node`, or None."""
        slots = self._slots(node)
        for i, (_, code, pod_slots) in enumerate(self.parts):
            failed = code.filter(self.pod, self.cluster, node, pod_slots, slots[i])
            if failed is not None:
                index, reasons, error, unresolvable = failed
                return shared_failure(code.filters[index], tuple(reasons), error, unresolvable)
        return None

    def filter_all(self, node: pl.CelObject) -> list[pl.FilterResult]:
        """Every filter rule's verdict for `node` (applying policies only)."""
        slots = self._slots(node)
        out: list[pl.FilterResult] = []
        for i, (_, code, pod_slots) in enumerate(self.parts):
            for index, passed, reasons, error in code.filter_all(
                self.pod, self.cluster, node, pod_slots, slots[i]
            ):
                out.append(pl.FilterResult(code.filters[index], passed, tuple(reasons), error))
        return out

    def score(self, node: pl.CelObject) -> list[float]:
        """Raw scores per profile score rule (0 for rules of policies that do not apply)."""
        slots = self._slots(node)
        out = [0.0] * self.layout.n_scores
        for i, (k, code, pod_slots) in enumerate(self.parts):
            start = self.layout.score_offsets[k]
            values = code.score(self.pod, self.cluster, node, pod_slots, slots[i])
            out[start : start + len(values)] = values
        return out

    def score_errors(self, node: pl.CelObject) -> list[str | None]:
        """Per profile score rule, why its evaluation on `node` failed (it scored 0), or None."""
        slots = self._slots(node)
        out: list[str | None] = [None] * self.layout.n_scores
        for i, (k, code, pod_slots) in enumerate(self.parts):
            start = self.layout.score_offsets[k]
            results = code.score_all(self.pod, self.cluster, node, pod_slots, slots[i])
            out[start : start + len(results)] = [error for _, error in results]
        return out
