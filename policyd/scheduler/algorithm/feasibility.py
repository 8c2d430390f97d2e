"""Which nodes to look at and how a node is filtered with the pods nominated to it.

kube-scheduler's numFeasibleNodesToFind (filtering stops after that many feasible nodes and the next
search starts where the last one stopped) and its two-pass filter of a node that has nominated pods
of at least the pod's priority (addNominatedPods): first with them counted, then as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from policyd.framework import FilterFailure, PodEvaluator
from policyd.scheduler.snapshot import NodeInfoLike, PodInfoLike

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5

NominatedLookup = Callable[[str], Sequence[PodInfoLike]]
NominatedNodes = Callable[[], Iterable[str]]


def num_feasible_nodes_to_find(num_nodes: int, percentage: int = 0) -> int:
    """How many feasible nodes to look for (kube-scheduler numFeasibleNodesToFind)."""
    if num_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_nodes
    if percentage <= 0:
        percentage = max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND, 50 - num_nodes // 125)
    found = num_nodes * percentage // 100
    return max(found, MIN_FEASIBLE_NODES_TO_FIND)


def nominated_others(pod: PodInfoLike, nominated: Sequence[PodInfoLike]) -> list[PodInfoLike]:
    """The pods nominated to a node that count when filtering `pod` there: priority >= its own."""
    return [p for p in nominated if p.priority >= pod.priority and p.key != pod.key]


def filter_with_nominated(
    evaluator: PodEvaluator, pod: PodInfoLike, node: NodeInfoLike, nominated: NominatedLookup
) -> FilterFailure | None:
    """Filter `node`, first with the pods of >= priority nominated to it, then as it is."""
    return filter_with_others(evaluator, node, nominated_others(pod, nominated(node.name)))


def filter_with_others(
    evaluator: PodEvaluator, node: NodeInfoLike, others: Sequence[PodInfoLike]
) -> FilterFailure | None:
    """Filter `node` with the nominated pods `others` counted (when any), then as it is."""
    if others:
        failure = evaluator.filter(node.with_pods(others).cel)
        if failure is not None:
            return failure
    return evaluator.filter(node.cel)
