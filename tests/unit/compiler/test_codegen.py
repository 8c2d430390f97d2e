"""The policy compiler: lazy lets, combining policies, filter errors, queue keys, profiles."""

from __future__ import annotations

from typing import Any

import pytest

from policyd import framework as pl
from policyd.compiler.profiles import compile_paths, compile_policy_set
from policyd.errors import PolicyError
from policyd.policy.loader import load_texts
from policyd.policy.text_form import parse_policy_text


def compile_text(text: str) -> pl.CompiledPolicySet:
    loaded = load_texts({"t.policy": text})
    assert loaded.errors == [], [str(d) for d in loaded.errors]
    return compile_policy_set(loaded.checked, generation=1)


def pod(name: str = "p", **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "namespace": "default", "priority": 0, "requests": {"cpu": 100}}
    out.update(fields)
    return out


def node(name: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "labels": {}, "free": {"cpu": 1000}}
    out.update(fields)
    return out


def test_let_is_lazy_and_never_evaluated_when_no_rule_reaches_it() -> None:
    cps = compile_text(
        """
        policy p {
          let boom = 1 / 0
          filter First { expr = "ok" in node.labels }
          filter Second { expr = boom > 0 }
        }
        """
    )
    ev = cps.profiles["policyd"].evaluator(pod(), None)
    failure = ev.filter(node("n1"))
    assert failure is not None and failure.rule.name == "First" and not failure.error
    failure = ev.filter(node("n2", labels={"ok": "yes"}))
    assert failure is not None and failure.rule.name == "Second" and failure.error
    assert failure.reasons == ("Second: division by zero",)


def test_node_let_evaluated_once_per_node_and_pod_let_once_per_pod() -> None:
    cps = compile_text(
        """
        policy p {
          let want = pod.requests["cpu"] + 0
          let free = node.free["cpu"]
          filter A { expr = free >= want }
          filter B { expr = free - want >= 0 }
          score S { expr = free - want }
        }
        """
    )
    # observe evaluations through a mapping that counts reads of `free` / `requests`
    reads: dict[str, int] = {"free": 0, "requests": 0}

    class Counting(dict):  # type: ignore[type-arg]
        def get(self, key: Any, default: Any = None) -> Any:
            if key in reads:
                reads[key] += 1
            return super().get(key, default)

    p = Counting(pod())
    ev = cps.profiles["policyd"].evaluator(p, None)
    n1 = Counting(node("n1"))
    n2 = Counting(node("n2"))
    assert ev.filter(n1) is None
    assert ev.score(n1) == [900.0]
    assert reads == {"free": 1, "requests": 1}
    assert ev.filter(n2) is None
    assert reads == {"free": 2, "requests": 1}


def test_a_score_whose_evaluation_fails_scores_0_and_tells_why() -> None:
    cps = compile_text(
        """
        policy p {
          let gpus = node.free["gpu"]
          score Gpus { expr = gpus }
          score Ratio { expr = 100 / node.free["cpu"] }
          score Five { expr = 5 }
        }
        """
    )
    ev = cps.profiles["policyd"].evaluator(pod(), None)
    empty = node("n1", free={"cpu": 0})
    assert ev.score(empty) == [0.0, 0.0, 5.0]
    assert ev.score_errors(empty) == ["no such key: gpu", "division by zero", None]
    full = node("n2", free={"cpu": 50, "gpu": 2})
    assert ev.score(full) == [2.0, 2.0, 5.0]
    assert ev.score_errors(full) == [None, None, None]


def test_the_explanations_functions_are_generated_when_first_used() -> None:
    """`filter_all` and `score_all` serve explanations only: a policy's load does not generate them."""
    text = """
        policy lazy {
          filter Zone { expr = node.labels["zone"] == "a" }
          score Free { expr = node.free["cpu"] }
        }
        """
    profile = compile_text(text).profiles["policyd"]
    code = profile.codes[0]  # type: ignore[attr-defined]
    assert "def filter(" in code.source and "def score(" in code.source
    assert "filter_all" not in code.source and "score_all" not in code.source
    assert "_explained" not in vars(code)
    ev = profile.evaluator(pod(), None)
    [result] = ev.filter_all(node("n1"))
    assert not result.passed and result.error == "no such key: zone"
    assert ev.score_errors(node("n1", free={})) == ["no such key: cpu"]
    assert "_explained" in vars(code)  # generated once, kept


def test_reason_expression_string_and_list() -> None:
    cps = compile_text(
        """
        policy p {
          filter Cpu {
            expr = node.free["cpu"] >= pod.requests["cpu"]
            reason = ["Insufficient cpu", "free " + string(node.free["cpu"])]
          }
          filter Zone { expr = "zone" in node.labels reason = "no zone on " + node.name }
        }
        """
    )
    ev = cps.profiles["policyd"].evaluator(pod(requests={"cpu": 2000}), None)
    failure = ev.filter(node("n1"))
    assert failure is not None and failure.reasons == ("Insufficient cpu", "free 1000")
    ev = cps.profiles["policyd"].evaluator(pod(), None)
    failure = ev.filter(node("n1"))
    assert failure is not None and failure.reasons == ("no zone on n1",)


def test_policies_combine_filters_and_scores_in_name_order() -> None:
    cps = compile_text(
        """
        policy b-second {
          match = pod.priority > 10
          filter B { expr = node.labels["b"] == "1" }
          score SB { expr = 7 weight = 3 }
        }
        policy a-first {
          filter A { expr = node.labels["a"] == "1" }
          score SA { expr = 2 normalize = max }
        }
        """
    )
    prof = cps.profiles["policyd"]
    assert prof.policies == ("a-first", "b-second")
    assert [r.name for r in prof.filters] == ["A", "B"]
    assert [(s.rule.name, s.weight, s.normalize) for s in prof.scores] == [
        ("SA", 1, "max"),
        ("SB", 3, "none"),
    ]
    high = prof.evaluator(pod(priority=20), None)
    low = prof.evaluator(pod(priority=1), None)
    n = node("n", labels={"a": "1"})
    failure = high.filter(n)
    assert failure is not None and failure.rule.name == "B"
    assert low.filter(n) is None
    assert high.score(n) == [2.0, 7.0]
    assert low.score(n) == [2.0, 0.0]
    assert len(high.filter_all(node("x"))) == 2


def test_profiles_map_by_scheduler_name() -> None:
    cps = compile_text(
        """
        policy one { profiles = ["alpha", "beta"] filter F { expr = true } }
        policy two { profiles = ["beta"] filter G { expr = true } }
        """
    )
    assert sorted(cps.profiles) == ["alpha", "beta"]
    assert cps.profiles["alpha"].policies == ("one",)
    assert cps.profiles["beta"].policies == ("one", "two")
    assert cps.generation == 1 and len(cps.content_hash) == 64


def test_queue_key_asc_desc() -> None:
    cps = compile_text(
        """
        policy q {
          queue {
            order pod.priority desc
            order pod.name desc
            order pod.uid asc
          }
        }
        """
    )
    prof = cps.profiles["policyd"]
    pods = [
        pod("a", priority=1, uid="x"),
        pod("b", priority=5, uid="x"),
        pod("c", priority=5, uid="x"),
        pod("c", priority=5, uid="a"),
    ]
    ordered = sorted(pods, key=prof.queue_key)
    assert [(p["priority"], p["name"], p["uid"]) for p in ordered] == [
        (5, "c", "a"),
        (5, "c", "x"),
        (5, "b", "x"),
        (1, "a", "x"),
    ]


def test_default_queue_and_preemption() -> None:
    prof = compile_text("policy d { filter F { expr = true } }").profiles["policyd"]
    assert sorted([pod(priority=1), pod(priority=9)], key=prof.queue_key)[0]["priority"] == 9
    spec = prof.preemption
    assert spec.may_preempt(pod(preemptionPolicy="PreemptLowerPriority"))
    assert not spec.may_preempt(pod(preemptionPolicy="Never"))
    assert spec.eligible_victim(pod(priority=10), pod(priority=1))
    assert not spec.eligible_victim(pod(priority=1), pod(priority=10))
    assert spec.honor_pdb


def test_permit_and_custom_preemption() -> None:
    prof = compile_text(
        """
        policy g {
          preemption { enabled = false pdb = ignore }
          permit gang {
            group = pod.labels["group"]
            minMember = 3
            timeout = duration("90s")
          }
        }
        """
    ).profiles["policyd"]
    assert not prof.preemption.may_preempt(pod())
    assert not prof.preemption.honor_pdb
    (permit,) = prof.permits
    assert permit.timeout_seconds == 90.0
    assert permit.group(pod(labels={"group": "g1"})) == "g1"
    assert permit.group(pod(labels={})) is None
    assert permit.min_members(pod()) == 3


def test_wake_events_follow_reads() -> None:
    prof = compile_text(
        """
        policy w {
          filter L { expr = node.labels["a"] == "b" }
          filter R { expr = node.free["cpu"] > 0 }
          filter T { expr = node.taints.size() == 0 }
        }
        """
    ).profiles["policyd"]
    by_name = {r.name: prof.wake_events(r) for r in prof.filters}
    assert by_name["L"] == {pl.EVENT_NODE_LABELS, pl.EVENT_NODE_ADD}
    assert pl.EVENT_POD_ASSIGNED_DELETE in by_name["R"] and pl.EVENT_NODE_LABELS not in by_name["R"]
    assert by_name["T"] == {pl.EVENT_NODE_TAINTS, pl.EVENT_NODE_ADD}


def test_compile_paths_raises_with_diagnostics(tmp_path: Any) -> None:
    (tmp_path / "bad.policy").write_text("policy b { filter F { expr = node.nope } }\n")
    with pytest.raises(PolicyError) as exc:
        compile_paths([str(tmp_path)], 1)
    assert exc.value.errors[0].span.line == 1
    (tmp_path / "bad.policy").write_text("policy b { filter F { expr = node.ready } }\n")
    assert "policyd" in compile_paths([str(tmp_path)], 2).profiles


def test_policy_text_cannot_inject_python() -> None:
    cps = compile_text(
        """
        policy inject {
          filter F {
            expr = node.name == "__import__('os').system('false')"
            reason = "'); import os #"
          }
        }
        """
    )
    failure = cps.profiles["policyd"].evaluator(pod(), None).filter(node("n"))
    assert failure is not None and failure.reasons == ("'); import os #",)


def test_unresolvable_marks_failures_preemption_cannot_fix() -> None:
    cps = compile_text(
        """
        policy p {
          let zone = "zone" in node.labels
          filter Label {
            expr = zone && node.labels["zone"] == "a"
            reason = "wrong zone"
            unresolvable = !zone
          }
          filter Cpu { expr = node.free["cpu"] >= pod.requests["cpu"] unresolvable = false }
          filter Never { expr = node.name != "n9" unresolvable = true }
        }
        """
    )
    ev = cps.profiles["policyd"].evaluator(pod(), None)
    missing = ev.filter(node("n1"))
    assert missing is not None and missing.rule.name == "Label" and missing.unresolvable
    other = ev.filter(node("n2", labels={"zone": "b"}))
    assert other is not None and other.reasons == ("wrong zone",) and not other.unresolvable
    full = ev.filter(node("n3", labels={"zone": "a"}, free={"cpu": 0}))
    assert full is not None and full.rule.name == "Cpu" and not full.unresolvable
    never = ev.filter(node("n9", labels={"zone": "a"}))
    assert never is not None and never.rule.name == "Never" and never.unresolvable


def test_unresolvable_must_be_bool() -> None:
    from policyd.policy.checker import PolicyChecker

    parsed = parse_policy_text(
        'policy p {\n  filter F {\n    expr = true\n    unresolvable = "yes"\n  }\n}\n', "t.policy"
    )
    checker = PolicyChecker(parsed.policies[0])
    checker.run()
    assert [(d.span.line, d.severity) for d in checker.diagnostics] == [(4, "error")]
    assert "must be bool" in checker.diagnostics[0].message


def test_let_built_on_a_pod_only_let_is_pod_only() -> None:
    """A let reading `pod`, `cluster` and earlier pod-only lets is computed once per pod, not per node."""
    cps = compile_text(
        """
        policy p {
          let app = pod.labels["app"]
          let busy = cluster.nodeCount() + size(app)
          filter A { expr = node.name != app || busy > 0 }
        }
        """
    )
    calls = {"n": 0}

    class Cluster:
        def node_count(self) -> int:
            calls["n"] += 1
            return 3

    ev = cps.profiles["policyd"].evaluator(pod(labels={"app": "web"}), Cluster())
    for name in ("n1", "n2", "n3"):
        assert ev.filter(node(name)) is None
    assert calls["n"] == 1
    code = cps.profiles["policyd"].codes[0]  # type: ignore[attr-defined]
    assert code.filter_pod_slots == (0, 1)  # both lets are prepared before any node


def test_freeze_tells_types_apart_and_ignores_map_order() -> None:
    from policyd.cel.values import freeze

    assert len({freeze(1), freeze(1.0), freeze(True)}) == 3
    assert freeze({"a": 1, "b": [1, 2]}) == freeze({"b": [1, 2], "a": 1})
    assert freeze({"a": [1]}) != freeze({"a": [1.0]})


def test_signature_equal_for_pods_differing_only_in_fields_nodes_do_not_read() -> None:
    cps = compile_text('policy p { filter F { expr = node.free["cpu"] >= pod.requests["cpu"] } }')
    profile = cps.profiles["policyd"]
    a = profile.evaluator(pod("a", uid="1"), None)
    b = profile.evaluator(pod("b", uid="2"), None)
    c = profile.evaluator(pod("c", requests={"cpu": 200}), None)
    assert a.signature() == b.signature()  # type: ignore[attr-defined]
    assert a.signature() != c.signature()  # type: ignore[attr-defined]
    # equal under ==, but of other types (or absent): the node evaluations could differ
    base = dict(pod("d", requests={"cpu": 100}))
    keys = {
        profile.evaluator({**base, "requests": requests}, None).signature()  # type: ignore[attr-defined]
        for requests in ({"cpu": 100}, {"cpu": 100.0}, {"cpu": True})
    }
    without = {k: v for k, v in base.items() if k != "requests"}
    keys.add(profile.evaluator(without, None).signature())  # type: ignore[attr-defined]
    assert len(keys) == 4 and None not in keys
