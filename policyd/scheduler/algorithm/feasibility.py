"""Which nodes to look at and how a node is filtered with the pods nominated to it.

kube-scheduler's numFeasibleNodesToFind (filtering stops after that many feasible nodes and the next
search starts where the last one stopped) and its two-pass filter of a node that has nominated pods
of at least the pod's priority (RunFilterPluginsWithNominatedPods): first with them on the node and
added to the PreFilter state (an evaluator over `ClusterFunctions.with_nominated`), then as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from policyd.framework import ClusterFunctions, CompiledProfile, FilterFailure, FilterResult, PodEvaluator
from policyd.scheduler.cluster.affinity_terms import has_pod_affinity
from policyd.scheduler.snapshot import NodeInfoLike, PodInfoLike

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5

NominatedLookup = Callable[[str], Sequence[PodInfoLike]]
NominatedNodes = Callable[[], Iterable[str]]


class NominatedEvaluator(Protocol):
    """The evaluators of a pod's first filter passes: the pod's, over the cluster functions with the
    nominated pods added on the node."""

    def __call__(self, node: NodeInfoLike, others: Sequence[PodInfoLike], /) -> PodEvaluator:
        """The evaluator of `node`'s first filter pass with `others` counted."""
        ...

    def adds_nothing(self, others: Sequence[PodInfoLike]) -> bool:
        """True when counting `others` leaves the pod's pod-only filter values as they are (the pod's
        own evaluator then decides the first pass, unless a node evaluation calls the cluster
        functions, which may count them)."""
        ...


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


class _NominatedEvaluators:
    """`NominatedEvaluator` over a cycle's cluster functions."""

    def __init__(self, profile: CompiledProfile, pod: PodInfoLike, cluster: ClusterFunctions) -> None:
        self.profile = profile
        self.pod = pod
        self.cluster = cluster
        self._reads_pods: bool | None = None

    def __call__(self, node: NodeInfoLike, others: Sequence[PodInfoLike], /) -> PodEvaluator:
        """The evaluator of `node`'s first filter pass with `others` counted."""
        return self.profile.evaluator(
            self.pod.cel, self.cluster.with_nominated(node.cel, [p.cel for p in others])
        )

    def adds_nothing(self, others: Sequence[PodInfoLike]) -> bool:
        """True when the pod's pod-only state counted no pods (`ClusterFunctions.reads_pods`, asked on
        the first call, after the pod's filter lets were prepared) and none of `others` has inter-pod
        (anti-)affinity terms: `with_nominated` then adds them to nothing the pod's lets read."""
        if self._reads_pods is None:
            self._reads_pods = self.cluster.reads_pods(self.pod.cel)
        if self._reads_pods:
            return False
        for p in others:
            if has_pod_affinity(p.cel):
                return False
        return True


def nominated_evaluator(
    profile: CompiledProfile, pod: PodInfoLike, cluster: ClusterFunctions
) -> NominatedEvaluator:
    """The evaluators of `pod`'s first filter passes over `cluster` (kube-scheduler addGENominatedPods)."""
    return _NominatedEvaluators(profile, pod, cluster)


def filter_with_nominated(
    evaluator: PodEvaluator,
    pod: PodInfoLike,
    node: NodeInfoLike,
    nominated: NominatedLookup,
    with_nominated: Callable[[NodeInfoLike, Sequence[PodInfoLike]], PodEvaluator] | None = None,
) -> FilterFailure | None:
    """Filter `node`, first with the pods of >= priority nominated to it, then as it is.

    `with_nominated` gives the first pass's evaluator (the scheduling cycle's and the preemption dry
    run's count the nominated pods in the PreFilter states of PodTopologySpread and InterPodAffinity);
    without it the first pass runs `evaluator`: the pods count on the node only.
    """
    others = nominated_others(pod, nominated(node.name))
    first = with_nominated(node, others) if others and with_nominated is not None else evaluator
    return filter_with_others(evaluator, node, others, first)


def filter_with_others(
    evaluator: PodEvaluator, node: NodeInfoLike, others: Sequence[PodInfoLike], first: PodEvaluator
) -> FilterFailure | None:
    """Filter `node` with the nominated pods `others` counted by `first` (when any), then as it is."""
    if others:
        failure = first.filter(node.with_pods(others).cel)
        if failure is not None:
            return failure
    return evaluator.filter(node.cel)


def filter_all_with_others(
    evaluator: PodEvaluator, node: NodeInfoLike, others: Sequence[PodInfoLike], first: PodEvaluator
) -> list[FilterResult]:
    """Every filter rule's verdict on `node` in the pass that decided it (explanations): the first
    pass's when it failed there, else those of the node as it is."""
    if others:
        results = first.filter_all(node.with_pods(others).cel)
        if not all(r.passed for r in results):
            return results
    return evaluator.filter_all(node.cel)
