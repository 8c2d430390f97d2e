"""Pod-level resources (`spec.resources`) decide fit and count on the node, on the simulated cluster."""

from __future__ import annotations

from typing import Any

from policyd.backends.cluster_file import cluster_objects
from policyd.backends.simulated import SimulatedCluster
from policyd.commands.simulate import run_simulation
from tests.unit.scheduler.cluster.test_volumes import default_policies, failed, node


def pod(name: str, pod_cpu: str) -> dict[str, Any]:
    container = {"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [container], "resources": {"requests": {"cpu": pod_cpu}}},
    }


def test_pod_level_requests_decide_fit_and_count_on_the_node() -> None:
    loaded = cluster_objects(
        (node("n1", cpu="2"), node("n2", cpu="4"), pod("p1", "3"), pod("p2", "1500m"), pod("p3", "3"))
    )
    cluster = SimulatedCluster(loaded.nodes, loaded.pods, loaded.pdbs)
    run_simulation(default_policies(), cluster, seed=0, explain=False, max_attempts=1)
    # p1 fits only n2 (3 of 4 cpus, where its container asks 100m); p2 then only n1; p3 nowhere
    assert [cluster.node_of(f"default/{p}") for p in ("p1", "p2", "p3")] == ["n2", "n1", None]
    assert failed(cluster, "p3").startswith("0/2 nodes are available: 2 Insufficient cpu.")
