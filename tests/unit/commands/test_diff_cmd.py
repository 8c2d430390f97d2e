"""`policyd diff` on the example cluster: default.policy against the bin-packing variant
(examples/binpack.policy), checked against two independent `simulate` runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policyd import shipped
from policyd.cli import main
from policyd.commands.simulate import simulate

DEFAULT = str(shipped.default_policy())
BINPACK = str(Path(DEFAULT).parent / "examples" / "binpack.policy")


def _diff(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    argv = [
        "diff",
        "--policies",
        DEFAULT,
        "--against",
        DEFAULT,
        BINPACK,
        "--scheduler-name",
        "binpack",
        *extra,
    ]
    code = main(argv)
    return code, capsys.readouterr().out


def _as_binpack_cluster(path: Path) -> str:
    """The example cluster with every pending pod asking for the `binpack` scheduler, written by hand."""
    doc: dict[str, Any] = yaml.safe_load(shipped.example_cluster().read_text())
    for item in doc["items"]:
        if item["kind"] == "Pod" and not item.get("spec", {}).get("nodeName"):
            item["spec"]["schedulerName"] = "binpack"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_every_pod_that_moves_is_listed_with_the_rules_that_moved_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = _diff(capsys, "-o", "json")
    assert code == 0
    doc = json.loads(out)
    # independently: two simulate runs, one per policy set
    under_a = {p.pod: p.node for p in simulate(None, [DEFAULT]).placements}
    under_b = {
        p.pod: p.node
        for p in simulate(_as_binpack_cluster(tmp_path / "c.yaml"), [DEFAULT, BINPACK]).placements
    }
    expected_moves = sorted(pod for pod in under_a if under_a[pod] != under_b[pod])
    assert len(expected_moves) >= 3  # bin-packing moves pods on this cluster
    assert {p["pod"]: (p["a"]["node"], p["b"]["node"]) for p in doc["pods"]} == {
        pod: (under_a[pod], under_b[pod]) for pod in under_a
    }
    assert sorted(p["pod"] for p in doc["pods"] if p["moved"]) == expected_moves
    assert sorted(doc["summary"]["moved"]) == expected_moves
    for pod in doc["pods"]:
        if not pod["moved"]:
            assert pod["changes"] == []
            continue
        rules = {(c["node"], c["rule"]): c for c in pod["changes"]}
        # on the node B chose, B's MostAllocated score counts and A's LeastAllocated no longer does
        most = rules[(pod["b"]["node"], "binpack/NodeResourcesMostAllocated")]
        assert most["kind"] == "score" and most["a"] is None and isinstance(most["b"], int)
        assert rules[(pod["b"]["node"], "default/NodeResourcesLeastAllocated")]["b"] is None
        assert {c["node"] for c in pod["changes"]} <= {pod["a"]["node"], pod["b"]["node"]}
        assert all(c["a"] != c["b"] for c in pod["changes"])
    # the load summary: pods leave and arrive, nothing is lost
    assert sum(n["pods"]["delta"] for n in doc["summary"]["nodes"]) == 0
    assert doc["summary"]["nodes"] and all(
        n["pods"]["delta"] or n["cpuMillis"]["delta"] for n in doc["summary"]["nodes"]
    )


def test_text_report_and_determinism(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = _diff(capsys)
    assert code == 0
    assert _diff(capsys)[1] == text  # the same seed gives the same report
    moved = json.loads(_diff(capsys, "-o", "json")[1])["pods"]
    for pod in (p for p in moved if p["moved"]):
        assert f"{pod['pod']}: {pod['a']['node']} -> {pod['b']['node']}" in text
    assert "pending pods:" in text and "nodes whose load changes most (B - A):" in text


def test_same_policies_change_nothing_and_unschedulable_pods_are_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["diff", "--policies", DEFAULT, "--against", DEFAULT, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not any(p["moved"] for p in doc["pods"]) and doc["summary"]["nodes"] == []
    assert doc["summary"]["becameUnschedulable"] == doc["summary"]["becameSchedulable"] == []


def test_bad_policy_is_one_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.policy"
    bad.write_text("policy bad {\n  filter F { expr = 1 + }\n}\n")
    assert main(["diff", "--policies", DEFAULT, "--against", str(bad)]) == 1
    err = capsys.readouterr().err
    # the diagnostic says `error:` itself
    assert err.startswith(f"policyd diff: {bad}:2:25: error: syntax error: ")
