"""Scenarios: `policyd simulate` with policies/default.policy places pods as kube-scheduler does.

Each tests/scenarios/*.yaml holds a cluster (a `kind: List` of real Kubernetes objects) and the
expected outcome derived from kube-scheduler's documented rules: per pod either `node` (unique choice,
null when unschedulable) or `nodes` (kube-scheduler may pick any of them), optionally the exact
FailedScheduling `message`, and the preemption `victims`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policyd.cli import main

HERE = Path(__file__).parent
SCENARIOS = sorted(HERE.glob("*.yaml"))


def _simulate(tmp_path: Path, cluster: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster))
    capsys.readouterr()
    rc = main(["simulate", "--cluster", str(path), "--output", "json", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = yaml.safe_load(scenario.read_text())
    result = _simulate(tmp_path, spec["cluster"], capsys)
    placements = {p["pod"]: p for p in result["placements"]}
    for want in spec["expect"]["placements"]:
        got = placements.get(want["pod"])
        assert got is not None, f"{want['pod']} was not scheduled at all: {result['placements']}"
        if "nodes" in want:
            assert got["node"] in want["nodes"], f"{want['pod']}: {got}"
        else:
            assert got["node"] == want["node"], f"{want['pod']}: {got}"
        if "message" in want:
            # the whole FailedScheduling message, preemption suffix included, as kube-scheduler prints it
            assert got["message"] == want["message"], f"{want['pod']}: {got}"
    assert sorted(result["victims"]) == sorted(spec["expect"].get("victims", []))


def test_scenarios_are_present() -> None:
    assert len(SCENARIOS) >= 10
    for path in SCENARIOS:
        spec = yaml.safe_load(path.read_text())
        kinds = {item["kind"] for item in spec["cluster"]["items"]}
        assert {"Node", "Pod"} <= kinds, path
        assert spec["expect"]["placements"], path
