"""`policyd lint`: exit codes, output formats, and every broken policy in tests/policy/broken."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from policyd.cli import main

BROKEN = Path(__file__).resolve().parents[2] / "policy" / "broken"
EXPECT = re.compile(r"#\s*expect:\s*(\d+):(\d+):\s*(.+)")

GOOD = """\
policy good {
  let cpu = pod.requests["cpu"]
  filter Fits {
    expr = node.free["cpu"] >= cpu
    reason = "Insufficient cpu"
  }
  score Least {
    expr = node.free["cpu"]
    weight = 2
    normalize = max
  }
}
"""


def _broken_files() -> list[Path]:
    return sorted(p for p in BROKEN.iterdir() if p.suffix in (".policy", ".yaml", ".yml"))


@pytest.mark.parametrize("path", _broken_files(), ids=lambda p: p.name)
def test_broken_policy_points_at_expected_position(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    match = EXPECT.match(path.read_text().splitlines()[0])
    assert match, f"{path.name} has no '# expect: L:C: message' first line"
    line, column, fragment = int(match[1]), int(match[2]), match[3].strip()
    assert main(["lint", "--format", "json", str(path)]) == 1
    found = json.loads(capsys.readouterr().out)
    errors = [d for d in found if d["severity"] == "error"]
    assert any(d["line"] == line and d["column"] == column and fragment in d["message"] for d in errors), (
        f"expected {line}:{column}: {fragment!r}, got {errors}"
    )


def test_broken_directory_exits_one() -> None:
    assert len(_broken_files()) >= 12
    assert main(["lint", str(BROKEN)]) == 1


def test_clean_policy_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "good.policy").write_text(GOOD)
    assert main(["lint", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


def test_a_directory_without_policies_is_said_to_be_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("no policy here")
    assert main(["lint", str(tmp_path)]) == 0
    assert capsys.readouterr().err == f"policyd lint: no policy or YAML files under {tmp_path}\n"


def test_warnings_alone_exit_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "w.policy").write_text("policy w {\n  let unused = 1\n  filter F { expr = node.ready }\n}\n")
    assert main(["lint", str(tmp_path / "w.policy")]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'w.policy'}:2:7: warning: let 'unused' is never used" in out


def test_text_format_has_source_line_and_caret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.policy"
    path.write_text("policy bad {\n  filter F { expr = node.nope }\n}\n")
    assert main(["lint", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(lines) if ": error: " in line)
    assert lines[first].startswith(f"{path}:2:26: error: undefined field 'nope'")
    assert lines[first + 1] == "  filter F { expr = node.nope }"
    assert lines[first + 2] == " " * 25 + "^"


def test_a_misspelt_name_in_an_expression_is_told_what_it_was_meant_to_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "slip.policy"
    path.write_text(
        "policy slip {\n  let cpuAlloc = node.allocatable.cpu\n"
        "  score S { expr = pod.requsts.cpu + cpuAloc }\n"
        "  filter F { expr = node.labels.exist(k, true) }\n}\n"
    )
    assert main(["lint", str(path)]) == 1
    errors = [line for line in capsys.readouterr().out.splitlines() if ": error: " in line]
    assert errors[:3] == [
        f"{path}:3:24: error: undefined field 'requsts' on type 'policyd.Pod' (did you mean 'requests'?)",
        f"{path}:3:38: error: undeclared reference to 'cpuAloc' (in container '') (did you mean 'cpuAlloc'?)",
        f"{path}:4:38: error: undeclared reference to 'exist' (in container '') (did you mean 'exists'?)",
    ]


def test_missing_path_is_io_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(tmp_path / "absent.policy")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_no_paths_is_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["lint"])
    assert exc.value.code == 2


SHIPPED = Path(__file__).resolve().parents[3] / "policyd" / "policies"


def test_a_test_suite_is_linted_as_a_test_suite(capsys: pytest.CaptureFixture[str]) -> None:
    """It was reported as a broken SchedulingPolicy (`unknown field 'pods'`)."""
    assert main(["lint", str(SHIPPED / "tests" / "default.yaml")]) == 0
    assert "error" not in capsys.readouterr().out


def test_a_misspelled_kind_in_a_directory_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was skipped silently."""
    (tmp_path / "good.policy").write_text(GOOD)
    text = (
        (SHIPPED / "tests" / "default.yaml")
        .read_text()
        .replace("kind: PolicyTestSuite", "kind: PolicyTestSuit")
    )
    (tmp_path / "suite.yaml").write_text(text)
    assert main(["lint", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert re.search(
        r"suite\.yaml:\d+:7: error: unknown kind 'PolicyTestSuit' \(did you mean 'PolicyTestSuite'\?\)", out
    )


def test_an_example_extending_default_lints_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Away from the repository, a layer over the defaults needs no other file on the command line."""
    from policyd import shipped

    for example in ("binpack.policy", "gpu-binpack.policy", "protect-namespace.yaml"):
        copy = tmp_path / example
        copy.write_text((shipped.policies_dir() / "examples" / example).read_text(encoding="utf-8"))
        assert main(["lint", str(copy)]) == 0, example
        assert capsys.readouterr().out == "", example
