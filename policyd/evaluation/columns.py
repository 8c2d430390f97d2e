"""Node state held column-wise for vectorised policy evaluation (`policyd.evaluation.plans`).

One row per node, in the cache's order. Resource maps (`allocatable`, `requested`, `nonZeroRequested`,
`capacity`; `free` is derived) are int64 columns per resource name with a presence mask (a key absent
from the node's map reads as an error, as in CEL); `podCount`, `unschedulable` and `ready` are plain
columns; every label key is a categorical column (int32 codes into a per-key vocabulary, -1 where the
node lacks the key); `taints`, `name`, `images` and whole `labels` maps are categorical columns over interned
values, so an expression reading only them is evaluated once per distinct value. The node's `.cel` dict
is kept per row for the rare expression that needs the whole node.

Updates are incremental: `set_node(row, cel)` rewrites one row from the node's `.cel` dict (its pods
already counted in it); the scheduler's column sync calls it for the rows whose cache generation moved.
Columns grow by doubling; nothing is rebuilt per pod.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from policyd.cel.values import freeze

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
CodeArray = npt.NDArray[np.int32]

RESOURCE_MAPS = ("allocatable", "requested", "nonZeroRequested", "capacity")
ALWAYS_REQUESTED = ("cpu", "memory", "ephemeral-storage", "pods")
# label generations: every table's label change takes the next one, so no two states share one
_LABEL_GENERATIONS = itertools.count()


class Categorical:
    """A categorical column: `codes[row]` indexes `values`; `-1` means absent."""

    def __init__(self, capacity: int) -> None:
        self.codes: CodeArray = np.full(capacity, -1, dtype=np.int32)
        self.values: list[Any] = []
        self._index: dict[Hashable, int] = {}

    def code_of(self, value: Any, key: Hashable | None = None) -> int:
        """The code of `value`, interning it when new."""
        k = value if key is None else key
        code = self._index.get(k)
        if code is None:
            code = len(self.values)
            self._index[k] = code
            self.values.append(value)
        return code

    @property
    def index(self) -> Mapping[Hashable, int]:
        """Value (or its key) -> code, for every value interned so far."""
        return self._index

    def lookup(self, value: Any) -> int:
        """The code of `value`, or -2 when it never occurred (matches no row)."""
        return self._index.get(value, -2)

    def grow(self, capacity: int) -> None:
        """Extend to `capacity` rows (new rows absent)."""
        extra = capacity - len(self.codes)
        if extra > 0:
            self.codes = np.concatenate([self.codes, np.full(extra, -1, dtype=np.int32)])


class ResourceColumn:
    """One resource of one resource map: values and presence per row."""

    def __init__(self, capacity: int) -> None:
        self.values: IntArray = np.zeros(capacity, dtype=np.int64)
        self.present: BoolArray = np.zeros(capacity, dtype=bool)

    def grow(self, capacity: int) -> None:
        """Extend to `capacity` rows (new rows absent)."""
        extra = capacity - len(self.values)
        if extra > 0:
            self.values = np.concatenate([self.values, np.zeros(extra, dtype=np.int64)])
            self.present = np.concatenate([self.present, np.zeros(extra, dtype=bool)])


class NodeColumns:
    """Column-wise node state; rows are node indexes in the cache's order."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = max(1, capacity)
        self.size = 0
        self.cels: list[Mapping[str, Any] | None] = []
        self.pod_count: IntArray = np.zeros(self.capacity, dtype=np.int64)
        self.unschedulable: BoolArray = np.zeros(self.capacity, dtype=bool)
        self.ready: BoolArray = np.zeros(self.capacity, dtype=bool)
        self.resources: dict[str, dict[str, ResourceColumn]] = {m: {} for m in RESOURCE_MAPS}
        self.labels: dict[str, Categorical] = {}
        # moves whenever a row's labels (or the number of rows) change, never back to an old value
        self.label_generation = next(_LABEL_GENERATIONS)
        self.whole: dict[str, Categorical] = {
            "taints": Categorical(self.capacity),
            "labels": Categorical(self.capacity),
            "name": Categorical(self.capacity),
            "images": Categorical(self.capacity),
        }

    # -- structure ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.size

    def rows_labelled(self, values: Iterable[str]) -> npt.NDArray[np.intp]:
        """The rows with one of `values` under some label key, in order."""
        wanted = list(values)
        hits = []
        for cat in self.labels.values():
            codes = [code for code in map(cat.lookup, wanted) if code >= 0]
            if len(codes) == 1:  # a bind's hostname: one comparison, no sort
                hits.append(np.flatnonzero(cat.codes[: self.size] == codes[0]))
            elif codes:
                hits.append(np.flatnonzero(np.isin(cat.codes[: self.size], codes)))
        if not hits:
            return np.zeros(0, dtype=np.intp)
        return hits[0].astype(np.intp) if len(hits) == 1 else np.unique(np.concatenate(hits)).astype(np.intp)

    def _grow(self, need: int) -> None:
        if need <= self.capacity:
            return
        cap = self.capacity
        while cap < need:
            cap *= 2
        extra = cap - self.capacity
        self.pod_count = np.concatenate([self.pod_count, np.zeros(extra, dtype=np.int64)])
        self.unschedulable = np.concatenate([self.unschedulable, np.zeros(extra, dtype=bool)])
        self.ready = np.concatenate([self.ready, np.zeros(extra, dtype=bool)])
        for columns in self.resources.values():
            for col in columns.values():
                col.grow(cap)
        for cat in (*self.labels.values(), *self.whole.values()):
            cat.grow(cap)
        self.capacity = cap

    def resource(self, map_name: str, resource: str) -> ResourceColumn:
        """The column of `resource` in resource map `map_name` (created absent everywhere when new)."""
        columns = self.resources[map_name]
        col = columns.get(resource)
        if col is None:
            col = columns[resource] = ResourceColumn(self.capacity)
        return col

    def label(self, key: str) -> Categorical:
        """The categorical column of label `key` (created absent everywhere when new)."""
        cat = self.labels.get(key)
        if cat is None:
            cat = self.labels[key] = Categorical(self.capacity)
        return cat

    # -- rows -----------------------------------------------------------------------------------

    def add_node(self, cel: Mapping[str, Any]) -> int:
        """Append a node (its `.cel` dict, pods already counted in it); returns its row."""
        row = self.size
        self._grow(row + 1)
        self.size += 1
        self.cels.append(None)
        self.set_node(row, cel)
        return row

    def set_node(self, row: int, cel: Mapping[str, Any]) -> None:
        """Rewrite row `row` from a node's `.cel` dict (node update, or resynchronisation).

        A node object copied from the row's previous one (a pod added or removed) shares its
        labels, taints, images and allocatable maps (node objects are never changed in place: an
        update makes new maps): those parts are rewritten only when they are other objects; the
        resource maps also not when they hold the same amounts."""
        old = self.cels[row]
        self.cels[row] = cel

        def same(field: str) -> bool:
            return old is not None and old is not cel and old.get(field) is cel.get(field)

        self.unschedulable[row] = bool(cel.get("unschedulable", False))
        self.ready[row] = bool(cel.get("ready", False))
        self.pod_count[row] = int(cel.get("podCount", 0))
        for map_name in RESOURCE_MAPS:
            values: Mapping[str, int] = cel.get(map_name) or {}
            # a node's own maps, or a copy of equal amounts (the bind that follows an assume)
            if same(map_name) or (old is not None and old is not cel and old.get(map_name) == values):
                continue
            for res, col in self.resources[map_name].items():
                if res not in values:
                    col.present[row] = False
                    col.values[row] = 0
            for res, amount in values.items():
                col = self.resource(map_name, res)
                col.present[row] = True
                col.values[row] = amount
        if not same("labels"):
            self.label_generation = next(_LABEL_GENERATIONS)
            labels: Mapping[str, str] = cel.get("labels") or {}
            for key, cat in self.labels.items():
                if key not in labels:
                    cat.codes[row] = -1
            for key, value in labels.items():
                cat = self.label(key)
                cat.codes[row] = cat.code_of(value)
            self.whole["labels"].codes[row] = self.whole["labels"].code_of(labels, freeze(labels))
        if not same("taints"):
            taints = cel.get("taints") or []
            self.whole["taints"].codes[row] = self.whole["taints"].code_of(taints, freeze(taints))
        if not same("name"):
            self.whole["name"].codes[row] = self.whole["name"].code_of(cel.get("name", ""))
        if not same("images"):
            images = cel.get("images") or {}
            self.whole["images"].codes[row] = self.whole["images"].code_of(images, freeze(images))

    # -- derived columns ------------------------------------------------------------------------

    def free(self, resource: str) -> tuple[IntArray, BoolArray]:
        """`node.free[resource]` values and presence (allocatable - requested, keys of allocatable)."""
        alloc = self.resources["allocatable"].get(resource)
        if alloc is None:
            zeros = np.zeros(self.size, dtype=np.int64)
            return zeros, np.zeros(self.size, dtype=bool)
        req = self.resources["requested"].get(resource)
        values = alloc.values[: self.size]
        if req is not None:
            values = values - req.values[: self.size]
        return values, alloc.present[: self.size]

    def column(self, map_name: str, resource: str) -> tuple[IntArray, BoolArray]:
        """Values and presence of `node.<map_name>[resource]` over the live rows' range."""
        if map_name == "free":
            return self.free(resource)
        col = self.resources[map_name].get(resource)
        if col is None:
            return np.zeros(self.size, dtype=np.int64), np.zeros(self.size, dtype=bool)
        return col.values[: self.size], col.present[: self.size]

    @classmethod
    def from_nodes(cls, cels: Iterable[Mapping[str, Any]]) -> NodeColumns:
        """Columns of the nodes whose `.cel` dicts are `cels`, in order."""
        items = list(cels)
        columns = cls(max(1, len(items)))
        for cel in items:
            columns.add_node(cel)
        return columns
