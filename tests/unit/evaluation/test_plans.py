"""The vectorised plan and the per-node generated function agree (property tests over random clusters).

For a filter, every node the plan is sure about gets the per-node verdict, and every node where the
per-node function reports an evaluation error is in the plan's `unsure` mask (the runtime evaluates
those per node). For a score, the raw values are identical, and so are the nodes where it failed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyd.compiler.lowering import lower_policy
from policyd.compiler.profiles import compile_sources
from policyd.evaluation.columnar import Unsupported
from policyd.evaluation.columns import NodeColumns
from policyd.framework import RULE_FAIL, RULE_PASS, RULE_UNKNOWN
from policyd.policy.loader import load_texts
from policyd.scheduler.cluster.functions import ClusterFunctions
from policyd.scheduler.cluster.objects import NodeInfo, node_info, pod_info
from tests.unit.scheduler.cluster.snapshots import snapshot_of

LABEL_KEYS = ("zone", "rack", "rank", "gpu")
LABEL_VALUES = ("a", "b", "c", "1", "7", "x1")
RESOURCES = ("cpu", "memory", "example.com/gpu")


def make_node(
    i: int,
    cpu: int,
    memory: int,
    pods: int,
    labels: dict[str, str],
    taints: list[dict[str, str]],
    gpu: int | None,
    unschedulable: bool,
) -> NodeInfo:
    """A node object with allocatable cpu (millicores), memory (Mi), pods and an optional gpu count."""
    allocatable = {"cpu": f"{cpu}m", "memory": f"{memory}Mi", "pods": str(pods)}
    if gpu is not None:
        allocatable["example.com/gpu"] = str(gpu)
    return node_info(
        {
            "metadata": {"name": f"n{i}", "labels": labels},
            "spec": {"taints": taints, "unschedulable": unschedulable},
            "status": {"allocatable": allocatable, "capacity": allocatable},
        }
    )


def make_pod(name: str, cpu: int, memory: int, gpu: int = 0, selector: dict[str, str] | None = None) -> Any:
    """A pod view requesting cpu (millicores), memory (Mi) and optionally gpus."""
    requests = {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}
    if gpu:
        requests["example.com/gpu"] = str(gpu)
    return pod_info(
        {
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": requests}}],
                "nodeSelector": selector or {},
                "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            },
        }
    )


taints: st.SearchStrategy[list[dict[str, str]]] = st.lists(
    st.builds(
        dict,
        key=st.sampled_from(["dedicated", "spot", "node.kubernetes.io/unschedulable"]),
        value=st.sampled_from(["", "true", "x"]),
        effect=st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
    ),
    max_size=2,
)
nodes = st.lists(
    st.tuples(
        st.integers(0, 8000),
        st.integers(0, 4096),
        st.integers(0, 5),
        st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=4),
        taints,
        st.one_of(st.none(), st.integers(0, 4)),
        st.booleans(),
        st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 1024), st.integers(0, 2)), max_size=3),
    ),
    min_size=1,
    max_size=12,
)

NUM_ATOMS = (
    'node.free["cpu"]',
    'node.allocatable["memory"]',
    'node.requested["cpu"]',
    'node.nonZeroRequested["memory"]',
    'node.free["example.com/gpu"]',
    "node.podCount",
    'pod.requests["cpu"]',
    'pod.requests["memory"]',
    "0",
    "3",
    "-7",
    "1000",
)
BOOL_ATOMS = (
    '"zone" in node.labels',
    'node.labels["zone"] == "a"',
    'node.labels["rack"] in ["a", "b", "1"]',
    'node.labels["zone"] != node.labels["rack"]',
    "node.unschedulable",
    'node.taints.exists(t, t.effect == "NoSchedule" && t.key != "dedicated")',
    'size(node.taints.filter(t, t.effect == "PreferNoSchedule")) == 0',
    "pod.nodeSelector.all(k, k in node.labels && node.labels[k] == pod.nodeSelector[k])",
    'size(["cpu", "memory", "example.com/gpu"].filter(r, pod.requests[r] > node.free[r])) == 0',
    'node.labels.all(k, k != "gpu" || node.labels[k] == "7")',
    'node.labels.exists(k, node.labels[k] == "c")',
    'int(node.labels["rank"]) > 2',
    'node.labels["rank"].matches("^[0-9]+$")',
    'node.name == "n1"',
    '"example.com/gpu" in node.free',
    "has(node.labels.zone)",
    # one label read twice, a map lookup behind a membership test (the spread filter's shape)
    '(node.labels["zone"] in {"a": 1, "b": 3} ? {"a": 1, "b": 3}[node.labels["zone"]] : 0) + 1 > 2',
    '!("rack" in node.labels) || (node.labels["rack"] in {"a": 0} ? 5 : 1) - 2 > node.podCount',
    # membership of a label value in a pod-only map larger than, or keyed unlike, the label's values
    'node.labels["rank"] in {"1": 0, "7": 1, "c": 2, "q": 3, "r": 4, "s": 5, "t": 6, "u": 7}',
    'node.labels["rank"] in {"7": 1, "x1": 2}',
    # keys of two types at run time (a policy's literal may not mix them: dyn() entries, as in Kubernetes)
    'dyn(node.labels["zone"]) in {dyn(1): dyn("a"), dyn("b"): dyn(2)}',
)


def num_exprs() -> st.SearchStrategy[str]:
    """Integer expressions over node columns and pod values."""
    return st.recursive(
        st.sampled_from(NUM_ATOMS),
        lambda inner: st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        max_leaves=4,
    )


def bool_exprs() -> st.SearchStrategy[str]:
    """Boolean expressions: comparisons, label and taint tests, logic."""
    compare = st.tuples(num_exprs(), st.sampled_from(["<", "<=", "==", "!=", ">", ">="]), num_exprs()).map(
        lambda t: f"{t[0]} {t[1]} {t[2]}"
    )
    base = st.one_of(st.sampled_from(BOOL_ATOMS), compare)
    return st.recursive(
        base,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["&&", "||"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda b: f"!({b})"),
            st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        ),
        max_leaves=4,
    )


def score_exprs() -> st.SearchStrategy[str]:
    """Score expressions: integer and double arithmetic, conditionals."""
    return st.one_of(
        num_exprs(),
        st.tuples(bool_exprs(), num_exprs(), num_exprs()).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
        st.tuples(num_exprs(), num_exprs()).map(lambda t: f"int(double({t[0]}) / double({t[1]}) * 100.0)"),
    )


def policy_text(filter_expr: str, score_expr: str, let_expr: str) -> str:
    return (
        "policy p {\n"
        f"  let x = {let_expr}\n"
        f"  filter F {{\n    expr = {filter_expr}\n  }}\n"
        f"  filter G {{\n    expr = x >= 0 || {filter_expr}\n  }}\n"
        f"  score S {{\n    expr = {score_expr}\n    weight = 1\n  }}\n"
        "  score T {\n    expr = x\n    weight = 1\n  }\n"
        "}\n"
    )


def build_cluster(spec: list[Any]) -> list[NodeInfo]:
    states = []
    for i, (cpu, mem, pods, labels, node_taints, gpu, unsched, placed) in enumerate(spec):
        state = make_node(i, cpu, mem, pods, dict(labels), list(node_taints), gpu, unsched)
        for j, (pcpu, pmem, pgpu) in enumerate(placed):
            state.add_pod(make_pod(f"p{i}-{j}", pcpu, pmem, pgpu).with_node(state.name))
        states.append(state)
    return states


def check_evaluators_agree(profile: Any, cels: list[Any], pod: Any, cluster: Any) -> None:
    """Behind the evaluator protocol, the vectorised plans and the per-node functions agree: every
    rule verdict the plans give (pass or fail) is the per-node function's, every row the plans pass
    the per-node filters pass; the plans' raw scores are the per-node ones."""
    per_node = profile.evaluator(pod.cel, cluster)
    plans = profile.evaluator(pod.cel, cluster)
    plans.prepare("filter")
    plans.track_cluster()
    columns = NodeColumns.from_nodes(cels)
    rows = np.arange(len(cels), dtype=np.intp)
    verdicts = [per_node.filter(c) for c in cels]
    index = {ref: i for i, ref in enumerate(profile.filters)}
    bulk = plans.bulk_filter(columns, rows, np.ones(len(profile.filters), dtype=bool))
    if bulk is not None:
        codes, _ = bulk
        for row in np.flatnonzero((codes == RULE_PASS).all(axis=1)).tolist():
            assert verdicts[row] is None, (row, verdicts[row])
        for row, c in enumerate(cels):
            for result in per_node.filter_all(c):
                code = codes[row, index[result.rule]]
                if code != RULE_UNKNOWN and not result.error:
                    assert code == (RULE_PASS if result.passed else RULE_FAIL), (row, result)
    plans.prepare("score")
    scored = plans.bulk_scores(columns, rows, np.ones(len(profile.scores), dtype=bool))
    if scored is not None:
        values, _ = scored
        for row, c in enumerate(cels):
            assert np.trunc(values[row]).astype(np.int64).tolist() == [int(v) for v in per_node.score(c)]


def check_agreement(text: str, states: list[NodeInfo], pod: Any) -> None:
    loaded = load_texts({"p.policy": text})
    assert not loaded.has_errors, [str(d) for d in loaded.errors]
    [checked] = loaded.checked
    compiled = compile_sources({"p.policy": text}, generation=1)
    profile = next(iter(compiled.profiles.values()))
    cels = [s.cel for s in states]
    cluster = ClusterFunctions(snapshot_of(cels))
    evaluator = profile.evaluator(pod.cel, cluster)
    expected_filters = [evaluator.filter_all(c) for c in cels]
    expected_scores = [evaluator.score(c) for c in cels]
    expected_score_errors = [evaluator.score_errors(c) for c in cels]
    check_evaluators_agree(profile, cels, pod, cluster)
    plan = lower_policy(checked)
    columns = NodeColumns.from_nodes(cels)
    shared = plan.evaluation(columns, pod.cel, cluster)
    for j, fplan in enumerate(plan.filters):
        assert fplan is not None
        try:
            got = fplan.evaluate(pod.cel, columns, cluster, shared)
        except Unsupported:
            continue
        passed = np.array([r[j].passed for r in expected_filters])
        errors = np.array([r[j].error is not None for r in expected_filters])
        sure = ~got.unsure
        assert (got.values[sure] == passed[sure]).all(), (j, got.values, passed, got.unsure)
        assert not (errors & sure).any(), (j, errors, got.unsure)
    for j, splan in enumerate(plan.scores):
        assert splan is not None
        try:
            got = splan.evaluate(pod.cel, columns, cluster, shared)
        except Unsupported:
            continue
        want = np.array([s[j] for s in expected_scores])
        assert (got.values == want).all(), (j, got.values, want)
        # the nodes whose evaluation failed (scored 0) are the per-node functions' too
        failed = np.array([e[j] is not None for e in expected_score_errors])
        got_failed = got.failed if got.failed is not None else np.zeros(len(cels), dtype=bool)
        assert (got_failed == failed).all(), (j, got_failed, failed)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=nodes,
    filter_expr=bool_exprs(),
    score_expr=score_exprs(),
    let_expr=num_exprs(),
    pod=st.tuples(
        st.integers(0, 3000),
        st.integers(0, 2048),
        st.integers(0, 2),
        st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2),
    ),
)
def test_vectorised_plan_matches_per_node_function(
    spec: list[Any],
    filter_expr: str,
    score_expr: str,
    let_expr: str,
    pod: tuple[int, int, int, dict[str, str]],
) -> None:
    states = build_cluster(spec)
    check_agreement(
        policy_text(filter_expr, score_expr, let_expr), states, make_pod("new", *pod[:3], selector=pod[3])
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=nodes,
    pod=st.tuples(st.integers(0, 3000), st.integers(0, 2048), st.integers(0, 2)),
    selector=st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2),
)
def test_default_policy_plans_match(
    spec: list[Any], pod: tuple[int, int, int], selector: dict[str, str]
) -> None:
    """Every vectorised rule of default.policy agrees with the generated functions."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "policies" / "default.policy").read_text()
    states = build_cluster(spec)
    loaded = load_texts({"default.policy": text})
    [checked] = loaded.checked
    compiled = compile_sources({"default.policy": text}, generation=1)
    profile = next(iter(compiled.profiles.values()))
    cels = [s.cel for s in states]
    cluster = ClusterFunctions(snapshot_of(cels))
    new_pod = make_pod("new", *pod, selector=selector)
    evaluator = profile.evaluator(new_pod.cel, cluster)
    check_evaluators_agree(profile, cels, new_pod, cluster)
    plan = lower_policy(checked)
    columns = NodeColumns.from_nodes(cels)
    shared = plan.evaluation(columns, new_pod.cel, cluster)
    expected = [evaluator.filter_all(c) for c in cels]
    for j, fplan in enumerate(plan.filters):
        if fplan is None:
            continue
        try:
            got = fplan.evaluate(new_pod.cel, columns, cluster, shared)
        except Unsupported:
            continue
        passed = np.array([r[j].passed for r in expected])
        sure = ~got.unsure
        assert (got.values[sure] == passed[sure]).all(), checked.policy.filters[j].name.value
    scores = [evaluator.score(c) for c in cels]
    for j, splan in enumerate(plan.scores):
        if splan is None:
            continue
        try:
            got = splan.evaluate(new_pod.cel, columns, cluster, shared)
        except Unsupported:
            continue  # ImageLocality reads node.images once the pod has images: per node
        assert (got.values == np.array([s[j] for s in scores])).all(), checked.policy.scores[j].name.value


def test_guarded_node_read_is_unsupported_only_when_reached() -> None:
    text = (
        "policy p {\n  filter Ports {\n"
        "    expr = pod.hostPorts.all(w, !node.usedPorts.exists(u, u.hostPort == w.hostPort))\n  }\n}\n"
    )
    [checked] = load_texts({"p.policy": text}).checked
    [fplan] = lower_policy(checked).filters
    assert fplan is not None
    state = make_node(0, 1000, 1024, 10, {}, [], None, False)
    columns = NodeColumns.from_nodes([state.cel])
    assert fplan.evaluate(make_pod("p", 1, 1).cel, columns).values.tolist() == [True]
    with_port = pod_info(
        {
            "metadata": {"name": "q", "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostPort": 80}]}]
            },
        }
    )
    with pytest.raises(Unsupported):
        fplan.evaluate(with_port.cel, columns)


@pytest.mark.parametrize(
    ("filter_expr", "score_expr", "let_expr"),
    [
        (
            "[10, 20].exists(i, v, i == node.labels.size())",
            "(node.labels.all(k, v, k != 'zone' || v != 'c') ? 1 : 0) + node.labels.transformList(k, v, v).size()",
            "node.labels.?zone.orValue('').size()",
        ),
        (
            "[?(node.labels.size() > 1 ? optional.of(1) : optional.none())].size() == 1",
            "{?'z': node.labels.size() > 0 ? optional.of(1) : optional.none()}.size() + cel.bind(n, 2, n * n)",
            "node.labels.transformMap(k, v, k == 'gpu', v).size()",
        ),
    ],
)
def test_optionals_and_two_variable_comprehensions_agree(
    filter_expr: str, score_expr: str, let_expr: str
) -> None:
    """Plans decline (or reproduce) optional literals, optional selection and two-variable comprehensions."""
    states = [
        make_node(0, 1000, 1024, 10, {"zone": "a", "rack": "a"}, [], None, False),
        make_node(1, 1000, 1024, 10, {"zone": "c", "gpu": "1"}, [], 2, False),
        make_node(2, 1000, 1024, 10, {}, [], None, False),
    ]
    check_agreement(policy_text(filter_expr, score_expr, let_expr), states, make_pod("new", 100, 64))
