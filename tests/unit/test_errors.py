"""Diagnostics without a place in their source, and how commands print errors."""

from __future__ import annotations

from policyd.errors import ConfigError, Diagnostic, PolicyError, SourceSpan, error_text, unplaced


def test_an_unplaced_problem_names_its_source_and_no_line() -> None:
    missing = unplaced("configmap ops/policies: not found")
    assert missing.format() == "configmap ops/policies: error: not found"
    assert (missing.to_json()["file"], missing.to_json()["line"], missing.to_json()["column"]) == (
        "configmap ops/policies",
        None,
        None,
    )
    # a message of no source: the policy set's; a source given: the message is kept whole
    assert unplaced("no policy loaded").format() == "<policies>: error: no policy loaded"
    kept = unplaced("profile(s) batch: none", "config", "policyd.yaml")
    assert kept.format() == "policyd.yaml: error: profile(s) batch: none"


def test_a_placed_problem_keeps_its_line_and_column() -> None:
    found = Diagnostic("error", "bad", SourceSpan("a.policy", 3, 7), source_line="  expr = x")
    assert found.format() == "a.policy:3:7: error: bad\n  expr = x\n      ^"
    assert (found.to_json()["line"], found.to_json()["column"]) == (3, 7)


def test_a_policy_error_is_printed_as_its_diagnostics_say_it_others_get_error() -> None:
    diagnostics = PolicyError(Diagnostic("error", "bad", SourceSpan("a.policy", 1, 2)))
    assert error_text(diagnostics) == "a.policy:1:2: error: bad"
    assert error_text(ConfigError("$.profiles: required")) == "error: $.profiles: required"
