"""The coverage collector: probes registered twice add up; the report per file and in total."""

from __future__ import annotations

import pytest

from policyd.evaluation.coverage import BranchProbe, CoverageCollector, RuleProbe, percent


def rule(name: str, file: str = "a.policy", line: int = 1) -> RuleProbe:
    return RuleProbe(file, line, 3, "p", "filter", name)


def branch(text: str, file: str = "a.policy", line: int = 2) -> BranchProbe:
    return BranchProbe(file, line, 5, "p", "filter F", "&&", text)


def test_the_same_probe_registered_twice_shares_its_counts() -> None:
    c = CoverageCollector()
    first, second = c.rule(rule("F")), c.rule(rule("F"))
    first()
    second()
    record = c.branch(branch("x"))
    assert record(True) is True and record(False) is False and record("err") == "err"
    c.branch(branch("x"))(True)
    (file,) = c.report().files
    (r,) = file.rules
    assert r.evaluations == 2 and r.covered
    (b,) = file.branches
    assert (b.true, b.false, b.outcomes_covered, b.missing) == (2, 1, 2, ())


def test_report_per_file_and_total() -> None:
    c = CoverageCollector()
    c.rule(rule("F"))()
    c.rule(rule("G", line=9))
    c.branch(branch("x"))(True)
    c.rule(rule("H", file="b.policy"))()
    report = c.report()
    assert [f.file for f in report.files] == ["a.policy", "b.policy"]
    a, b = report.files
    assert [r.probe.name for r in a.rules] == ["F", "G"]  # source order
    assert (a.rules_covered, len(a.rules), a.outcomes_covered, a.outcomes_total) == (1, 2, 1, 2)
    assert a.branches[0].missing == ("false",)
    assert (b.rules_covered, len(b.rules), b.outcomes_total) == (1, 1, 0)
    assert (report.rules_covered, report.rules_total) == (2, 3)
    assert report.total_percent == pytest.approx(100 * 3 / 5)


def test_percent_of_nothing_is_complete() -> None:
    assert percent(0, 0) == 100.0
    assert percent(1, 4) == 25.0
