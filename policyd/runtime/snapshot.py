"""The per-cycle snapshot: node states as the scheduling thread sees them for one cycle.

The cache (policyd.runtime.cache) owns the live node states. At the start of every cycle the
scheduling thread calls `Cache.update_snapshot(snapshot)`, which copies only the nodes whose cache
generation moved since the last update (kube-scheduler's UpdateSnapshot); the snapshot then stays
unchanged for the whole cycle. See docs/DESIGN.md, "Snapshot".
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

_generations = itertools.count(1)


def next_generation() -> int:
    """A process-wide increasing number; every snapshot state gets a fresh one."""
    return next(_generations)


class PodViewLike(Protocol):
    """What the runtime reads of a `policyd.runtime.views.PodView`."""

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
    def cel(self) -> Mapping[str, Any]:
        """The CEL-visible pod dict."""
        ...


class NodeStateLike(Protocol):
    """What the runtime reads of a `policyd.runtime.views.NodeState`."""

    @property
    def name(self) -> str:
        """metadata.name of the node."""
        ...

    @property
    def cel(self) -> Mapping[str, Any]:
        """The CEL-visible node dict (includes `pods`, `requested`, `free`)."""
        ...

    def update_node(self, obj: Mapping[str, Any]) -> None:
        """Replace the node object, keeping the pods."""
        ...

    def add_pod(self, pod: Any) -> Any:
        """Count `pod` against this node."""
        ...

    def remove_pod(self, pod: Any) -> Any:
        """Stop counting `pod` against this node."""
        ...

    def clone_without(self, pods: Iterable[Any]) -> NodeStateLike:
        """An independent copy with `pods` removed (an empty iterable: a plain copy)."""
        ...

    def with_pods(self, pods: Iterable[Any]) -> NodeStateLike:
        """An independent copy with `pods` added (nominated pods)."""
        ...


class Snapshot:
    """Node states for one scheduling cycle; read-only for everyone but `Cache.update_snapshot`."""

    def __init__(self) -> None:
        self.generation = next_generation()
        self._nodes: dict[str, NodeStateLike] = {}
        self._node_generation: dict[str, int] = {}
        self._list: list[NodeStateLike] = []

    # --- read API (ClusterView, framework, preemption) ---

    def nodes(self) -> Sequence[NodeStateLike]:
        """Every node, in the cache's stable order (the order nodes were added)."""
        return self._list

    def node(self, name: str) -> NodeStateLike | None:
        """The node called `name`, or None."""
        return self._nodes.get(name)

    def node_names(self) -> list[str]:
        """Names of every node, in snapshot order."""
        return [n.name for n in self._list]

    def __len__(self) -> int:
        return len(self._list)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def pods(self) -> Iterator[Mapping[str, Any]]:
        """The CEL dicts of every pod on every node (assumed pods included)."""
        for n in self._list:
            yield from n.cel.get("pods", ())

    def replace(self, node: NodeStateLike) -> Snapshot:
        """A derived snapshot with `node` substituted (preemption what-ifs); fresh generation."""
        derived = Snapshot()
        derived._nodes = dict(self._nodes)
        derived._nodes[node.name] = node
        derived._node_generation = dict(self._node_generation)
        derived._list = [node if n.name == node.name else n for n in self._list]
        return derived

    # --- write API (cache only) ---

    def _node_generations(self) -> Mapping[str, int]:
        return self._node_generation

    def _store(self, order: Sequence[str], changed: Mapping[str, tuple[int, NodeStateLike]]) -> None:
        """Install copies of changed nodes and the node order; bump the generation on change."""
        if not changed and len(order) == len(self._list):
            return
        for name, (gen, state) in changed.items():
            self._nodes[name] = state
            self._node_generation[name] = gen
        if len(order) != len(self._nodes):
            keep = set(order)
            for name in [n for n in self._nodes if n not in keep]:
                del self._nodes[name]
                del self._node_generation[name]
        self._list = [self._nodes[name] for name in order]
        self.generation = next_generation()
