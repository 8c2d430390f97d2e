"""The per-cycle snapshot: node states as the scheduling thread sees them for one cycle.

The cache (policyd.scheduler.cache) owns the live node states. At the start of every cycle the
scheduling thread calls `Cache.update_snapshot(snapshot)`, which copies only the nodes whose cache
generation moved since the last update (kube-scheduler's UpdateSnapshot); the snapshot then stays
unchanged for the whole cycle. See docs/DESIGN.md, "Snapshot".
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from policyd.scheduler.cluster.affinity_terms import has_pod_affinity

_generations = itertools.count(1)
MAX_CHANGES = 64  # updates a snapshot remembers the changed rows of (`rows_changed_since`)


def next_generation() -> int:
    """A process-wide increasing number; every snapshot state gets a fresh one."""
    return next(_generations)


class PodInfoLike(Protocol):
    """What the runtime reads of a `policyd.scheduler.cluster.objects.PodInfo`."""

    @property
    def key(self) -> str:
        """`namespace/name`."""
        ...

    @property
    def uid(self) -> str:
        """metadata.uid."""
        ...

    @property
    def priority(self) -> int:
        """spec.priority (0 when unset)."""
        ...

    @property
    def node_name(self) -> str:
        """spec.nodeName ("" when pending)."""
        ...

    @property
    def deleting(self) -> bool:
        """metadata.deletionTimestamp is set."""
        ...

    @property
    def scheduler_name(self) -> str:
        """spec.schedulerName."""
        ...

    @property
    def scheduling_gates(self) -> tuple[str, ...]:
        """Names of spec.schedulingGates (non-empty: the pod waits at PreEnqueue)."""
        ...

    @property
    def start_time(self) -> float | None:
        """status.startTime in seconds since the epoch (None or 0: not started)."""
        ...

    @property
    def cel(self) -> Mapping[str, Any]:
        """The CEL-visible pod dict."""
        ...


class NodeInfoLike(Protocol):
    """What the runtime reads of a `policyd.scheduler.cluster.objects.NodeInfo`."""

    @property
    def name(self) -> str:
        """metadata.name of the node."""
        ...

    @property
    def cel(self) -> Mapping[str, Any]:
        """The CEL-visible node dict (includes `pods`, `requested`, `free`)."""
        ...

    @property
    def pods(self) -> Mapping[str, Any]:
        """The pods counted against the node, by key."""
        ...

    @property
    def affinity_pods(self) -> int:
        """How many of those pods have inter-pod (anti-)affinity terms."""
        ...

    def update_node(self, obj: Mapping[str, Any]) -> None:
        """Replace the node object, keeping the pods."""
        ...

    def add_pod(self, pod: Any) -> Any:
        """Count `pod` against this node."""
        ...

    def replace_pod(self, pod: Any) -> None:
        """Count `pod` instead of its earlier version, keeping that version's place."""
        ...

    def remove_pod(self, pod: Any) -> Any:
        """Stop counting `pod` against this node."""
        ...

    def clone_without(self, pods: Iterable[Any]) -> NodeInfoLike:
        """An independent copy with `pods` removed (an empty iterable: a plain copy)."""
        ...

    def with_pods(self, pods: Iterable[Any]) -> NodeInfoLike:
        """An independent copy with `pods` added (nominated pods)."""
        ...


class Snapshot:
    """Node states for one scheduling cycle; read-only for everyone but `Cache.update_snapshot`.

    Besides the node states the snapshot keeps, per row (position in `nodes()`), the cache generation
    the row was copied at (`versions`, a numpy array) and a `layout` number that changes whenever
    rows are added, removed or reordered. Per-pod-group evaluation caches (policyd.scheduler.algorithm)
    use both to re-evaluate only the rows that changed since they last looked.
    """

    def __init__(self) -> None:
        self.generation = next_generation()
        self.layout = next_generation()
        self._nodes: dict[str, NodeInfoLike] = {}
        self._node_generation: dict[str, int] = {}
        self._list: list[NodeInfoLike] = []
        self._cels: list[Mapping[str, Any]] = []
        self._row: dict[str, int] = {}
        self._names: tuple[str, ...] | None = None
        # node name -> CEL dicts of its pods with inter-pod (anti-)affinity (kube-scheduler's
        # havePodsWithAffinityNodeInfoList), kept for changed nodes only
        self._affinity: dict[str, list[Mapping[str, Any]]] = {}
        self.versions: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        # the last updates in this layout, oldest first: (the generation before, the rows it changed)
        self._changes: list[tuple[int, list[int]]] = []
        # the cache generation this snapshot was last brought up to (Cache.update_snapshot)
        self._synced_to: tuple[int, int] | None = None

    # --- read API (cluster functions, algorithm, preemption) ---

    def nodes(self) -> Sequence[NodeInfoLike]:
        """Every node, in the cache's stable order (the order nodes were added)."""
        return self._list

    def cels(self) -> Sequence[Mapping[str, Any]]:
        """The `.cel` dicts of `nodes()`, in the same order."""
        return self._cels

    def node(self, name: str) -> NodeInfoLike | None:
        """The node called `name`, or None."""
        return self._nodes.get(name)

    def row(self, name: str) -> int | None:
        """The position of node `name` in `nodes()`, or None."""
        return self._row.get(name)

    def names(self) -> tuple[str, ...]:
        """Names of every node, in snapshot order (one shared tuple per layout)."""
        if self._names is None:
            self._names = tuple(n.name for n in self._list)
        return self._names

    def __len__(self) -> int:
        return len(self._list)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def rows_changed_since(self, generation: int) -> npt.NDArray[np.intp] | None:
        """The rows (in order) replaced since this snapshot had `generation` in its current layout;
        None when that is not known (another layout or snapshot, or too long ago): compare `versions`."""
        if generation == self.generation:
            return np.zeros(0, dtype=np.intp)
        changes = self._changes
        for i in range(len(changes) - 1, -1, -1):
            if changes[i][0] == generation:
                if i == len(changes) - 1 and len(changes[i][1]) == 1:  # the last update, one row
                    return np.array(changes[i][1], dtype=np.intp)
                rows = {row for _, changed in changes[i:] for row in changed}
                return np.array(sorted(rows), dtype=np.intp)
        return None

    def has_pods_with_affinity(self) -> bool:
        """True when some pod on some node has inter-pod (anti-)affinity terms."""
        return bool(self._affinity)

    def _index_affinity(self, state: NodeInfoLike) -> None:
        if not state.affinity_pods:  # counted by the node: none to look for
            self._affinity.pop(state.name, None)
            return
        pods = [p for p in state.cel.get("pods", ()) if has_pod_affinity(p)]
        if pods:
            self._affinity[state.name] = pods
        else:
            self._affinity.pop(state.name, None)

    def replace(self, node: NodeInfoLike) -> Snapshot:
        """A derived snapshot with `node` substituted (preemption what-ifs); fresh generation.

        Everything but the substituted row is shared with this snapshot (row order, names, versions of
        the other rows), so a what-if costs two list copies, not a copy of every lookup table.
        """
        row = self._row.get(node.name)
        derived = Snapshot.__new__(Snapshot)
        derived.__dict__.update(self.__dict__)
        derived.generation = next_generation()
        derived._changes = []  # its rows are this snapshot's but one: no update of its own
        if row is None:  # not a node of this snapshot: appended
            derived.layout = next_generation()
            derived._nodes = {**self._nodes, node.name: node}
            derived._list = [*self._list, node]
            derived._cels = [*self._cels, node.cel]
            derived._row = {**self._row, node.name: len(self._list)}
            derived._names = None
            derived.versions = np.append(self.versions, -1)
        else:
            derived._nodes = _Overlay(self._nodes, node.name, node)
            derived._list = _RowOverlay(self._list, row, node)  # type: ignore[assignment]
            derived._cels = _RowOverlay(self._cels, row, node.cel)  # type: ignore[assignment]
            derived.versions = self.versions.copy()
            derived.versions[row] = -1  # a what-if state no cache generation describes
        if self._affinity or node.affinity_pods:
            derived._affinity = dict(self._affinity)
            derived._index_affinity(node)
        return derived

    # --- write API (cache only) ---

    def node_generations(self) -> Mapping[str, int]:
        """The cache generation of every node as this snapshot holds it."""
        return self._node_generation

    def store(self, order: Sequence[str] | None, changed: Mapping[str, tuple[int, NodeInfoLike]]) -> None:
        """Install copies of changed nodes and the node order (None: unchanged); called by `Cache.update_snapshot`.

        The generation changes when anything does. With the same order, changed rows are replaced in
        place (no walk over every node); otherwise the rows are rebuilt and `layout` changes too.
        """
        if order is not None and list(order) == [n.name for n in self._list]:
            order = None
        if order is None:
            if not changed:
                return
            rows = []
            for name, (gen, state) in changed.items():
                row = self._row[name]
                rows.append(row)
                self._nodes[name] = state
                self._node_generation[name] = gen
                self._list[row] = state
                self._cels[row] = state.cel
                self.versions[row] = gen
                self._index_affinity(state)
            self._changes.append((self.generation, rows))
            if len(self._changes) > MAX_CHANGES:
                del self._changes[0]
            self.generation = next_generation()
            return
        for name, (gen, state) in changed.items():
            self._nodes[name] = state
            self._node_generation[name] = gen
        keep = set(order)
        for name in [n for n in self._nodes if n not in keep]:
            del self._nodes[name]
            del self._node_generation[name]
            self._affinity.pop(name, None)
        for state in (state for _, state in changed.values()):
            self._index_affinity(state)
        self._list = [self._nodes[name] for name in order]
        self._cels = [n.cel for n in self._list]
        self._row = {name: i for i, name in enumerate(order)}
        self.versions = np.array([self._node_generation[name] for name in order], dtype=np.int64)
        self._names = None
        self._changes = []
        self.layout = next_generation()
        self.generation = next_generation()


class _Overlay(dict[str, Any]):
    """A name -> node mapping that is `base` with one entry replaced, without copying `base`."""

    def __init__(self, base: Mapping[str, Any], name: str, node: Any) -> None:
        super().__init__()
        self._base = base
        self._name = name
        self._node = node

    def __getitem__(self, key: str) -> Any:
        return self._node if key == self._name else self._base[key]

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self._node if key == self._name else self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key == self._name or key in self._base

    def __iter__(self) -> Iterator[str]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)

    def items(self) -> Any:  # type: ignore[override]
        return ((k, self[k]) for k in self._base)

    def values(self) -> Any:  # type: ignore[override]
        return (self[k] for k in self._base)

    def keys(self) -> Any:  # type: ignore[override]
        return self._base.keys()


class _RowOverlay(Sequence[Any]):
    """`base` with the item at `row` replaced, without copying `base` (what-if snapshots)."""

    def __init__(self, base: Sequence[Any], row: int, item: Any) -> None:
        self._base = base
        self._row = row
        self._item = item

    def __len__(self) -> int:
        return len(self._base)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return list(self)[i]
        if i < 0:
            i += len(self._base)
        return self._item if i == self._row else self._base[i]

    def __iter__(self) -> Iterator[Any]:
        yield from itertools.islice(self._base, 0, self._row)
        yield self._item
        yield from itertools.islice(self._base, self._row + 1, None)
