"""Raw scores are reused per rule: a rule whose pod-only values changed is scored again, the others
keep their raw scores on unchanged nodes, and every score equals a fresh per-node evaluation."""

from __future__ import annotations

from policyd.scheduler.algorithm.reuse import NodeResults
from tests.builders import make_node, make_pod, spread_constraint
from tests.unit.scheduler.group_path_cases import Case, policies
from tests.unit.scheduler.test_group_path import both

ZONE = "topology.kubernetes.io/zone"


def test_a_rule_whose_values_changed_forgets_only_its_own_raw_scores() -> None:
    g = NodeResults(profile=None, n=5, layout=0, rules=3)  # type: ignore[arg-type]
    g.use_score_values(((1,), (), ("a",)))
    g.raw_ok[:] = True
    g.use_score_values(((1,), (), ("b",)))  # only the third rule's pod-only value changed
    assert g.raw_ok[:, :2].all() and not g.raw_ok[:, 2].any()
    g.raw_ok[:] = True
    g.use_score_values(((True,), (), ("b",)))  # 1 and True are different CEL values
    assert not g.raw_ok[:, 0].any() and g.raw_ok[:, 1:].all()
    g.forget_filters()  # new filter values keep the raw scores
    assert g.raw_ok[:, 1:].all()


def test_pods_whose_spread_range_moved_keep_the_other_rules_raw_scores() -> None:
    """Identical pods with a soft spread constraint: after each bind `spreadRange` (read by
    PodTopologySpreadScore only) changes, the resource, taint and affinity scores are kept."""
    nodes = [
        make_node(f"n{i}", cpu=str(4 + i % 3 * 2), memory=f"{8 + i % 4 * 4}Gi", labels={ZONE: f"z{i % 4}"})
        for i in range(120)
    ]
    spread = [spread_constraint({"app": "web"}, ZONE, 1, "ScheduleAnyway")]
    pods = [
        make_pod(f"web-{i}", cpu="250m", memory="256Mi", labels={"app": "web"}, spread=spread)
        for i in range(40)
    ]
    case = Case(nodes=nodes, pending=pods, extra=())
    grouped, _ = both(case)  # every raw, normalised and weighted score equals the per-node one
    assert all(grouped.placements.values())
    groups = grouped.scheduler.algorithm.groups
    assert groups is not None
    rules = len(next(iter(policies().profiles.values())).scores)
    feasible = 100 * len(pods)  # kube-scheduler's formula: 100 feasible nodes of 120 per pod
    # without per-rule reuse every feasible row is scored for every rule (40 * 100 * 7); with it the
    # four rules that call no cluster function and read no moving value are scored about once per row
    assert rules == 7
    assert groups.scored < feasible * (rules - 3) + rules * 120
