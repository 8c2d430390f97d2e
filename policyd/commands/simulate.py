"""`policyd simulate`: schedule the pending pods of a cluster file on the in-memory simulated cluster."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from policyd import shipped
from policyd.backends.cluster_file import ClusterObjects, load_cluster
from policyd.backends.simulated import SimulatedCluster
from policyd.commands.snapshot import add_live_arguments, read_live, wants_live
from policyd.errors import PolicydError
from policyd.framework import CompiledPolicySet
from policyd.scheduler.attempts import Attempt, explain_table, scheduling_gated_message
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.cluster.objects import API_DEFAULT_SCHEDULER_NAME
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions

# a pod failing this many cycles is reported as unschedulable rather than retried forever
MAX_ATTEMPTS = 20
# --arrivals: every pending pod queued at the start, or each at its creationTimestamp
ALL_AT_ONCE = "all-at-once"
CREATION_TIME = "creation-time"


@dataclass(frozen=True)
class Placement:
    """The outcome of one pending pod (a pod placed, then preempted by a later one, is `preempted`)."""

    pod: str
    node: str | None
    attempts: int
    message: str
    nominated_node: str | None
    preempted: bool = False
    # spec.schedulingGates still set when the run settled: the pod never entered the active queue
    scheduling_gates: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The `--output json` shape of a placement."""
        doc: dict[str, Any] = {
            "pod": self.pod,
            "node": self.node,
            "attempts": self.attempts,
            "message": self.message,
            "nominatedNode": self.nominated_node,
            "preempted": self.preempted,
        }
        if self.scheduling_gates:
            doc["schedulingGates"] = list(self.scheduling_gates)
        return doc


@dataclass
class Simulation:
    """A finished simulation: the scheduler, the cluster and the placements."""

    scheduler: Scheduler
    cluster: SimulatedCluster
    placements: list[Placement]
    seconds: float

    def summary(self) -> dict[str, int]:
        """Pods placed, left unschedulable, held by scheduling gates, and victims (pods deleted by preemption), apart."""
        gated = sum(1 for p in self.placements if p.scheduling_gates)
        counts = {
            "scheduled": sum(1 for p in self.placements if p.node),
            "unschedulable": sum(
                1 for p in self.placements if not p.node and not p.preempted and not p.scheduling_gates
            ),
        }
        if gated:
            counts["gated"] = gated
        counts["preempted"] = len(self.scheduler.victims)
        return counts

    def report(self, *, timing: bool = False) -> dict[str, Any]:
        """The JSON document `--output json` prints: the same for the same input, unless `timing`."""
        summary: dict[str, Any] = dict(self.summary())
        if timing:
            rate = len(self.placements) / self.seconds if self.seconds > 0 else 0.0
            summary["seconds"] = round(self.seconds, 3)
            summary["podsPerSecond"] = round(rate, 1)
        return {
            "placements": [p.to_json() for p in self.placements],
            "victims": list(self.scheduler.victims),
            "summary": summary,
        }


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by `simulate` and `explain`."""
    parser.add_argument(
        "--cluster", default=None, help="cluster file (default: the example cluster shipped with policyd)"
    )
    parser.add_argument(
        "--policies",
        nargs="+",
        action="extend",
        default=None,
        help="policy files/dirs (default: the shipped default.policy)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed for tie-breaks (default 0)")
    add_live_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    add_common_arguments(parser)
    parser.add_argument("--output", "-o", choices=("table", "json", "yaml"), default="table")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="explain one pod (the first unschedulable, else the first placed): after the table, or as "
        "`explanation` in the JSON/YAML document",
    )
    parser.add_argument(
        "--timing", action="store_true", help="add the run time and pods per second to the summary"
    )
    parser.add_argument(
        "--arrivals",
        choices=(ALL_AT_ONCE, CREATION_TIME),
        default=ALL_AT_ONCE,
        help="all pending pods queued at once (default), or each created at its metadata.creationTimestamp "
        "on the simulated clock (replays a recorded trace)",
    )


def _progress(stream: TextIO, total: int) -> Any:
    if not stream.isatty() or total == 0:
        return None

    def show(done: int) -> None:
        width = 30
        filled = min(width, width * done // max(total, 1))
        stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done} cycles / {total} pods")
        stream.flush()

    return show


def load_policies(policy_paths: Sequence[str] | None) -> CompiledPolicySet:
    """Compile the policy files/dirs (default: the shipped default.policy)."""
    from policyd.compiler.profiles import compile_paths

    return compile_paths(list(policy_paths or [str(shipped.default_policy())]), generation=1)


def simulate(
    cluster_path: str | None,
    policy_paths: Sequence[str] | None,
    seed: int = 0,
    explain: bool = False,
    progress_stream: TextIO | None = None,
    arrivals: str = ALL_AT_ONCE,
) -> Simulation:
    """Load, compile and schedule every pending pod until the queue settles."""
    policies = load_policies(policy_paths)
    objects = load_cluster(cluster_path or str(shipped.example_cluster()))
    return simulate_objects(policies, objects, seed, explain, progress_stream, arrivals)


def simulate_objects(
    policies: CompiledPolicySet,
    objects: ClusterObjects,
    seed: int = 0,
    explain: bool = False,
    progress_stream: TextIO | None = None,
    arrivals: str = ALL_AT_ONCE,
) -> Simulation:
    """Schedule every pending pod of loaded cluster objects (a file's or a live cluster's) until the queue settles."""
    cluster = SimulatedCluster.from_objects(objects, replay_arrivals=arrivals == CREATION_TIME)
    pending = len(SimulatedCluster.pending_in_queue_order(cluster.pods()))
    show = _progress(progress_stream, pending) if progress_stream is not None else None
    started = time.perf_counter()
    scheduler = run_simulation(policies, cluster, seed, explain, MAX_ATTEMPTS, progress=show)
    seconds = time.perf_counter() - started
    if show is not None and progress_stream is not None:
        progress_stream.write("\n")
    return Simulation(scheduler, cluster, placements(scheduler, cluster), seconds)


def served_pending(objects: ClusterObjects, policies: CompiledPolicySet) -> ClusterObjects:
    """`objects` with only the pending pods a profile of `policies` serves (by spec.schedulerName), as
    `policyd run` would take them from a live cluster; bound pods all stay."""
    pods = tuple(
        p
        for p in objects.pods
        if (p.get("spec") or {}).get("nodeName")
        or ((p.get("spec") or {}).get("schedulerName") or API_DEFAULT_SCHEDULER_NAME) in policies.profiles
    )
    return dataclasses.replace(objects, pods=pods)


def simulate_live(
    args: argparse.Namespace, explain: bool = False, progress_stream: TextIO | None = None
) -> Simulation:
    """`--from-cluster`: the live cluster's pending pods served by the policies, scheduled in memory (nothing is bound)."""
    policies = load_policies(args.policies)
    objects = served_pending(read_live(args), policies)
    return simulate_objects(policies, objects, args.seed, explain, progress_stream, args.arrivals)


def run_simulation(
    policies: CompiledPolicySet,
    cluster: SimulatedCluster,
    seed: int,
    explain: bool,
    max_attempts: int,
    progress: Callable[[int], None] | None = None,
) -> Scheduler:
    """Schedule the simulated cluster's pending pods on a fake clock until nothing is left to try."""
    scheduler = Scheduler(
        policies,
        cluster,
        clock=FakeClock(),
        options=SchedulerOptions(
            adopt_unknown_schedulers=True,
            seed=seed,
            explain=explain,
            max_attempts=max_attempts,
            attempt_log_pods=None,  # every attempt is reported and may be explained
            attempt_log_detailed=None,
        ),
    )
    cluster.start(scheduler)
    scheduler.run_until_settled(progress=progress, arrivals=cluster if cluster.replay_arrivals else None)
    scheduler.binder.shutdown()
    return scheduler


def placements(scheduler: Scheduler, cluster: SimulatedCluster) -> list[Placement]:
    """One placement per attempted pod, in the order pods were first popped."""
    out = []
    for key in scheduler.attempts.pods():
        attempts = scheduler.attempts.for_pod(key)
        obj = cluster.pod(key)
        node = cluster.node_of(key)
        if obj is None and key in scheduler.victims:
            node = None
        preempted = obj is None and key in scheduler.victims
        message = ""
        if preempted:
            message = "preempted"
        elif node is None:
            message = next((a.message for a in reversed(attempts) if a.message), "")
        nominated = ((obj or {}).get("status") or {}).get("nominatedNodeName") or None
        cycles = sum(1 for a in attempts if a.result != "rejected")
        out.append(Placement(key, node, cycles, message, None if node else nominated, preempted))
    for queued in scheduler.queue.gated_pods():  # never attempted: held at PreEnqueue
        gates = queued.pod.scheduling_gates
        out.append(Placement(queued.key, None, 0, scheduling_gated_message(gates), None, False, gates))
    return out


def explained_pod(sim: Simulation) -> str | None:
    """The pod `--explain` shows: the first unschedulable one, else the first placed one."""
    for p in sim.placements:
        if p.node is None and not p.preempted:
            return p.pod
    placed = [p for p in sim.placements if p.node]
    return placed[0].pod if placed else None


def _table(sim: Simulation) -> str:
    rows = [("POD", "NODE", "ATTEMPTS", "NOMINATED", "MESSAGE")]
    for p in sim.placements:
        shown = p.node or ("<preempted>" if p.preempted else "<none>")
        rows.append((p.pod, shown, str(p.attempts), p.nominated_node or "", p.message))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "  ".join([*(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)), r[4]]).rstrip() for r in rows
    ]
    summary = sim.summary()
    lines.append("")
    lines.append(
        f"scheduled {summary['scheduled']}, unschedulable {summary['unschedulable']}, "
        + (f"gated {summary['gated']}, " if "gated" in summary else "")
        + f"preempted {summary['preempted']}"
        + (f" ({', '.join(sim.scheduler.victims)})" if sim.scheduler.victims else "")
    )
    return "\n".join(lines)


def explanation(sim: Simulation) -> tuple[str, list[Attempt]] | None:
    """The pod `--explain` shows and its attempts (None when no pod was attempted)."""
    key = explained_pod(sim)
    if key is None:
        return None
    return key, sim.scheduler.attempts.for_pod(key)


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    if wants_live(args) and args.cluster:
        print("policyd simulate: error: --cluster and --from-cluster exclude each other", file=sys.stderr)
        return 2
    try:
        if wants_live(args):
            sim = simulate_live(args, explain=args.explain, progress_stream=sys.stderr)
        else:
            sim = simulate(
                args.cluster,
                args.policies,
                args.seed,
                explain=args.explain,
                progress_stream=sys.stderr,
                arrivals=args.arrivals,
            )
    except PolicydError as exc:
        print(f"policyd simulate: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"policyd simulate: {exc}", file=sys.stderr)
        return 1
    explained = explanation(sim) if args.explain else None
    if args.output in ("json", "yaml"):
        doc = sim.report(timing=args.timing)
        if explained is not None:
            key, attempts = explained
            doc["explanation"] = {"pod": key, "attempts": [a.to_json() for a in attempts]}
        if args.output == "json":
            print(json.dumps(doc, indent=2))
        else:
            print(yaml.safe_dump(doc, sort_keys=False), end="")
        return 0
    print(_table(sim))
    if args.timing:
        print(f"{sim.seconds:.3f} s, {sim.report(timing=True)['summary']['podsPerSecond']} pods/s")
    if explained is not None:
        _, attempts = explained
        shown = [a for a in attempts if a.nodes] or attempts
        print()
        print(explain_table(shown[-1]))
    return 0
