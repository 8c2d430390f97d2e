"""`policyd test` reports: JSON, JUnit XML, coverage and its minimum; schema errors at the line."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from policyd.cli import main
from tests.unit.commands.test_policy_test_cmd import _node, _pod

ROOMY = """policy small {
  filter Roomy {
    expr = node.free["cpu"] >= pod.requests["cpu"] || pod.priority > 100
    reason = "Insufficient cpu"
  }
  score MostFree {
    expr = node.free["cpu"]
    weight = 1
    normalize = max
  }
}
"""
VIP = """policy vip {
  match = pod.priority > 1000
  filter VipOnly {
    expr = "vip" in node.labels
  }
}
"""


def _suite(tmp_path: Path, name: str = "suite.yaml", wrong: bool = False) -> Path:
    (tmp_path / "small.policy").write_text(ROOMY)
    (tmp_path / "vip.policy").write_text(VIP)
    suite = {
        "apiVersion": "policyd.io/v1alpha1",
        "kind": "PolicyTestSuite",
        "policies": ["small.policy", "vip.policy"],
        "nodes": [_node("tiny", "1"), _node("big", "8")],
        "cases": [
            {"name": "fits on big", "pod": _pod("p", "2"), "expect": {"node": "big"}},
            {"name": "wrong", "pod": _pod("q", "2"), "expect": {"node": "tiny" if wrong else "big"}},
        ],
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(suite))
    return path


def test_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _suite(tmp_path, wrong=True)
    assert main(["test", "-o", "json", str(path)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"] == {"passed": 1, "failed": 1, "errors": 0}
    (suite,) = doc["suites"]
    assert suite["file"] == str(path) and suite["error"] is None
    assert [(c["name"], c["passed"]) for c in suite["cases"]] == [("fits on big", True), ("wrong", False)]
    assert suite["cases"][1]["problems"] == ["node: expected tiny, got big (scores: big=100)"]
    assert "coverage" not in doc


def test_junit_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _suite(tmp_path, wrong=True)
    bad = tmp_path / "broken.yaml"
    bad.write_text("apiVersion: policyd.io/v1alpha1\nkind: PolicyTestSuite\ncases: []\n")
    assert main(["test", "--output", "junit", str(good), str(bad)]) == 2
    root = ET.fromstring(capsys.readouterr().out)
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "1")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [str(good), str(bad)]
    first, second = suites
    assert (first.get("tests"), first.get("failures"), first.get("errors")) == ("2", "1", "0")
    cases = first.findall("testcase")
    assert [c.get("name") for c in cases] == ["fits on big", "wrong"]
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure is not None
    assert failure.get("message") == "node: expected tiny, got big (scores: big=100)"
    (error_case,) = second.findall("testcase")
    error = error_case.find("error")
    assert error is not None and "'policies' is a required property" in (error.get("message") or "")


def test_coverage_per_file_with_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _suite(tmp_path)
    assert main(["test", "-q", "--coverage", str(path)]) == 0
    out = capsys.readouterr().out
    small, vip = str(tmp_path / "small.policy"), str(tmp_path / "vip.policy")
    # Roomy and MostFree evaluated; the first condition of Roomy both ways, the second only false
    assert any(line.split()[:3] == [small, "2/2", "100.0%"] for line in out.splitlines()), out
    column = ROOMY.splitlines()[2].index("pod.priority") + 1
    assert f"{small}:3:{column}: filter Roomy (||): `pod.priority > 100` was never true" in out
    assert f"{vip}:3:10: filter VipOnly (policy vip) was never evaluated" in out
    assert any(line.split()[:3] == ["total", "2/3", "66.7%"] for line in out.splitlines()), out


def test_coverage_json_and_minimum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _suite(tmp_path)
    assert main(["test", "-o", "json", "--min-coverage", "72", str(path)]) == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    total = doc["coverage"]["total"]
    # 2 of 3 rules, 3 of 4 branch outcomes: 5 of 7
    assert total == {
        "rules": {"covered": 2, "total": 3},
        "branches": {"covered": 3, "total": 4},
        "percent": round(100 * 5 / 7, 2),
    }
    assert doc["coverage"]["belowMinimum"] is True
    assert "coverage 71.4% is below the minimum 72%" in captured.err
    by_file = {f["file"]: f for f in doc["coverage"]["files"]}
    vip = by_file[str(tmp_path / "vip.policy")]
    assert vip["ruleDetail"] == [
        {"policy": "vip", "kind": "filter", "name": "VipOnly", "line": 3, "column": 10, "evaluations": 0}
    ]
    assert main(["test", "-q", "--min-coverage", "71", str(path)]) == 0


SECTIONS = """policy sections {
  queue {
    order pod.priority desc
  }
  preemption {
    enabled = pod.priority > 5 && pod.preemptionPolicy != "Never"
    victims = victim.priority < pod.priority
  }
  permit gang {
    group = "group" in pod.labels ? pod.labels["group"] : ""
    minMember = 1
  }
  filter Roomy {
    expr = node.free["cpu"] >= pod.requests["cpu"]
  }
}
"""


def test_coverage_counts_queue_keys_preemption_and_permits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only filter and score rules (and the branches of rules, lets, match) were counted."""
    (tmp_path / "sections.policy").write_text(SECTIONS)
    low = {**_pod("low", "1"), "spec": {**_pod("low", "1")["spec"], "nodeName": "tiny", "priority": 0}}  # type: ignore[dict-item]
    grouped = {**_pod("p", "1"), "metadata": {"name": "p", "namespace": "default", "labels": {"group": "g"}}}
    urgent = {**_pod("urgent", "1"), "spec": {**_pod("urgent", "1")["spec"], "priority": 10}}  # type: ignore[dict-item]
    suite = {
        "apiVersion": "policyd.io/v1alpha1",
        "kind": "PolicyTestSuite",
        "policies": ["sections.policy"],
        "nodes": [_node("tiny", "1")],
        "cases": [
            {"name": "fits", "pod": grouped, "expect": {"node": "tiny"}},
            {"name": "preempts", "pod": urgent, "pods": [low], "expect": {"victims": ["default/low"]}},
            {
                "name": "order",
                "queue": [_pod("a", "1"), urgent],
                "expect": {"queueOrder": ["default/urgent", "default/a"]},
            },
        ],
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    assert main(["test", "-o", "json", "--coverage", str(path)]) == 0
    (file,) = json.loads(capsys.readouterr().out)["coverage"]["files"]
    items = {(r["kind"], r["name"]): (r["line"], r["evaluations"] > 0) for r in file["ruleDetail"]}
    assert items == {
        ("queue", "order 1"): (3, True),
        ("preemption", "enabled"): (6, True),
        ("preemption", "victims"): (7, True),
        ("permit", "gang group"): (10, True),
        ("permit", "gang minMember"): (11, True),
        ("filter", "Roomy"): (13, True),
    }
    owners = {(b["owner"], b["condition"]) for b in file["branchDetail"]}
    assert ("preemption enabled", 'pod.preemptionPolicy != "Never"') in owners
    assert ("permit gang group", '"group" in pod.labels') in owners


def test_min_coverage_out_of_range_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["test", "--min-coverage", "120", str(_suite(tmp_path))]) == 2
    assert "from 0 to 100" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        # an unexpected key: at the key
        (
            "node: big",
            "node: big\n    nodee: big",
            "5: error: cases[0].expect: unknown field 'nodee' (did you mean 'node'?) (allowed: filter, scoreOrder, node, victims,",
        ),
        # a value of the wrong type: at the value
        ("  name: wrong", "  name: [1, 2]", "9: error: cases[1].name: [1, 2] is not of type 'string'"),
    ],
    ids=["unexpected-key", "wrong-type"],
)
def test_schema_error_points_at_the_line_of_the_test_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, where: str
) -> None:
    path = _suite(tmp_path)
    text = path.read_text().replace(old, new, 1)
    path.write_text(text)
    bad = new.splitlines()[-1]
    line = text.splitlines().index(bad) + 1
    assert main(["test", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}:{where}" in err
    assert f"{bad}\n" in err  # the source line, then a caret under the column


def test_every_schema_error_is_reported_and_a_one_of_names_the_real_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`policyd test` checks a suite as `policyd lint` does: every error, each at its node; a case's
    `oneOf` (pod or queue) and an expectation's (a reason or a list) no longer say only "not valid
    under any of the given schemas"."""
    path = tmp_path / "suite.yaml"
    path.write_text(
        "apiVersion: policyd.io/v1alpha1\n"
        "kind: PolicyTestSuite\n"
        "policies: [small.policy]\n"
        "cases:\n"
        "  - name: neither\n"
        "    expect: {node: big}\n"
        "  - name: both\n"
        "    pod: {metadata: {name: p}}\n"
        "    queue: [{metadata: {name: q}}]\n"
        "    expect: {node: big}\n"
        "  - name: bad reasons\n"
        "    pod: {metadata: {name: p}}\n"
        "    expect: {filter: {big: 3, tiny: []}}\n"
    )
    assert main(["test", str(path)]) == 2
    err = capsys.readouterr().err
    assert "valid under" not in err
    assert f"{path}:5:5: error: cases[0]: needs one of 'pod' or 'queue'" in err
    assert f"{path}:7:5: error: cases[1]: has both 'pod' and 'queue': give only one" in err
    assert f"{path}:13:28: error: cases[2].expect.filter.big: 3 is not of type 'string' or 'array'" in err
    assert f"{path}:13:37: error: cases[2].expect.filter.tiny: [] should be non-empty" in err


def test_a_suite_file_of_another_kind_is_unusable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n")
    assert main(["test", str(path)]) == 2
    assert "holds one PolicyTestSuite document (found kinds ['Deployment'])" in capsys.readouterr().err


def test_a_directory_of_policies_and_suites_runs_the_suites(capsys: pytest.CaptureFixture[str]) -> None:
    """`policyd test policies/` walks the YAML policies beside the suites (examples/) without taking
    them for suites; a policy file named itself is still an unusable suite."""
    root = Path(__file__).resolve().parents[3] / "policies"
    assert main(["test", "-q", str(root)]) == 0
    assert "unusable" not in capsys.readouterr().out
    policy = root / "examples" / "protect-namespace.yaml"
    assert "kind: SchedulingPolicy" in policy.read_text()
    assert main(["test", str(policy)]) == 2
    assert "found kinds ['SchedulingPolicy']" in capsys.readouterr().err


def test_shipped_suites_evaluate_every_rule_of_the_shipped_policies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The done-criterion of shipped suites: `policyd test --coverage` reports 100% of rules."""
    root = Path(__file__).resolve().parents[3]
    assert main(["test", "-o", "json", "--coverage", str(root / "policies" / "tests")]) == 0
    coverage = json.loads(capsys.readouterr().out)["coverage"]
    missing = [
        f"{f['file']}:{r['line']}: {r['kind']} {r['name']}"
        for f in coverage["files"]
        for r in f["ruleDetail"]
        if r["evaluations"] == 0
    ]
    assert missing == [], "rules no shipped suite evaluates (add cases to policies/tests/)"
    tests = root / "policies" / "tests"
    shipped = {p.resolve() for p in (root / "policies").rglob("*.policy")} | {
        p.resolve()
        for p in (root / "policies").rglob("*.yaml")
        if tests not in p.parents and "kind: SchedulingPolicy" in p.read_text()
    }
    assert {Path(f["file"]) for f in coverage["files"]} == shipped  # every shipped policy has a suite
