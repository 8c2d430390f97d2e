"""`policyd run` as a process against a real kube-apiserver: binding, SIGTERM, leader election, RBAC."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from policyd.backends.kube.client import ApiError, KubeClient, object_path
from policyd.envtest import LocalControlPlane

from .apiserver import KubeTestContext
from .test_api_backend import make_node, make_pod, node_of, wait_for

REPO = Path(__file__).resolve().parents[2]
POLICY = str(REPO / "policies" / "default.policy")
FAST_LEASE = {"leaseDurationSeconds": 2, "renewDeadlineSeconds": 1.5, "retryPeriodSeconds": 0.3}


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(
        kubeconfig: str, *extra: str, lease: str | None = None, config: dict[str, Any] | None = None
    ) -> subprocess.Popen[str]:
        cfg = tmp_path / f"policyd-{len(procs)}.yaml"
        doc: dict[str, Any] = {
            "leaderElection": dict(FAST_LEASE, leaderElect=lease is not None),
            **(config or {}),
        }
        if lease:
            ns, name = lease.split("/")
            doc["leaderElection"].update(resourceNamespace=ns, resourceName=name)
        cfg.write_text(yaml.safe_dump(doc))
        args = [sys.executable, "-m", "policyd.cli", "-v", "run", "--kubeconfig", kubeconfig]
        args += ["--config", str(cfg), "--policies", POLICY, "--port", "0", *extra]
        # stderr to a file: a full pipe would block the process. Appending: the process's descriptor
        # shares its offset with ours, so a write of its that came between our seek(0) and our read
        # would land at the start and overwrite the first lines; with O_APPEND it goes to the end.
        log = open(tmp_path / f"policyd-{len(procs)}.log", "a+")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(args, cwd=REPO, stderr=log, text=True, env=dict(os.environ))
        proc.log = log  # type: ignore[attr-defined]
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        proc.log.close()  # type: ignore[attr-defined]


def stderr_of(proc: subprocess.Popen[str]) -> str:
    """What the process logged so far."""
    log = proc.log  # type: ignore[attr-defined]
    log.flush()
    log.seek(0)
    return str(log.read())


def lease_holder(kube: KubeClient, ns: str, name: str) -> str:
    try:
        lease = kube.request("GET", object_path("coordination.k8s.io/v1", "leases", ns, name))
    except ApiError:
        return ""
    return str(lease["spec"].get("holderIdentity") or "")


def test_schedules_then_sigterm_releases_lease_and_exits_zero(
    kube: KubeClient, k8s: KubeTestContext, control_plane: LocalControlPlane, launch: Callable[..., Any]
) -> None:
    ns = k8s.namespace
    make_node(kube, f"{ns}-n1", labels={"pool": ns})
    proc = launch(str(control_plane.kubeconfig_path), lease=f"{ns}/policyd")
    for i in range(5):
        make_pod(kube, ns, f"p{i}", selector={"pool": ns})
    for i in range(5):
        assert wait_for(lambda i=i: node_of(kube, ns, f"p{i}"), timeout=40) == f"{ns}-n1"
    assert wait_for(lambda: lease_holder(kube, ns, "policyd"), timeout=10), stderr_of(proc)[-3000:]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, stderr_of(proc)
    assert lease_holder(kube, ns, "policyd") == ""  # released, not left to expire


def test_started_while_the_api_server_is_down_waits_for_it_then_schedules(
    kube: KubeClient, k8s: KubeTestContext, control_plane: LocalControlPlane, launch: Callable[..., Any]
) -> None:
    ns = k8s.namespace
    make_node(kube, f"{ns}-n1", labels={"pool": ns})
    make_pod(kube, ns, "p0", selector={"pool": ns})
    control_plane.stop_apiserver()
    try:
        proc = launch(str(control_plane.kubeconfig_path))
        stopped = launch(str(control_plane.kubeconfig_path))
        assert wait_for(lambda: "API server not answering" in stderr_of(proc), timeout=20)
        assert wait_for(lambda: stderr_of(proc).count("API server not answering") >= 2, timeout=20)
        assert proc.poll() is None, stderr_of(proc)
        assert wait_for(lambda: "API server not answering" in stderr_of(stopped), timeout=20)
        stopped.send_signal(signal.SIGTERM)  # a signal ends the wait: a clean stop
        assert stopped.wait(20) == 0, stderr_of(stopped)
    finally:
        control_plane.start_apiserver()
    assert wait_for(lambda: node_of(kube, ns, "p0"), timeout=60) == f"{ns}-n1", stderr_of(proc)[-3000:]


def bound_pods(kube: KubeClient, ns: str, prefix: str) -> dict[str, str]:
    """name -> node of the pods of `ns` named `prefix...` that are bound (one LIST)."""
    items = kube.request("GET", object_path("v1", "pods", ns))["items"]
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in items
        if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")
    }


def pool_nodes(kube: KubeClient, ns: str) -> set[str]:
    """Three nodes of their own (label `pool: <ns>`); their names."""
    nodes = {f"{ns}-n{i}" for i in range(3)}
    for node in sorted(nodes):
        make_node(kube, node, labels={"pool": ns})
    return nodes


def release_batch(kube: KubeClient, ns: str, nodes: set[str], count: int) -> None:
    """`count` pods `m0...` that wait for a label no node has, then the label on `nodes`: a batch the
    scheduler sees at once, and then binds one after another."""

    def create(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"m{i}", "labels": {"batch": "m"}},
            "spec": {
                "schedulerName": "policyd",
                "nodeSelector": {"batch": ns},
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "10m"}}}],
            },
        }
        kube.request("POST", object_path("v1", "pods", ns), body=body)

    with ThreadPoolExecutor(8) as creating:
        list(creating.map(create, range(count)))
    for node in sorted(nodes):
        kube.request(
            "PATCH",
            f"/api/v1/nodes/{node}",
            body={"metadata": {"labels": {"batch": ns}}},
            content_type="application/merge-patch+json",
        )


def first_bind(kube: KubeClient, ns: str) -> None:
    """Return as soon as a pod of the batch is seen bound (a LIST of one bound pod: cheap to repeat)."""
    deadline = time.monotonic() + 60
    query = {"labelSelector": "batch=m", "fieldSelector": "spec.nodeName!=", "limit": 1}
    while not kube.request("GET", object_path("v1", "pods", ns), query=query)["items"]:
        assert time.monotonic() < deadline, "no pod bound in 60 s"
        time.sleep(0.002)


def test_api_server_killed_mid_batch_and_restarted_every_pod_is_bound_once(
    kube: KubeClient, k8s: KubeTestContext, control_plane: LocalControlPlane, launch: Callable[..., Any]
) -> None:
    ns = k8s.namespace
    nodes = pool_nodes(kube, ns)
    # binds at 50 a second: the batch takes seconds, so the API server dies in the middle of it
    proc = launch(str(control_plane.kubeconfig_path), config={"clientConnection": {"qps": 50, "burst": 10}})
    batch = 150
    release_batch(kube, ns, nodes, batch)
    first_bind(kube, ns)
    assert len(bound_pods(kube, ns, "m")) < batch // 2  # the batch is under way
    control_plane.kill_apiserver()  # binds in flight get no answer; the watches break
    try:
        time.sleep(2)
    finally:
        control_plane.start_apiserver()
    assert wait_for(lambda: len(bound_pods(kube, ns, "m")) == batch, timeout=90), stderr_of(proc)[-3000:]
    assert set(bound_pods(kube, ns, "m").values()) <= nodes
    make_pod(kube, ns, "after", selector={"pool": ns})  # the watches are back
    assert wait_for(lambda: node_of(kube, ns, "after"), timeout=40) in nodes
    assert proc.poll() is None, stderr_of(proc)[-3000:]
    events = kube.request("GET", object_path("v1", "events", ns))["items"]
    scheduled = [e["involvedObject"]["name"] for e in events if e["reason"] == "Scheduled"]
    assert len(scheduled) == len(set(scheduled))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, stderr_of(proc)[-3000:]


def unschedulable(kube: KubeClient, ns: str, name: str) -> bool:
    pod = kube.request("GET", object_path("v1", "pods", ns, name))
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)


def test_pods_deleted_while_pending_are_dropped_and_hold_no_room(
    kube: KubeClient, k8s: KubeTestContext, control_plane: LocalControlPlane, launch: Callable[..., Any]
) -> None:
    """A parked pod deleted is never bound when room appears; pods deleted while a batch is being
    placed (queued, or their bind in flight) leave their room to the pods created after them."""
    ns = k8s.namespace
    small, filled = f"{ns}-small", f"{ns}-filled"
    make_node(kube, small, cpu="1", labels={"pool": ns})
    proc = launch(str(control_plane.kubeconfig_path))
    make_pod(kube, ns, "p0", cpu="600m", selector={"pool": ns})
    assert wait_for(lambda: node_of(kube, ns, "p0"), timeout=40) == small
    for name in ("p1", "p2"):  # no room left: both parked
        make_pod(kube, ns, name, cpu="600m", selector={"pool": ns})
        assert wait_for(lambda name=name: unschedulable(kube, ns, name), timeout=40)
    kube.request("DELETE", object_path("v1", "pods", ns, "p1"), body={"gracePeriodSeconds": 0})
    kube.request("DELETE", object_path("v1", "pods", ns, "p0"), body={"gracePeriodSeconds": 0})
    assert wait_for(lambda: node_of(kube, ns, "p2"), timeout=40) == small
    # a node with room for exactly 20 pods of 50m; 20 are created and 10 of them deleted at once,
    # while they are being placed; 10 more created afterwards must all fit
    make_node(kube, filled, cpu="1", labels={"pool": f"{ns}-fill"})

    def fill(name: str) -> None:
        make_pod(kube, ns, name, cpu="50m", selector={"pool": f"{ns}-fill"})

    def delete(name: str) -> None:
        try:
            kube.request("DELETE", object_path("v1", "pods", ns, name), body={"gracePeriodSeconds": 0})
        except ApiError as err:
            assert err.not_found

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(fill, [f"f{i}" for i in range(20)]))
        list(pool.map(delete, [f"f{i}" for i in range(0, 20, 2)]))
        list(pool.map(fill, [f"g{i}" for i in range(10)]))
    kept = {f"f{i}" for i in range(1, 20, 2)} | {f"g{i}" for i in range(10)}
    # well within the 30 s after which a bind that never returned would be given up: no leaked room
    assert wait_for(lambda: kept <= set(bound_pods(kube, ns, "")), timeout=20), stderr_of(proc)[-3000:]
    assert set(bound_pods(kube, ns, "f")) == {f"f{i}" for i in range(1, 20, 2)}
    assert set(bound_pods(kube, ns, "g").values()) == {filled}
    assert proc.poll() is None, stderr_of(proc)[-3000:]
    events = kube.request("GET", object_path("v1", "events", ns))["items"]
    assert not [e for e in events if e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "p1"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, stderr_of(proc)[-3000:]


def test_two_instances_only_leader_binds_and_standby_takes_over(
    kube: KubeClient, k8s: KubeTestContext, control_plane: LocalControlPlane, launch: Callable[..., Any]
) -> None:
    ns = k8s.namespace
    nodes = pool_nodes(kube, ns)
    a = launch(str(control_plane.kubeconfig_path), lease=f"{ns}/policyd")
    wait_for(lambda: lease_holder(kube, ns, "policyd"), timeout=30)
    b = launch(str(control_plane.kubeconfig_path), lease=f"{ns}/policyd")
    for i in range(10):
        make_pod(kube, ns, f"a{i}", selector={"pool": ns})
    for i in range(10):
        wait_for(lambda i=i: node_of(kube, ns, f"a{i}"), timeout=40)
    first = lease_holder(kube, ns, "policyd")
    # a batch in flight when the leader dies: 150 pods wait for a label no node has; once the nodes get
    # it the leader binds them, and is killed (without releasing the lease) at the first bind seen
    batch = 150
    release_batch(kube, ns, nodes, batch)
    first_bind(kube, ns)
    a.kill()
    a.wait(10)
    assert len(bound_pods(kube, ns, "m")) < batch  # the batch was cut short
    # the standby takes the expired lease (a liveness bound, not a speed figure: the machine may be loaded)
    assert wait_for(lambda: lease_holder(kube, ns, "policyd") not in ("", first), timeout=60)
    # and places what the leader left: every pod of the batch bound once
    assert wait_for(lambda: len(bound_pods(kube, ns, "m")) == batch, timeout=60), stderr_of(b)[-3000:]
    assert set(bound_pods(kube, ns, "m").values()) <= nodes
    make_pod(kube, ns, "after", selector={"pool": ns})
    assert wait_for(lambda: node_of(kube, ns, "after"), timeout=40) in nodes
    events = kube.request("GET", object_path("v1", "events", ns))["items"]
    scheduled = [e["involvedObject"]["name"] for e in events if e["reason"] == "Scheduled"]
    # never two successful binds of one pod (a SIGKILLed leader may lose its last queued events)
    assert len(scheduled) == len(set(scheduled))
    assert all(e.get("count", 1) == 1 for e in events if e["reason"] == "Scheduled")
    b.send_signal(signal.SIGTERM)
    assert b.wait(20) == 0


def service_account_token(kube: KubeClient, ns: str, name: str) -> str:
    """A new ServiceAccount `ns/name` and a token for it."""
    kube.request("POST", object_path("v1", "serviceaccounts", ns), body={"metadata": {"name": name}})
    req = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    token = kube.request("POST", object_path("v1", "serviceaccounts", ns, name) + "/token", body=req)
    return str(token["status"]["token"])


def service_account_kubeconfig(
    kube: KubeClient, control_plane: LocalControlPlane, ns: str, name: str, path: Path
) -> str:
    token = service_account_token(kube, ns, name)
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": control_plane.url, "insecure-skip-tls-verify": True}}
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": name}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def apply_deploy_rbac(
    kube: KubeClient,
    suffix: str,
    manifest: str = "clusterrole.yaml",
    subjects: list[dict[str, str]] | None = None,
) -> None:
    """deploy/`manifest` with names suffixed (tests share one apiserver); bindings to `subjects` if given."""
    try:
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "policyd-system"}})
    except ApiError as err:
        if not err.conflict:
            raise
    paths = {
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
    }
    for doc in yaml.safe_load_all((REPO / "deploy" / manifest).read_text()):
        doc["metadata"]["name"] += suffix
        if "roleRef" in doc:
            doc["roleRef"]["name"] += suffix
        for subject in doc.get("subjects", []):
            subject["name"] += suffix
        if "subjects" in doc and subjects is not None:
            doc["subjects"] = subjects
        ns = doc["metadata"].get("namespace")
        kube.request("POST", object_path("rbac.authorization.k8s.io/v1", paths[doc["kind"]], ns), body=doc)


def test_deploy_clusterrole_is_enough_and_missing_permissions_are_named(
    kube: KubeClient,
    k8s: KubeTestContext,
    control_plane: LocalControlPlane,
    launch: Callable[..., Any],
    tmp_path: Path,
) -> None:
    ns = k8s.namespace
    suffix = "-" + uuid.uuid4().hex[:6]
    apply_deploy_rbac(kube, suffix)
    good = service_account_kubeconfig(
        kube, control_plane, "policyd-system", "policyd" + suffix, tmp_path / "good"
    )
    bare = service_account_kubeconfig(
        kube, control_plane, "policyd-system", "nobody" + suffix, tmp_path / "bare"
    )

    denied = launch(bare, lease=f"policyd-system/lease{suffix}")
    assert denied.wait(30) == 1
    err = stderr_of(denied)
    assert "permission denied" in err and "create pods/binding" in err and "list nodes" in err
    assert "get leases.coordination.k8s.io in namespace policyd-system" in err

    make_node(kube, f"{ns}-n1", labels={"pool": ns})
    proc = launch(good, lease=f"policyd-system/lease{suffix}")
    make_pod(kube, ns, "rbac", selector={"pool": ns})
    assert wait_for(lambda: node_of(kube, ns, "rbac"), timeout=40) == f"{ns}-n1"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, stderr_of(proc)
