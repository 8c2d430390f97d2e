"""The `policyd` command line: run | simulate | lint | effective | test | eval | explain | bench | snapshot | diff."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from policyd import __version__

# command name -> module in policyd.commands providing `add_arguments(parser)` and `run(args) -> int`
COMMANDS: dict[str, str] = {
    "run": "Schedule pods of a real cluster (API server back-end).",
    "simulate": "Schedule the pending pods of a cluster file on the in-memory simulated cluster.",
    "lint": "Check policy files: grammar, schema, types, cost, duplicate names.",
    "effective": "Show each profile's effective policy: rules, origins, weights, overrides.",
    "test": "Run policy test suites (YAML).",
    "eval": "Evaluate a CEL expression (or JSON Lines with --batch).",
    "explain": "Show the per-node, per-rule evaluation for one pod.",
    "bench": "Run the throughput benchmarks.",
    "playground": "Serve a page on localhost to edit, lint and run policies on a cluster.",
    "snapshot": "Write a cluster file of a live cluster (read-only).",
    "diff": "Compare the placements of pending pods under two policy sets, and the rules behind each move.",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every sub-command registered; `command`'s module is imported and
    adds its arguments, the others are only listed by name and help (None: every module, "": none).

    A command's module brings what it runs with it (the Kubernetes client, numpy, the compiler), so
    importing only the one asked for keeps `policyd --help` and the short commands quick to start."""
    parser = argparse.ArgumentParser(prog="policyd", description=__doc__)
    parser.add_argument("--version", action="version", version=f"policyd {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if command is None or name == command:
            module = importlib.import_module(f"policyd.commands.{name}")
            module.add_arguments(cmd)
            cmd.set_defaults(_module=module)
    return parser


def command_of(argv: Sequence[str]) -> str:
    """The sub-command `argv` names: its first word that is not an option ("" when none; the
    top-level options take no value)."""
    for word in argv:
        if word == "--":
            break
        if not word.startswith("-"):
            return word
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `policyd` console script; returns the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_of(words))
    args = parser.parse_args(words)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return int(args._module.run(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
