"""The preemption dry run over the cycle's evaluator, its per-node outcomes shared by equivalent preemptors.

`DryRun.exact` judges every what-if (a node with victims removed or reprieved) with fresh evaluators
over a snapshot holding it, so that the cluster functions see the change. When the preemptor's pod-only
state counted no pods (`ClusterFunctions.reads_pods`: no spread constraints, no inter-pod affinity
anywhere, no volumes) a what-if changes nothing but the node itself, and the cycle's evaluator judges
it directly, pods nominated to the node counted in its first filter pass as they are on the node
(they change no pod-only state unless one of them has inter-pod (anti)-affinity terms: such a node
takes the exact path); a node whose evaluation calls the cluster functions (their answers depend on
more than the node) takes the exact path too.

On top of that, a `DryRunCache` keeps each node's outcome for a group of equivalent preemptors: the same
`PodEvaluator.signature()` (the pod fields node evaluations read), the same values of the pod fields the
`victims` expression reads (`PreemptionSpec.victim_pod_fields`), the same pod-only filter values, the
same PodDisruptionBudgets and allowances. An outcome holds while the node's snapshot row has the same
cache generation and the same pods nominated to it that count for the preemptor (with the same
pod-only values of the first filter pass); outcomes computed with a cluster function call per node
are not kept. 1000 identical preemptors thus dry-run each node once, and again only where it changed.

The outcomes of rows where no nominated pod counts for the preemptor, and of plain rows (every pod
nominated there counts, none has inter-pod (anti-)affinity terms: policyd.scheduler.algorithm.nominated),
are kept as columns (row version, the row's nomination stamp or NO_OTHERS, outcome code, outcome), so a
preemptor's dry run learns them for every row at once (`RowJudge.known`: one comparison of the version
and stamp columns); other rows with nominated pods, or rows whose version or stamp moved, are decided
row by row (`RowJudge.decide`), and only those the one-by-one walk reaches (`preemption._scan`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from policyd.cel.values import freeze
from policyd.evaluation.sameness import same_values
from policyd.framework import CompiledProfile, FilterFailure, PodEvaluator
from policyd.scheduler.algorithm.feasibility import NominatedEvaluator, filter_with_others
from policyd.scheduler.algorithm.nominated import NominatedRows
from policyd.scheduler.cluster.affinity_terms import has_pod_affinity
from policyd.scheduler.lru import BoundedLRU
from policyd.scheduler.pdb import DisruptionBudget
from policyd.scheduler.preemption import (
    CANDIDATE,
    NO_CANDIDATE,
    UNDECIDED,
    DryRun,
    ExactJudge,
    Int8Array,
    IntpArray,
    NodeOutcome,
    ObjectArray,
    RowJudge,
)
from policyd.scheduler.snapshot import NodeInfoLike, PodInfoLike

MAX_GROUPS = 64
_MISSING = object()


class _ClusterCalled(Exception):
    """A node evaluation called the cluster functions: the what-if needs the exact path."""


@dataclass(frozen=True)
class _Entry:
    """The outcome on a node with nominated pods, and what it was decided on."""

    version: int
    others: tuple[PodInfoLike, ...]
    affine: bool  # one of `others` has inter-pod (anti-)affinity terms
    # pod-only values of the first filter pass with `others` when affine; None otherwise (the pass
    # then has the group's own values)
    first_values: Any
    outcome: NodeOutcome

    def decided_with(self, version: int, others: Sequence[PodInfoLike]) -> bool:
        """True when decided on the same row generation and nominated pods."""
        return (
            self.version == version
            and len(self.others) == len(others)
            and all(a is b for a, b in zip(self.others, others, strict=True))
        )


NONE = -2  # no outcome kept for the row (snapshot versions are >= 0)
# what a row's outcome was decided with besides the row (`DryRunGroup.tags`), when not a plain row's
# nomination stamp (>= 0): no nominated pod counted; nominated pods of a row that is not plain
NO_OTHERS, PER_ROW = -1, -3


class DryRunGroup:
    """The outcomes a group of equivalent preemptors learnt, per snapshot row of one layout: those of
    rows without nominated pods that count and of plain rows as columns (row version, tag: NO_OTHERS
    or the nomination stamp, outcome code, outcome) told in bulk, those of other rows with nominated
    pods that count per row (`_Entry`)."""

    def __init__(
        self,
        profile: CompiledProfile,
        layout: int,
        rows: int,
        filter_values: Any,
        budgets: tuple[DisruptionBudget, ...],
        allowed: tuple[int, ...],
    ) -> None:
        self.profile = profile
        self.layout = layout
        self.filter_values = filter_values
        self.budgets = budgets
        self.allowed = allowed
        self.versions: npt.NDArray[np.int64] = np.full(rows, NONE, dtype=np.int64)
        self.tags: npt.NDArray[np.int64] = np.full(rows, PER_ROW, dtype=np.int64)
        self.codes: Int8Array = np.full(rows, UNDECIDED, dtype=np.int8)
        self.outcomes: ObjectArray = np.full(rows, None, dtype=object)
        self.entries: dict[int, _Entry] = {}

    def valid_for(
        self,
        profile: CompiledProfile,
        layout: int,
        filter_values: Any,
        budgets: tuple[DisruptionBudget, ...],
        allowed: tuple[int, ...],
    ) -> bool:
        """True when the group's outcomes were decided under the same profile, layout, pod-only values
        and budgets."""
        return (
            self.profile is profile
            and self.layout == layout
            and self.allowed == allowed
            and self.budgets == budgets
            and same_values(filter_values, self.filter_values)
        )

    def keep(
        self,
        row: int,
        version: int,
        tag: int,
        others: Sequence[PodInfoLike],
        first_values: Any,
        outcome: NodeOutcome,
    ) -> None:
        """Remember `outcome`, decided on row version `version` with `others` nominated there (`tag`:
        NO_OTHERS, the plain row's stamp, or PER_ROW)."""
        if tag == PER_ROW:
            self.entries[row] = _Entry(version, tuple(others), _any_affinity(others), first_values, outcome)
            self.versions[row] = NONE
            return
        self.entries.pop(row, None)
        self.versions[row] = version
        self.tags[row] = tag
        self.codes[row] = NO_CANDIDATE if outcome.candidate is None else CANDIDATE
        self.outcomes[row] = outcome

    def drop(self, row: int) -> None:
        """Forget the row's outcome."""
        self.entries.pop(row, None)
        self.versions[row] = NONE


class DryRunCache:
    """Dry-run outcomes per group of equivalent preemptors; the least recently used groups beyond
    `capacity` are dropped."""

    def __init__(self, capacity: int = MAX_GROUPS) -> None:
        self._groups: BoundedLRU[Hashable, DryRunGroup] = BoundedLRU(capacity)
        self.hits = 0  # rows whose outcome was known before the preemptor's dry run
        self.computed = 0  # nodes dry-run for a group

    def group(
        self, key: Hashable, dry_run: DryRun, filter_values: Any, allowed: tuple[int, ...]
    ) -> DryRunGroup:
        """The group of `key`, emptied unless its outcomes hold for `dry_run`."""
        budgets = tuple(dry_run.budgets)
        layout = dry_run.snapshot.layout
        g = self._groups.get(
            key,
            lambda g: g.valid_for(dry_run.profile, layout, filter_values, budgets, allowed),
            lambda: DryRunGroup(
                dry_run.profile, layout, len(dry_run.snapshot), filter_values, budgets, allowed
            ),
        )
        return g

    def clear(self) -> None:
        """Drop every group."""
        self._groups.clear()


def _any_affinity(pods: Sequence[PodInfoLike]) -> bool:
    return any(has_pod_affinity(p.cel) for p in pods)


def group_key(profile: CompiledProfile, pod: PodInfoLike, evaluator: PodEvaluator) -> Hashable | None:
    """What equivalent preemptors share (None: this pod shares its outcomes with none)."""
    fields = profile.preemption.victim_pod_fields
    signature = evaluator.signature()
    if fields is None or signature is None:
        return None
    try:
        victim_values = tuple(freeze(pod.cel.get(f, _MISSING)) for f in sorted(fields))
        key = (id(profile), signature, victim_values)
        hash(key)
    except TypeError:
        return None
    return key


@dataclass(frozen=True)
class SharedCycle:
    """The cycle's evaluator and cluster functions lent to the preemption dry run (`NodeJudges`)."""

    evaluator: PodEvaluator  # the preemptor's, over the cycle's cluster functions
    reads_pods: Callable[[], bool]  # whether its pod-only state counted pods (asked after prepare)
    first_evaluator: NominatedEvaluator  # first filter passes with nominated pods, same cluster functions
    cache: DryRunCache
    nominated_rows: NominatedRows  # the pods nominated to each row, as the dry run's lookup has them

    def judge(self, dry_run: DryRun) -> RowJudge:
        """The row judge of `dry_run`: the exact path unless the what-ifs count no pods."""
        evaluator = self.evaluator
        filter_values = evaluator.prepare("filter")
        evaluator.track_cluster()
        if self.reads_pods():
            return ExactJudge(dry_run)
        key = group_key(dry_run.profile, dry_run.pod, evaluator)
        group = None
        if key is not None:
            group = self.cache.group(key, dry_run, filter_values, tuple(dry_run.allowed))
        return _SharedJudge(self, dry_run, group)


class _SharedJudge:
    """`RowJudge` over the cycle's evaluator: outcomes kept by the group told in bulk for rows without
    nominated pods that count and plain rows, checked one by one on other rows with nominated pods,
    dry-run otherwise."""

    def __init__(self, cycle: SharedCycle, dry_run: DryRun, group: DryRunGroup | None) -> None:
        self.cycle = cycle
        self.dry_run = dry_run
        self.group = group
        snapshot = dry_run.snapshot
        self.nodes = snapshot.nodes()
        self.versions = snapshot.versions
        rows = cycle.nominated_rows
        plain, self.others = rows.split(dry_run.pod, True)
        self.tags = np.full(len(snapshot), NO_OTHERS, dtype=np.int64)  # per row, as `DryRunGroup.tags`
        self.tags[plain] = rows.stamps[plain]
        self.tags[list(self.others)] = PER_ROW
        self.pods = rows.pods

    def known(self, rows: IntpArray) -> tuple[Int8Array, ObjectArray]:
        """The group's outcomes of unchanged rows without nominated pods that count, or plain."""
        group = self.group
        if group is None:
            return np.full(len(rows), UNDECIDED, dtype=np.int8), np.full(len(rows), None, dtype=object)
        tags = self.tags[rows]
        holds = (group.versions[rows] == self.versions[rows]) & (group.tags[rows] == tags) & (tags != PER_ROW)
        self.cycle.cache.hits += int(np.count_nonzero(holds))
        codes, outcomes = group.codes[rows], group.outcomes[rows]  # copies
        codes[~holds] = UNDECIDED
        outcomes[~holds] = None
        return codes, outcomes

    def decide(self, rows: Sequence[int]) -> list[NodeOutcome]:
        """The group's outcome of each row when it holds, else a dry run of the node (kept for the
        group unless it called the cluster functions)."""
        group, cache, nodes = self.group, self.cycle.cache, self.nodes
        if group is None:
            return [self._fresh(nodes[row], self._others(row))[0] for row in rows]
        decided: list[NodeOutcome] = []
        tags = self.tags[rows].tolist()
        for row, version, tag in zip(rows, self.versions[rows].tolist(), tags, strict=True):
            node = nodes[row]
            others = self._others(row)
            first_values = None
            if tag == PER_ROW:
                hit = group.entries.get(row)
                known = hit is not None and hit.decided_with(version, others)
                if hit is not None and known and not hit.affine:
                    cache.hits += 1
                    decided.append(hit.outcome)
                    continue
                if _any_affinity(others):  # the first pass's pod-only values may differ between pods
                    first_values = self.cycle.first_evaluator(node, others).prepare("filter")
                    if hit is not None and known and same_values(first_values, hit.first_values):
                        cache.hits += 1
                        decided.append(hit.outcome)
                        continue
            elif group.versions[row] == version and group.tags[row] == tag:
                cache.hits += 1
                decided.append(group.outcomes[row])
                continue
            outcome, keep = self._fresh(node, others)
            cache.computed += 1
            if keep:
                group.keep(row, version, tag, others, first_values, outcome)
            else:
                group.drop(row)
            decided.append(outcome)
        return decided

    def _others(self, row: int) -> list[PodInfoLike]:
        """The pods nominated to `row` that count for the preemptor (feasibility.nominated_others)."""
        tag = self.tags[row]
        if tag == NO_OTHERS:
            return []
        return self.others[row] if tag == PER_ROW else list(self.pods[row])

    def _fresh(self, node: NodeInfoLike, others: Sequence[PodInfoLike]) -> tuple[NodeOutcome, bool]:
        """The outcome on `node` by the cycle's evaluator, and whether the group may keep it."""
        dry_run, evaluator = self.dry_run, self.cycle.evaluator
        if _any_affinity(others):  # they change the first pass's pod-only state: its own evaluator
            calls: list[bool] = []
            outcome = dry_run.select_victims(node, lambda state: dry_run.exact_failure(state, calls))
            return outcome, not calls

        def shared_failure(state: NodeInfoLike) -> FilterFailure | None:
            evaluator.reset_cluster_called()
            failure = filter_with_others(evaluator, state, others, evaluator)
            if evaluator.cluster_called:
                raise _ClusterCalled
            return failure

        try:
            return dry_run.select_victims(node, shared_failure), True
        except _ClusterCalled:
            return dry_run.exact(node), False
