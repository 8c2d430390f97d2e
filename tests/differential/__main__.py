"""`python -m tests.differential --scenarios 300 --seed 1`: policyd against kube-scheduler 1.20.2.

Needs KUBEBUILDER_ASSETS (kube-apiserver, etcd, kube-scheduler; `bash scripts/envtest.sh`). Prints
every disagreement and the agreement table by feature, writes the table to --table, and keeps each
scenario with a disagreement as a regression case in --record (default: tests/differential/regressions).
`--replay FILE_OR_DIR ...` runs scenario files instead of generated ones.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import platform
import sys
import tempfile
import time
from pathlib import Path

from policyd.envtest import find_assets
from tests.differential.generator import generate
from tests.differential.harness import REGRESSIONS, VARIANT_POLICIES, Harness, run_all
from tests.differential.kube_side import KubeSide
from tests.differential.policyd_side import PolicydSide
from tests.differential.report import summary
from tests.differential.scenario import Scenario, load_scenario


def scenario_files(paths: list[str]) -> list[Path]:
    """The `.yaml` files named, directories expanded (sorted)."""
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    return files


def main(argv: list[str] | None = None) -> int:
    """Run the harness; exit 1 when any pod disagrees."""
    parser = argparse.ArgumentParser(prog="python -m tests.differential", description=__doc__)
    parser.add_argument("--scenarios", type=int, default=20, help="how many generated scenarios")
    parser.add_argument("--seed", type=int, default=1, help="the series of generated scenarios")
    parser.add_argument("--first", type=int, default=0, help="index of the first generated scenario")
    parser.add_argument("--large", action="store_true", help="8-12 nodes and 10-40 pods per scenario")
    parser.add_argument(
        "--objects",
        action="store_true",
        help="with Services, ReplicaSets, StatefulSets, StorageClasses, PVs, claims, CSINodes, inline disks",
    )
    parser.add_argument("--replay", nargs="+", default=None, help="scenario files or directories to run")
    parser.add_argument("--policies", nargs="+", default=list(VARIANT_POLICIES))
    parser.add_argument("--record", default=str(REGRESSIONS), help="where disagreeing scenarios go")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--table", default="bench-results/differential/agreement.md")
    parser.add_argument(
        "--details", default="bench-results/differential/details", help="both sides of each disagreement"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    if args.replay:
        scenarios: list[Scenario] = [load_scenario(f) for f in scenario_files(args.replay)]
        record = None
    else:
        scenarios = [
            generate(args.seed, i, args.large, args.objects)
            for i in range(args.first, args.first + args.scenarios)
        ]
        record = None if args.no_record else Path(args.record)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="policyd-differential-") as tmp:
        kube = KubeSide(find_assets(("kube-apiserver", "etcd", "kube-scheduler")), Path(tmp))
        harness = Harness(kube, PolicydSide.load(args.policies))
        try:
            kube.start()
            results = run_all(harness, scenarios, record, print, Path(args.details))
        finally:
            kube.stop()
    comparisons = [c for r in results for c in r.comparisons]
    what = (
        "replayed " + ", ".join(args.replay)
        if args.replay
        else f"seed {args.seed}, first {args.first}"
        + (", large" if args.large else "")
        + (", objects" if args.objects else "")
    )
    header = (
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} "
        f"{platform.node()}, {len(results)} scenarios ({what}), {summary(comparisons)}, "
        f"{time.monotonic() - started:.0f}s"
    )
    table = harness.table.render()
    print()
    print(header)
    print(table)
    out = Path(args.table)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + "\n\n" + table + "\n", encoding="utf-8")
    return 1 if any(c.unexplained for c in comparisons) else 0


if __name__ == "__main__":
    sys.exit(main())
