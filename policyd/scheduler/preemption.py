"""Preemption with kube-scheduler's DefaultPreemption rules, victims chosen by policy.

A node is a candidate when removing every eligible victim (PreemptionSpec.eligible_victim) makes the
pod pass the filters; then victims are reprieved, most important first and PDB-violating ones before
the others, as long as the pod still fits. Candidates are ordered by: fewest PDB violations, lowest
highest-victim priority, lowest sum of priorities, fewest victims, latest start time of the
highest-priority victims, first found.

The dry run walks the nodes from a random offset and stops at `num_candidates` candidates, as
DefaultPreemption does; a `RowJudge` tells the outcomes it knows beforehand for every row at once
(`NodeJudges`, policyd.scheduler.preemption_reuse) and decides only the rows that walk reaches.
"""

from __future__ import annotations

import functools
import math
import operator
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from policyd.framework import CompiledProfile, FilterFailure, PodEvaluator
from policyd.scheduler.algorithm.feasibility import NominatedEvaluator, NominatedLookup, filter_with_nominated
from policyd.scheduler.attempts import (
    NO_VICTIMS,
    NOT_ELIGIBLE_NEVER,
    NOT_ELIGIBLE_TERMINATING,
    NOT_HELPFUL,
    preemption_message,
)
from policyd.scheduler.gosort import sort_slice
from policyd.scheduler.pdb import DisruptionBudget, disruptions_allowed, split_by_violation
from policyd.scheduler.snapshot import NodeInfoLike, PodInfoLike, Snapshot

# DefaultPreemption's arguments: the dry run stops after max(10 % of the nodes, 100) candidates
MIN_CANDIDATE_NODES_PERCENTAGE = 10
MIN_CANDIDATE_NODES_ABSOLUTE = 100

MAX_INT32 = 2**31 - 1

IntpArray = npt.NDArray[np.intp]

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


def more_important(a: PodInfoLike, b: PodInfoLike) -> bool:
    """MoreImportantPod(a, b) as kube-scheduler evaluates it: higher priority first, then the earlier
    start time; a pod without one (no kubelet started it) starts "now", read afresh for each of the
    two pods, so it comes after every pod that started, and of two such pods of one priority each
    comes before the other."""
    if a.priority != b.priority:
        return a.priority > b.priority
    if not a.start_time:
        return not b.start_time
    return not b.start_time or float(a.start_time) < float(b.start_time)


def sort_by_importance(pods: list[PodInfoLike]) -> None:
    """Sort `pods` most important first, into the order kube-scheduler's sort.Slice with
    MoreImportantPod leaves them in (`policyd.scheduler.gosort`): among pods of one priority without a
    start time the comparison holds both ways, and their order is what Go's algorithm leaves (up to
    12 pods, its insertion sort: reversed)."""
    sort_slice(pods, more_important)


@dataclass(frozen=True)
class Candidate:
    """A node where preemption makes the pod fit, with its victims (most important first)."""

    node: str
    victims: tuple[PodInfoLike, ...]
    pdb_violations: int

    @functools.cached_property
    def rank(self) -> tuple[float, ...]:
        """pickOneNodeForPreemption's sort key (smaller is better; ties: the first found)."""
        return (
            self.pdb_violations,
            self.victims[0].priority,
            sum(v.priority + MAX_INT32 + 1 for v in self.victims),
            len(self.victims),
            -_earliest_start_of_highest(self.victims),
        )


@dataclass
class PreemptionOutcome:
    """The PostFilter result: the chosen candidate, or the message saying why there is none."""

    candidate: Candidate | None
    message: str = ""
    # gives `statuses` when first read (a preemptor that found a candidate rarely needs them)
    statuses_of: Callable[[], dict[str, tuple[str, ...]]] = field(default=dict, compare=False, repr=False)
    candidates: list[Candidate] = field(default_factory=list)

    @functools.cached_property
    def statuses(self) -> dict[str, tuple[str, ...]]:
        """Why preemption cannot help, per node judged without a candidate."""
        return self.statuses_of()


def eligible_to_preempt(
    profile: CompiledProfile, pod: PodInfoLike, snapshot: Snapshot, nominated_node: str = ""
) -> str | None:
    """None when `pod` may preempt, else the kube-scheduler message saying why not.

    `nominated_node`: the node this scheduler nominated the pod to, when it did. It counts before the
    pod's `status.nominatedNodeName`: kube-scheduler writes the nomination before its next cycle, where
    policyd's write may still wait behind its victims' deletions; a preemptor retried meanwhile, its
    own victims still terminating on that node, must not preempt again (it would evict one more pod)."""
    if pod.cel.get("preemptionPolicy") == "Never":
        return NOT_ELIGIBLE_NEVER
    if not profile.preemption.may_preempt(pod.cel):
        return ""
    nominated = nominated_node or pod.cel.get("nominatedNodeName") or ""
    node = snapshot.node(nominated) if nominated else None
    if node is not None:
        for other in _pods_of(node):
            if other.deleting and other.priority < pod.priority:
                return NOT_ELIGIBLE_TERMINATING
    return None


def _pods_of(node: NodeInfoLike) -> list[PodInfoLike]:
    return list(node.pods.values())


# the pod's filter verdict on a what-if state of a node (victims removed)
FailureOn = Callable[[NodeInfoLike], FilterFailure | None]


@dataclass(frozen=True)
class NodeOutcome:
    """The dry run's answer on one node: a candidate, or the reasons preemption cannot help there."""

    candidate: Candidate | None
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class DryRun:
    """What every node's victim selection of one preemptor shares."""

    profile: CompiledProfile
    pod: PodInfoLike
    snapshot: Snapshot
    evaluator_for: EvaluatorFactory
    nominated: NominatedLookup
    budgets: Sequence[DisruptionBudget]  # the honored ones
    allowed: Sequence[int]  # their disruptions allowed, computed once
    nominated_for: NominatedFactory | None = None

    def potential_victims(self, node: NodeInfoLike) -> list[PodInfoLike]:
        """The pods on `node` the profile lets this pod evict."""
        eligible, cel = self.profile.preemption.eligible_victim, self.pod.cel
        return [p for p in _pods_of(node) if eligible(cel, p.cel)]

    def exact_failure(self, state: NodeInfoLike, calls: list[bool] | None = None) -> FilterFailure | None:
        """The verdict on the what-if node `state` by fresh evaluators over a snapshot holding it (the
        cluster functions see the change), nominated pods counted; `calls` gets True appended when an
        evaluation of the node called the cluster functions."""
        what_if = self.snapshot.replace(state)
        evaluator = self.evaluator_for(what_if)
        nominated_for = self.nominated_for
        built: list[PodEvaluator] = [evaluator]

        def track(e: PodEvaluator) -> PodEvaluator:
            if calls is not None:
                e.prepare("filter")
                e.track_cluster()
            return e

        track(evaluator)
        if nominated_for is None:
            failure = filter_with_nominated(evaluator, self.pod, state, self.nominated)
        else:

            def first(node: NodeInfoLike, others: Sequence[PodInfoLike]) -> PodEvaluator:
                made = track(nominated_for(what_if)(node, others))  # only where pods are nominated
                built.append(made)
                return made

            failure = filter_with_nominated(evaluator, self.pod, state, self.nominated, first)
        if calls is not None and any(e.cluster_called for e in built):
            calls.append(True)
        return failure

    def exact(self, node: NodeInfoLike) -> NodeOutcome:
        """The outcome on `node` by what-if snapshots (the path every node can take)."""
        return self.select_victims(node, self.exact_failure)

    def select_victims(self, node: NodeInfoLike, failure_on: FailureOn) -> NodeOutcome:
        """The minimal victims on `node` by the verdicts of `failure_on`, or the reasons there are none."""
        potential = self.potential_victims(node)
        if not potential:
            return NodeOutcome(None, (NO_VICTIMS,))
        state = node.clone_without(potential)
        failure = failure_on(state)
        if failure is not None:
            return NodeOutcome(None, failure.reasons)
        sort_by_importance(potential)  # the order victims are reprieved in decides which remain
        violating, fine = split_by_violation(potential, self.budgets, self.allowed)
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
            return NodeOutcome(None, (f"expected at least one victim pod on node {node.name}",))
        victims.sort(key=importance)
        return NodeOutcome(Candidate(node.name, tuple(victims), violations))


def _earliest_start_of_highest(victims: Sequence[PodInfoLike]) -> float:
    top = max(v.priority for v in victims)
    return min(start_time(v) for v in victims if v.priority == top)


def removal_order_may_matter(on_node: Sequence[str], victims: Sequence[PodInfoLike]) -> bool:
    """Whether the order `victims` leave the node in may change the order of the pods left on it
    (`on_node`: the keys of the node's pods in order; NodeInfo's swap-remove moves the last pod into a
    removed pod's place). It cannot for one victim, when at most one pod stays, or when the victims are
    the node's last pods."""
    keys = {v.key for v in victims}
    stay = len(on_node) - len(keys)
    return len(keys) > 1 and stay > 1 and not keys.issuperset(on_node[stay:])


def pick_candidate(candidates: Sequence[Candidate]) -> Candidate:
    """The best candidate by kube-scheduler's pickOneNodeForPreemption ordering."""

    best = candidates[0]
    best_rank = best.rank
    for c in candidates[1:]:
        r = c.rank
        if r < best_rank:
            best, best_rank = c, r
    return best


def num_candidates(potential: int) -> int:
    """How many candidate nodes the dry run looks for (DefaultPreemption's minCandidateNodesPercentage
    10 and minCandidateNodesAbsolute 100)."""
    wanted = potential * MIN_CANDIDATE_NODES_PERCENTAGE // 100
    return min(potential, max(wanted, MIN_CANDIDATE_NODES_ABSOLUTE))


# a row's outcome as `RowJudge.known` tells it
UNDECIDED, NO_CANDIDATE, CANDIDATE = -1, 0, 1
Int8Array = npt.NDArray[np.int8]
ObjectArray = npt.NDArray[np.object_]


class RowJudge(Protocol):
    """The outcomes of one dry run per snapshot row: those known beforehand told in bulk, the others
    decided one row at a time."""

    def known(self, rows: IntpArray) -> tuple[Int8Array, ObjectArray]:
        """Per row of `rows`: CANDIDATE or NO_CANDIDATE with its `NodeOutcome` when known without a dry
        run on the node, else UNDECIDED and None."""
        ...

    def decide(self, rows: Sequence[int]) -> list[NodeOutcome]:
        """The outcome on each row's node, the same as `DryRun.exact` on it."""
        ...


class NodeJudges(Protocol):
    """Gives a dry run its judge of rows (policyd.scheduler.preemption_reuse: outcomes shared between
    equivalent preemptors); without one every node takes `DryRun.exact`."""

    def judge(self, dry_run: DryRun) -> RowJudge:
        """The judge of `dry_run`'s rows."""
        ...


class ExactJudge:
    """Every row by `DryRun.exact` (nothing known beforehand)."""

    def __init__(self, dry_run: DryRun) -> None:
        self.dry_run = dry_run
        self.nodes = dry_run.snapshot.nodes()

    def known(self, rows: IntpArray) -> tuple[Int8Array, ObjectArray]:
        """Nothing is known."""
        return np.full(len(rows), UNDECIDED, dtype=np.int8), np.full(len(rows), None, dtype=object)

    def decide(self, rows: Sequence[int]) -> list[NodeOutcome]:
        """`DryRun.exact` on each row's node."""
        return [self.dry_run.exact(self.nodes[row]) for row in rows]


_UNRESOLVABLE = operator.attrgetter("unresolvable")
_REASONS = operator.attrgetter("reasons")


def _potential_rows(
    snapshot: Snapshot, failures: Mapping[str, FilterFailure], distinct: Iterable[FilterFailure] | None = None
) -> tuple[IntpArray, list[str]]:
    """The rows where preemption may help (no unresolvable failure), and the names of the others,
    both in row order; `distinct`: the distinct failure objects of `failures`, when known."""
    n = len(snapshot)
    if not any(map(_UNRESOLVABLE, failures.values() if distinct is None else distinct)):
        return np.arange(n, dtype=np.intp), []
    hopeless = sorted(
        row
        for row in (snapshot.row(name) for name, f in failures.items() if f.unresolvable)
        if row is not None
    )
    mask = np.ones(n, dtype=bool)
    mask[hopeless] = False
    names = snapshot.names()
    return np.flatnonzero(mask), [names[row] for row in hopeless]


def _scan(judge: RowJudge, order: IntpArray, wanted: int) -> tuple[int, Int8Array, ObjectArray]:
    """Judge the rows of `order` in turn until `wanted` candidates are found (all of them when fewer
    are): the number of rows judged, and their outcome codes and outcomes.

    Undecided rows count as candidates until decided: the scan is the shortest prefix holding
    `wanted` known-or-undecided candidates; its undecided rows are decided and the prefix recomputed
    until every row in it is known, which decides exactly the rows a one-by-one walk decides."""
    codes, outcomes = judge.known(order)
    end = len(order) - 1
    while True:
        counts = np.cumsum(codes != NO_CANDIDATE)
        end = min(int(np.searchsorted(counts, wanted)), len(order) - 1)
        undecided = np.flatnonzero(codes[: end + 1] == UNDECIDED)
        if undecided.size == 0:
            break
        decided = judge.decide(order[undecided].tolist())
        for pos, outcome in zip(undecided.tolist(), decided, strict=True):
            outcomes[pos] = outcome
            codes[pos] = NO_CANDIDATE if outcome.candidate is None else CANDIDATE
    return end + 1, codes[: end + 1], outcomes[: end + 1]


def find_preemption(
    profile: CompiledProfile,
    pod: PodInfoLike,
    snapshot: Snapshot,
    failures: Mapping[str, FilterFailure],
    evaluator_for: EvaluatorFactory,
    nominated: NominatedLookup,
    budgets: Sequence[DisruptionBudget],
    all_pods: Callable[[], Sequence[PodInfoLike]],
    rng: random.Random | None = None,
    nominated_for: NominatedFactory | None = None,
    judges: NodeJudges | None = None,
    distinct: Iterable[FilterFailure] | None = None,
    nominated_node: str = "",
) -> PreemptionOutcome:
    """Dry-run preemption on the nodes where it may help until enough candidates are found (all of
    them up to 100 nodes), and pick the best candidate; `all_pods` is asked only when a honored
    PodDisruptionBudget has no status. `distinct`: the distinct failure objects of `failures`, when
    the caller counted them (no step per node to see whether any is unresolvable). `nominated_node`:
    the node the scheduler nominated `pod` to, if any (`eligible_to_preempt`)."""
    not_eligible = eligible_to_preempt(profile, pod, snapshot, nominated_node)
    if not_eligible is not None:
        return PreemptionOutcome(None, "preemption: " + not_eligible if not_eligible else "")
    potential, hopeless = _potential_rows(snapshot, failures, distinct)
    statuses: dict[str, tuple[str, ...]] = dict.fromkeys(hopeless, (NOT_HELPFUL,))
    wanted = num_candidates(len(potential))
    # kube-scheduler starts the dry run at a random node and stops once it has enough candidates;
    # when every node is examined anyway the order is the snapshot's (reproducible candidate ties)
    offset = rng.randrange(len(potential)) if rng is not None and wanted < len(potential) else 0
    honored = budgets if profile.preemption.honor_pdb else ()
    allowed = disruptions_allowed(honored, all_pods)  # once per dry run
    dry_run = DryRun(profile, pod, snapshot, evaluator_for, nominated, honored, allowed, nominated_for)
    judge = ExactJudge(dry_run) if judges is None else judges.judge(dry_run)
    order = np.concatenate((potential[offset:], potential[:offset])) if offset else potential
    judged, codes, outcomes = _scan(judge, order, wanted)
    candidates: list[Candidate] = [o.candidate for o in outcomes[codes == CANDIDATE].tolist()]
    names, helpless = snapshot.names(), codes == NO_CANDIDATE

    def statuses_of() -> dict[str, tuple[str, ...]]:
        statuses.update(
            zip(
                map(names.__getitem__, order[:judged][helpless].tolist()),
                map(_REASONS, outcomes[helpless].tolist()),
                strict=True,
            )
        )
        return statuses

    if not candidates:
        found = statuses_of()
        return PreemptionOutcome(None, preemption_message(len(snapshot), found), lambda: found)
    return PreemptionOutcome(pick_candidate(candidates), "", statuses_of, candidates)
