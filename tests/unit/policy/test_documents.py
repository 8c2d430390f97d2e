"""check_document: every policyd kind against its own schema, errors at the YAML node they concern."""

from __future__ import annotations

from pathlib import Path

from policyd.policy.documents import check_document
from policyd.policy.yaml_form import parse_policy_yaml

SUITE = """apiVersion: policyd.io/v1alpha1
kind: PolicyTestSuite
policies: [a.policy]
cases:
  - name: fits
    pod: {metadata: {name: p}}
    expect: {node: n1}
"""


def _found(text: str) -> list[tuple[int, int, str, str]]:
    return [(d.span.line, d.span.column, d.severity, d.message) for d in check_document("s.yaml", text)]


def test_a_valid_suite_and_config_are_clean() -> None:
    assert _found(SUITE) == []
    config = "apiVersion: policyd.io/v1alpha1\nkind: PolicydConfiguration\nprofiles:\n  - schedulerName: a\n"
    assert _found(config) == []


def test_suite_schema_errors_point_at_the_line_in_the_suite() -> None:
    found = _found(SUITE.replace("    expect: {node: n1}\n", "    podz: 1\n    expect: {node: n1}\n"))
    assert (
        7,
        5,
        "error",
        "cases[0]: unknown field 'podz' (did you mean 'pod'?) (allowed: name, description, nodes, pods, pdbs, storage, pod, queue, expect)",
    ) in found


def test_config_schema_errors_point_at_the_node() -> None:
    config = 'apiVersion: policyd.io/v1alpha1\nkind: PolicydConfiguration\nprofiles:\n  - schedulerName: "Bad Name"\n'
    found = _found(config)
    assert len(found) == 1 and found[0][:3] == (4, 20, "error") and "does not match" in found[0][3]


def test_misspelled_and_foreign_kinds() -> None:
    assert _found(SUITE.replace("PolicyTestSuite", "PolicyTestSuit")) == [
        (2, 7, "error", "unknown kind 'PolicyTestSuit' (did you mean 'PolicyTestSuite'?)")
    ]
    assert _found("apiVersion: apps/v1\nkind: Deployment\n") == [
        (2, 7, "warning", "not a policyd document (kind 'Deployment'): not checked")
    ]
    assert _found("apiVersion: policyd.io/v1alpha1\nkind: Thing\n")[0][3].startswith(
        "unknown kind 'Thing' (expected one of"
    )


def test_a_suite_given_as_a_policy_says_what_it_is(tmp_path: Path) -> None:
    """It was reported as a broken SchedulingPolicy (`unknown field 'pods'`)."""
    messages = [d.message for d in parse_policy_yaml(SUITE, "s.yaml").diagnostics]
    assert messages == [
        "this is a PolicyTestSuite document, not a SchedulingPolicy (policyd lint checks it as one)"
    ]


def test_a_one_of_reports_the_branch_that_fits_the_value() -> None:
    """`extends: [3]` said only "[3] is not valid under any of the given schemas" at `extends`."""
    policy = "apiVersion: policyd.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: x}\nspec:\n  extends: [3]\n"
    assert _found(policy) == [(5, 13, "error", "spec.extends[0]: 3 is not of type 'string'")]


def test_a_kind_that_is_not_a_string_is_an_error_not_a_crash() -> None:
    """`kind: [a, b]` raised TypeError (unhashable type) in lint, as a policy and as another document."""
    policy = "apiVersion: policyd.io/v1alpha1\nkind: [a, b]\nmetadata: {name: x}\nspec: {}\n"
    found = [(d.span.line, d.span.column, d.message) for d in parse_policy_yaml(policy, "p.yaml").diagnostics]
    assert found == [(2, 7, "kind: 'SchedulingPolicy' was expected")]
    suite = SUITE + "---\napiVersion: policyd.io/v1alpha1\nkind: {a: 1}\n"
    expected = "kind must be a string, one of SchedulingPolicy, PolicyTestSuite, PolicydConfiguration"
    assert _found(suite) == [(10, 7, "error", expected)]
