"""`policyd bench`: run scheduler_perf-like workloads and write a JSON result file and a markdown table.

`--mode inprocess` drives the real Scheduler on the simulated back-end (the algorithm's throughput);
`--mode e2e` (against a real kube-apiserver, side by side with kube-scheduler) is not available yet.
The workloads and the runner live in the repository's `benchmarks/` directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
DEFAULT_WORKLOADS = ("SchedulingBasic/500",)


def _benchmarks() -> tuple[ModuleType, ModuleType]:
    """Import `benchmarks.workloads` and `benchmarks.inprocess` (from the source tree)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import benchmarks.inprocess as inprocess
    import benchmarks.workloads as workloads

    return workloads, inprocess


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
    parser.add_argument("--scale", type=float, default=1.0, help="multiply pod counts (e.g. 0.1)")
    parser.add_argument("--node-scale", type=float, default=1.0, help="multiply node counts")
    parser.add_argument("--mode", choices=("inprocess", "e2e"), default="inprocess")
    parser.add_argument("--policies", nargs="+", default=None, help="policy files (default.policy)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="result directory")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    workloads, inprocess = _benchmarks()
    if args.list:
        for name, wl in workloads.WORKLOADS.items():
            print(f"{name}\t{wl.nodes} nodes, {wl.measured_pods} measured pods\t{wl.description}")
        return 0
    if args.mode == "e2e":
        print("policyd bench: --mode e2e is not available yet (needs the API back-end)", file=sys.stderr)
        return 2
    if args.scale <= 0 or args.node_scale <= 0:
        print("policyd bench: --scale and --node-scale must be positive", file=sys.stderr)
        return 2
    try:
        chosen = [workloads.workload(name) for name in args.workloads or DEFAULT_WORKLOADS]
    except KeyError as exc:
        print(f"policyd bench: {exc.args[0]}", file=sys.stderr)
        return 2
    progress = None if args.quiet else (lambda text: print(text, file=sys.stderr))
    policies = args.policies or [inprocess.DEFAULT_POLICY]
    results = []
    print(inprocess.MARKDOWN_HEADER, end="")
    for wl in chosen:
        result = inprocess.run_workload(
            wl, scale=args.scale, node_scale=args.node_scale, policy_paths=policies, progress=progress
        )
        print(inprocess.markdown_row(result), end="", flush=True)
        results.append(result)
    json_path, md_path = inprocess.write_results(results, args.out)
    print(f"wrote {json_path} and {md_path}")
    return 0
