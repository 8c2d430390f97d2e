"""`policyd explain`: the per-node, per-rule evaluation of one pod (scheduled as `simulate` does).

With `--kubeconfig` (`--from-cluster`): one pod of the live cluster as it stands now, with the other
pending pods left out (only those nominated to a node stay: their room is reserved); a running pod is
evaluated as if unbound against the cluster without it, which shows the rules that would reject it
elsewhere."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from policyd.backends.cluster_file import ClusterObjects
from policyd.commands.simulate import (
    Simulation,
    add_common_arguments,
    load_policies,
    simulate,
    simulate_objects,
)
from policyd.commands.snapshot import read_live, wants_live
from policyd.errors import PolicydError
from policyd.scheduler.attempts import explain_table, scheduling_gated_message


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    add_common_arguments(parser)
    parser.add_argument(
        "--pod", required=True, help="the pod to explain, NAMESPACE/NAME (or NAME in default)"
    )
    parser.add_argument("--output", "-o", choices=("table", "json"), default="table")


def as_if_pending(objects: ClusterObjects, key: str) -> ClusterObjects:
    """The cluster as `key` would meet it now: `key` unbound (and off its node, if running) as the only
    pending pod besides those nominated to a node (their room is reserved)."""
    pods = []
    for pod in objects.pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if f"{meta.get('namespace') or 'default'}/{meta.get('name')}" == key:
            spec = {k: v for k, v in spec.items() if k != "nodeName"}
            pods.append({**pod, "spec": spec, "status": {"phase": "Pending"}})
        elif spec.get("nodeName") or (pod.get("status") or {}).get("nominatedNodeName"):
            pods.append(pod)
    return dataclasses.replace(objects, pods=tuple(pods))


def _explain_live(args: argparse.Namespace, key: str) -> tuple[Simulation, str | None] | str:
    """The live cluster's pod `key` evaluated now; with the node it runs on (None: pending), or an error."""
    policies = load_policies(args.policies)
    objects = read_live(args)
    pod = next(
        (p for p in objects.pods if f"{p['metadata'].get('namespace')}/{p['metadata']['name']}" == key), None
    )
    if pod is None:
        return f"pod {key} is not in the cluster (or has finished)"
    running_on = (pod.get("spec") or {}).get("nodeName") or None
    return simulate_objects(policies, as_if_pending(objects, key), args.seed, explain=True), running_on


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    key = args.pod if "/" in args.pod else f"default/{args.pod}"
    if wants_live(args) and args.cluster:
        print("policyd explain: error: --cluster and --from-cluster exclude each other", file=sys.stderr)
        return 2
    running_on = None
    try:
        if wants_live(args):
            live = _explain_live(args, key)
            if isinstance(live, str):
                print(f"policyd explain: error: {live}", file=sys.stderr)
                return 1
            sim, running_on = live
        else:
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
        if running_on is not None:
            doc["runningOn"] = running_on
        print(json.dumps(doc, indent=2))
        return 0
    if running_on is not None:
        print(
            f"pod {key} is running on {running_on}; evaluated as if unbound, against the cluster without it"
        )
        print()
    for i, attempt in enumerate(attempts):
        if i:
            print()
        print(explain_table(attempt))
    print()
    print(f"result: {key} -> {placement.node or '<none>'}")
    return 0
