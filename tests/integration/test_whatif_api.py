"""`policyd snapshot`, `simulate --from-cluster`, `explain --kubeconfig` and `diff --from-cluster` on the
real kube-apiserver: a snapshot simulated from its file places pods as the live cluster simulated
directly, nothing is bound, and explain names the rule keeping a pod pending."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from policyd.backends.kube.client import KubeClient, object_path
from policyd.backends.kube.informer import pdb_resource
from policyd.cli import main
from policyd.envtest import LocalControlPlane

from .apiserver import KubeTestContext
from .test_api_backend import make_node, node_of
from .test_run import REPO, apply_deploy_rbac, service_account_kubeconfig

POLICY = str(REPO / "policies" / "default.policy")
BINPACK = str(REPO / "policies" / "examples" / "binpack.policy")


def _pod(ns: str, name: str, cpu: str, **spec: Any) -> dict[str, Any]:
    """A pod for the policyd profile that only fits the test's tainted nodes."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulerName": "policyd",
            "nodeSelector": {"pool": ns},
            "tolerations": [{"key": "pool", "operator": "Equal", "value": ns, "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}],
            **spec,
        },
    }


@pytest.fixture
def live(kube: KubeClient, k8s: KubeTestContext) -> str:
    """Two tainted nodes, a running pod with a PDB, and four pending pods (a PriorityClass, a claim)."""
    ns = k8s.namespace
    taint = [{"key": "pool", "value": ns, "effect": "NoSchedule"}]
    for name, cpu in ((f"{ns}-n1", "4"), (f"{ns}-n2", "2")):
        make_node(kube, name, cpu=cpu, labels={"pool": ns})
        node = kube.request("GET", f"/api/v1/nodes/{name}")
        kube.request("PUT", f"/api/v1/nodes/{name}", body=node | {"spec": {"taints": taint}})
    kube.request(
        "POST",
        object_path("scheduling.k8s.io/v1", "priorityclasses"),
        body={"metadata": {"name": f"high-{ns}"}, "value": 1000},
    )
    kube.request(
        "POST",
        object_path("storage.k8s.io/v1", "storageclasses"),
        body={
            "metadata": {"name": f"wait-{ns}"},
            "provisioner": "example.com/disk",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    claim = {
        "metadata": {"name": "data"},
        "spec": {
            "storageClassName": f"wait-{ns}",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    kube.request("POST", object_path("v1", "persistentvolumeclaims", ns), body=claim)
    pdbs = pdb_resource(kube)
    assert pdbs is not None
    pdb = {
        "metadata": {"name": "keep"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }
    kube.request("POST", object_path(pdbs.api_version, pdbs.plural, ns), body=pdb)
    running = _pod(ns, "db", "3", nodeName=f"{ns}-n1")
    running["metadata"]["labels"] = {"app": "db"}
    pods = [
        running,
        _pod(ns, "small", "500m"),
        _pod(ns, "urgent", "1500m", priorityClassName=f"high-{ns}"),
        _pod(
            ns,
            "with-claim",
            "200m",
            volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
        ),
        _pod(ns, "huge", "64"),
    ]
    for pod in pods:
        kube.request("POST", object_path("v1", "pods", ns), body=pod)
    return ns


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _placements(doc: dict[str, Any], ns: str) -> dict[str, tuple[str | None, str]]:
    return {p["pod"]: (p["node"], p["message"]) for p in doc["placements"] if p["pod"].startswith(f"{ns}/")}


def test_snapshot_then_simulate_places_pods_as_simulate_from_cluster(
    live: str,
    kube: KubeClient,
    control_plane: LocalControlPlane,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    ns, kubeconfig = live, str(control_plane.kubeconfig_path)
    file = tmp_path / "cluster.yaml"
    assert _run(capsys, "snapshot", "--kubeconfig", kubeconfig, "-o", str(file))[0] == 0
    snapshot = yaml.safe_load(file.read_text())
    mine = [o for o in snapshot["items"] if ns in (o["metadata"].get("namespace"), o["metadata"]["name"])]
    kinds = {o["kind"] for o in snapshot["items"]}
    assert {
        "Namespace",
        "Node",
        "Pod",
        "PodDisruptionBudget",
        "PriorityClass",
        "StorageClass",
        "PersistentVolumeClaim",
    } <= kinds
    assert all("managedFields" not in o["metadata"] and "resourceVersion" not in o["metadata"] for o in mine)
    pods = [o for o in snapshot["items"] if o["kind"] == "Pod"]
    keys = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in pods]
    assert keys == sorted(keys)  # deterministic order
    # a JSON snapshot of the same cluster holds the same objects
    assert _run(capsys, "snapshot", "--kubeconfig", kubeconfig, "-o", str(tmp_path / "c.json"))[0] == 0
    assert json.loads((tmp_path / "c.json").read_text())["items"] == snapshot["items"]

    code, out, err = _run(capsys, "simulate", "--cluster", str(file), "--policies", POLICY, "-o", "json")
    assert code == 0, err
    from_file = _placements(json.loads(out), ns)
    code, out, err = _run(
        capsys, "simulate", "--from-cluster", "--kubeconfig", kubeconfig, "--policies", POLICY, "-o", "json"
    )
    assert code == 0, err
    from_cluster = _placements(json.loads(out), ns)
    assert from_file == from_cluster
    assert from_cluster[f"{ns}/urgent"][0] in (f"{ns}-n1", f"{ns}-n2")
    assert from_cluster[f"{ns}/small"][0] and from_cluster[f"{ns}/with-claim"][0]
    assert from_cluster[f"{ns}/huge"][0] is None and "Insufficient cpu" in from_cluster[f"{ns}/huge"][1]
    assert f"{ns}/db" not in from_cluster  # running: not simulated
    # nothing was bound or changed in the cluster
    assert node_of(kube, ns, "small") == "" and node_of(kube, ns, "db") == f"{ns}-n1"


def test_explain_kubeconfig_names_the_rule_and_explains_a_running_pod(
    live: str, control_plane: LocalControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    ns, kubeconfig = live, str(control_plane.kubeconfig_path)
    code, out, err = _run(
        capsys, "explain", "--kubeconfig", kubeconfig, "--policies", POLICY, "--pod", f"{ns}/huge"
    )
    assert code == 0, err
    fit = next(line for line in out.splitlines() if line.startswith("filter default/NodeResourcesFit"))
    assert "FAIL" in fit
    assert "Insufficient cpu" in out and f"result: {ns}/huge -> <none>" in out

    code, out, err = _run(
        capsys, "explain", "--kubeconfig", kubeconfig, "--policies", POLICY, "--pod", f"{ns}/db", "-o", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["runningOn"] == f"{ns}-n1"
    # 3 cpu: fits only the node it runs on (without itself); n2 has 2 cpu
    nodes = {n["node"]: n for n in doc["attempts"][0]["nodes"]}
    assert nodes[f"{ns}-n1"]["feasible"]
    assert nodes[f"{ns}-n2"]["failure"]["rule"] == "default/NodeResourcesFit"

    code, _, err = _run(capsys, "explain", "--kubeconfig", kubeconfig, "--pod", f"{ns}/nope")
    assert code == 1 and f"pod {ns}/nope is not in the cluster" in err


def test_diff_from_cluster_and_kubeconfig_errors(
    live: str, control_plane: LocalControlPlane, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ns, kubeconfig = live, str(control_plane.kubeconfig_path)
    argv = ["diff", "--kubeconfig", kubeconfig, "--policies", POLICY, "--against", POLICY, BINPACK]
    code, out, err = _run(capsys, *argv, "--scheduler-name", "binpack", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    mine = {p["pod"]: p for p in doc["pods"] if p["pod"].startswith(f"{ns}/")}
    assert set(mine) == {f"{ns}/small", f"{ns}/urgent", f"{ns}/with-claim", f"{ns}/huge"}
    assert mine[f"{ns}/huge"]["a"]["status"] == mine[f"{ns}/huge"]["b"]["status"] == "unschedulable"

    missing = tmp_path / "missing"
    code, _, err = _run(capsys, "snapshot", "--kubeconfig", str(missing))
    assert code == 1 and err.strip() == f"policyd snapshot: error: kubeconfig {missing}: no such file"
    code, _, err = _run(capsys, "snapshot", "--kubeconfig", kubeconfig, "--context", "nowhere")
    assert code == 1 and "context 'nowhere'" in err and len(err.strip().splitlines()) == 1


def test_snapshot_needs_only_the_deploy_clusterrole(
    live: str,
    kube: KubeClient,
    control_plane: LocalControlPlane,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    ns = live
    suffix = "-" + uuid.uuid4().hex[:6]
    apply_deploy_rbac(kube, suffix)
    good = service_account_kubeconfig(
        kube, control_plane, "policyd-system", "policyd" + suffix, tmp_path / "g"
    )
    bare = service_account_kubeconfig(
        kube, control_plane, "policyd-system", "nobody" + suffix, tmp_path / "b"
    )
    code, out, err = _run(capsys, "snapshot", "--kubeconfig", good)
    assert code == 0, err
    names = {o["metadata"]["name"] for o in yaml.safe_load(out)["items"]}
    assert {ns, f"{ns}-n1", "huge", f"high-{ns}", "data", "keep"} <= names  # ns: the Namespace itself
    code, _, err = _run(capsys, "snapshot", "--kubeconfig", bare)
    assert code == 1 and "permission denied" in err and 'cannot list resource "nodes"' in err
