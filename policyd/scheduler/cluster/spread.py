"""PodTopologySpread's PreFilter and PreScore state of a pod, over the index's tables."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import numpy as np

from policyd.scheduler.cluster.selectors import (
    CelObject,
    required_node_affinity_matches,
    tolerates_node_taints,
)
from policyd.scheduler.cluster.spread_constraints import (
    LABEL_HOSTNAME,
    SCHEDULE_ANYWAY,
    SpreadConstraint,
    spread_constraint_state,
    spread_constraints,
)
from policyd.scheduler.cluster.tables import (
    FEW_ROWS,
    BoolArray,
    Domains,
    DomainTotals,
    Int64Array,
    IntpArray,
    SnapshotTables,
)
from policyd.scheduler.cluster.workloads import WorkloadIndex


def inactive_score_state() -> dict[str, Any]:
    """The PreScore state of a pod without soft constraints."""
    return {"scores": {}, "range": {"active": False, "min": 0, "max": 0}}


def _matching(
    tables: SnapshotTables, c: SpreadConstraint, namespace: str, rows: IntpArray | None = None
) -> Int64Array:
    """countPodsMatchSelector per row (at `rows` alone when given)."""
    if c.selector_empty:
        return np.zeros(tables.n if rows is None else len(rows), dtype=np.int64)
    key = ("spread-count", namespace, c.selector_key)

    def counted(p: CelObject) -> bool:
        return c.counts(p, namespace)

    return tables.pod_counts(key, counted) if rows is None else tables.pod_counts_at(key, counted, rows)


def _matching_one(tables: SnapshotTables, c: SpreadConstraint, namespace: str, row: int) -> int:
    """`_matching(tables, c, namespace)[row]`, bringing only that row up to date."""
    if c.selector_empty:
        return 0

    def counted(p: CelObject) -> bool:
        return c.counts(p, namespace)

    return tables.pod_count_one(("spread-count", namespace, c.selector_key), counted, row)


def _inclusion(c: SpreadConstraint, pod: CelObject) -> list[tuple[Hashable, Callable[[CelObject], bool]]]:
    """matchNodeInclusionPolicies: the node masks a node must be in (key, predicate)."""
    out: list[tuple[Hashable, Callable[[CelObject], bool]]] = []
    if c.honor_node_affinity:
        affinity = (pod.get("affinity") or {}).get("nodeAffinity") or {}
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        key = ("node-affinity", repr((pod.get("nodeSelector") or {}, required)))
        out.append((key, lambda node: required_node_affinity_matches(pod, node)))
    if c.honor_node_taints:
        tolerations = pod.get("tolerations") or ()
        out.append((("taints", repr(tolerations)), lambda node: tolerates_node_taints(tolerations, node)))
    return out


def _included(tables: SnapshotTables, c: SpreadConstraint, pod: CelObject) -> BoolArray:
    """matchNodeInclusionPolicies per row."""
    mask = np.ones(tables.n, dtype=bool)
    for key, predicate in _inclusion(c, pod):
        mask &= tables.node_mask(key, predicate)
    return mask


def _all_keys(tables: SnapshotTables, domains: Mapping[str, Domains]) -> BoolArray:
    mask = np.ones(tables.n, dtype=bool)
    for d in domains.values():
        mask &= d.codes >= 0
    return mask


def _domain_totals(
    tables: SnapshotTables,
    pod: CelObject,
    key: str,
    constraints: list[SpreadConstraint],
    domains: Mapping[str, Domains],
) -> DomainTotals:
    """The matching pods per domain of `key` over the nodes counted for the pod's constraints on
    `key` (every one of the pod's keys labelled, included by one of them; constraints sharing a key
    share its pairs: a node's count is the last including one's), kept across pods row by row."""
    ns = str(pod.get("namespace", ""))
    on_key = [c for c in constraints if c.topology_key == key]
    parts = [(c, _inclusion(c, pod)) for c in on_key]
    table_key = (
        "spread-totals",
        ns,
        key,
        tuple(domains),
        tuple((None if c.selector_empty else c.selector_key, tuple(k for k, _ in inc)) for c, inc in parts),
    )

    def row_values(rows: IntpArray) -> tuple[Int64Array, Int64Array]:
        if len(rows) <= FEW_ROWS:
            return few_row_values(rows)
        has_all = np.ones(len(rows), dtype=bool)
        for d in domains.values():
            has_all &= d.codes[rows] >= 0
        count = np.zeros(len(rows), dtype=np.int64)
        included = np.zeros(len(rows), dtype=bool)
        for c, inc in parts:
            mask = has_all.copy()
            for mask_key, predicate in inc:
                mask &= tables.node_mask_at(mask_key, predicate, rows)
            count = np.where(mask, _matching(tables, c, ns, rows), count)
            included |= mask
        return np.where(included, domains[key].codes[rows], -1), count

    def few_row_values(rows: IntpArray) -> tuple[Int64Array, Int64Array]:
        # `row_values` row by row: a bind changes a row or two, where numpy calls cost more than loops
        codes, counts = [], []
        own = domains[key].codes
        for row in rows.tolist():
            count, included = 0, False
            if all(d.codes[row] >= 0 for d in domains.values()):
                for c, inc in parts:
                    if all(tables.node_mask_one(mask_key, predicate, row) for mask_key, predicate in inc):
                        count, included = _matching_one(tables, c, ns, row), True
            codes.append(int(own[row]) if included else -1)
            counts.append(count)
        return np.array(codes, dtype=np.int64), np.array(counts, dtype=np.int64)

    return tables.domain_totals(table_key, domains[key], row_values)


def filter_state(
    tables: SnapshotTables, pod: CelObject, constraints: list[SpreadConstraint]
) -> list[dict[str, Any]]:
    """The pod's `constraints` (of one kind) with their domain counts (`cluster.topologySpread`)."""
    if not constraints:
        return []
    domains = {c.topology_key: tables.domains(c.topology_key) for c in constraints}
    counts = {key: _domain_totals(tables, pod, key, constraints, domains).counts() for key in domains}
    return [spread_constraint_state(c, pod, dict(counts[c.topology_key])) for c in constraints]


def score_state(
    tables: SnapshotTables, pod: CelObject, feasible: IntpArray, workloads: WorkloadIndex | None = None
) -> dict[str, Any]:
    """Raw scores by node name and their `{active, min, max}` over the `feasible` rows (PreScore)."""
    constraints, defaulted = spread_constraints(pod, SCHEDULE_ANYWAY, workloads)
    if not constraints or not feasible.size or not tables.n:
        return inactive_score_state()
    require_all = not defaulted
    ns = str(pod.get("namespace", ""))
    domains = {c.topology_key: tables.domains(c.topology_key) for c in constraints}
    # a missing label counts as the value "" (labels.get(key, "")) when pairing
    blank = {key: d.code("") for key, d in domains.items()}
    has_all = _all_keys(tables, domains)
    base = has_all if require_all else np.ones(tables.n, dtype=bool)
    if require_all:
        ignored = ~has_all[feasible]
        n_ignored = len(np.unique(feasible[ignored]))
        rows = feasible[~ignored]
    else:
        n_ignored, rows = 0, feasible
    paired = {key: np.where(d.codes >= 0, d.codes, blank[key]) for key, d in domains.items()}
    registered: dict[str, BoolArray] = {}
    weights = []
    for c in constraints:
        key = c.topology_key
        if key == LABEL_HOSTNAME:
            size = len(feasible) - n_ignored
        elif key in registered:
            size = 0  # the first constraint with this key registered every pair
        else:
            seen = np.zeros(len(domains[key].values), dtype=bool)
            seen[paired[key][rows]] = True
            registered[key] = seen
            size = int(seen.sum())
        weights.append(math.log(size + 2))
    pair_counts: dict[str, Int64Array] = {}
    for key, seen in registered.items():
        total = np.zeros(len(seen), dtype=np.int64)
        for c in constraints:
            if c.topology_key == key:
                hit = np.flatnonzero(base & _included(tables, c, pod) & seen[paired[key]])
                amounts = _matching(tables, c, ns)[hit]
                total += np.bincount(paired[key][hit], weights=amounts, minlength=len(seen)).astype(np.int64)
        pair_counts[key] = total
    scores = np.zeros(len(rows), dtype=np.float64)
    for c, weight in zip(constraints, weights, strict=True):
        key = c.topology_key
        present = domains[key].codes[rows] >= 0
        if key == LABEL_HOSTNAME:
            count = _matching(tables, c, ns)[rows]
        else:
            count = pair_counts[key][paired[key][rows]]
        scores = np.where(present, scores + (count * weight + (c.max_skew - 1)), scores)
    rounded = np.floor(scores + 0.5).astype(np.int64).tolist()  # Go math.Round, non-negative
    names = tables.names
    by_name = {names[r]: s for r, s in zip(rows.tolist(), rounded, strict=True)}
    if not by_name:
        return {"scores": by_name, "range": {"active": True, "min": 0, "max": 0}}
    return {"scores": by_name, "range": {"active": True, "min": min(rounded), "max": max(rounded)}}
