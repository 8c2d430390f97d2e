"""Reuse of node results between equivalent pods: a cache in front of the evaluator protocol.

Pods with the same `PodEvaluator.signature()` whose pod-only lets have the same values get the same
verdict and raw scores on an unchanged node unless the evaluation called the cluster functions
(docs/DESIGN.md, "Equivalent pods"). A group keeps them per snapshot row with the row's cache
generation; rows whose generation moved are evaluated again, others are reused. Verdicts are keyed
by all the pod-only filter values; a raw score by the pod-only values of its own rule only, so a pod
whose other rules' values changed keeps it. The least recently
used groups beyond `capacity` are dropped. A pod without a signature (or a scheduler without reuse)
gets fresh, unshared results: the algorithm is the same either way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from policyd.framework import CompiledProfile, FilterFailure
from policyd.scheduler.snapshot import PodInfoLike, Snapshot

# node verdict codes (>= 0: index of a cached FilterFailure; <= -3: a failure of this pod only)
UNKNOWN = -2
PASS = -1
MAX_GROUPS = 64


class _Unset:
    """Marks group values never computed (equal to nothing)."""


def same_values(a: Any, b: Any, b_text: str | None = None) -> bool:
    """Equal CEL values of equal types (Python's `==` alone takes 1, 1.0 and True as equal).

    `b_text` is `repr(b)` when the caller kept it. Among `==`-equal values `repr` tells those types
    apart (a differing `repr` of equal values, such as dicts in another order, only costs a reuse).
    """
    if a is b:
        return True
    if isinstance(a, _Unset) or isinstance(b, _Unset):
        return False
    try:
        if a != b:
            return False
        return repr(a) == (repr(b) if b_text is None else b_text)
    except Exception:  # noqa: BLE001 - values that cannot be compared are not the same
        return False


def _text(value: Any) -> str | None:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - same_values then computes it (and fails) again
        return None


@dataclass(frozen=True)
class NominatedVerdict:
    """The verdict on a node with nominated pods, and what it was decided on: the row's version,
    the nominated pods counted and the pod-only filter values of the first pass (which differ
    between pods of a group whose PreFilter states the nominated pods change differently)."""

    version: int
    pods: tuple[PodInfoLike, ...]
    values: Any
    text: str | None
    verdict: FilterFailure | None

    @classmethod
    def of(
        cls, version: int, pods: Sequence[PodInfoLike], values: Any, verdict: FilterFailure | None
    ) -> NominatedVerdict:
        """The verdict `verdict` decided on row version `version` with `pods` and first-pass `values`."""
        return cls(version, tuple(pods), values, _text(values), verdict)

    def holds(self, version: int, pods: Sequence[PodInfoLike], values: Any) -> bool:
        """True when the verdict was decided on the same row version, pods and first-pass values."""
        return (
            self.version == version
            and len(self.pods) == len(pods)
            and all(a is b for a, b in zip(self.pods, pods, strict=True))
            and same_values(values, self.values, self.text)
        )


class NodeResults:
    """What the pods of one group learnt about every node (rows of one snapshot layout)."""

    def __init__(self, profile: CompiledProfile, n: int, layout: int, rules: int) -> None:
        self.profile = profile
        self.layout = layout
        self.versions: npt.NDArray[np.int64] = np.full(n, -1, dtype=np.int64)
        self.status: npt.NDArray[np.int32] = np.full(n, UNKNOWN, dtype=np.int32)
        self.failures: list[FilterFailure] = []
        self.raw: npt.NDArray[np.int64] = np.zeros((n, rules), dtype=np.int64)
        # (row, rule) -> the raw score is known for the rule's current pod-only values
        self.raw_ok: npt.NDArray[np.bool_] = np.zeros((n, rules), dtype=bool)
        self._filter_values: Any = _Unset()
        self._filter_text: str | None = None
        # per score rule: the pod-only values its raw scores were computed with, and their repr;
        # and all of them together (the common case: nothing changed, one comparison)
        self._score_values: list[Any] = [_Unset()] * rules
        self._score_texts: list[str | None] = [None] * rules
        self._all_score_values: Any = _Unset()
        self._all_score_text: str | None = None
        # row -> verdict of a node with nominated pods
        self.nominated: dict[int, NominatedVerdict] = {}

    def use_filter_values(self, values: Any) -> None:
        """Forget the verdicts unless the pod-only filter values are the group's."""
        if not same_values(values, self._filter_values, self._filter_text):
            self.forget_filters()
            self._filter_values, self._filter_text = values, _text(values)

    def use_score_values(self, values: Sequence[Any]) -> None:
        """Forget the raw scores of each rule whose pod-only values (`values[rule]`) are not the group's."""
        if same_values(values, self._all_score_values, self._all_score_text):
            return
        self._all_score_values, self._all_score_text = values, _text(values)
        for j, value in enumerate(values):
            if not same_values(value, self._score_values[j], self._score_texts[j]):
                self.raw_ok[:, j] = False
                self._score_values[j], self._score_texts[j] = value, _text(value)

    def forget_filters(self) -> None:
        """Forget every verdict (raw scores are keyed by their own values: `use_score_values`)."""
        self.status.fill(UNKNOWN)
        self.failures = []
        self.nominated = {}

    def record_failure(self, failure: FilterFailure) -> int:
        """The verdict code of a reusable `failure`."""
        self.failures.append(failure)
        return len(self.failures) - 1


class GroupCache:
    """Node results per group of equivalent pods, least recently used dropped beyond `capacity`."""

    def __init__(self, capacity: int = MAX_GROUPS) -> None:
        self.capacity = capacity
        self._groups: OrderedDict[tuple[int, Hashable], NodeResults] = OrderedDict()
        self.hits = 0  # window rows whose verdict was known before the pod
        self.evaluations = 0  # rows evaluated per node
        self.scored = 0  # raw scores computed, one per (row, rule)

    def group(self, profile: CompiledProfile, signature: Hashable, snapshot: Snapshot) -> NodeResults:
        """The group of `signature`, with the rows changed in `snapshot` since its last use forgotten."""
        key = (id(profile), signature)
        g = self._groups.get(key)
        n = len(snapshot)
        if g is None or g.profile is not profile or g.layout != snapshot.layout or len(g.status) != n:
            g = fresh_results(profile, snapshot)
            self._groups[key] = g
            while len(self._groups) > self.capacity:
                self._groups.popitem(last=False)
        else:
            self._groups.move_to_end(key)
        changed = np.flatnonzero(g.versions != snapshot.versions)
        if changed.size:
            g.status[changed] = UNKNOWN
            g.raw_ok[changed] = False
            g.versions[changed] = snapshot.versions[changed]
        if len(g.failures) > 4 * n + 64:  # failing rows re-evaluated over and over
            g.forget_filters()
        return g

    def clear(self) -> None:
        """Drop every group."""
        self._groups.clear()


def fresh_results(profile: CompiledProfile, snapshot: Snapshot) -> NodeResults:
    """Empty node results for `snapshot`'s rows (a pod that shares them with no other)."""
    return NodeResults(profile, len(snapshot), snapshot.layout, len(profile.scores))
