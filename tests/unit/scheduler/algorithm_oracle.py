"""The plain per-node placement: the oracle of `policyd.scheduler.algorithm`.

Every node is filtered by the per-node functions, one at a time from the round-robin start, until
enough feasible nodes are found; raw scores are normalised with Python integers, weighted and
summed; the best node is drawn among equal totals. The product's one algorithm (numpy, vectorised
plans, reuse cache) must decide exactly this.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from policyd.framework import CompiledProfile, FilterFailure, Normalize, PodEvaluator
from policyd.scheduler.algorithm.feasibility import NominatedEvaluator, NominatedLookup, filter_with_nominated
from policyd.scheduler.algorithm.scoring import NodeScore, RuleScore
from policyd.scheduler.snapshot import NodeInfoLike, PodInfoLike


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


def score_nodes(
    profile: CompiledProfile, evaluator: PodEvaluator, nodes: Sequence[NodeInfoLike]
) -> list[NodeScore]:
    """Score feasible nodes: raw per rule, normalised across nodes, weighted, summed."""
    rules = profile.scores
    raw_by_node = [[int(s) for s in evaluator.score(node.cel)] for node in nodes]
    columns = [normalize([row[j] for row in raw_by_node], rule.normalize) for j, rule in enumerate(rules)]
    scores = []
    for i, node in enumerate(nodes):
        parts = tuple(
            RuleScore(rule.rule, raw_by_node[i][j], columns[j][i], columns[j][i] * rule.weight)
            for j, rule in enumerate(rules)
        )
        scores.append(NodeScore(node.name, sum(p.weighted for p in parts), parts))
    return scores


def select_host(scores: Sequence[NodeScore], rng: random.Random) -> NodeScore:
    """The highest-scoring node; ties broken uniformly at random (one draw among the tied nodes)."""
    best = max(s.total for s in scores)
    ties = [s for s in scores if s.total == best]
    return ties[0] if len(ties) == 1 else ties[rng.randrange(len(ties))]


@dataclass
class Placement:
    """What the oracle decided for one pod."""

    node: str | None
    evaluated: int
    failures: dict[str, FilterFailure] = field(default_factory=dict)
    scores: list[NodeScore] = field(default_factory=list)


def place(
    profile: CompiledProfile,
    evaluator: PodEvaluator,
    pod: PodInfoLike,
    nodes: Sequence[NodeInfoLike],
    start: int,
    limit: int,
    nominated: NominatedLookup,
    with_nominated: NominatedEvaluator,
    rng: random.Random,
) -> Placement:
    """Filter from `start` round robin until `limit` feasible nodes, score, select."""
    out = Placement(None, 0)
    feasible: list[NodeInfoLike] = []
    for i in range(len(nodes)):
        node = nodes[(start + i) % len(nodes)]
        out.evaluated += 1
        failure = filter_with_nominated(evaluator, pod, node, nominated, with_nominated)
        if failure is None:
            feasible.append(node)
            if len(feasible) >= limit:
                break
        else:
            out.failures[node.name] = failure
    if feasible:
        out.scores = score_nodes(profile, evaluator, feasible)
        out.node = select_host(out.scores, rng).node
    return out


def failure_counts(failures: Iterable[FilterFailure]) -> list[tuple[FilterFailure, int]]:
    """Each distinct failure object of `failures` with the number of nodes it stands for, in first-seen
    order, counted by identity one node at a time (what the scheduler counts from a window's codes)."""
    failures = list(failures)
    objects = dict(zip(map(id, failures), failures, strict=True))
    return [(objects[key], count) for key, count in Counter(map(id, failures)).items()]
