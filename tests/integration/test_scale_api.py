"""1000 pods on 100 nodes against a real kube-apiserver: all bound to feasible nodes, none twice."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from policyd.backends.kube.api_backend import BOUND, ApiBackend, BindResult
from policyd.backends.kube.client import KubeClient, object_path
from policyd.compiler.profiles import compile_sources
from policyd.envtest import LocalControlPlane
from policyd.scheduler.cluster.objects import pod_info
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions

from .apiserver import KubeTestContext
from .test_api_backend import REPO, make_node

NODES = 100
PODS = 1000
NODE_CPU_MILLI = 4000
NODE_PODS = 110
POD_CPU = "350m"  # at most 11 pods fit a node by cpu: capacity is 1100 pods for 1000
QPS, BURST = 2000.0, 4000  # the apiserver is local: let the client limiter not be the bottleneck
WORKERS = 16


@pytest.fixture
def kube(control_plane: LocalControlPlane) -> Iterator[KubeClient]:
    client = KubeClient.connect(kubeconfig=str(control_plane.kubeconfig_path), qps=QPS, burst=BURST)
    yield client
    client.close()


def pod_body(name: str, pool: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "scale"}},
        "spec": {
            "schedulerName": "policyd",
            "nodeSelector": pool,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": POD_CPU}}}],
        },
    }


def list_pods(kube: KubeClient, ns: str) -> list[dict[str, Any]]:
    return list(kube.request("GET", object_path("v1", "pods", ns))["items"])


def test_thousand_pods_on_hundred_nodes(kube: KubeClient, k8s: KubeTestContext) -> None:
    ns = k8s.namespace
    pool = {"pool": ns}  # the apiserver is shared with other tests' nodes: only these 100 fit
    nodes = [f"{ns}-n{i:03d}" for i in range(NODES)]
    with ThreadPoolExecutor(WORKERS) as pool_exec:
        list(pool_exec.map(lambda n: make_node(kube, n, cpu="4", labels=pool), nodes))

    binds: dict[str, list[BindResult]] = collections.defaultdict(list)
    binds_lock = threading.Lock()

    def on_bind(result: BindResult) -> None:
        # pending pods left behind by other tests (their namespaces stay Terminating) are tried too
        if result.namespace != ns:
            return
        with binds_lock:
            binds[result.name].append(result)

    backend = ApiBackend(kube, identity="scale")
    backend.on_bind = on_bind
    texts = {"default.policy": (REPO / "policies" / "default.policy").read_text()}
    sched = Scheduler(
        compile_sources(texts, generation=1), backend, options=SchedulerOptions(bind_workers=16)
    )
    stop = threading.Event()
    backend.start(sched)
    thread = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    try:
        assert backend.wait_for_sync(20)
        thread.start()
        names = [f"p{i:04d}" for i in range(PODS)]
        path = object_path("v1", "pods", ns)
        with ThreadPoolExecutor(WORKERS) as pool_exec:
            list(pool_exec.map(lambda n: kube.request("POST", path, body=pod_body(n, pool)), names))

        deadline = time.monotonic() + 180  # liveness bound only; normally far less
        pods = list_pods(kube, ns)
        while sum(1 for p in pods if p["spec"].get("nodeName")) < PODS and time.monotonic() < deadline:
            time.sleep(0.5)
            pods = list_pods(kube, ns)
    finally:
        stop.set()
        thread.join(30)
        backend.stop()

    unbound = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
    assert not unbound, f"{len(unbound)} pods not bound, e.g. {unbound[:5]}"
    assert len(pods) == PODS

    # no pod bound twice: exactly one bind request per pod, and it succeeded
    assert sorted(binds) == sorted(names)
    doubles = {name: [r.outcome for r in rs] for name, rs in binds.items() if len(rs) != 1}
    assert not doubles
    assert all(rs[0].outcome == BOUND for rs in binds.values())
    # the node the scheduler bound is the node the apiserver holds
    assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods} == {
        name: rs[0].node for name, rs in binds.items()
    }

    # every node stays within its capacity (cpu and pod count), and only the pool's nodes are used
    cpu: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for p in pods:
        node = p["spec"]["nodeName"]
        cpu[node] += pod_info(p).cel["requests"]["cpu"]
        count[node] += 1
    assert set(cpu) <= set(nodes)
    assert max(cpu.values()) <= NODE_CPU_MILLI
    assert max(count.values()) <= NODE_PODS
    assert sum(cpu.values()) == PODS * 350
