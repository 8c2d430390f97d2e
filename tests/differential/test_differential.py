"""The differential harness's sample in `make test`: kube-scheduler 1.20.2 and policyd on the same states.

One control plane and one kube-scheduler for the module: five generated scenarios (a series of their
own, so names never collide with the regression cases) and every regression case must show no
unexplained disagreement; the harness must find the differences between 1.20 and default.policy (it
can fail); the pieces that need no cluster are tested on their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from policyd import shipped
from policyd.policy.loader import load_policies
from tests.differential.compare import (
    FILTER_RULES,
    SCORE_RULES,
    SPREAD_WEIGHT,
    Comparison,
    histogram,
    reason_plugin,
)
from tests.differential.generator import HOSTNAME, ZONE, generate
from tests.differential.harness import REGRESSIONS, VARIANT_POLICIES, Harness
from tests.differential.kube_side import PROBE_REASON, VICTIM_DELETE, KubeCycle, KubeSide, NodeOrder
from tests.differential.policyd_side import PolicydSide
from tests.differential.scenario import Obj, Scenario, load_scenario
from tests.integration.apiserver import provide_assets

# the test kubeconfig skips TLS verification on purpose (loopback)
pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

SAMPLE_SEED = 20261123
SAMPLE_SCENARIOS = 5
SAMPLE_OBJECT_SCENARIOS = 4
REGRESSION_FILES = sorted(REGRESSIONS.glob("*.yaml"))


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSide]:
    """kube-scheduler 1.20.2 (v=10, probe profile) on a fresh etcd + kube-apiserver."""
    side = KubeSide(provide_assets(), tmp_path_factory.mktemp("differential"))
    try:
        side.start()
        yield side
    finally:
        side.stop()


@pytest.fixture(scope="module")
def harness(kube: KubeSide) -> Harness:
    """Both sides, with the 1.20 variant policy."""
    return Harness(kube, PolicydSide.load(VARIANT_POLICIES))


def _unexplained(comparisons: list[Comparison]) -> list[str]:
    return [str(d) for c in comparisons for d in c.unexplained]


def test_sample_scenarios_agree(harness: Harness) -> None:
    """Five generated scenarios: every pod agrees on filters, scores, placement and victims."""
    comparisons: list[Comparison] = []
    for index in range(SAMPLE_SCENARIOS):
        comparisons.extend(harness.run(generate(SAMPLE_SEED, index)).comparisons)
    assert len(comparisons) >= SAMPLE_SCENARIOS * 3
    assert any("scores" in c.compared for c in comparisons)
    assert _unexplained(comparisons) == []


def test_sample_scenarios_with_workloads_and_volumes_agree(harness: Harness) -> None:
    """Four `--objects` scenarios (Services, ReplicaSets, StatefulSets, PVs, claims, CSINodes): no
    unexplained disagreement, and some pods mount claims."""
    comparisons: list[Comparison] = []
    scenarios = [generate(SAMPLE_SEED, index, objects=True) for index in range(SAMPLE_OBJECT_SCENARIOS)]
    assert any(p["spec"].get("volumes") for s in scenarios for p in s.pending)
    for scenario in scenarios:
        comparisons.extend(harness.run(scenario).comparisons)
    assert len(comparisons) >= SAMPLE_OBJECT_SCENARIOS * 3
    assert _unexplained(comparisons) == []


def _provisioning_scenario() -> Scenario:
    """Four nodes in two zones; a class that provisions in zone z2 only; three pods mount its claim."""
    name = "dyn-0"
    nodes = tuple(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"{name}-n{i}",
                "labels": {HOSTNAME: f"{name}-n{i}", ZONE: f"z{1 + i // 2}"},
            },
            "spec": {},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(4)
    )
    cls: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": f"{name}-dynamic"},
        "provisioner": "nfs.example.com",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": ["z2"]}]}],
    }
    claim: Obj = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "d0", "namespace": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": f"{name}-dynamic",
        },
    }
    pods = tuple(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": name},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d0"}}],
            },
        }
        for i in range(3)
    )
    return Scenario(name, nodes, (), (), pods, objects=(cls, claim))


def test_a_provisioned_claim_holds_later_pods_on_its_node(
    harness: Harness, kube: KubeSide, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness plays the provisioner: the first pod goes to the class's zone, its claim gets a PV
    there, and the pods after it follow the PV to the same node, on both sides."""
    scenario = _provisioning_scenario()
    seen: list[tuple[KubeCycle, list[Obj]]] = []
    schedule = kube.schedule

    def recording(sc: Scenario, pod: Obj) -> tuple[Obj, KubeCycle]:
        created, cycle = schedule(sc, pod)
        seen.append((cycle, kube.state(sc)))
        return created, cycle

    monkeypatch.setattr(kube, "schedule", recording)
    result = harness.run(scenario)
    assert _unexplained(result.comparisons) == []
    assert all(c.agrees("placement") for c in result.comparisons)
    first = seen[0][0].chosen
    assert first in {"dyn-0-n2", "dyn-0-n3"}  # zone z2
    pvs = [o for o in seen[0][1] if o["kind"] == "PersistentVolume"]
    assert len(pvs) == 1
    term = pvs[0]["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"][0]["values"] == [first]
    assert [cycle.chosen for cycle, _ in seen] == [first] * 3


@pytest.mark.parametrize("path", REGRESSION_FILES, ids=[p.stem for p in REGRESSION_FILES])
def test_regression_case_agrees(harness: Harness, path: Path) -> None:
    """Every disagreement the harness ever found stays resolved (or explained)."""
    result = harness.run(load_scenario(path))
    assert result.comparisons
    assert _unexplained(result.comparisons) == []


def test_the_harness_finds_default_policy_differences(kube: KubeSide) -> None:
    """default.policy follows modern kube-scheduler (weights 3/2/2, ...): against 1.20 it must disagree."""
    modern = Harness(kube, PolicydSide.load([str(shipped.default_policy())]))
    case = load_scenario(REGRESSIONS / "s1-35.yaml")
    renamed = Scenario(
        "modern-" + case.name,
        tuple(_renamed_node(n, case.name) for n in case.nodes),
        tuple(_renamed_pod(p, case.name) for p in case.existing),
        tuple(_renamed_pod(p, case.name) for p in case.pdbs),
        tuple(_renamed_pod(p, case.name) for p in case.pending),
    )
    result = modern.run(renamed)
    kinds = {d.kind for c in result.comparisons for d in c.unexplained}
    assert "scores" in kinds


def _renamed_node(node: Obj, old: str) -> Obj:
    name = "modern-" + node["metadata"]["name"]
    labels = dict(node["metadata"]["labels"], **{"kubernetes.io/hostname": name})
    return {**node, "metadata": {**node["metadata"], "name": name, "labels": labels}}


def _renamed_pod(obj: Obj, old: str) -> Obj:
    meta = {**obj["metadata"], "namespace": "modern-" + old}
    spec = dict(obj["spec"])
    if spec.get("nodeName"):
        spec["nodeName"] = "modern-" + spec["nodeName"]
    return {**obj, "metadata": meta, "spec": spec}


# 1.20.2's default filter plugins in order (algorithmprovider/registry.go getDefaultConfig; VolumeBinding's
# PreFilter fails every node before any filter; the in-tree attach limits are NodeVolumeLimits) and its
# score weights
FILTER_ORDER_1_20 = (
    "VolumeBinding PreFilter",
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
)
SCORE_WEIGHTS_1_20 = {
    "TaintToleration": 1,
    "NodeAffinity": 1,
    "NodeResourcesLeastAllocated": 1,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
    "PodTopologySpread": SPREAD_WEIGHT,
    "InterPodAffinity": 1,
}


def test_variant_runs_filters_in_1_20_order_with_1_20_weights() -> None:
    """The variant composed over default.policy: 1.20's filter order (a node reports its first failure)."""
    result = load_policies(list(VARIANT_POLICIES))
    assert not result.has_errors, [str(d) for d in result.errors]
    (effective,) = result.profiles.values()
    assert effective.policies == ("default", "kube_1_20")
    plugin_of = {rule: plugin for plugin, rules in FILTER_RULES.items() for rule in rules}
    filters = [r.name for r in effective.rules if r.kind == "filter" and r.enabled]
    plugins = [plugin_of[name] for name in filters if name in plugin_of]
    # every plugin, in 1.20's order, its rules together (no other plugin's rule runs between them)
    assert set(plugins) == set(FILTER_ORDER_1_20)
    assert plugins == sorted(plugins, key=FILTER_ORDER_1_20.index)
    scores = {r.name: r.weight for r in effective.rules if r.kind == "score" and r.enabled}
    expected = {SCORE_RULES[plugin]: weight for plugin, weight in SCORE_WEIGHTS_1_20.items()}
    assert scores == expected


def test_fit_error_histogram_is_parsed_with_commas_inside_reasons() -> None:
    """A taint reason holds a comma; counts still split right."""
    message = (
        "0/4 nodes are available: 1 node(s) had taint {gpu: a}, that the pod didn't tolerate, "
        "3 Insufficient memory."
    )
    assert histogram(message) == {
        "node(s) had taint {gpu: a}, that the pod didn't tolerate": 1,
        "Insufficient memory": 3,
    }
    assert reason_plugin("Insufficient memory") == "NodeResourcesFit"
    assert reason_plugin(PROBE_REASON) == "(feasible)"
    assert reason_plugin("node(s) didn't match Pod's node affinity") == "NodeAffinity"


def test_generator_is_seeded() -> None:
    """The same (seed, index) gives the same scenario; another index another one."""
    assert generate(3, 4).to_yaml() == generate(3, 4).to_yaml()
    assert generate(3, 4).to_yaml() != generate(3, 5).to_yaml()
    # --objects draws from a generator of its own: the same nodes (under another name), more objects,
    # no YAML aliases
    plain, objects = generate(3, 4), generate(3, 4, objects=True)
    assert [n["status"] for n in objects.nodes] == [n["status"] for n in plain.nodes]
    assert objects.objects and not plain.objects
    assert objects.to_yaml() == generate(3, 4, objects=True).to_yaml()
    assert "&id" not in "".join(generate(3, i, objects=True).to_yaml() for i in range(10))


def test_spread_oracle_truncates_as_1_20_and_rounds_as_policyd() -> None:
    """1, 2 and 0 matching pods on three hostnames: log(5) per pod, truncated 1/3/0 or rounded 2/3/0."""
    from tests.differential.spread_oracle import expected_scores, round_half_away, truncate

    def node(name: str) -> Obj:
        return {"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}

    def bound(name: str, node_name: str) -> Obj:
        meta = {"name": name, "namespace": "ns", "labels": {"app": "web"}}
        return {"kind": "Pod", "metadata": meta, "spec": {"nodeName": node_name}}

    state = [node("n0"), node("n1"), node("n2"), bound("a", "n0"), bound("b", "n1"), bound("c", "n1")]
    constraint = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"topologySpreadConstraints": [constraint]}}
    nodes = ["n0", "n1", "n2"]
    assert expected_scores(pod, state, nodes, truncate) == {"n0": 66, "n1": 0, "n2": 100}
    assert expected_scores(pod, state, nodes, round_half_away) == {"n0": 33, "n1": 0, "n2": 100}


def test_node_order_follows_kube_schedulers_cache() -> None:
    """Added and bound pods go last; a deleted pod's place goes to its node's last pod."""
    order = NodeOrder()
    for name in ("e0", "e1", "e2", "e3"):
        order.add("n0", name)
    order.add("n1", "f0")
    order.remove("e0")
    order.add("n0", "p0")
    pods = [{"metadata": {"name": n}} for n in ("e1", "e2", "e3", "f0", "p0", "x")]
    assert [p["metadata"]["name"] for p in order.sort(pods)] == ["e3", "f0", "e1", "e2", "p0", "x"]
    assert order.pods == {"n0": ["e3", "e1", "e2", "p0"], "n1": ["f0"]}


def test_victim_deletions_are_read_from_the_request_log() -> None:
    line = (
        "I1127 01:33:34.499911   11612 round_trippers.go:445] DELETE "
        "https://127.0.0.1:33185/api/v1/namespaces/swap-remove/pods/e3 200 OK in 4 milliseconds"
    )
    match = VICTIM_DELETE.search(line)
    assert match is not None and match.groups() == ("swap-remove", "e3")
    assert VICTIM_DELETE.search(line.replace(" 200 OK", " 404 Not Found")) is None


def _spread_state() -> list[Obj]:
    """n0 (zone a), n1 (zone b), n2 (no zone); one web pod on n0; a Service and a ReplicaSet of web."""

    def node(name: str, zone: str | None) -> Obj:
        labels = {"kubernetes.io/hostname": name, **({"topology.kubernetes.io/zone": zone} if zone else {})}
        return {"kind": "Node", "metadata": {"name": name, "labels": labels}}

    web = {"name": "a", "namespace": "ns", "labels": {"app": "web", "tier": "x"}}
    return [
        node("n0", "a"),
        node("n1", "b"),
        node("n2", None),
        {"kind": "Pod", "metadata": web, "spec": {"nodeName": "n0"}},
        {
            "kind": "Service",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"selector": {"app": "web"}},
        },
        {
            "kind": "Service",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"selector": {"app": "db"}},
        },
        {
            "kind": "ReplicaSet",
            "metadata": {"name": "rs", "namespace": "ns"},
            "spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}},
        },
    ]


def _web_pod(owned: bool) -> Obj:
    meta: Obj = {"name": "p", "namespace": "ns", "labels": {"app": "web", "tier": "x"}}
    if owned:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "controller": True}]
    return {"metadata": meta, "spec": {}}


def test_default_selector_ands_the_pods_services_and_controller() -> None:
    """Modern: the Services selecting the pod and its owner; 1.20: any controller selecting it."""
    from tests.differential.spread_oracle import default_selector

    state = _spread_state()
    services_only = {"matchLabels": {"app": "web"}, "matchExpressions": []}
    assert default_selector(_web_pod(owned=False), state, modern=True) == services_only
    assert default_selector(_web_pod(owned=True), state, modern=True) == {
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "Exists"}],
    }
    # 1.20: every ReplicaSet whose selector matches the pod's labels, owner or not
    assert default_selector(_web_pod(owned=False), state) == default_selector(_web_pod(owned=True), state)
    assert default_selector(_web_pod(owned=False), state)["matchExpressions"]
    lone = {"metadata": {"name": "q", "namespace": "ns", "labels": {"app": "cache"}}, "spec": {}}
    assert default_selector(lone, state) == default_selector(lone, state, modern=True) == {}


def test_spread_oracle_system_defaults_ignore_nodes_without_a_key_only_in_1_20() -> None:
    """1.20 scores n2 (no zone) 0 and leaves it out; modern (policyd) scores it on its hostname alone
    and counts its missing zone as one more domain (""). Three web pods on n0:
    1.20: raw n0 = 3 log(4) + 2 + 3 log(4) + 4 = 14.3 (truncated 14), n1 = 6, normalised 42 and 100.
    Modern: n0 = 3 log(5) + 2 + 3 log(5) + 4 = 15.7 (16; with the zone domains a and b alone, log(4):
    15.0), n1 = 6, n2 = 2 (hostname only): 12, 75, 100."""
    from tests.differential.spread_oracle import expected_scores, round_half_away, truncate

    state, pod, nodes = _spread_state(), _web_pod(owned=True), ["n0", "n1", "n2"]
    for name in ("a2", "a3"):
        web = {"name": name, "namespace": "ns", "labels": {"app": "web", "tier": "x"}}
        state.append({"kind": "Pod", "metadata": web, "spec": {"nodeName": "n0"}})
    assert expected_scores(pod, state, nodes, truncate) == {"n0": 42, "n1": 100, "n2": 0}
    assert expected_scores(pod, state, nodes, round_half_away, modern=True) == {"n0": 12, "n1": 75, "n2": 100}
    no_defaults = {"metadata": {"name": "q", "namespace": "ns", "labels": {"app": "cache"}}, "spec": {}}
    assert expected_scores(no_defaults, state, nodes, truncate) == dict.fromkeys(nodes, 100)
