"""What a snapshot keeps of a live object, its order, and which live pods simulate and explain take."""

from __future__ import annotations

from policyd.backends.cluster_file import cluster_objects, load_cluster_text
from policyd.backends.kube.snapshot import KIND_ORDER, render, snapshot_document, tidy
from policyd.commands.explain import as_if_pending
from policyd.commands.simulate import load_policies, served_pending


def _pod(name: str, node: str = "", scheduler: str = "", nominated: str = "") -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "c", "image": "pause"}]}
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
    status = {"phase": "Running" if node else "Pending"}
    if nominated:
        status["nominatedNodeName"] = nominated
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": status}


def test_tidy_drops_bookkeeping_and_keeps_what_the_scheduler_reads() -> None:
    obj = {
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "42",
            "managedFields": [{"manager": "kubectl"}],
            "generation": 3,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "uid": "u2"}],
        },
        "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "pause"}]},
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
    }
    out = tidy(obj)
    assert out["metadata"] == {
        "name": "p",
        "namespace": "ns",
        "uid": "u1",
        "annotations": {"keep": "me"},
        "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "uid": "u2"}],
    }
    assert out["spec"] == obj["spec"] and out["status"] == obj["status"]
    assert "managedFields" in obj["metadata"]  # the input is not changed
    # the rendered file loads back to the same objects (timestamps stay strings)
    for fmt in ("yaml", "json"):
        loaded = load_cluster_text(render(snapshot_document([out]), fmt), f"snap.{fmt}")
        assert loaded.pods[0]["status"]["startTime"] == "2026-01-01T00:00:00Z"


def test_live_simulation_takes_pending_pods_the_profiles_serve() -> None:
    objects = cluster_objects(
        [
            _pod("bound", node="n1"),
            _pod("ours", scheduler="policyd"),
            _pod("theirs"),
            _pod("other", scheduler="x"),
        ]
    )
    kept = served_pending(objects, load_policies(None))
    assert [p["metadata"]["name"] for p in kept.pods] == ["bound", "ours"]


def test_explain_evaluates_a_running_pod_as_if_unbound_and_alone() -> None:
    objects = cluster_objects(
        [_pod("run", node="n1"), _pod("other", node="n2"), _pod("pending"), _pod("nominee", nominated="n2")]
    )
    pods = {p["metadata"]["name"]: p for p in as_if_pending(objects, "ns/run").pods}
    assert sorted(pods) == ["nominee", "other", "run"]
    assert "nodeName" not in pods["run"]["spec"] and pods["run"]["status"] == {"phase": "Pending"}
    assert pods["other"]["spec"]["nodeName"] == "n2"


def test_a_snapshot_keeps_namespaces_and_loads_back() -> None:
    """Namespaces come first in a snapshot, keep their labels and load back as cluster-file objects."""
    objects = [
        tidy(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n1", "resourceVersion": "9"},
                "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}},
            }
        ),
        tidy({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": {"t": "a"}}}),
    ]
    text = render(snapshot_document(sorted(objects, key=lambda o: KIND_ORDER.index(o["kind"]))), "yaml")
    loaded = load_cluster_text(text, "snap.yaml")
    assert [n["metadata"]["labels"] for n in loaded.namespaces] == [{"t": "a"}]
    assert [n["metadata"]["name"] for n in loaded.nodes] == ["n1"]
    assert text.index("kind: Namespace") < text.index("kind: Node")
