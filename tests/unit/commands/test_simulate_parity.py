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
