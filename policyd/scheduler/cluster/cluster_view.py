"""Cluster views: per-cycle, per-pod precomputed indexes behind the `cluster` CEL variable.

A `ClusterView` wraps the nodes of one scheduling cycle (node `.cel` dicts, each with `pods` and
`labels`). Each method is declared as a CEL member function in `policyd.policy.cluster_decls`.
Everything that depends on the pod is computed once per pod (the kube-scheduler PreFilter/PreScore
work) and memoised, so the per-node part of a policy expression is a few dict lookups.

The semantics mirror kube-scheduler's PodTopologySpread, InterPodAffinity and ImageLocality plugins;
docs/DESIGN.md ("Cluster views") lists the approximations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from policyd.scheduler.cluster.cluster_index import ClusterIndex, IndexedCluster
CelObject = Mapping[str, Any]

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_NAMESPACE_NAME = "kubernetes.io/metadata.name"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
# kube-scheduler's system default constraints (PodTopologySpread `defaultingType: System`)
SYSTEM_DEFAULT_CONSTRAINTS = ((LABEL_ZONE, 5), (LABEL_HOSTNAME, 3))
# controllers whose selector kube-scheduler uses for the system default constraints
DEFAULT_SELECTOR_OWNER_KINDS = ("ReplicaSet", "ReplicationController", "StatefulSet")
HARD_POD_AFFINITY_WEIGHT = 1
_MAX_INT64 = 2**63 - 1


def _labels(obj: CelObject) -> Mapping[str, str]:
    return obj.get("labels") or {}


def _pods(node: CelObject) -> Sequence[CelObject]:
    return node.get("pods") or ()


def _pod_key(pod: CelObject) -> tuple[str, str, str]:
    return (str(pod.get("namespace", "")), str(pod.get("name", "")), str(pod.get("uid", "")))


# ---------------------------------------------------------------------------------------------
# Label selectors and node selectors (k8s.io/apimachinery labels, component-helpers nodeaffinity)


@dataclass(frozen=True)
class Requirement:
    """One label requirement: key, operator (In, NotIn, Exists, DoesNotExist, Gt, Lt), values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when `labels` satisfy the requirement."""
        op = self.operator
        present = self.key in labels
        if op in ("In", "="):
            return present and labels[self.key] in self.values
        if op in ("NotIn", "!="):
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt"):
            if not present or len(self.values) != 1:
                return False
            left, right = _parse_int(labels[self.key]), _parse_int(self.values[0])
            if left is None or right is None:
                return False
            return left > right if op == "Gt" else left < right
        return False


def _parse_int(text: str) -> int | None:
    body = text[1:] if text[:1] in "+-" else text
    if not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if -(2**63) <= value <= _MAX_INT64 else None


@dataclass(frozen=True)
class LabelSelector:
    """A parsed metav1.LabelSelector; `nothing` is the nil selector (matches no object)."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """True for the selector with no requirements (labels.Everything(); `Empty()` in Go)."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when the label set is selected."""
        if self.nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)

    def with_requirements(self, extra: Iterable[Requirement]) -> LabelSelector:
        """A selector with more requirements ANDed in (a nil selector stays nil)."""
        if self.nothing:
            return self
        return LabelSelector(self.requirements + tuple(extra))


def parse_label_selector(raw: Mapping[str, Any] | None) -> LabelSelector:
    """metav1.LabelSelectorAsSelector: None -> nothing; {} -> everything."""
    if raw is None:
        return LabelSelector(nothing=True)
    reqs = [Requirement(str(k), "In", (str(v),)) for k, v in (raw.get("matchLabels") or {}).items()]
    for expr in raw.get("matchExpressions") or ():
        values = tuple(str(v) for v in expr.get("values") or ())
        reqs.append(Requirement(str(expr.get("key", "")), str(expr.get("operator", "")), values))
    return LabelSelector(tuple(reqs))


def _term_matches_node(term: Mapping[str, Any], node: CelObject) -> bool:
    """A NodeSelectorTerm: matchExpressions over labels AND matchFields (metadata.name); empty: no."""
    exprs = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    labels = _labels(node)
    for e in exprs:
        values = tuple(str(v) for v in e.get("values") or ())
        if not Requirement(str(e.get("key", "")), str(e.get("operator", "")), values).matches(labels):
            return False
    node_fields = {"metadata.name": str(node.get("name", ""))}
    for f in fields:
        values = tuple(str(v) for v in f.get("values") or ())
        if f.get("key") != "metadata.name" or f.get("operator") not in ("In", "NotIn"):
            return False
        if len(values) != 1:
            return False
        if not Requirement("metadata.name", str(f.get("operator")), values).matches(node_fields):
            return False
    return True


def required_node_affinity_matches(pod: CelObject, node: CelObject) -> bool:
    """nodeaffinity.GetRequiredNodeAffinity(pod).Match(node): nodeSelector AND required terms."""
    labels = _labels(node)
    for key, value in (pod.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    node_affinity = (pod.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(_term_matches_node(t, node) for t in required.get("nodeSelectorTerms") or ())


def tolerates_taint(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """v1helper.TolerationsTolerateTaint."""
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        if key and key != taint.get("key"):
            continue
        op = t.get("operator") or "Equal"
        if op == "Exists" or (op == "Equal" and (t.get("value") or "") == (taint.get("value") or "")):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Affinity terms (framework.AffinityTerm)


@dataclass(frozen=True)
class AffinityTerm:
    """A pod (anti-)affinity term of some pod, resolved: namespaces, selectors, weight."""

    selector: LabelSelector
    topology_key: str
    namespaces: frozenset[str]
    namespace_selector: LabelSelector
    weight: int = 0

    def matches(self, pod: CelObject, ns_labels: Mapping[str, str]) -> bool:
        """framework.AffinityTerm.Matches: namespace (listed or selected) and label selector."""
        ns = str(pod.get("namespace", ""))
        if ns in self.namespaces or self.namespace_selector.matches(ns_labels):
            return self.selector.matches(_labels(pod))
        return False


def _affinity_term(owner: CelObject, raw: Mapping[str, Any], weight: int = 0) -> AffinityTerm:
    selector = parse_label_selector(raw.get("labelSelector"))
    labels = _labels(owner)
    extra = [Requirement(k, "In", (labels[k],)) for k in raw.get("matchLabelKeys") or () if k in labels]
    extra += [
        Requirement(k, "NotIn", (labels[k],)) for k in raw.get("mismatchLabelKeys") or () if k in labels
    ]
    namespaces = frozenset(str(n) for n in raw.get("namespaces") or ())
    ns_raw = raw.get("namespaceSelector")
    if not namespaces and ns_raw is None:
        namespaces = frozenset({str(owner.get("namespace", ""))})
    return AffinityTerm(
        selector=selector.with_requirements(extra),
        topology_key=str(raw.get("topologyKey", "")),
        namespaces=namespaces,
        namespace_selector=parse_label_selector(ns_raw),
        weight=weight,
    )


@dataclass(frozen=True)
class PodTerms:
    """The four kinds of inter-pod affinity terms of one pod."""

    required_affinity: tuple[AffinityTerm, ...]
    required_anti: tuple[AffinityTerm, ...]
    preferred_affinity: tuple[AffinityTerm, ...]
    preferred_anti: tuple[AffinityTerm, ...]

    @property
    def any(self) -> bool:
        """True when the pod has at least one term."""
        return bool(
            self.required_affinity or self.required_anti or self.preferred_affinity or self.preferred_anti
        )


def pod_terms(pod: CelObject) -> PodTerms:
    """The resolved inter-pod affinity terms of `pod`."""
    affinity = pod.get("affinity") or {}
    aff = affinity.get("podAffinity") or {}
    anti = affinity.get("podAntiAffinity") or {}
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pref = "preferredDuringSchedulingIgnoredDuringExecution"

    def preferred(raw: Sequence[Mapping[str, Any]]) -> tuple[AffinityTerm, ...]:
        return tuple(
            _affinity_term(pod, w.get("podAffinityTerm") or {}, int(w.get("weight") or 0)) for w in raw
        )

    return PodTerms(
        required_affinity=tuple(_affinity_term(pod, t) for t in aff.get(req) or ()),
        required_anti=tuple(_affinity_term(pod, t) for t in anti.get(req) or ()),
        preferred_affinity=preferred(aff.get(pref) or ()),
        preferred_anti=preferred(anti.get(pref) or ()),
    )


def _matches_all(terms: Sequence[AffinityTerm], pod: CelObject, ns_labels: Mapping[str, str]) -> bool:
    """podMatchesAllAffinityTerms: false for no terms."""
    return bool(terms) and all(t.matches(pod, ns_labels) for t in terms)


# ---------------------------------------------------------------------------------------------
# Topology spread constraints


@dataclass(frozen=True)
class SpreadConstraint:
    """A resolved topology spread constraint (selector incl. matchLabelKeys, inclusion policies)."""

    topology_key: str
    max_skew: int
    min_domains: int
    matches: Callable[[CelObject], bool]
    selector_empty: bool
    honor_node_affinity: bool = True
    honor_node_taints: bool = False
    # what `matches` depends on (with the pod's namespace: which existing pods are counted)
    selector_key: Hashable = None


def _spread_constraints(pod: CelObject, when: str) -> tuple[list[SpreadConstraint], bool]:
    """The pod's constraints with `whenUnsatisfiable == when`; second: True when system-defaulted."""
    raw_list = pod.get("topologySpreadConstraints") or ()
    labels = _labels(pod)
    if raw_list:
        out = []
        for raw in raw_list:
            if (raw.get("whenUnsatisfiable") or DO_NOT_SCHEDULE) != when:
                continue
            selector = parse_label_selector(raw.get("labelSelector"))
            extra = [
                Requirement(k, "In", (labels[k],)) for k in raw.get("matchLabelKeys") or () if k in labels
            ]
            selector = selector.with_requirements(extra)
            out.append(
                SpreadConstraint(
                    topology_key=str(raw.get("topologyKey", "")),
                    max_skew=int(raw.get("maxSkew") or 1),
                    min_domains=int(raw.get("minDomains") or 1),
                    matches=lambda p, s=selector: s.matches(_labels(p)),  # type: ignore[misc]
                    selector_empty=selector.empty,
                    honor_node_affinity=(raw.get("nodeAffinityPolicy") or "Honor") == "Honor",
                    honor_node_taints=(raw.get("nodeTaintsPolicy") or "Ignore") == "Honor",
                    selector_key=("selector", selector),
                )
            )
        return out, False
    if when != SCHEDULE_ANYWAY:
        return [], True
    owner = str(pod.get("ownerKey") or "")
    if owner.split("/", 1)[0] not in DEFAULT_SELECTOR_OWNER_KINDS:
        return [], True
    return [
        SpreadConstraint(
            topology_key=key,
            max_skew=skew,
            min_domains=1,
            matches=lambda p, o=owner: str(p.get("ownerKey") or "") == o,  # type: ignore[misc]
            selector_empty=False,
            selector_key=("owner", owner),
        )
        for key, skew in SYSTEM_DEFAULT_CONSTRAINTS
    ], True


def _include_node(c: SpreadConstraint, pod: CelObject, node: CelObject) -> bool:
    """matchNodeInclusionPolicies."""
    if c.honor_node_affinity and not required_node_affinity_matches(pod, node):
        return False
    return not c.honor_node_taints or tolerates_node_taints(pod.get("tolerations") or (), node)


def tolerates_node_taints(tolerations: Sequence[Mapping[str, Any]], node: CelObject) -> bool:
    """True when every NoSchedule/NoExecute taint of the node is tolerated."""
    for taint in node.get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates_taint(tolerations, taint):
            return False
    return True


def _count_matching(c: SpreadConstraint, node: CelObject, namespace: str) -> int:
    """countPodsMatchSelector: same namespace, not terminating, selected (empty selector: 0)."""
    if c.selector_empty:
        return 0
    return sum(
        1 for p in _pods(node) if not p.get("deleting") and p.get("namespace") == namespace and c.matches(p)
    )


def spread_constraint_state(
    c: SpreadConstraint, pod: CelObject, domain_counts: dict[Any, int]
) -> dict[str, Any]:
    """The CEL value of one DoNotSchedule constraint's PreFilter state (`cluster.topologySpread`)."""
    min_match = min(domain_counts.values()) if domain_counts else 0
    if len(domain_counts) < c.min_domains:
        min_match = 0
    return {
        "topologyKey": c.topology_key,
        "maxSkew": c.max_skew,
        "minDomains": c.min_domains,
        "domains": len(domain_counts),
        "minMatch": min_match,
        "selfMatch": 1 if c.matches(pod) else 0,
        "counts": domain_counts,
    }


def _has_all_keys(node: CelObject, constraints: Sequence[SpreadConstraint]) -> bool:
    labels = _labels(node)
    return all(c.topology_key in labels for c in constraints)


# ---------------------------------------------------------------------------------------------
# The view


@dataclass
class _PodState:
    """Memoised per-pod results (one scheduling cycle)."""

    values: dict[Any, Any] = field(default_factory=dict)


class ClusterView:
    """The `cluster` CEL variable for one scheduling cycle over a fixed list of nodes."""

    def __init__(
        self,
        nodes: Sequence[CelObject] | Any,
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
        index: ClusterIndex | None = None,
    ) -> None:
        """`nodes`: a runtime `Snapshot` (its `nodes()` states' `.cel`) or a sequence of node dicts.

        With an `index` (kept by the scheduler across cycles) and a snapshot, the per-pod states come
        from the index's per-row tables; without, from walks over every node (the reference path).
        """
        cels = getattr(nodes, "cels", None)
        node_states = getattr(nodes, "nodes", None)
        # a snapshot's index of the nodes that have pods with affinity terms (None: scan every pod)
        self._affinity_index = getattr(nodes, "pods_with_affinity", None)
        if callable(cels):
            self._nodes = cels()  # the snapshot's own list: it does not change during a cycle
        elif callable(node_states):
            self._nodes = [state.cel for state in node_states()]
        else:
            self._nodes = list(nodes)
        self._namespace_labels = namespace_labels or {}
        self._pod_states: dict[tuple[str, str, str], _PodState] = {}
        self._feasible: dict[tuple[str, str, str], list[CelObject]] = {}
        self._images: tuple[dict[str, int], dict[str, int]] | None = None
        self._pod_terms: list[tuple[CelObject, CelObject, PodTerms]] | None = None
        # the index's tables for this snapshot, brought up to date on first use (`_indexed`)
        self._index = index if callable(cels) else None
        self._snapshot = nodes
        self._bound: IndexedCluster | None = None
        has_affinity = getattr(nodes, "has_pods_with_affinity", None)
        # False only when the snapshot says no pod on any node has inter-pod (anti-)affinity terms
        self._any_affinity = bool(has_affinity()) if callable(has_affinity) else True

    @property
    def _indexed(self) -> IndexedCluster | None:
        if self._index is not None and self._bound is None:
            self._bound = self._index.bind(self._snapshot, self.namespace_labels, self._namespace_labels)
            if self._bound is None:
                self._index = None
        return self._bound

    def _no_affinity_anywhere(self, pod: CelObject) -> bool:
        """Neither the pod nor any pod in the snapshot has inter-pod (anti-)affinity terms."""
        if self._any_affinity:
            return False
        affinity = pod.get("affinity") or {}
        return not (affinity.get("podAffinity") or affinity.get("podAntiAffinity"))

    @property
    def nodes(self) -> Sequence[CelObject]:
        """The nodes of this cycle."""
        return self._nodes

    def with_nodes(self, nodes: Sequence[CelObject]) -> ClusterView:
        """A fresh view over other nodes (preemption dry runs); nothing memoised is shared."""
        return ClusterView(nodes, self._namespace_labels)

    def prescore(self, pod: CelObject, feasible: Sequence[CelObject]) -> None:
        """Tell the view which nodes passed the filters for `pod` (kube-scheduler PreScore input)."""
        key = _pod_key(pod)
        self._feasible[key] = list(feasible)
        state = self._pod_states.get(key)
        if state is not None:
            for k in [k for k in state.values if k[0] in ("spread-score", "affinity-score")]:
                del state.values[k]

    def _memo(self, pod: CelObject, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        state = self._pod_states.setdefault(_pod_key(pod), _PodState())
        if key not in state.values:
            state.values[key] = compute()
        return state.values[key]

    def _feasible_nodes(self, pod: CelObject) -> list[CelObject]:
        return self._feasible.get(_pod_key(pod), self._nodes)

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """Labels of a namespace (known Namespace objects, else the automatic name label)."""
        return self._namespace_labels.get(namespace) or {LABEL_NAMESPACE_NAME: namespace}

    # -- general ------------------------------------------------------------------------------

    def node_count(self) -> int:
        """Number of nodes in the cycle's snapshot."""
        return len(self._nodes)

    def domain_counts(self, pod: CelObject, topology_key: str, labels: Mapping[str, str]) -> dict[str, int]:
        """Per value of `topology_key`: pods in the pod's namespace carrying all `labels` (0 included)."""
        sel = tuple(sorted(labels.items()))

        def compute() -> dict[str, int]:
            ns = pod.get("namespace")
            counts: dict[str, int] = {}
            for node in self._nodes:
                value = _labels(node).get(topology_key)
                if value is None:
                    continue
                n = sum(
                    1
                    for p in _pods(node)
                    if p.get("namespace") == ns
                    and not p.get("deleting")
                    and all(_labels(p).get(k) == v for k, v in sel)
                )
                counts[value] = counts.get(value, 0) + n
            return counts

        return self._memo(pod, ("domain-counts", topology_key, sel), compute)  # type: ignore[no-any-return]

    # -- ImageLocality ------------------------------------------------------------------------

    def _image_index(self) -> tuple[dict[str, int], dict[str, int]]:
        if self._images is None:
            count: dict[str, int] = {}
            size: dict[str, int] = {}
            for node in self._nodes:
                for name, bytes_ in (node.get("images") or {}).items():
                    count[name] = count.get(name, 0) + 1
                    size.setdefault(name, int(bytes_))
            self._images = (count, size)
        return self._images

    def image_node_count(self, image: str) -> int:
        """Number of nodes that have `image` (ImageStateSummary.NumNodes)."""
        if self._indexed is not None:
            return self._indexed.image(image)[0]
        return self._image_index()[0].get(image, 0)

    def image_size(self, image: str) -> int:
        """Size in bytes kube-scheduler attributes to `image` (first node reporting it)."""
        if self._indexed is not None:
            return self._indexed.image(image)[1]
        return self._image_index()[1].get(image, 0)

    # -- PodTopologySpread: filter ------------------------------------------------------------

    def topology_spread(self, pod: CelObject, when: str) -> list[dict[str, Any]]:
        """The pod's constraints of one kind with their domain counts (PreFilter state)."""
        return self._memo(pod, ("spread", when), lambda: self._spread_filter_state(pod, when))  # type: ignore[no-any-return]

    def _spread_filter_state(self, pod: CelObject, when: str) -> list[dict[str, Any]]:
        if not _spread_constraints(pod, when)[0]:
            return []  # nothing to count (and no index tables to bring up to date)
        if self._indexed is not None:
            return self._indexed.spread_filter_state(pod, when)
        return self._spread_filter_state_walk(pod, when)

    def _spread_filter_state_walk(self, pod: CelObject, when: str) -> list[dict[str, Any]]:
        constraints, _ = _spread_constraints(pod, when)
        if not constraints:
            return []
        ns = str(pod.get("namespace", ""))
        # TpPairToMatchNum: keyed by (topologyKey, value); constraints sharing a key share the pair
        counts: dict[str, dict[str, int]] = {c.topology_key: {} for c in constraints}
        for node in self._nodes:
            if not _has_all_keys(node, constraints):
                continue
            labels = _labels(node)
            node_counts: dict[str, int] = {}
            for c in constraints:
                if _include_node(c, pod, node):
                    node_counts[c.topology_key] = _count_matching(c, node, ns)
            for key, n in node_counts.items():
                value = labels[key]
                counts[key][value] = counts[key].get(value, 0) + n
        return [spread_constraint_state(c, pod, dict(counts[c.topology_key])) for c in constraints]

    # -- PodTopologySpread: score -------------------------------------------------------------

    def topology_spread_score(self, pod: CelObject, node: CelObject) -> int:
        """Raw PodTopologySpread score of a feasible node (rounded); -1 when the node is ignored."""
        state = self._memo(pod, ("spread-score",), lambda: self._spread_score_state(pod))
        return state["scores"].get(str(node.get("name", "")), -1)  # type: ignore[no-any-return]

    def topology_spread_score_range(self, pod: CelObject) -> dict[str, Any]:
        """`{active, min, max}` of raw scores over non-ignored feasible nodes (NormalizeScore input)."""
        state = self._memo(pod, ("spread-score",), lambda: self._spread_score_state(pod))
        return state["range"]  # type: ignore[no-any-return]

    def _spread_score_state(self, pod: CelObject) -> dict[str, Any]:
        if not _spread_constraints(pod, SCHEDULE_ANYWAY)[0]:
            return {"scores": {}, "range": {"active": False, "min": 0, "max": 0}}
        if self._indexed is not None:
            state = self._indexed.spread_score_state(pod, self._feasible.get(_pod_key(pod)))
            if state is not None:
                return state
        return self._spread_score_state_walk(pod)

    def _spread_score_state_walk(self, pod: CelObject) -> dict[str, Any]:
        inactive = {"scores": {}, "range": {"active": False, "min": 0, "max": 0}}
        feasible = self._feasible_nodes(pod)
        constraints, defaulted = _spread_constraints(pod, SCHEDULE_ANYWAY)
        if not constraints or not feasible or not self._nodes:
            return inactive
        require_all = not defaulted
        ns = str(pod.get("namespace", ""))
        ignored: set[str] = set()
        pair_counts: dict[tuple[str, str], int] = {}
        topo_size = [0] * len(constraints)
        for node in feasible:
            if require_all and not _has_all_keys(node, constraints):
                ignored.add(str(node.get("name", "")))
                continue
            labels = _labels(node)
            for i, c in enumerate(constraints):
                if c.topology_key == LABEL_HOSTNAME:
                    continue
                pair = (c.topology_key, labels.get(c.topology_key, ""))
                if pair not in pair_counts:
                    pair_counts[pair] = 0
                    topo_size[i] += 1
        weights = []
        for i, c in enumerate(constraints):
            size = len(feasible) - len(ignored) if c.topology_key == LABEL_HOSTNAME else topo_size[i]
            weights.append(math.log(size + 2))
        for node in self._nodes:
            if require_all and not _has_all_keys(node, constraints):
                continue
            labels = _labels(node)
            for c in constraints:
                if not _include_node(c, pod, node):
                    continue
                pair = (c.topology_key, labels.get(c.topology_key, ""))
                if pair in pair_counts:
                    pair_counts[pair] += _count_matching(c, node, ns)
        scores: dict[str, int] = {}
        for node in feasible:
            name = str(node.get("name", ""))
            if name in ignored:
                continue
            labels = _labels(node)
            total = 0.0
            for i, c in enumerate(constraints):
                if c.topology_key not in labels:
                    continue
                if c.topology_key == LABEL_HOSTNAME:
                    cnt = _count_matching(c, node, ns)
                else:
                    cnt = pair_counts[(c.topology_key, labels[c.topology_key])]
                total += cnt * weights[i] + (c.max_skew - 1)
            scores[name] = math.floor(total + 0.5)  # Go math.Round for non-negative values
        if not scores:
            return {"scores": scores, "range": {"active": True, "min": 0, "max": 0}}
        values = scores.values()
        return {"scores": scores, "range": {"active": True, "min": min(values), "max": max(values)}}

    # -- InterPodAffinity: filter -------------------------------------------------------------

    def _all_pod_terms(self) -> list[tuple[CelObject, CelObject, PodTerms]]:
        """(node, pod, terms) of every existing pod with inter-pod affinity terms (cycle-wide)."""
        if self._pod_terms is None:
            out = []
            if callable(self._affinity_index):
                candidates: Iterable[tuple[CelObject, Sequence[CelObject]]] = self._affinity_index()
            else:
                candidates = ((node, _pods(node)) for node in self._nodes)
            for node, pods in candidates:
                for p in pods:
                    if not p.get("affinity"):
                        continue
                    terms = pod_terms(p)
                    if terms.any:
                        out.append((node, p, terms))
            self._pod_terms = out
        return self._pod_terms

    def inter_pod_affinity(self, pod: CelObject) -> dict[str, Any]:
        """Required (anti-)affinity state of the pod (kube-scheduler InterPodAffinity PreFilter)."""
        return self._memo(pod, ("affinity",), lambda: self._affinity_filter_state(pod))  # type: ignore[no-any-return]

    def _affinity_filter_state(self, pod: CelObject) -> dict[str, Any]:
        if self._no_affinity_anywhere(pod):
            return {"required": [], "anyMatch": False, "selfMatch": False, "anti": [], "existingAnti": {}}
        if self._indexed is not None:
            return self._indexed.affinity_filter_state(pod)
        return self._affinity_filter_state_walk(pod)

    def _affinity_filter_state_walk(self, pod: CelObject) -> dict[str, Any]:
        terms = pod_terms(pod)
        ns_labels = self.namespace_labels(str(pod.get("namespace", "")))
        existing: dict[str, dict[str, int]] = {}
        for node, _, other in self._all_pod_terms():
            labels = _labels(node)
            for t in other.required_anti:
                if t.topology_key in labels and t.matches(pod, ns_labels):
                    bucket = existing.setdefault(t.topology_key, {})
                    value = labels[t.topology_key]
                    bucket[value] = bucket.get(value, 0) + 1
        affinity: dict[str, dict[str, int]] = {}
        anti: dict[str, dict[str, int]] = {}
        if terms.required_affinity or terms.required_anti:
            for node in self._nodes:
                labels = _labels(node)
                for p in _pods(node):
                    p_ns_labels = self.namespace_labels(str(p.get("namespace", "")))
                    if _matches_all(terms.required_affinity, p, p_ns_labels):
                        for t in terms.required_affinity:
                            _bump(affinity, labels, t.topology_key)
                    for t in terms.required_anti:
                        if t.matches(p, p_ns_labels):
                            _bump(anti, labels, t.topology_key)
        return {
            "required": [_term_view(t, affinity) for t in terms.required_affinity],
            "anyMatch": any(affinity.values()),
            "selfMatch": _matches_all(terms.required_affinity, pod, ns_labels),
            "anti": [_term_view(t, anti) for t in terms.required_anti],
            "existingAnti": existing,
        }

    # -- InterPodAffinity: score --------------------------------------------------------------

    def inter_pod_affinity_score(self, pod: CelObject, node: CelObject) -> int:
        """Raw InterPodAffinity score of a node (sum of its domains' accumulated term weights)."""
        state = self._memo(pod, ("affinity-score",), lambda: self._affinity_score_state(pod))
        labels = _labels(node)
        return sum(values.get(labels[key], 0) for key, values in state["topology"].items() if key in labels)

    def inter_pod_affinity_score_range(self, pod: CelObject) -> dict[str, Any]:
        """`{active, min, max}` of raw scores over the feasible nodes (NormalizeScore input)."""
        state = self._memo(pod, ("affinity-score",), lambda: self._affinity_score_state(pod))
        return state["range"]  # type: ignore[no-any-return]

    def _affinity_score_state(self, pod: CelObject) -> dict[str, Any]:
        if self._no_affinity_anywhere(pod):
            return {"topology": {}, "range": {"active": False, "min": 0, "max": 0}}
        if self._indexed is not None:
            state = self._indexed.affinity_score_state(pod, self._feasible.get(_pod_key(pod)))
            if state is not None:
                return state
        return self._affinity_score_state_walk(pod)

    def _affinity_score_state_walk(self, pod: CelObject) -> dict[str, Any]:
        terms = pod_terms(pod)
        ns_labels = self.namespace_labels(str(pod.get("namespace", "")))
        topology: dict[str, dict[str, int]] = {}

        def add(
            term: AffinityTerm, weight: int, target: CelObject, nsl: Mapping[str, str], node: CelObject
        ) -> None:
            if term.matches(target, nsl):
                value = _labels(node).get(term.topology_key)
                if value is not None:
                    bucket = topology.setdefault(term.topology_key, {})
                    bucket[value] = bucket.get(value, 0) + weight

        has_own = bool(terms.preferred_affinity or terms.preferred_anti)
        if has_own:
            candidates: Iterable[tuple[CelObject, CelObject, PodTerms | None]] = (
                (node, p, None) for node in self._nodes for p in _pods(node)
            )
        else:
            candidates = self._all_pod_terms()
        for node, existing, known in candidates:
            if not _labels(node):
                continue
            other = known if known is not None else pod_terms(existing)
            ex_ns_labels = self.namespace_labels(str(existing.get("namespace", "")))
            for t in terms.preferred_affinity:
                add(t, t.weight, existing, ex_ns_labels, node)
            for t in terms.preferred_anti:
                add(t, -t.weight, existing, ex_ns_labels, node)
            for t in other.required_affinity:
                add(t, HARD_POD_AFFINITY_WEIGHT, pod, ns_labels, node)
            for t in other.preferred_affinity:
                add(t, t.weight, pod, ns_labels, node)
            for t in other.preferred_anti:
                add(t, -t.weight, pod, ns_labels, node)
        active = bool(topology)
        result: dict[str, Any] = {"topology": topology, "range": {"active": active, "min": 0, "max": 0}}
        if active:
            raw = []
            for node in self._feasible_nodes(pod):
                labels = _labels(node)
                raw.append(sum(v.get(labels[k], 0) for k, v in topology.items() if k in labels))
            if raw:
                result["range"] = {"active": True, "min": min(raw), "max": max(raw)}
        return result


def _bump(counts: dict[str, dict[str, int]], labels: Mapping[str, str], key: str) -> None:
    if key in labels:
        bucket = counts.setdefault(key, {})
        bucket[labels[key]] = bucket.get(labels[key], 0) + 1


def _term_view(term: AffinityTerm, counts: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    return {"topologyKey": term.topology_key, "counts": dict(counts.get(term.topology_key, {}))}
