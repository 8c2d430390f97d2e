"""Run a workload through the real Scheduler on the in-memory simulated back-end (no API server).

Measures the algorithm's own throughput: pods/s over the measured pods (from the moment the measured
pods are handed to the scheduler until every one is bound or parked), p50/p99 of the wall time of
each scheduling attempt of a measured op, and the peak RSS while the workload ran (`policyd bench`).
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from policyd import shipped
from policyd.bench.results import machine, percentile, write_result_files
from policyd.bench.workloads import (
    Barrier,
    CreateNodes,
    CreatePods,
    Workload,
    instantiate_node,
    instantiate_pod,
)


@dataclass
class InProcessResult:
    """One in-process workload run."""

    workload: str
    mode: str
    scale: float
    node_scale: float
    nodes: int
    measured_pods: int
    scheduled: int
    seconds: float
    pods_per_second: float
    attempt_p50_ms: float
    attempt_p99_ms: float
    attempts: int
    peak_rss_mib: float
    rss_mib: float
    setup_seconds: float
    machine: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (one entry of the result file)."""
        return asdict(self)


def peak_rss_mib() -> float:
    """Peak resident set size of this process since `reset_peak_rss` (MiB): Linux's VmHWM, or the
    whole run's `ru_maxrss` where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / (1024 * 1024)


def reset_peak_rss() -> bool:
    """Start a new peak at the current RSS (Linux: "5" to /proc/self/clear_refs resets VmHWM), so a
    workload run after another in one process reports its own peak; False where that is not possible."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def current_rss_mib() -> float:
    """Current resident set size (MiB; 0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", encoding="utf-8") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
    except (OSError, ValueError):
        return 0.0


def _drain(scheduler: Any, latencies: list[float] | None) -> None:
    """Schedule until no pod is left to try and every bind result is applied.

    The clock is the simulator's fake clock: when only pods in backoff remain (a preemptor waiting for
    its victims, a pod whose bind was refused), it jumps to the next backoff expiry, as `policyd
    simulate` does; pods parked as unschedulable stay parked.
    """
    clock = time.perf_counter
    while True:
        t0 = clock()
        if scheduler.schedule_one():
            if latencies is not None:
                latencies.append(clock() - t0)
            continue
        scheduler.binder.wait_idle()
        if scheduler.apply_events():
            continue
        expiry = scheduler.queue.next_backoff_expiry()
        if expiry is not None:
            scheduler.clock.advance_to(expiry)
            scheduler.queue.flush_backoff()
            continue
        return


def run_workload(
    wl: Workload,
    *,
    scale: float = 1.0,
    node_scale: float = 1.0,
    policy_paths: Sequence[str] | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> InProcessResult:
    """Run `wl` (scaled) in-process and measure the measured ops (default policy: the shipped one)."""
    from policyd.backends.simulated import SimulatedCluster
    from policyd.compiler.profiles import compile_paths
    from policyd.scheduler.clock import FakeClock
    from policyd.scheduler.scheduler import Scheduler, SchedulerOptions

    wl = wl.scaled(scale, node_scale)
    reset_peak_rss()  # the peak of this workload, not of one run before it in this process
    started = time.perf_counter()
    policies = compile_paths(list(policy_paths or [str(shipped.default_policy())]), generation=1)
    cluster = SimulatedCluster()
    scheduler = Scheduler(
        policies,
        cluster,
        clock=FakeClock(),
        options=SchedulerOptions(adopt_unknown_schedulers=True, seed=seed),
    )
    runner = scheduler.algorithm
    cluster.start(scheduler)
    latencies: list[float] = []
    measured_seconds = 0.0
    measured_binds = 0
    measuring: float | None = None
    binds_before = 0
    node_index = 0
    for op_number, op in enumerate(wl.ops):
        if isinstance(op, CreateNodes):
            for _ in range(op.count):
                cluster.add_node(instantiate_node(op, node_index))
                node_index += 1
            scheduler.apply_events()
        elif isinstance(op, CreatePods):
            objects = [instantiate_pod(op, i, f"op{op_number}") for i in range(op.count)]
            if op.collect_metrics and measuring is None:
                _drain(scheduler, None)
                measuring = time.perf_counter()
                binds_before = cluster.bind_count
            for obj in objects:
                cluster.add_pod(obj)
        elif isinstance(op, Barrier):
            _drain(scheduler, latencies if measuring is not None else None)
            if measuring is not None:
                measured_seconds += time.perf_counter() - measuring
                measured_binds += cluster.bind_count - binds_before
                measuring = None
        if progress is not None:
            progress(f"{wl.name}: op {op_number + 1}/{len(wl.ops)} {type(op).__name__} done")
    if measuring is not None:
        _drain(scheduler, latencies)
        measured_seconds += time.perf_counter() - measuring
        measured_binds += cluster.bind_count - binds_before
    scheduler.binder.shutdown()
    total = time.perf_counter() - started
    measured = wl.measured_pods
    return InProcessResult(
        workload=wl.name,
        mode="inprocess",
        scale=scale,
        node_scale=node_scale,
        nodes=wl.nodes,
        measured_pods=measured,
        scheduled=measured_binds,
        seconds=round(measured_seconds, 3),
        pods_per_second=round(measured / measured_seconds, 1) if measured_seconds > 0 else 0.0,
        attempt_p50_ms=round(percentile(latencies, 0.5) * 1000, 3),
        attempt_p99_ms=round(percentile(latencies, 0.99) * 1000, 3),
        attempts=len(latencies),
        peak_rss_mib=round(peak_rss_mib(), 1),
        rss_mib=round(current_rss_mib(), 1),
        setup_seconds=round(total - measured_seconds, 3),
        machine=machine(),
        extra={
            "per_node_evaluations": runner.groups.evaluations if runner.groups else None,
            "vectorised_rows": runner.bulk_rows,
            "column_rows_rewritten": runner.columns.rewritten,
        },
    )


MARKDOWN_HEADER = (
    "| workload | mode | scale | nodes | measured pods | scheduled | pods/s | p50 ms | p99 ms | peak RSS MiB |\n"
    "|---|---|---|---|---|---|---|---|---|---|\n"
)


def markdown_row(r: InProcessResult) -> str:
    """One markdown table row of a result."""
    return (
        f"| {r.workload} | {r.mode} | {r.scale:g} | {r.nodes} | {r.measured_pods} | {r.scheduled} | "
        f"{r.pods_per_second:.1f} | {r.attempt_p50_ms:.2f} | {r.attempt_p99_ms:.2f} | {r.peak_rss_mib:.0f} |\n"
    )


def write_results(results: Sequence[InProcessResult], out_dir: str) -> tuple[Path, Path]:
    """Write `<out>/bench-<time>.json` and `.md`; returns both paths."""
    document = {"machine": machine(), "results": [r.to_json() for r in results]}
    return write_result_files(
        out_dir, "bench", document, MARKDOWN_HEADER + "".join(markdown_row(r) for r in results)
    )
