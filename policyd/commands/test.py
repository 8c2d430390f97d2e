"""`policyd test PATH...`: run policy test suites (YAML); exit 1 on a failed case or too little
coverage, 2 on unusable input.

`--output text|json|junit` chooses the report (JUnit XML for CI systems); `--coverage` adds which rules
and branch conditions of each policy file the suites exercised (`policyd.evaluation.coverage` defines
both), and `--min-coverage PCT` fails the run when the total is below PCT percent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policyd.commands.suite import CaseResult, SuiteError, run_suite, suite_files
from policyd.evaluation.coverage import CoverageCollector, CoverageReport, FileCoverage, percent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="suite files or directories of *.yaml suites"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print failures and the summary only")
    parser.add_argument(
        "--output",
        "-o",
        choices=("text", "json", "junit"),
        default="text",
        help="report format: text (default), json, or junit (JUnit XML for CI systems)",
    )
    parser.add_argument(
        "--coverage",
        action="store_true",
        help="report which rules and branch conditions of each policy file the suites exercised",
    )
    parser.add_argument(
        "--min-coverage",
        type=float,
        metavar="PCT",
        default=None,
        help="fail (exit 1) when total coverage is below PCT percent (implies --coverage)",
    )


@dataclass
class SuiteRun:
    """One suite file's outcome: its cases, or why it could not run."""

    file: str
    cases: list[CaseResult] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


@dataclass
class RunOutcome:
    """Every suite's outcome and, with coverage on, what the suites covered."""

    suites: list[SuiteRun]
    coverage: CoverageReport | None = None
    min_coverage: float | None = None

    @property
    def passed(self) -> int:
        """Cases that passed."""
        return sum(1 for s in self.suites for c in s.cases if c.passed)

    @property
    def failed(self) -> int:
        """Cases that failed."""
        return sum(1 for s in self.suites for c in s.cases if not c.passed)

    @property
    def errors(self) -> int:
        """Suite files that could not be run."""
        return sum(1 for s in self.suites if s.error is not None)

    @property
    def below_minimum(self) -> bool:
        """True when coverage was asked a minimum and is below it."""
        return (
            self.coverage is not None
            and self.min_coverage is not None
            and self.coverage.total_percent < self.min_coverage
        )

    def exit_code(self) -> int:
        """2 for unusable suites, 1 for failed cases or too little coverage, else 0."""
        if self.errors:
            return 2
        return 1 if self.failed or self.below_minimum else 0


def run_suites(files: list[Path], coverage: CoverageCollector | None) -> list[SuiteRun]:
    """Run every suite file, in order."""
    out = []
    for path in files:
        started = time.perf_counter()
        try:
            run = SuiteRun(str(path), cases=run_suite(path, coverage))
        except SuiteError as exc:
            run = SuiteRun(str(path), error=str(exc))
        run.seconds = time.perf_counter() - started
        out.append(run)
    return out


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    try:
        files = suite_files(args.paths)
    except SuiteError as exc:
        print(f"policyd test: {exc}", file=sys.stderr)
        return 2
    if not files:
        print("policyd test: no suite files found", file=sys.stderr)
        return 2
    if args.min_coverage is not None and not 0 <= args.min_coverage <= 100:
        print("policyd test: --min-coverage must be a percentage from 0 to 100", file=sys.stderr)
        return 2
    collector = CoverageCollector() if args.coverage or args.min_coverage is not None else None
    result = RunOutcome(run_suites(files, collector), min_coverage=args.min_coverage)
    if collector is not None:
        result.coverage = collector.report()
    if args.output == "json":
        print(json.dumps(json_report(result), indent=2))
    elif args.output == "junit":
        print(junit_report(result))
        if result.coverage is not None:
            print(coverage_text(result.coverage), file=sys.stderr)
    else:
        for suite in result.suites:
            if suite.error is not None:
                print(f"ERROR {suite.error}", file=sys.stderr)
        print(text_report(result, quiet=args.quiet))
    if result.below_minimum:
        assert result.coverage is not None
        print(
            f"policyd test: coverage {result.coverage.total_percent:.1f}% is below the minimum "
            f"{result.min_coverage:g}%",
            file=sys.stderr,
        )
    return result.exit_code()


# ---- text -------------------------------------------------------------------------------------------


def _shown(file: str) -> str:
    """A file name as reports show it: relative to the working directory when under it."""
    try:
        rel = os.path.relpath(file)
    except ValueError:
        return file
    return file if rel.startswith("..") else rel


def text_report(result: RunOutcome, *, quiet: bool = False) -> str:
    """The human-readable report: a line per case (failures with their problems), then the summary."""
    lines: list[str] = []
    for suite in result.suites:
        for case in suite.cases:
            if case.passed:
                if not quiet:
                    lines.append(f"PASS {case.suite}: {case.name}")
                continue
            lines.append(f"FAIL {case.suite}: {case.name}")
            lines.extend(f"    {problem}" for problem in case.problems)
    summary = f"{result.passed} passed, {result.failed} failed"
    if result.errors:
        summary += f", {result.errors} suite file(s) unusable"
    lines.append(summary)
    if result.coverage is not None:
        lines.append("")
        lines.append(coverage_text(result.coverage))
    return "\n".join(lines)


def coverage_text(report: CoverageReport) -> str:
    """The coverage table (per file, total), then each rule and branch outcome not covered, at file:line:col."""
    rows = [("FILE", "RULES", "BRANCHES", "TOTAL")]
    for f in report.files:
        rows.append(
            (
                _shown(f.file),
                _ratio(f.rules_covered, len(f.rules)),
                _ratio(f.outcomes_covered, f.outcomes_total),
                f"{_file_percent(f):.1f}%",
            )
        )
    rows.append(
        (
            "total",
            _ratio(report.rules_covered, report.rules_total),
            _ratio(report.outcomes_covered, report.outcomes_total),
            f"{report.total_percent:.1f}%",
        )
    )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["coverage (rules evaluated; branch conditions seen both true and false):"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    missing = [line for f in report.files for line in _missing(f)]
    if missing:
        lines.append("not covered:")
        lines.extend(f"  {line}" for line in missing)
    return "\n".join(lines)


def _ratio(covered: int, total: int) -> str:
    return f"{covered}/{total} {percent(covered, total):.1f}%"


def _file_percent(f: FileCoverage) -> float:
    return percent(f.rules_covered + f.outcomes_covered, len(f.rules) + f.outcomes_total)


def _missing(f: FileCoverage) -> list[str]:
    """One line per rule never evaluated and per branch condition with an outcome never seen."""
    out: list[tuple[int, int, str]] = []
    shown = _shown(f.file)
    for r in f.rules:
        if not r.covered:
            p = r.probe
            text = f"{shown}:{p.line}:{p.column}: {p.kind} {p.name} (policy {p.policy}) was never evaluated"
            out.append((p.line, p.column, text))
    for b in f.branches:
        if b.missing:
            q = b.probe
            never = " nor ".join(b.missing)
            text = f"{shown}:{q.line}:{q.column}: {q.owner} ({q.point}): `{q.text}` was never {never}"
            out.append((q.line, q.column, text))
    return [text for _, _, text in sorted(out, key=lambda t: (t[0], t[1]))]


# ---- JSON -------------------------------------------------------------------------------------------


def json_report(result: RunOutcome) -> dict[str, Any]:
    """The `--output json` document."""
    doc: dict[str, Any] = {
        "suites": [
            {
                "file": s.file,
                "error": s.error,
                "cases": [
                    {"name": c.name, "passed": c.passed, "problems": list(c.problems)} for c in s.cases
                ],
            }
            for s in result.suites
        ],
        "summary": {"passed": result.passed, "failed": result.failed, "errors": result.errors},
    }
    if result.coverage is not None:
        doc["coverage"] = coverage_json(result.coverage)
        doc["coverage"]["minCoverage"] = result.min_coverage
        doc["coverage"]["belowMinimum"] = result.below_minimum
    return doc


def coverage_json(report: CoverageReport) -> dict[str, Any]:
    """Coverage per file (rules, branch conditions, what is missing) and in total."""
    files = []
    for f in report.files:
        files.append(
            {
                "file": f.file,
                "rules": {"covered": f.rules_covered, "total": len(f.rules)},
                "branches": {"covered": f.outcomes_covered, "total": f.outcomes_total},
                "percent": round(_file_percent(f), 2),
                "ruleDetail": [
                    {
                        "policy": r.probe.policy,
                        "kind": r.probe.kind,
                        "name": r.probe.name,
                        "line": r.probe.line,
                        "column": r.probe.column,
                        "evaluations": r.evaluations,
                    }
                    for r in f.rules
                ],
                "branchDetail": [
                    {
                        "policy": b.probe.policy,
                        "owner": b.probe.owner,
                        "point": b.probe.point,
                        "condition": b.probe.text,
                        "line": b.probe.line,
                        "column": b.probe.column,
                        "true": b.true,
                        "false": b.false,
                    }
                    for b in f.branches
                ],
            }
        )
    return {
        "files": files,
        "total": {
            "rules": {"covered": report.rules_covered, "total": report.rules_total},
            "branches": {"covered": report.outcomes_covered, "total": report.outcomes_total},
            "percent": round(report.total_percent, 2),
        },
    }


# ---- JUnit XML --------------------------------------------------------------------------------------


def junit_report(result: RunOutcome) -> str:
    """JUnit XML: a <testsuite> per suite file, a <testcase> per case, <failure> / <error> with the message."""
    root = ET.Element(
        "testsuites",
        name="policyd test",
        tests=str(result.passed + result.failed + result.errors),
        failures=str(result.failed),
        errors=str(result.errors),
    )
    for suite in result.suites:
        failed = sum(1 for c in suite.cases if not c.passed)
        element = ET.SubElement(
            root,
            "testsuite",
            name=suite.file,
            tests=str(len(suite.cases) + (suite.error is not None)),
            failures=str(failed),
            errors=str(int(suite.error is not None)),
            time=f"{suite.seconds:.3f}",
        )
        if suite.error is not None:
            case = ET.SubElement(element, "testcase", classname=suite.file, name="(suite file)")
            error = ET.SubElement(case, "error", message=suite.error.splitlines()[0], type="SuiteError")
            error.text = suite.error
        for c in suite.cases:
            case = ET.SubElement(element, "testcase", classname=suite.file, name=c.name)
            if not c.passed:
                failure = ET.SubElement(case, "failure", message=c.problems[0], type="PolicyTestFailure")
                failure.text = "\n".join(c.problems)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")
