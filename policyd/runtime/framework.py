"""Running one profile over the nodes: filter, normalise, score, select.

Modelled on kube-scheduler's schedule_one.go (findNodesThatFitPod, prioritizeNodes, selectHost):
filtering stops after `num_feasible_nodes_to_find` feasible nodes and the next search starts where
the last one stopped; pods nominated to a node with priority >= the pod's are counted in a first
filter pass; scores are normalised with integer arithmetic (docs/DESIGN.md "Normalisation"),
weighted and summed; the best node is picked with reservoir sampling among equal scores.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policyd.compiler.plugins import (
    CompiledProfile,
    FilterFailure,
    FilterResult,
    Normalize,
    PodEvaluator,
    RuleRef,
)
from policyd.runtime.snapshot import NodeStateLike, PodViewLike

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5

NominatedLookup = Callable[[str], Sequence[PodViewLike]]


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
    evaluator: PodEvaluator, pod: PodViewLike, node: NodeStateLike, nominated: NominatedLookup
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

    feasible: list[NodeStateLike] = field(default_factory=list)
    failures: dict[str, FilterFailure] = field(default_factory=dict)
    evaluated: int = 0
    all_results: dict[str, list[FilterResult]] = field(default_factory=dict)


def find_feasible_nodes(
    evaluator: PodEvaluator,
    pod: PodViewLike,
    nodes: Sequence[NodeStateLike],
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
    profile: CompiledProfile, evaluator: PodEvaluator, nodes: Sequence[NodeStateLike]
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
    """The highest-scoring node; ties broken uniformly at random by reservoir sampling."""
    if not scores:
        raise ValueError("no nodes to select from")
    best = scores[0]
    count = 1
    for candidate in scores[1:]:
        if candidate.total > best.total:
            best, count = candidate, 1
        elif candidate.total == best.total:
            count += 1
            if rng.randrange(count) == 0:
                best = candidate
    return best


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


class ProfileRunner:
    """Runs profiles over snapshot nodes, remembering the round-robin start between cycles."""

    def __init__(self, rng: random.Random, percentage_of_nodes_to_score: int = 0) -> None:
        self._rng = rng
        self._percentage = percentage_of_nodes_to_score
        self._next_start = 0

    def schedule(
        self,
        profile: CompiledProfile,
        evaluator: PodEvaluator,
        pod: PodViewLike,
        nodes: Sequence[NodeStateLike],
        nominated: NominatedLookup,
        nominated_node: NodeStateLike | None = None,
        explain: bool = False,
        cluster: Any = None,
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


def reasons_by_node(failures: Mapping[str, FilterFailure]) -> dict[str, tuple[str, ...]]:
    """Failure reasons per node name (for FailedScheduling messages)."""
    return {name: f.reasons for name, f in failures.items()}
