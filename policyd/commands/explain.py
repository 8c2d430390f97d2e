"""`policyd explain`: the per-node, per-rule evaluation of one pod (scheduled as `simulate` does)."""

from __future__ import annotations

import argparse
import json
import sys

from policyd.commands.simulate import add_common_arguments, simulate
from policyd.errors import PolicydError
from policyd.scheduler.attempts import explain_table, scheduling_gated_message


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    add_common_arguments(parser)
    parser.add_argument(
        "--pod", required=True, help="the pod to explain, NAMESPACE/NAME (or NAME in default)"
    )
    parser.add_argument("--output", "-o", choices=("table", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    key = args.pod if "/" in args.pod else f"default/{args.pod}"
    try:
        sim = simulate(args.cluster, args.policies, args.seed, explain=True)
    except (PolicydError, OSError) as exc:
        print(f"policyd explain: {exc}", file=sys.stderr)
        return 1
    attempts = sim.scheduler.attempts.for_pod(key)
    queued = sim.scheduler.queue.get(key)
    if not attempts and queued is not None and queued.pod.scheduling_gates:
        print(f"pod {key} is gated: {scheduling_gated_message(queued.pod.scheduling_gates)}")
        print("it enters the scheduling queue when every gate is removed; no node was evaluated")
        return 0
    if not attempts:
        known = sim.cluster.pod(key)
        why = "is not pending in the cluster file" if known is not None else "is not in the cluster file"
        print(f"policyd explain: pod {key} {why}", file=sys.stderr)
        return 1
    placement = next(p for p in sim.placements if p.pod == key)
    if args.output == "json":
        doc = {"pod": key, "placement": placement.to_json(), "attempts": [a.to_json() for a in attempts]}
        print(json.dumps(doc, indent=2))
        return 0
    for i, attempt in enumerate(attempts):
        if i:
            print()
        print(explain_table(attempt))
    print()
    print(f"result: {key} -> {placement.node or '<none>'}")
    return 0
