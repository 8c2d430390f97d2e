"""Coverage instrumentation: which conditions get probes, what instrumented code records."""

from __future__ import annotations

from policyd.compiler.codegen import compile_policy
from policyd.compiler.probes import conditions
from policyd.compiler.profiles import compile_policy_set
from policyd.evaluation.coverage import CoverageCollector
from policyd.policy.checked import CheckedPolicy
from policyd.policy.loader import load_texts
from tests.unit.compiler.test_codegen import node, pod


def checked(text: str) -> CheckedPolicy:
    loaded = load_texts({"t.policy": text})
    assert loaded.errors == [], [str(d) for d in loaded.errors]
    (one,) = loaded.checked
    return one


POLICY = """policy p {
  let big = pod.priority > 10 && (pod.name == "a" || pod.name.startsWith("b"))
  filter F {
    expr = big ? node.labels.all(k, k != "z" || size(k) > 2) : "x" in node.labels && !has(pod.labels.q)
  }
  score S {
    expr = node.free["cpu"] > 500 ? 1 : 0
  }
}
"""


def test_conditions_flatten_chains_and_skip_macro_machinery() -> None:
    policy = checked(POLICY).policy
    found = [(c.point, c.text) for c in conditions(policy.lets[0].expr)]
    assert found == [
        ("&&", "pod.priority > 10"),
        ("&&", 'pod.name == "a" || pod.name.startsWith("b")'),
        ("||", 'pod.name == "a"'),
        ("||", 'pod.name.startsWith("b")'),
    ]
    found = [(c.point, c.text) for c in conditions(policy.filters[0].expr)]
    # the `all` macro expands to an `&&` over its accumulator: not a condition of the author's
    assert found == [
        ("?:", "big"),
        ("||", 'k != "z"'),
        ("||", "size(k) > 2"),
        ("&&", '"x" in node.labels'),
        ("&&", "!has(pod.labels.q)"),
    ]


def test_a_chain_of_one_operator_is_one_branch_point_per_operand() -> None:
    policy = checked(
        'policy p {\n  filter F { expr = pod.priority > 1 && pod.name != "x" && size(pod.labels) > 0 }\n}\n'
    ).policy
    texts = [c.text for c in conditions(policy.filters[0].expr)]
    assert texts == ["pod.priority > 1", 'pod.name != "x"', "size(pod.labels) > 0"]


def test_instrumented_code_records_rules_and_condition_outcomes() -> None:
    coverage = CoverageCollector()
    cps = compile_policy_set([checked(POLICY)], generation=1, coverage=coverage)
    profile = cps.profiles["policyd"]
    ev = profile.evaluator(pod("a", priority=20), None)
    assert ev.filter(node("n1", labels={"zz": "1"})) is None
    ev.score(node("n1", labels={"zz": "1"}))
    report = coverage.report()
    (file,) = report.files
    assert {(r.probe.kind, r.probe.name): r.evaluations > 0 for r in file.rules} == {
        ("filter", "F"): True,
        ("score", "S"): True,
    }
    seen = {b.probe.text: (b.true > 0, b.false > 0) for b in file.branches}
    assert seen["pod.priority > 10"] == (True, False)
    assert seen['pod.name == "a"'] == (True, False)
    assert seen['pod.name.startsWith("b")'] == (False, False)  # short-circuited
    assert seen["big"] == (True, False)
    assert seen['k != "z"'] == (True, False)
    assert seen['node.free["cpu"] > 500'] == (True, False)
    assert seen['"x" in node.labels'] == (False, False)
    # a second pod takes the other branches; the counts add up
    ev = profile.evaluator(pod("c", priority=0), None)
    assert ev.filter(node("n2")) is not None
    seen = {b.probe.text: (b.true > 0, b.false > 0) for b in coverage.report().files[0].branches}
    assert seen["pod.priority > 10"] == (True, True)
    assert seen["big"] == (True, True)
    assert seen['"x" in node.labels'] == (False, True)


def test_probes_are_off_by_default_and_instrumented_code_has_no_plans() -> None:
    one = checked(POLICY)
    plain = compile_policy(one)
    assert "_cov" not in plain.source and "probe" not in plain.source
    assert not plain.instrumented
    assert any(p is not None for p in plain.vector_plan().scores)
    assert "_explained" not in vars(plain)  # the explanations' functions: when first used
    instrumented = compile_policy(one, CoverageCollector())
    assert "_cov" in instrumented.source and "probe" in instrumented.source
    assert "_explained" in vars(instrumented)  # generated with the code: their probes are made with it
    assert instrumented is not compile_policy(one, CoverageCollector())  # never cached
    plan = instrumented.vector_plan()
    assert all(p is None for p in (*plan.filters, *plan.scores))  # every rule runs the probed functions


def test_instrumented_code_decides_as_the_plain_code() -> None:
    one = checked(POLICY)
    plain = compile_policy_set([one], generation=1).profiles["policyd"]
    probed = compile_policy_set([one], generation=1, coverage=CoverageCollector()).profiles["policyd"]
    for p in (pod("a", priority=20), pod("bob", priority=20), pod("c", labels={"q": "1"})):
        for n in (node("n1"), node("n2", labels={"x": "1"}), node("n3", labels={"z": "1"}, free={"cpu": 10})):
            a, b = plain.evaluator(p, None), probed.evaluator(p, None)
            assert a.filter_all(n) == b.filter_all(n)
            assert a.score(n) == b.score(n)
