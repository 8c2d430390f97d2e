"""Hot reload from a ConfigMap against a real kube-apiserver: the pieces `policyd run` wires, in-process."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from policyd.backends.kube.client import KubeClient, object_path
from policyd.commands.run import RELOAD_FAILED, Runner
from policyd.envtest import LocalControlPlane
from policyd.service import config as configuration

from .apiserver import KubeTestContext
from .test_api_backend import make_node, make_pod, node_of, wait_for


def zone_policy(key: str, zone: str) -> str:
    """Only nodes labelled `key=zone` fit."""
    return f"""\
policy zones {{
  filter InZone {{
    expr = "{key}" in node.labels && node.labels["{key}"] == "{zone}"
    reason = "node is not in zone {zone}"
  }}
}}
"""


def broken_policy(key: str) -> str:
    """Line 3 reads a field nodes do not have."""
    return zone_policy(key, "a").replace("node.labels &&", "node.lables &&")


def zoned_nodes(
    kube: KubeClient, k8s: KubeTestContext, *nodes: tuple[str, str, str]
) -> tuple[str, str, list[str]]:
    """Nodes (name prefix, zone, cpu) named and labelled apart from other tests' (a zone key of their
    own); the test's namespace, the zone key and the node names."""
    tag = uuid.uuid4().hex[:8]
    key = f"policyd.test/zone-{tag}"
    names = []
    for prefix, zone, cpu in nodes:
        names.append(f"{prefix}-{tag}")
        make_node(kube, names[-1], cpu=cpu, labels={key: zone})
    return k8s.namespace, key, names


def put_configmap(kube: KubeClient, ns: str, name: str, text: str, create: bool = False) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"zones.policy": text},
    }
    if create:
        kube.request("POST", object_path("v1", "configmaps", ns), body=body)
    else:
        kube.request("PUT", object_path("v1", "configmaps", ns, name), body=body)


def config_map_events(kube: KubeClient, ns: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind=ConfigMap,involvedObject.name={name}"
    out = kube.request("GET", object_path("v1", "events", ns), query={"fieldSelector": selector})
    return list(out.get("items") or [])


def metric(runner: Runner, name: str, **labels: str) -> float | None:
    return runner.metrics.registry.get_sample_value(name, labels)


@pytest.fixture
def runner(control_plane: LocalControlPlane, k8s: KubeTestContext) -> Iterator[Runner]:
    cfg = configuration.from_dict(
        {
            "profiles": [
                {"schedulerName": "policyd", "policySources": [{"configMap": f"{k8s.namespace}/policies"}]}
            ],
            "leaderElection": {"leaderElect": False},
            "serving": {"port": 0, "insecure": True},
            "clientConnection": {"kubeconfig": str(control_plane.kubeconfig_path)},
        }
    )
    r = Runner(cfg)
    yield r
    r.stop.set()
    r.shutdown()


def test_configmap_edits_take_effect_bad_edits_are_rejected_and_fixes_accepted(
    kube: KubeClient, k8s: KubeTestContext, runner: Runner
) -> None:
    ns, key, (node_a, node_b) = zoned_nodes(kube, k8s, ("zone-a", "a", "4"), ("zone-b", "b", "4"))
    put_configmap(kube, ns, "policies", zone_policy(key, "a"), create=True)
    uid = kube.request("GET", object_path("v1", "configmaps", ns, "policies"))["metadata"]["uid"]

    runner.start()
    runner.campaign()
    scheduler, reloader = runner.scheduler, runner.reloader
    assert scheduler is not None and reloader is not None

    def in_force(generation: int) -> bool:
        return scheduler.policies.generation == generation

    make_pod(kube, ns, "p1")
    assert wait_for(lambda: node_of(kube, ns, "p1")) == node_a
    assert metric(runner, "policyd_policy_generation") == 1

    # an edit takes effect on the next pod
    put_configmap(kube, ns, "policies", zone_policy(key, "b"))
    wait_for(lambda: in_force(2), timeout=10)
    make_pod(kube, ns, "p2")
    assert wait_for(lambda: node_of(kube, ns, "p2")) == node_b
    assert metric(runner, "policyd_policy_generation") == 2

    # a broken edit is rejected: the old policy keeps deciding, the ConfigMap gets a Warning Event
    put_configmap(kube, ns, "policies", broken_policy(key))
    wait_for(lambda: not reloader.status.last_ok, timeout=10)
    events = wait_for(lambda: config_map_events(kube, ns, "policies"), timeout=10)
    event = events[0]
    assert event["type"] == "Warning" and event["reason"] == RELOAD_FAILED
    assert event["involvedObject"]["kind"] == "ConfigMap"
    assert event["involvedObject"]["namespace"] == ns
    assert event["involvedObject"]["name"] == "policies"
    assert event["involvedObject"]["uid"] == uid
    assert f"configmap://{ns}/policies/zones.policy:3:" in event["message"]
    assert "keeping generation 2" in event["message"]
    assert metric(runner, "policyd_policy_reload_total", result="error") == 1
    assert metric(runner, "policyd_policy_last_reload_success") == 0
    ok, detail = reloader.readiness()
    assert ok and f"configmap://{ns}/policies/zones.policy:3:" in detail
    with urllib.request.urlopen(runner.server.url + "/readyz?verbose") as resp:  # still ready
        assert resp.status == 200
        assert "[+]policy ok" in resp.read().decode()
    make_pod(kube, ns, "p3")
    assert wait_for(lambda: node_of(kube, ns, "p3")) == node_b
    assert scheduler.policies.generation == 2

    # a fix afterwards is accepted
    put_configmap(kube, ns, "policies", zone_policy(key, "a"))
    wait_for(lambda: reloader.status.last_ok and in_force(reloader.status.generation), timeout=10)
    make_pod(kube, ns, "p4")
    assert wait_for(lambda: node_of(kube, ns, "p4")) == node_a
    assert metric(runner, "policyd_policy_last_reload_success") == 1
    assert metric(runner, "policyd_policy_reload_total", result="success") == 3


def test_a_configmap_holding_only_a_layer_builds_on_the_shipped_default(
    kube: KubeClient, k8s: KubeTestContext, runner: Runner
) -> None:
    """`extends default` in a ConfigMap's only policy: the shipped default's rules judge too."""
    ns, key, (_small, large) = zoned_nodes(kube, k8s, ("small", "a", "1"), ("large", "a", "4"))
    layer = zone_policy(key, "a").replace("policy zones {", "policy zones extends default {")
    put_configmap(kube, ns, "policies", layer, create=True)
    runner.start()
    runner.campaign()
    scheduler = runner.scheduler
    assert scheduler is not None
    assert scheduler.policies.profiles["policyd"].policies == ("default", "zones")
    make_pod(kube, ns, "wide", cpu="2")  # fits only the large node: the default's NodeResourcesFit
    assert wait_for(lambda: node_of(kube, ns, "wide")) == large
