"""Raw scores are reused per rule: a rule whose pod-only values changed is scored again, the others
keep their raw scores on unchanged nodes, and every score equals a fresh per-node evaluation."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from policyd.cel.values import Duration, UInt
from policyd.evaluation.sameness import same_values, values_text
from policyd.framework import RULE_FAIL, RULE_PASS, RULE_UNKNOWN
from policyd.scheduler.algorithm.reuse import DEFERRED, PASS, UNKNOWN, NodeResults
from tests.builders import make_node, make_pod, spread_constraint
from tests.unit.scheduler.group_path_cases import Case, policies
from tests.unit.scheduler.test_group_path import both

ZONE = "topology.kubernetes.io/zone"


def _web_pods(when: str) -> Case:
    """40 identical pods spreading over the zones of 120 nodes (`when`: the constraint's kind)."""
    nodes = [
        make_node(f"n{i}", cpu=str(4 + i % 3 * 2), memory=f"{8 + i % 4 * 4}Gi", labels={ZONE: f"z{i % 4}"})
        for i in range(120)
    ]
    spread = [spread_constraint({"app": "web"}, ZONE, 1, when)]
    pods = [
        make_pod(f"web-{i}", cpu="250m", memory="256Mi", labels={"app": "web"}, spread=spread)
        for i in range(40)
    ]
    return Case(nodes=nodes, pending=pods, extra=())


def _forget_label_guesses() -> None:
    """What earlier tests' pods taught the default policies' label rules (the keys they read, and
    evaluations left to the plans after too many classes) is forgotten."""
    for profile in policies().profiles.values():
        for code in profile.codes:
            for rule in code.vector_plan().filters:
                if rule is not None:
                    rule.label_guess.keys, rule.label_guess.skip, rule.label_guess.every = (), 0, None


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


def test_a_filter_rule_whose_values_changed_forgets_only_its_verdicts() -> None:
    g = NodeResults(profile=None, n=4, layout=0, rules=0, filters=3)  # type: ignore[arg-type]
    g.use_filter_values(((1,), (), ("a",)))
    g.verdicts[:] = RULE_PASS
    g.status[:] = PASS
    g.verdicts[0, 0], g.status[0] = RULE_FAIL, DEFERRED  # fails at rule 0
    g.verdicts[1, 2], g.status[1] = RULE_FAIL, DEFERRED  # fails at rule 2
    g.use_filter_values(((1,), (), ("a",)))  # nothing changed
    assert g.status.tolist() == [DEFERRED, DEFERRED, PASS, PASS]
    g.use_filter_values(((1,), ("x",), ("a",)))  # only the second rule's pod-only value changed
    assert (g.verdicts[:, 1] == RULE_UNKNOWN).all()
    assert g.verdicts[:, 0].tolist() == [RULE_FAIL, RULE_PASS, RULE_PASS, RULE_PASS]
    assert g.verdicts[:, 2].tolist() == [RULE_PASS, RULE_FAIL, RULE_PASS, RULE_PASS]
    # a row failing before the changed rule keeps its failure; the others are decided again
    assert g.status.tolist() == [DEFERRED, UNKNOWN, UNKNOWN, UNKNOWN]
    g.use_filter_values(((True,), ("x",), ("a",)))  # 1 and True are different CEL values
    assert g.status.tolist() == [UNKNOWN] * 4 and (g.verdicts[:, 0] == RULE_UNKNOWN).all()


def test_pods_whose_spread_counts_moved_judge_only_the_spread_rule_again() -> None:
    """Identical pods with a hard spread constraint: after each bind the spread counts (read by
    PodTopologySpread only) change; the other filter rules' verdicts are kept on unchanged rows."""
    case = _web_pods("DoNotSchedule")
    _forget_label_guesses()
    grouped, _ = both(case)  # every verdict, failure and score equals the per-node one
    assert all(grouped.placements.values())
    groups = grouped.scheduler.algorithm.groups
    assert groups is not None
    rules = len(next(iter(policies().profiles.values())).filters)
    # every rule on every row at most once; the spread rule is then renewed per zone on every row
    # (`filter_by_classes`), never asked of the plans row by row again
    assert 0 < groups.judged <= rules * 120


def test_pods_whose_spread_range_moved_keep_the_other_rules_raw_scores() -> None:
    """Identical pods with a soft spread constraint: after each bind `spreadRange` (read by
    PodTopologySpreadScore only) changes, the resource, taint and affinity scores are kept."""
    case = _web_pods("ScheduleAnyway")
    pods = case.pending
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


def test_renewed_verdicts_move_only_the_rows_they_change() -> None:
    """A rule whose values changed may be decided again on every row at once (`renew`): a row keeps
    its pass while the renewed verdict passes, and any other row's combined verdict is read again."""
    g = NodeResults(profile=None, n=7, layout=0, rules=0, filters=3)  # type: ignore[arg-type]
    g.use_filter_values(((1,), ("a",), ()))
    g.verdicts[:] = RULE_PASS
    g.status[:] = PASS
    g.verdicts[0, 0], g.status[0] = RULE_FAIL, 0  # fails before the changed rule (failure code 0)
    g.verdicts[1, 1:], g.status[1] = (RULE_FAIL, RULE_UNKNOWN), DEFERRED  # fails at the changed rule
    g.verdicts[5, 2], g.status[5] = RULE_UNKNOWN, UNKNOWN
    g.verdicts[6, 2], g.status[6] = RULE_FAIL, 1  # fails after the changed rule (failure code 1)
    asked: list[list[int]] = []
    renewed = np.array(
        [[RULE_FAIL], [RULE_PASS], [RULE_PASS], [RULE_FAIL], [RULE_UNKNOWN], [RULE_FAIL], [RULE_PASS]]
    )

    def renew(rules: list[int]) -> npt.NDArray[np.int8]:
        asked.append(rules)
        return renewed.astype(np.int8)

    g.use_filter_values(((1,), ("b",), ()), renew)
    assert asked == [[1]]
    assert g.verdicts[:, 1].tolist() == renewed[:, 0].tolist()
    # 0: failed before; 1: passes now, its last rule not known; 2: passes still; 3: fails now at the
    # changed rule (its failure found when asked); 4: unsure; 5: unknown; 6: fails at its last rule
    assert g.status.tolist() == [0, UNKNOWN, PASS, DEFERRED, UNKNOWN, UNKNOWN, DEFERRED]
    g.use_filter_values(((1,), ("b",), ()), renew)  # nothing changed: nothing asked
    assert asked == [[1]]
    g.use_filter_values(((1,), ("c",), ()), lambda rules: None)  # cannot be renewed: forgotten
    assert (g.verdicts[:, 1] == RULE_UNKNOWN).all()
    assert g.status.tolist() == [0] + [UNKNOWN] * 6


def test_same_values_tell_equal_values_of_other_types_apart() -> None:
    """`==` takes 1, 1.0, true and 1u as equal; the pods' values read by a rule are the same only
    when their types are too, at any depth, with or without the kept text of the earlier one."""

    def values() -> tuple[object, ...]:  # a pod's values, made afresh (one object shared by two rules)
        volumes = {"error": "", "claims": [], "zones": [1.5]}
        return ({"cpu": 100, "ready": True},), (volumes, volumes), ("x", Duration(5))

    a, b = values(), values()
    assert same_values(a, b) and same_values(b, a, values_text(a))
    for left, right in [(1, 1.0), (1, True), (1, UInt(1)), ([1, 2], [1.0, 2]), ({"n": 0}, {"n": False})]:
        assert left == right
        assert not same_values((left,), (right,))
        assert not same_values((right,), (left,), values_text((left,)))
    assert not same_values({"cpu": 100}, {"cpu": 200})


def test_values_that_cannot_be_pickled_are_only_the_same_as_themselves() -> None:
    unpicklable = [lambda: 0]
    assert values_text(unpicklable) is None
    assert same_values(unpicklable, unpicklable)
    assert not same_values(unpicklable, list(unpicklable))
