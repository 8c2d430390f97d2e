"""`policyd simulate` / `policyd explain` on small clusters with the shipped default policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policyd.cli import main

ROOT = Path(__file__).resolve().parents[3]
POLICY = str(ROOT / "policies" / "default.policy")


def node(name: str, cpu: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, cpu: str, priority: int = 0, node_name: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "creationTimestamp": "2024-01-01T00:00:00Z",
        },
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def write(tmp_path: Path, items: list[dict[str, Any]]) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["simulate", "--policies", POLICY, "--output", "json", *argv]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_json_report_shape_and_placements(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = write(
        tmp_path,
        [
            node("small", "1"),
            node("gpu", "8", [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
            node("big", "4"),
            pod("web", "500m"),
            pod("huge", "16"),
        ],
    )
    report = run_json(capsys, "--cluster", cluster, "--seed", "3")
    assert set(report) == {"placements", "victims", "summary"}
    by_pod = {p["pod"]: p for p in report["placements"]}
    assert [p["pod"] for p in report["placements"]] == ["default/web", "default/huge"]
    assert by_pod["default/web"] == {
        "pod": "default/web",
        "node": "big",
        "attempts": 1,
        "message": "",
        "nominatedNode": None,
        "preempted": False,
    }
    huge = by_pod["default/huge"]
    assert huge["node"] is None and huge["nominatedNode"] is None
    assert huge["message"].startswith(
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 Insufficient cpu."
    )
    assert report["victims"] == []
    assert report["summary"] == {"scheduled": 1, "unschedulable": 1, "preempted": 0}


def test_preemption_reports_victims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = write(tmp_path, [node("a", "2"), pod("low", "1500m", 1, "a"), pod("high", "1", 100)])
    report = run_json(capsys, "--cluster", cluster)
    assert report["victims"] == ["default/low"]
    (placement,) = report["placements"]
    assert placement["node"] == "a" and placement["attempts"] == 2


def test_table_and_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = write(tmp_path, [node("a", "1"), pod("p", "2")])
    assert main(["simulate", "--policies", POLICY, "--cluster", cluster, "--explain"]) == 0
    out = capsys.readouterr().out
    assert "default/p" in out and "<none>" in out
    assert "filter default/NodeResourcesFit" in out and "FAIL[1]" in out and "[1] Insufficient cpu" in out
    assert (
        main(
            ["explain", "--policies", POLICY, "--cluster", cluster, "--pod", "default/p", "--output", "json"]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["placement"]["node"] is None
    node_a = doc["attempts"][0]["nodes"][0]
    assert node_a["node"] == "a" and node_a["feasible"] is False
    assert any(f["rule"].endswith("NodeResourcesFit") and not f["passed"] for f in node_a["filters"])


def test_explain_unknown_pod_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = write(tmp_path, [node("a", "1")])
    assert main(["explain", "--policies", POLICY, "--cluster", cluster, "--pod", "default/nope"]) == 1
    assert "not in the cluster file" in capsys.readouterr().err


def test_identical_runs_give_identical_documents_and_timing_only_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = write(tmp_path, [node("a", "2"), node("b", "4"), pod("p", "1"), pod("q", "3")])
    first = run_json(capsys, "--cluster", cluster)
    second = run_json(capsys, "--cluster", cluster)
    assert first == second
    assert "podsPerSecond" not in first["summary"]
    timed = run_json(capsys, "--cluster", cluster, "--timing")
    assert timed["summary"]["podsPerSecond"] > 0 and timed["summary"]["seconds"] > 0
    assert timed["placements"] == first["placements"]


def test_explain_goes_into_the_json_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = write(tmp_path, [node("a", "1"), pod("ok", "500m"), pod("p", "2")])
    assert main(["simulate", "--policies", POLICY, "--cluster", cluster, "-o", "json", "--explain"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    doc = json.loads(captured.out)
    explanation = doc["explanation"]
    assert explanation["pod"] == "default/p"  # the first unschedulable pod
    (attempt, *_) = explanation["attempts"]
    assert attempt["pod"] == "default/p" and attempt["result"] == "unschedulable"
    (node_a,) = attempt["nodes"]
    assert node_a["failure"]["rule"] == "default/NodeResourcesFit"
    assert main(["simulate", "--policies", POLICY, "--cluster", cluster, "-o", "yaml", "--explain"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["explanation"] == explanation


FIFO = """policy fifo {
  queue {
    order pod.name asc
  }
  filter Fits {
    expr = node.free["cpu"] >= pod.requests["cpu"]
    reason = "Insufficient cpu"
  }
}
"""


def test_preemption_victims_are_counted_apart_from_unschedulable_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # name order: a-low is placed first, then b-high preempts it
    policy = tmp_path / "fifo.policy"
    policy.write_text(FIFO)
    cluster = write(tmp_path, [node("n1", "2"), pod("a-low", "1500m", 1), pod("b-high", "1", 100)])
    argv = ["simulate", "--policies", str(policy), "--cluster", cluster]
    assert main([*argv, "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["victims"] == ["default/a-low"]
    assert report["summary"] == {"scheduled": 1, "unschedulable": 0, "preempted": 1}
    low = next(p for p in report["placements"] if p["pod"] == "default/a-low")
    assert low["preempted"] is True and low["node"] is None and low["message"] == "preempted"
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "scheduled 1, unschedulable 0, preempted 1 (default/a-low)" in out
    assert "<preempted>" in out


ALPHA = """policy alpha {
  filter Fits {
    expr = node.free["cpu"] >= pod.requests["cpu"]
    reason = "Insufficient cpu"
  }
  score Free {
    expr = node.free["cpu"]
  }
}
"""
BETA = """policy beta {
  match = pod.priority > 1000
  filter Fits {
    expr = "gpu" in node.labels
    reason = "not a gpu node"
  }
  filter Other {
    expr = true
  }
  score Free {
    expr = 7
  }
}
"""


def _explain(tmp_path: Path, capsys: pytest.CaptureFixture[str], other: str, *flags: str) -> str:
    """`policyd explain` of pod p (2 cpus; nodes n1 with 4, n2 with 1) under ALPHA and `other`."""
    (tmp_path / "a.policy").write_text(ALPHA)
    (tmp_path / "other.policy").write_text(other)
    cluster = write(tmp_path, [node("n1", "4"), node("n2", "1"), pod("p", "2")])
    policies = [str(tmp_path / "a.policy"), str(tmp_path / "other.policy")]
    assert main(["explain", "--policies", *policies, "--cluster", cluster, "--pod", "p", *flags]) == 0
    return capsys.readouterr().out


def _explain_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str], other: str) -> dict[str, list[str]]:
    """The explain table's rule rows: `policy/rule` -> its cells."""
    return {
        line.split()[1]: line.split()[2:]
        for line in _explain(tmp_path, capsys, other).splitlines()
        if line.startswith(("filter ", "score "))
    }


def test_explain_table_labels_rules_with_their_policy_and_shows_non_applying_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _explain_rows(tmp_path, capsys, BETA)
    assert rows["alpha/Fits"] == ["pass", "FAIL[1]"]
    # beta's match is false for this pod: its rules do not apply (not `pass`, not merged with alpha's)
    assert rows["beta/Fits"] == ["n/a", "n/a"]
    assert rows["beta/Other"] == ["n/a", "n/a"]
    assert rows["alpha/Free"] == ["(raw/norm/weighted)", "4000/4000/4000"]
    assert rows["beta/Free"] == ["(raw/norm/weighted)", "n/a"]


DELTA = """policy delta {
  score Gpus {
    expr = node.free["gpu"]
  }
}
"""


def test_explain_tells_why_a_score_evaluation_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A score rule whose evaluation fails scores 0: the table says so with a note, the JSON an error."""
    rows = _explain_rows(tmp_path, capsys, DELTA)
    assert rows["alpha/Fits"] == ["pass", "FAIL[1]"]
    assert rows["delta/Gpus"] == ["(raw/norm/weighted)", "0/0/0", "ERROR[2]"]
    assert "[2] Gpus: no such key: gpu" in _explain(tmp_path, capsys, DELTA).splitlines()
    (attempt,) = json.loads(_explain(tmp_path, capsys, DELTA, "-o", "json"))["attempts"]
    n1 = next(n for n in attempt["nodes"] if n["node"] == "n1")
    errors = {r["rule"]: r["error"] for r in n1["score"]["rules"]}
    assert errors == {"alpha/Free": None, "delta/Gpus": "no such key: gpu"}


GAMMA = """policy gamma {
  match = pod.priority > 1000
  score Seven {
    expr = 7
  }
}
"""


def test_explain_shows_n_a_for_a_score_only_policy_whose_match_is_false(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A score-only policy has no filter verdicts to tell that it did not apply: its row read raw 0."""
    rows = _explain_rows(tmp_path, capsys, GAMMA)
    assert rows["alpha/Free"] == ["(raw/norm/weighted)", "4000/4000/4000"]
    assert rows["gamma/Seven"] == ["(raw/norm/weighted)", "n/a"]
    (attempt,) = json.loads(_explain(tmp_path, capsys, GAMMA, "-o", "json"))["attempts"]
    assert attempt["appliedPolicies"] == ["alpha"]


def test_a_layer_given_alone_builds_on_the_shipped_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--policies layer.policy` with `extends default`: the default's rules and the layer's both judge."""
    layer = tmp_path / "layer.policy"
    layer.write_text(
        'policy layer extends default {\n  filter NotBig {\n    expr = node.name != "big"\n'
        '    reason = "node(s) were big"\n  }\n}\n'
    )
    cluster = write(tmp_path, [node("small", "1"), node("big", "4"), pod("web", "500m"), pod("wide", "2")])
    assert main(["simulate", "--policies", str(layer), "--cluster", cluster, "--output", "json"]) == 0
    by_pod = {p["pod"]: p for p in json.loads(capsys.readouterr().out)["placements"]}
    assert by_pod["default/web"]["node"] == "small"  # the layer's filter
    assert by_pod["default/wide"]["node"] is None
    assert by_pod["default/wide"]["message"].startswith(  # NodeResourcesFit of the default
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were big."
    )
