"""`policyd effective [PATH... | --config policyd.yaml] [-o text|json]`: the effective policy of each profile.

With neither, the shipped default policy (as `simulate` and `explain` default to it).

For every profile: its layers in order, the queue and preemption sections in effect (and those they
replaced), and each rule with the file and line it is defined at, its weight and normalisation, and
which layer changed or disabled it, where (`policyd.policy.composition.EffectivePolicy`). With
`--config`, each profile is composed from its own policy sources, as `policyd run` composes it.

Exit status: 0 printed, 1 the policies have errors (printed on stderr), 2 usage or I/O error.
"""

from __future__ import annotations

import argparse
import json
import sys

from policyd import shipped
from policyd.commands.lint import add_source_arguments, load_config_set, load_paths
from policyd.errors import PolicydError
from policyd.policy.composition import Change, EffectivePolicy, EffectiveSection
from policyd.policy.loader import LoadResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    add_source_arguments(parser, "policyd.yaml: each profile from its own sources")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")


def run(args: argparse.Namespace) -> int:
    """Compose the policies and print each profile's effective policy; the exit code."""
    if args.config and args.paths:
        print("policyd effective: give PATHs or --config, not both", file=sys.stderr)
        return 2
    try:
        if args.config:
            result = load_config_set(args.config, args.configmap_file, args.kubeconfig)
        else:
            result = load_paths(args.paths or [str(shipped.default_policy())])
    except PolicydError as err:
        print(f"policyd effective: {err}", file=sys.stderr)
        return 2
    return report(result, args.output)


def report(result: LoadResult, fmt: str) -> int:
    """Print the effective policies (problems on stderr); the exit code."""
    for message in result.io_errors:
        print(f"policyd effective: {message}", file=sys.stderr)
    for d in result.diagnostics:
        if d.severity == "error":
            print(d.format(), file=sys.stderr)
    if result.io_errors:
        return 2
    if result.has_errors:
        return 1
    profiles = [result.profiles[name] for name in sorted(result.profiles)]
    if fmt == "json":
        print(json.dumps([p.to_json() for p in profiles], indent=2))
    else:
        print("\n\n".join(render(p) for p in profiles))
    return 0


def _changes(changes: tuple[Change, ...]) -> str:
    return "; ".join(f"{c.what} by {c.policy} at {c.span}" for c in changes)


def _section(section: EffectiveSection | None, name: str) -> str:
    if section is None:
        return f"  {name:<11} kube-scheduler's default"
    line = f"  {name:<11} {section.policy} at {section.span}"
    if section.replaced:
        line += " (replaces " + ", ".join(f"{c.policy} at {c.span}" for c in section.replaced) + ")"
    return line


def render(effective: EffectivePolicy) -> str:
    """The text form of one profile's effective policy."""
    lines = [f"profile {effective.profile} (layers: {', '.join(effective.policies)})"]
    lines.append(_section(effective.queue, "queue"))
    lines.append(_section(effective.preemption, "preemption"))
    width = max((len(r.qualified) for r in effective.rules), default=0)
    for rule in effective.rules:
        state = ""
        if not rule.enabled:
            state = "disabled"
        elif rule.kind == "score":
            state = f"weight {rule.weight} {rule.normalize}"
        row = f"  {rule.kind:<7} {rule.qualified:<{width}}  {state:<18} {rule.span}"
        if rule.changes:
            row += f"  [{_changes(rule.changes)}]"
        lines.append(row.rstrip())
    return "\n".join(lines)
