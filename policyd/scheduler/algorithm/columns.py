"""The node columns the vectorised plans read, kept in step with the snapshot."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from policyd.evaluation.columns import NodeColumns
from policyd.scheduler.snapshot import Snapshot


class ColumnSync:
    """`NodeColumns` kept in step with the snapshot: rows whose cache generation moved are rewritten
    (assumes, binds and informer events all move it), the whole table only when the layout changes.
    Brought up to date only when a vectorised evaluation needs it."""

    def __init__(self) -> None:
        self.columns: NodeColumns | None = None
        self._layout = -1
        self._versions: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._generation = -1  # the snapshot generation the columns were last brought up to
        self.rewritten = 0

    def sync(self, snapshot: Snapshot) -> NodeColumns:
        """The columns of `snapshot`'s rows."""
        cels = snapshot.cels()
        if self.columns is None or self._layout != snapshot.layout:
            self.columns = NodeColumns.from_nodes(cels)
            self._layout = snapshot.layout
            self._versions = snapshot.versions.copy()
            self._generation = snapshot.generation
            self.rewritten += len(cels)
            return self.columns
        since = snapshot.rows_changed_since(self._generation)
        changed = np.flatnonzero(self._versions != snapshot.versions) if since is None else since
        self._generation = snapshot.generation
        for row in changed.tolist():
            self.columns.set_node(row, cels[row])
        self._versions[changed] = snapshot.versions[changed]
        self.rewritten += len(changed)
        return self.columns
