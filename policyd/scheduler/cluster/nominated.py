"""PreFilter states with the pods nominated to one node added (kube-scheduler's AddPod).

kube-scheduler filters a node to which pods of at least the pod's priority are nominated twice
(RunFilterPluginsWithNominatedPods): first with those pods added to the node and, through the
PreFilter extensions' AddPod, to a copy of the PreFilter state of PodTopologySpread and
InterPodAffinity; then as it is. These functions are those AddPod updates of the values of
`cluster.topologySpread`, `cluster.interPodAffinity` and `cluster.domainCounts`: only the domains of
the node the pods are nominated to change, so a state costs O(nominated pods), not a walk.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policyd.scheduler.cluster.affinity_terms import PodTerms, matches_all
from policyd.scheduler.cluster.selectors import CelObject, labels_of
from policyd.scheduler.cluster.spread_constraints import SpreadConstraint, spread_constraint_state

PodKey = tuple[str, str, str]


def pod_key(pod: CelObject) -> PodKey:
    """(namespace, name, uid) of a CEL pod dict."""
    return (str(pod.get("namespace", "")), str(pod.get("name", "")), str(pod.get("uid", "")))


@dataclass(frozen=True, eq=False)
class NominatedPods:
    """Pods nominated to one node, counted there in the node's first filter pass."""

    node: CelObject
    pods: tuple[CelObject, ...]

    @property
    def key(self) -> tuple[Hashable, ...]:
        """What tells this addition apart in memo keys: the node's name and the pods' keys."""
        return (str(self.node.get("name", "")), tuple(pod_key(p) for p in self.pods))


def spread_with_pods(
    states: list[dict[str, Any]],
    constraints: Sequence[SpreadConstraint],
    pod: CelObject,
    added: NominatedPods,
) -> list[dict[str, Any]]:
    """PodTopologySpread AddPod of every nominated pod on `states` (`cluster.topologySpread`).

    As updateWithPod: nothing unless the pods share `pod`'s namespace and the node has every
    constraint's topology key; a nominated pod counts for a constraint including the node
    (matchNodeInclusionPolicies) whose selector matches its labels. Constraints sharing a topology
    key share its domain counts, the node's count being the last including constraint's (as in the
    PreFilter state).
    """
    if not states or not added.pods:
        return states
    labels = labels_of(added.node)
    if not all(c.topology_key in labels for c in constraints):
        return states
    namespace = pod.get("namespace")
    delta: dict[str, int] = {}
    for c in constraints:
        if c.includes(pod, added.node):
            # AddPod tests the selector only (not countPodsMatchSelector's terminating / empty rules)
            delta[c.topology_key] = sum(
                1 for p in added.pods if p.get("namespace") == namespace and c.matches(p)
            )
    if not any(delta.values()):
        return states
    out = []
    for c, state in zip(constraints, states, strict=True):
        counts = dict(state["counts"])
        n = delta.get(c.topology_key, 0)
        if n:
            value = labels[c.topology_key]
            counts[value] = counts.get(value, 0) + n
        out.append(spread_constraint_state(c, pod, counts))
    return out


def _bump(counts: dict[str, dict[Any, int]], node_labels: Mapping[str, str], key: str) -> None:
    """topologyToMatchedTermCount.update: one more in the node's domain of `key` (if labelled)."""
    if key in node_labels:
        bucket = counts.setdefault(key, {})
        value = node_labels[key]
        bucket[value] = bucket.get(value, 0) + 1


def affinity_skipped(state: Mapping[str, Any]) -> bool:
    """InterPodAffinity PreFilter returned Skip: no existing pod's required anti-affinity term
    matches the pod and it has no required terms (no AddPod then, and no Filter)."""
    return not state["existingAnti"] and not state["required"] and not state["anti"]


def affinity_with_pods(
    state: dict[str, Any],
    terms: PodTerms,
    pod: CelObject,
    added: NominatedPods,
    namespace_labels: Callable[[str], Mapping[str, str]],
    terms_of: Callable[[CelObject], PodTerms],
) -> dict[str, Any]:
    """InterPodAffinity AddPod of every nominated pod on `state` (`cluster.interPodAffinity`).

    As updateWithPod: a nominated pod's required anti-affinity terms matching `pod` count in
    `existingAnti`; it counts for `pod`'s required affinity when it matches all of its terms, and for
    each of `pod`'s required anti-affinity terms it matches; always in the node's domains. A state
    whose PreFilter was skipped stays as it is.
    """
    if affinity_skipped(state) or not added.pods:
        return state
    node_labels = labels_of(added.node)
    existing: dict[str, dict[Any, int]] = {k: dict(v) for k, v in state["existingAnti"].items()}
    affinity: dict[str, dict[Any, int]] = {
        t.topology_key: dict(s["counts"])
        for t, s in zip(terms.required_affinity, state["required"], strict=True)
    }
    anti: dict[str, dict[Any, int]] = {
        t.topology_key: dict(s["counts"]) for t, s in zip(terms.required_anti, state["anti"], strict=True)
    }
    own_ns_labels = namespace_labels(str(pod.get("namespace", "")))
    for p in added.pods:
        for t in terms_of(p).required_anti:
            if t.matches(pod, own_ns_labels):
                _bump(existing, node_labels, t.topology_key)
        ns_labels = namespace_labels(str(p.get("namespace", "")))
        if matches_all(terms.required_affinity, p, ns_labels):
            for t in terms.required_affinity:
                _bump(affinity, node_labels, t.topology_key)
        for t in terms.required_anti:
            if t.matches(p, ns_labels):
                _bump(anti, node_labels, t.topology_key)
    return {
        "required": [
            {"topologyKey": t.topology_key, "counts": dict(affinity[t.topology_key])}
            for t in terms.required_affinity
        ],
        "anyMatch": any(affinity.values()),
        "selfMatch": state["selfMatch"],
        "anti": [
            {"topologyKey": t.topology_key, "counts": dict(anti[t.topology_key])} for t in terms.required_anti
        ],
        "existingAnti": existing,
    }


def domain_counts_with_pods(
    counts: dict[str, int],
    topology_key: str,
    counted: Callable[[CelObject], bool],
    added: NominatedPods,
) -> dict[str, int]:
    """`cluster.domainCounts` with the nominated pods `counted` selects counted in the node's domain."""
    value = labels_of(added.node).get(topology_key)
    n = sum(1 for p in added.pods if counted(p))
    if value is None or not n:
        return counts
    out = dict(counts)
    out[value] = out.get(value, 0) + n
    return out
