"""`policyd explain` (not implemented yet)."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    parser.add_argument("rest", nargs="*")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    print("policyd explain: not implemented yet", file=sys.stderr)
    return 2
