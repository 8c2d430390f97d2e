"""Which filter rules see their pod-only leaf maps only through node-label membership
(`policyd.compiler.membership`): those may be judged again only on the nodes labelled with the keys
that moved between two pods' values."""

from __future__ import annotations

import pytest

from policyd.compiler.profiles import compile_sources
from policyd.shipped import default_policy

LETS = """
  let podAffinity = cluster.interPodAffinity(pod)
  let counts = {"a": 1, "b": 2}
  let here = node.labels["zone"] in counts
  let zones = ["a", "b"]
"""


def key_deltas(expr: str) -> object:
    text = f"policy p {{\n{LETS}\n  filter F {{\n    expr = {expr}\n  }}\n}}\n"
    compiled = compile_sources({"p.policy": text}, generation=1)
    code = next(iter(compiled.profiles.values())).codes[0]
    (deltas,) = code.filter_key_deltas
    return deltas


@pytest.mark.parametrize(
    "expr",
    [
        "podAffinity.anti.all(t, !(t.topologyKey in node.labels) || !(node.labels[t.topologyKey] in t.counts))",
        "podAffinity.existingAnti.all(k, !(k in node.labels) || !(node.labels[k] in podAffinity.existingAnti[k]))",
        '!(node.labels["zone"] in counts)',
        'node.labels.zone in counts && node.allocatable["cpu"] > 2',
        "here || podAffinity.anyMatch",
        "podAffinity.required.exists(t, has(t.topologyKey) && node.labels[t.topologyKey] in t.counts)",
    ],
)
def test_membership_of_labels_alone_is_followed(expr: str) -> None:
    assert key_deltas(expr) is not None


@pytest.mark.parametrize(
    "expr",
    [
        'size(counts) > 1 || node.labels["zone"] in counts',
        'counts[node.labels["zone"]] > 1',
        '"a" in counts && "zone" in node.labels',
        'counts.exists(k, node.labels["zone"] == k)',
        "podAffinity.anti.filter(t, node.labels[t.topologyKey] in t.counts).size() == 0",
        "node.name in counts",
        'cluster.nodeCount() > 0 && node.labels["zone"] in counts',
        'podAffinity == podAffinity && "zone" in node.labels',
        'podAffinity.anti.all(t, size(t.counts) == 0 || node.labels["zone"] == "x")',
        'podAffinity.existingAnti["kubernetes.io/hostname"]["n1"] > 0 && "zone" in node.labels',
        'counts.a == 1 && "zone" in node.labels',
        'has(counts.a) || node.labels["zone"] in counts',
    ],
)
def test_any_other_use_of_a_leaf_map_is_not(expr: str) -> None:
    assert key_deltas(expr) is None


def test_a_rule_without_pod_only_maps_has_nothing_to_follow() -> None:
    assert key_deltas('node.labels["zone"] == "a"') is None
    assert key_deltas('node.labels["zone"] in zones') is None  # a list of strings: compared whole


def test_the_default_policy_follows_its_three_inter_pod_affinity_filters() -> None:
    compiled = compile_sources({"default.policy": default_policy().read_text()}, generation=1)
    (code,) = next(iter(compiled.profiles.values())).codes
    followed = {
        rule.name
        for rule, deltas in zip(code.filters, code.filter_key_deltas, strict=True)
        if deltas is not None
    }
    assert followed == {"InterPodAffinity", "InterPodAntiAffinity", "InterPodExistingAntiAffinity"}
    spread = code.filters.index(next(r for r in code.filters if r.name == "PodTopologySpread"))
    assert code.filter_key_deltas[spread] is None  # it reads the counts, not only their keys
