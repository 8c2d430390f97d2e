"""Snapshots over hand-written node dicts, for the cluster function tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policyd.scheduler.cluster.affinity_terms import has_pod_affinity
from policyd.scheduler.cluster.functions import ClusterFunctions
from policyd.scheduler.snapshot import Snapshot

generations = itertools.count(1)

# makes the cluster functions over a snapshot of node dicts (the `make_cluster` fixture)
ClusterFactory = Callable[[Sequence[Mapping[str, Any]]], ClusterFunctions]


@dataclass
class NodeRow:
    """The parts of a node state a snapshot and the cluster functions read."""

    name: str
    cel: Mapping[str, Any]

    @property
    def affinity_pods(self) -> int:
        return sum(1 for p in self.cel.get("pods", ()) if has_pod_affinity(p))


def snapshot_of(nodes: Sequence[Mapping[str, Any]]) -> Snapshot:
    """A snapshot whose rows are `nodes` (the same dicts), each at a fresh version."""
    snap = Snapshot()
    changed = {str(n["name"]): (next(generations), NodeRow(str(n["name"]), n)) for n in nodes}
    snap.store([str(n["name"]) for n in nodes], changed)  # type: ignore[arg-type]
    return snap
