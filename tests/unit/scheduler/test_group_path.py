"""The evaluators and the reuse cache decide what the generated per-node functions alone decide.

Every test runs the real `Scheduler` (explain mode) on the simulated cluster three times with the
same seed: with the reuse cache and the vectorised plans, with the plans only, and with neither
(every node evaluated per pod by the generated functions). It compares final nodes, events in order,
victims, nominations, and every attempt: its failures, every rule's verdict on every evaluated node,
and every feasible node's raw, normalised and weighted scores, and the placements seen between the
cluster changes. Cases: tests/unit/scheduler/group_path_cases.py.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

from policyd.evaluation.generated import GeneratedEvaluator
from policyd.scheduler.algorithm import schedule as framework
from tests.builders import make_node, make_pod, pod_affinity, pod_affinity_term, spread_constraint
from tests.unit.scheduler.group_path_cases import (
    EXTRA_POLICY,
    HUGE_SCORE_POLICY,
    RACK_CAP_POLICY,
    Case,
    Outcome,
    Step,
    cases,
    large_cases,
    run,
)

# derandomized and without an example database: CI sees the same examples on every run
PROPERTY = settings(
    max_examples=45,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ZONE = "topology.kubernetes.io/zone"


def both(case: Case) -> tuple[Outcome, Outcome]:
    """The case with the reuse cache and plans, with plans only and per node only, checked equal."""
    grouped = run(case, reuse=True)
    plans = run(case, reuse=False)
    per_node = run(case, reuse=False, vectorise=False)
    assert grouped.scheduler.algorithm.groups is not None
    assert per_node.scheduler.algorithm.groups is None and per_node.scheduler.algorithm.bulk_rows == 0
    assert grouped.comparable() == per_node.comparable()
    assert plans.comparable() == per_node.comparable()
    return grouped, per_node


@PROPERTY
@given(cases())
def test_small_clusters_place_pods_alike(case: Case) -> None:
    both(case)


@settings(PROPERTY, max_examples=5)
@given(large_cases())
def test_round_robin_window_smaller_than_the_cluster(case: Case) -> None:
    both(case)


@settings(PROPERTY, max_examples=25)
@given(cases())
def test_vectorised_plans_for_every_window_place_pods_alike(case: Case) -> None:
    """With the bulk threshold at one row, every window goes through the vectorised plans first."""
    saved = framework.BULK_MIN
    framework.BULK_MIN = 1
    try:
        both(case)
    finally:
        framework.BULK_MIN = saved


@settings(PROPERTY, max_examples=25)
@given(cases())
def test_failures_found_when_read_are_the_per_node_ones(case: Case) -> None:
    """Outside explain mode a placed pod's failures on rows the plans failed are found when first
    read (here after the whole run): they are the ones the per-node functions gave in the cycle."""
    saved = framework.BULK_MIN
    framework.BULK_MIN = 1
    try:
        lazy = run(case, reuse=True, explain=False)
    finally:
        framework.BULK_MIN = saved
    per_node = run(case, reuse=False, vectorise=False)
    assert lazy.placements == per_node.placements
    assert [(a[0], a[1], a[2], a[3], a[6], a[7]) for a in lazy.attempts] == [
        (a[0], a[1], a[2], a[3], a[6], a[7]) for a in per_node.attempts
    ]


def test_vectorised_plans_serve_the_default_policy() -> None:
    """Windows of many unknown rows go through the plans (default.policy lowers every rule)."""
    nodes = [make_node(f"n{i}", cpu=str(2 + i % 3), memory=f"{4 + i % 4 * 4}Gi") for i in range(120)]
    pods = [make_pod(f"api-{i}", cpu="500m", memory="1Gi", labels={"role": "api"}) for i in range(60)]
    grouped, _ = both(Case(nodes=nodes, pending=pods, extra=()))
    runner = grouped.scheduler.algorithm
    assert all(grouped.placements.values())
    assert runner.bulk_rows >= 100  # at least the first window's rows
    assert runner.columns.columns is not None and len(runner.columns.columns) == 120


def test_identical_pods_reuse_node_results() -> None:
    nodes = [make_node(f"n{i}", cpu=str(4 + i % 3 * 2), memory=f"{8 + i % 4 * 4}Gi") for i in range(150)]
    pods = [make_pod(f"web-{i}", cpu="250m", memory="256Mi", labels={"role": "web"}) for i in range(200)]
    grouped, per_node = both(Case(nodes=nodes, pending=pods, extra=()))
    assert all(grouped.placements.values())
    groups = grouped.scheduler.algorithm.groups
    assert groups is not None
    # 150 nodes: kube-scheduler's formula looks for 100 feasible nodes per pod; the first pod
    # evaluates them, every later one only the rows that changed since (the previous pod's node)
    assert groups.evaluations < 2 * 200 + 150
    assert groups.hits >= 100 * 200


def test_large_cluster_with_changes_and_deletions() -> None:
    nodes = []
    for i in range(340):
        labels = {ZONE: "abc"[i % 3], "rack": f"r{i % 8}"}
        nodes.append(make_node(f"n{i}", cpu="2" if i % 5 else "8", memory="4Gi", pods=6, labels=labels))
    web = [make_pod(f"web-{i}", cpu="500m", memory="512Mi", labels={"role": "web"}) for i in range(300)]
    api = [
        make_pod(
            f"api-{i}",
            cpu="1",
            memory="1Gi",
            labels={"app": "api"},
            node_selector={ZONE: "b"},
            priority=10,
            owner="ReplicaSet/api",
        )
        for i in range(40)
    ]
    steps = [
        Step(30, ("label", 7, ZONE, "b")),
        Step(20, ("taint", 11, {"key": "spot", "value": "true", "effect": "NoSchedule"})),
        Step(25, ("delete-node", 40)),
        Step(30, ("delete-pod", "default/web-5")),
        Step(10, ("add-node", make_node("late", cpu="16", memory="64Gi", pods=50, labels={ZONE: "b"}))),
        Step(40, ("unschedulable", 100, True)),
    ]
    # 340 nodes at 10%: 100 feasible nodes wanted per pod, so the window stops short of the cluster;
    # the api pods pass on one zone of three, so their windows reach past the rows first looked at
    grouped, _ = both(Case(nodes=nodes, pending=api + web, steps=steps, percentage=10))
    assert sum(1 for node in grouped.placements.values() if node) > 300


def test_a_node_relabelled_between_two_pods_of_a_group_is_evaluated_again() -> None:
    nodes = [
        make_node("n0", cpu="8", pods=1, labels={ZONE: "a"}),
        make_node("n1", cpu="4", pods=1, labels={ZONE: "b"}),
        make_node("n2", cpu="4", pods=1, labels={ZONE: "a"}),
    ] + [make_node(f"c{i}", labels={ZONE: "c"}) for i in range(3)]
    pods = [make_pod(f"g-{i}", cpu="1", node_selector={ZONE: "a"}) for i in range(3)]
    steps = [Step(1, ("label", 1, ZONE, "a")), Step(0, ("label", 2, ZONE, "b"))]
    grouped, _ = both(Case(nodes=nodes, pending=pods, steps=steps, extra=()))
    # g-0 takes the roomiest zone-a node; then n1 joins zone a and n2 leaves it
    assert grouped.trace[0]["default/g-0"] == "n0"
    assert grouped.placements == {"default/g-0": "n0", "default/g-1": "n1", "default/g-2": None}
    attempts = grouped.scheduler.attempts
    first, second = attempts.for_pod("default/g-0")[0], attempts.for_pod("default/g-1")[0]
    affinity = ("node(s) didn't match Pod's node affinity/selector",)
    assert first.failures["n1"].reasons == affinity and "n2" not in first.failures
    assert second.failures["n2"].reasons == affinity and "n1" not in second.failures
    assert grouped.events[-1][3].startswith(
        "0/6 nodes are available: 2 Too many pods, 4 node(s) didn't match Pod's node affinity/selector."
    )
    groups = grouped.scheduler.algorithm.groups
    assert groups is not None
    # g-0 evaluated all 6 nodes; g-1 only n0 (took g-0), n1 and n2 (relabelled); g-2 only n1
    assert groups.evaluations < 6 * 3


def test_a_pod_only_cluster_let_that_moves_drops_the_group_verdicts() -> None:
    # RackCap reads `rackCounts` (a pod-only let over a cluster function): once two web pods
    # run in rack r0, the r0 node that took neither must fail although that node did not change
    nodes = [make_node(f"r0{x}", cpu="8", labels={"rack": "r0"}) for x in "abc"]
    nodes.append(make_node("r1a", cpu="4", labels={"rack": "r1"}))
    pods = [make_pod(f"web-{i}", cpu="1", labels={"app": "web"}) for i in range(3)]
    grouped, _ = both(Case(nodes=nodes, pending=pods, extra=(RACK_CAP_POLICY,)))
    first_two = {grouped.placements["default/web-0"], grouped.placements["default/web-1"]}
    assert len(first_two) == 2 and first_two < {"r0a", "r0b", "r0c"}
    assert grouped.placements["default/web-2"] == "r1a"
    (left,) = {"r0a", "r0b", "r0c"} - first_two
    (third,) = grouped.scheduler.attempts.for_pod("default/web-2")
    assert third.failures[left].reasons == ("rack r0 already runs 2 pods of web",)


def test_a_nominated_pod_counts_for_lower_priority_pods_of_a_group() -> None:
    nodes = [make_node("big", cpu="2", memory="8Gi"), make_node("s0", cpu="1"), make_node("s1", cpu="1")]
    victim = make_pod("victim", cpu="2", priority=0, node_name="big")
    preemptor = make_pod("high", cpu="2", priority=100)
    group = [make_pod(f"g-{i}", cpu="1", priority=5) for i in range(4)]
    grouped, _ = both(Case(nodes=nodes, assigned=[victim], pending=[preemptor, *group], extra=()))
    assert grouped.victims == ["default/victim"]
    assert grouped.placements["default/high"] == "big"
    placed = {grouped.placements[f"default/g-{i}"] for i in range(4)}
    assert placed == {"s0", "s1", None}
    # while `high` waited for its retry, `big` was free but held for it
    attempts = grouped.scheduler.attempts
    for i in range(4):
        first = attempts.for_pod(f"default/g-{i}")[0]
        assert first.nominated_node is None
        if first.chosen is None:
            assert first.failures["big"].reasons == ("Insufficient cpu",)
        else:
            assert first.chosen != "big"
    (nominated,) = [a for a in attempts.for_pod("default/high") if a.result == "nominated"]
    assert nominated.nominated_node == "big"


def test_a_nominated_pod_counts_in_the_spread_of_the_pods_its_labels_match() -> None:
    host = "kubernetes.io/hostname"
    nodes = [make_node(n, cpu=c, labels={host: n}) for n, c in (("big", "3"), ("s0", "1"), ("s1", "1"))]
    victim = make_pod("victim", cpu="3", priority=0, node_name="big")
    preemptor = make_pod("high", cpu="2", priority=100, labels={"app": "web"})
    pending = [preemptor]
    for name, app in (("g-a", "web"), ("g-b", "db")):
        spread = spread_constraint({"app": app}, host, 1)
        pending.append(make_pod(name, cpu="1", priority=5, labels={"app": app}, spread=[spread]))
    grouped, _ = both(Case(nodes=nodes, assigned=[victim], pending=pending, extra=()))
    assert grouped.victims == ["default/victim"]
    # with `high` counted on big, web's skew there would be 2: g-a goes to a small node; g-b, whose
    # selector `high` does not match, takes the room left on big
    assert grouped.placements["default/g-a"] in ("s0", "s1")
    assert grouped.placements["default/g-b"] == "big"
    assert grouped.placements["default/high"] == "big"
    (first,) = grouped.scheduler.attempts.for_pod("default/g-a")
    assert first.failures["big"].reasons == ("node(s) didn't match pod topology spread constraints",)
    # explained by the pass that failed: the one with `high` counted
    failed = [r.rule.name for r in first.filter_results["big"] if not r.passed]
    assert failed == ["PodTopologySpread"]


def test_raw_scores_beyond_int64_give_the_per_node_placement() -> None:
    huge = HUGE_SCORE_POLICY
    nodes = [make_node(f"n{i}", cpu="8", memory=f"{8 + i % 7}Gi", pods=20) for i in range(30)]
    pods = [make_pod(f"g-{i}", cpu="500m", memory="1Gi") for i in range(40)]
    grouped, _ = both(Case(nodes=nodes, pending=pods, extra=(huge,)))
    # free memory in bytes times 10^8 outweighs every other score: the first pod goes to the first
    # node with 14Gi (n6; the ties n13, n20, n27 differ from it only by random draw)
    assert grouped.placements["default/g-0"] in {"n6", "n13", "n20", "n27"}
    assert all(grouped.placements.values())
    mixed = Case(nodes=nodes, pending=pods[:10], extra=(huge, EXTRA_POLICY), seed=3)
    both(mixed)


def narrowing(monkeypatch: Any) -> list[int]:
    """The number of rows each narrowed renewal named (`rows_to_renew` answers other than None)."""
    narrowed: list[int] = []
    renew = GeneratedEvaluator.rows_to_renew

    def spy(self: GeneratedEvaluator, columns: Any, rule: int, old: Any, new: Any) -> Any:
        rows = renew(self, columns, rule, old, new)
        if rows is not None:
            narrowed.append(len(rows))
        return rows

    monkeypatch.setattr(GeneratedEvaluator, "rows_to_renew", spy)
    return narrowed


def test_hostname_anti_affinity_judges_again_only_the_node_a_pod_went_to(monkeypatch: Any) -> None:
    # every db pod keeps the others off its node: after each bind the anti-affinity states gain the
    # bound node's hostname, and only the nodes labelled with it are judged again
    anti = pod_affinity(anti_required=[pod_affinity_term({"app": "db"})])
    nodes = [make_node(f"n{i}", cpu="8", pods=20, labels={ZONE: "abc"[i % 3]}) for i in range(150)]
    assigned = [
        make_pod(f"old-{i}", labels={"app": "db"}, affinity=anti, node_name=f"n{i}") for i in range(9)
    ]
    pending = [make_pod(f"db-{i}", cpu="100m", labels={"app": "db"}, affinity=anti) for i in range(40)]
    case = Case(nodes=nodes, assigned=assigned, pending=pending, extra=())
    narrowed = narrowing(monkeypatch)
    grouped, _ = both(case)
    placed = [grouped.placements[f"default/db-{i}"] for i in range(40)]
    assert None not in placed and len(set(placed)) == 40
    assert not set(placed) & {f"n{i}" for i in range(9)}
    # the three inter-pod affinity filters, once per bind after the first pod: one node each
    assert len(narrowed) >= 3 * 39 and set(narrowed) == {1}
    groups = grouped.scheduler.algorithm.groups
    assert groups is not None
    judged = groups.judged
    monkeypatch.setattr(GeneratedEvaluator, "rows_to_renew", lambda *args: None)
    unnarrowed = run(case, reuse=True)
    assert unnarrowed.comparable() == grouped.comparable()
    assert unnarrowed.scheduler.algorithm.groups is not None
    assert judged * 10 < unnarrowed.scheduler.algorithm.groups.judged


def test_zone_anti_affinity_judges_again_the_nodes_of_the_zone_a_pod_went_to(monkeypatch: Any) -> None:
    # the moved key is a zone: every node of that zone fails the next pods, none of them changed
    anti = pod_affinity(anti_required=[pod_affinity_term({"app": "db"}, ZONE)])
    nodes = [make_node(f"n{i}", cpu="8", labels={ZONE: "abcd"[i % 4]}) for i in range(80)]
    pending = [make_pod(f"db-{i}", cpu="100m", labels={"app": "db"}, affinity=anti) for i in range(6)]
    narrowed = narrowing(monkeypatch)
    grouped, _ = both(Case(nodes=nodes, pending=pending, extra=()))
    zones = [grouped.placements[f"default/db-{i}"] for i in range(6)]
    assert sorted(int(z[1:]) % 4 for z in zones if z) == [0, 1, 2, 3] and zones.count(None) == 2
    assert 20 in narrowed  # a zone's nodes
