"""The `cluster` CEL variable: the functions of `policyd.policy.cluster_decls` for one scheduling cycle.

`ClusterFunctions` wraps the snapshot of one cycle (or a derived what-if snapshot of preemption).
Everything that depends on the pod is computed once per pod (kube-scheduler's PreFilter / PreScore
state, over the per-row tables of a `ClusterIndex` kept across cycles) and memoised, so the per-node
part of a policy expression is a few dict lookups. The semantics mirror kube-scheduler's
PodTopologySpread, InterPodAffinity and ImageLocality plugins; docs/DESIGN.md ("The cluster
functions") lists the approximations.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from policyd.framework import RowSelection
from policyd.scheduler.cluster import (
    affinity,
    nominated,
    spread,
    volume_binding,
    volume_limits,
    volume_restrictions,
    volumes,
)
from policyd.scheduler.cluster.affinity_terms import has_pod_affinity, namespace_labels
from policyd.scheduler.cluster.nominated import NominatedPods, PodKey, pod_key
from policyd.scheduler.cluster.selectors import CelObject, labels_of
from policyd.scheduler.cluster.spread_constraints import SCHEDULE_ANYWAY, spread_constraints
from policyd.scheduler.cluster.tables import (
    DEFAULT_MAX_TABLES,
    ClusterIndex,
    DomainSums,
    IntpArray,
    SnapshotRows,
    SnapshotTables,
)
from policyd.scheduler.cluster.volume_claims import pod_volumes
from policyd.scheduler.cluster.volume_store import VolumeStore
from policyd.scheduler.cluster.workloads import WorkloadIndex

T = TypeVar("T")
# memo entries that depend on the feasible nodes (dropped by `prescore`)
_PRESCORE_DEPENDENT = ("spread-score", "affinity-score")


class ClusterSnapshot(SnapshotRows, Protocol):
    """What the cluster functions read of a snapshot (policyd.scheduler.snapshot.Snapshot)."""

    def has_pods_with_affinity(self) -> bool:
        """True when some pod on some node has inter-pod (anti-)affinity terms."""
        ...


def _domain_counted(pod: CelObject, selector: tuple[tuple[str, str], ...]) -> Callable[[CelObject], bool]:
    """Which pods `cluster.domainCounts(pod, key, labels)` counts: the pod's namespace, not
    terminating, carrying every label of `selector`."""
    namespace = pod.get("namespace")

    def counted(p: CelObject) -> bool:
        if p.get("namespace") != namespace or p.get("deleting"):
            return False
        pod_labels = labels_of(p)
        return all(pod_labels.get(k) == v for k, v in selector)

    return counted


class ClusterFunctions:
    """The `cluster` CEL variable for one scheduling cycle over one snapshot."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
        index: ClusterIndex | None = None,
        workloads: WorkloadIndex | None = None,
        volume_store: VolumeStore | None = None,
    ) -> None:
        """`index`: the scheduler's, kept across cycles (None: a fresh one for this snapshot alone);
        `workloads`: the Services and controllers selecting pods (system default spread);
        `volume_store`: the storage objects (None: none)."""
        self._snapshot = snapshot
        self._workloads = workloads
        self._volumes = volume_store if volume_store is not None else VolumeStore()
        self._namespace_labels = namespace_labels or {}
        self._index = index if index is not None else ClusterIndex()
        self._tables: SnapshotTables | None = None  # bound on first use
        self._memo_by_pod: dict[PodKey, dict[Any, Any]] = {}
        self._last: tuple[CelObject | None, dict[Any, Any]] = (None, {})  # the last pod and its memo
        self._feasible: dict[PodKey, Sequence[CelObject]] = {}
        # False only when the snapshot says no pod on any node has inter-pod (anti-)affinity terms
        self._any_affinity = snapshot.has_pods_with_affinity()
        # `with_nominated` variants: the pods counted on one node, and the functions without them
        # (None on the base functions: a reference to itself would make a cycle, which keeps every
        # cycle's functions, tables and states alive until the garbage collector runs)
        self._added: NominatedPods | None = None
        self._base: ClusterFunctions | None = None

    def _unnominated(self) -> ClusterFunctions:
        """These functions without nominated pods added (`with_nominated`)."""
        return self if self._base is None else self._base

    def _bound(self) -> SnapshotTables:
        if self._tables is None:
            self._tables = self._index.bind(self._snapshot, self._namespace_labels)
        return self._tables

    def _memo(self, pod: CelObject, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        last, memo = self._last
        if pod is not last:  # a cycle asks about its own pod, over and over
            memo = self._memo_by_pod.setdefault(pod_key(pod), {})
            self._last = (pod, memo)
        if key not in memo:
            memo[key] = compute()
        return memo[key]  # type: ignore[no-any-return]

    def _prescored(self, pod: CelObject) -> Sequence[CelObject] | None:
        """The feasible nodes `prescore` gave for `pod` (None: every node)."""
        return self._feasible.get(pod_key(pod))

    def _feasible_rows(self, pod: CelObject) -> IntpArray:
        return self._bound().rows_of(self._prescored(pod))

    def _no_affinity_anywhere(self, pod: CelObject) -> bool:
        """Neither the pod nor any pod in the snapshot has inter-pod (anti-)affinity terms."""
        return not self._any_affinity and not has_pod_affinity(pod)

    def prescore(self, pod: CelObject, feasible: Sequence[CelObject]) -> None:
        """Tell which of the snapshot's nodes passed the filters for `pod` (kube-scheduler PreScore input).

        Nodes are taken by name; without this call every node of the snapshot counts as feasible.
        """
        key = pod_key(pod)
        self._feasible[key] = feasible if isinstance(feasible, RowSelection) else list(feasible)
        memo = self._memo_by_pod.get(key)
        if memo is not None:
            for k in [k for k in memo if k[0] in _PRESCORE_DEPENDENT]:
                del memo[k]

    def with_nominated(self, node: CelObject, pods: Sequence[CelObject]) -> ClusterFunctions:
        """These functions for the first filter pass of `node`, with `pods` (nominated to it) added.

        `topologySpread`, `interPodAffinity` and `domainCounts` count the pods on `node` as
        kube-scheduler's AddPod adds them to a copy of the PreFilter state
        (policyd.scheduler.cluster.nominated); everything else, the memo included, is shared.
        """
        variant = copy.copy(self)  # shares the snapshot, the tables and the memo
        variant._added = NominatedPods(node, tuple(pods))
        variant._base = self._unnominated()
        return variant

    def reads_pods(self, pod: CelObject) -> bool:
        """True when a state memoised for `pod` so far may have been counted from the pods on the
        nodes (a preemption what-if that removes pods then needs cluster functions of its own); the
        states of a pod without constraints of that kind, and the per-node functions, count none."""
        for key in self._memo_by_pod.get(pod_key(pod), {}):
            kind = key[0]
            if kind == "spread" and not spread_constraints(pod, key[1], self._workloads)[0]:
                continue
            if kind == "spread-score" and not spread_constraints(pod, SCHEDULE_ANYWAY, self._workloads)[0]:
                continue
            if kind in ("affinity", "affinity-score") and self._no_affinity_anywhere(pod):
                continue
            if kind == "volumes" and not pod_volumes(pod):
                continue
            if kind in ("volume-claims", "volume-binding"):
                continue
            return True
        return False

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """Labels of a namespace (known Namespace objects, else the automatic name label)."""
        return namespace_labels(self._namespace_labels, namespace)

    # -- general ------------------------------------------------------------------------------

    def node_count(self) -> int:
        """Number of nodes in the cycle's snapshot."""
        return len(self._snapshot.cels())

    def domain_counts(self, pod: CelObject, topology_key: str, labels: Mapping[str, str]) -> dict[str, int]:
        """Per value of `topology_key`: pods in the pod's namespace carrying all `labels` (0 included)."""
        sel = tuple(sorted(labels.items()))
        added = self._added
        if added is not None:
            return self._memo(
                pod,
                ("domain-counts", topology_key, sel, added.key),
                lambda: nominated.domain_counts_with_pods(
                    self._unnominated().domain_counts(pod, topology_key, labels),
                    topology_key,
                    _domain_counted(pod, sel),
                    added,
                ),
            )

        def compute() -> dict[str, int]:
            tables = self._bound()
            counts = tables.pod_counts(("domain-count", pod.get("namespace"), sel), _domain_counted(pod, sel))
            domains = tables.domains(topology_key)
            rows = np.flatnonzero(domains.codes >= 0)
            sums = DomainSums(tables.n)
            sums.add(domains, rows, counts[rows])
            return sums.counts(topology_key)

        return self._memo(pod, ("domain-counts", topology_key, sel), compute)

    # -- ImageLocality ------------------------------------------------------------------------

    def image_node_count(self, image: str) -> int:
        """Number of nodes that have `image` (ImageStateSummary.NumNodes)."""
        return self._bound().image(image)[0]

    def image_size(self, image: str) -> int:
        """Size in bytes kube-scheduler attributes to `image` (first node reporting it)."""
        return self._bound().image(image)[1]

    # -- PodTopologySpread --------------------------------------------------------------------

    def topology_spread(self, pod: CelObject, when: str) -> list[dict[str, Any]]:
        """The pod's constraints of one kind with their domain counts (PreFilter state)."""
        added = self._added
        if added is not None:
            return self._memo(
                pod,
                ("spread", when, added.key),
                lambda: nominated.spread_with_pods(
                    self._unnominated().topology_spread(pod, when),
                    spread_constraints(pod, when, self._workloads)[0],
                    pod,
                    added,
                ),
            )
        return self._memo(pod, ("spread", when), lambda: self._spread_filter_state(pod, when))

    def _spread_filter_state(self, pod: CelObject, when: str) -> list[dict[str, Any]]:
        constraints, _ = spread_constraints(pod, when, self._workloads)
        if not constraints:
            return []  # nothing to count (and no tables to bring up to date)
        return spread.filter_state(self._bound(), pod, constraints)

    def topology_spread_score(self, pod: CelObject, node: CelObject) -> int:
        """Raw PodTopologySpread score of a feasible node (rounded); -1 when the node is ignored."""
        state = self._memo(pod, ("spread-score",), lambda: self._spread_score_state(pod))
        return state["scores"].get(str(node.get("name", "")), -1)  # type: ignore[no-any-return]

    def topology_spread_score_range(self, pod: CelObject) -> dict[str, Any]:
        """`{active, min, max}` of raw scores over non-ignored feasible nodes (NormalizeScore input)."""
        state = self._memo(pod, ("spread-score",), lambda: self._spread_score_state(pod))
        return state["range"]  # type: ignore[no-any-return]

    def _spread_score_state(self, pod: CelObject) -> dict[str, Any]:
        if not spread_constraints(pod, SCHEDULE_ANYWAY, self._workloads)[0]:
            return spread.inactive_score_state()
        return spread.score_state(self._bound(), pod, self._feasible_rows(pod), self._workloads)

    # -- InterPodAffinity ---------------------------------------------------------------------

    def inter_pod_affinity(self, pod: CelObject) -> dict[str, Any]:
        """Required (anti-)affinity state of the pod (kube-scheduler InterPodAffinity PreFilter)."""
        added = self._added
        if added is not None:
            return self._memo(
                pod,
                ("affinity", added.key),
                lambda: nominated.affinity_with_pods(
                    self._unnominated().inter_pod_affinity(pod),
                    self._index.pod_terms(pod),
                    pod,
                    added,
                    self.namespace_labels,
                    self._index.pod_terms,
                ),
            )
        return self._memo(pod, ("affinity",), lambda: self._affinity_filter_state(pod))

    def _affinity_filter_state(self, pod: CelObject) -> dict[str, Any]:
        if self._no_affinity_anywhere(pod):
            return affinity.empty_filter_state()
        return affinity.filter_state(self._bound(), pod)

    def inter_pod_affinity_score(self, pod: CelObject, node: CelObject) -> int:
        """Raw InterPodAffinity score of a node (sum of its domains' accumulated term weights)."""
        state = self._memo(pod, ("affinity-score",), lambda: self._affinity_score_state(pod))
        labels = labels_of(node)
        return sum(values.get(labels[key], 0) for key, values in state["topology"].items() if key in labels)

    def inter_pod_affinity_score_range(self, pod: CelObject) -> dict[str, Any]:
        """`{active, min, max}` of raw scores over the feasible nodes (NormalizeScore input)."""
        state = self._memo(pod, ("affinity-score",), lambda: self._affinity_score_state(pod))
        return state["range"]  # type: ignore[no-any-return]

    def _affinity_score_state(self, pod: CelObject) -> dict[str, Any]:
        if self._no_affinity_anywhere(pod):
            return affinity.empty_score_state()
        return affinity.score_state(self._bound(), pod, self._feasible_rows(pod))

    # -- volumes (VolumeBinding, VolumeRestrictions, VolumeZone, NodeVolumeLimits) ---------------

    def pod_volumes(self, pod: CelObject) -> dict[str, Any]:
        """The pod's volume state (`PodVolumes`: PreFilter of the volume plugins)."""
        return self._memo(pod, ("volumes",), lambda: self._pod_volumes_state(pod))

    def _pod_volumes_state(self, pod: CelObject) -> dict[str, Any]:
        if not pod_volumes(pod):  # most pods: no claims to resolve
            return volumes.NO_VOLUMES
        placed = (p for node in self._snapshot.cels() for p in node.get("pods") or ())
        return volumes.pod_volumes_state(pod, self._claims(pod), self._volumes, placed)

    def _claims(self, pod: CelObject) -> volume_binding.PodClaims:
        """The pod's claims resolved once per pod (VolumeBinding PreFilter)."""
        return self._memo(pod, ("volume-claims",), lambda: volume_binding.pod_claims(pod, self._volumes))

    def volume_binding(self, pod: CelObject, node: CelObject) -> dict[str, str]:
        """Claim name -> "" when the node suits the claim, else the VolumeBinding reason."""
        name = str(node.get("name", ""))
        return self._memo(
            pod,
            ("volume-binding", name),
            lambda: volumes.volume_binding_verdicts(self._claims(pod), self._volumes, node),
        )

    def node_disks(self, node: CelObject) -> dict[str, bool]:
        """Disk id -> every use by the node's pods is read-only (VolumeRestrictions)."""
        return volume_restrictions.node_disks(node.get("pods") or ())

    def volume_limit(self, pod: CelObject, node: CelObject, driver: str) -> dict[str, Any]:
        """`{key, limit, attached, requested}` of the limit `driver`'s volumes count against on the node."""
        return volume_limits.volume_limit(pod, node, node.get("pods") or (), self._volumes, driver)


def cluster_functions_factory(
    max_tables: int = DEFAULT_MAX_TABLES,
    workloads: WorkloadIndex | None = None,
    volume_store: VolumeStore | None = None,
) -> Callable[[ClusterSnapshot], ClusterFunctions]:
    """A `ClusterFunctions` factory for one scheduler: all share one long-lived `ClusterIndex` (and
    the scheduler's `WorkloadIndex` and `VolumeStore`)."""
    index = ClusterIndex(max_tables)

    def make(snapshot: ClusterSnapshot) -> ClusterFunctions:
        return ClusterFunctions(snapshot, index=index, workloads=workloads, volume_store=volume_store)

    return make
