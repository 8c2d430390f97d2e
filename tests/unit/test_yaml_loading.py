"""A YAML value that does not convert to its type is a positioned YAML error everywhere policyd reads
YAML, not a Python exception escaping with a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policyd.cli import main
from policyd.yaml_loading import MAX_NESTING, FastSafeLoader, SafeLoader, safe_load, safe_load_all

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


def _nested(levels: int) -> str:
    """A document of `levels` nested mappings (the top one included), its innermost value a scalar."""
    return (
        "a: " * levels + "1\n"
        if levels < 3
        else "".join("  " * i + "a:\n" for i in range(levels - 1)) + "  " * (levels - 1) + "a: 1\n"
    )


@pytest.mark.parametrize("loader", [SafeLoader, FastSafeLoader])
def test_a_document_nested_past_the_limit_is_refused_at_the_first_level_too_deep(
    loader: type[yaml.SafeLoader],
) -> None:
    assert yaml.load(_nested(MAX_NESTING), Loader=loader) is not None  # noqa: S506 - a safe loader
    text = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1) + "\n"
    with pytest.raises(yaml.MarkedYAMLError, match=f"nested more than {MAX_NESTING} levels deep") as caught:
        yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    mark = caught.value.problem_mark
    assert mark is not None and (mark.line, mark.column) == (0, MAX_NESTING)  # the 65th `[`
    # PyYAML's own composer recursed into a RecursionError here (libyaml stops at 1000 levels itself)
    with pytest.raises(yaml.MarkedYAMLError, match="nested more than 64 levels deep|maximum nesting depth"):
        yaml.load("[" * 3000 + "]" * 3000, Loader=loader)  # noqa: S506 - a safe loader


BOMB = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 8)
)


@pytest.mark.parametrize("loader", [SafeLoader, FastSafeLoader])
def test_aliases_that_multiply_a_small_document_are_refused(loader: type[yaml.SafeLoader]) -> None:
    with pytest.raises(
        yaml.MarkedYAMLError, match="excessive aliasing: the document's aliases make 123,456,797 values"
    ):
        yaml.load(BOMB, Loader=loader)  # noqa: S506 - a safe loader
    # anchors used as people use them are fine
    text = "base: &b {cpu: 1, memory: 2Gi}\na: *b\nb: *b\nc: [*b, *b, *b]\n"
    assert safe_load(text)["c"][2] == {"cpu": 1, "memory": "2Gi"}


@pytest.mark.parametrize("loader", [SafeLoader, FastSafeLoader])
def test_an_alias_to_a_node_inside_itself_is_refused(loader: type[yaml.SafeLoader]) -> None:
    with pytest.raises(yaml.MarkedYAMLError, match="an alias refers to a node inside itself"):
        yaml.load("a: &x [1, *x]\n", Loader=loader)  # noqa: S506 - a safe loader


def test_lint_and_simulate_report_a_document_nested_too_deep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        POLICY.replace("weight: !!int", "weight: 1") + "  description: " + "[" * 500 + "]" * 500 + "\n"
    )
    assert main(["lint", str(policy)]) == 1
    assert f"{policy}:11:78: error: invalid YAML: nested more than 64 levels deep" in capsys.readouterr().out
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "kind: Node\napiVersion: v1\nmetadata: {name: n1, labels: " + "{a: " * 200 + "1" + "}" * 200 + "}\n"
    )
    assert main(["simulate", "--cluster", str(cluster)]) != 0
    assert "c.yaml:3:" in capsys.readouterr().err
