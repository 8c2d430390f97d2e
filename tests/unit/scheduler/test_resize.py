"""In-place resize of a bound pod on the simulated cluster, with default.policy: the node counts what
the pod's status says it holds, and a scale-down wakes the pods that did not fit at once."""

from __future__ import annotations

import copy
from typing import Any

from policyd.backends.simulated import SimulatedCluster
from policyd.compiler.profiles import compile_sources
from policyd.framework import CompiledPolicySet
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions
from tests.unit.scheduler.cluster.test_volumes import default_policies, node


def pod(name: str, cpu: str, node_name: str = "", held: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]},
    }
    if node_name:
        obj["spec"]["nodeName"] = node_name
    if held is not None:
        obj["status"] = {"containerStatuses": [{"name": "c", "allocatedResources": {"cpu": held}}]}
    return obj


def start(policies: CompiledPolicySet) -> tuple[Scheduler, SimulatedCluster, dict[str, Any]]:
    """Node a (2 cpus) holding `big` (1500m, allocated so), and p (1 cpu) parked after one attempt."""
    big = pod("big", "1500m", node_name="a", held="1500m")
    cluster = SimulatedCluster([node("a", cpu="2")], [big, pod("p", "1")], [])
    options = SchedulerOptions(adopt_unknown_schedulers=True, bind_workers=0, seed=1)
    sched = Scheduler(policies, cluster, clock=FakeClock(), options=options)
    cluster.start(sched)
    sched.run_until_settled()
    assert cluster.node_of("default/p") is None and len(sched.attempts.for_pod("default/p")) == 1
    return sched, cluster, big


def resized_down(sched: Scheduler, cluster: SimulatedCluster, before: dict[str, Any]) -> None:
    """The kubelet resized `before` to 500m: p is placed at once, not at the next periodic flush."""
    done = copy.deepcopy(before)
    done["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    done["status"]["containerStatuses"][0]["allocatedResources"] = {"cpu": "500m"}
    started = sched.clock.now()
    cluster.update_pod(done)
    sched.run_until_settled()
    assert cluster.node_of("default/p") == "a"
    assert sched.clock.now() - started < 30.0


def test_a_scale_down_in_place_wakes_the_pod_that_did_not_fit() -> None:
    sched, cluster, big = start(default_policies())
    # the spec asks 500m, but the kubelet has not resized yet: the node still counts 1500m
    asked = copy.deepcopy(big)
    asked["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    cluster.update_pod(asked)
    sched.run_until_settled()
    assert cluster.node_of("default/p") is None
    resized_down(sched, cluster, asked)


FREE_CPU = """policy fit {
  filter CpuFree {
    expr = node.free["cpu"] >= pod.requests["cpu"]
    reason = "Insufficient cpu"
  }
}
"""


def test_a_rule_reading_free_resources_wakes_on_a_scale_down_only() -> None:
    """A rule that reads only `node.free` wakes on what frees resources (an assigned pod deleted or
    scaled down in place), not on every update of an assigned pod."""
    sched, cluster, big = start(compile_sources({"fit.policy": FREE_CPU}, generation=1))
    relabelled = copy.deepcopy(big)
    relabelled["metadata"]["labels"] = {"app": "db"}
    cluster.update_pod(relabelled)
    sched.run_until_settled()
    assert len(sched.attempts.for_pod("default/p")) == 1  # nothing freed: p stays parked
    resized_down(sched, cluster, relabelled)
