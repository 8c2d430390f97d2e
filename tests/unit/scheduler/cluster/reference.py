"""The reference `cluster` functions: plain walks over every node and pod (the oracle of the indexed ones).

`ReferenceCluster` is `ClusterFunctions` (its memo, `prescore` and per-node lookups) with every
per-pod state computed the way kube-scheduler's PodTopologySpread, InterPodAffinity and ImageLocality
plugins compute it, node by node, with no tables and none of the product's early returns. The product
must agree with it on every input (test_cluster_functions.py, test_cluster_index.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from policyd.scheduler.cluster.affinity_terms import (
    HARD_POD_AFFINITY_WEIGHT,
    AffinityTerm,
    PodTerms,
    matches_all,
    pod_terms,
)
from policyd.scheduler.cluster.functions import ClusterFunctions, ClusterSnapshot
from policyd.scheduler.cluster.selectors import CelObject, labels_of
from policyd.scheduler.cluster.spread_constraints import (
    LABEL_HOSTNAME,
    SCHEDULE_ANYWAY,
    SpreadConstraint,
    spread_constraint_state,
    spread_constraints,
)
from tests.unit.scheduler.cluster.snapshots import snapshot_of


def _pods(node: CelObject) -> Sequence[CelObject]:
    return node.get("pods") or ()


def _count_matching(
    c: SpreadConstraint, node: CelObject, namespace: str, nominated: frozenset[int] = frozenset()
) -> int:
    """countPodsMatchSelector: same namespace, not terminating, selected (empty selector: 0); a pod
    nominated to the node (`nominated`: ids) counts as AddPod counts it: same namespace, selected."""
    n = sum(1 for p in _pods(node) if id(p) in nominated and p.get("namespace") == namespace and c.matches(p))
    if c.selector_empty:
        return n
    return n + sum(1 for p in _pods(node) if id(p) not in nominated and c.counts(p, namespace))


def _has_all_keys(node: CelObject, constraints: Sequence[SpreadConstraint]) -> bool:
    labels = labels_of(node)
    return all(c.topology_key in labels for c in constraints)


def _bump(counts: dict[str, dict[str, int]], labels: Mapping[str, str], key: str) -> None:
    if key in labels:
        bucket = counts.setdefault(key, {})
        bucket[labels[key]] = bucket.get(labels[key], 0) + 1


def _term_state(term: AffinityTerm, counts: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    return {"topologyKey": term.topology_key, "counts": dict(counts.get(term.topology_key, {}))}


class ReferenceCluster(ClusterFunctions):
    """`ClusterFunctions` whose per-pod states come from walks over every node and pod (no tables)."""

    def __init__(
        self, snapshot: ClusterSnapshot, namespace_labels: Mapping[str, Mapping[str, str]] | None = None
    ) -> None:
        super().__init__(snapshot, namespace_labels)
        self._nodes = list(snapshot.cels())
        self._namespaces = dict(namespace_labels or {})
        self._nominated: frozenset[int] = frozenset()  # ids of the pods added by `with_nominated`
        self._without: ReferenceCluster = self

    def with_nominated(self, node: CelObject, pods: Sequence[CelObject]) -> ReferenceCluster:
        """The walk over the nodes with `pods` placed on `node` (kube-scheduler's AddPod of each).

        Its `topology_spread`, `inter_pod_affinity` and `domain_counts` are the oracle of the
        product's variant; an InterPodAffinity state whose PreFilter was skipped (no existing pod's
        required anti-affinity term matches the pod, which has no required term) stays the one
        without the pods."""
        name = node.get("name")
        nodes = [dict(n, pods=[*_pods(n), *pods]) if n.get("name") == name else n for n in self._nodes]
        variant = ReferenceCluster(snapshot_of(nodes), self._namespaces)
        variant._nominated = frozenset(id(p) for p in pods)
        variant._without = self
        return variant

    def _feasible_nodes(self, pod: CelObject) -> Sequence[CelObject]:
        prescored = self._prescored(pod)
        return self._nodes if prescored is None else prescored

    # -- general ------------------------------------------------------------------------------

    def domain_counts(self, pod: CelObject, topology_key: str, labels: Mapping[str, str]) -> dict[str, int]:
        """Per value of `topology_key`: pods in the pod's namespace carrying all `labels` (0 included)."""
        sel = tuple(sorted(labels.items()))
        ns = pod.get("namespace")
        counts: dict[str, int] = {}
        for node in self._nodes:
            value = labels_of(node).get(topology_key)
            if value is None:
                continue
            n = sum(
                1
                for p in _pods(node)
                if p.get("namespace") == ns
                and not p.get("deleting")
                and all(labels_of(p).get(k) == v for k, v in sel)
            )
            counts[value] = counts.get(value, 0) + n
        return counts

    # -- ImageLocality ------------------------------------------------------------------------

    def _image_index(self) -> tuple[dict[str, int], dict[str, int]]:
        count: dict[str, int] = {}
        size: dict[str, int] = {}
        for node in self._nodes:
            for name, bytes_ in (node.get("images") or {}).items():
                count[name] = count.get(name, 0) + 1
                size.setdefault(name, int(bytes_))
        return count, size

    def image_node_count(self, image: str) -> int:
        """Number of nodes that have `image`."""
        return self._image_index()[0].get(image, 0)

    def image_size(self, image: str) -> int:
        """Size of `image` on the first node reporting it."""
        return self._image_index()[1].get(image, 0)

    # -- PodTopologySpread: filter ------------------------------------------------------------

    def _spread_filter_state(self, pod: CelObject, when: str) -> list[dict[str, Any]]:
        constraints, _ = spread_constraints(pod, when)
        if not constraints:
            return []
        ns = str(pod.get("namespace", ""))
        # TpPairToMatchNum: keyed by (topologyKey, value); constraints sharing a key share the pair
        counts: dict[str, dict[str, int]] = {c.topology_key: {} for c in constraints}
        for node in self._nodes:
            if not _has_all_keys(node, constraints):
                continue
            labels = labels_of(node)
            node_counts: dict[str, int] = {}
            for c in constraints:
                if c.includes(pod, node):
                    node_counts[c.topology_key] = _count_matching(c, node, ns, self._nominated)
            for key, n in node_counts.items():
                value = labels[key]
                counts[key][value] = counts[key].get(value, 0) + n
        return [spread_constraint_state(c, pod, dict(counts[c.topology_key])) for c in constraints]

    # -- PodTopologySpread: score -------------------------------------------------------------

    def _spread_score_state(self, pod: CelObject) -> dict[str, Any]:
        inactive = {"scores": {}, "range": {"active": False, "min": 0, "max": 0}}
        feasible = self._feasible_nodes(pod)
        constraints, defaulted = spread_constraints(pod, SCHEDULE_ANYWAY)
        if not constraints or not feasible or not self._nodes:
            return inactive
        require_all = not defaulted
        ns = str(pod.get("namespace", ""))
        ignored: set[str] = set()
        pair_counts: dict[tuple[str, str], int] = {}
        topo_size = [0] * len(constraints)
        for node in feasible:
            if require_all and not _has_all_keys(node, constraints):
                ignored.add(str(node.get("name", "")))
                continue
            labels = labels_of(node)
            for i, c in enumerate(constraints):
                if c.topology_key == LABEL_HOSTNAME:
                    continue
                pair = (c.topology_key, labels.get(c.topology_key, ""))
                if pair not in pair_counts:
                    pair_counts[pair] = 0
                    topo_size[i] += 1
        weights = []
        for i, c in enumerate(constraints):
            size = len(feasible) - len(ignored) if c.topology_key == LABEL_HOSTNAME else topo_size[i]
            weights.append(math.log(size + 2))
        for node in self._nodes:
            if require_all and not _has_all_keys(node, constraints):
                continue
            labels = labels_of(node)
            for c in constraints:
                if not c.includes(pod, node):
                    continue
                pair = (c.topology_key, labels.get(c.topology_key, ""))
                if pair in pair_counts:
                    pair_counts[pair] += _count_matching(c, node, ns)
        scores: dict[str, int] = {}
        for node in feasible:
            name = str(node.get("name", ""))
            if name in ignored:
                continue
            labels = labels_of(node)
            total = 0.0
            for i, c in enumerate(constraints):
                if c.topology_key not in labels:
                    continue
                if c.topology_key == LABEL_HOSTNAME:
                    cnt = _count_matching(c, node, ns)
                else:
                    cnt = pair_counts[(c.topology_key, labels[c.topology_key])]
                total += cnt * weights[i] + (c.max_skew - 1)
            scores[name] = math.floor(total + 0.5)  # Go math.Round for non-negative values
        if not scores:
            return {"scores": scores, "range": {"active": True, "min": 0, "max": 0}}
        values = scores.values()
        return {"scores": scores, "range": {"active": True, "min": min(values), "max": max(values)}}

    # -- InterPodAffinity: filter -------------------------------------------------------------

    def _all_pod_terms(self) -> list[tuple[CelObject, CelObject, PodTerms]]:
        """(node, pod, terms) of every existing pod with inter-pod affinity terms."""
        out = []
        for node in self._nodes:
            for p in _pods(node):
                terms = pod_terms(p)
                if terms.any:
                    out.append((node, p, terms))
        return out

    def _affinity_filter_state(self, pod: CelObject) -> dict[str, Any]:
        terms = pod_terms(pod)
        if self._without is not self:
            plain = self._without.inter_pod_affinity(pod)
            if not plain["existingAnti"] and not terms.required_affinity and not terms.required_anti:
                return plain  # PreFilter Skip: AddPod never runs
        ns_labels = self.namespace_labels(str(pod.get("namespace", "")))
        existing: dict[str, dict[str, int]] = {}
        for node, _, other in self._all_pod_terms():
            labels = labels_of(node)
            for t in other.required_anti:
                if t.topology_key in labels and t.matches(pod, ns_labels):
                    bucket = existing.setdefault(t.topology_key, {})
                    value = labels[t.topology_key]
                    bucket[value] = bucket.get(value, 0) + 1
        affinity: dict[str, dict[str, int]] = {}
        anti: dict[str, dict[str, int]] = {}
        if terms.required_affinity or terms.required_anti:
            for node in self._nodes:
                labels = labels_of(node)
                for p in _pods(node):
                    p_ns_labels = self.namespace_labels(str(p.get("namespace", "")))
                    if matches_all(terms.required_affinity, p, p_ns_labels):
                        for t in terms.required_affinity:
                            _bump(affinity, labels, t.topology_key)
                    for t in terms.required_anti:
                        if t.matches(p, p_ns_labels):
                            _bump(anti, labels, t.topology_key)
        return {
            "required": [_term_state(t, affinity) for t in terms.required_affinity],
            "anyMatch": any(affinity.values()),
            "selfMatch": matches_all(terms.required_affinity, pod, ns_labels),
            "anti": [_term_state(t, anti) for t in terms.required_anti],
            "existingAnti": existing,
        }

    # -- InterPodAffinity: score --------------------------------------------------------------

    def _affinity_score_state(self, pod: CelObject) -> dict[str, Any]:
        terms = pod_terms(pod)
        ns_labels = self.namespace_labels(str(pod.get("namespace", "")))
        topology: dict[str, dict[str, int]] = {}

        def add(
            term: AffinityTerm, weight: int, target: CelObject, nsl: Mapping[str, str], node: CelObject
        ) -> None:
            if term.matches(target, nsl):
                value = labels_of(node).get(term.topology_key)
                if value is not None:
                    bucket = topology.setdefault(term.topology_key, {})
                    bucket[value] = bucket.get(value, 0) + weight

        for node in self._nodes:
            for existing in _pods(node):
                other = pod_terms(existing)
                ex_ns_labels = self.namespace_labels(str(existing.get("namespace", "")))
                for t in terms.preferred_affinity:
                    add(t, t.weight, existing, ex_ns_labels, node)
                for t in terms.preferred_anti:
                    add(t, -t.weight, existing, ex_ns_labels, node)
                for t in other.required_affinity:
                    add(t, HARD_POD_AFFINITY_WEIGHT, pod, ns_labels, node)
                for t in other.preferred_affinity:
                    add(t, t.weight, pod, ns_labels, node)
                for t in other.preferred_anti:
                    add(t, -t.weight, pod, ns_labels, node)
        active = bool(topology)
        result: dict[str, Any] = {"topology": topology, "range": {"active": active, "min": 0, "max": 0}}
        if active:
            raw = []
            for node in self._feasible_nodes(pod):
                labels = labels_of(node)
                raw.append(sum(v.get(labels[k], 0) for k, v in topology.items() if k in labels))
            if raw:
                result["range"] = {"active": True, "min": min(raw), "max": max(raw)}
        return result
