"""Running one profile over the nodes: filter, normalise, score, select.

Modelled on kube-scheduler's schedule_one.go (findNodesThatFitPod, prioritizeNodes, selectHost):
filtering stops after `num_feasible_nodes_to_find` feasible nodes and the next search starts where
the last one stopped; pods nominated to a node with priority >= the pod's are counted in a first
filter pass; scores are normalised with integer arithmetic (docs/DESIGN.md "Normalisation"),
weighted and summed; the best node is drawn uniformly among equal scores (one draw; kube-scheduler
samples a reservoir, which gives the same distribution). The group path (`GroupCache`, docs/DESIGN.md
"Equivalent pods and vectorised evaluation") gives the same results with less work.
"""

from __future__ import annotations

import operator
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from policyd.evaluation.columns import NodeColumns
from policyd.framework import (
    CompiledProfile,
    FilterFailure,
    FilterResult,
    Normalize,
    PodEvaluator,
    RuleRef,
)
from policyd.scheduler.snapshot import NodeInfoLike, PodInfoLike, Snapshot

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5

NominatedLookup = Callable[[str], Sequence[PodInfoLike]]
NominatedNodes = Callable[[], Iterable[str]]

# node verdict codes of the group cache (>= 0: index of a cached FilterFailure; <= -3: this pod only)
UNKNOWN = -2
PASS = -1
MAX_GROUPS = 64
# from this many rows to evaluate, filters and scores go through the vectorised plans first
BULK_MIN = 48
# weighted, normalised totals must stay below this; larger raw scores take the exact path
INT_SAFE = 2**62


def num_feasible_nodes_to_find(num_nodes: int, percentage: int = 0) -> int:
    """How many feasible nodes to look for (kube-scheduler numFeasibleNodesToFind)."""
    if num_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_nodes
    if percentage <= 0:
        percentage = max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND, 50 - num_nodes // 125)
    found = num_nodes * percentage // 100
    return max(found, MIN_FEASIBLE_NODES_TO_FIND)


def _go_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, as Go does."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def normalize(raw: Sequence[int], mode: Normalize) -> list[int]:
    """Normalise one rule's raw scores over the feasible nodes (integer arithmetic)."""
    if mode == "none" or not raw:
        return list(raw)
    hi, lo = max(raw), min(raw)
    if mode == "max":
        return [0 if hi == 0 else _go_div(s * 100, hi) for s in raw]
    if mode == "reverse":
        return [100 if hi == 0 else 100 - _go_div(s * 100, hi) for s in raw]
    minmax = [0 if hi == lo else _go_div((s - lo) * 100, hi - lo) for s in raw]
    if mode == "minmax":
        return minmax
    if mode == "reverse-minmax":
        return [100 - s for s in minmax]
    raise ValueError(f"unknown normalisation {mode!r}")


def filter_with_nominated(
    evaluator: PodEvaluator, pod: PodInfoLike, node: NodeInfoLike, nominated: NominatedLookup
) -> FilterFailure | None:
    """Filter `node`, first with the pods of >= priority nominated to it, then as it is."""
    others = [p for p in nominated(node.name) if p.priority >= pod.priority and p.key != pod.key]
    if others:
        failure = evaluator.filter(node.with_pods(others).cel)
        if failure is not None:
            return failure
    return evaluator.filter(node.cel)


@dataclass
class FilterOutcome:
    """Result of filtering: feasible nodes in search order, failures by node name."""

    feasible: list[NodeInfoLike] = field(default_factory=list)
    failures: dict[str, FilterFailure] = field(default_factory=dict)
    evaluated: int = 0
    all_results: dict[str, list[FilterResult]] = field(default_factory=dict)


def find_feasible_nodes(
    evaluator: PodEvaluator,
    pod: PodInfoLike,
    nodes: Sequence[NodeInfoLike],
    start: int,
    limit: int,
    nominated: NominatedLookup,
    explain: bool = False,
) -> FilterOutcome:
    """Filter nodes from index `start` (round robin) until `limit` feasible nodes are found."""
    out = FilterOutcome()
    n = len(nodes)
    for i in range(n):
        node = nodes[(start + i) % n]
        out.evaluated += 1
        failure = filter_with_nominated(evaluator, pod, node, nominated)
        if explain:
            out.all_results[node.name] = list(evaluator.filter_all(node.cel))
        if failure is None:
            out.feasible.append(node)
            if len(out.feasible) >= limit:
                break
        else:
            out.failures[node.name] = failure
    return out


@dataclass(frozen=True)
class RuleScore:
    """One score rule's contribution on one node."""

    rule: RuleRef
    raw: int
    normalized: int
    weighted: int


@dataclass(frozen=True)
class NodeScore:
    """The total score of one feasible node and its per-rule parts."""

    node: str
    total: int
    rules: tuple[RuleScore, ...] = ()


def score_nodes(
    profile: CompiledProfile, evaluator: PodEvaluator, nodes: Sequence[NodeInfoLike]
) -> list[NodeScore]:
    """Score feasible nodes: raw per rule, normalised across nodes, weighted, summed."""
    rules = profile.scores
    raw_by_node = [[int(s) for s in evaluator.score(node.cel)] for node in nodes]
    columns: list[list[int]] = []
    for j, rule in enumerate(rules):
        columns.append(normalize([row[j] for row in raw_by_node], rule.normalize))
    scores: list[NodeScore] = []
    for i, node in enumerate(nodes):
        parts = tuple(
            RuleScore(rule.rule, raw_by_node[i][j], columns[j][i], columns[j][i] * rule.weight)
            for j, rule in enumerate(rules)
        )
        scores.append(NodeScore(node.name, sum(p.weighted for p in parts), parts))
    return scores


def select_host(scores: Sequence[NodeScore], rng: random.Random) -> NodeScore:
    """The highest-scoring node; ties broken uniformly at random (one draw among the tied nodes)."""
    if not scores:
        raise ValueError("no nodes to select from")
    best = max(s.total for s in scores)
    ties = [s for s in scores if s.total == best]
    return ties[0] if len(ties) == 1 else ties[rng.randrange(len(ties))]


def _go_div_array(a: npt.NDArray[np.int64], b: int) -> npt.NDArray[np.int64]:
    """Element-wise integer division truncating toward zero, as Go does (b != 0)."""
    q = np.abs(a) // abs(b)
    return np.where((a >= 0) == (b >= 0), q, -q)


def normalize_array(raw: npt.NDArray[np.int64], mode: Normalize) -> npt.NDArray[np.int64]:
    """`normalize` over a numpy column (|values| * 100 must fit in int64)."""
    if mode == "none" or raw.size == 0:
        return raw
    hi, lo = int(raw.max()), int(raw.min())
    if mode == "max":
        return np.zeros_like(raw) if hi == 0 else _go_div_array(raw * 100, hi)
    if mode == "reverse":
        return np.full_like(raw, 100) if hi == 0 else 100 - _go_div_array(raw * 100, hi)
    minmax = np.zeros_like(raw) if hi == lo else (raw - lo) * 100 // (hi - lo)
    if mode == "minmax":
        return minmax
    if mode == "reverse-minmax":
        return 100 - minmax
    raise ValueError(f"unknown normalisation {mode!r}")


class _Same:
    """Marks group values never computed (equal to nothing)."""


def same_values(a: Any, b: Any, b_text: str | None = None) -> bool:
    """Equal CEL values of equal types (Python's `==` alone takes 1, 1.0 and True as equal).

    `b_text` is `repr(b)` when the caller kept it. Among `==`-equal values `repr` tells those types
    apart (a differing `repr` of equal values, such as dicts in another order, only costs a reuse).
    """
    if a is b:
        return True
    if isinstance(a, _Same) or isinstance(b, _Same):
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


class _Group:
    """What the last pods of one group learnt about every node (rows of one snapshot layout)."""

    def __init__(self, profile: CompiledProfile, n: int, layout: int, rules: int) -> None:
        self.profile = profile
        self.layout = layout
        self.versions: npt.NDArray[np.int64] = np.full(n, -1, dtype=np.int64)
        self.status: npt.NDArray[np.int32] = np.full(n, UNKNOWN, dtype=np.int32)
        self.failures: list[FilterFailure] = []
        self.raw: npt.NDArray[np.int64] = np.zeros((n, rules), dtype=np.int64)
        self.raw_ok: npt.NDArray[np.bool_] = np.zeros(n, dtype=bool)
        self.filter_values: Any = _Same()
        self.score_values: Any = _Same()
        self.filter_text: str | None = None
        self.score_text: str | None = None
        # row -> (row version, nominated pods counted, verdict): nodes with nominated pods
        self.nominated: dict[int, tuple[int, tuple[Any, ...], FilterFailure | None]] = {}

    def forget_filters(self) -> None:
        self.status.fill(UNKNOWN)
        self.failures = []
        self.nominated = {}
        self.raw_ok.fill(False)

    def forget_scores(self) -> None:
        self.raw_ok.fill(False)


class GroupCache:
    """Node verdicts and raw scores per group of equivalent pods (docs/DESIGN.md, "Equivalent pods").

    Pods with the same `signature()` whose pod-only lets have the same values get the same verdict
    and raw scores on an unchanged node unless the evaluation called a cluster function. A group keeps
    them per snapshot row with the row's cache generation; rows whose generation moved are evaluated
    again, others are reused. The least recently used groups beyond `capacity` are dropped.
    """

    def __init__(self, capacity: int = MAX_GROUPS) -> None:
        self.capacity = capacity
        self._groups: OrderedDict[tuple[int, Any], _Group] = OrderedDict()
        self.hits = 0
        self.evaluations = 0

    def group(self, profile: CompiledProfile, signature: Any, snapshot: Snapshot) -> _Group:
        """The group of `signature`, with the rows changed in `snapshot` since its last use forgotten."""
        key = (id(profile), signature)
        g = self._groups.get(key)
        n = len(snapshot)
        if g is None or g.profile is not profile or g.layout != snapshot.layout or len(g.status) != n:
            g = _Group(profile, n, snapshot.layout, len(profile.scores))
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


@dataclass
class ScheduleResult:
    """What the algorithm decided for one pod in one cycle."""

    node: str | None
    feasible: int
    evaluated: int
    failures: dict[str, FilterFailure]
    scores: list[NodeScore]
    all_results: dict[str, list[FilterResult]]
    # wall time of the filter and score phases (metrics: rule time per profile and phase)
    filter_seconds: float = 0.0
    score_seconds: float = 0.0


class ColumnSync:
    """`NodeColumns` kept in step with the snapshot: rows whose cache generation moved are rewritten
    (assumes, binds and informer events all move it), the whole table only when the layout changes.
    Brought up to date only when a vectorised evaluation needs it."""

    def __init__(self) -> None:
        self.columns: NodeColumns | None = None
        self._layout = -1
        self._versions: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.rewritten = 0

    def sync(self, snapshot: Snapshot) -> NodeColumns:
        """The columns of `snapshot`'s rows."""
        cels = snapshot.cels()
        if self.columns is None or self._layout != snapshot.layout:
            self.columns = NodeColumns.from_nodes(cels)
            self._layout = snapshot.layout
            self._versions = snapshot.versions.copy()
            self.rewritten += len(cels)
            return self.columns
        changed = np.flatnonzero(self._versions != snapshot.versions)
        for row in changed.tolist():
            self.columns.set_node(row, cels[row])
        self._versions[changed] = snapshot.versions[changed]
        self.rewritten += len(changed)
        return self.columns


class ProfileRunner:
    """Runs profiles over snapshot nodes, remembering the round-robin start between cycles.

    Given the snapshot, pods whose evaluator supports it take the group path: node verdicts and raw
    scores come from the `GroupCache` where the node did not change, and scores are normalised and
    summed with numpy. Both paths give the same placements, failures and random draws.
    """

    def __init__(
        self, rng: random.Random, percentage_of_nodes_to_score: int = 0, groups: GroupCache | None = None
    ) -> None:
        self._rng = rng
        self._percentage = percentage_of_nodes_to_score
        self._next_start = 0
        self.groups = groups
        self.columns = ColumnSync()
        self.bulk_rows = 0  # rows whose verdict or scores came from vectorised plans

    def schedule(
        self,
        profile: CompiledProfile,
        evaluator: PodEvaluator,
        pod: PodInfoLike,
        nodes: Sequence[NodeInfoLike],
        nominated: NominatedLookup,
        nominated_node: NodeInfoLike | None = None,
        explain: bool = False,
        cluster: Any = None,
        snapshot: Snapshot | None = None,
        nominated_nodes: NominatedNodes | None = None,
    ) -> ScheduleResult:
        """Filter, score and select a node for `pod` (node None: nothing fits)."""
        if nominated_node is not None:
            # kube-scheduler evaluateNominatedNode: a pod nominated by preemption tries its node first
            t0 = time.perf_counter()
            failure = filter_with_nominated(evaluator, pod, nominated_node, nominated)
            if failure is None:
                return ScheduleResult(
                    nominated_node.name, 1, 1, {}, [], {}, filter_seconds=time.perf_counter() - t0
                )
        if not nodes:
            return ScheduleResult(None, 0, 0, {}, [], {})
        limit = num_feasible_nodes_to_find(len(nodes), self._percentage)
        start = self._next_start % len(nodes)
        if (
            self.groups is not None
            and snapshot is not None
            and not explain
            and nodes is snapshot.nodes()
            and callable(getattr(evaluator, "signature", None))
        ):
            signature = evaluator.signature()  # type: ignore[attr-defined]
            if signature is not None:
                return self._schedule_group(
                    profile,
                    evaluator,
                    pod,
                    snapshot,
                    signature,
                    nominated,
                    nominated_nodes,
                    cluster,
                    limit,
                    start,
                )
        t0 = time.perf_counter()
        found = find_feasible_nodes(evaluator, pod, nodes, start, limit, nominated, explain)
        filter_seconds = time.perf_counter() - t0
        self._next_start = (start + found.evaluated) % len(nodes)
        if not found.feasible:
            return ScheduleResult(
                None, 0, found.evaluated, found.failures, [], found.all_results, filter_seconds
            )
        if len(found.feasible) == 1 and not explain:
            return ScheduleResult(
                found.feasible[0].name,
                1,
                found.evaluated,
                found.failures,
                [],
                found.all_results,
                filter_seconds,
            )
        t0 = time.perf_counter()
        prescore = getattr(cluster, "prescore", None)
        if callable(prescore):
            prescore(pod.cel, [n.cel for n in found.feasible])
        scores = score_nodes(profile, evaluator, found.feasible)
        score_seconds = time.perf_counter() - t0
        best = select_host(scores, self._rng)
        return ScheduleResult(
            best.node,
            len(found.feasible),
            found.evaluated,
            found.failures,
            scores,
            found.all_results,
            filter_seconds,
            score_seconds,
        )

    # -- the group path ----------------------------------------------------------------------------

    def _schedule_group(
        self,
        profile: CompiledProfile,
        evaluator: Any,
        pod: PodInfoLike,
        snapshot: Snapshot,
        signature: Any,
        nominated: NominatedLookup,
        nominated_nodes: NominatedNodes | None,
        cluster: Any,
        limit: int,
        start: int,
    ) -> ScheduleResult:
        assert self.groups is not None
        t0 = time.perf_counter()
        nodes, cels = snapshot.nodes(), snapshot.cels()
        n = len(nodes)
        g = self.groups.group(profile, signature, snapshot)
        values = evaluator.prepare("filter")
        if not same_values(values, g.filter_values, g.filter_text):
            g.forget_filters()
            g.filter_values, g.filter_text = values, _text(values)
        evaluator.track_cluster()
        # nodes with nominated pods of at least this pod's priority: evaluated with them, per pod
        special: dict[int, list[PodInfoLike]] = {}
        for name in nominated_nodes() if nominated_nodes is not None else ():
            others = [p for p in nominated(name) if p.priority >= pod.priority and p.key != pod.key]
            row = snapshot.row(name)
            if others and row is not None:
                special[row] = others
        status = g.status
        local = status.copy()
        if special:
            local[list(special)] = UNKNOWN
        own: list[FilterFailure] = []  # failures of this pod only (codes -3, -4, ...)
        ordered = local
        end = n - 1
        while True:
            ordered = np.concatenate((local[start:], local[:start])) if start else local
            counts = np.cumsum((ordered < 0) & (ordered >= UNKNOWN))
            end = min(int(np.searchsorted(counts, limit)), n - 1)
            unknown = np.flatnonzero(ordered[: end + 1] == UNKNOWN)
            if unknown.size == 0:
                break
            all_passed = True
            if unknown.size >= BULK_MIN:
                unknown, passed, cacheable = self._bulk_filter(evaluator, snapshot, unknown, start, special)
                passed_rows = passed + start
                passed_rows[passed_rows >= n] -= n
                local[passed_rows] = PASS
                ordered[passed] = PASS
                if cacheable:
                    status[passed_rows] = PASS
            self.groups.evaluations += int(unknown.size)
            for pos in unknown.tolist():
                row = pos + start - n if pos + start >= n else pos + start
                if row in special:
                    failure = self._filter_nominated(evaluator, g, snapshot, row, special[row])
                    cacheable = False
                else:
                    evaluator.reset_cluster_called()
                    failure = evaluator.filter(cels[row])
                    cacheable = not evaluator.cluster_called
                if failure is None:
                    code = PASS
                elif cacheable:
                    code = len(g.failures)
                    g.failures.append(failure)
                else:
                    code = -3 - len(own)
                    own.append(failure)
                local[row] = code
                ordered[pos] = code  # `ordered` is `local` itself or a rotated copy of it
                if cacheable:
                    status[row] = code
                all_passed = all_passed and code == PASS
            if all_passed:  # the window is what it was: every candidate in it passed
                break
        window = ordered[: end + 1]
        evaluated = end + 1
        self.groups.hits += evaluated
        self._next_start = (start + evaluated) % n
        passed = np.flatnonzero(window == PASS)
        rows = passed + start
        rows[rows >= n] -= n
        failures: dict[str, FilterFailure] = {}
        for pos in np.flatnonzero(window != PASS).tolist():
            row = pos + start - n if pos + start >= n else pos + start
            code = int(window[pos])
            failures[nodes[row].name] = g.failures[code] if code >= 0 else own[-3 - code]
        filter_seconds = time.perf_counter() - t0
        if rows.size == 0:
            return ScheduleResult(None, 0, evaluated, failures, [], {}, filter_seconds)
        row_list = rows.tolist()
        if len(row_list) == 1:
            return ScheduleResult(nodes[row_list[0]].name, 1, evaluated, failures, [], {}, filter_seconds)
        t0 = time.perf_counter()
        feasible_cels = operator.itemgetter(*row_list)(cels)
        prescore = getattr(cluster, "prescore", None)
        if callable(prescore):
            prescore(pod.cel, feasible_cels)
        values = evaluator.prepare("score")
        if not same_values(values, g.score_values, g.score_text):
            g.forget_scores()
            g.score_values, g.score_text = values, _text(values)
        total = self._group_scores(profile, evaluator, g, rows, row_list, snapshot)
        if total is None:  # raw scores too large for int64 arithmetic: the exact path
            feasible = [nodes[r] for r in row_list]
            best = select_host(score_nodes(profile, evaluator, feasible), self._rng)
            chosen = best.node
        else:
            top = np.flatnonzero(total == total.max())
            pick = 0 if top.size == 1 else self._rng.randrange(int(top.size))
            chosen = nodes[row_list[int(top[pick])]].name
        score_seconds = time.perf_counter() - t0
        return ScheduleResult(
            chosen, len(row_list), evaluated, failures, [], {}, filter_seconds, score_seconds
        )

    @staticmethod
    def _filter_nominated(
        evaluator: Any, g: _Group, snapshot: Snapshot, row: int, others: list[PodInfoLike]
    ) -> FilterFailure | None:
        """The verdict on a node with the nominated pods `others` counted (filter_with_nominated),
        reused while the node and the nominated pods are the same ones."""
        version = int(snapshot.versions[row])
        hit = g.nominated.get(row)
        if (
            hit is not None
            and hit[0] == version
            and len(hit[1]) == len(others)
            and all(a is b for a, b in zip(hit[1], others, strict=True))
        ):
            return hit[2]
        evaluator.reset_cluster_called()
        failure: FilterFailure | None = evaluator.filter(snapshot.nodes()[row].with_pods(others).cel)
        if failure is None:
            failure = evaluator.filter(snapshot.cels()[row])
        if not evaluator.cluster_called:
            g.nominated[row] = (version, tuple(others), failure)
        return failure

    def _bulk_filter(
        self,
        evaluator: Any,
        snapshot: Snapshot,
        unknown: npt.NDArray[np.intp],
        start: int,
        special: Mapping[int, Any],
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], bool]:
        """Split window positions `unknown` by the vectorised plans into those still to evaluate per
        node (failing or unsure: the exact failure comes from the per-node function) and those that
        passed; and whether the passes may be reused for equivalent pods."""
        n = len(snapshot)
        rows = unknown + start
        rows[rows >= n] -= n
        result = evaluator.bulk_filter(self.columns.sync(snapshot), rows)
        if result is None:
            return unknown, unknown[:0], False
        passed, cacheable = result
        if special:
            passed &= ~np.isin(rows, np.fromiter(special, dtype=np.intp))
        self.bulk_rows += len(rows)
        return unknown[~passed], unknown[passed], cacheable

    def _group_scores(
        self,
        profile: CompiledProfile,
        evaluator: Any,
        g: _Group,
        rows: npt.NDArray[np.intp],
        row_list: list[int],
        snapshot: Snapshot,
    ) -> npt.NDArray[np.int64] | None:
        """Weighted totals of the feasible `rows` (None: a raw score is beyond int64 arithmetic)."""
        rules = profile.scores
        if not rules:
            return np.zeros(len(row_list), dtype=np.int64)
        bound = INT_SAFE // (100 * max(1, sum(abs(r.weight) for r in rules)))
        missing = rows[~g.raw_ok[rows]]
        if missing.size >= BULK_MIN:
            result = evaluator.bulk_scores(self.columns.sync(snapshot), missing)
            if result is not None:
                values, cacheable = result
                if not np.isfinite(values).all() or (values.size and np.abs(values).max() > bound):
                    return None
                g.raw[missing] = np.trunc(values).astype(np.int64)  # int(float) as the per-node path
                if cacheable:
                    g.raw_ok[missing] = True
                self.bulk_rows += len(missing)
                missing = missing[:0]
        cels = snapshot.cels()
        for row in missing.tolist():
            evaluator.reset_cluster_called()
            raw = [int(v) for v in evaluator.score(cels[row])]
            if any(abs(v) > bound for v in raw):
                return None
            g.raw[row] = raw
            if not evaluator.cluster_called:
                g.raw_ok[row] = True
        matrix = g.raw[rows]
        total = np.zeros(len(row_list), dtype=np.int64)
        for j, rule in enumerate(rules):
            total += normalize_array(matrix[:, j], rule.normalize) * rule.weight
        return total


def reasons_by_node(failures: Mapping[str, FilterFailure]) -> dict[str, tuple[str, ...]]:
    """Failure reasons per node name (for FailedScheduling messages)."""
    return {name: f.reasons for name, f in failures.items()}
