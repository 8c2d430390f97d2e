"""Per-row tables over the snapshot, kept across scheduling cycles (the `cluster` functions' index).

A `ClusterIndex` belongs to one scheduler (one cache). It holds per-row tables over the snapshot:
matching-pod counts per (namespace, label selector) or affinity term, node inclusion masks per
node-affinity / tolerations key, the domain code of every row per topology key, the inter-pod
affinity terms of existing pods, and the image index. `ClusterIndex.bind(snapshot)` gives the
`SnapshotTables` of one snapshot: a table is brought up to date when it is used, for the rows whose
snapshot version differs from the one it was computed at. What-if rows of derived snapshots (version
-1) get a version of their own per binding, so they are computed once per binding and again in the
next one; rows are carried over by node name when the layout changes. Keyed tables live in an LRU
bounded by `max_tables`.
"""

from __future__ import annotations

import operator
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import numpy.typing as npt

from policyd.framework import RowSelection
from policyd.scheduler.cluster.affinity_terms import AffinityTerm, PodTerms, namespace_labels, pod_terms
from policyd.scheduler.cluster.selectors import CelObject

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
IntpArray = npt.NDArray[np.intp]

DEFAULT_MAX_TABLES = 256
# changed rows up to this many (a bind's) are handled row by row, where numpy calls cost more than loops
FEW_ROWS = 8
POD_TERMS_CACHE = 65536
_NEVER = -2  # a stored row version no snapshot row has (what-if rows have -1; bindings give them < -2)
# kinds of existing pods' inter-pod affinity terms
REQUIRED_AFFINITY, REQUIRED_ANTI, PREFERRED_AFFINITY, PREFERRED_ANTI = range(4)
# table kinds whose values depend on the namespace labels
_NAMESPACE_DEPENDENT = ("affinity-all", "affinity-term", "affinity-all-totals", "affinity-term-totals")

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


TableT = TypeVar("TableT", bound=_Table)


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


class Domains(_Table):
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


class DomainTotals(_Table):
    """Per row: the domain (of one `Domains` table) it counts for and its amount; per domain: the
    total. Rows are set one by one from the tables they derive from (a bind
    moves one row's amount and so one domain's total), not from the node dicts."""

    def __init__(self, n: int, domains: Domains, nonzero: bool = False) -> None:
        super().__init__(n)
        self.domains = domains  # whose codes the rows hold (a new `Domains` table needs a new one)
        self.nonzero = nonzero  # `counts()` holds only the domains whose total is not 0
        self.codes: Int64Array = np.full(n, -1, dtype=np.int64)  # -1: the row counts for no domain
        self.amounts: Int64Array = np.zeros(n, dtype=np.int64)
        self.totals: Int64Array = np.zeros(0, dtype=np.int64)
        self._order: list[int] | None = None  # counted domains by their first row
        # `counts()` as last built, kept up to date by a bind's few rows (None: build it again)
        self._counts: dict[Any, int] | None = None

    def set_rows(self, rows: IntpArray, codes: Int64Array, amounts: Int64Array) -> None:
        """Row `rows[i]` now counts `amounts[i]` for domain `codes[i]` (-1: for none)."""
        size = len(self.domains.values)
        if size > len(self.totals):
            self.totals = np.concatenate([self.totals, np.zeros(size - len(self.totals), dtype=np.int64)])
        old = self.codes[rows]
        if len(rows) <= FEW_ROWS:  # a few rows (a bind's): domain by domain
            totals = self.totals
            moves = zip(
                old.tolist(), self.amounts[rows].tolist(), codes.tolist(), amounts.tolist(), strict=True
            )
            touched = []
            for was, had, code, amount in moves:
                if was >= 0:
                    totals[was] -= had
                    touched.append(was)
                if code >= 0:
                    totals[code] += amount
                    touched.append(code)
                if was != code:
                    self._order = None
            kept = self._counts
            if kept is not None and self._order is not None:  # the same domains: new totals
                values = self.domains.values
                for c in touched:
                    total = int(totals[c])
                    if total or not self.nonzero:
                        kept[values[c]] = total  # a domain counted anew goes last
                    else:
                        kept.pop(values[c], None)
            else:
                self._counts = None
        else:
            self._counts = None
            for sign, c, a in ((-1, old, self.amounts[rows]), (1, codes, amounts)):
                counted = c >= 0
                if counted.any():
                    c, a = c[counted], a[counted]
                    self.totals += sign * np.bincount(c, weights=a, minlength=size).astype(np.int64)
            if not np.array_equal(old, codes):
                self._order = None
        self.codes[rows] = codes
        self.amounts[rows] = amounts

    def counts(self) -> dict[Any, int]:
        """The counted domains' values and totals (`nonzero`: only those not 0), in the order of
        their first row (with an amount, when `nonzero`) as last built; kept between calls and
        updated by `set_rows`, where a domain `nonzero` counts anew goes last. The caller must not
        change it."""
        if self._order is None or (self.nonzero and self._counts is None):  # which are not 0 moved
            counted = self.codes >= 0
            if self.nonzero:
                counted &= self.amounts != 0
            rows = np.flatnonzero(counted)
            codes, first = np.unique(self.codes[rows], return_index=True)
            self._order = codes[np.argsort(first)].tolist()
            self._counts = None
        if self._counts is None:
            values, totals = self.domains.values, self.totals
            self._counts = {values[c]: int(totals[c]) for c in self._order if totals[c] or not self.nonzero}
        return self._counts

    def update(self, rows: list[int], cels: Sequence[CelObject]) -> None:
        raise TypeError("domain totals are set from other tables (SnapshotTables.domain_totals)")

    def remap(self, perm: IntpArray) -> None:
        super().remap(perm)
        self.versions[:] = _NEVER  # recounted from scratch: layouts change rarely
        self.codes = np.full(len(perm), -1, dtype=np.int64)
        self.amounts = np.zeros(len(perm), dtype=np.int64)
        self.totals[:] = 0
        self._order = None
        self._counts = None


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

    def keys(self) -> list[TermKey]:
        """Every (kind, term) some row carries."""
        return list(self._term_rows)

    def row_counts(self, key: TermKey, rows: IntpArray) -> Int64Array:
        """Per row of `rows`: how many pods there carry (kind, term) `key`."""
        carriers = self._term_rows.get(key, {})
        return np.fromiter((carriers.get(r, 0) for r in rows.tolist()), dtype=np.int64, count=len(rows))

    def carriers(self, key: TermKey) -> tuple[IntpArray, Int64Array]:
        """The rows carrying (kind, term) `key` and how many pods there carry it."""
        arrays = self._arrays.get(key)
        if arrays is None:
            carriers = self._term_rows.get(key, {})
            arrays = self._arrays[key] = (
                np.fromiter(carriers.keys(), dtype=np.intp, count=len(carriers)),
                np.fromiter(carriers.values(), dtype=np.int64, count=len(carriers)),
            )
        return arrays


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


class SnapshotRows(Protocol):
    """What the index reads of a snapshot (policyd.scheduler.snapshot.Snapshot, derived ones too)."""

    @property
    def versions(self) -> Int64Array:
        """Per row: the cache generation the row was copied at (-1: a what-if row)."""
        ...

    def cels(self) -> Sequence[CelObject]:
        """The CEL node dicts, one per row."""
        ...

    def names(self) -> tuple[str, ...]:
        """The node names, one per row."""
        ...


class ClusterIndex:
    """Per-row tables over one cache's snapshots, kept across scheduling cycles."""

    def __init__(self, max_tables: int = DEFAULT_MAX_TABLES) -> None:
        self.max_tables = max_tables
        self._names: tuple[str, ...] = ()
        self._rows: dict[str, int] = {}
        self._tables: OrderedDict[Hashable, _Table] = OrderedDict()
        self._terms: _ExistingTerms | None = None
        self._images: _Images | None = None
        self._namespace_labels: dict[str, Mapping[str, str]] = {}
        self._pod_terms: dict[int, tuple[CelObject, PodTerms]] = {}
        self._last_what_if = _NEVER
        self.rows_updated = 0  # rows recomputed, over every table (tests and profiling)

    def bind(self, snapshot: SnapshotRows, namespace_map: Mapping[str, Mapping[str, str]]) -> SnapshotTables:
        """The tables of `snapshot` (brought up to date on use); `namespace_map`: known namespaces' labels."""
        self.use_layout(snapshot.names())
        if namespace_map != self._namespace_labels:
            self._namespace_labels = dict(namespace_map)
            for key in [k for k in self._tables if k[0] in _NAMESPACE_DEPENDENT]:  # type: ignore[index]
                del self._tables[key]
        self._last_what_if -= 1
        return SnapshotTables(self, snapshot, self._namespace_labels, self._last_what_if)

    def use_layout(self, names: tuple[str, ...]) -> None:
        """Lay the tables out for a snapshot with rows `names` (rows are carried over by name)."""
        if names is not self._names and names != self._names:
            self._relayout(names)

    def _relayout(self, names: tuple[str, ...]) -> None:
        old = self._rows
        perm = np.array([old.get(name, -1) for name in names], dtype=np.intp)
        for table in self._all_tables():
            table.remap(perm)
        self._names = names
        self._rows = {name: i for i, name in enumerate(names)}

    def _all_tables(self) -> list[_Table]:
        out = list(self._tables.values())
        out += [t for t in (self._terms, self._images) if t is not None]
        return out

    def table(self, key: Hashable, make: Callable[[int], TableT]) -> TableT:
        """The keyed table `key` (created by `make(rows)`; one kind of table per key), most recently used."""
        table = self._tables.get(key)
        if table is None:
            made = self._tables[key] = make(len(self._names))
            while len(self._tables) > self.max_tables:
                self._tables.popitem(last=False)
            return made
        self._tables.move_to_end(key)
        return cast(TableT, table)

    def replace_table(self, key: Hashable, table: _Table) -> None:
        """Hold `table` as the keyed table `key` (most recently used)."""
        self._tables[key] = table
        self._tables.move_to_end(key)

    def existing_terms(self) -> _ExistingTerms:
        """The table of existing pods' inter-pod affinity terms."""
        if self._terms is None:
            self._terms = _ExistingTerms(len(self._names), self.pod_terms)
        return self._terms

    def images(self) -> _Images:
        """The image table."""
        if self._images is None:
            self._images = _Images(len(self._names))
        return self._images

    def row(self, name: str) -> int | None:
        """The row of node `name` in the layout of the last bound snapshot."""
        return self._rows.get(name)

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


class DomainSums:
    """Per topology key: sums per domain code and the rows that touched a domain (first-row order)."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._keys: dict[str, tuple[Domains, Int64Array, BoolArray]] = {}

    def add(self, domains: Domains, rows: IntpArray, amounts: Int64Array, weight: int = 1) -> None:
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
        ordered = codes[np.argsort(first)]
        names = operator.itemgetter(*ordered.tolist())(domains.values) if ordered.size > 1 else None
        if names is None:
            return {domains.values[int(ordered[0])]: int(sums[ordered[0]])}
        return dict(zip(names, sums[ordered].tolist(), strict=True))

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


class SnapshotTables:
    """The index's tables for one snapshot, each brought up to date when it is first used."""

    def __init__(
        self,
        index: ClusterIndex,
        snapshot: SnapshotRows,
        namespace_map: Mapping[str, Mapping[str, str]],
        what_if: int,
    ) -> None:
        self.index = index
        self._namespace_map = namespace_map
        self.cels: Sequence[CelObject] = snapshot.cels()
        self.names = snapshot.names()
        # what-if rows (-1) carry this binding's own version: computed once here, again elsewhere
        self._versions: Int64Array = np.where(snapshot.versions < 0, what_if, snapshot.versions)
        self.n = len(self.cels)
        self._image_memo: dict[str, tuple[int, int]] = {}

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """Labels of a namespace (known Namespace objects, else the automatic name label)."""
        return namespace_labels(self._namespace_map, namespace)

    def _sync(self, table: TableT) -> TableT:
        self.index.use_layout(self.names)  # another binding may have laid the tables out otherwise
        rows = np.flatnonzero(table.versions != self._versions)
        if rows.size:
            table.update(rows.tolist(), self.cels)
            table.versions[rows] = self._versions[rows]
            self.index.rows_updated += int(rows.size)
        return table

    def _sync_rows(self, table: TableT, rows: IntpArray) -> TableT:
        """`table` brought up to date at `rows` alone (each row is kept at its own version)."""
        self.index.use_layout(self.names)
        stale = rows[table.versions[rows] != self._versions[rows]]
        if stale.size:
            table.update(stale.tolist(), self.cels)
            table.versions[stale] = self._versions[stale]
            self.index.rows_updated += int(stale.size)
        return table

    def _sync_one(self, table: TableT, row: int) -> TableT:
        """`table` brought up to date at `row` alone."""
        self.index.use_layout(self.names)
        version = self._versions[row]
        if table.versions[row] != version:
            table.update([row], self.cels)
            table.versions[row] = version
            self.index.rows_updated += 1
        return table

    def pod_counts(self, key: Hashable, predicate: Callable[[CelObject], bool]) -> Int64Array:
        """Per row: pods satisfying `predicate` (one table per `key`; do not modify)."""
        table = self.index.table(key, lambda n: _PodCounts(n, predicate))
        return self._sync(table).values

    def pod_counts_at(
        self, key: Hashable, predicate: Callable[[CelObject], bool], rows: IntpArray
    ) -> Int64Array:
        """`pod_counts(key, predicate)[rows]`, bringing only those rows up to date."""
        table = self.index.table(key, lambda n: _PodCounts(n, predicate))
        return self._sync_rows(table, rows).values[rows]

    def pod_count_one(self, key: Hashable, predicate: Callable[[CelObject], bool], row: int) -> int:
        """`pod_counts(key, predicate)[row]`, bringing only that row up to date."""
        table = self.index.table(key, lambda n: _PodCounts(n, predicate))
        return int(self._sync_one(table, row).values[row])

    def node_mask(self, key: Hashable, predicate: Callable[[CelObject], bool]) -> BoolArray:
        """Per row: whether the node satisfies `predicate` (one table per `key`; do not modify)."""
        table = self.index.table(key, lambda n: _NodeMask(n, predicate))
        return self._sync(table).values

    def node_mask_at(
        self, key: Hashable, predicate: Callable[[CelObject], bool], rows: IntpArray
    ) -> BoolArray:
        """`node_mask(key, predicate)[rows]`, bringing only those rows up to date."""
        table = self.index.table(key, lambda n: _NodeMask(n, predicate))
        return self._sync_rows(table, rows).values[rows]

    def node_mask_one(self, key: Hashable, predicate: Callable[[CelObject], bool], row: int) -> bool:
        """`node_mask(key, predicate)[row]`, bringing only that row up to date."""
        table = self.index.table(key, lambda n: _NodeMask(n, predicate))
        return bool(self._sync_one(table, row).values[row])

    def domains(self, key: str) -> Domains:
        """The domain codes of topology key `key`."""
        table = self.index.table(("domains", key), lambda n: Domains(n, key))
        return self._sync(table)

    def domain_totals(
        self,
        key: Hashable,
        domains: Domains,
        row_values: Callable[[IntpArray], tuple[Int64Array, Int64Array]],
        nonzero: bool = False,
    ) -> DomainTotals:
        """The totals per domain of `domains` (one table per `key`) of what `row_values(rows)` gives
        the rows: each row's domain code (-1: none) and amount, read from tables already brought up
        to date; only the rows whose version moved are asked again. `nonzero`: its `counts()` leave
        out the domains whose total is 0."""
        self.index.use_layout(self.names)
        table = self.index.table(key, lambda n: DomainTotals(n, domains, nonzero))
        if table.domains is not domains:  # its domain table was dropped and made again: new codes
            table = DomainTotals(self.n, domains, nonzero)
            self.index.replace_table(key, table)
        rows = np.flatnonzero(table.versions != self._versions)
        if rows.size:
            codes, amounts = row_values(rows)
            table.set_rows(rows, codes, amounts)
            table.versions[rows] = self._versions[rows]
            self.index.rows_updated += int(rows.size)
        return table

    def existing_term_keys(self) -> list[TermKey]:
        """Every existing pod's inter-pod affinity (kind, term)."""
        return self._sync(self.index.existing_terms()).keys()

    def existing_term_carriers(self, key: TermKey) -> tuple[IntpArray, Int64Array]:
        """The rows carrying the existing (kind, term) `key` and how many pods there carry it."""
        return self._sync(self.index.existing_terms()).carriers(key)

    def existing_term_counts(self, key: TermKey, rows: IntpArray) -> Int64Array:
        """Per row of `rows`: how many pods there carry the existing (kind, term) `key`."""
        return self._sync(self.index.existing_terms()).row_counts(key, rows)

    def rows_of(self, nodes: Sequence[CelObject] | None) -> IntpArray:
        """Rows of the snapshot's nodes named like `nodes` (None: every row; unknown names: skipped)."""
        if nodes is None or nodes is self.cels:
            return np.arange(self.n, dtype=np.intp)
        if isinstance(nodes, RowSelection) and nodes.cels is self.cels:
            return nodes.rows
        self.index.use_layout(self.names)
        row = self.index.row
        rows = [r for r in (row(str(c.get("name", ""))) for c in nodes) if r is not None]
        return np.array(rows, dtype=np.intp)

    def image(self, image: str) -> tuple[int, int]:
        """(nodes with `image`, its size on the first of them)."""
        hit = self._image_memo.get(image)
        if hit is None:
            table = self._sync(self.index.images())
            hit = self._image_memo[image] = table.lookup(image)
        return hit
