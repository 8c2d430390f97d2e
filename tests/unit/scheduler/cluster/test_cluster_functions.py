"""The `cluster` functions: kube-scheduler's PodTopologySpread / InterPodAffinity / ImageLocality state."""

from __future__ import annotations

import math
from typing import Any

from policyd.policy.cluster_decls import CLUSTER_TYPE, cluster_functions
from policyd.scheduler.cluster.selectors import parse_label_selector, required_node_affinity_matches
from tests.unit.scheduler.cluster.snapshots import ClusterFactory

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def pod(name: str, ns: str = "default", labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """A CEL-shaped pod dict with the fields the cluster functions read."""
    return {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "labels": labels or {}, **extra}


def node(
    name: str, zone: str | None = "a", pods: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    """A CEL-shaped node dict: hostname and zone labels, pods."""
    labels = {HOST: name}
    if zone is not None:
        labels[ZONE] = zone
    labels.update(extra.pop("labels", {}))
    return {"name": name, "labels": labels, "pods": pods or [], **extra}


def spread(key: str, skew: int = 1, when: str = "DoNotSchedule", **extra: Any) -> dict[str, Any]:
    """A topologySpreadConstraint selecting app=web."""
    return {
        "topologyKey": key,
        "maxSkew": skew,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": "web"}},
        **extra,
    }


WEB = {"app": "web"}


def test_selector_nil_matches_nothing_and_empty_matches_everything() -> None:
    assert not parse_label_selector(None).matches({"a": "b"})
    assert parse_label_selector({}).matches({"a": "b"})
    sel = parse_label_selector({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]})
    assert sel.matches({}) and sel.matches({"tier": "web"}) and not sel.matches({"tier": "db"})


def test_required_node_affinity_gt_lt_and_match_fields() -> None:
    n = node("n1", labels={"cores": "8"})
    term = {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]}
    p = pod(
        "p",
        affinity={
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        },
    )
    assert required_node_affinity_matches(p, n)
    term["matchExpressions"][0]["operator"] = "Lt"
    assert not required_node_affinity_matches(p, n)
    fields = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    p2 = pod(
        "p2",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}, fields]}
            }
        },
    )
    assert required_node_affinity_matches(p2, n)
    assert not required_node_affinity_matches(p2, node("n2"))


def test_spread_filter_counts_per_domain_and_global_minimum(make_cluster: ClusterFactory) -> None:
    nodes = [
        node("n1", "a", [pod("w1", labels=WEB), pod("w2", labels=WEB), pod("other", labels={"app": "db"})]),
        node("n2", "b", [pod("w3", labels=WEB), pod("w4", ns="other", labels=WEB)]),
        node("n3", "b", [pod("w5", labels=WEB, deleting=True)]),
        node("n4", None, [pod("w6", labels=WEB)]),
    ]
    cluster = make_cluster(nodes)
    incoming = pod("new", labels=WEB, topologySpreadConstraints=[spread(ZONE)])
    [c] = cluster.topology_spread(incoming, "DoNotSchedule")
    assert c["counts"] == {"a": 2, "b": 1}
    assert (c["minMatch"], c["selfMatch"], c["domains"], c["maxSkew"]) == (1, 1, 2, 1)
    assert cluster.topology_spread(incoming, "ScheduleAnyway") == []
    assert cluster.topology_spread(incoming, "DoNotSchedule") is cluster.topology_spread(
        incoming, "DoNotSchedule"
    )


def test_spread_min_domains_forces_global_minimum_zero(make_cluster: ClusterFactory) -> None:
    nodes = [node("n1", "a", [pod("w1", labels=WEB)]), node("n2", "b", [pod("w2", labels=WEB)])]
    incoming = pod("new", labels={"app": "x"}, topologySpreadConstraints=[spread(ZONE, minDomains=3)])
    [c] = make_cluster(nodes).topology_spread(incoming, "DoNotSchedule")
    assert (c["minMatch"], c["selfMatch"]) == (0, 0)
    incoming2 = pod("new2", labels={"app": "x"}, topologySpreadConstraints=[spread(ZONE, minDomains=2)])
    assert make_cluster(nodes).topology_spread(incoming2, "DoNotSchedule")[0]["minMatch"] == 1


def test_spread_honors_node_affinity_and_match_label_keys(make_cluster: ClusterFactory) -> None:
    nodes = [
        node("n1", "a", [pod("w1", labels={"app": "web", "v": "1"})], labels={"pool": "x"}),
        node("n2", "b", [pod("w2", labels={"app": "web", "v": "2"})], labels={"pool": "y"}),
        node("n3", "c", [pod("w3", labels={"app": "web", "v": "2"})], labels={"pool": "x"}),
    ]
    c = spread(ZONE, matchLabelKeys=["v"])
    incoming = pod(
        "new", labels={"app": "web", "v": "2"}, nodeSelector={"pool": "x"}, topologySpreadConstraints=[c]
    )
    [state] = make_cluster(nodes).topology_spread(incoming, "DoNotSchedule")
    assert state["counts"] == {"a": 0, "c": 1}
    c_ignore = dict(c, nodeAffinityPolicy="Ignore")
    incoming2 = dict(incoming, topologySpreadConstraints=[c_ignore], uid="u2")
    assert make_cluster(nodes).topology_spread(incoming2, "DoNotSchedule")[0]["counts"] == {
        "a": 0,
        "b": 1,
        "c": 1,
    }


def test_system_default_constraints_only_for_controller_owned_pods(make_cluster: ClusterFactory) -> None:
    nodes = [node("n1", "a", [pod("r1", ownerKey="ReplicaSet/web")]), node("n2", "b")]
    cluster = make_cluster(nodes)
    assert cluster.topology_spread_score_range(pod("bare")) == {"active": False, "min": 0, "max": 0}
    owned = pod("r2", ownerKey="ReplicaSet/web")
    assert cluster.topology_spread(owned, "DoNotSchedule") == []
    # zone weight log(2+2), hostname weight log(2+2); maxSkew-1 added per constraint (4 + 2)
    w = math.log(4)
    assert cluster.topology_spread_score(owned, nodes[0]) == math.floor(1 * w + 4 + 1 * w + 2 + 0.5)
    assert cluster.topology_spread_score(owned, nodes[1]) == 6
    assert cluster.topology_spread_score_range(owned) == {"active": True, "min": 6, "max": 9}


def test_spread_score_ignores_nodes_missing_keys_and_uses_feasible_set(make_cluster: ClusterFactory) -> None:
    nodes = [
        node("n1", "a", [pod("w1", labels=WEB), pod("w2", labels=WEB)]),
        node("n2", "b", [pod("w3", labels=WEB)]),
        node("n3", "b"),
        node("n4", None),
    ]
    cluster = make_cluster(nodes)
    incoming = pod("new", labels=WEB, topologySpreadConstraints=[spread(ZONE, when="ScheduleAnyway")])
    w = math.log(2 + 2)  # two zones among feasible nodes
    assert cluster.topology_spread_score(incoming, nodes[0]) == round(2 * w)
    assert cluster.topology_spread_score(incoming, nodes[2]) == round(1 * w)
    assert cluster.topology_spread_score(incoming, nodes[3]) == -1
    cluster.prescore(incoming, nodes[1:3])
    w1 = math.log(1 + 2)
    assert cluster.topology_spread_score(incoming, nodes[1]) == round(1 * w1)
    assert cluster.topology_spread_score_range(incoming) == {"active": True, "min": 1, "max": 1}


def _anti(key: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": key, "labelSelector": {"matchLabels": labels}}
        ]
    }


def test_inter_pod_affinity_required_counts_and_self_match(make_cluster: ClusterFactory) -> None:
    nodes = [node("n1", "a", [pod("db", labels={"app": "db"})]), node("n2", "b")]
    cluster = make_cluster(nodes)
    wants_db = pod("web", labels=WEB, affinity={"podAffinity": _anti(ZONE, {"app": "db"})})
    state = cluster.inter_pod_affinity(wants_db)
    assert state["required"] == [{"topologyKey": ZONE, "counts": {"a": 1}}]
    assert state["anyMatch"] and not state["selfMatch"]
    first = pod("web1", labels=WEB, affinity={"podAffinity": _anti(ZONE, WEB)})
    state = cluster.inter_pod_affinity(first)
    assert state["required"] == [{"topologyKey": ZONE, "counts": {}}]
    assert not state["anyMatch"] and state["selfMatch"]


def test_inter_pod_anti_affinity_and_symmetry(make_cluster: ClusterFactory) -> None:
    guard = pod("guard", labels={"app": "guard"}, affinity={"podAntiAffinity": _anti(HOST, WEB)})
    nodes = [node("n1", "a", [guard]), node("n2", "a", [pod("w", labels=WEB)])]
    cluster = make_cluster(nodes)
    state = cluster.inter_pod_affinity(pod("web", labels=WEB))
    assert state["existingAnti"] == {HOST: {"n1": 1}}
    assert cluster.inter_pod_affinity(pod("web", ns="other", labels=WEB, uid="x"))["existingAnti"] == {}
    loner = pod("loner", labels={"app": "l"}, affinity={"podAntiAffinity": _anti(ZONE, WEB)})
    assert cluster.inter_pod_affinity(loner)["anti"] == [{"topologyKey": ZONE, "counts": {"a": 1}}]


def test_inter_pod_affinity_score_includes_existing_pods_terms(make_cluster: ClusterFactory) -> None:
    pref = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 10,
                "podAffinityTerm": {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "db"}}},
            }
        ]
    }
    existing_pref = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 7, "podAffinityTerm": {"topologyKey": HOST, "labelSelector": {"matchLabels": WEB}}}
        ]
    }
    nodes = [
        node("n1", "a", [pod("db", labels={"app": "db"})]),
        node(
            "n2",
            "b",
            [
                pod(
                    "cache",
                    labels={"app": "cache"},
                    affinity={"podAntiAffinity": existing_pref, "podAffinity": _anti(HOST, WEB)},
                )
            ],
        ),
        node("n3", "b"),
    ]
    cluster = make_cluster(nodes)
    incoming = pod("web", labels=WEB, affinity={"podAffinity": pref})
    scores = [cluster.inter_pod_affinity_score(incoming, n) for n in nodes]
    assert scores == [10, -7 + 1, 0]
    assert cluster.inter_pod_affinity_score_range(incoming) == {"active": True, "min": -6, "max": 10}
    plain = pod("plain", labels={"app": "none"})
    assert cluster.inter_pod_affinity_score_range(plain)["active"] is False


def test_image_counts_and_sizes(make_cluster: ClusterFactory) -> None:
    nodes = [
        node("n1", images={"nginx:1.25": 100, "redis:7": 50}),
        node("n2", images={"nginx:1.25": 120}),
        node("n3"),
    ]
    cluster = make_cluster(nodes)
    assert (
        cluster.node_count(),
        cluster.image_node_count("nginx:1.25"),
        cluster.image_size("nginx:1.25"),
    ) == (
        3,
        2,
        100,
    )
    assert cluster.image_node_count("absent:1") == 0


def test_domain_counts_include_empty_domains(make_cluster: ClusterFactory) -> None:
    nodes = [node("n1", "a", [pod("t", labels={"team": "x"})]), node("n2", "b"), node("n3", None)]
    counts = make_cluster(nodes).domain_counts(pod("new"), ZONE, {"team": "x"})
    assert counts == {"a": 1, "b": 0}


def test_declarations_call_the_methods(make_cluster: ClusterFactory) -> None:
    fns = cluster_functions()
    cluster = make_cluster([node("n1", images={"x:1": 5})])
    [ov] = fns["imageNodeCount"].overloads
    assert ov.member and ov.params[0] == CLUSTER_TYPE
    assert ov.impl is not None and ov.impl(cluster, "x:1") == 1
    [spread_ov] = fns["topologySpread"].overloads
    assert spread_ov.impl is not None and spread_ov.impl(cluster, pod("p"), "DoNotSchedule") == []
