"""`policyd test`: shipped suites pass; differences are reported; unusable input exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policyd.cli import main

ROOT = Path(__file__).resolve().parents[3]
POLICY = """
policy small {
  filter Roomy {
    expr = node.free["cpu"] >= pod.requests["cpu"]
    reason = "Insufficient cpu"
  }
  score MostFree {
    expr = node.free["cpu"]
    weight = 1
    normalize = max
  }
}
"""


def _node(name: str, cpu: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": cpu, "memory": "1Gi", "pods": "10"}},
    }


def _pod(name: str, cpu: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]},
    }


def _suite(tmp_path: Path, expect: dict[str, object]) -> Path:
    (tmp_path / "small.policy").write_text(POLICY)
    suite = {
        "apiVersion": "policyd.io/v1alpha1",
        "kind": "PolicyTestSuite",
        "policies": ["small.policy"],
        "nodes": [_node("tiny", "1"), _node("big", "8"), _node("mid", "4")],
        "cases": [{"name": "two cpus", "pod": _pod("p", "2"), "expect": expect}],
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def test_shipped_suites_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(ROOT / "policies" / "tests")]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and " 0 failed" in out


def test_matching_expectations_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expect = {
        "filter": {"tiny": "Insufficient cpu", "big": "pass"},
        "scoreOrder": ["big", "mid"],
        "node": "big",
    }
    assert main(["test", str(_suite(tmp_path, expect))]) == 0
    assert "PASS" in capsys.readouterr().out


def test_differences_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expect = {"filter": {"tiny": "pass"}, "scoreOrder": ["mid", "big"], "node": "mid"}
    assert main(["test", str(_suite(tmp_path, expect))]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out
    assert "filter tiny: expected 'pass', got ['Insufficient cpu']" in out
    assert "scoreOrder: expected mid" in out
    assert "node: expected mid, got big" in out


def test_schema_violation_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump({"apiVersion": "policyd.io/v1alpha1", "kind": "PolicyTestSuite", "cases": []})
    )
    assert main(["test", str(path)]) == 2
    assert "policies" in capsys.readouterr().err


def test_a_file_that_is_not_utf8_text_is_unusable_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "suite.yaml"
    path.write_bytes(b"kind: PolicyTestSuite\n\x9e\xff\n")
    assert main(["test", str(path)]) != 0
    assert f"{path}: not UTF-8 text: invalid start byte at byte 22" in capsys.readouterr().err


def _broken_suite(tmp_path: Path) -> Path:
    """A suite whose objects break what an API server would check: a misspelt field, a quantity that
    is none, a toleration that cannot be, in the suite's nodes and pods and in a case's pod."""
    path = _suite(tmp_path, {"node": "big"})
    suite = yaml.safe_load(path.read_text())
    suite["pods"] = [_pod("resident", "1")]
    suite["pods"][0]["spec"]["conatiners"] = suite["pods"][0]["spec"].pop("containers")
    suite["nodes"][0]["status"]["allocatable"]["nvidia.com/gpu"] = "two"
    pod = suite["cases"][0]["pod"]
    pod["spec"]["tolerations"] = [{"key": "k", "operator": "Exists", "value": "v"}]
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_suite_objects_are_checked_as_cluster_file_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`policyd lint` reports each at its field's line; `policyd test` finds the suite unusable."""
    path = _broken_suite(tmp_path)
    assert main(["lint", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:{_line_of(path, 'conatiners')}:" in out
    assert "pod default/resident: spec.containers: Required value" in out
    assert f"{path}:{_line_of(path, 'nvidia.com/gpu')}:" in out
    assert "node tiny: status.allocatable.nvidia.com/gpu" in out
    assert f"{path}:{_line_of(path, 'value: v')}:" in out
    assert "pod default/p: spec.tolerations[0].value" in out
    assert main(["test", str(path)]) == 2
    assert "spec.containers: Required value" in capsys.readouterr().err


def test_a_misspelt_field_of_a_suite_object_is_an_error_and_an_unknown_one_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A slip (`nodeSelectr`) would silently change what the case tests: an error at its key, naming
    the field meant; a field no slip of a known one (a newer API's) is a warning, and the suite runs."""
    path = _suite(tmp_path, {"node": "big"})
    suite = yaml.safe_load(path.read_text())
    suite["cases"][0]["pod"]["spec"]["nodeSelectr"] = {"size": "tiny"}
    suite["nodes"][0]["spec"] = {"frobnicate": True}
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    assert main(["lint", str(path)]) == 1
    out = capsys.readouterr().out
    slip, stray = _line_of(path, "nodeSelectr"), _line_of(path, "frobnicate")
    assert (
        f'{path}:{slip}:7: error: pod default/p: spec.nodeSelectr: unknown field "nodeSelectr"'
        ' (did you mean "nodeSelector"?)'
    ) in out
    assert f'{path}:{stray}:5: warning: node tiny: spec.frobnicate: unknown field "frobnicate"' in out
    assert main(["test", str(path)]) == 2
    assert 'did you mean "nodeSelector"?' in capsys.readouterr().err

    del suite["cases"][0]["pod"]["spec"]["nodeSelectr"]
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    assert main(["test", str(path)]) == 0
    assert any("spec.frobnicate" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_a_storage_object_of_the_wrong_shape_is_an_error_at_its_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A suite's storage objects are checked as its nodes and pods are (a list for a volume's spec
    reached the volume code and ended `policyd test` with a traceback)."""
    path = _suite(tmp_path, {"node": "big"})
    suite = yaml.safe_load(path.read_text())
    suite["storage"] = [{"kind": "PersistentVolume", "metadata": {"name": "disk"}, "spec": [1]}]
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    assert main(["test", str(path)]) == 2
    err = capsys.readouterr().err
    line = _line_of(path, "- 1") - 1  # the spec's key, above its one item
    assert (
        f"{path}:{line}:3: error: persistentvolume disk: spec: Invalid value: [1]: must be of type object"
        in err
    )
    assert "Traceback" not in err


def test_an_unknown_field_of_a_storage_object_is_warned_once_at_its_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The suite's loader warns at the field; the case's cluster, built from the same objects, does
    not warn again without a position (it named the file `storage`)."""
    path = _suite(tmp_path, {"node": "big"})
    suite = yaml.safe_load(path.read_text())
    suite["storage"] = [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "local"},
            "provisioner": "kubernetes.io/no-provisioner",
            "frobnicate": True,
        }
    ]
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    assert main(["test", str(path)]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    about = [w for w in warnings if "frobnicate" in w]
    assert len(about) == 1, warnings
    assert f"{path}:{_line_of(path, 'frobnicate')}:3: warning: storageclass local: frobnicate" in about[0]


def test_an_object_named_twice_in_a_cases_cluster_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two nodes named alike (the scheduler would hold one of them), a case's pod named as a pod of
    the suite; the same name in two cases, or among a queue case's own pods, is no conflict."""
    path = _suite(tmp_path, {"node": "big"})
    suite = yaml.safe_load(path.read_text())
    cases = suite.pop("cases")
    suite["nodes"].append(_node("tiny", "2"))
    suite["pods"] = [_pod("resident", "1")]
    cases.append({"name": "again", "pod": _pod("p", "1"), "expect": {"node": "big"}})
    cases.append({"name": "same name", "pod": _pod("resident", "1"), "expect": {"node": "big"}})
    cases.append({"name": "queue", "queue": [_pod("resident", "1")], "expect": {"queueOrder": []}})
    path.write_text(yaml.safe_dump({**suite, "cases": cases}, sort_keys=False))
    assert main(["lint", str(path)]) == 1
    out = capsys.readouterr().out
    lines = path.read_text().splitlines()
    tiny = [i for i, line in enumerate(lines, 1) if line == "    name: tiny"]
    resident = [i for i, line in enumerate(lines, 1) if line.endswith("  name: resident")]
    assert len(tiny) == 2 and len(resident) == 3  # the suite's pod, a case's pod, a queue case's pod
    errors = [line for line in out.splitlines() if ": error: " in line]
    assert errors == [
        f"{path}:{tiny[1]}:11: error: duplicate Node tiny (also at {tiny[0]}:11)",
        f"{path}:{resident[1]}:13: error: duplicate Pod default/resident (also at {resident[0]}:11)",
    ], out
    assert main(["test", str(path)]) == 2
    assert "duplicate Node tiny" in capsys.readouterr().err


def test_valid_suite_objects_pass_lint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(_suite(tmp_path, {"node": "big"}))]) == 0
    assert capsys.readouterr().out == ""


def test_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(tmp_path / "absent.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


SUITES = sorted((ROOT / "policies" / "tests").glob("*.yaml"))


@pytest.mark.parametrize("path", SUITES, ids=[p.stem for p in SUITES])
def test_policyd_test_places_pods_as_policyd_simulate_does(path: Path, tmp_path: Path) -> None:
    """For every case of a shipped suite, `policyd simulate` on a cluster file of the case's objects
    places the case's pod where `policyd test` says (or preempts the same victims for it)."""
    from policyd.commands.simulate import simulate
    from policyd.commands.suite import case_cluster, case_profile, first_cycle, load_suite, policy_paths
    from policyd.compiler.profiles import compile_paths

    suite = load_suite(path)
    paths = policy_paths(path, suite)
    policies = compile_paths(paths, generation=1)
    cases = [case for case in suite["cases"] if "pod" in case]
    assert cases
    for case in cases:
        cluster = case_cluster(suite, case)
        tested = first_cycle(case_profile(policies, suite, case["pod"]), policies, cluster)
        cluster_file = tmp_path / f"{case['name'].replace(' ', '-').replace('/', '-')}.yaml"
        cluster_file.write_text(
            yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": cluster.objects()})
        )
        sim = simulate(str(cluster_file), paths, seed=0)
        (placement,) = [p for p in sim.placements if p.pod == cluster.pod_key]
        if tested.chosen is not None:
            assert placement.node == tested.chosen, case["name"]
            assert sim.scheduler.victims == []
        elif tested.victims:
            assert sorted(sim.scheduler.victims) == sorted(tested.victims), case["name"]
            assert placement.node == tested.nominated_node, case["name"]
        else:
            assert placement.node is None, case["name"]
