"""InterPodAffinity's PreFilter and PreScore state of a pod, over the index's tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from policyd.scheduler.cluster.affinity_terms import HARD_POD_AFFINITY_WEIGHT, AffinityTerm, matches_all
from policyd.scheduler.cluster.selectors import CelObject
from policyd.scheduler.cluster.tables import (
    PREFERRED_AFFINITY,
    PREFERRED_ANTI,
    REQUIRED_AFFINITY,
    REQUIRED_ANTI,
    DomainSums,
    Int64Array,
    IntpArray,
    SnapshotTables,
)


def empty_filter_state() -> dict[str, Any]:
    """The PreFilter state when no pod involved has inter-pod affinity terms."""
    return {"required": [], "anyMatch": False, "selfMatch": False, "anti": [], "existingAnti": {}}


def empty_score_state() -> dict[str, Any]:
    """The PreScore state when no pod involved has inter-pod affinity terms."""
    return {"topology": {}, "range": {"active": False, "min": 0, "max": 0}}


def _term_counts(tables: SnapshotTables, term: AffinityTerm) -> Int64Array:
    """Per row: pods `term` matches (namespace listed or selected, label selector)."""
    ns_labels = tables.namespace_labels

    def matched(p: CelObject) -> bool:
        return term.matches(p, ns_labels(str(p.get("namespace", ""))))

    key = ("affinity-term", term.selector, term.namespaces, term.namespace_selector)
    return tables.pod_counts(key, matched)


def _all_terms_counts(tables: SnapshotTables, terms: Sequence[AffinityTerm]) -> Int64Array:
    """Per row: pods every one of `terms` matches."""
    ns_labels = tables.namespace_labels

    def matched(p: CelObject) -> bool:
        return matches_all(terms, p, ns_labels(str(p.get("namespace", ""))))

    key = ("affinity-all", tuple((t.selector, t.namespaces, t.namespace_selector) for t in terms))
    return tables.pod_counts(key, matched)


def _existing_matching(
    tables: SnapshotTables, pod: CelObject, kinds: Sequence[int]
) -> list[tuple[int, AffinityTerm, IntpArray, Int64Array]]:
    """Existing pods' terms of `kinds` that match `pod`, with their carrying rows and counts."""
    ns_labels = tables.namespace_labels(str(pod.get("namespace", "")))
    out = []
    for (kind, term), rows, counts in tables.existing_terms():
        if kind in kinds and term.matches(pod, ns_labels):
            out.append((kind, term, rows, counts))
    return out


def filter_state(tables: SnapshotTables, pod: CelObject) -> dict[str, Any]:
    """Required (anti-)affinity state of the pod (`cluster.interPodAffinity`)."""
    terms = tables.index.pod_terms(pod)
    ns_labels = tables.namespace_labels(str(pod.get("namespace", "")))
    existing = DomainSums(tables.n)
    for _, term, rows, counts in _existing_matching(tables, pod, (REQUIRED_ANTI,)):
        existing.add(tables.domains(term.topology_key), rows, counts)
    affinity = DomainSums(tables.n)
    anti = DomainSums(tables.n)
    if terms.required_affinity:
        counts = _all_terms_counts(tables, terms.required_affinity)
        rows = np.flatnonzero(counts)
        for t in terms.required_affinity:
            affinity.add(tables.domains(t.topology_key), rows, counts[rows])
    for t in terms.required_anti:
        counts = _term_counts(tables, t)
        rows = np.flatnonzero(counts)
        anti.add(tables.domains(t.topology_key), rows, counts[rows])
    affinity_counts = affinity.dicts()
    anti_counts = anti.dicts()
    return {
        "required": [
            {"topologyKey": t.topology_key, "counts": dict(affinity_counts.get(t.topology_key, {}))}
            for t in terms.required_affinity
        ],
        "anyMatch": bool(affinity_counts),
        "selfMatch": matches_all(terms.required_affinity, pod, ns_labels),
        "anti": [
            {"topologyKey": t.topology_key, "counts": dict(anti_counts.get(t.topology_key, {}))}
            for t in terms.required_anti
        ],
        "existingAnti": existing.dicts(),
    }


def score_state(tables: SnapshotTables, pod: CelObject, feasible: IntpArray) -> dict[str, Any]:
    """Per topology key and domain the accumulated term weights, and `{active, min, max}` of the
    raw scores over the `feasible` rows (PreScore)."""
    terms = tables.index.pod_terms(pod)
    sums = DomainSums(tables.n)
    for own, sign in ((terms.preferred_affinity, 1), (terms.preferred_anti, -1)):
        for t in own:
            counts = _term_counts(tables, t)
            rows = np.flatnonzero(counts)
            sums.add(tables.domains(t.topology_key), rows, counts[rows], sign * t.weight)
    kinds = (REQUIRED_AFFINITY, PREFERRED_AFFINITY, PREFERRED_ANTI)
    for kind, term, rows, counts in _existing_matching(tables, pod, kinds):
        weight = (
            HARD_POD_AFFINITY_WEIGHT
            if kind == REQUIRED_AFFINITY
            else term.weight
            if kind == PREFERRED_AFFINITY
            else -term.weight
        )
        sums.add(tables.domains(term.topology_key), rows, counts, weight)
    topology = sums.dicts()
    result: dict[str, Any] = {"topology": topology, "range": {"active": bool(topology), "min": 0, "max": 0}}
    if topology and feasible.size:
        raw = np.zeros(len(feasible), dtype=np.int64)
        for key in topology:
            raw += sums.row_sums(key, feasible)
        result["range"] = {"active": True, "min": int(raw.min()), "max": int(raw.max())}
    return result
