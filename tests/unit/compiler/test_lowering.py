"""Which rules the lowering turns into vectorised plans (their execution: tests/unit/evaluation/test_plans.py)."""

from __future__ import annotations

import pytest

from policyd.compiler.lowering import lower_policy
from policyd.policy.loader import load_texts


def test_default_policy_lowering_covers_the_column_rules() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "policies" / "default.policy").read_text()
    [checked] = load_texts({"default.policy": text}).checked
    policy = checked.policy
    plan = lower_policy(checked)
    vectorised = {r.name.value for r, p in zip(policy.filters, plan.filters, strict=True) if p is not None}
    assert {"NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodeResourcesFit"} <= vectorised
    # node.usedPorts is read only inside pod.hostPorts.all(...): lowered, per node for pods with ports
    assert "NodePorts" in vectorised
    scored = {r.name.value for r, p in zip(policy.scores, plan.scores, strict=True) if p is not None}
    assert {"NodeResourcesLeastAllocated", "NodeResourcesBalancedAllocation"} <= scored
    # passes the node to a cluster function: lowered, one call per scored row
    assert "PodTopologySpreadScore" in scored


@pytest.mark.parametrize(
    "expr",
    [
        "node.usedPorts.size() > 0",
        "size(node.pods) == 0",
        "cluster.topologySpreadScore(pod, node) > 0",
        "node == node",
    ],
)
def test_per_node_only_expressions_are_not_lowered(expr: str) -> None:
    text = f"policy p {{\n  filter F {{\n    expr = {expr}\n  }}\n}}\n"
    [checked] = load_texts({"p.policy": text}).checked
    assert lower_policy(checked).filters == (None,)
