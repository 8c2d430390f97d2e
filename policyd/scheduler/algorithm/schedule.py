"""Placing one pod: the node window, filters, scores, normalisation and selection, written once.

Modelled on kube-scheduler's schedule_one.go: a pod nominated by an earlier preemption tries its node
first (evaluateNominatedNode); otherwise filtering walks the nodes round robin from where the last
search stopped until `num_feasible_nodes_to_find` feasible nodes are found (findNodesThatFitPod);
nodes with nominated pods of at least the pod's priority are filtered with them counted; the
feasible nodes are scored, normalised, weighted and summed (prioritizeNodes) and the best one drawn
(selectHost). Verdicts and raw scores come from the evaluator protocol: the vectorised plans answer
first where many rows are unknown, the per-node functions decide the rest, and the reuse cache in
front of both keeps what equivalent pods learnt about unchanged nodes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from policyd.framework import (
    RULE_FAIL,
    RULE_PASS,
    RULE_UNKNOWN,
    ClusterFunctions,
    CompiledProfile,
    FilterFailure,
    FilterResult,
    PodEvaluator,
    RowSelection,
)
from policyd.scheduler.algorithm.columns import ColumnSync
from policyd.scheduler.algorithm.failures import DeferredFailures, WindowFailures, window_failure_counts
from policyd.scheduler.algorithm.feasibility import (
    NominatedEvaluator,
    NominatedLookup,
    filter_all_with_others,
    filter_with_nominated,
    filter_with_others,
    nominated_evaluator,
    nominated_others,
    num_feasible_nodes_to_find,
)
from policyd.scheduler.algorithm.nominated import NominatedRows, NominatedVerdictCache, NominatedVerdicts
from policyd.scheduler.algorithm.reuse import (
    DEFERRED,
    OWN,
    PASS,
    UNKNOWN,
    GroupCache,
    NodeResults,
    NominatedVerdict,
    fresh_results,
)
from policyd.scheduler.algorithm.scoring import NO_SCORES, ScoreArray, ScoreTable, int64_bound, weigh
from policyd.scheduler.algorithm.selection import select_host
from policyd.scheduler.snapshot import PodInfoLike, Snapshot

IntpArray = npt.NDArray[np.intp]

# from this many rows to evaluate, filters and scores go through the vectorised plans first
BULK_MIN = 48


@dataclass
class ScheduleResult:
    """What the algorithm decided for one pod in one cycle (the same shape on every path)."""

    node: str | None
    feasible: int
    evaluated: int
    failures: Mapping[str, FilterFailure]
    scores: ScoreTable = NO_SCORES
    # every filter rule's verdict per evaluated node (explain mode only)
    all_results: dict[str, list[FilterResult]] = field(default_factory=dict)
    # wall time of the filter and score phases (metrics: rule time per profile and phase)
    filter_seconds: float = 0.0
    score_seconds: float = 0.0
    # the profile's policies that applied to the pod (explain mode only; None otherwise)
    applied: tuple[str, ...] | None = None
    # when nothing fits: each distinct failure with the number of nodes it stands for (None when a
    # node was found)
    failure_counts: list[tuple[FilterFailure, int]] | None = None


def _need_patterns(need: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.bool_], IntpArray]:
    """The distinct rows of `need` and, per row, the index of its pattern."""
    rules = need.shape[1]
    if rules > 62:
        patterns, group_of = np.unique(need, axis=0, return_inverse=True)
        return patterns, group_of.reshape(-1)
    keys = need.astype(np.int64) @ (np.int64(1) << np.arange(rules, dtype=np.int64))
    unique, group_of = np.unique(keys, return_inverse=True)
    patterns = ((unique[:, None] >> np.arange(rules, dtype=np.int64)[None, :]) & 1).astype(bool)
    return patterns, group_of.reshape(-1)


def _need_groups(need: npt.NDArray[np.bool_]) -> list[tuple[IntpArray, npt.NDArray[np.bool_]]]:
    """The rows of `need` needing the same rules, each group with its rules (rows needing none left
    out; fewer than BULK_MIN rows needing other rules than the first row may come as one group).
    Most rows usually need what the first one needs (the rules whose pod-only values moved), a few
    more (rows whose node changed): only those few are told apart, when they could fill a group."""
    by_rule = np.ascontiguousarray(need.T)  # rule-major: reductions over rows are fast
    same = ~(by_rule != by_rule[:, :1]).any(axis=0)
    first = need[0]
    groups = [(np.flatnonzero(same), first)] if first.any() else []
    if same.all():
        return groups
    others = np.flatnonzero(~same)
    if others.size < BULK_MIN:  # too few for a plan, whatever each needs
        few = others[by_rule[:, others].any(axis=0)]
        wanted = np.logical_or.reduce(by_rule[:, few], axis=1)
        return [*groups, (few, wanted)] if few.size else groups
    patterns, group_of = _need_patterns(need[others])
    groups += [(others[group_of == k], w) for k, w in enumerate(patterns) if w.any()]
    return groups


@dataclass(frozen=True)
class _BulkVerdicts:
    """What the vectorised plans decided about window positions: those still to evaluate per node,
    those that passed and those that failed, each with whether the outcome may be kept for the group."""

    unknown: IntpArray
    passed: IntpArray
    passed_cacheable: npt.NDArray[np.bool_]
    failed: IntpArray
    failed_cacheable: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class _Placing:
    """What one placement works on: the pod, its profile and evaluator, the cycle's snapshot, and
    the evaluators of the first filter pass of nodes with nominated pods."""

    profile: CompiledProfile
    evaluator: PodEvaluator
    pod: PodInfoLike
    snapshot: Snapshot
    with_nominated: NominatedEvaluator


@dataclass
class _Filtered:
    """The outcome of the filter phase: feasible rows in search order, failures, evaluated count."""

    rows: IntpArray
    failures: Mapping[str, FilterFailure]
    start: int  # the first row evaluated; the others follow round robin
    evaluated: int
    results: NodeResults  # the node results the rows were read from (shared by a group, or fresh)
    # when no row passed: each distinct failure with the number of nodes it stands for
    counts: list[tuple[FilterFailure, int]] | None = None


def _rotated(local: npt.NDArray[np.int32], start: int, span: int) -> npt.NDArray[np.int32]:
    """The `span` entries of `local` from `start` on, wrapping round to its head: a view of `local`
    when they do not wrap (writes to it are writes to `local`), else a copy."""
    n = len(local)
    if start + span <= n:
        return local[start : start + span]
    return np.concatenate((local[start:], local[: start + span - n]))


class Algorithm:
    """Places pods on snapshot nodes, remembering the round-robin start between cycles."""

    def __init__(
        self, rng: random.Random, percentage_of_nodes_to_score: int = 0, groups: GroupCache | None = None
    ) -> None:
        self._rng = rng
        self._percentage = percentage_of_nodes_to_score
        self._next_start = 0
        self.groups = groups
        self.columns = ColumnSync()
        self.bulk_rows = 0  # rows whose verdict or scores came from the vectorised plans
        self._fail_ratio = 0.0  # the share of failing nodes in recent windows (the last one's or more)
        self.nominated_verdicts = NominatedVerdictCache()
        self._names: tuple[tuple[str, ...], npt.NDArray[np.object_]] = ((), np.zeros(0, dtype=object))

    def schedule_pod(
        self,
        profile: CompiledProfile,
        evaluator: PodEvaluator,
        pod: PodInfoLike,
        snapshot: Snapshot,
        cluster: ClusterFunctions,
        nominated: NominatedLookup,
        nominated_rows: NominatedRows,
        nominated_node: str = "",
        explain: bool = False,
    ) -> ScheduleResult:
        """Filter, score and select a node for `pod` (node None: nothing fits)."""
        t0 = time.perf_counter()
        placing = _Placing(profile, evaluator, pod, snapshot, nominated_evaluator(profile, pod, cluster))
        found = self._feasible_nodes(placing, nominated, nominated_rows, nominated_node, explain)
        verdicts = self._verdicts(placing, found, nominated) if explain else {}
        applied = tuple(profile.policies[k] for k in evaluator.applied()) if explain else None
        filter_seconds = time.perf_counter() - t0
        if found.rows.size == 0:
            return ScheduleResult(
                None,
                0,
                found.evaluated,
                found.failures,
                NO_SCORES,
                verdicts,
                filter_seconds,
                applied=applied,
                failure_counts=found.counts,
            )
        t0 = time.perf_counter()
        scores = self._prioritize(placing, cluster, found, explain)
        best = select_host(scores.totals, self._rng)
        return ScheduleResult(
            scores.node(best),
            len(found.rows),
            found.evaluated,
            found.failures,
            scores,
            verdicts,
            filter_seconds,
            time.perf_counter() - t0,
            applied,
        )

    def _feasible_nodes(
        self,
        p: _Placing,
        nominated: NominatedLookup,
        nominated_rows: NominatedRows,
        nominated_node: str,
        explain: bool,
    ) -> _Filtered:
        """The nominated node when it fits (kube-scheduler evaluateNominatedNode), else the window."""
        profile, evaluator, pod, snapshot = p.profile, p.evaluator, p.pod, p.snapshot
        row = snapshot.row(nominated_node) if nominated_node else None
        if row is not None:
            failure = filter_with_nominated(
                evaluator, pod, snapshot.nodes()[row], nominated, p.with_nominated
            )
            if failure is None:
                return _Filtered(np.array([row], dtype=np.intp), {}, row, 1, fresh_results(profile, snapshot))
        if len(snapshot) == 0:
            return _Filtered(np.zeros(0, dtype=np.intp), {}, 0, 0, fresh_results(profile, snapshot), [])
        groups = self.groups
        signature = evaluator.signature() if groups is not None else None
        if groups is None or signature is None:
            results = fresh_results(profile, snapshot)
        else:
            results = groups.group(profile, signature, snapshot)
        # a rule whose pod-only values moved (the spread counts after a bind) is decided again only
        # on the nodes labelled with the keys that moved, when it only tests labels against them (the
        # anti-affinity counts: the bound node's hostname); else on every row at once when it reads
        # the node through labels alone, per class of nodes (a second sync of one snapshot finds no
        # changed row: no memo needed, and making one per pod cost more than the syncs it saved)
        columns = lambda: self.columns.sync(snapshot)  # noqa: E731 - read by the two lambdas below
        renew = (
            (lambda rules: evaluator.filter_by_classes(columns(), rules))
            if len(snapshot) >= BULK_MIN
            else None
        )
        results.use_filter_values(
            evaluator.prepare("filter"),
            renew,
            lambda rule, old, new: evaluator.rows_to_renew(columns(), rule, old, new),
        )
        evaluator.track_cluster()
        shared = groups is not None and signature is not None
        return self._find_feasible(p, results, nominated_rows, shared, explain)

    def _name_column(self, snapshot: Snapshot) -> npt.NDArray[np.object_]:
        """The snapshot's node names as a column (kept while its names are the same tuple)."""
        names = snapshot.names()
        if self._names[0] is not names:
            self._names = (names, np.array(names, dtype=object))
        return self._names[1]

    # -- filter --------------------------------------------------------------------------------------

    def _find_feasible(
        self,
        p: _Placing,
        g: NodeResults,
        nominated_rows: NominatedRows,
        shared: bool,
        explain: bool,
    ) -> _Filtered:
        """Walk the window from the round-robin start until enough feasible nodes are found.

        Unknown rows count as feasible until evaluated: the window is the shortest prefix holding
        `limit` known-or-unknown passes; its unknown rows are evaluated (vectorised plans first when
        many), and the window is recomputed until every row in it is known."""
        evaluator, pod, snapshot = p.evaluator, p.pod, p.snapshot
        nodes, cels = snapshot.nodes(), snapshot.cels()
        n = len(nodes)
        limit = num_feasible_nodes_to_find(n, self._percentage)
        start = self._next_start % n
        # nodes with nominated pods of at least this pod's priority: evaluated with them, per pod,
        # but the group's verdicts on unchanged plain rows (`shared`: g is a group's) are kept
        plain_allowed = shared and nominated_rows.any_nominated() and p.with_nominated.adds_nothing(())
        plain, special = nominated_rows.split(pod, plain_allowed)
        status = g.status
        local = status.copy()
        own: list[FilterFailure] = []  # failures of this pod only (codes OWN, OWN - 1, ...)
        kept: NominatedVerdicts | None = None
        unheld: set[int] = set()
        if plain.size:
            kept = self.nominated_verdicts.of(g, n, evaluator.prepare("filter"))
            held = kept.known(plain, snapshot.versions, nominated_rows.stamps)
            unheld = set(plain[~held].tolist())
            special.update((row, list(nominated_rows.pods[row])) for row in unheld)
            rows, passed = plain[held], kept.passed[plain[held]]
            local[rows[passed]] = PASS
            failing = rows[~passed]
            local[failing] = OWN - len(own) - np.arange(len(failing))
            own.extend(kept.verdicts[failing].tolist())
        if special:
            local[list(special)] = UNKNOWN
        ordered = local
        end = n - 1
        span = min(n, 2 * limit + 64)  # the rows from `start` on looked at: the window is within them
        while True:
            ordered = _rotated(local, start, span)
            counts = np.cumsum((ordered < 0) & (ordered >= UNKNOWN))
            if span < n and counts[-1] < limit:  # the window may reach beyond: look at more rows
                span = min(n, 4 * span)
                continue
            end = min(int(np.searchsorted(counts, limit)), n - 1)
            unknown = np.flatnonzero(ordered[: end + 1] == UNKNOWN)
            if unknown.size == 0:
                break
            all_passed = True
            if unknown.size >= BULK_MIN:
                # as many rows again as the last pods' windows lost to failing nodes, or as this
                # window has lost so far when more, so that the window's growth is judged in this
                # call, not row by row (rows beyond the window are only remembered)
                seen = 1 - int(counts[end]) / (end + 1)
                ratio = min(max(self._fail_ratio, seen), 0.9)
                ahead = min(int((end + 1) * ratio / (1 - ratio)), n - 1 - end)
                if end + 1 + ahead > span:
                    span = n
                    ordered = _rotated(local, start, span)
                if ahead > 0:
                    beyond = np.flatnonzero(ordered[end + 1 : end + 1 + ahead] == UNKNOWN) + end + 1
                    unknown = np.concatenate((unknown, beyond))
                bulk = self._bulk_filter(evaluator, g, snapshot, unknown, start, special)
                unknown = bulk.unknown[bulk.unknown <= end]
                for positions, code, keep in (
                    (bulk.passed, PASS, bulk.passed_cacheable),
                    (bulk.failed, DEFERRED, bulk.failed_cacheable),
                ):
                    decided = positions + start
                    decided[decided >= n] -= n
                    local[decided] = code
                    ordered[positions] = code
                    status[decided[keep]] = code
                all_passed = not (bulk.failed <= end).any()
            if self.groups is not None:
                self.groups.evaluations += int(unknown.size)
            for pos in unknown.tolist():
                row = pos + start - n if pos + start >= n else pos + start
                if row in special:
                    plain_kept = kept if row in unheld else None
                    failure = self._filter_nominated(p, g, row, special[row], plain_kept, nominated_rows)
                    cacheable = False
                else:
                    evaluator.reset_cluster_called()
                    failure = evaluator.filter(cels[row])
                    cacheable = not evaluator.cluster_called
                if failure is None:
                    code = PASS
                elif cacheable:
                    code = g.record_failure(failure)
                else:
                    code = OWN - len(own)
                    own.append(failure)
                local[row] = code
                ordered[pos] = code  # `ordered` is `local` itself or a rotated copy of it
                if cacheable:
                    g.record_node_verdict(row, code, failure)
                all_passed = all_passed and code == PASS
            if all_passed:  # the window is what it was: every candidate in it passed
                break
        window = ordered[: end + 1]
        evaluated = end + 1
        passing = window == PASS
        failed = evaluated - int(np.count_nonzero(passing))
        share = failed / evaluated
        self._fail_ratio = max(share, (self._fail_ratio + share) / 2)  # up at once, down by halves
        if self.groups is not None:
            self.groups.hits += evaluated
        self._next_start = (start + evaluated) % n
        if not failed:  # every row of the window passed (the common case): no failure to report
            rows = np.arange(start, start + evaluated, dtype=np.intp)
            rows[rows >= n] -= n
            known = WindowFailures(self._name_column(snapshot), rows[:0], g.failures, rows[:0])
            return _Filtered(rows, known, start, evaluated, g, None)
        rows = np.flatnonzero(passing) + start
        rows[rows >= n] -= n
        # the failing rows in window order, their failures read from the group's and the pod's own
        # (one column operation per step: a pod that fits nowhere has a failure on every node)
        positions = np.flatnonzero(~passing)
        codes = window[positions]
        failing = positions + start
        failing[failing >= n] -= n
        later = codes == DEFERRED
        deferred: list[int] = failing[later].tolist()
        codes = codes[~later]
        table = g.failures + own
        indexes = np.where(codes >= 0, codes, len(g.failures) + OWN - codes)
        names = self._name_column(snapshot)
        known = WindowFailures(names, failing[~later], table, indexes)
        found: Mapping[str, FilterFailure] = known
        resolved: list[FilterFailure | None] = []
        if deferred:
            pending = DeferredFailures(evaluator, names, failing, known, [nodes[row] for row in deferred])
            if rows.size == 0 or explain:  # needed now: FailedScheduling, preemption, explanations
                resolved = pending.resolve()
                for row, failure, reusable in zip(deferred, resolved, pending.reusable, strict=True):
                    if failure is not None and reusable and status[row] == DEFERRED:
                        status[row] = g.record_failure(failure)
            # most placed pods' failures are never looked at: resolved on first read
            found = pending
        # a pod that fits nowhere reports its failures counted (FailedScheduling)
        tally = window_failure_counts(table, indexes, later, resolved) if rows.size == 0 else None
        return _Filtered(rows, found, start, evaluated, g, tally)

    @staticmethod
    def _filter_nominated(
        p: _Placing,
        g: NodeResults,
        row: int,
        others: list[PodInfoLike],
        kept: NominatedVerdicts | None = None,
        nominated_rows: NominatedRows | None = None,
    ) -> FilterFailure | None:
        """The verdict on a node with the nominated pods `others` counted, reused while the node, the
        nominated pods and the pod-only values of the first pass are the same. When `others` change
        no pod-only value (`adds_nothing`) the pod's own evaluator decides the first pass too (values
        None: the group's), unless a node evaluation calls the cluster functions; such a verdict on a
        plain row goes to `kept` too (with the row's stamp in `nominated_rows`)."""
        evaluator, snapshot = p.evaluator, p.snapshot
        node = snapshot.nodes()[row]
        if p.with_nominated.adds_nothing(others):
            version = int(snapshot.versions[row])
            hit = g.nominated.get(row)
            if hit is not None and hit.holds(version, others, None):
                failure = hit.verdict
            else:
                evaluator.reset_cluster_called()
                failure = filter_with_others(evaluator, node, others, evaluator)
                if evaluator.cluster_called:
                    return failure
                g.nominated[row] = NominatedVerdict.of(version, others, None, failure)
            if kept is not None and nominated_rows is not None:
                kept.keep(row, version, int(nominated_rows.stamps[row]), failure)
            return failure
        first = p.with_nominated(node, others)
        values = first.prepare("filter")
        first.track_cluster()
        version = int(snapshot.versions[row])
        hit = g.nominated.get(row)
        if hit is not None and hit.holds(version, others, values):
            return hit.verdict
        first.reset_cluster_called()
        evaluator.reset_cluster_called()
        failure = filter_with_others(evaluator, node, others, first)
        if not first.cluster_called and not evaluator.cluster_called:
            g.nominated[row] = NominatedVerdict.of(version, others, values, failure)
        return failure

    def _bulk_filter(
        self,
        evaluator: PodEvaluator,
        g: NodeResults,
        snapshot: Snapshot,
        unknown: IntpArray,
        start: int,
        special: Mapping[int, object],
    ) -> _BulkVerdicts:
        """Decide window positions `unknown` by the vectorised plans, asking them only for the rules
        whose verdict the group does not know on those rows; rows they are unsure about, rows too few
        to be worth a plan and nodes with nominated pods stay to be evaluated per node."""
        n = len(snapshot)
        rows = unknown + start
        rows[rows >= n] -= n
        if special:
            plain = ~np.isin(rows, np.fromiter(special, dtype=np.intp))
            later, unknown, rows = unknown[~plain], unknown[plain], rows[plain]
        else:
            later = unknown[:0]
        known = g.verdicts.take(rows, axis=0)
        need = known == RULE_UNKNOWN
        merged, fresh = known, None
        left = np.zeros(len(rows), dtype=bool)  # to be evaluated per node
        # rows needing the same rules are asked together (a bind's row needs every rule, the
        # others only the rules whose pod-only values moved); a few rows go to the functions
        groups = _need_groups(need) if need.any() else []
        if groups:
            merged, fresh = known.copy(), np.zeros(need.shape, dtype=bool)
            for members, wanted in groups:
                if members.size < BULK_MIN:
                    left[members] = True
                    continue
                result = evaluator.bulk_filter(self.columns.sync(snapshot), rows[members], wanted)
                if result is None:
                    left[members] = True
                    continue
                verdicts, reusable = result
                self.bulk_rows += members.size
                cols = np.flatnonzero(wanted)
                if self.groups is not None:
                    self.groups.judged += members.size * len(cols)
                # every member lacked every wanted rule: the cache gets the reusable ones (an unsure
                # verdict stays unknown)
                block = verdicts[:, cols]
                everyone = members.size == len(rows)
                if everyone:
                    merged[:, cols] = block
                else:
                    merged[np.ix_(members, cols)] = block
                keep = reusable[cols]
                if keep.all() and len(cols) == 1:
                    g.verdicts[rows[members], cols[0]] = block[:, 0]
                else:
                    g.verdicts[np.ix_(rows[members], cols[keep])] = block[:, keep]
                if not keep.all():
                    if everyone:
                        fresh[:, cols[~keep]] = True
                    else:
                        fresh[np.ix_(members, cols[~keep])] = True  # verdicts for this pod only
        rules = merged.shape[1]
        if rules == 0:
            first = np.zeros(len(rows), dtype=np.intp)
            passed = np.ones(len(rows), dtype=bool)
            failed = ~passed
        else:
            # a row's first rule not passed (its verdict there: failed, or unsure)
            not_passed = merged != RULE_PASS
            first = not_passed.argmax(axis=1)
            at_first = merged[np.arange(len(rows)), first]
            passed = at_first == RULE_PASS
            failed = at_first == RULE_FAIL
            first[passed] = rules
        passed &= ~left
        failed &= ~left
        # a row's outcome is reusable when no verdict it rests on (rules up to its first failure) is
        # this pod's own
        cacheable: npt.NDArray[np.bool_] = np.ones(len(rows), dtype=bool)
        if fresh is not None and fresh.any():
            cacheable = ~np.any(fresh & (np.arange(rules)[None, :] <= first[:, None]), axis=1)
        unsure = ~passed & ~failed
        return _BulkVerdicts(
            unknown=np.concatenate((unknown[unsure], later)),
            passed=unknown[passed],
            passed_cacheable=cacheable[passed],
            failed=unknown[failed],
            failed_cacheable=cacheable[failed],
        )

    # -- score and select ------------------------------------------------------------------------------

    @staticmethod
    def _verdicts(p: _Placing, found: _Filtered, nominated: NominatedLookup) -> dict[str, list[FilterResult]]:
        """Every filter rule's verdict on every evaluated node, in search order (explain mode)."""
        nodes, n = p.snapshot.nodes(), len(p.snapshot)
        out: dict[str, list[FilterResult]] = {}
        for i in range(found.evaluated):
            node = nodes[(found.start + i) % n]
            others = nominated_others(p.pod, nominated(node.name))
            first = p.with_nominated(node, others) if others else p.evaluator
            out[node.name] = filter_all_with_others(p.evaluator, node, others, first)
        return out

    def _prioritize(
        self, p: _Placing, cluster: ClusterFunctions, found: _Filtered, explain: bool
    ) -> ScoreTable:
        """The feasible nodes' scores: PreScore, raw, normalised, weighted, summed (prioritizeNodes)."""
        snapshot, rules = p.snapshot, p.profile.scores
        cels, rows = snapshot.cels(), found.rows
        cluster.prescore(p.pod.cel, RowSelection(cels, rows))
        found.results.use_score_values(p.evaluator.prepare("score"))
        raw = self._raw_scores(p, found.results, rows)
        totals, normalized = weigh(raw, rules, keep=explain)
        if not explain:
            return ScoreTable(snapshot.names(), rows, totals, rules)
        errors = [p.evaluator.score_errors(cels[row]) for row in rows.tolist()]
        return ScoreTable(snapshot.names(), rows, totals, rules, raw, normalized, errors)

    def _bulk_scores(
        self, p: _Placing, g: NodeResults, missing: IntpArray, unknown: npt.NDArray[np.bool_], bound: int
    ) -> IntpArray:
        """Raw scores of `missing` rows (`unknown`: the rules each lacks) by the vectorised plans, only
        for the rules the rows lack: rows lacking the same rules together, and the rows of rarer sets
        together; returns the rows left to the per-node functions."""
        patterns, which = _need_patterns(unknown)
        sizes = np.bincount(which, minlength=len(patterns))
        parts = [(which == k, patterns[k]) for k in np.flatnonzero(sizes >= BULK_MIN).tolist()]
        rare = sizes[which] < BULK_MIN
        if rare.sum() >= BULK_MIN:
            parts.append((rare, unknown[rare].any(axis=0)))
        done = np.zeros(len(missing), dtype=bool)
        for mask, wanted in parts:
            part = missing[mask]
            result = p.evaluator.bulk_scores(self.columns.sync(p.snapshot), part, wanted)
            if result is None:
                continue
            values = result[0][:, wanted]
            if not np.isfinite(values).all() or np.abs(values).max() > bound:
                continue
            cells = np.ix_(part, np.flatnonzero(wanted))
            g.raw[cells] = np.trunc(values).astype(np.int64)  # int(float) as per node
            g.raw_ok[cells] = result[1][wanted]
            self.bulk_rows += len(part)
            if self.groups is not None:
                self.groups.scored += int(values.size)
            done |= mask
        return missing[~done]

    def _raw_scores(self, p: _Placing, g: NodeResults, rows: IntpArray) -> ScoreArray:
        """Raw scores of the feasible `rows` (int64; Python ints where a value is beyond int64 sums)."""
        evaluator, snapshot, rules = p.evaluator, p.snapshot, p.profile.scores
        if not rules:
            return np.zeros((len(rows), 0), dtype=np.int64)
        bound = int64_bound(rules)
        known = g.raw_ok.take(rows, axis=0)
        lacking = ~np.ascontiguousarray(known.T).all(axis=0)  # rule-major: a fast reduction
        missing = rows[lacking]
        if missing.size >= BULK_MIN:
            missing = self._bulk_scores(p, g, missing, ~known[lacking], bound)
        cels = snapshot.cels()
        huge: dict[int, list[int]] = {}
        for row in missing.tolist():
            evaluator.reset_cluster_called()
            raw = [int(v) for v in evaluator.score(cels[row])]
            if self.groups is not None:
                self.groups.scored += len(raw)
            if any(abs(v) > bound for v in raw):
                huge[row] = raw
                continue
            g.raw[row] = raw
            g.raw_ok[row] = not evaluator.cluster_called
        matrix: ScoreArray = g.raw.take(rows, axis=0)
        if huge:
            matrix = matrix.astype(object)
            for i, row in enumerate(rows.tolist()):
                if row in huge:
                    matrix[i] = huge[row]
        return matrix
