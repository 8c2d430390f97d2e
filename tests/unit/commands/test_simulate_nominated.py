"""`policyd simulate`: a pod nominated by preemption counts in the topology spread and inter-pod
affinity of the pods of lower priority filtered while it waits for its node (kube-scheduler's
RunFilterPluginsWithNominatedPods)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policyd.cli import main
from tests.builders import make_node, make_pod, pod_affinity, pod_affinity_term, spread_constraint

ROOT = Path(__file__).resolve().parents[3]
POLICY = str(ROOT / "policies" / "default.policy")
HOST = "kubernetes.io/hostname"
WEB = {"app": "web"}


def _simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], later: dict[str, Any]) -> dict[str, Any]:
    """Nodes a and b (4 cpu each); a low-priority pod fills a, a pod nothing may preempt fills b; the
    preemptor (priority 100, app=web, 2 cpu) fits nowhere, evicts the low one and is nominated to a;
    `later` (priority 50, 1 cpu) is placed before the preemptor's backoff ends. Without the preemptor
    `later` prefers a (LeastAllocated): a has room for both."""
    items = [
        make_node("a", "4", labels={HOST: "a"}),
        make_node("b", "4", labels={HOST: "b"}),
        make_pod("low", "3", priority=0, node_name="a"),
        make_pod("fixed", "3", priority=1000, node_name="b"),
        make_pod("preemptor", "2", priority=100, labels=WEB),
        later,
    ]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["simulate", "--policies", POLICY, "--cluster", str(path), "--output", "json"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert report["victims"] == ["default/low"]
    return {p["pod"]: p for p in report["placements"]}


def test_a_nominated_pod_counts_in_hard_topology_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    later = make_pod("later", "1", priority=50, labels=WEB, spread=[spread_constraint(WEB, HOST, 1)])
    placements = _simulate(tmp_path, capsys, later)
    # on a, with the preemptor counted, the skew would be 1 + 1 - 0 > 1: b it is
    assert placements["default/later"]["node"] == "b"
    assert placements["default/preemptor"]["node"] == "a"
    assert placements["default/preemptor"]["attempts"] == 2  # nominated, then bound


def test_a_nominated_pod_counts_in_required_anti_affinity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    avoid_web = pod_affinity(anti_required=[pod_affinity_term(WEB, HOST)])
    later = make_pod("later", "1", priority=50, labels={"app": "other"}, affinity=avoid_web)
    placements = _simulate(tmp_path, capsys, later)
    assert placements["default/later"]["node"] == "b"
    assert placements["default/preemptor"]["node"] == "a"


def test_without_constraints_the_later_pod_takes_the_room_left_beside_the_preemptor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    placements = _simulate(tmp_path, capsys, make_pod("later", "1", priority=50, labels=WEB))
    assert placements["default/later"]["node"] == "a"
    assert placements["default/preemptor"]["node"] == "a"
