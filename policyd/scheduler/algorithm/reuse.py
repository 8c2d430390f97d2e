"""Reuse of node results between equivalent pods: a cache in front of the evaluator protocol.

Pods with the same `PodEvaluator.signature()` whose pod-only lets have the same values get the same
verdict and raw scores on an unchanged node unless the evaluation called the cluster functions
(docs/DESIGN.md, "Equivalent pods"). A group keeps them per snapshot row with the row's cache
generation; rows whose generation moved are evaluated again, others are reused. Each filter rule's
verdict and each raw score is keyed by the pod-only values of its own rule only, so a pod whose other
rules' values changed keeps it (a bind that moves the spread counts re-evaluates the spread rule
alone, per zone on every row at once when the evaluator can: `use_filter_values`); a row's combined
verdict is kept while no rule up to its first failing one changed. A row
known to fail may wait for its failure (which rule, which reasons) until someone asks (`DEFERRED`).
The least recently
used groups beyond `capacity` are dropped. A pod without a signature (or a scheduler without reuse)
gets fresh, unshared results: the algorithm is the same either way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from policyd.evaluation.sameness import Unset, same_values, values_text
from policyd.framework import (
    RULE_FAIL,
    RULE_PASS,
    RULE_UNKNOWN,
    CompiledProfile,
    FilterFailure,
    Int8Array,
    IntpArray,
    RuleRef,
)
from policyd.scheduler.lru import BoundedLRU
from policyd.scheduler.snapshot import PodInfoLike, Snapshot

# node verdict codes (>= 0: index of a cached FilterFailure; DEFERRED: fails, the failure is found
# when asked for; OWN and below: a failure of this pod only)
UNKNOWN = -2
PASS = -1
DEFERRED = -3
OWN = -4
MAX_GROUPS = 64


@dataclass(frozen=True)
class NominatedVerdict:
    """The verdict on a node with nominated pods, and what it was decided on: the row's version,
    the nominated pods counted and the pod-only filter values of the first pass (which differ
    between pods of a group whose PreFilter states the nominated pods change differently)."""

    version: int
    pods: tuple[PodInfoLike, ...]
    values: Any
    text: bytes | None
    verdict: FilterFailure | None

    @classmethod
    def of(
        cls, version: int, pods: Sequence[PodInfoLike], values: Any, verdict: FilterFailure | None
    ) -> NominatedVerdict:
        """The verdict `verdict` decided on row version `version` with `pods` and first-pass `values`."""
        return cls(version, tuple(pods), values, values_text(values), verdict)

    def holds(self, version: int, pods: Sequence[PodInfoLike], values: Any) -> bool:
        """True when the verdict was decided on the same row version, pods and first-pass values."""
        return (
            self.version == version
            and len(self.pods) == len(pods)
            and all(a is b for a, b in zip(self.pods, pods, strict=True))
            and same_values(values, self.values, self.text)
        )


class NodeResults:
    """What the pods of one group learnt about every node (rows of one snapshot layout).

    Per row: the combined verdict (`status`: UNKNOWN, PASS, a failure code); per (row, filter rule)
    the rule's own verdict (`verdicts`, framework.RULE_*; a row kept as failing has its rules up to
    the failing one known), each kept while the row's version and the pod-only values that rule reads
    stay the same; per (row, score rule) the raw score likewise."""

    def __init__(self, profile: CompiledProfile, n: int, layout: int, rules: int, filters: int = 0) -> None:
        self.profile = profile
        self.layout = layout
        self.versions: npt.NDArray[np.int64] = np.full(n, -1, dtype=np.int64)
        self.generation = -1  # the snapshot generation `versions` were last brought up to
        self.status: npt.NDArray[np.int32] = np.full(n, UNKNOWN, dtype=np.int32)
        self.failures: list[FilterFailure] = []
        self._codes: dict[int, int] = {}  # id of a failure in `failures` -> its code
        self.verdicts: npt.NDArray[np.int8] = np.zeros((n, filters), dtype=np.int8)
        self.raw: npt.NDArray[np.int64] = np.zeros((n, rules), dtype=np.int64)
        # (row, rule) -> the raw score is known for the rule's current pod-only values
        self.raw_ok: npt.NDArray[np.bool_] = np.zeros((n, rules), dtype=bool)
        # per filter rule, and per score rule: the pod-only values its results were computed with,
        # and their pickles; and all of them together (the common case: nothing changed, one comparison)
        self._filter = _RuleValues(filters)
        self._score = _RuleValues(rules)
        # row -> verdict of a node with nominated pods
        self.nominated: dict[int, NominatedVerdict] = {}

    def use_filter_values(
        self,
        values: Sequence[Any],
        renew: Callable[[list[int]], Int8Array | None] | None = None,
        narrow: Callable[[int, Any, Any], IntpArray | None] | None = None,
    ) -> None:
        """Take each filter rule's pod-only values (`values[rule]`): the verdicts of a rule whose values
        are not the group's are forgotten, with the combined verdicts that may depend on them.

        `narrow(rule, old, new)` may name the only rows where the rule can judge otherwise with its
        new values: only those are forgotten. Otherwise `renew(rules)` may give those rules' verdicts
        on every row afresh (one column per rule): then a row keeps its pass while every renewed
        verdict passes, and any other row's combined verdict is read again from its rule verdicts."""
        moved = self._filter.changed(values)
        if not moved:
            return
        self.nominated = {}
        changed = []
        for rule, old in moved:
            only = narrow(rule, old, values[rule]) if narrow is not None else None
            if only is None:
                changed.append(rule)
            elif only.size:
                self._forget_rule(rule, only)
        if not changed:
            return
        fresh = renew(changed) if renew is not None else None
        status, verdicts = self.status, self.verdicts
        if fresh is None:
            # a row failing at an earlier rule than every changed one keeps its failure
            failing = np.flatnonzero((status != UNKNOWN) & (status != PASS))
            before = np.ascontiguousarray(verdicts.take(failing, axis=0)[:, : min(changed)].T)
            earlier = (before == RULE_FAIL).any(axis=0)  # rule-major: a fast reduction
            verdicts[:, changed] = RULE_UNKNOWN
            status[status == PASS] = UNKNOWN
            status[failing[~earlier]] = UNKNOWN
            return
        before = verdicts[:, changed]
        verdicts[:, changed] = fresh
        # rows whose renewed verdicts moved, and rows keeping a failure found with the old values
        # (its reasons may read them); a row failing later unchanged stays failing (`DEFERRED`)
        rows = np.flatnonzero((fresh != before).any(axis=1) | (status >= 0))
        if rows.size == 0:
            return
        st = status[rows]
        earlier = (verdicts[rows, : min(changed)] == RULE_FAIL).any(axis=1)
        moved_rows = rows[(st == PASS) | ((st != UNKNOWN) & ~earlier)]
        if moved_rows.size:
            kept = verdicts.take(moved_rows, axis=0)
            first = (kept != RULE_PASS).argmax(axis=1)
            at_first = kept[np.arange(len(moved_rows)), first]
            # the first rule not passed fails (its failure is found when asked), or is not known
            status[moved_rows] = np.where(
                at_first == RULE_PASS, PASS, np.where(at_first == RULE_FAIL, DEFERRED, UNKNOWN)
            )

    def _forget_rule(self, rule: int, rows: IntpArray) -> None:
        """Forget filter `rule`'s verdict on `rows`, and their combined verdicts unless they fail at
        an earlier rule."""
        self.verdicts[rows, rule] = RULE_UNKNOWN
        status = self.status[rows]
        earlier = (self.verdicts[rows, :rule] == RULE_FAIL).any(axis=1)
        keep = (status == UNKNOWN) | ((status != PASS) & earlier)
        self.status[rows[~keep]] = UNKNOWN

    def use_score_values(self, values: Sequence[Any]) -> None:
        """Forget the raw scores of each rule whose pod-only values (`values[rule]`) are not the group's."""
        changed = [rule for rule, _ in self._score.changed(values)]
        if changed:
            self.raw_ok[:, changed] = False

    def forget_rows(self, rows: npt.NDArray[np.intp]) -> None:
        """Forget everything known about `rows` (their node or its pods changed)."""
        self.status[rows] = UNKNOWN
        self.verdicts[rows] = RULE_UNKNOWN
        self.raw_ok[rows] = False

    def forget_filters(self) -> None:
        """Forget every verdict (raw scores are keyed by their own values: `use_score_values`)."""
        self.status.fill(UNKNOWN)
        self.verdicts.fill(RULE_UNKNOWN)
        self.failures = []
        self._codes = {}
        self.nominated = {}

    def record_failure(self, failure: FilterFailure) -> int:
        """The verdict code of a reusable `failure` (one code per failure object: the nodes failing
        alike share one, see policyd.evaluation.generated.shared_failure)."""
        code = self._codes.get(id(failure))
        if code is None:  # the list holds the object: its id is not reused while the code is known
            code = self._codes[id(failure)] = len(self.failures)
            self.failures.append(failure)
        return code

    def record_node_verdict(self, row: int, code: int, failure: FilterFailure | None) -> None:
        """Keep a reusable per-node verdict: the rules before the failing one passed (all when none
        failed), the failing one failed, later ones were not evaluated."""
        self.status[row] = code
        rules = self.verdicts.shape[1]
        k = rules if failure is None else self.rule_index[failure.rule]
        self.verdicts[row, :k] = RULE_PASS
        if k < rules:
            self.verdicts[row, k] = RULE_FAIL

    @functools.cached_property
    def rule_index(self) -> dict[RuleRef, int]:
        """Filter rule -> its index among the profile's filters."""
        return {ref: i for i, ref in enumerate(self.profile.filters)}


class _RuleValues:
    """The pod-only values each rule's cached results were computed with (their pickles, which tell
    equal values of different types apart, made only when a value compares equal)."""

    def __init__(self, rules: int) -> None:
        self._values: list[Any] = [Unset()] * rules
        self._texts: list[bytes | None] = [None] * rules
        self._all: Any = Unset()
        self._all_text: bytes | None = None

    def changed(self, values: Sequence[Any]) -> list[tuple[int, Any]]:
        """The rules whose values differ from the last ones (which `values` then replace), each with
        its last values."""
        if self._same(values, self._all):
            if self._all_text is None:
                self._all_text = values_text(self._all)
            if same_values(values, self._all, self._all_text):
                return []
        self._all, self._all_text = values, None
        out: list[tuple[int, Any]] = []
        for j, value in enumerate(values):
            old = self._values[j]
            if self._same(value, old):
                if self._texts[j] is None:
                    self._texts[j] = values_text(old)
                if same_values(value, old, self._texts[j]):
                    continue
            out.append((j, old))
            self._values[j], self._texts[j] = value, None
        return out

    @staticmethod
    def _same(a: Any, b: Any) -> bool:
        """`a == b` (values that cannot be compared are not the same)."""
        if a is b:
            return True
        if isinstance(a, Unset) or isinstance(b, Unset):
            return False
        try:
            return bool(a == b)
        except Exception:  # noqa: BLE001 - values that cannot be compared are not the same
            return False


class GroupCache:
    """Node results per group of equivalent pods, least recently used dropped beyond `capacity`."""

    def __init__(self, capacity: int = MAX_GROUPS) -> None:
        self._groups: BoundedLRU[tuple[int, Hashable], NodeResults] = BoundedLRU(capacity)
        self.hits = 0  # window rows whose verdict was known before the pod
        self.evaluations = 0  # rows evaluated per node
        self.scored = 0  # raw scores computed, one per (row, rule)
        self.judged = 0  # filter verdicts asked of the vectorised plans, one per (row, rule)

    def group(self, profile: CompiledProfile, signature: Hashable, snapshot: Snapshot) -> NodeResults:
        """The group of `signature`, with the rows changed in `snapshot` since its last use forgotten."""
        n = len(snapshot)
        g = self._groups.get(
            (id(profile), signature),
            lambda g: g.profile is profile and g.layout == snapshot.layout and len(g.status) == n,
            lambda: fresh_results(profile, snapshot),
        )
        since = snapshot.rows_changed_since(g.generation)  # a bind's row, not a walk over every row
        changed = np.flatnonzero(g.versions != snapshot.versions) if since is None else since
        if changed.size:
            changed = changed[g.versions[changed] != snapshot.versions[changed]]
            g.forget_rows(changed)
            g.versions[changed] = snapshot.versions[changed]
        g.generation = snapshot.generation
        if len(g.failures) > 4 * n + 64:  # failing rows re-evaluated over and over
            g.forget_filters()
        return g

    def clear(self) -> None:
        """Drop every group."""
        self._groups.clear()


def fresh_results(profile: CompiledProfile, snapshot: Snapshot) -> NodeResults:
    """Empty node results for `snapshot`'s rows (a pod that shares them with no other)."""
    return NodeResults(profile, len(snapshot), snapshot.layout, len(profile.scores), len(profile.filters))
