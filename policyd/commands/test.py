"""`policyd test PATH...`: run policy test suites (YAML); exit 1 on a failed case, 2 on unusable input."""

from __future__ import annotations

import argparse
import sys

from policyd.commands.suite import SuiteError, run_suite, suite_files


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="suite files or directories of *.yaml suites"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print failures and the summary only")


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
    passed = failed = 0
    unusable = False
    for path in files:
        try:
            results = run_suite(path)
        except SuiteError as exc:
            print(f"ERROR {exc}", file=sys.stderr)
            unusable = True
            continue
        for result in results:
            if result.passed:
                passed += 1
                if not args.quiet:
                    print(f"PASS {result.suite}: {result.name}")
            else:
                failed += 1
                print(f"FAIL {result.suite}: {result.name}")
                for problem in result.problems:
                    print(f"    {problem}")
    print(f"{passed} passed, {failed} failed")
    if unusable:
        return 2
    return 1 if failed else 0
