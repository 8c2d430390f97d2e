"""`policyd lint PATH... [--format text|json]`: check policy files.

Exit status: 0 clean (warnings allowed), 1 errors found, 2 usage or I/O error.
"""

from __future__ import annotations

import argparse
import json
import sys

from policyd.compiler.loader import load_policies


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="policy files or directories")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def run(args: argparse.Namespace) -> int:
    """Lint the given paths; print diagnostics; return the exit code."""
    result = load_policies(args.paths)
    diagnostics = sorted(
        result.diagnostics, key=lambda d: (d.span.file, d.span.line, d.span.column, d.message)
    )
    for message in result.io_errors:
        print(f"policyd lint: {message}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps([d.to_json() for d in diagnostics], indent=2))
    else:
        for d in diagnostics:
            print(d.format())
        errors = sum(1 for d in diagnostics if d.severity == "error")
        warnings = len(diagnostics) - errors
        if diagnostics:
            print(f"{errors} error(s), {warnings} warning(s) in {len(result.files)} file(s)", file=sys.stderr)
    if result.io_errors:
        return 2
    if result.has_errors:
        return 1
    return 0
