"""`ClusterFunctions.with_nominated`: the PreFilter states of a node's first filter pass with the pods
nominated to it added, as kube-scheduler's AddPod adds them; the reference walk is the oracle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyd.scheduler.cluster.functions import ClusterFunctions
from policyd.scheduler.cluster.tables import ClusterIndex
from tests.unit.scheduler.cluster.reference import ReferenceCluster
from tests.unit.scheduler.cluster.snapshots import ClusterFactory, snapshot_of
from tests.unit.scheduler.cluster.test_cluster_index import KEYS, Cluster, a_node, a_pod

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
WEB = {"app": "web"}
DB = {"app": "db"}


def pod(
    name: str, labels: Mapping[str, str] | None = None, ns: str = "default", **extra: Any
) -> dict[str, Any]:
    """A CEL-shaped pod dict."""
    return {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "labels": dict(labels or {}), **extra}


def node(
    name: str, zone: str | None, pods: Sequence[Mapping[str, Any]] = (), **labels: str
) -> dict[str, Any]:
    """A CEL-shaped node dict with hostname and zone labels."""
    all_labels = {HOST: name, **labels}
    if zone is not None:
        all_labels[ZONE] = zone
    return {"name": name, "labels": all_labels, "pods": list(pods)}


def spread_pod(name: str, key: str = ZONE, **extra: Any) -> dict[str, Any]:
    """An incoming app=web pod with one hard constraint over app=web pods."""
    c = {"topologyKey": key, "maxSkew": 1, "labelSelector": {"matchLabels": WEB}}
    return pod(name, WEB, topologySpreadConstraints=[c], **extra)


def required(key: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """A required (anti-)affinity spec with one term."""
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": key, "labelSelector": {"matchLabels": dict(labels)}}
        ]
    }


def test_a_nominated_pod_counts_in_its_nodes_spread_domain(make_cluster: ClusterFactory) -> None:
    nodes = [node("n1", "a", [pod("w1", WEB)]), node("n2", "b"), node("n3", "b")]
    cluster = make_cluster(nodes)
    incoming = spread_pod("new")
    [plain] = cluster.topology_spread(incoming, "DoNotSchedule")
    assert (plain["counts"], plain["minMatch"]) == ({"a": 1, "b": 0}, 0)
    [added] = cluster.with_nominated(nodes[1], [pod("nom", WEB)]).topology_spread(incoming, "DoNotSchedule")
    assert (added["counts"], added["minMatch"], added["domains"]) == ({"a": 1, "b": 1}, 1, 2)
    # the state without the nominated pods is untouched (the memo is shared, the keys are not)
    assert cluster.topology_spread(incoming, "DoNotSchedule") == [plain]


def test_only_pods_the_constraint_counts_are_added(make_cluster: ClusterFactory) -> None:
    nodes = [node("n1", "a"), node("n2", "b"), node("n3", None)]
    cluster = make_cluster(nodes)
    incoming = spread_pod("new")
    others = [pod("db", DB), pod("elsewhere", WEB, ns="other")]
    [state] = cluster.with_nominated(nodes[1], others).topology_spread(incoming, "DoNotSchedule")
    assert state["counts"] == {"a": 0, "b": 0}
    # a node without the topology key is in no domain: nothing is added
    [state] = cluster.with_nominated(nodes[2], [pod("w", WEB)]).topology_spread(incoming, "DoNotSchedule")
    assert state["counts"] == {"a": 0, "b": 0}
    # a node the pod's node affinity excludes (nodeAffinityPolicy Honor) is not counted either
    picky = spread_pod("picky", nodeSelector={ZONE: "a"})
    [state] = cluster.with_nominated(nodes[1], [pod("w", WEB)]).topology_spread(picky, "DoNotSchedule")
    assert state["counts"] == {"a": 0}


def test_add_pod_counts_what_the_selector_matches(make_cluster: ClusterFactory) -> None:
    # AddPod tests the selector alone: a terminating nominated pod counts, and so does any pod for
    # an empty selector (whose PreFilter counts no existing pod)
    nodes = [node("n1", "a", [pod("w1", WEB)]), node("n2", "b")]
    cluster = make_cluster(nodes)
    [state] = cluster.with_nominated(nodes[1], [pod("going", WEB, deleting=True)]).topology_spread(
        spread_pod("new"), "DoNotSchedule"
    )
    assert state["counts"] == {"a": 1, "b": 1}
    everything = pod(
        "all", WEB, topologySpreadConstraints=[{"topologyKey": ZONE, "maxSkew": 1, "labelSelector": {}}]
    )
    [state] = cluster.with_nominated(nodes[1], [pod("x", DB)]).topology_spread(everything, "DoNotSchedule")
    assert state["counts"] == {"a": 0, "b": 1}


def test_a_nominated_pods_anti_affinity_repels_the_pod(make_cluster: ClusterFactory) -> None:
    guard = pod("guard", {"app": "guard"}, affinity={"podAntiAffinity": required(HOST, WEB)})
    nodes = [
        node("n1", "a", [pod("g0", {"app": "guard"}, affinity={"podAntiAffinity": required(HOST, WEB)})])
    ]
    nodes.append(node("n2", "a"))
    cluster = make_cluster(nodes)
    incoming = pod("web", WEB)
    state = cluster.with_nominated(nodes[1], [guard]).inter_pod_affinity(incoming)
    assert state["existingAnti"] == {HOST: {"n1": 1, "n2": 1}}
    assert cluster.inter_pod_affinity(incoming)["existingAnti"] == {HOST: {"n1": 1}}


def test_a_skipped_affinity_prefilter_gets_no_add_pod(make_cluster: ClusterFactory) -> None:
    # no existing pod's anti-affinity matches the pod and it has no required terms: PreFilter
    # returns Skip, so kube-scheduler neither adds the nominated pods nor runs the filter
    guard = pod("guard", {"app": "guard"}, affinity={"podAntiAffinity": required(HOST, WEB)})
    nodes = [node("n1", "a"), node("n2", "a")]
    cluster = make_cluster(nodes)
    incoming = pod("web", WEB)
    state = cluster.with_nominated(nodes[1], [guard]).inter_pod_affinity(incoming)
    assert state == cluster.inter_pod_affinity(incoming)
    assert state["existingAnti"] == {}


def test_nominated_pods_count_for_the_pods_own_terms(make_cluster: ClusterFactory) -> None:
    nodes = [node("n1", "a"), node("n2", "b")]
    cluster = make_cluster(nodes)
    wants_db = pod("web", WEB, affinity={"podAffinity": required(ZONE, DB)})
    assert not cluster.inter_pod_affinity(wants_db)["anyMatch"]
    state = cluster.with_nominated(nodes[1], [pod("db", DB)]).inter_pod_affinity(wants_db)
    assert state["anyMatch"] and state["required"] == [{"topologyKey": ZONE, "counts": {"b": 1}}]
    avoids_db = pod("web2", WEB, affinity={"podAntiAffinity": required(HOST, DB)})
    state = cluster.with_nominated(nodes[0], [pod("db", DB), pod("db2", DB)]).inter_pod_affinity(avoids_db)
    assert state["anti"] == [{"topologyKey": HOST, "counts": {"n1": 2}}]


def test_domain_counts_count_the_nominated_pods(make_cluster: ClusterFactory) -> None:
    nodes = [node("n1", "a", [pod("t", {"team": "x"})]), node("n2", "b")]
    cluster = make_cluster(nodes)
    variant = cluster.with_nominated(nodes[1], [pod("n", {"team": "x"}), pod("m", {"team": "y"})])
    assert variant.domain_counts(pod("new"), ZONE, {"team": "x"}) == {"a": 1, "b": 1}
    assert cluster.domain_counts(pod("new"), ZONE, {"team": "x"}) == {"a": 1, "b": 0}


def test_the_variant_shares_everything_else() -> None:
    nodes = [node("n1", "a", [pod("w1", WEB)]), node("n2", "b")]
    index = ClusterIndex()
    cluster = ClusterFunctions(snapshot_of(nodes), index=index)
    soft = {"topologyKey": ZONE, "maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}}
    incoming = pod("new", WEB, topologySpreadConstraints=[soft])
    score = cluster.topology_spread_score_range(incoming)
    before = index.rows_updated
    variant = cluster.with_nominated(nodes[1], [pod("nom", WEB)])
    assert variant.topology_spread_score_range(incoming) is score  # the memo is shared
    assert variant.node_count() == 2 and index.rows_updated == before


def _observe(functions: ClusterFunctions, pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "spread": functions.topology_spread(pod, "DoNotSchedule"),
        "spread-soft": functions.topology_spread(pod, "ScheduleAnyway"),
        "affinity": functions.inter_pod_affinity(pod),
        "domain-counts": [
            functions.domain_counts(pod, key, {"app": app}) for key in KEYS for app in ("web", "db")
        ],
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_add_pod_matches_the_walk_with_the_pods_on_the_node(data: st.DataObject) -> None:
    names = [f"n{i}" for i in range(data.draw(st.integers(1, 5)))]
    cluster = Cluster([data.draw(a_node(name)) for name in names])
    namespaces = data.draw(st.sampled_from([{}, {"other": {"team": "t"}}]))
    index = ClusterIndex()
    product = ClusterFunctions(cluster.snapshot, namespaces, index=index)
    reference = ReferenceCluster(cluster.snapshot, namespaces)
    for _ in range(data.draw(st.integers(1, 3))):
        incoming = data.draw(a_pod(incoming=True))
        target = cluster.nodes[data.draw(st.sampled_from(names))]
        nominated = data.draw(st.lists(a_pod(), min_size=1, max_size=3))
        # the plain states first or not: the variant must not depend on what the memo holds
        if data.draw(st.booleans()):
            assert _observe(product, incoming) == _observe(reference, incoming)
        expected = _observe(reference.with_nominated(target, nominated), incoming)
        assert _observe(product.with_nominated(target, nominated), incoming) == expected
        assert _observe(product, incoming) == _observe(reference, incoming)
