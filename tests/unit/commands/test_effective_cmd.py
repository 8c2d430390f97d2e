"""`policyd effective`: each profile's rules with origin, weight and who changed them (text and JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from policyd import shipped
from policyd.cli import main

BINPACK = """policy binpack extends default {
  override score default/NodeResourcesLeastAllocated { weight = 0 }
  disable default/ImageLocality
}
"""


def test_text_output_names_origins_and_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "binpack.policy").write_text(BINPACK)
    default = str(shipped.default_policy())
    assert main(["effective", default, str(tmp_path / "binpack.policy")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "profile policyd (layers: default, binpack)"
    assert lines[1].split() == ["queue", "default", "at", f"{default}:14:3"]
    least = next(line for line in lines if "default/NodeResourcesLeastAllocated" in line)
    assert least.split()[:5] == ["score", "default/NodeResourcesLeastAllocated", "weight", "0", "none"]
    assert least.endswith(f"[weight 1 -> 0 by binpack at {tmp_path / 'binpack.policy'}:2:18]")
    image = next(line for line in lines if "default/ImageLocality" in line)
    assert "disabled" in image.split() and image.endswith(
        f"[disabled by binpack at {tmp_path / 'binpack.policy'}:3:11]"
    )


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "binpack.policy").write_text(BINPACK)
    assert (
        main(["effective", "-o", "json", str(shipped.default_policy()), str(tmp_path / "binpack.policy")])
        == 0
    )
    (profile,) = json.loads(capsys.readouterr().out)
    assert profile["profile"] == "policyd" and profile["layers"] == ["default", "binpack"]
    rules = {r["policy"] + "/" + r["name"]: r for r in profile["rules"]}
    image = rules["default/ImageLocality"]
    assert image["enabled"] is False and image["kind"] == "score"
    assert image["changes"] == [
        {
            "policy": "binpack",
            "change": "disabled",
            "file": str(tmp_path / "binpack.policy"),
            "line": 3,
            "column": 11,
        }
    ]
    assert rules["default/NodeResourcesLeastAllocated"]["weight"] == 0


def test_config_profiles_are_composed_from_their_own_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`profiles[].policySources` were merged across profiles: profile b saw profile a's policy."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "a.policy").write_text(
        'policy a extends default {\n  profiles = ["a", "b"]\n  disable default/ImageLocality\n}\n'
    )
    (tmp_path / "b" / "b.policy").write_text('policy b extends default {\n  profiles = ["b"]\n}\n')
    default = str(shipped.default_policy())
    config = {
        "profiles": [
            {"schedulerName": "a", "policySources": [{"path": default}, {"path": str(tmp_path / "a")}]},
            {"schedulerName": "b", "policySources": [{"path": default}, {"path": str(tmp_path / "b")}]},
        ]
    }
    (tmp_path / "policyd.yaml").write_text(yaml.safe_dump(config))
    assert main(["effective", "-o", "json", "--config", str(tmp_path / "policyd.yaml")]) == 0
    profiles = {p["profile"]: p for p in json.loads(capsys.readouterr().out)}
    assert profiles["a"]["layers"] == ["default", "a"]
    assert profiles["b"]["layers"] == ["default", "b"]
    image = next(r for r in profiles["b"]["rules"] if r["name"] == "ImageLocality")
    assert image["enabled"] is True


def test_errors_exit_one_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.policy").write_text("policy x { disable default/NodePorts }\n")
    assert main(["effective", str(shipped.default_policy()), str(tmp_path / "x.policy")]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "does not extend 'default'" in captured.err


def test_without_sources_it_prints_the_shipped_default_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["effective", "-o", "json"]) == 0
    (profile,) = json.loads(capsys.readouterr().out)
    assert json.dumps(profile).count(str(shipped.default_policy())) > 10  # every rule's origin
    assert main(["effective", "--config", "x.yaml", "y.policy"]) == 2
    assert "not both" in capsys.readouterr().err
