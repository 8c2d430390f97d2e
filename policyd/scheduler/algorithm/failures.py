"""The filter failures of one placement, those of rows the vectorised plans found failing found later.

The plans tell which rule fails first on a row, not the failure kube-scheduler reports (its reasons,
whether preemption can help): that comes from the per-node function. A pod that is placed rarely
needs it (only an explanation reads it), so `DeferredFailures` runs the per-node function for those
rows on first read, with the pod's evaluator over the node objects of the cycle (a snapshot's node
objects are never mutated). A pod that fits nowhere reads them at once (FailedScheduling, preemption).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from policyd.framework import FilterFailure, PodEvaluator
from policyd.scheduler.snapshot import NodeInfoLike

log = logging.getLogger(__name__)


def window_failure_counts(
    table: Sequence[FilterFailure],
    at: npt.NDArray[np.intp],
    later: npt.NDArray[np.bool_],
    resolved: Sequence[FilterFailure | None],
) -> list[tuple[FilterFailure, int]]:
    """Each distinct failure object of a window's failing rows with the number of rows it stands for,
    in the order first seen: row k's failure is `table[at[j]]` (j counting the rows not `later`), or
    for the rows `later` the next of `resolved` (None: no failure, not counted). Counted by identity
    (the nodes failing alike share one object, see policyd.evaluation.generated.shared_failure), per
    table entry without a step per row."""
    first: dict[int, int] = {}  # id of a failure -> the window position where it is first seen
    counts: dict[int, int] = {}
    objects: dict[int, FilterFailure] = {}

    def add(failure: FilterFailure, position: int, count: int) -> None:
        key = id(failure)
        if key in counts:
            counts[key] += count
            first[key] = min(first[key], position)
        else:
            objects[key], counts[key], first[key] = failure, count, position

    if len(at):
        known = np.flatnonzero(~later)
        # the table may hold one object at many indexes (a pod's own failures): count per object
        ids = np.fromiter(map(id, table), dtype=np.int64, count=len(table))
        _, entry, object_of = np.unique(ids, return_index=True, return_inverse=True)
        codes = object_of.reshape(-1)[at]
        tally = np.bincount(codes, minlength=len(entry))
        present = np.flatnonzero(tally)
        if len(present) <= 32:  # a few distinct failures: where each is first seen, one pass each
            starts = [int(np.argmax(codes == k)) for k in present.tolist()]
        else:
            starts = np.unique(codes, return_index=True)[1].tolist()
        for k, start in zip(present.tolist(), starts, strict=True):
            add(table[int(entry[k])], int(known[start]), int(tally[k]))
    if len(resolved):
        keys = list(map(id, resolved))
        positions = np.flatnonzero(later)
        for key, count in Counter(keys).items():
            j = keys.index(key)
            failure = resolved[j]
            if failure is not None:
                add(failure, int(positions[j]), count)
    return [(objects[key], counts[key]) for key in sorted(first, key=first.__getitem__)]


class _LazyFailures(Mapping[str, FilterFailure]):
    """Node name -> failure, as the dict `_all()` makes on first read."""

    def _all(self) -> dict[str, FilterFailure]:
        raise NotImplementedError

    def __getitem__(self, name: str) -> FilterFailure:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class WindowFailures(_LazyFailures):
    """Node name -> failure of a window's failing rows whose failure is known, in window order: row
    `rows[i]` fails with `table[at[i]]`. Made into a dict on first read: a pod that fits nowhere on
    5000 nodes is counted (`window_failure_counts`) and preempted for without one."""

    def __init__(
        self,
        names: npt.NDArray[np.object_],
        rows: npt.NDArray[np.intp],
        table: Sequence[FilterFailure],
        at: npt.NDArray[np.intp],
    ) -> None:
        self._names, self._rows, self._table, self._at = names, rows, table, at
        self._failures: dict[str, FilterFailure] | None = None

    def _all(self) -> dict[str, FilterFailure]:
        if self._failures is None:
            names = self._names[self._rows].tolist()
            self._failures = dict(zip(names, map(self._table.__getitem__, self._at.tolist()), strict=True))
        return self._failures

    def __len__(self) -> int:
        return len(self._at)  # without making the dict


class DeferredFailures(_LazyFailures):
    """Node name -> failure of a window's failing rows (`rows`, in window order, named by `names`):
    the `known` ones, and the `deferred` nodes' failures computed on first read (`resolve`)."""

    def __init__(
        self,
        evaluator: PodEvaluator,
        names: npt.NDArray[np.object_],
        rows: npt.NDArray[np.intp],
        known: Mapping[str, FilterFailure],
        deferred: Sequence[NodeInfoLike],
    ) -> None:
        self._evaluator = evaluator
        self._names, self._rows = names, rows
        self._known = known
        self._deferred = deferred
        self._found: list[FilterFailure | None] | None = None
        self._by_name: dict[str, FilterFailure | None] = {}
        self._failures: dict[str, FilterFailure] | None = None
        self.reusable: list[bool] = []  # per deferred node: its failure called no cluster function

    def resolve(self) -> list[FilterFailure | None]:
        """The deferred nodes' failures (computed once), in the order given."""
        if self._found is None:
            found = self._by_name
            for node in self._deferred:
                self._evaluator.reset_cluster_called()
                found[node.name] = failure = self._evaluator.filter(node.cel)
                self.reusable.append(not self._evaluator.cluster_called)
                if failure is None:  # the plans and the functions disagree: a defect, not a failure
                    log.error("vectorised plan failed a node its function passes node=%s", node.name)
            self._found = [found[node.name] for node in self._deferred]
        return self._found

    def _all(self) -> dict[str, FilterFailure]:
        if self._failures is None:
            self.resolve()
            known, found = self._known, self._by_name
            failures: dict[str, FilterFailure] = {}
            for name in self._names[self._rows].tolist():
                failure = known.get(name) or found.get(name)
                if failure is not None:
                    failures[name] = failure
            self._failures = failures
        return self._failures
