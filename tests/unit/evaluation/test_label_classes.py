"""Filter rules that read the node only through labels looked up by key are decided once per class of
nodes alike under those keys (`policyd.evaluation.label_classes`), with the per-node verdicts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyd.cel.parser import parse_cel
from policyd.compiler.lowering import reads_labels_by_key
from policyd.compiler.profiles import compile_sources
from policyd.evaluation import label_classes
from policyd.evaluation.code import UNSET
from policyd.evaluation.columns import NodeColumns
from policyd.evaluation.label_classes import Guess, ReadLabels, classes, decide, decide_classes
from policyd.framework import RULE_FAIL, RULE_PASS
from policyd.scheduler.cluster.functions import ClusterFunctions
from tests.unit.evaluation.test_plans import LABEL_KEYS, LABEL_VALUES, make_pod
from tests.unit.scheduler.cluster.snapshots import snapshot_of

# label lookups of every kind; which key is looked up may depend on the pod or on another label
LABEL_ATOMS = (
    '"zone" in node.labels',
    'node.labels["zone"] == "a"',
    'node.labels["rack"] in ["a", "b", "1"]',
    'node.labels["zone"] != node.labels["rack"]',
    "has(node.labels.gpu)",
    'node.labels.rank == "7"',
    'int(node.labels["rank"]) > 2',
    'node.labels["rank"].matches("^[0-9]+$")',
    '("zone" in node.labels ? node.labels["rack"] == "b" : node.labels["gpu"] == "1")',
    'node.labels[node.labels["zone"] == "a" ? "rack" : "gpu"] == "x1"',
    "pod.nodeSelector.all(k, k in node.labels && node.labels[k] == pod.nodeSelector[k])",
    'x.filter(k, k in node.labels && node.labels[k] == "c").size() == 0',
    '(node.labels["zone"] in {"a": 1, "b": 3} ? {"a": 1, "b": 3}[node.labels["zone"]] : 0) + x.size() > 2',
)


def label_exprs() -> st.SearchStrategy[str]:
    return st.recursive(
        st.sampled_from(LABEL_ATOMS),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["&&", "||"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda b: f"!({b})"),
            st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        ),
        max_leaves=4,
    )


def node_cel(i: int, labels: dict[str, str]) -> dict[str, Any]:
    """A node's CEL view: only its labels matter to the rules here."""
    return {"name": f"n{i}", "labels": labels, "taints": [], "allocatable": {}, "requested": {}}


def profile_of(expr: str) -> Any:
    text = f'policy p {{\n  let x = ["rack", "gpu"]\n  filter F {{\n    expr = {expr}\n  }}\n}}\n'
    compiled = compile_sources({"p.policy": text}, generation=1)
    return next(iter(compiled.profiles.values()))


def guess_of(keys: tuple[Any, ...] = ()) -> Guess:
    guess = Guess()
    guess.keys = keys
    return guess


def decide_all(profile: Any, cels: list[dict[str, Any]], pod: Any, guess: Guess | None = None) -> Any:
    """(passed, unsure) of the policy's one rule over `cels`, by classes."""
    code = profile.codes[0]
    evaluator = profile.evaluator(pod.cel, ClusterFunctions(snapshot_of(cels)))
    evaluator.prepare("filter")
    _, _, pod_slots = evaluator.parts[0]
    rows = np.arange(len(cels), dtype=np.intp)
    verdict = code.filter_verdicts[0]
    assert verdict is not None

    def on(node: Any) -> bool | None:
        return verdict(pod.cel, evaluator.cluster, node, pod_slots, [UNSET] * code.node_slots)  # type: ignore[no-any-return]

    return decide(on, NodeColumns.from_nodes(cels), rows, guess or Guess())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    labels=st.lists(
        st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=4),
        min_size=1,
        max_size=14,
    ),
    expr=label_exprs(),
    selector=st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2),
    guess=st.lists(st.sampled_from((*LABEL_KEYS, "absent")), max_size=2, unique=True),
)
def test_classes_give_the_per_node_verdicts(
    labels: list[dict[str, str]], expr: str, selector: dict[str, str], guess: list[str]
) -> None:
    profile = profile_of(expr)
    cels = [node_cel(i, dict(m)) for i, m in enumerate(labels)]
    pod = make_pod("new", 100, 100, selector=selector)
    learnt = guess_of(tuple(guess))
    decided = decide_all(profile, cels, pod, learnt)
    if decided is None:  # more classes than worth it: the plan decides (rare over these few values)
        return
    passed, unsure = decided
    evaluator = profile.evaluator(pod.cel, ClusterFunctions(snapshot_of(cels)))
    for row, cel in enumerate(cels):
        [result] = evaluator.filter_all(cel)
        if result.error is not None or unsure[row]:
            assert unsure[row] or result.error is None, (row, result)
            continue
        assert passed[row] == result.passed, (row, cel["labels"], result)
    assert set(guess) <= set(learnt.keys)


def test_a_key_looked_up_after_another_regroups_the_nodes() -> None:
    # which key is read depends on "zone": nodes alike under zone alone are not alike for the rule
    profile = profile_of('"zone" in node.labels ? node.labels["rack"] == "b" : node.labels["gpu"] == "1"')
    cels = [
        node_cel(0, {"zone": "a", "rack": "b"}),
        node_cel(1, {"zone": "a", "rack": "c"}),
        node_cel(2, {"gpu": "1"}),
        node_cel(3, {"gpu": "2"}),
        node_cel(4, {"zone": "q", "rack": "b", "gpu": "2"}),
    ]
    learnt = Guess()
    decided = decide_all(profile, cels, make_pod("new", 100, 100), learnt)
    assert decided is not None
    passed, unsure = decided
    assert passed.tolist() == [True, False, True, False, True]
    assert not unsure.any()
    keys = learnt.keys
    assert set(keys) == {"zone", "rack", "gpu"}
    # the keys found are the next guess: the same verdicts at once
    again = decide_all(profile, cels, make_pod("new", 100, 100), learnt)
    assert again is not None and again[0].tolist() == passed.tolist() and learnt.keys == keys


def test_errors_are_left_to_the_per_node_function() -> None:
    profile = profile_of('int(node.labels["rank"]) > 2')
    cels = [
        node_cel(0, {"rank": "7"}),
        node_cel(1, {"rank": "x1"}),
        node_cel(2, {}),
        node_cel(3, {"rank": "1"}),
    ]
    decided = decide_all(profile, cels, make_pod("new", 100, 100))
    assert decided is not None
    passed, unsure = decided
    assert passed.tolist() == [True, False, False, False]
    assert unsure.tolist() == [False, True, True, False]


def test_too_many_classes_leave_the_rule_to_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = profile_of('node.labels["zone"] == "a"')
    cels = [node_cel(i, {"zone": v}) for i, v in enumerate(LABEL_VALUES)]
    assert decide_all(profile, cels, make_pod("new", 100, 100)) is not None
    monkeypatch.setattr(label_classes, "MAX_CLASSES", len(LABEL_VALUES) - 1)
    learnt = Guess()
    assert decide_all(profile, cels, make_pod("new", 100, 100), learnt) is None
    # the next evaluations go to the plan at once, the keys kept for when classes are tried again
    assert learnt.keys == ("zone",) and learnt.skip == label_classes.SKIP_AFTER_MANY
    monkeypatch.setattr(label_classes, "MAX_CLASSES", len(LABEL_VALUES))
    for left in range(label_classes.SKIP_AFTER_MANY - 1, -1, -1):
        assert decide_all(profile, cels, make_pod("new", 100, 100), learnt) is None
        assert learnt.skip == left
    assert decide_all(profile, cels, make_pod("new", 100, 100), learnt) is not None


def test_labels_used_whole_leave_the_rule_to_the_plan() -> None:
    columns = NodeColumns.from_nodes([node_cel(0, {"zone": "a"}), node_cel(1, {"zone": "b"})])
    rows = np.arange(2, dtype=np.intp)

    def iterates(node: Any) -> bool:
        return "a" in list(node["labels"])

    def sizes(node: Any) -> bool:
        return len(node["labels"]) > 0

    def by_key(node: Any) -> bool:
        return node["labels"].get("zone") == "a"

    assert decide(iterates, columns, rows, Guess()) is None
    assert decide(sizes, columns, rows, Guess()) is None
    learnt = Guess()
    decided = decide(by_key, columns, rows, learnt)
    assert decided is not None and decided[0].tolist() == [True, False] and learnt.keys == ("zone",)


def test_read_labels_notes_lookups() -> None:
    labels = ReadLabels({"zone": "a"})
    assert labels["zone"] == "a" and "rack" not in labels and labels.get("gpu") is None
    assert labels.read == {"zone", "rack", "gpu"} and not labels.whole
    with pytest.raises(TypeError):
        labels[["unhashable"]]  # type: ignore[index]
    assert labels.whole


def test_classes_group_rows_alike_under_the_keys() -> None:
    cels = [
        node_cel(0, {"zone": "a", "rack": "1"}),
        node_cel(1, {"zone": "a"}),
        node_cel(2, {"zone": "a", "rack": "1"}),
    ]
    columns = NodeColumns.from_nodes(cels)
    rows = np.array([2, 1, 0], dtype=np.intp)
    grouped = classes(columns, rows, ("zone", "rack", "absent", 7))
    assert grouped is not None
    inverse, first = grouped
    assert inverse[0] == inverse[2] != inverse[1]
    assert sorted(first.tolist()) == [0, 1]
    one, members = classes(columns, rows, ("absent",))  # type: ignore[misc]
    assert one.tolist() == [0, 0, 0] and members.tolist() == [0]


@pytest.mark.parametrize(
    ("expr", "by_key"),
    [
        ('node.labels["zone"] == "a"', True),
        ('"zone" in node.labels', True),
        ("node.labels.zone == pod.name", True),
        ("has(node.labels.zone)", True),
        ('pod.nodeSelector.all(k, k in node.labels && node.labels[k] == "a")', True),
        ("pod.name == 'x'", True),
        ('node.labels.all(k, k != "zone")', False),
        ('node.labels == {"zone": "a"}', False),
        ("size(node.labels) > 1", False),
        ('node.name == "n1"', False),
        ('node.labels[?"zone"].hasValue()', False),
        ("has(node.labels)", False),
        # a comprehension variable named node is not the node
        ('[{"labels": {"zone": "a"}}].all(node, node.labels["zone"] == "a")', True),
        ('[1].all(n, node.labels.exists(k, k == "zone"))', False),
    ],
)
def test_only_lookups_by_key_qualify(expr: str, by_key: bool) -> None:
    assert reads_labels_by_key([parse_cel(expr)]) is by_key


def test_a_let_reading_the_node_counts() -> None:
    profile = profile_of('node.labels["zone"] == "a"')
    assert profile.codes[0].filter_verdicts[0] is not None
    text = 'policy p {\n  let n = node.labels\n  filter F {\n    expr = n["zone"] == "a"\n  }\n}\n'
    compiled = compile_sources({"p.policy": text}, generation=1)
    assert next(iter(compiled.profiles.values())).codes[0].filter_verdicts == (None,)


def test_bulk_filter_decides_label_rules_by_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind the evaluator protocol a labels-by-key rule is decided by classes, not by its plan; a
    rule reading another node field still goes to its plan."""
    from policyd.evaluation.plans import ExprPlan

    text = (
        'policy p {\n  filter Zone {\n    expr = node.labels["zone"] == "a"\n  }\n'
        '  filter Named {\n    expr = node.name != "n2"\n  }\n}\n'
    )
    profile = next(iter(compile_sources({"p.policy": text}, generation=1).profiles.values()))
    cels = [node_cel(i, {"zone": z}) for i, z in enumerate("abab")]
    evaluator = profile.evaluator(make_pod("new", 100, 100).cel, ClusterFunctions(snapshot_of(cels)))
    evaluator.prepare("filter")
    planned: list[str] = []
    evaluate = ExprPlan.evaluate

    def noted(self: ExprPlan, *args: Any, **kwargs: Any) -> Any:
        planned.append(str(self.expr))
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(ExprPlan, "evaluate", noted)
    rows = np.arange(4, dtype=np.intp)
    bulk = evaluator.bulk_filter(NodeColumns.from_nodes(cels), rows, np.ones(2, dtype=bool))
    assert bulk is not None
    codes, reusable = bulk
    assert codes[:, 0].tolist() == [RULE_PASS, RULE_FAIL, RULE_PASS, RULE_FAIL]
    assert codes[:, 1].tolist() == [RULE_PASS, RULE_PASS, RULE_FAIL, RULE_PASS]
    assert reusable.all()
    assert len(planned) == 1 and "name" in planned[0]


def test_classes_of_every_row_are_kept_until_a_label_changes() -> None:
    cels = [node_cel(i, {"zone": z}) for i, z in enumerate("abca")]
    columns = NodeColumns.from_nodes(cels)
    learnt = Guess()

    def in_a(node: Any) -> bool:
        return bool(node["labels"].get("zone") == "a")

    def verdicts() -> list[bool | None]:
        decided = decide_classes(in_a, columns, None, learnt)
        assert decided is not None
        inverse, results = decided
        return [results[c] for c in inverse.tolist()]

    assert verdicts() == [True, False, False, True]
    kept = learnt.every
    # a pod bound to node 1: its object is copied with the same labels map
    columns.set_node(1, {**cels[1], "podCount": 1})
    assert verdicts() == [True, False, False, True] and learnt.every is kept
    columns.set_node(2, node_cel(2, {"zone": "a"}))  # a label changed: the classes are made again
    assert verdicts() == [True, False, True, True] and learnt.every is not kept
    columns.add_node(node_cel(4, {"zone": "a"}))
    assert verdicts() == [True, False, True, True, True]


def test_filter_by_classes_renews_label_rules_on_every_row() -> None:
    text = (
        'policy p {\n  filter Zone {\n    expr = node.labels["zone"] == pod.name\n  }\n'
        '  filter Named {\n    expr = node.name != "n2"\n  }\n}\n'
    )
    profile = next(iter(compile_sources({"p.policy": text}, generation=1).profiles.values()))
    cels = [node_cel(i, {"zone": z}) for i, z in enumerate("abab")]
    columns = NodeColumns.from_nodes(cels)
    for pod, expected in (("a", [RULE_PASS, RULE_FAIL] * 2), ("b", [RULE_FAIL, RULE_PASS] * 2)):
        evaluator = profile.evaluator(make_pod(pod, 100, 100).cel, ClusterFunctions(snapshot_of(cels)))
        evaluator.prepare("filter")
        codes = evaluator.filter_by_classes(columns, [0])
        assert codes is not None and codes.shape == (4, 1) and codes[:, 0].tolist() == expected
        # a rule reading more of the node than labels: nothing is renewed
        assert evaluator.filter_by_classes(columns, [1]) is None
        assert evaluator.filter_by_classes(columns, [0, 1]) is None
