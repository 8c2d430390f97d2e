"""`policyd bench`: a tiny workload runs end to end and writes valid result files (behaviour, not speed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policyd.cli import main


def test_bench_runs_a_tiny_workload_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "bench",
            "-w",
            "SchedulingBasic/500",
            "--scale",
            "0.002",
            "--node-scale",
            "0.01",
            "-q",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    [json_file] = tmp_path.glob("bench-*.json")
    document = json.loads(json_file.read_text())
    [result] = document["results"]
    assert result["workload"] == "SchedulingBasic/500Nodes"
    assert result["mode"] == "inprocess"
    assert result["nodes"] == 5
    assert result["measured_pods"] == 20
    assert result["scheduled"] == 20
    assert result["pods_per_second"] > 0
    assert result["attempts"] >= 20
    assert 0 < result["attempt_p50_ms"] <= result["attempt_p99_ms"]
    assert result["peak_rss_mib"] > 0
    assert document["machine"]["cores"] >= 1
    [md_file] = tmp_path.glob("bench-*.md")
    assert "SchedulingBasic/500Nodes" in md_file.read_text()
    assert "| SchedulingBasic/500Nodes | inprocess |" in capsys.readouterr().out


def test_unschedulable_pods_are_parked_not_counted(tmp_path: Path) -> None:
    code = main(
        [
            "bench",
            "-w",
            "Unschedulable",
            "--scale",
            "0.002",
            "--node-scale",
            "0.001",
            "-q",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    [result] = json.loads(next(tmp_path.glob("bench-*.json")).read_text())["results"]
    assert result["measured_pods"] == 20
    assert result["scheduled"] == 20  # the 9-cpu pods never bind, the measured ones all do


def test_unknown_workload_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "-w", "NoSuchWorkload", "--out", str(tmp_path)]) == 2
    assert "unknown or ambiguous workload" in capsys.readouterr().err


def test_e2e_mode_checks_its_arguments_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a real e2e run starts kube-apiservers: tests/integration/test_bench_e2e_run.py does that
    assert main(["bench", "--mode", "e2e", "--schedulers", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown scheduler" in capsys.readouterr().err
    assert main(["bench", "--mode", "e2e", "--qps", "0", "--out", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())


def test_list_names_every_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("SchedulingBasic/5000Nodes", "SchedulingNodeAffinity", "TopologySpreading", "Preemption"):
        assert name in out


def test_results_go_to_bench_results_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    tiny = ["-w", "SchedulingBasic/500", "--scale", "0.001", "--node-scale", "0.002", "-q"]
    assert main(["bench", *tiny]) == 0
    assert len(list((tmp_path / "bench-results").glob("bench-*.json"))) == 1


@pytest.mark.parametrize("mode", ["e2e", "both"])
@pytest.mark.parametrize("assets", ["unset", "empty"])
def test_e2e_without_binaries_says_so_in_one_line_and_starts_nothing(
    mode: str,
    assets: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if assets == "unset":
        monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    else:
        monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    out = tmp_path / "out"
    assert main(["bench", "--mode", mode, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert "KUBEBUILDER_ASSETS" in captured.err and "kube-apiserver" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert not out.exists()  # not even the in-process part of --mode both ran
