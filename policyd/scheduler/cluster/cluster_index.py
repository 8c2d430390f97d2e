"""Cluster index: the pod-independent part of the cluster view, kept across scheduling cycles.

A `ClusterIndex` belongs to one scheduler (one cache). It holds per-row tables over the snapshot:
matching-pod counts per (namespace, label selector) or affinity term, node inclusion masks per
node-affinity / tolerations key, the domain code of every row per topology key, the inter-pod
affinity terms of existing pods, and the image index. A table is brought up to date when it is used,
for the rows whose snapshot version differs from the one it was computed at (what-if rows of
derived snapshots, version -1, are always recomputed); rows are carried over by node name when the
layout changes. Keyed tables live in an LRU bounded by `max_tables`.

`IndexedCluster` is the view of the index for one snapshot: the `ClusterView` per-pod states
(PodTopologySpread and InterPodAffinity PreFilter/PreScore, ImageLocality) computed with numpy over
the tables. Results are identical to the view's reference walks over every node and pod.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from policyd.scheduler.cluster.cluster_view import (
    HARD_POD_AFFINITY_WEIGHT,
    LABEL_HOSTNAME,
    SCHEDULE_ANYWAY,
    AffinityTerm,
    CelObject,
    ClusterView,
    PodTerms,
    SpreadConstraint,
    _matches_all,
    _spread_constraints,
    pod_terms,
    required_node_affinity_matches,
    spread_constraint_state,
    tolerates_node_taints,
)

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
IntpArray = npt.NDArray[np.intp]
NamespaceLabels = Callable[[str], Mapping[str, str]]

DEFAULT_MAX_TABLES = 256
POD_TERMS_CACHE = 65536
_NEVER = -2  # a stored row version no snapshot row has (what-if rows have -1)
# kinds of existing pods' inter-pod affinity terms
REQUIRED_AFFINITY, REQUIRED_ANTI, PREFERRED_AFFINITY, PREFERRED_ANTI = range(4)
# table kinds whose values depend on the namespace labels
_NAMESPACE_DEPENDENT = ("affinity-all", "affinity-term")

TermKey = tuple[int, AffinityTerm]


def _take(values: npt.NDArray[Any], perm: IntpArray, fill: Any) -> npt.NDArray[Any]:
    """`values` re-ordered so that new row i holds old row perm[i] (-1: `fill`)."""
    out = values[np.maximum(perm, 0)] if len(values) else np.zeros(len(perm), dtype=values.dtype)
    out[perm < 0] = fill
    return out


class _Table:
    """Per-row values of one kind; row r is valid while `versions[r]` equals the snapshot's."""

    def __init__(self, n: int) -> None:
        self.versions: Int64Array = np.full(n, _NEVER, dtype=np.int64)

    def update(self, rows: list[int], cels: Sequence[CelObject]) -> None:
        """Recompute `rows` from the snapshot's node dicts."""
        raise NotImplementedError

    def remap(self, perm: IntpArray) -> None:
        """Carry rows over to a new layout (perm[i]: old row of new row i, -1 for new rows)."""
        self.versions = _take(self.versions, perm, _NEVER)


class _PodCounts(_Table):
    """Per row: how many of the node's pods satisfy a predicate."""

    def __init__(self, n: int, predicate: Callable[[CelObject], bool]) -> None:
        super().__init__(n)
        self.predicate = predicate
        self.values: Int64Array = np.zeros(n, dtype=np.int64)

    def update(self, rows: list[int], cels: Sequence[CelObject]) -> None:
        pred, values = self.predicate, self.values
        for r in rows:
            values[r] = sum(1 for p in cels[r].get("pods") or () if pred(p))

    def remap(self, perm: IntpArray) -> None:
        super().remap(perm)
        self.values = _take(self.values, perm, 0)


class _NodeMask(_Table):
    """Per row: whether the node satisfies a predicate."""

    def __init__(self, n: int, predicate: Callable[[CelObject], bool]) -> None:
        super().__init__(n)
        self.predicate = predicate
        self.values: BoolArray = np.zeros(n, dtype=bool)

    def update(self, rows: list[int], cels: Sequence[CelObject]) -> None:
        pred, values = self.predicate, self.values
        for r in rows:
            values[r] = pred(cels[r])

    def remap(self, perm: IntpArray) -> None:
        super().remap(perm)
        self.values = _take(self.values, perm, False)


class _Domains(_Table):
    """Per row: the code of the node's value of one topology label (-1: no such label)."""

    def __init__(self, n: int, key: str) -> None:
        super().__init__(n)
        self.key = key
        self.codes: Int64Array = np.full(n, -1, dtype=np.int64)
        self.values: list[Any] = []
        self._code_of: dict[Any, int] = {}

    def code(self, value: Any) -> int:
        """The code of a label value (allocated on first sight)."""
        code = self._code_of.get(value)
        if code is None:
            code = self._code_of[value] = len(self.values)
            self.values.append(value)
        return code

    def update(self, rows: list[int], cels: Sequence[CelObject]) -> None:
        key, codes = self.key, self.codes
        for r in rows:
            value = (cels[r].get("labels") or {}).get(key)
            codes[r] = -1 if value is None else self.code(value)

    def remap(self, perm: IntpArray) -> None:
        super().remap(perm)
        self.codes = _take(self.codes, perm, -1)


class _RowIds(_Table):
    """The row of every snapshot node dict, by identity (the dicts are held, so ids stay unique)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self._held: list[CelObject | None] = [None] * n
        self.rows: dict[int, int] = {}

    def update(self, rows: list[int], cels: Sequence[CelObject]) -> None:
        held, ids = self._held, self.rows
        for r in rows:
            old = held[r]
            if old is not None and ids.get(id(old)) == r:
                del ids[id(old)]
            held[r] = cels[r]
            ids[id(cels[r])] = r

    def remap(self, perm: IntpArray) -> None:
        super().remap(perm)
        self._held = [self._held[r] if r >= 0 else None for r in perm.tolist()]
        self.rows = {id(c): r for r, c in enumerate(self._held) if c is not None}


class _ExistingTerms(_Table):
    """The inter-pod affinity terms of existing pods: per (kind, term), the rows carrying it."""

    def __init__(self, n: int, terms_of: Callable[[CelObject], PodTerms]) -> None:
        super().__init__(n)
        self._terms_of = terms_of
        self._row_terms: dict[int, Counter[TermKey]] = {}
        self._term_rows: dict[TermKey, dict[int, int]] = {}
        self._arrays: dict[TermKey, tuple[IntpArray, Int64Array]] = {}

    def update(self, rows: list[int], cels: Sequence[CelObject]) -> None:
        for r in rows:
            for key in self._row_terms.pop(r, ()):
                carriers = self._term_rows[key]
                del carriers[r]
                if not carriers:
                    del self._term_rows[key]
                self._arrays.pop(key, None)
            found: Counter[TermKey] = Counter()
            for p in cels[r].get("pods") or ():
                if not p.get("affinity"):
                    continue
                terms = self._terms_of(p)
                for kind, group in enumerate(
                    (
                        terms.required_affinity,
                        terms.required_anti,
                        terms.preferred_affinity,
                        terms.preferred_anti,
                    )
                ):
                    for t in group:
                        found[(kind, t)] += 1
            if found:
                self._row_terms[r] = found
                for key, count in found.items():
                    self._term_rows.setdefault(key, {})[r] = count
                    self._arrays.pop(key, None)

    def remap(self, perm: IntpArray) -> None:
        old_n = len(self.versions)
        super().remap(perm)
        new_of_old = np.full(old_n, -1, dtype=np.intp)
        kept = np.flatnonzero(perm >= 0)
        new_of_old[perm[kept]] = kept
        moved = new_of_old.tolist()
        self._row_terms = {moved[r]: c for r, c in self._row_terms.items() if moved[r] >= 0}
        self._term_rows = {}
        for r, found in self._row_terms.items():
            for key, count in found.items():
                self._term_rows.setdefault(key, {})[r] = count
        self._arrays = {}

    def terms(self) -> list[tuple[TermKey, IntpArray, Int64Array]]:
        """Every (kind, term) with the rows carrying it and how many pods there carry it."""
        out = []
        for key, carriers in self._term_rows.items():
            arrays = self._arrays.get(key)
            if arrays is None:
                arrays = self._arrays[key] = (
                    np.fromiter(carriers.keys(), dtype=np.intp, count=len(carriers)),
                    np.fromiter(carriers.values(), dtype=np.int64, count=len(carriers)),
                )
            out.append((key, arrays[0], arrays[1]))
        return out


class _Images(_Table):
    """ImageLocality's ImageStateSummary: nodes per image, size from the first node reporting it."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self._row_images: dict[int, dict[str, int]] = {}
        self._holders: dict[str, dict[int, int]] = {}
        self._first: dict[str, int] = {}

    def update(self, rows: list[int], cels: Sequence[CelObject]) -> None:
        for r in rows:
            for name in self._row_images.pop(r, ()):
                holders = self._holders[name]
                del holders[r]
                if not holders:
                    del self._holders[name]
                if self._first.get(name) == r:
                    del self._first[name]
            images = {name: int(size) for name, size in (cels[r].get("images") or {}).items()}
            if images:
                self._row_images[r] = images
                for name, size in images.items():
                    self._holders.setdefault(name, {})[r] = size
                    first = self._first.get(name)
                    if first is not None and r < first:
                        self._first[name] = r

    def remap(self, perm: IntpArray) -> None:
        super().remap(perm)
        self.versions[:] = _NEVER  # rebuilt from scratch: layouts change rarely
        self._row_images, self._holders, self._first = {}, {}, {}

    def lookup(self, image: str) -> tuple[int, int]:
        """(number of nodes with the image, its size on the first of them in row order)."""
        holders = self._holders.get(image)
        if not holders:
            return 0, 0
        first = self._first.get(image)
        if first is None:
            first = self._first[image] = min(holders)
        return len(holders), holders[first]


class ClusterIndex:
    """Per-row tables over one cache's snapshots, kept across scheduling cycles."""

    def __init__(self, max_tables: int = DEFAULT_MAX_TABLES) -> None:
        self.max_tables = max_tables
        self._names: tuple[str, ...] = ()
        self._tables: OrderedDict[Hashable, _Table] = OrderedDict()
        self._terms: _ExistingTerms | None = None
        self._images: _Images | None = None
        self._row_ids: _RowIds | None = None
        self._namespace_labels: dict[str, Mapping[str, str]] = {}
        self._pod_terms: dict[int, tuple[CelObject, PodTerms]] = {}
        self.rows_updated = 0  # rows recomputed, over every table (tests and profiling)

    def bind(
        self,
        snapshot: Any,
        namespace_labels: NamespaceLabels,
        namespace_map: Mapping[str, Mapping[str, str]],
    ) -> IndexedCluster | None:
        """The index's view of `snapshot` (None when it has no row versions: use the reference)."""
        versions = getattr(snapshot, "versions", None)
        names = getattr(snapshot, "names", None)
        if not isinstance(versions, np.ndarray) or not callable(names):
            return None
        current = names()
        if current != self._names or len(versions) != len(current):
            self._relayout(current)
        if namespace_map != self._namespace_labels:
            self._namespace_labels = dict(namespace_map)
            for key in [k for k in self._tables if k[0] in _NAMESPACE_DEPENDENT]:  # type: ignore[index]
                del self._tables[key]
        return IndexedCluster(self, snapshot, namespace_labels)

    def _relayout(self, names: tuple[str, ...]) -> None:
        old = {name: i for i, name in enumerate(self._names)}
        perm = np.array([old.get(name, -1) for name in names], dtype=np.intp)
        for table in self._all_tables():
            table.remap(perm)
        self._names = names

    def _all_tables(self) -> list[_Table]:
        out = list(self._tables.values())
        out += [t for t in (self._terms, self._images, self._row_ids) if t is not None]
        return out

    def table(self, key: Hashable, make: Callable[[int], _Table]) -> _Table:
        """The keyed table `key` (created by `make(rows)`), most recently used."""
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = make(len(self._names))
            while len(self._tables) > self.max_tables:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(key)
        return table

    def existing_terms(self) -> _ExistingTerms:
        """The table of existing pods' inter-pod affinity terms."""
        if self._terms is None:
            self._terms = _ExistingTerms(len(self._names), self.pod_terms)
        return self._terms

    def row_ids(self) -> _RowIds:
        """The table of rows by node dict identity."""
        if self._row_ids is None:
            self._row_ids = _RowIds(len(self._names))
        return self._row_ids

    def images(self) -> _Images:
        """The image table."""
        if self._images is None:
            self._images = _Images(len(self._names))
        return self._images

    def pod_terms(self, pod: CelObject) -> PodTerms:
        """`pod_terms(pod)`, remembered per pod dict (pod dicts are never changed in place)."""
        hit = self._pod_terms.get(id(pod))
        if hit is not None and hit[0] is pod:
            return hit[1]
        terms = pod_terms(pod)
        if len(self._pod_terms) >= POD_TERMS_CACHE:
            self._pod_terms.clear()
        self._pod_terms[id(pod)] = (pod, terms)
        return terms

    def table_count(self) -> int:
        """Number of keyed tables held."""
        return len(self._tables)


def cluster_view_factory(max_tables: int = DEFAULT_MAX_TABLES) -> Callable[[Any], ClusterView]:
    """A `ClusterView` factory for one scheduler: every view shares one long-lived `ClusterIndex`."""
    index = ClusterIndex(max_tables)

    def make(snapshot: Any) -> ClusterView:
        return ClusterView(snapshot, index=index)

    return make


class _DomainSums:
    """Per topology key: sums per domain code and the rows that touched a domain (first-row order)."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._keys: dict[str, tuple[_Domains, Int64Array, BoolArray]] = {}

    def add(self, domains: _Domains, rows: IntpArray, amounts: Int64Array, weight: int = 1) -> None:
        """Add `weight * amounts[i]` to the domain of `rows[i]` (rows without the label: skipped)."""
        entry = self._keys.get(domains.key)
        if entry is None:
            entry = (domains, np.zeros(len(domains.values), dtype=np.int64), np.zeros(self._n, dtype=bool))
            self._keys[domains.key] = entry
        domains = entry[0]  # the codes this computation started with (the table may have been evicted)
        if len(domains.values) > len(entry[1]):
            grown = np.zeros(len(domains.values), dtype=np.int64)
            grown[: len(entry[1])] = entry[1]
            entry = self._keys[domains.key] = (domains, grown, entry[2])
        codes = domains.codes[rows]
        keep = codes >= 0
        if not keep.all():
            rows, codes, amounts = rows[keep], codes[keep], amounts[keep]
        if not rows.size:
            return
        sums = np.bincount(codes, weights=amounts, minlength=len(entry[1]))
        entry[1][:] += sums.astype(np.int64) * weight
        entry[2][rows] = True

    def counts(self, key: str) -> dict[Any, int]:
        """The touched domains of `key` and their sums, in the order of their first row."""
        entry = self._keys.get(key)
        if entry is None:
            return {}
        domains, sums, touched = entry
        rows = np.flatnonzero(touched)
        if not rows.size:
            return {}
        codes, first = np.unique(domains.codes[rows], return_index=True)
        values = domains.values
        return {values[c]: int(sums[c]) for c in codes[np.argsort(first)].tolist()}

    def dicts(self) -> dict[str, dict[Any, int]]:
        """`counts(key)` of every key with at least one touched domain."""
        out = {}
        for key in self._keys:
            counts = self.counts(key)
            if counts:
                out[key] = counts
        return out

    def row_sums(self, key: str, rows: IntpArray) -> Int64Array:
        """The sum of each row's domain (0 for rows without the label)."""
        domains, sums, _ = self._keys[key]
        codes = domains.codes[rows]
        return np.where(codes >= 0, sums[np.maximum(codes, 0)], 0)


class IndexedCluster:
    """The index's tables brought up to date for one snapshot, and the per-pod states over them."""

    def __init__(self, index: ClusterIndex, snapshot: Any, namespace_labels: NamespaceLabels) -> None:
        self._index = index
        self._snapshot = snapshot
        self._cels: Sequence[CelObject] = snapshot.cels()
        self._versions: Int64Array = snapshot.versions
        self._stored = np.where(self._versions < 0, _NEVER, self._versions)
        self._n = len(self._cels)
        self._namespace_labels = namespace_labels
        self._image_memo: dict[str, tuple[int, int]] = {}

    # -- tables ---------------------------------------------------------------------------------

    def _sync(self, table: _Table) -> _Table:
        rows = np.flatnonzero(table.versions != self._versions)
        if rows.size:
            table.update(rows.tolist(), self._cels)
            table.versions[rows] = self._stored[rows]
            self._index.rows_updated += int(rows.size)
        return table

    def pod_counts(self, key: Hashable, predicate: Callable[[CelObject], bool]) -> Int64Array:
        """Per row: pods satisfying `predicate` (one table per `key`; do not modify)."""
        table = self._index.table(key, lambda n: _PodCounts(n, predicate))
        return self._sync(table).values  # type: ignore[attr-defined, no-any-return]

    def node_mask(self, key: Hashable, predicate: Callable[[CelObject], bool]) -> BoolArray:
        """Per row: whether the node satisfies `predicate` (one table per `key`; do not modify)."""
        table = self._index.table(key, lambda n: _NodeMask(n, predicate))
        return self._sync(table).values  # type: ignore[attr-defined, no-any-return]

    def domains(self, key: str) -> _Domains:
        """The domain codes of topology key `key`."""
        table = self._index.table(("domains", key), lambda n: _Domains(n, key))
        return self._sync(table)  # type: ignore[return-value]

    def rows_of(self, nodes: Sequence[CelObject] | None) -> IntpArray | None:
        """Rows of node dicts of this snapshot (None: every row); None if one is not a snapshot row."""
        if nodes is None or nodes is self._cels:
            return np.arange(self._n, dtype=np.intp)
        row_of = self._sync(self._index.row_ids()).rows  # type: ignore[attr-defined]
        rows = [row_of.get(id(c), -1) for c in nodes]
        if -1 in rows:
            return None
        return np.array(rows, dtype=np.intp)

    def image(self, image: str) -> tuple[int, int]:
        """(nodes with `image`, its size on the first of them)."""
        hit = self._image_memo.get(image)
        if hit is None:
            table = self._sync(self._index.images())
            hit = self._image_memo[image] = table.lookup(image)  # type: ignore[attr-defined]
        return hit

    # -- PodTopologySpread ---------------------------------------------------------------------

    def _matching(self, c: SpreadConstraint, namespace: str) -> Int64Array:
        """countPodsMatchSelector per row."""
        if c.selector_empty:
            return np.zeros(self._n, dtype=np.int64)
        matches = c.matches

        def counted(p: CelObject) -> bool:
            return not p.get("deleting") and p.get("namespace") == namespace and matches(p)

        return self.pod_counts(("spread-count", namespace, c.selector_key), counted)

    def _included(self, c: SpreadConstraint, pod: CelObject) -> BoolArray:
        """matchNodeInclusionPolicies per row."""
        mask = np.ones(self._n, dtype=bool)
        if c.honor_node_affinity:
            affinity = (pod.get("affinity") or {}).get("nodeAffinity") or {}
            required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
            key = ("node-affinity", repr((pod.get("nodeSelector") or {}, required)))
            mask &= self.node_mask(key, lambda node: required_node_affinity_matches(pod, node))
        if c.honor_node_taints:
            tolerations = pod.get("tolerations") or ()
            key = ("taints", repr(tolerations))
            mask &= self.node_mask(key, lambda node: tolerates_node_taints(tolerations, node))
        return mask

    def _all_keys(self, domains: Mapping[str, _Domains]) -> BoolArray:
        mask = np.ones(self._n, dtype=bool)
        for d in domains.values():
            mask &= d.codes >= 0
        return mask

    def spread_filter_state(self, pod: CelObject, when: str) -> list[dict[str, Any]]:
        """`ClusterView.topology_spread` state (PodTopologySpread PreFilter)."""
        constraints, _ = _spread_constraints(pod, when)
        if not constraints:
            return []
        ns = str(pod.get("namespace", ""))
        domains = {c.topology_key: self.domains(c.topology_key) for c in constraints}
        has_all = self._all_keys(domains)
        sums = _DomainSums(self._n)
        for key, d in domains.items():
            # constraints sharing a key share its pairs; a node's count is the last including one's
            count = np.zeros(self._n, dtype=np.int64)
            included = np.zeros(self._n, dtype=bool)
            for c in constraints:
                if c.topology_key == key:
                    inc = has_all & self._included(c, pod)
                    count = np.where(inc, self._matching(c, ns), count)
                    included |= inc
            rows = np.flatnonzero(included)
            sums.add(d, rows, count[rows])
        return [spread_constraint_state(c, pod, sums.counts(c.topology_key)) for c in constraints]

    def spread_score_state(
        self, pod: CelObject, feasible_nodes: Sequence[CelObject] | None
    ) -> dict[str, Any] | None:
        """`ClusterView` PodTopologySpread PreScore state over the feasible nodes (None: every node);
        None when a feasible node is not a row of the snapshot."""
        inactive = {"scores": {}, "range": {"active": False, "min": 0, "max": 0}}
        constraints, defaulted = _spread_constraints(pod, SCHEDULE_ANYWAY)
        if not constraints or (feasible_nodes is not None and not feasible_nodes) or not self._n:
            return inactive
        feasible = self.rows_of(feasible_nodes)
        if feasible is None:
            return None
        require_all = not defaulted
        ns = str(pod.get("namespace", ""))
        domains = {c.topology_key: self.domains(c.topology_key) for c in constraints}
        # a missing label counts as the value "" (labels.get(key, "")) when pairing
        blank = {key: d.code("") for key, d in domains.items()}
        has_all = self._all_keys(domains)
        base = has_all if require_all else np.ones(self._n, dtype=bool)
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
                    hit = np.flatnonzero(base & self._included(c, pod) & seen[paired[key]])
                    amounts = self._matching(c, ns)[hit]
                    total += np.bincount(paired[key][hit], weights=amounts, minlength=len(seen)).astype(
                        np.int64
                    )
            pair_counts[key] = total
        scores = np.zeros(len(rows), dtype=np.float64)
        for c, weight in zip(constraints, weights, strict=True):
            key = c.topology_key
            present = domains[key].codes[rows] >= 0
            if key == LABEL_HOSTNAME:
                count = self._matching(c, ns)[rows]
            else:
                count = pair_counts[key][paired[key][rows]]
            scores = np.where(present, scores + (count * weight + (c.max_skew - 1)), scores)
        rounded = np.floor(scores + 0.5).astype(np.int64).tolist()  # Go math.Round, non-negative
        names = self._snapshot.names()
        by_name = {names[r]: s for r, s in zip(rows.tolist(), rounded, strict=True)}
        if not by_name:
            return {"scores": by_name, "range": {"active": True, "min": 0, "max": 0}}
        return {"scores": by_name, "range": {"active": True, "min": min(rounded), "max": max(rounded)}}

    # -- InterPodAffinity ----------------------------------------------------------------------

    def _term_counts(self, term: AffinityTerm) -> Int64Array:
        """Per row: pods `term` matches (namespace listed or selected, label selector)."""
        ns_labels = self._namespace_labels

        def matched(p: CelObject) -> bool:
            return term.matches(p, ns_labels(str(p.get("namespace", ""))))

        key = ("affinity-term", term.selector, term.namespaces, term.namespace_selector)
        return self.pod_counts(key, matched)

    def _all_terms_counts(self, terms: Sequence[AffinityTerm]) -> Int64Array:
        """Per row: pods every one of `terms` matches."""
        ns_labels = self._namespace_labels

        def matched(p: CelObject) -> bool:
            return _matches_all(terms, p, ns_labels(str(p.get("namespace", ""))))

        key = ("affinity-all", tuple((t.selector, t.namespaces, t.namespace_selector) for t in terms))
        return self.pod_counts(key, matched)

    def _existing_matching(
        self, pod: CelObject, kinds: Sequence[int]
    ) -> list[tuple[int, AffinityTerm, IntpArray, Int64Array]]:
        """Existing pods' terms of `kinds` that match `pod`, with their carrying rows and counts."""
        ns_labels = self._namespace_labels(str(pod.get("namespace", "")))
        table = self._sync(self._index.existing_terms())
        out = []
        for (kind, term), rows, counts in table.terms():  # type: ignore[attr-defined]
            if kind in kinds and term.matches(pod, ns_labels):
                out.append((kind, term, rows, counts))
        return out

    def affinity_filter_state(self, pod: CelObject) -> dict[str, Any]:
        """`ClusterView.inter_pod_affinity` state (InterPodAffinity PreFilter)."""
        terms = self._index.pod_terms(pod)
        ns_labels = self._namespace_labels(str(pod.get("namespace", "")))
        existing = _DomainSums(self._n)
        for _, term, rows, counts in self._existing_matching(pod, (REQUIRED_ANTI,)):
            existing.add(self.domains(term.topology_key), rows, counts)
        affinity = _DomainSums(self._n)
        anti = _DomainSums(self._n)
        if terms.required_affinity:
            counts = self._all_terms_counts(terms.required_affinity)
            rows = np.flatnonzero(counts)
            for t in terms.required_affinity:
                affinity.add(self.domains(t.topology_key), rows, counts[rows])
        for t in terms.required_anti:
            counts = self._term_counts(t)
            rows = np.flatnonzero(counts)
            anti.add(self.domains(t.topology_key), rows, counts[rows])
        affinity_counts = affinity.dicts()
        anti_counts = anti.dicts()
        return {
            "required": [
                {"topologyKey": t.topology_key, "counts": dict(affinity_counts.get(t.topology_key, {}))}
                for t in terms.required_affinity
            ],
            "anyMatch": bool(affinity_counts),
            "selfMatch": _matches_all(terms.required_affinity, pod, ns_labels),
            "anti": [
                {"topologyKey": t.topology_key, "counts": dict(anti_counts.get(t.topology_key, {}))}
                for t in terms.required_anti
            ],
            "existingAnti": existing.dicts(),
        }

    def affinity_score_state(
        self, pod: CelObject, feasible_nodes: Sequence[CelObject] | None
    ) -> dict[str, Any] | None:
        """`ClusterView` InterPodAffinity PreScore state over the feasible nodes (None: every node);
        None when a feasible node is not a row of the snapshot."""
        terms = self._index.pod_terms(pod)
        sums = _DomainSums(self._n)
        for own, sign in ((terms.preferred_affinity, 1), (terms.preferred_anti, -1)):
            for t in own:
                counts = self._term_counts(t)
                rows = np.flatnonzero(counts)
                sums.add(self.domains(t.topology_key), rows, counts[rows], sign * t.weight)
        kinds = (REQUIRED_AFFINITY, PREFERRED_AFFINITY, PREFERRED_ANTI)
        for kind, term, rows, counts in self._existing_matching(pod, kinds):
            weight = (
                HARD_POD_AFFINITY_WEIGHT
                if kind == REQUIRED_AFFINITY
                else term.weight
                if kind == PREFERRED_AFFINITY
                else -term.weight
            )
            sums.add(self.domains(term.topology_key), rows, counts, weight)
        topology = sums.dicts()
        result: dict[str, Any] = {
            "topology": topology,
            "range": {"active": bool(topology), "min": 0, "max": 0},
        }
        if topology and (feasible_nodes is None or feasible_nodes):
            feasible = self.rows_of(feasible_nodes)
            if feasible is None:
                return None
            raw = np.zeros(len(feasible), dtype=np.int64)
            for key in topology:
                raw += sums.row_sums(key, feasible)
            result["range"] = {"active": True, "min": int(raw.min()), "max": int(raw.max())}
        return result
