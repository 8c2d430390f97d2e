"""`policyd simulate` on kube-scheduler behaviour beyond filters and scores: gang timeouts, scheduling
gates, arrivals replayed at their creation time, cluster files validated as the API server would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policyd.cli import main

ROOT = Path(__file__).resolve().parents[3]
POLICY = str(ROOT / "policies" / "default.policy")
GANG_POLICY = """policy gang {
  permit gang { group = pod.labels["gang"] minMember = 3 timeout = duration("60s") }
}
"""


def node(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    cpu: str,
    labels: dict[str, str] | None = None,
    created: str = "2024-01-01T00:00:00Z",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": labels or {},
            "creationTimestamp": created,
        },
        "spec": {
            "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}],
            **spec,
        },
    }


def write(tmp_path: Path, items: list[dict[str, Any]], name: str = "cluster.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def simulate_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["simulate", "--output", "json", *argv]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def placement(report: dict[str, Any], key: str) -> dict[str, Any]:
    return next(p for p in report["placements"] if p["pod"] == key)


def test_gang_timeout_frees_the_node_for_the_pod_parked_behind_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two members of a three-pod gang hold the node until the permit times out; the pod parked
    behind them is then placed at once (before, it stayed unschedulable on a free node)."""
    gang = tmp_path / "gang.policy"
    gang.write_text(GANG_POLICY)
    cluster = write(
        tmp_path,
        [
            node("a", "1"),
            pod("g0", "400m", {"gang": "x"}),
            pod("g1", "400m", {"gang": "x"}),
            pod("p", "600m"),
        ],
    )
    report = simulate_json(capsys, "--cluster", cluster, "--policies", POLICY, str(gang))
    assert placement(report, "default/p")["node"] == "a"
    assert placement(report, "default/p")["attempts"] == 2
    assert placement(report, "default/g0")["node"] is None
    assert "rejected due to timeout after waiting 60s at permit gang" in {
        placement(report, "default/g0")["message"],
        placement(report, "default/g1")["message"],
    }


def test_gated_pod_is_reported_as_gated_not_unschedulable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gated = pod("g", "100m", schedulingGates=[{"name": "example.com/quota"}, {"name": "example.com/ready"}])
    cluster = write(tmp_path, [node("a", "1"), gated, pod("p", "100m")])
    report = simulate_json(capsys, "--cluster", cluster, "--policies", POLICY)
    assert placement(report, "default/p")["node"] == "a"
    assert placement(report, "default/g") == {
        "pod": "default/g",
        "node": None,
        "attempts": 0,
        "message": "Scheduling is blocked due to non-empty scheduling gates: example.com/quota, example.com/ready",
        "nominatedNode": None,
        "preempted": False,
        "schedulingGates": ["example.com/quota", "example.com/ready"],
    }
    assert report["summary"]["scheduled"] == 1
    assert report["summary"]["unschedulable"] == 0
    assert report["summary"]["gated"] == 1

    assert main(["simulate", "--cluster", cluster, "--policies", POLICY]) == 0
    assert "scheduled 1, unschedulable 0, gated 1, preempted 0" in capsys.readouterr().out

    assert main(["explain", "--cluster", cluster, "--policies", POLICY, "--pod", "g"]) == 0
    out = capsys.readouterr().out
    assert "pod default/g is gated: Scheduling is blocked due to non-empty scheduling gates" in out
    assert "no node was evaluated" in out


def test_broken_cluster_file_exits_1_naming_object_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, the bad objects were dropped with a warning and the rest scheduled (exit 0)."""
    bad_quantity = pod("x", "abc")
    no_containers = pod("y", "1")
    no_containers["spec"]["containers"] = []
    bare_node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}, "status": {}}
    cluster = write(tmp_path, [node("a", "1"), bare_node, bad_quantity, no_containers, pod("ok", "100m")])
    assert main(["simulate", "--cluster", cluster, "--policies", POLICY]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing scheduled, no table
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert lines[0].startswith(f"policyd simulate: {cluster}:")
    assert lines[0].endswith(
        "node b: status.allocatable: Required value: a node needs allocatable (or capacity) resources"
    )
    assert lines[1].endswith(
        'pod default/x: spec.containers[0].resources.requests.cpu: invalid quantity "abc"'
    )
    assert lines[2].endswith("pod default/y: spec.containers: Required value")
    assert len(lines) == 3


def test_arrivals_replay_creation_times_on_the_simulated_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """All at once, the high-priority pod is queued first and takes the only node; replayed, the
    low-priority pod created a minute earlier is placed before the other one even exists."""
    early = pod("early", "600m", created="2024-01-01T00:00:00Z")
    late = pod("late", "600m", created="2024-01-01T00:01:00Z", priority=100, preemptionPolicy="Never")
    cluster = write(tmp_path, [node("a", "1"), late, early])
    at_once = simulate_json(capsys, "--cluster", cluster, "--policies", POLICY)
    assert placement(at_once, "default/late")["node"] == "a"
    assert placement(at_once, "default/early")["node"] is None
    replayed = simulate_json(
        capsys, "--cluster", cluster, "--policies", POLICY, "--arrivals", "creation-time"
    )
    assert placement(replayed, "default/early")["node"] == "a"
    assert placement(replayed, "default/late")["node"] is None
    assert [p["pod"] for p in replayed["placements"]] == ["default/early", "default/late"]


def test_a_service_selecting_pods_spreads_them_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """System default spread constraints from a Service (the pods have no controller): without the
    Service the bigger node wins on resources; with it, the spread score sends the new pod away
    from the node that already runs one it selects."""
    old = pod("old", "100m", {"app": "web"}, nodeName="big")
    new = pod("new", "100m", {"app": "web", "version": "2"})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}},
    }
    small = node("small", "1")
    small["status"]["allocatable"]["memory"] = "1Gi"
    items = [node("big", "8"), small, old, new]
    without = simulate_json(capsys, "--cluster", write(tmp_path, items, "a.yaml"), "--policies", POLICY)
    assert placement(without, "default/new")["node"] == "big"
    spread = simulate_json(
        capsys, "--cluster", write(tmp_path, [*items, service], "b.yaml"), "--policies", POLICY
    )
    assert placement(spread, "default/new")["node"] == "small"
