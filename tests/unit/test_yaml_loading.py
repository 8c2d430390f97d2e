"""A YAML value that does not convert to its type is a positioned YAML error everywhere policyd reads
YAML, not a Python exception escaping with a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policyd.cli import main
from policyd.yaml_loading import FastSafeLoader, SafeLoader, safe_load, safe_load_all

BAD_VALUES = [
    ("!!int", "'' is not a valid !!int"),  # PyYAML: IndexError
    ("!!int 0x", "'0x' is not a valid !!int"),  # ValueError
    ("!!float", "'' is not a valid !!float"),
    ("!!bool maybe", "'maybe' is not a valid !!bool"),  # KeyError
    ("!!timestamp soon", "'soon' is not a valid !!timestamp"),  # AttributeError
    ("2020-02-30", "'2020-02-30' is not a valid !!timestamp (day is out of range for month)"),  # implicit
]


@pytest.mark.parametrize("loader", [SafeLoader, FastSafeLoader])
@pytest.mark.parametrize(("value", "message"), BAD_VALUES)
def test_a_value_that_does_not_convert_is_a_yaml_error_at_the_value(
    loader: type[yaml.SafeLoader], value: str, message: str
) -> None:
    with pytest.raises(yaml.MarkedYAMLError) as caught:
        yaml.load(f"a:\n  b:\n  - 1\n  - {value}\n", Loader=loader)  # noqa: S506 - a safe loader
    assert caught.value.problem is not None and caught.value.problem.startswith(message)
    mark = caught.value.problem_mark
    assert mark is not None and (mark.line, mark.column) == (3, 4)


def test_good_values_load_as_pyyaml_loads_them() -> None:
    text = "a: !!int '7'\nb: !!float 1.5\nc: yes\nd: 2020-02-28\ne: [x, {f: null}]\n"
    assert safe_load(text) == yaml.safe_load(text)
    assert safe_load_all("a: 1\n---\nb: 2\n") == [{"a": 1}, {"b": 2}]
    with pytest.raises(yaml.YAMLError):
        safe_load_all("a: 1\n---\nb: !!int\n")


POLICY = """apiVersion: policyd.io/v1alpha1
kind: SchedulingPolicy
metadata:
  name: p
spec:
  profiles: [x]
  scores:
  - name: s
    expr: "1"
    weight: !!int
"""


def test_lint_reports_it_in_a_yaml_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(POLICY)
    assert main(["lint", str(path)]) == 1
    assert f"{path}:10:13: error: invalid YAML: '' is not a valid !!int" in capsys.readouterr().out


def test_simulate_reports_it_in_a_cluster_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("kind: Node\napiVersion: v1\nmetadata: {name: n1, labels: {a: !!bool maybe}}\n")
    assert main(["simulate", "--cluster", str(path)]) != 0
    assert f"{path}:3:34: invalid YAML: 'maybe' is not a valid !!bool" in capsys.readouterr().err


def test_a_config_with_it_is_refused_at_the_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "policyd.yaml"
    path.write_text(
        "apiVersion: policyd.io/v1alpha1\nkind: PolicydConfiguration\nleaderElection: {leaderElect: !!bool maybe}\n"
    )
    assert main(["lint", "--config", str(path)]) != 0
    assert f"{path}:3:31: invalid YAML: 'maybe' is not a valid !!bool" in capsys.readouterr().err


def test_a_suite_with_it_is_unusable_and_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(
        "apiVersion: policyd.io/v1alpha1\nkind: PolicyTestSuite\npolicies: []\nnodes: []\n"
        "cases:\n- name: c\n  pod: {metadata: {name: p}, spec: {priority: !!int 0x}}\n  expect: {node: n}\n"
    )
    assert main(["test", str(path)]) != 0
    assert f"{path}:7:47: error: invalid YAML: '0x' is not a valid !!int" in capsys.readouterr().err
