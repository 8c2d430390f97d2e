"""`policyd bench --mode e2e` on a tiny workload: both schedulers bind every pod, result files are written."""

from __future__ import annotations

import json
import os
from pathlib import Path

from policyd.bench import e2e, e2e_report
from policyd.bench.workloads import workload


def test_tiny_workload_with_both_schedulers(tmp_path: Path, envtest_assets: Path) -> None:
    progress: list[str] = []
    before = sorted(_children(os.getpid()))  # e.g. the session's control plane, if one runs
    results = e2e.run_workloads(
        [workload("SchedulingBasic/500")],
        assets=envtest_assets,
        scale=0.003,  # 3 setup pods, 30 measured pods
        node_scale=0.04,  # 20 nodes
        qps=50.0,
        burst=100,
        progress=progress.append,
    )
    assert [r.scheduler for r in results] == [e2e.KUBE_SCHEDULER, e2e.POLICYD]
    for r in results:
        assert (r.nodes, r.measured_pods, r.scheduled) == (20, 30, 30), progress
        assert r.pods_per_second > 0
        assert r.attempts >= 30  # the attempt histogram moved during the measured phase
        assert 0 < r.attempt_p50_ms <= r.attempt_p99_ms
        assert r.peak_rss_mib > 10
        assert (r.qps, r.burst) == (50.0, 100)
        # read on the API server's own counters: a number, never more than an Event per measured pod
        # and its updates would explain (30 Scheduled Events at most, each created once)
        assert 0 <= r.events_by_last_bind <= 30, r.events_by_last_bind
        assert (r.deleted_by_last_bind, r.deleted_after_first_bind) == (0, 0)  # nothing preempted
        # read from /proc for the three processes: binding 30 pods takes the scheduler and the API
        # server some CPU time (counted in 10 ms ticks), etcd's share may round to nothing
        assert r.scheduler_cpu_seconds > 0 and r.apiserver_cpu_seconds > 0, r
        assert r.etcd_cpu_seconds >= 0, r
    assert results[0].attempt_metric == "scheduler_e2e_scheduling_duration_seconds"
    assert results[1].attempt_metric == "scheduler_scheduling_attempt_duration_seconds"
    json_path, md_path = e2e_report.write_results(results, str(tmp_path))
    doc = json.loads(json_path.read_text())
    assert set(doc["ratios"]) == {"SchedulingBasic/500Nodes"}
    assert "| SchedulingBasic/500Nodes | policyd |" in md_path.read_text()
    # every process the run started (etcd, kube-apiserver, schedulers) is gone
    assert sorted(_children(os.getpid())) == before


def test_tiny_preemption_waits_for_every_preemptor_to_be_bound(envtest_assets: Path) -> None:
    progress: list[str] = []
    results = e2e.run_workloads(
        [workload("Preemption/500")],
        assets=envtest_assets,
        # 16 low-priority pods (900m) fill 4 nodes of 4 cpu (the nodes shrink with the pods), then 4
        # preemptors (3000m)
        scale=0.008,
        qps=1000.0,
        burst=1000,
        progress=progress.append,
    )
    for r in results:
        # each preemptor is parked as unschedulable when it preempts; the Barrier waits for its bind
        assert (r.nodes, r.measured_pods, r.scheduled) == (4, 4, 4), progress
        assert r.creation == e2e.CREATION
        assert r.first_bind_seconds > 0 and r.pods_per_second_from_release > 0
        # each preemptor evicts 3 of its node's 4 pods (4 x 900m + 3000m > 4 cpu); a preemptor is bound
        # only once its victims are gone, so all 12 were seen deleted by the last bind, and those of the
        # first preemptor bound before its bind
        assert r.deleted_by_last_bind == 12, (r.deleted_by_last_bind, progress)
        assert 0 <= r.deleted_after_first_bind <= 9, r.deleted_after_first_bind


def _children(pid: int) -> list[str]:
    """Command names of the live (not zombie) child processes of `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            name = Path(f"/proc/{entry}/comm").read_text().strip()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(name)
    return out
