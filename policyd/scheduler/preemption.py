"""Preemption with kube-scheduler's DefaultPreemption rules, victims chosen by policy.

A node is a candidate when removing every eligible victim (PreemptionSpec.eligible_victim) makes the
pod pass the filters; then victims are reprieved, most important first and PDB-violating ones before
the others, as long as the pod still fits. Candidates are ordered by: fewest PDB violations, lowest
highest-victim priority, lowest sum of priorities, fewest victims, latest start time of the
highest-priority victims, first found.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from policyd.framework import CompiledProfile, FilterFailure, PodEvaluator
from policyd.scheduler.algorithm.feasibility import NominatedEvaluator, NominatedLookup, filter_with_nominated
from policyd.scheduler.attempts import (
    NO_VICTIMS,
    NOT_ELIGIBLE_NEVER,
    NOT_ELIGIBLE_TERMINATING,
    NOT_HELPFUL,
    preemption_message,
)
from policyd.scheduler.pdb import DisruptionBudget, split_by_violation
from policyd.scheduler.snapshot import NodeInfoLike, PodInfoLike, Snapshot

# DefaultPreemption's arguments: the dry run stops after max(10 % of the nodes, 100) candidates
MIN_CANDIDATE_NODES_PERCENTAGE = 10
MIN_CANDIDATE_NODES_ABSOLUTE = 100

MAX_INT32 = 2**31 - 1

EvaluatorFactory = Callable[[Snapshot], PodEvaluator]
# the evaluators of the first filter pass of a what-if snapshot's node with nominated pods (their spread
# and affinity counts included, as kube-scheduler's addGENominatedPods)
NominatedFactory = Callable[[Snapshot], NominatedEvaluator]


def start_time(pod: PodInfoLike) -> float:
    """Start time of a pod; a pod that has not started counts as starting now (latest)."""
    value = pod.start_time
    return math.inf if not value else float(value)


def importance(pod: PodInfoLike) -> tuple[int, float]:
    """Sort key putting the more important pod first (kube-scheduler MoreImportantPod)."""
    return (-pod.priority, start_time(pod))


@dataclass(frozen=True)
class Candidate:
    """A node where preemption makes the pod fit, with its victims (most important first)."""

    node: str
    victims: tuple[PodInfoLike, ...]
    pdb_violations: int


@dataclass
class PreemptionOutcome:
    """The PostFilter result: the chosen candidate, or the message saying why there is none."""

    candidate: Candidate | None
    message: str = ""
    statuses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)


def eligible_to_preempt(profile: CompiledProfile, pod: PodInfoLike, snapshot: Snapshot) -> str | None:
    """None when `pod` may preempt, else the kube-scheduler message saying why not."""
    if pod.cel.get("preemptionPolicy") == "Never":
        return NOT_ELIGIBLE_NEVER
    if not profile.preemption.may_preempt(pod.cel):
        return ""
    nominated = pod.cel.get("nominatedNodeName") or ""
    node = snapshot.node(nominated) if nominated else None
    if node is not None:
        for other in _pods_of(node):
            if other.deleting and other.priority < pod.priority:
                return NOT_ELIGIBLE_TERMINATING
    return None


def _pods_of(node: NodeInfoLike) -> list[PodInfoLike]:
    return list(node.pods.values())


def select_victims_on_node(
    profile: CompiledProfile,
    pod: PodInfoLike,
    node: NodeInfoLike,
    snapshot: Snapshot,
    evaluator_for: EvaluatorFactory,
    nominated: NominatedLookup,
    budgets: Sequence[DisruptionBudget],
    all_pods: Sequence[PodInfoLike],
    nominated_for: NominatedFactory | None = None,
) -> tuple[Candidate | None, tuple[str, ...]]:
    """The minimal victims on `node`, or None and the reasons preemption cannot help there."""
    eligible = profile.preemption.eligible_victim
    potential = [p for p in _pods_of(node) if eligible(pod.cel, p.cel)]
    if not potential:
        return None, (NO_VICTIMS,)

    def failure_on(state: NodeInfoLike) -> FilterFailure | None:
        what_if = snapshot.replace(state)
        evaluator = evaluator_for(what_if)
        if nominated_for is None:
            return filter_with_nominated(evaluator, pod, state, nominated)

        def first(node: NodeInfoLike, others: Sequence[PodInfoLike]) -> PodEvaluator:
            return nominated_for(what_if)(node, others)  # built only when pods are nominated here

        return filter_with_nominated(evaluator, pod, state, nominated, first)

    state = node.clone_without(potential)
    failure = failure_on(state)
    if failure is not None:
        return None, failure.reasons
    potential.sort(key=importance)
    honored = budgets if profile.preemption.honor_pdb else ()
    violating, fine = split_by_violation(potential, honored, all_pods)
    victims: list[PodInfoLike] = []
    violations = 0
    for group, violates in ((violating, True), (fine, False)):
        for candidate in group:
            trial = state.with_pods([candidate])
            if failure_on(trial) is None:
                state = trial  # reprieved
            else:
                victims.append(candidate)
                violations += int(violates)
    if not victims:
        return None, (f"expected at least one victim pod on node {node.name}",)
    victims.sort(key=importance)
    return Candidate(node.name, tuple(victims), violations), ()


def _earliest_start_of_highest(victims: Sequence[PodInfoLike]) -> float:
    top = max(v.priority for v in victims)
    return min(start_time(v) for v in victims if v.priority == top)


def pick_candidate(candidates: Sequence[Candidate]) -> Candidate:
    """The best candidate by kube-scheduler's pickOneNodeForPreemption ordering."""

    def rank(c: Candidate) -> tuple[float, ...]:
        return (
            c.pdb_violations,
            c.victims[0].priority,
            sum(v.priority + MAX_INT32 + 1 for v in c.victims),
            len(c.victims),
            -_earliest_start_of_highest(c.victims),
        )

    best = candidates[0]
    best_rank = rank(best)
    for c in candidates[1:]:
        r = rank(c)
        if r < best_rank:
            best, best_rank = c, r
    return best


def num_candidates(potential: int) -> int:
    """How many candidate nodes the dry run looks for (DefaultPreemption's minCandidateNodesPercentage
    10 and minCandidateNodesAbsolute 100)."""
    wanted = potential * MIN_CANDIDATE_NODES_PERCENTAGE // 100
    return min(potential, max(wanted, MIN_CANDIDATE_NODES_ABSOLUTE))


def find_preemption(
    profile: CompiledProfile,
    pod: PodInfoLike,
    snapshot: Snapshot,
    failures: Mapping[str, FilterFailure],
    evaluator_for: EvaluatorFactory,
    nominated: NominatedLookup,
    budgets: Sequence[DisruptionBudget],
    all_pods: Sequence[PodInfoLike],
    rng: random.Random | None = None,
    nominated_for: NominatedFactory | None = None,
) -> PreemptionOutcome:
    """Dry-run preemption on the nodes where it may help until enough candidates are found (all of
    them up to 100 nodes), and pick the best candidate."""
    not_eligible = eligible_to_preempt(profile, pod, snapshot)
    if not_eligible is not None:
        return PreemptionOutcome(None, "preemption: " + not_eligible if not_eligible else "")
    statuses: dict[str, tuple[str, ...]] = {}
    candidates: list[Candidate] = []
    potential = []
    for node in snapshot.nodes():
        failure = failures.get(node.name)
        if failure is not None and failure.unresolvable:
            statuses[node.name] = (NOT_HELPFUL,)
        else:
            potential.append(node)
    wanted = num_candidates(len(potential))
    # kube-scheduler starts the dry run at a random node and stops once it has enough candidates;
    # when every node is examined anyway the order is the snapshot's (reproducible candidate ties)
    offset = rng.randrange(len(potential)) if rng is not None and wanted < len(potential) else 0
    for i in range(len(potential)):
        node = potential[(offset + i) % len(potential)]
        candidate, reasons = select_victims_on_node(
            profile, pod, node, snapshot, evaluator_for, nominated, budgets, all_pods, nominated_for
        )
        if candidate is None:
            statuses[node.name] = reasons
        else:
            candidates.append(candidate)
            if len(candidates) >= wanted:
                break
    if not candidates:
        return PreemptionOutcome(None, preemption_message(len(snapshot), statuses), statuses)
    return PreemptionOutcome(pick_candidate(candidates), "", statuses, candidates)
