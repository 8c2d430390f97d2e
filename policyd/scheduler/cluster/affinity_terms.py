"""Inter-pod (anti-)affinity terms of a pod, resolved (kube-scheduler's framework.AffinityTerm)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policyd.scheduler.cluster.selectors import (
    CelObject,
    LabelSelector,
    Requirement,
    labels_of,
    parse_label_selector,
)

LABEL_NAMESPACE_NAME = "kubernetes.io/metadata.name"
# the weight kube-scheduler gives an existing pod's required affinity term when scoring
HARD_POD_AFFINITY_WEIGHT = 1


def namespace_labels(known: Mapping[str, Mapping[str, str]], namespace: str) -> Mapping[str, str]:
    """Labels of a namespace (known Namespace objects, else the automatic name label)."""
    return known.get(namespace) or {LABEL_NAMESPACE_NAME: namespace}


@dataclass(frozen=True)
class AffinityTerm:
    """A pod (anti-)affinity term of some pod, resolved: namespaces, selectors, weight."""

    selector: LabelSelector
    topology_key: str
    namespaces: frozenset[str]
    namespace_selector: LabelSelector
    weight: int = 0

    def matches(self, pod: CelObject, ns_labels: Mapping[str, str]) -> bool:
        """framework.AffinityTerm.Matches: namespace (listed or selected) and label selector."""
        ns = str(pod.get("namespace", ""))
        if ns in self.namespaces or self.namespace_selector.matches(ns_labels):
            return self.selector.matches(labels_of(pod))
        return False


def _affinity_term(owner: CelObject, raw: Mapping[str, Any], weight: int = 0) -> AffinityTerm:
    selector = parse_label_selector(raw.get("labelSelector"))
    labels = labels_of(owner)
    extra = [Requirement(k, "In", (labels[k],)) for k in raw.get("matchLabelKeys") or () if k in labels]
    extra += [
        Requirement(k, "NotIn", (labels[k],)) for k in raw.get("mismatchLabelKeys") or () if k in labels
    ]
    namespaces = frozenset(str(n) for n in raw.get("namespaces") or ())
    ns_raw = raw.get("namespaceSelector")
    if not namespaces and ns_raw is None:
        namespaces = frozenset({str(owner.get("namespace", ""))})
    return AffinityTerm(
        selector=selector.with_requirements(extra),
        topology_key=str(raw.get("topologyKey", "")),
        namespaces=namespaces,
        namespace_selector=parse_label_selector(ns_raw),
        weight=weight,
    )


@dataclass(frozen=True)
class PodTerms:
    """The four kinds of inter-pod affinity terms of one pod."""

    required_affinity: tuple[AffinityTerm, ...]
    required_anti: tuple[AffinityTerm, ...]
    preferred_affinity: tuple[AffinityTerm, ...]
    preferred_anti: tuple[AffinityTerm, ...]

    @property
    def any(self) -> bool:
        """True when the pod has at least one term."""
        return bool(
            self.required_affinity or self.required_anti or self.preferred_affinity or self.preferred_anti
        )


def pod_terms(pod: CelObject) -> PodTerms:
    """The resolved inter-pod affinity terms of `pod`."""
    affinity = pod.get("affinity") or {}
    aff = affinity.get("podAffinity") or {}
    anti = affinity.get("podAntiAffinity") or {}
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pref = "preferredDuringSchedulingIgnoredDuringExecution"

    def preferred(raw: Sequence[Mapping[str, Any]]) -> tuple[AffinityTerm, ...]:
        return tuple(
            _affinity_term(pod, w.get("podAffinityTerm") or {}, int(w.get("weight") or 0)) for w in raw
        )

    return PodTerms(
        required_affinity=tuple(_affinity_term(pod, t) for t in aff.get(req) or ()),
        required_anti=tuple(_affinity_term(pod, t) for t in anti.get(req) or ()),
        preferred_affinity=preferred(aff.get(pref) or ()),
        preferred_anti=preferred(anti.get(pref) or ()),
    )


def has_pod_affinity(pod: CelObject) -> bool:
    """True when the pod declares inter-pod affinity or anti-affinity."""
    affinity = pod.get("affinity") or {}
    return bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity"))


def matches_all(terms: Sequence[AffinityTerm], pod: CelObject, ns_labels: Mapping[str, str]) -> bool:
    """podMatchesAllAffinityTerms: false for no terms."""
    return bool(terms) and all(t.matches(pod, ns_labels) for t in terms)
