"""The pods nominated to each snapshot row as columns, and the verdicts a group learnt on such rows.

kube-scheduler filters a node that has nominated pods of at least the pod's priority twice, the first
time with them on it (feasibility.filter_with_nominated). With hundreds of preemptors nominated at
once every pod meets hundreds of such nodes; asking the nominator node by node costs more than the
filters. `NominatedRows` keeps, per row of one snapshot layout, the pods nominated there with a stamp
that changes whenever they do, brought up to date from the nominator's change log
(`NominationSource.nominations_since`): a pod's rows with nominated pods are then told in bulk.

A row is *plain* for a pod when every pod nominated there counts for it (priority at least its own,
not the pod itself) and none has inter-pod (anti-)affinity terms. On a plain row the nominated pods
are the same for every pod of a group; when the pod's pod-only state counted no pods they change no
pod-only value, and the pod's own evaluator decides the first pass
(`NominatedEvaluator.adds_nothing`). `NominatedVerdicts` keeps such verdicts of a group as columns
(row version and nomination stamp they were decided on), valid while the group's pod-only filter
values stay the same, so that a pod learns those of unchanged plain rows in one comparison.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from policyd.evaluation.sameness import same_values, values_text
from policyd.framework import FilterFailure
from policyd.scheduler.algorithm.reuse import NodeResults
from policyd.scheduler.cluster.affinity_terms import has_pod_affinity
from policyd.scheduler.lru import BoundedLRU
from policyd.scheduler.snapshot import PodInfoLike, Snapshot, next_generation

IntpArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

NONE = -1  # no pods nominated to the row; no verdict kept (stamps and versions are >= 0)
# priority bounds of a row without nominated pods: every pod's priority is above the highest and
# below the lowest
_LOWEST = np.iinfo(np.int64).min
_HIGHEST = np.iinfo(np.int64).max
_NO_ROWS: IntpArray = np.zeros(0, dtype=np.intp)
_NO_ROWS.flags.writeable = False
MAX_GROUPS = 64


@dataclass(frozen=True)
class NominationChanges:
    """The nominator's answer to `nominations_since`: its change count now, and the pods now
    nominated to each node changed since (to every node with nominated pods when `complete`)."""

    version: int
    pods: Mapping[str, tuple[PodInfoLike, ...]]
    complete: bool


class NominationSource(Protocol):
    """The nominator as `NominatedRows` reads it (policyd.scheduler.queue.SchedulingQueue)."""

    def nominations_since(self, version: int) -> NominationChanges:
        """The nominations changed after change `version`."""
        ...


class NominatedRows:
    """Per row of a snapshot layout: the pods nominated to its node, a stamp that changes whenever
    they do (NONE: no pods), their lowest and highest priority and whether one has inter-pod
    (anti-)affinity terms."""

    def __init__(self) -> None:
        self.layout = -1
        self.version = -1  # the nominator's change count the columns reflect
        self.pods: list[tuple[PodInfoLike, ...]] = []
        self.stamps: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.lowest: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.highest: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.affine: BoolArray = np.zeros(0, dtype=bool)
        self._row_of: dict[str, int] = {}  # nominated pod key -> its row

    def sync(self, snapshot: Snapshot, source: NominationSource) -> NominatedRows:
        """Bring the columns up to `snapshot`'s rows and the nominator's current nominations."""
        if snapshot.layout != self.layout or len(snapshot) != len(self.pods):
            self._reset(snapshot)
        changes = source.nominations_since(self.version)
        if changes.complete:
            self._reset(snapshot)
        if changes.pods:
            stamp = next_generation()  # a fresh stamp for every row changed now
            for node, pods in changes.pods.items():
                row = snapshot.row(node)
                if row is not None:
                    self._set(row, pods, stamp)
        self.version = changes.version
        return self

    def _reset(self, snapshot: Snapshot) -> None:
        n = len(snapshot)
        self.layout = snapshot.layout
        self.version = -1
        self.pods = [()] * n
        self.stamps = np.full(n, NONE, dtype=np.int64)
        self.lowest = np.full(n, _HIGHEST, dtype=np.int64)
        self.highest = np.full(n, _LOWEST, dtype=np.int64)
        self.affine = np.zeros(n, dtype=bool)
        self._row_of = {}

    def _set(self, row: int, pods: tuple[PodInfoLike, ...], stamp: int) -> None:
        for old in self.pods[row]:
            if self._row_of.get(old.key) == row:
                del self._row_of[old.key]
        self.pods[row] = pods
        if not pods:
            self.stamps[row] = NONE
            self.lowest[row], self.highest[row], self.affine[row] = _HIGHEST, _LOWEST, False
            return
        priorities = [p.priority for p in pods]
        self.stamps[row] = stamp
        self.lowest[row], self.highest[row] = min(priorities), max(priorities)
        self.affine[row] = any(has_pod_affinity(p.cel) for p in pods)
        for p in pods:
            self._row_of[p.key] = row

    def any_nominated(self) -> bool:
        """True when some pod is nominated to some row."""
        return bool(self._row_of)

    def split(self, pod: PodInfoLike, plain_allowed: bool) -> tuple[IntpArray, dict[int, list[PodInfoLike]]]:
        """The rows where nominated pods count for `pod`: the plain ones (none unless
        `plain_allowed`), and the others with the pods that count there (feasibility.nominated_others)."""
        if not self._row_of:  # no pod is nominated anywhere
            return _NO_ROWS, {}
        priority = pod.priority
        counted = self.highest >= priority
        own = self._row_of.get(pod.key)
        if own is not None:
            counted[own] = True  # decided below, without the pod itself
        if not counted.any():
            return np.zeros(0, dtype=np.intp), {}
        plain = (
            counted & (self.lowest >= priority) & ~self.affine if plain_allowed else np.zeros_like(counted)
        )
        if own is not None:
            plain[own] = False
        others: dict[int, list[PodInfoLike]] = {}
        for row in np.flatnonzero(counted & ~plain).tolist():
            counting = [p for p in self.pods[row] if p.priority >= priority and p.key != pod.key]
            if counting:
                others[row] = counting
        return np.flatnonzero(plain), others


class NominatedVerdicts:
    """A group's verdicts on plain rows decided by the pod's own evaluator, as columns: the row
    version and nomination stamp each was decided on, and the verdict (None: passed)."""

    def __init__(self, owner: NodeResults, rows: int, values: Any) -> None:
        self.owner = weakref.ref(owner)  # the group's node results these verdicts belong beside
        self.values = values
        self.text = values_text(values)
        self.versions: npt.NDArray[np.int64] = np.full(rows, NONE, dtype=np.int64)
        self.stamps: npt.NDArray[np.int64] = np.full(rows, NONE, dtype=np.int64)
        self.verdicts: npt.NDArray[np.object_] = np.full(rows, None, dtype=object)
        self.passed: BoolArray = np.zeros(rows, dtype=bool)

    def known(
        self, rows: IntpArray, versions: npt.NDArray[np.int64], stamps: npt.NDArray[np.int64]
    ) -> BoolArray:
        """Per row of `rows`: its verdict was decided on the row's current version and stamp."""
        return (self.versions[rows] == versions[rows]) & (self.stamps[rows] == stamps[rows])

    def keep(self, row: int, version: int, stamp: int, verdict: FilterFailure | None) -> None:
        """Remember the verdict on `row` decided on row version `version` and stamp `stamp`."""
        self.versions[row], self.stamps[row], self.verdicts[row] = version, stamp, verdict
        self.passed[row] = verdict is None


class NominatedVerdictCache:
    """`NominatedVerdicts` per group (identified by its node results object, not kept alive by them);
    the least recently used beyond `capacity` are dropped."""

    def __init__(self, capacity: int = MAX_GROUPS) -> None:
        self._groups: BoundedLRU[int, NominatedVerdicts] = BoundedLRU(capacity)

    def of(self, owner: NodeResults, rows: int, values: Any) -> NominatedVerdicts:
        """The verdicts kept beside `owner`, emptied unless decided on `rows` rows with pod-only
        filter values `values`."""
        kept = self._groups.get(
            id(owner),
            lambda kept: (
                kept.owner() is owner
                and len(kept.versions) == rows
                and same_values(values, kept.values, kept.text)
            ),
            lambda: NominatedVerdicts(owner, rows, values),
        )
        return kept
