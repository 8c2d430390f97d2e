"""Preemption: candidates, minimal victims, PDBs, candidate ordering, eligibility."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policyd.framework import FilterFailure
from policyd.scheduler.attempts import NO_VICTIMS
from policyd.scheduler.pdb import budget_from_object, disruptions_allowed, split_by_violation
from policyd.scheduler.preemption import (
    CANDIDATE,
    NO_CANDIDATE,
    Candidate,
    DryRun,
    ExactJudge,
    find_preemption,
    num_candidates,
    pick_candidate,
    removal_order_may_matter,
    sort_by_importance,
)
from policyd.scheduler.snapshot import Snapshot
from tests.unit.scheduler.fakes import FIT, FakeEvaluator, FakeNode, FakePod, FakeProfile, node_obj

PROFILE = FakeProfile()


def snapshot_of(nodes: dict[str, tuple[int, list[FakePod]]]) -> Snapshot:
    snap = Snapshot()
    states = {}
    for name, (cpu, pods) in nodes.items():
        state = FakeNode(node_obj(name, cpu))
        for p in pods:
            state.add_pod(p.on(name))
        states[name] = (1, state)
    snap.store(list(nodes), states)  # type: ignore[arg-type]
    return snap


def preempt(
    pod: FakePod,
    snap: Snapshot,
    budgets: list[Any] | None = None,
    rng: random.Random | None = None,
    judges: Any = None,
) -> Any:
    failures = {n.name: FilterFailure(FIT, ("Insufficient cpu",)) for n in snap.nodes()}
    all_pods = [p for n in snap.nodes() for p in n.pods.values()]  # type: ignore[attr-defined]
    return find_preemption(
        PROFILE,
        pod,
        snap,
        failures,
        lambda s: FakeEvaluator(PROFILE, pod.cel),
        lambda n: [],
        budgets or [],
        lambda: all_pods,
        rng=rng,
        judges=judges,
    )


def test_minimal_victims_reprieve_the_most_important_first() -> None:
    pods = [
        FakePod("v1", cpu=300, priority=1),
        FakePod("v5", cpu=300, priority=5),
        FakePod("v3", cpu=300, priority=3),
    ]
    snap = snapshot_of({"a": (1000, pods)})
    outcome = preempt(FakePod("p", cpu=500, priority=10), snap)
    assert outcome.candidate is not None
    assert [v.name for v in outcome.candidate.victims] == ["v3", "v1"]  # v5 reprieved; p needs 500 of 1000


def test_pods_without_a_start_time_are_reprieved_in_kube_schedulers_order() -> None:
    # kube-scheduler 1.20.2 on the same node (tests/differential/regressions/s23-55.yaml): without
    # kubelets no pod has a start time, MoreImportantPod holds both ways between two pods of one
    # priority, and Go's insertion sort leaves them in reverse, so the last pods placed are reprieved
    # first and the big early one is the victim (a stable sort would reprieve it and evict the two small)
    pods = [
        FakePod("e1", cpu=100),
        FakePod("e2", cpu=1500),
        FakePod("high", cpu=3350, priority=100),
        FakePod("p4", cpu=100),
        FakePod("p5", cpu=200),
    ]
    snap = snapshot_of({"a": (8000, pods)})
    outcome = preempt(FakePod("p", cpu=3000, priority=10), snap)
    assert outcome.candidate is not None
    assert [v.name for v in outcome.candidate.victims] == ["e2"]


def test_importance_order_follows_go_sort_slice() -> None:
    def order(pods: list[FakePod]) -> list[str]:
        sort_by_importance(pods)  # type: ignore[arg-type]
        return [p.name for p in pods]

    assert order([FakePod(n) for n in "abcd"]) == list("dcba")  # no start times: reversed
    assert order([FakePod("a"), FakePod("b", priority=10), FakePod("c")]) == ["b", "c", "a"]
    started = [FakePod("a", start_time=100.0), FakePod("b"), FakePod("c", start_time=50.0)]
    assert order(started) == ["c", "a", "b"]  # started pods by start time, before those not started
    assert order([FakePod("a", start_time=7.0), FakePod("b", start_time=7.0)]) == ["a", "b"]
    many = [FakePod(f"p{i:02d}") for i in range(13)]  # beyond Go's insertion sort: pdqsort's order
    assert order(many) == [f"p{i:02d}" for i in (11, 10, 9, 8, 7, 0, 5, 4, 3, 2, 1, 12, 6)]


def test_no_candidate_messages() -> None:
    snap = snapshot_of(
        {"a": (1000, [FakePod("same", cpu=900, priority=10)]), "b": (500, [FakePod("low", cpu=100)])}
    )
    outcome = preempt(FakePod("p", cpu=800, priority=10), snap)
    assert outcome.candidate is None
    assert outcome.statuses == {"a": (NO_VICTIMS,), "b": ("Insufficient cpu",)}
    assert outcome.message == (
        "preemption: 0/2 nodes are available: 1 Insufficient cpu, 1 No preemption victims found for incoming pod."
    )


def test_candidate_ordering_prefers_lower_victim_priority_then_fewer_victims() -> None:
    snap = snapshot_of(
        {
            "a": (1000, [FakePod("a-high", cpu=900, priority=8)]),
            "b": (1000, [FakePod("b-low1", cpu=450, priority=2), FakePod("b-low2", cpu=450, priority=2)]),
            "c": (1000, [FakePod("c-low", cpu=900, priority=2)]),
        }
    )
    outcome = preempt(FakePod("p", cpu=800, priority=10), snap)
    assert outcome.candidate is not None and outcome.candidate.node == "c"


def test_latest_start_time_breaks_remaining_ties() -> None:
    old = FakePod("old", cpu=900, priority=2, start_time=100.0)
    new = FakePod("new", cpu=900, priority=2, start_time=200.0)
    cands = [Candidate("a", (old,), 0), Candidate("b", (new,), 0)]
    assert pick_candidate(cands).node == "b"


def test_pdb_violations_counted_and_avoided() -> None:
    guarded = [FakePod(f"db{i}", cpu=900, priority=1, labels={"app": "db"}) for i in range(2)]
    snap = snapshot_of(
        {"a": (1000, [guarded[0]]), "b": (1000, [guarded[1]]), "c": (1000, [FakePod("x", cpu=950)])}
    )
    pdb = budget_from_object(
        {
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}},
        }
    )
    outcome = preempt(FakePod("p", cpu=800, priority=10), snap, [pdb])
    assert outcome.candidate is not None and outcome.candidate.node == "c"
    assert outcome.candidate.pdb_violations == 0


def test_pdb_split_uses_status_when_present() -> None:
    pods = [FakePod(f"w{i}", labels={"app": "w"}, node_name="n") for i in range(3)]
    pdb = budget_from_object(
        {
            "metadata": {"name": "w", "namespace": "default"},
            "spec": {
                "maxUnavailable": "34%",
                "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["w"]}]},
            },
            "status": {"disruptionsAllowed": 1},
        }
    )
    violating, fine = split_by_violation(pods, [pdb], disruptions_allowed([pdb], lambda: pods))
    assert [p.name for p in fine] == ["w0"] and [p.name for p in violating] == ["w1", "w2"]
    computed = budget_from_object(
        {
            "metadata": {"name": "w", "namespace": "default"},
            "spec": {"maxUnavailable": "34%", "selector": {"matchLabels": {"app": "w"}}},
        }
    )
    assert computed.allowed(pods) == 2  # ceil(34% of 3) = 2


def test_preemption_policy_never_is_not_eligible() -> None:
    snap = snapshot_of({"a": (1000, [FakePod("low", cpu=900)])})
    outcome = preempt(FakePod("p", cpu=800, priority=10, preemption_policy="Never"), snap)
    assert outcome.candidate is None
    assert outcome.message == "preemption: not eligible due to preemptionPolicy=Never."


def test_number_of_candidates_follows_default_preemption_arguments() -> None:
    assert num_candidates(0) == 0
    assert num_candidates(40) == 40  # small clusters: every node
    assert num_candidates(100) == 100
    assert num_candidates(999) == 100  # max(10 %, 100)
    assert num_candidates(5000) == 500


def test_dry_run_stops_once_enough_candidates_are_found() -> None:
    nodes = {f"n{i:03d}": (1000, [FakePod(f"v{i}", cpu=900, priority=1)]) for i in range(250)}
    outcome = preempt(FakePod("p", cpu=500, priority=10), snapshot_of(nodes), rng=random.Random(3))
    assert len(outcome.candidates) == 100  # of 250 nodes where preemption would help
    names = [c.node for c in outcome.candidates]
    start = int(names[0][1:])
    assert names == [f"n{(start + i) % 250:03d}" for i in range(100)]  # consecutive from a random offset
    assert outcome.candidate is not None and outcome.candidate.node == names[0]  # equal ranks: first found


def test_the_dry_run_counts_nominated_pods_through_the_nominated_evaluators() -> None:
    """A node's first filter pass with pods nominated to it runs the evaluator `nominated_for` builds
    over the what-if snapshot (their spread and affinity counts), and only where pods are nominated."""
    snap = snapshot_of(
        {"a": (1000, [FakePod("va", cpu=500, priority=1)]), "b": (1000, [FakePod("vb", cpu=500, priority=1)])}
    )
    preemptor = FakePod("p", cpu=600, priority=10)
    nominated = FakePod("n", cpu=100, priority=20)
    failures = {n.name: FilterFailure(FIT, ("Insufficient cpu",)) for n in snap.nodes()}
    all_pods = [p for n in snap.nodes() for p in n.pods.values()]  # type: ignore[attr-defined]
    built: list[Snapshot] = []

    def nominated_for(what_if: Snapshot) -> Any:
        built.append(what_if)
        return lambda node, others: FakeEvaluator(FakeProfile(zone="nowhere"), preemptor.cel)

    def run(with_nominated: Any) -> Any:
        return find_preemption(
            PROFILE,
            preemptor,
            snap,
            failures,
            lambda s: FakeEvaluator(PROFILE, preemptor.cel),
            lambda name: [nominated] if name == "a" else [],
            [],
            lambda: all_pods,
            nominated_for=with_nominated,
        )

    plain = run(None)  # the nominated pod fits beside the preemptor on a: both nodes are candidates
    assert plain.candidate is not None and "a" not in plain.statuses
    counted = run(nominated_for)  # its counts reject a: only b is left
    assert counted.candidate is not None and counted.candidate.node == "b"
    assert counted.statuses["a"] == ("node(s) didn't match zone",)
    assert built and all(isinstance(s, Snapshot) for s in built)


class _Knowing:
    """`NodeJudges` telling the exact outcome of some rows beforehand (drawn at random) and deciding
    the others by `DryRun.exact`, noting which."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.decided: list[int] = []

    def judge(self, dry_run: DryRun) -> Any:
        exact = ExactJudge(dry_run)
        knowing = self

        class Judge:
            def known(self, rows: Any) -> Any:
                codes, outcomes = exact.known(rows)
                for i, row in enumerate(rows.tolist()):
                    if knowing.rng.random() < 0.5:
                        outcomes[i] = exact.decide([row])[0]
                        codes[i] = NO_CANDIDATE if outcomes[i].candidate is None else CANDIDATE
                return codes, outcomes

            def decide(self, rows: list[int]) -> Any:
                knowing.decided.extend(rows)
                return exact.decide(rows)

        return Judge()


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 9)), min_size=1, max_size=260),
    st.integers(0, 1000),
)
@settings(max_examples=60, deadline=None, derandomize=True, database=None)
def test_outcomes_known_beforehand_stop_the_dry_run_where_the_walk_stops(
    shapes: list[tuple[int, int]], seed: int
) -> None:
    """Some rows' outcomes told in bulk: the same candidates, statuses and message as deciding every
    row in turn, and only rows the one-by-one walk reaches are decided."""
    nodes = {
        f"n{i:03d}": (1000, [FakePod(f"v{i}-{k}", cpu=cpu * 100, priority=k) for k in range(count)])
        for i, (count, cpu) in enumerate(shapes)
    }
    snap = snapshot_of(nodes)
    pod = FakePod("p", cpu=600, priority=2)
    walk = preempt(pod, snap, rng=random.Random(seed))
    knowing = _Knowing(seed)
    got = preempt(pod, snap, rng=random.Random(seed), judges=knowing)
    assert (got.candidate, got.message, got.statuses, got.candidates) == (
        walk.candidate,
        walk.message,
        walk.statuses,
        walk.candidates,
    )
    reached = set(walk.statuses) | {c.node for c in walk.candidates}
    names = snap.names()
    assert {names[row] for row in knowing.decided} <= reached


def test_removal_order_may_matter_unless_one_pod_stays_or_the_victims_are_last() -> None:
    def victims(*names: str) -> list[FakePod]:
        return [FakePod(n) for n in names]

    keys = [FakePod(n).key for n in "abcd"]
    # a, b out of a b c d: a then b leaves (d, c), b then a leaves (c, d)
    assert removal_order_may_matter(keys, victims("a", "b"))
    assert not removal_order_may_matter(keys, victims("c", "d"))  # the last pods: a, b stay as they are
    assert not removal_order_may_matter(keys, victims("d", "c"))
    assert not removal_order_may_matter(keys, victims("a", "b", "c"))  # one pod stays
    assert not removal_order_may_matter(keys, victims("a", "b", "c", "d"))
    assert not removal_order_may_matter(keys, victims("b"))  # one victim: one order


def test_a_terminating_lower_pod_on_the_nominated_node_makes_the_preemptor_wait() -> None:
    def snap() -> Snapshot:
        pods = [FakePod("going", cpu=900, priority=1, deleting=True), FakePod("stays", cpu=900, priority=1)]
        return snapshot_of({"a": (2000, pods)})

    waiting = "preemption: not eligible due to a terminating pod on the nominated node."
    by_status = preempt(FakePod("p", cpu=1500, priority=10, nominated_node_name="a"), snap())
    assert by_status.candidate is None and by_status.message == waiting
    pod = FakePod("p", cpu=1500, priority=10)
    failures = {"a": FilterFailure(FIT, ("Insufficient cpu",))}
    by_scheduler = find_preemption(
        PROFILE, pod, snap(), failures, lambda s: FakeEvaluator(PROFILE, pod.cel), lambda n: [], [],
        lambda: [], nominated_node="a",
    )  # fmt: skip
    assert by_scheduler.candidate is None and by_scheduler.message == waiting
    assert preempt(pod, snap()).candidate is not None  # not nominated: it may preempt
