"""Diagnostics without a place in their source, and how commands print errors."""

from __future__ import annotations

from policyd.errors import ConfigError, Diagnostic, IOProblem, PolicyError, SourceSpan, error_text, unplaced


def test_an_unplaced_problem_names_its_source_and_no_line() -> None:
    missing = unplaced("not found", source="configmap ops/policies")
    assert missing.format() == "configmap ops/policies: error: not found"
    assert (missing.to_json()["file"], missing.to_json()["line"], missing.to_json()["column"]) == (
        "configmap ops/policies",
        None,
        None,
    )
    # no source given: the policy set's; the message is kept whole
    assert unplaced("no policy loaded").format() == "<policies>: error: no policy loaded"
    kept = unplaced("profile(s) batch: none", "config", "policyd.yaml")
    assert kept.format() == "policyd.yaml: error: profile(s) batch: none"


def test_an_io_problem_keeps_a_source_whose_name_holds_a_colon_whole() -> None:
    problem = IOProblem("/srv/a: b/x.policy", "no such file or directory")
    assert str(problem) == "/srv/a: b/x.policy: no such file or directory"
    assert problem.diagnostic().format() == "/srv/a: b/x.policy: error: no such file or directory"
    assert problem.diagnostic().span.file == "/srv/a: b/x.policy"


def test_a_placed_problem_keeps_its_line_and_column() -> None:
    found = Diagnostic("error", "bad", SourceSpan("a.policy", 3, 7), source_line="  expr = x")
    assert found.format() == "a.policy:3:7: error: bad\n  expr = x\n      ^"
    assert (found.to_json()["line"], found.to_json()["column"]) == (3, 7)


def test_a_policy_error_is_printed_as_its_diagnostics_say_it_others_get_error() -> None:
    diagnostics = PolicyError(Diagnostic("error", "bad", SourceSpan("a.policy", 1, 2)))
    assert error_text(diagnostics) == "a.policy:1:2: error: bad"
    assert error_text(ConfigError("$.profiles: required")) == "error: $.profiles: required"
