"""`policyd bench`: run scheduler_perf-like workloads and write a JSON result file and a markdown table.

`--mode inprocess` drives the real Scheduler on the simulated back-end (the algorithm's throughput);
`--mode e2e` runs `policyd run` and kube-scheduler one after the other, each against a fresh real
kube-apiserver + etcd, with equal client QPS/burst (binaries from `KUBEBUILDER_ASSETS`), `--rounds N`
times in alternating order, and reports medians; `--mode both` does both. The harness is `policyd.bench`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from policyd.bench import e2e, e2e_report, inprocess
from policyd.bench.results import DEFAULT_OUT
from policyd.bench.workloads import WORKLOADS, Workload, workload
from policyd.envtest import ControlPlaneError, MissingAssetsError

DEFAULT_WORKLOADS = ("SchedulingBasic/500",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the command's arguments."""
    parser.add_argument(
        "--workload",
        "-w",
        action="append",
        dest="workloads",
        metavar="NAME",
        help="workload name or unique prefix (repeatable; default SchedulingBasic/500); --list shows them",
    )
    parser.add_argument("--list", action="store_true", help="list the workloads and exit")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply pod counts (e.g. 0.1; Preemption's nodes too, which its pods fill)",
    )
    parser.add_argument("--node-scale", type=float, default=1.0, help="multiply node counts")
    parser.add_argument(
        "--mode",
        choices=("inprocess", "e2e", "both"),
        default="inprocess",
        help="inprocess: simulated back-end; e2e: real kube-apiserver, policyd vs kube-scheduler "
        "(needs KUBEBUILDER_ASSETS: kube-apiserver, etcd, kube-scheduler)",
    )
    parser.add_argument(
        "--qps", type=float, default=None, help="e2e: client QPS of both schedulers (default 50)"
    )
    parser.add_argument(
        "--burst", type=int, default=None, help="e2e: client burst of both schedulers (default 100)"
    )
    parser.add_argument(
        "--schedulers",
        default=None,
        metavar="LIST",
        help="e2e: comma-separated schedulers, run in order (default kube-scheduler,policyd)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="e2e: run every workload with every scheduler N times, the order alternating (default 1); "
        "the table shows medians",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="e2e: record each policyd/kube-scheduler process with py-spy (all threads) into DIR, one "
        "raw collapsed-stack file per run",
    )
    parser.add_argument(
        "--policies", nargs="+", default=None, help="policy files (default: the shipped default.policy)"
    )
    parser.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help=f"result directory (default ./{DEFAULT_OUT}, in the working directory)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    if args.list:
        for name, wl in WORKLOADS.items():
            print(f"{name}\t{wl.nodes} nodes, {wl.measured_pods} measured pods\t{wl.description}")
        return 0
    problem = usage_problem(args)
    if problem:
        print(f"policyd bench: {problem}", file=sys.stderr)
        return 2
    try:
        chosen = [workload(name) for name in args.workloads or DEFAULT_WORKLOADS]
    except KeyError as exc:
        print(f"policyd bench: {exc.args[0]}", file=sys.stderr)
        return 2
    assets = None
    if args.mode in ("e2e", "both"):
        try:
            assets = e2e.find_e2e_assets(_schedulers(args))
        except MissingAssetsError as exc:
            print(f"policyd bench: --mode {args.mode} {exc}", file=sys.stderr)
            return 2
    progress = None if args.quiet else (lambda text: print(text, file=sys.stderr, flush=True))
    if args.mode in ("inprocess", "both"):
        _run_inprocess(args, chosen, progress)
    if assets is not None:
        return _run_e2e(args, assets, chosen, progress)
    return 0


def usage_problem(args: argparse.Namespace) -> str:
    """What is wrong with the arguments ("" when nothing is)."""
    if args.scale <= 0 or args.node_scale <= 0:
        return "--scale and --node-scale must be positive"
    e2e_only = [
        flag
        for flag, value in (
            ("--qps", args.qps),
            ("--burst", args.burst),
            ("--schedulers", args.schedulers),
            ("--rounds", args.rounds),
            ("--profile", args.profile),
        )
        if value is not None
    ]
    if args.mode == "inprocess" and e2e_only:
        return f"{', '.join(e2e_only)}: only with --mode e2e or both"
    if args.qps is not None and args.qps <= 0:
        return "--qps must be positive"
    if args.burst is not None and args.burst < 1:
        return "--burst must be at least 1"
    if args.rounds is not None and args.rounds < 1:
        return "--rounds must be at least 1"
    if args.schedulers is not None:
        try:
            e2e.parse_schedulers(args.schedulers)
        except ValueError as exc:
            return f"--schedulers: {exc}"
    return ""


def _schedulers(args: argparse.Namespace) -> tuple[str, ...]:
    return e2e.parse_schedulers(args.schedulers) if args.schedulers else e2e.SCHEDULERS


def _run_inprocess(
    args: argparse.Namespace, chosen: list[Workload], progress: Callable[[str], None] | None
) -> None:
    results = []
    print(inprocess.MARKDOWN_HEADER, end="")
    for wl in chosen:
        result = inprocess.run_workload(
            wl, scale=args.scale, node_scale=args.node_scale, policy_paths=args.policies, progress=progress
        )
        print(inprocess.markdown_row(result), end="", flush=True)
        results.append(result)
    json_path, md_path = inprocess.write_results(results, args.out)
    print(f"wrote {json_path} and {md_path}")


def _run_e2e(
    args: argparse.Namespace, assets: Path, chosen: list[Workload], progress: Callable[[str], None] | None
) -> int:
    def report(result: e2e_report.E2EResult) -> None:
        print(e2e_report.run_line(result), flush=True)

    try:
        results = e2e.run_workloads(
            chosen,
            assets=assets,
            schedulers=_schedulers(args),
            scale=args.scale,
            node_scale=args.node_scale,
            qps=args.qps if args.qps is not None else e2e.DEFAULT_QPS,
            burst=args.burst if args.burst is not None else e2e.DEFAULT_BURST,
            policies=args.policies,
            progress=progress,
            on_result=report,
            rounds=args.rounds or 1,
            profile_dir=Path(args.profile) if args.profile else None,
        )
    except KeyboardInterrupt:
        print("policyd bench: interrupted (every process stopped)", file=sys.stderr)
        return 130
    except (e2e.BenchError, ControlPlaneError, OSError) as exc:
        print(f"policyd bench: e2e failed: {exc}", file=sys.stderr)
        return 1
    print()
    print(e2e_report.markdown_table(results), end="")
    json_path, md_path = e2e_report.write_results(results, args.out)
    print(f"wrote {json_path} and {md_path}")
    return 0
