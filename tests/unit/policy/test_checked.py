"""The checked policy: every expression checked once by the loader; the compiler never checks again."""

from __future__ import annotations

import pytest

from policyd.cel import checker
from policyd.compiler.codegen import compile_policy
from policyd.compiler.lowering import lower_policy
from policyd.compiler.profiles import compile_policy_set
from policyd.policy.env import Context
from policyd.policy.loader import load_texts

TEXT = """
policy p {
  match = pod.namespace != "kube-system"
  let app = pod.labels["app"]
  let busy = cluster.nodeCount() + size(app)
  let zone = node.labels["zone"]
  let near = zone == app || busy > 3
  filter Near {
    expr = near
    reason = "far from " + app
    unresolvable = zone == ""
  }
  filter Cpu { expr = pod.requests["cpu"] <= node.free["cpu"] }
  score Busy {
    expr = busy
    weight = 1
  }
  queue {
    order pod.priority desc
  }
  preemption {
    enabled = pod.priority > 0
    victims = victim.priority < pod.priority - 10
  }
  permit Gang {
    group = pod.labels["gang"]
    minMember = 2
  }
}
"""


def test_lets_in_order_with_deps_scope_and_reads() -> None:
    [checked] = load_texts({"p.policy": TEXT}).checked
    assert list(checked.lets) == ["app", "busy", "zone", "near"]
    lets = checked.lets
    assert [lets[n].deps for n in lets] == [(), ("app",), (), ("zone", "app", "busy")]
    assert [lets[n].pod_only for n in lets] == [True, True, False, False]
    assert lets["zone"].reads == {"node.labels"}
    near = checked.of(checked.policy.filters[0].expr)
    assert near.context is Context.FILTER
    assert near.lets == ("zone", "app", "busy", "near")
    assert {"node.labels", "pod.labels", "cluster"} <= near.reads
    reason = checked.of(checked.policy.filters[0].reason)  # type: ignore[arg-type]
    assert reason.context is Context.REASON and reason.lets == ("app",)
    assert checked.ok and str(checked.let_types["busy"]) == "int"


def test_compiling_and_lowering_never_check_again(monkeypatch: pytest.MonkeyPatch) -> None:
    [checked] = load_texts({"p.policy": TEXT}).checked

    def no_check(*args: object) -> None:
        raise AssertionError("checked again")

    monkeypatch.setattr(checker._Checker, "visit", no_check)
    code = compile_policy(checked)
    assert code.checked is checked
    lower_policy(checked)
    compiled = compile_policy_set([checked], generation=1)
    assert list(compiled.profiles) == ["policyd"]


def test_duplicate_let_is_reported_and_the_first_counts() -> None:
    text = "policy p {\n  let a = 1\n  let a = 2\n  filter F { expr = a > 0 }\n}\n"
    result = load_texts({"p.policy": text})
    assert [d.code for d in result.errors] == ["duplicate-let"]
    [checked] = result.checked
    assert list(checked.lets) == ["a"] and checked.lets["a"].index == 0
