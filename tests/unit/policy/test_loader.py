"""The loader: files and directories, type checks per context, names across the set."""

from __future__ import annotations

from pathlib import Path

from policyd.policy.loader import load_policies, load_texts


def _load(tmp_path: Path, text: str, name: str = "p.policy") -> list[tuple[int, int, str, str]]:
    (tmp_path / name).write_text(text)
    result = load_policies([str(tmp_path / name)])
    return [(d.span.line, d.span.column, d.severity, d.message) for d in result.diagnostics]


def test_directory_is_searched_recursively(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.policy").write_text("policy a { filter F { expr = node.ready } }\n")
    (tmp_path / "b.yaml").write_text(
        "apiVersion: policyd.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: b}\nspec: {}\n"
    )
    (tmp_path / "notes.txt").write_text("not a policy")
    result = load_policies([str(tmp_path)])
    assert sorted(p.name.value for p in result.policies) == ["a", "b"]
    assert not result.has_errors and not result.io_errors


def test_a_byte_order_mark_is_not_part_of_the_text(tmp_path: Path) -> None:
    # some editors start a UTF-8 file with one; positions are counted without it, as they show it
    found = _load(tmp_path, "\ufeffpolicy a { filter F { expr = node.redy } }\n")
    errors = [(line, column, message) for line, column, severity, message in found if severity == "error"]
    assert [(line, column) for line, column, _ in errors] == [(1, 35)]  # as without the mark
    assert "undefined field 'redy'" in errors[0][2]


def test_a_byte_order_mark_is_dropped_from_texts_that_come_from_no_file() -> None:
    # a ConfigMap's value (kubectl create configmap --from-file keeps the mark), both forms
    text = "\ufeffpolicy a { filter F { expr = node.redy } }\n"
    yaml_text = (
        "\ufeffapiVersion: policyd.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: b}\nspec: {}\n"
    )
    result = load_texts({"configmap://ns/m/a.policy": text, "configmap://ns/m/b.yaml": yaml_text})
    assert sorted(p.name.value for p in result.policies) == ["a", "b"]
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert [(d.span.file, d.span.line, d.span.column) for d in errors] == [
        ("configmap://ns/m/a.policy", 1, 35)
    ]


def test_missing_path_is_io_error(tmp_path: Path) -> None:
    result = load_policies([str(tmp_path / "nope")])
    assert result.io_errors and not result.diagnostics


def test_result_types_per_context(tmp_path: Path) -> None:
    found = _load(
        tmp_path,
        "policy t {\n"
        "  match = pod.name\n"
        "  filter F { expr = true reason = 3 }\n"
        "  queue { order pod.labels }\n"
        "  preemption { victims = victim.priority }\n"
        "  permit g { group = 1 minMember = pod.name timeout = 5 }\n"
        "}\n",
    )
    messages = {(line, col): msg for line, col, _, msg in found}
    assert "match must be bool, got string" in messages[(2, 11)]
    assert "must be string or list(string), got int" in messages[(3, 35)]
    assert "must be orderable" in messages[(4, 17)]
    assert "must be bool, got int" in messages[(5, 26)]
    assert "must be string, got int" in messages[(6, 22)]
    assert "must be int, got string" in messages[(6, 36)]
    assert "must be duration, got int" in messages[(6, 55)]


def test_lets_scope_and_unused_warning(tmp_path: Path) -> None:
    found = _load(
        tmp_path,
        "policy l {\n"
        "  let a = 1\n"
        "  let b = a + 1\n"
        "  let unused = 2\n"
        "  queue { order b }\n"
        "  score S { expr = b }\n"
        "}\n",
    )
    assert (4, 7, "warning", "let 'unused' is never used") in found
    assert any(d[:2] == (5, 17) and "not visible in queue order" in d[3] for d in found)
    assert not any(d[:2] == (3, 11) for d in found)


def test_a_score_with_a_bad_weight_or_normalize_still_has_its_expression_checked(tmp_path: Path) -> None:
    """The bad value is reported, and so are the errors of the rule's expression; the lets the rule
    reads are used (they were reported as never used when the rule was dropped)."""
    text = (
        "policy s {\n"
        '  let free = node.free["cpu"]\n'
        '  score A { expr = free > "x" normalize = most }\n'
        "  score B { expr = free weight = -1 }\n"
        "}\n"
    )
    (tmp_path / "p.policy").write_text(text)
    result = load_policies([str(tmp_path / "p.policy")])
    found = sorted(
        (d.span.line, d.span.column, d.message) for d in result.diagnostics if d.severity == "error"
    )
    assert [(line, col) for line, col, _ in found] == [(3, 25), (3, 43), (4, 34)], found
    assert "no matching overload for '_>_'" in found[0][2]
    assert "unknown normalize value 'most'" in found[1][2]
    assert "weight -1 is negative" in found[2][2]
    assert not any("never used" in d.message for d in result.diagnostics), result.diagnostics
    assert result.has_errors


def test_duplicate_let_and_rule_and_sections(tmp_path: Path) -> None:
    found = _load(
        tmp_path,
        "policy d {\n"
        "  let x = 1\n"
        "  let x = 2\n"
        "  filter R { expr = x > 0 }\n"
        '  permit R { group = "g" minMember = 1 }\n'
        "  preemption { }\n"
        "}\n"
        "policy e { preemption { } }\n",
    )
    errors = {(d[0], d[1]): d[3] for d in found if d[2] == "error"}
    assert errors[(3, 7)] == "duplicate let 'x' (first defined at 2:7)"
    assert "duplicate rule name 'R'" in errors[(5, 10)]
    assert "second preemption section" in errors[(8, 12)]


def test_profiles_separate_sections(tmp_path: Path) -> None:
    found = _load(tmp_path, 'policy a { queue { } }\npolicy b { profiles = ["other"] queue { } }\n')
    assert [d for d in found if d[2] == "error"] == []


def test_directory_walk_skips_yaml_of_other_kinds_but_not_named_files(tmp_path: Path) -> None:
    (tmp_path / "p.policy").write_text("policy p {\n  filter F { expr = true }\n}\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text("apiVersion: policyd.io/v1alpha1\nkind: PolicyTestSuite\ncases: []\n")
    walked = load_policies([str(tmp_path)])
    assert walked.files == [str(tmp_path / "p.policy")] and not walked.has_errors
    named = load_policies([str(suite)])
    assert named.has_errors


def test_unchanged_texts_reuse_checked_policies_and_compiled_code() -> None:
    from policyd.compiler.codegen import compile_policy
    from policyd.policy.loader import load_texts

    a = 'policy a {\n  filter F { expr = node.name != "x" }\n}\n'
    b = 'policy b {\n  filter G { expr = node.name != "y" }\n}\n'
    first = load_texts({"a.policy": a, "b.policy": b})
    second = load_texts({"a.policy": a, "b.policy": b.replace('"y"', '"z"')})
    assert second.policies[0] is first.policies[0]  # a.policy unchanged: same checked IR
    assert second.policies[1] is not first.policies[1]
    assert compile_policy(second.checked[0]) is compile_policy(first.checked[0])
    assert compile_policy(second.checked[1]) is not compile_policy(first.checked[1])
    # the same text under another name is a different file (names appear in diagnostics)
    assert load_texts({"c.policy": a}).policies[0] is not first.policies[0]
