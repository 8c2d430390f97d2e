"""`policyd diff`: the placements of the pending pods under two policy sets, and the rules behind each move."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

from policyd import shipped
from policyd.backends.cluster_file import ClusterObjects, load_cluster
from policyd.commands.simulate import Simulation, load_policies, served_pending, simulate_objects
from policyd.commands.snapshot import add_live_arguments, read_live, wants_live
from policyd.errors import PolicydError, error_text
from policyd.whatif.diff import Load, RunOutcome, compare, render_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    parser.add_argument(
        "--cluster", default=None, help="cluster file (default: the example cluster shipped with policyd)"
    )
    add_live_arguments(parser)
    parser.add_argument(
        "--policies", nargs="+", action="extend", required=True, help="policy set A (files/dirs)"
    )
    parser.add_argument(
        "--against", nargs="+", action="extend", required=True, help="policy set B (files/dirs)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="random seed for tie-breaks, both runs (default 0)"
    )
    parser.add_argument(
        "--scheduler-name",
        default=None,
        help="schedule every pending pod as if its spec.schedulerName were this (e.g. the profile B's policy "
        "serves); a set without that profile uses its default profile, as simulate does",
    )
    parser.add_argument(
        "--top", type=int, default=5, help="how many nodes the load summary lists (default 5)"
    )
    parser.add_argument("--output", "-o", choices=("text", "json"), default="text")


def as_scheduler(objects: ClusterObjects, name: str) -> ClusterObjects:
    """`objects` with every pending pod's spec.schedulerName set to `name`."""
    pods = tuple(
        p
        if (p.get("spec") or {}).get("nodeName")
        else {**p, "spec": {**(p.get("spec") or {}), "schedulerName": name}}
        for p in objects.pods
    )
    return dataclasses.replace(objects, pods=pods)


def outcome(sim: Simulation, node_names: Sequence[str]) -> RunOutcome:
    """What the diff reads of one simulation."""
    statuses = {}
    for p in sim.placements:
        statuses[p.pod] = (
            "scheduled"
            if p.node
            else "preempted"
            if p.preempted
            else "gated"
            if p.scheduling_gates
            else "unschedulable"
        )
    loads: dict[str, Load] = dict.fromkeys(node_names, (0, 0, 0))
    for pod in sim.scheduler.cache.all_pods():
        if pod.node_name in loads:
            requests = pod.cel["requests"]
            count, cpu, memory = loads[pod.node_name]
            loads[pod.node_name] = (
                count + 1,
                cpu + requests.get("cpu", 0),
                memory + requests.get("memory", 0),
            )
    return RunOutcome(
        nodes={p.pod: p.node for p in sim.placements},
        statuses=statuses,
        attempts=sim.scheduler.attempts.for_pod,
        loads=loads,
    )


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    if wants_live(args) and args.cluster:
        print("policyd diff: error: --cluster and --from-cluster exclude each other", file=sys.stderr)
        return 2
    try:
        policies_a, policies_b = load_policies(args.policies), load_policies(args.against)
        if wants_live(args):
            live = read_live(args)
            pods = {id(p) for p in served_pending(live, policies_a).pods}
            pods |= {id(p) for p in served_pending(live, policies_b).pods}
            objects = dataclasses.replace(live, pods=tuple(p for p in live.pods if id(p) in pods))
        else:
            objects = load_cluster(args.cluster or str(shipped.example_cluster()))
        if args.scheduler_name:
            objects = as_scheduler(objects, args.scheduler_name)
        sim_a = simulate_objects(policies_a, objects, args.seed, explain=True)
        sim_b = simulate_objects(policies_b, objects, args.seed, explain=True)
    except (PolicydError, OSError) as exc:
        print(f"policyd diff: {error_text(exc)}", file=sys.stderr)
        return 1
    nodes = [str(n["metadata"]["name"]) for n in objects.nodes]
    result = compare(outcome(sim_a, nodes), outcome(sim_b, nodes), top=args.top)
    if args.output == "json":
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(render_text(result))
    return 0
