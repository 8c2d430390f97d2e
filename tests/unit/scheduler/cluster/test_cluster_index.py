"""The cluster functions (over the index's tables) answer exactly as the reference walk, across
snapshot changes and preemption what-ifs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyd.scheduler.cluster.functions import ClusterFunctions
from policyd.scheduler.cluster.tables import ClusterIndex, Domains, DomainTotals
from policyd.scheduler.snapshot import Snapshot
from tests.unit.scheduler.cluster.reference import ReferenceCluster
from tests.unit.scheduler.cluster.snapshots import NodeRow
from tests.unit.scheduler.cluster.snapshots import generations as _generations

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
POOL = "pool"
KEYS = (ZONE, HOST, POOL)
APPS = ("web", "db")
NAMESPACES = ("default", "other")
WEB = {"app": "web"}


# ---------------------------------------------------------------------------------------------
# Strategies: small vocabularies so that selectors, domains and terms collide often


def _selector(draw: st.DrawFn) -> dict[str, Any] | None:
    kind = draw(st.sampled_from(["labels", "labels", "expr", "empty", "nil"]))
    if kind == "nil":
        return None
    if kind == "empty":
        return {}
    if kind == "labels":
        return {"matchLabels": {"app": draw(st.sampled_from(APPS))}}
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
    values = [draw(st.sampled_from(APPS))] if op in ("In", "NotIn") else []
    return {"matchExpressions": [{"key": "app", "operator": op, "values": values}]}


@st.composite
def affinity_term(draw: st.DrawFn) -> dict[str, Any]:
    """A PodAffinityTerm."""
    term: dict[str, Any] = {"topologyKey": draw(st.sampled_from(KEYS)), "labelSelector": _selector(draw)}
    ns = draw(st.sampled_from(["own", "list", "selector", "all"]))
    if ns == "list":
        term["namespaces"] = draw(st.lists(st.sampled_from(NAMESPACES), min_size=1, max_size=2))
    elif ns == "selector":
        term["namespaceSelector"] = {"matchLabels": {"team": "t"}}
    elif ns == "all":
        term["namespaceSelector"] = {}
    if draw(st.booleans()):
        term["matchLabelKeys"] = ["v"]
    return term


@st.composite
def pod_affinity(draw: st.DrawFn) -> dict[str, Any]:
    """podAffinity / podAntiAffinity with required and preferred terms."""
    out: dict[str, Any] = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        spec: dict[str, Any] = {}
        required = draw(st.lists(affinity_term(), max_size=2))
        if required:
            spec["requiredDuringSchedulingIgnoredDuringExecution"] = required
        preferred = draw(st.lists(st.tuples(st.integers(0, 5), affinity_term()), max_size=2))
        if preferred:
            spec["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "podAffinityTerm": t} for w, t in preferred
            ]
        if spec:
            out[kind] = spec
    return out


@st.composite
def spread_constraint(draw: st.DrawFn) -> dict[str, Any]:
    """A topologySpreadConstraint."""
    c: dict[str, Any] = {
        "topologyKey": draw(st.sampled_from(KEYS)),
        "maxSkew": draw(st.integers(1, 3)),
        "whenUnsatisfiable": draw(st.sampled_from(["DoNotSchedule", "ScheduleAnyway"])),
        "labelSelector": _selector(draw),
    }
    if draw(st.booleans()):
        c["minDomains"] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        c["matchLabelKeys"] = ["v"]
    if draw(st.booleans()):
        c["nodeAffinityPolicy"] = draw(st.sampled_from(["Honor", "Ignore"]))
    if draw(st.booleans()):
        c["nodeTaintsPolicy"] = draw(st.sampled_from(["Honor", "Ignore"]))
    return c


@st.composite
def a_pod(draw: st.DrawFn, incoming: bool = False) -> dict[str, Any]:
    """A CEL-shaped pod dict (existing, or incoming with spread constraints and node affinity)."""
    n = next(_generations)
    labels = {"app": draw(st.sampled_from(APPS))}
    if draw(st.booleans()):
        labels["v"] = draw(st.sampled_from(["1", "2"]))
    p: dict[str, Any] = {
        "name": f"p{n}",
        "namespace": draw(st.sampled_from(NAMESPACES)),
        "uid": f"u{n}",
        "labels": labels,
    }
    if not incoming and draw(st.integers(0, 5)) == 0:
        p["deleting"] = True
    if draw(st.booleans()):
        p["ownerKey"] = draw(st.sampled_from(["ReplicaSet/web", "StatefulSet/db", "Job/x"]))
    if draw(st.integers(0, 2)) == 0:
        p["affinity"] = draw(pod_affinity())
    if incoming:
        constraints = draw(st.lists(spread_constraint(), max_size=3))
        if constraints:
            p["topologySpreadConstraints"] = constraints
        if draw(st.booleans()):
            p["nodeSelector"] = {POOL: draw(st.sampled_from(["x", "y"]))}
        if draw(st.integers(0, 3)) == 0:
            expr = {
                "key": ZONE,
                "operator": "In",
                "values": draw(st.lists(st.sampled_from("abc"), min_size=1)),
            }
            node_affinity = {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr]}]
                }
            }
            p["affinity"] = dict(p.get("affinity") or {}, nodeAffinity=node_affinity)
        if draw(st.booleans()):
            p["tolerations"] = [{"key": "k", "operator": "Exists"}]
    return p


@st.composite
def node_labels(draw: st.DrawFn, name: str) -> dict[str, str]:
    """Labels of a node: each topology key present or not; "" is a possible zone."""
    labels = {}
    if draw(st.integers(0, 5)):
        labels[HOST] = name
    zone = draw(st.sampled_from(["a", "b", "c", "", None]))
    if zone is not None:
        labels[ZONE] = zone
    pool = draw(st.sampled_from(["x", "y", None]))
    if pool is not None:
        labels[POOL] = pool
    return labels


@st.composite
def a_node(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A CEL-shaped node dict."""
    taints = draw(st.lists(st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]), max_size=1))
    images = draw(st.dictionaries(st.sampled_from(["i1", "i2", "i3"]), st.integers(1, 9), max_size=2))
    return {
        "name": name,
        "labels": draw(node_labels(name)),
        "taints": [{"key": "k", "value": "v", "effect": e} for e in taints],
        "images": images,
        "pods": draw(st.lists(a_pod(), max_size=3)),
    }


# ---------------------------------------------------------------------------------------------
# The cluster under test: a snapshot changed the way the cache changes it


class Cluster:
    """Node dicts in a snapshot, changed row by row (fresh dict and version per change)."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = {n["name"]: n for n in nodes}
        self.snapshot = Snapshot()
        self.store(list(self.nodes), list(self.nodes))

    def store(self, order: list[str] | None, changed: list[str]) -> None:
        states = {name: (next(_generations), NodeRow(name, self.nodes[name])) for name in changed}
        self.snapshot.store(order, states)  # type: ignore[arg-type]

    def change(self, name: str, **fields: Any) -> None:
        """Replace node `name`'s dict with one with `fields` changed."""
        self.nodes[name] = dict(self.nodes[name], **fields)
        self.store(None, [name])

    def add(self, node: dict[str, Any]) -> None:
        """Append a node."""
        self.nodes[node["name"]] = node
        self.store(list(self.nodes), [node["name"]])

    def remove(self, name: str) -> None:
        """Delete a node."""
        del self.nodes[name]
        self.store(list(self.nodes), [])


@st.composite
def step(draw: st.DrawFn, cluster: Cluster) -> None:
    """Apply one random change to `cluster`."""
    names = list(cluster.nodes)
    kind = draw(st.sampled_from(["add-pod", "remove-pod", "labels", "add-node", "remove-node", "touch"]))
    if kind == "add-node" or not names:
        name = f"n{next(_generations)}"
        cluster.add(draw(a_node(name)))
        return
    name = draw(st.sampled_from(names))
    node = cluster.nodes[name]
    if kind == "add-pod":
        cluster.change(name, pods=[*node["pods"], draw(a_pod())])
    elif kind == "remove-pod" and node["pods"]:
        i = draw(st.integers(0, len(node["pods"]) - 1))
        cluster.change(name, pods=node["pods"][:i] + node["pods"][i + 1 :])
    elif kind == "labels":
        cluster.change(name, labels=draw(node_labels(name)))
    elif kind == "remove-node":
        cluster.remove(name)
    else:
        cluster.change(name)  # a new version, same content


def _observe(
    functions: ClusterFunctions,
    nodes: list[Any],
    pod: dict[str, Any],
    feasible: list[Any] | None,
) -> dict[str, Any]:
    """Everything the cluster functions tell about `pod` (`nodes`: the snapshot's node dicts)."""
    out: dict[str, Any] = {
        "spread": functions.topology_spread(pod, "DoNotSchedule"),
        "spread-soft": functions.topology_spread(pod, "ScheduleAnyway"),
        "affinity": functions.inter_pod_affinity(pod),
        "images": [
            (functions.image_node_count(i), functions.image_size(i)) for i in ("i1", "i2", "i3", "i4")
        ],
    }
    # dict order of the spread counts follows the rows, as in the reference walk
    out["spread-order"] = [list(c["counts"]) for c in out["spread"] + out["spread-soft"]]
    if feasible is not None:
        functions.prescore(pod, feasible)
    out["spread-score"] = [functions.topology_spread_score(pod, n) for n in nodes]
    out["spread-range"] = functions.topology_spread_score_range(pod)
    out["affinity-score"] = [functions.inter_pod_affinity_score(pod, n) for n in nodes]
    out["affinity-range"] = functions.inter_pod_affinity_score_range(pod)
    out["domain-counts"] = [
        list(functions.domain_counts(pod, key, {"app": app}).items()) for key in KEYS for app in APPS
    ]
    return out


def _compare(
    data: st.DataObject, snapshot: Any, index: ClusterIndex, namespaces: Mapping[str, Mapping[str, str]]
) -> None:
    nodes = list(snapshot.cels())
    for _ in range(data.draw(st.integers(1, 3))):
        pod = data.draw(a_pod(incoming=True))
        feasible = None
        if nodes and data.draw(st.booleans()):
            feasible = data.draw(st.lists(st.sampled_from(nodes), unique_by=id))
        expected = _observe(ReferenceCluster(snapshot, namespaces), nodes, pod, feasible)
        actual = _observe(ClusterFunctions(snapshot, namespaces, index=index), nodes, pod, feasible)
        assert actual == expected


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_functions_match_the_reference_across_snapshot_changes(data: st.DataObject) -> None:
    names = [f"n{next(_generations)}" for _ in range(data.draw(st.integers(0, 5)))]
    cluster = Cluster([data.draw(a_node(name)) for name in names])
    index = ClusterIndex(max_tables=data.draw(st.sampled_from([3, 256])))
    namespaces: dict[str, dict[str, str]] = {}
    _compare(data, cluster.snapshot, index, namespaces)
    for _ in range(data.draw(st.integers(1, 5))):
        data.draw(step(cluster))
        if data.draw(st.integers(0, 4)) == 0:
            namespaces = {"other": {"team": "t"}} if not namespaces else {}
        _compare(data, cluster.snapshot, index, namespaces)
        if cluster.nodes and data.draw(st.integers(0, 2)) == 0:
            # a preemption what-if: a derived snapshot with one row replaced (version -1)
            name = data.draw(st.sampled_from(list(cluster.nodes)))
            what_if = dict(cluster.nodes[name], pods=data.draw(st.lists(a_pod(), max_size=2)))
            _compare(data, cluster.snapshot.replace(NodeRow(name, what_if)), index, namespaces)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_one_pods_spread_counts_follow_the_changes_row_by_row(data: st.DataObject) -> None:
    """The same pod after every change: its domain totals are updated from the changed rows only
    (one table across the changes), and equal the reference walk's counts, in the same order.
    More than 8 changed rows are counted all at once, fewer one by one."""
    names = [f"n{next(_generations)}" for _ in range(data.draw(st.integers(1, 12)))]
    cluster = Cluster([data.draw(a_node(name)) for name in names])
    index = ClusterIndex(max_tables=data.draw(st.sampled_from([4, 256])))
    pod = data.draw(a_pod(incoming=True))

    def counts(snapshot: Any, functions: Any) -> list[list[tuple[str, int]]]:
        return [
            list(c["counts"].items())
            for when in ("DoNotSchedule", "ScheduleAnyway")
            for c in functions(snapshot).topology_spread(pod, when)
        ]

    def indexed(snapshot: Any) -> ClusterFunctions:
        return ClusterFunctions(snapshot, index=index)

    def reference(snapshot: Any) -> ReferenceCluster:
        return ReferenceCluster(snapshot, {})

    assert counts(cluster.snapshot, indexed) == counts(cluster.snapshot, reference)
    for _ in range(data.draw(st.integers(1, 8))):
        for _ in range(data.draw(st.sampled_from([1, 1, 2, 12]))):  # one change, or many at once
            data.draw(step(cluster))
        assert counts(cluster.snapshot, indexed) == counts(cluster.snapshot, reference)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_one_pods_affinity_counts_follow_the_changes_row_by_row(data: st.DataObject) -> None:
    """The same pod with required terms after every change: its (anti-)affinity counts are kept
    per term across the changes (updated from the changed rows only, domains dropped at 0) when
    each topology key has one term, else summed afresh; both equal the reference walk's state."""
    names = [f"n{next(_generations)}" for _ in range(data.draw(st.integers(1, 12)))]
    cluster = Cluster([data.draw(a_node(name)) for name in names])
    index = ClusterIndex(max_tables=data.draw(st.sampled_from([4, 256])))
    terms = st.lists(affinity_term(), min_size=1, max_size=2)
    pod = dict(
        data.draw(a_pod(incoming=True)),
        affinity={
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": data.draw(terms)},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": data.draw(terms)},
        },
    )

    def check() -> None:
        expected = ReferenceCluster(cluster.snapshot, {}).inter_pod_affinity(pod)
        assert ClusterFunctions(cluster.snapshot, index=index).inter_pod_affinity(pod) == expected

    check()
    for _ in range(data.draw(st.integers(1, 8))):
        for _ in range(data.draw(st.sampled_from([1, 1, 2, 12]))):  # one change, or many at once
            data.draw(step(cluster))
        check()


ANTI_WEB = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"topologyKey": HOST, "labelSelector": {"matchLabels": WEB}}
]}}  # fmt: skip


def test_kept_affinity_counts_gain_and_lose_domains_bind_by_bind() -> None:
    """Web pods that keep web pods off their host, bound and removed one node at a time: the
    counts a new web pod reads (its own anti term's, and the existing pods' term matching it) gain
    a host with its first pod and lose it with its last, without being built again."""
    web = dict(WEB_POD, affinity=ANTI_WEB)
    cluster = Cluster([{"name": f"n{i}", "labels": {HOST: f"n{i}"}, "pods": []} for i in range(12)])
    index = ClusterIndex()
    incoming = dict(web, name="new")

    def state() -> dict[str, Any]:
        return ClusterFunctions(cluster.snapshot, index=index).inter_pod_affinity(incoming)

    assert state()["existingAnti"] == {} and state()["anti"][0]["counts"] == {}
    for i, pods in ((3, 1), (1, 2), (3, 2), (1, 0), (5, 1), (3, 0)):
        cluster.change(f"n{i}", pods=[web] * pods)
        got = state()
        assert got == ReferenceCluster(cluster.snapshot, {}).inter_pod_affinity(incoming)
    assert got["existingAnti"] == {HOST: {"n5": 1}}
    assert got["anti"][0]["counts"] == {"n5": 1}
    before = index.rows_updated
    cluster.change("n2", pods=[web])
    got = state()
    # kept, not built again: a host counted anew goes last (a count from scratch puts n2 first)
    assert list(got["existingAnti"][HOST]) == ["n5", "n2"]
    assert list(got["anti"][0]["counts"]) == ["n5", "n2"]
    assert index.rows_updated - before <= 8  # the changed row, in each table read
    for i in range(12):  # more rows at once than are updated one by one: hosts gained and lost
        cluster.change(f"n{i}", pods=[web] * (i % 4 == 1))
    assert state() == ReferenceCluster(cluster.snapshot, {}).inter_pod_affinity(incoming)
    assert state()["anti"][0]["counts"] == {"n1": 1, "n5": 1, "n9": 1}


def test_kept_affinity_counts_follow_namespace_labels() -> None:
    """A term selecting namespaces by label: its kept counts are dropped when namespace labels
    change (they change no node's version), as the pod counts they are read from are."""
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOST, "labelSelector": {"matchLabels": WEB}, "namespaceSelector": {"matchLabels": {"team": "t"}}}
    ]}}  # fmt: skip
    other_web = dict(WEB_POD, namespace="other")
    cluster = Cluster([{"name": f"n{i}", "labels": {HOST: f"n{i}"}, "pods": [other_web]} for i in range(3)])
    index = ClusterIndex()
    incoming = dict(WEB_POD, name="new", affinity=anti)

    def anti_counts(namespaces: dict[str, dict[str, str]]) -> dict[str, int]:
        state = ClusterFunctions(cluster.snapshot, namespaces, index=index).inter_pod_affinity(incoming)
        assert state == ReferenceCluster(cluster.snapshot, namespaces).inter_pod_affinity(incoming)
        return dict(state["anti"][0]["counts"])

    assert anti_counts({}) == {}
    assert anti_counts({"other": {"team": "t"}}) == {"n0": 1, "n1": 1, "n2": 1}
    assert anti_counts({"other": {}}) == {}


def _spreading_web(*skews: int) -> dict[str, Any]:
    """An incoming pod with one zone constraint over app=web pods per max skew."""
    constraints = [{"topologyKey": ZONE, "maxSkew": s, "labelSelector": {"matchLabels": WEB}} for s in skews]
    return {
        "name": "new",
        "namespace": "d",
        "uid": "u",
        "labels": {},
        "topologySpreadConstraints": constraints,
    }


def test_rows_are_recomputed_only_where_versions_changed() -> None:
    nodes = [
        {
            "name": f"n{i}",
            "labels": {ZONE: "ab"[i % 2]},
            "pods": [{"name": f"p{i}", "namespace": "d", "labels": WEB}],
        }
        for i in range(10)
    ]
    cluster = Cluster(nodes)
    index = ClusterIndex()

    def make(snapshot: Snapshot) -> ClusterFunctions:
        return ClusterFunctions(snapshot, index=index)

    incoming = _spreading_web(1)
    assert make(cluster.snapshot).topology_spread(incoming, "DoNotSchedule")[0]["counts"] == {"a": 5, "b": 5}
    before = index.rows_updated
    cluster.change("n3", pods=[*cluster.nodes["n3"]["pods"], {"name": "x", "namespace": "d", "labels": WEB}])
    assert make(cluster.snapshot).topology_spread(incoming, "DoNotSchedule")[0]["counts"] == {"a": 5, "b": 6}
    assert 0 < index.rows_updated - before <= 4  # one row in each table used (the domain totals too)
    cluster.remove("n0")
    assert make(cluster.snapshot).topology_spread(incoming, "DoNotSchedule")[0]["counts"] == {"b": 6, "a": 4}
    assert np.array_equal(index._tables[("domains", ZONE)].versions, cluster.snapshot.versions)  # type: ignore[attr-defined]


WEB_POD = {"name": "w", "namespace": "d", "labels": WEB}


def _zoned_web_nodes(n: int) -> tuple[Cluster, dict[str, Any], Callable[[], dict[str, int]]]:
    """`n` nodes in zones a, b, c (one web pod on every other one), a pod spreading web pods over
    zones, and the domain counts its DoNotSchedule constraint reads, through one kept index."""
    nodes = [{"name": f"n{i}", "labels": {ZONE: "abc"[i % 3]}, "pods": [WEB_POD] * (i % 2)} for i in range(n)]
    cluster = Cluster(nodes)
    index = ClusterIndex()
    incoming = _spreading_web(1)

    def counts() -> dict[str, int]:
        state = ClusterFunctions(cluster.snapshot, index=index).topology_spread(incoming, "DoNotSchedule")
        return dict(state[0]["counts"])

    return cluster, incoming, counts


def test_domain_totals_follow_many_rows_changed_at_once() -> None:
    """Pods bound to and removed from a dozen nodes between two pods: the totals move by the rows'
    old and new amounts (and a relabelled node moves its amount to its new domain)."""
    web = WEB_POD
    cluster, incoming, counts = _zoned_web_nodes(20)
    assert counts() == {"a": 3, "b": 4, "c": 3}
    for i in range(12):
        cluster.change(f"n{i}", pods=[web] * (2 if i % 2 else 3))
    cluster.change("n19", labels={ZONE: "a"})
    expected = ReferenceCluster(cluster.snapshot, {}).topology_spread(incoming, "DoNotSchedule")[0]["counts"]
    assert counts() == expected


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.integers(0, 3), st.sampled_from(["", "a", "b", "c", "d"])),
        min_size=1,
        max_size=25,
    )
)
def test_kept_domain_counts_follow_binds_one_node_at_a_time(changes: list[tuple[int, int, str]]) -> None:
    """The counts a spread constraint reads are built once and then kept up to date by each bind's
    row (a new total for the same domain), rebuilt when a row changes domain: after every change
    they equal a count from scratch, in the same order."""
    web = WEB_POD
    cluster, incoming, counts = _zoned_web_nodes(8)
    for node, pods, zone in changes:
        counts()  # built (or kept) before the change
        if zone:
            cluster.change(f"n{node}", pods=[web] * pods, labels={ZONE: zone})
        else:
            cluster.change(f"n{node}", pods=[web] * pods)
        expected = ReferenceCluster(cluster.snapshot, {}).topology_spread(incoming, "DoNotSchedule")[0][
            "counts"
        ]
        got = counts()
        assert got == expected and list(got) == list(expected)


def test_a_what_if_row_is_computed_once_per_binding() -> None:
    nodes = [{"name": f"n{i}", "labels": {ZONE: "ab"[i % 2]}, "pods": []} for i in range(4)]
    cluster = Cluster(nodes)
    index = ClusterIndex()
    incoming = _spreading_web(1, 2)
    ClusterFunctions(cluster.snapshot, index=index).topology_spread(incoming, "DoNotSchedule")
    web = {"name": "x", "namespace": "d", "labels": WEB}
    what_if = cluster.snapshot.replace(NodeRow("n1", dict(nodes[1], pods=[web])))  # type: ignore[arg-type]
    before = index.rows_updated
    functions = ClusterFunctions(what_if, index=index)
    [first, second] = functions.topology_spread(incoming, "DoNotSchedule")
    assert first["counts"] == second["counts"] == {"a": 0, "b": 1}
    # the what-if row, once in each table used (domains, node-affinity mask, pod counts, domain
    # totals), not per use
    assert index.rows_updated - before == 4
    before = index.rows_updated
    assert ClusterFunctions(cluster.snapshot, index=index).topology_spread(incoming, "DoNotSchedule")[0][
        "counts"
    ] == {"a": 0, "b": 0}
    assert index.rows_updated - before == 4  # the real row again


def test_feasible_nodes_are_taken_by_name() -> None:
    zone = {"topologyKey": ZONE, "maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway"}
    incoming = {
        "name": "new",
        "namespace": "d",
        "uid": "u",
        "labels": WEB,
        "topologySpreadConstraints": [zone],
    }
    nodes = [{"name": f"n{i}", "labels": {ZONE: "abc"[i]}, "pods": []} for i in range(3)]
    functions = ClusterFunctions(Cluster(nodes).snapshot)  # no index: a fresh one of its own
    functions.prescore(incoming, [dict(nodes[0]), {"name": "gone", "labels": {ZONE: "z"}}])
    assert functions.topology_spread_score_range(incoming) == {"active": True, "min": 0, "max": 0}
    assert [functions.topology_spread_score(incoming, n) for n in nodes] == [0, -1, -1]


def test_domain_totals_keep_their_counts_across_a_few_rows() -> None:
    """A bind's few rows update the counts in place (the same dict, no walk over the rows); a row
    changing domain or more than 8 rows at once builds them again."""
    domains = Domains(6, ZONE)
    domains.update(list(range(6)), [{"labels": {ZONE: "abc"[i % 3]}} for i in range(6)])
    for nonzero in (False, True):
        totals = DomainTotals(6, domains, nonzero)
        rows = np.arange(6)
        totals.set_rows(rows, domains.codes[rows], np.array([1, 0, 0, 1, 0, 0]))
        first = totals.counts()
        assert first == ({"a": 2} if nonzero else {"a": 2, "b": 0, "c": 0})
        one = np.array([2])
        totals.set_rows(one, domains.codes[one], np.array([3]))
        assert totals.counts() is first and first == (
            {"a": 2, "c": 3} if nonzero else {"a": 2, "b": 0, "c": 3}
        )
        totals.set_rows(one, np.array([domains.code("a")]), np.array([3]))  # row 2 moves to zone a
        again = totals.counts()
        assert again is not first and again == ({"a": 5} if nonzero else {"a": 5, "b": 0, "c": 0})
