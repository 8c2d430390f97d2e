"""InterPodAffinity's PreFilter and PreScore state of a pod, over the index's tables."""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from policyd.scheduler.cluster.affinity_terms import (
    HARD_POD_AFFINITY_WEIGHT,
    AffinityTerm,
    PodTerms,
    matches_all,
)
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
    TermKey,
)


def empty_filter_state() -> dict[str, Any]:
    """The PreFilter state when no pod involved has inter-pod affinity terms."""
    return {"required": [], "anyMatch": False, "selfMatch": False, "anti": [], "existingAnti": {}}


def empty_score_state() -> dict[str, Any]:
    """The PreScore state when no pod involved has inter-pod affinity terms."""
    return {"topology": {}, "range": {"active": False, "min": 0, "max": 0}}


def _term_counts(tables: SnapshotTables, term: AffinityTerm) -> tuple[Hashable, Int64Array]:
    """Per row: pods `term` matches (namespace listed or selected, label selector); with the key
    of what was matched."""
    ns_labels = tables.namespace_labels

    def matched(p: CelObject) -> bool:
        return term.matches(p, ns_labels(str(p.get("namespace", ""))))

    key = (term.selector, term.namespaces, term.namespace_selector)
    return key, tables.pod_counts(("affinity-term", *key), matched)


def _all_terms_counts(tables: SnapshotTables, terms: Sequence[AffinityTerm]) -> tuple[Hashable, Int64Array]:
    """Per row: pods every one of `terms` matches; with the key of what was matched."""
    ns_labels = tables.namespace_labels

    def matched(p: CelObject) -> bool:
        return matches_all(terms, p, ns_labels(str(p.get("namespace", ""))))

    key = tuple((t.selector, t.namespaces, t.namespace_selector) for t in terms)
    return key, tables.pod_counts(("affinity-all", key), matched)


def _matching_keys(tables: SnapshotTables, pod: CelObject, kinds: Sequence[int]) -> list[TermKey]:
    """Existing pods' (kind, term) of `kinds` whose term matches `pod`."""
    ns_labels = tables.namespace_labels(str(pod.get("namespace", "")))
    return [key for key in tables.existing_term_keys() if key[0] in kinds and key[1].matches(pod, ns_labels)]


def filter_state(tables: SnapshotTables, pod: CelObject) -> dict[str, Any]:
    """Required (anti-)affinity state of the pod (`cluster.interPodAffinity`)."""
    terms = tables.index.pod_terms(pod)
    ns_labels = tables.namespace_labels(str(pod.get("namespace", "")))
    existing = _matching_keys(tables, pod, (REQUIRED_ANTI,))
    if _one_source_per_key(existing, terms.required_affinity, terms.required_anti):
        existing_counts, affinity_counts, anti_counts = _kept_counts(tables, existing, terms)
    else:
        existing_counts, affinity_counts, anti_counts = _summed_counts(tables, existing, terms)
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
        "existingAnti": existing_counts,
    }


Counts = dict[str, dict[Any, int]]  # per topology key: the domains with matching pods, and how many


def _one_source_per_key(
    existing: Sequence[TermKey], affinity: Sequence[AffinityTerm], anti: Sequence[AffinityTerm]
) -> bool:
    """Whether every topology key of each of the three counts comes from one term only (their
    counts are then each one term's, kept between pods; else they are summed afresh)."""
    return all(
        len({t.topology_key for t in group}) == len(group)
        for group in ([t for _, t in existing], affinity, anti)
    )


def _kept_counts(tables: SnapshotTables, existing: Sequence[TermKey], terms: PodTerms) -> tuple[Counts, ...]:
    """The three counts from per-term domain totals kept across pods (a bind updates its row's)."""

    def kept(key: Hashable, topology_key: str, amounts: Callable[[IntpArray], Int64Array]) -> dict[Any, int]:
        domains = tables.domains(topology_key)
        totals = tables.domain_totals(key, domains, lambda rows: (domains.codes[rows], amounts(rows)), True)
        return totals.counts()  # kept: copied into the state

    existing_counts = {}
    for term_key in existing:
        topology_key = term_key[1].topology_key
        counts = kept(
            ("affinity-existing-totals", term_key, topology_key),
            topology_key,
            functools.partial(tables.existing_term_counts, term_key),
        )
        if counts:
            existing_counts[topology_key] = dict(counts)
    affinity_counts = {}
    if terms.required_affinity:
        all_key, all_counts = _all_terms_counts(tables, terms.required_affinity)
        for t in terms.required_affinity:
            counts = kept(
                ("affinity-all-totals", all_key, t.topology_key), t.topology_key, all_counts.__getitem__
            )
            if counts:
                affinity_counts[t.topology_key] = counts
    anti_counts = {}
    for t in terms.required_anti:
        selector_key, term_counts = _term_counts(tables, t)
        counts = kept(
            ("affinity-term-totals", selector_key, t.topology_key), t.topology_key, term_counts.__getitem__
        )
        if counts:
            anti_counts[t.topology_key] = counts
    return existing_counts, affinity_counts, anti_counts


def _summed_counts(
    tables: SnapshotTables, existing: Sequence[TermKey], terms: PodTerms
) -> tuple[Counts, ...]:
    """The three counts summed afresh over the terms (some topology key has several)."""
    existing_sums = DomainSums(tables.n)
    for key in existing:
        rows, counts = tables.existing_term_carriers(key)
        existing_sums.add(tables.domains(key[1].topology_key), rows, counts)
    affinity = DomainSums(tables.n)
    anti = DomainSums(tables.n)
    if terms.required_affinity:
        _, counts = _all_terms_counts(tables, terms.required_affinity)
        rows = np.flatnonzero(counts)
        for t in terms.required_affinity:
            affinity.add(tables.domains(t.topology_key), rows, counts[rows])
    for t in terms.required_anti:
        _, counts = _term_counts(tables, t)
        rows = np.flatnonzero(counts)
        anti.add(tables.domains(t.topology_key), rows, counts[rows])
    return existing_sums.dicts(), affinity.dicts(), anti.dicts()


def score_state(tables: SnapshotTables, pod: CelObject, feasible: IntpArray) -> dict[str, Any]:
    """Per topology key and domain the accumulated term weights, and `{active, min, max}` of the
    raw scores over the `feasible` rows (PreScore)."""
    terms = tables.index.pod_terms(pod)
    sums = DomainSums(tables.n)
    for own, sign in ((terms.preferred_affinity, 1), (terms.preferred_anti, -1)):
        for t in own:
            _, counts = _term_counts(tables, t)
            rows = np.flatnonzero(counts)
            sums.add(tables.domains(t.topology_key), rows, counts[rows], sign * t.weight)
    kinds = (REQUIRED_AFFINITY, PREFERRED_AFFINITY, PREFERRED_ANTI)
    for kind, term in _matching_keys(tables, pod, kinds):
        rows, counts = tables.existing_term_carriers((kind, term))
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
