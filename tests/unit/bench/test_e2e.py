"""The end-to-end benchmark's pure parts: histogram quantiles, result table, configs, arguments."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
import yaml

from policyd.bench import e2e
from policyd.bench import e2e_report as report
from policyd.bench import e2e_schedulers as procs
from policyd.bench.workloads import WORKLOADS, CreatePods, pod_template
from policyd.commands import bench
from policyd.service import config as configuration

METRICS = """\
# HELP scheduler_e2e_scheduling_duration_seconds [ALPHA] E2e scheduling latency in seconds
# TYPE scheduler_e2e_scheduling_duration_seconds histogram
scheduler_e2e_scheduling_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="0.001"} 0
scheduler_e2e_scheduling_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="0.002"} 10
scheduler_e2e_scheduling_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="0.004"} 90
scheduler_e2e_scheduling_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="+Inf"} 100
scheduler_e2e_scheduling_duration_seconds_sum{profile="default-scheduler",result="scheduled"} 0.3
scheduler_e2e_scheduling_duration_seconds_count{profile="default-scheduler",result="scheduled"} 100
scheduler_e2e_scheduling_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="0.001"} 0
scheduler_e2e_scheduling_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="0.002"} 0
scheduler_e2e_scheduling_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="0.004"} 10
scheduler_e2e_scheduling_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="+Inf"} 10
scheduler_e2e_scheduling_duration_seconds_sum{profile="default-scheduler",result="unschedulable"} 0.03
scheduler_e2e_scheduling_duration_seconds_count{profile="default-scheduler",result="unschedulable"} 10
scheduler_scheduling_algorithm_duration_seconds_bucket{le="0.001"} 5
scheduler_scheduling_algorithm_duration_seconds_bucket{le="+Inf"} 5
scheduler_scheduling_algorithm_duration_seconds_sum 0.001
scheduler_scheduling_algorithm_duration_seconds_count 5
"""


def test_parse_histogram_sums_label_sets_and_filters_labels() -> None:
    name = "scheduler_e2e_scheduling_duration_seconds"
    hist = report.parse_histogram(METRICS, name)
    assert hist is not None
    assert hist.buckets == ((0.001, 0.0), (0.002, 10.0), (0.004, 100.0), (math.inf, 110.0))
    assert hist.count == 110 and hist.total == pytest.approx(0.33)
    only = report.parse_histogram(METRICS, name, {"result": "scheduled"})
    assert only is not None and only.count == 100
    assert report.parse_histogram(METRICS, "scheduler_missing_seconds") is None
    # the algorithm histogram is not mistaken for a prefix match of another name
    algo = report.parse_histogram(METRICS, "scheduler_scheduling_algorithm_duration_seconds")
    assert algo is not None and algo.count == 5


def test_quantile_interpolates_inside_the_bucket_like_promql() -> None:
    hist = report.Histogram(((0.001, 0.0), (0.002, 10.0), (0.004, 90.0), (math.inf, 100.0)), 100, 0.3)
    # rank 50 falls in (0.002, 0.004]: 0.002 + 0.002 * (50 - 10) / 80
    assert hist.quantile(0.5) == pytest.approx(0.003)
    assert hist.quantile(0.1) == pytest.approx(0.002)
    # rank 99 is beyond the last finite bound: that bound is reported
    assert hist.quantile(0.99) == pytest.approx(0.004)
    assert math.isnan(report.Histogram().quantile(0.5))
    assert math.isnan(report.Histogram(((math.inf, 0.0),), 0, 0).quantile(0.5))


def test_first_bucket_interpolates_from_zero() -> None:
    hist = report.Histogram(((0.01, 100.0), (math.inf, 100.0)), 100, 0.5)
    assert hist.quantile(0.5) == pytest.approx(0.005)


def test_minus_gives_the_observations_of_the_measured_phase() -> None:
    before = report.Histogram(((0.001, 5.0), (0.002, 10.0), (math.inf, 10.0)), 10, 0.01)
    after = report.Histogram(((0.001, 5.0), (0.002, 10.0), (math.inf, 110.0)), 110, 5.01)
    delta = after.minus(before)
    assert delta.buckets == ((0.001, 0.0), (0.002, 0.0), (math.inf, 100.0))
    assert delta.count == 100 and delta.total == pytest.approx(5.0)
    assert delta.quantile(0.5) == pytest.approx(0.002)


def test_first_histogram_prefers_the_first_present_name() -> None:
    text = METRICS.replace("scheduler_e2e_scheduling", "scheduler_scheduling_attempt")
    name, hist = report.first_histogram(text, e2e.ATTEMPT_METRICS[e2e.KUBE_SCHEDULER])
    assert name == "scheduler_scheduling_attempt_duration_seconds" and hist.count == 110
    name, hist = report.first_histogram("", e2e.ATTEMPT_METRICS[e2e.POLICYD])
    assert name == "scheduler_scheduling_attempt_duration_seconds" and hist.count == 0


def result(
    workload: str, scheduler: str, pods_per_second: float, round_number: int = 1, p90: float = 20.0
) -> report.E2EResult:
    return report.E2EResult(
        workload=workload,
        scheduler=scheduler,
        scale=0.1,
        node_scale=1.0,
        nodes=5000,
        measured_pods=1000,
        scheduled=1000,
        seconds=1000 / pods_per_second,
        pods_per_second=pods_per_second,
        attempt_p50_ms=12.345,
        attempt_p90_ms=p90,
        attempt_p99_ms=math.nan,
        algorithm_p50_ms=1.0,
        algorithm_p99_ms=2.0,
        peak_rss_mib=123.4,
        qps=50.0,
        burst=100,
        create_pods_per_second=60.0,
        round=round_number,
        pods_per_second_from_release=pods_per_second / 2,
        first_bind_seconds=0.5,
        creation=e2e.CREATION,
    )


def test_median_of_odd_and_even_counts_leaves_nan_out() -> None:
    assert report.median([3.0, 1.0, 2.0]) == 2.0
    assert report.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert report.median([math.nan, 5.0, 1.0]) == 3.0
    assert math.isnan(report.median([])) and math.isnan(report.median([math.nan]))


def test_rounds_alternate_the_schedulers_order() -> None:
    a, b = WORKLOADS["SchedulingBasic/500Nodes"], WORKLOADS["SchedulingNodeAffinity/500Nodes"]
    schedulers = (e2e.KUBE_SCHEDULER, e2e.POLICYD)
    first = [(w.name, s) for w, s in e2e.round_order([a, b], schedulers, 1)]
    second = [(w.name, s) for w, s in e2e.round_order([a, b], schedulers, 2)]
    third = [(w.name, s) for w, s in e2e.round_order([a, b], schedulers, 3)]
    assert first == [
        (a.name, e2e.KUBE_SCHEDULER),
        (a.name, e2e.POLICYD),
        (b.name, e2e.KUBE_SCHEDULER),
        (b.name, e2e.POLICYD),
    ]
    assert second == [
        (a.name, e2e.POLICYD),
        (a.name, e2e.KUBE_SCHEDULER),
        (b.name, e2e.POLICYD),
        (b.name, e2e.KUBE_SCHEDULER),
    ]
    assert third == first
    assert [s for _, s in e2e.round_order([a], (e2e.POLICYD,), 2)] == [e2e.POLICYD]


def test_medians_over_rounds_and_ratio_of_medians() -> None:
    wl = "SchedulingBasic/500Nodes"
    results = [
        result(wl, e2e.KUBE_SCHEDULER, 100.0, 1, p90=10.0),
        result(wl, e2e.POLICYD, 150.0, 1, p90=30.0),
        result(wl, e2e.POLICYD, 90.0, 2, p90=20.0),
        result(wl, e2e.KUBE_SCHEDULER, 300.0, 2, p90=40.0),
        result(wl, e2e.KUBE_SCHEDULER, 120.0, 3, p90=50.0),
        result(wl, e2e.POLICYD, 180.0, 3, p90=10.0),
    ]
    summary = report.medians(results)
    assert [(m.scheduler, m.rounds) for m in summary] == [(e2e.KUBE_SCHEDULER, 3), (e2e.POLICYD, 3)]
    ks, pd = summary
    assert (ks.pods_per_second, pd.pods_per_second) == (120.0, 150.0)
    assert (ks.attempt_p90_ms, pd.attempt_p90_ms) == (40.0, 20.0)
    assert math.isnan(ks.attempt_p99_ms)  # no round had a figure
    assert report.ratios(summary) == {wl: 1.25}
    # each round's own ratio: 1.5, 0.3, 1.5; their median, not the ratio of the medians
    assert report.paired_ratios(results) == {wl: 1.5}


def test_paired_ratios_take_only_rounds_with_both_schedulers() -> None:
    wl = "TopologySpreading/500Nodes"
    results = [
        result(wl, e2e.KUBE_SCHEDULER, 500.0, 1),
        result(wl, e2e.POLICYD, 510.0, 1),
        result(wl, e2e.POLICYD, 520.0, 2),
        result(wl, e2e.KUBE_SCHEDULER, 500.0, 2),
        result(wl, e2e.KUBE_SCHEDULER, 700.0, 3),
        result(wl, e2e.POLICYD, 470.0, 3),
        result(wl, e2e.POLICYD, 900.0, 4),  # kube-scheduler's run of round 4 is missing
        result("Other", e2e.POLICYD, 10.0, 1),
    ]
    assert report.paired_ratios(results) == {wl: 1.02}
    assert report.ratios(report.medians(results)) == {wl: 1.03}


def test_ratios_and_table() -> None:
    results = [
        result("SchedulingBasic/5000Nodes", e2e.KUBE_SCHEDULER, 50.0),
        result("SchedulingBasic/5000Nodes", e2e.POLICYD, 55.0),
        result("SchedulingNodeAffinity/5000Nodes", e2e.POLICYD, 20.0),  # no kube-scheduler run
    ]
    results[1].events_by_last_bind = 640.0  # the others were not read (nan)
    results[1].deleted_by_last_bind = 1500.0
    results[1].deleted_after_first_bind = 912.0
    results[1].scheduler_cpu_seconds = 1.234
    results[1].apiserver_cpu_seconds = 5.5
    results[1].etcd_cpu_seconds = 2.0
    assert report.ratios(report.medians(results)) == {"SchedulingBasic/5000Nodes": 1.1}
    lines = report.markdown_table(results).splitlines()
    assert lines[0].startswith("Medians over rounds; each scheduler's client: QPS 50, burst 100; ")
    assert "stopped (SIGSTOP) and released at once (SIGCONT)" in lines[0]
    table = lines[2:]
    assert table[0].startswith("| workload | scheduler |") and "ratio" in table[0] and "p90" in table[0]
    assert "pods/s from release" in table[0]
    assert table[0].count("|") == table[1].count("|") == table[2].count("|")
    assert len(table) == 2 + 3
    assert table[2] == (
        "| SchedulingBasic/5000Nodes | kube-scheduler | 5000 | 1000 | 1 | 50.0 |  |  | 25.0 | 0.50 | 12.3 "
        "| 20.0 | - | 1.0 | 123 | 60.0 | - | - | - | - | - | - |"
    )
    assert "| 55.0 | 1.10x | 1.10x | 27.5 |" in table[3]
    assert table[3].endswith("| 60.0 | 640 | 1500 | 912 | 1.23 | 5.50 | 2.00 |")
    assert "| pods deleted by last bind | of them after first bind |" in table[0]
    assert table[0].endswith("| scheduler CPU s | kube-apiserver CPU s | etcd CPU s |")
    assert "Events by last bind" in table[0] and "paired ratio" in table[0]
    assert "| 20.0 |  |  | 10.0 |" in table[4]


def test_budgets_say_when_runs_differ() -> None:
    same = [result("W", e2e.KUBE_SCHEDULER, 1.0), result("W", e2e.POLICYD, 1.0)]
    assert report.budgets(same) == "each scheduler's client: QPS 50, burst 100"
    other = report.E2EResult(**{**same[1].to_json(), "qps": 1000.0, "burst": 1000})
    assert report.budgets([same[0], other]).startswith("client budgets differ between runs: ")


def test_run_line_names_round_and_figures() -> None:
    line = report.run_line(result("W", e2e.POLICYD, 42.0, 2))
    assert line.startswith(
        "round 2 W [policyd]: 1000/1000 bound, 42.0 pods/s (21.0 from release, first bind after 0.50 s), "
        "attempt p50/p90/p99 12.3/20.0/- ms"
    )


def test_write_results(tmp_path: Path) -> None:
    results = [
        result("SchedulingBasic/5000Nodes", e2e.KUBE_SCHEDULER, 50.0, 1),
        result("SchedulingBasic/5000Nodes", e2e.POLICYD, 40.0, 1),
        result("SchedulingBasic/5000Nodes", e2e.POLICYD, 60.0, 2),
        result("SchedulingBasic/5000Nodes", e2e.KUBE_SCHEDULER, 50.0, 2),
    ]
    json_path, md_path = report.write_results(results, str(tmp_path))
    assert json_path.name.startswith("e2e-") and json_path.suffix == ".json"
    doc = json.loads(json_path.read_text())
    assert doc["ratios"] == {"SchedulingBasic/5000Nodes": 1.0}
    assert doc["ratios_from_release"] == {"SchedulingBasic/5000Nodes": 1.0}
    assert "SIGSTOP" in doc["creation"]
    assert [(r["scheduler"], r["round"]) for r in doc["results"]] == [
        (e2e.KUBE_SCHEDULER, 1),
        (e2e.POLICYD, 1),
        (e2e.POLICYD, 2),
        (e2e.KUBE_SCHEDULER, 2),
    ]
    assert [m["pods_per_second"] for m in doc["medians"]] == [50.0, 50.0]
    assert doc["results"][0]["attempt_p99_ms"] is None  # nan is not JSON
    assert doc["budgets"] == "each scheduler's client: QPS 50, burst 100"
    assert {"cpu", "cores", "python"} <= set(doc["machine"])
    assert "1.00x" in md_path.read_text()


def test_profiler_command_records_all_threads_in_the_chosen_format(tmp_path: Path) -> None:
    raw = procs.Profiler(1234, tmp_path / "run.txt").command("py-spy")
    assert raw[:4] == ["py-spy", "record", "--pid", "1234"]
    assert "--threads" in raw and "--idle" not in raw
    assert raw[raw.index("--format") + 1] == "raw"
    assert raw[raw.index("--output") + 1] == str(tmp_path / "run.txt")
    svg = procs.Profiler(1234, tmp_path / "run.svg").command("py-spy")
    assert svg[svg.index("--format") + 1] == "flamegraph"


def test_500_node_workloads_mirror_the_5000_node_ones() -> None:
    for family in (
        "SchedulingBasic",
        "SchedulingNodeAffinity",
        "TopologySpreading",
        "SchedulingPodAntiAffinity",
        "Preemption",
        "Unschedulable",
    ):
        small, large = WORKLOADS[f"{family}/500Nodes"], WORKLOADS[f"{family}/5000Nodes"]
        assert (small.nodes, large.nodes) == (500, 5000)
        assert [type(op) for op in small.ops] == [type(op) for op in large.ops]
        templates = [op.template for op in small.ops if isinstance(op, CreatePods)]
        assert templates == [op.template for op in large.ops if isinstance(op, CreatePods)]
    # hostname anti-affinity: every pod needs its own node
    anti = WORKLOADS["SchedulingPodAntiAffinity/500Nodes"]
    assert sum(op.count for op in anti.ops if isinstance(op, CreatePods)) <= anti.nodes


def test_scheduler_configs_carry_equal_qps_and_burst() -> None:
    ks = yaml.safe_load(procs.kube_scheduler_config("/tmp/kc", 50.0, 100, 12345))
    assert ks["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"
    assert ks["clientConnection"] == {"kubeconfig": "/tmp/kc", "qps": 50, "burst": 100}
    assert ks["leaderElection"] == {"leaderElect": False}
    assert ks["metricsBindAddress"] == "127.0.0.1:12345"
    args = procs.kube_scheduler_command("/bin/kube-scheduler", "/tmp/c.yaml", 12345)
    assert "--secure-port=0" in args and "--port=12345" in args
    doc = procs.policyd_config("/tmp/kc", 50.0, 100, 12345, ["/p/default.policy"])
    cfg = configuration.from_dict(doc, "<bench>")  # valid against policyd/schemas/config.schema.json
    assert (cfg.qps, cfg.burst, cfg.port) == (50.0, 100, 12345)
    assert not cfg.leader_election.leader_elect
    assert cfg.scheduler_names == (e2e.POLICYD,)


def test_pod_object_for_the_api() -> None:
    op = CreatePods(3, pod_template("3000m", priority=10), namespace="sched-test")
    obj = e2e.pod_object(op, 2, "op3", procs.pod_scheduler_name(e2e.POLICYD))
    assert obj["metadata"]["name"] == "pod-op3-2" and obj["metadata"]["namespace"] == "sched-test"
    assert "uid" not in obj["metadata"] and "creationTimestamp" not in obj["metadata"]
    assert obj["spec"]["schedulerName"] == "policyd"
    assert "priority" not in obj["spec"] and obj["spec"]["priorityClassName"] == "bench-priority-10"
    assert procs.pod_scheduler_name(e2e.KUBE_SCHEDULER) == "default-scheduler"
    assert e2e.priority_class_name(-5) == "bench-priority-minus-5"


def test_node_objects_split_status() -> None:
    op = WORKLOADS["SchedulingNodeAffinity/5000Nodes"].ops[0]
    pairs = e2e.node_objects(op, 7)  # type: ignore[arg-type]
    obj, status = pairs[0]
    assert obj["metadata"]["name"] == "scheduler-perf-7" and "status" not in obj
    assert obj["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone1"
    assert status["conditions"] == [{"type": "Ready", "status": "True"}]
    assert len(pairs) == 5000


class FakeClient:
    """Enough of KubeClient for a PodTracker that is fed by hand (never started)."""


def bound(name: str, node: str = "n1") -> dict[str, object]:
    return {"metadata": {"namespace": "ns", "name": name}, "spec": {"nodeName": node}}


def parked(name: str) -> dict[str, object]:
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {},
        "status": {"conditions": [unschedulable]},
    }


def test_a_parked_preemptor_is_settled_but_the_barrier_waits_for_its_bind() -> None:
    tracker = e2e.PodTracker(FakeClient())
    keys = ["ns/a", "ns/b"]
    tracker.observe(bound("a"))
    tracker.observe(parked("b"))  # preempted its victims, waits for them to go
    assert tracker.settled(keys) == 2
    checks: list[int] = []

    def alive() -> None:  # the barrier's liveness check: the victims go, the preemptor is bound
        checks.append(1)
        tracker.observe(bound("b", "n2"))

    tracker.wait_bound(keys, stall=60.0, alive=alive)
    assert checks and tracker.bound_span(keys)[0] == 2
    tracker.stop()


def test_wait_bound_gives_up_when_no_bind_comes_for_the_stall_time() -> None:
    tracker = e2e.PodTracker(FakeClient())
    tracker.observe(parked("never"))
    tracker.wait_bound(["ns/never"], stall=0.0, alive=lambda: None)  # returns, does not raise
    assert tracker.bound_span(["ns/never"])[0] == 0
    tracker.stop()


def test_deletions_are_the_pods_seen_deleted_in_the_span_each_at_its_first_sighting() -> None:
    tracker = e2e.PodTracker(FakeClient())
    seen: dict[str, float] = {}
    for name in ("early", "victim", "late"):
        tracker._deleted(bound(name))
        seen[name] = tracker.gone_at[f"ns/{name}"]
    tracker._deleted(bound("victim"))  # seen again (a relist): the first sighting stands
    assert tracker.gone_at["ns/victim"] == seen["victim"]
    assert tracker.deletions(seen["victim"], seen["late"]) == [seen["victim"], seen["late"]]
    assert tracker.deletions(seen["early"], seen["victim"]) == [seen["early"], seen["victim"]]
    assert tracker.deletions(seen["late"] + 1.0, seen["late"] + 2.0) == []
    tracker.stop()


def test_paused_stops_the_process_and_continues_it_also_on_errors(tmp_path: Path) -> None:
    sched = procs.SchedulerProcess("sleeper", ["sleep", "30"], 0, tmp_path / "sleep.log", "/healthz")
    sched.start()
    try:
        with sched.paused():
            assert _reaches(sched, "T")  # stopped
        assert _reaches(sched, "SR")
        with pytest.raises(KeyError), sched.paused():
            assert _reaches(sched, "T")
            raise KeyError("creation failed")
        assert _reaches(sched, "SR")
    finally:
        sched.stop()
    with pytest.raises(procs.BenchError, match="not running"), sched.paused():
        pass


def test_cpu_seconds_count_user_and_system_time_past_a_name_with_parentheses(tmp_path: Path) -> None:
    # the child names itself "a) (b" ("(a) (b)" in /proc/PID/stat, before the fields) and spends its
    # 0.4 s of CPU mostly in the kernel (copying zeros), then sleeps
    spin = (
        "import os, time\n"
        "open('/proc/self/comm', 'w').write('a) (b')\n"
        "zero = os.open('/dev/zero', os.O_RDONLY)\n"
        "while time.process_time() < 0.4:\n"
        "    os.read(zero, 1 << 20)\n"
        "time.sleep(30)"
    )
    sched = procs.SchedulerProcess("spinner", [sys.executable, "-c", spin], 0, tmp_path / "s.log", "/healthz")
    sched.start()
    try:
        assert sched.proc is not None
        for _ in range(2000):  # until it spun most of its 0.4 s (/proc counts in clock ticks; at most 10 s)
            if sched.cpu_seconds() >= 0.35:
                break
            time.sleep(0.005)
        assert "(a) (b)" in Path(f"/proc/{sched.proc.pid}/stat").read_text()
        used = sched.cpu_seconds()
        assert 0.35 <= used < 1.5, used  # then it sleeps, which uses none
    finally:
        sched.stop()
    assert math.isnan(sched.cpu_seconds())  # no process
    assert math.isnan(procs.cpu_seconds_of(0))  # no such process in /proc


def _reaches(sched: procs.SchedulerProcess, states: str) -> bool:
    """Whether the process's state letter becomes one of `states` (signals are delivered asynchronously)."""
    assert sched.proc is not None
    stat = Path(f"/proc/{sched.proc.pid}/stat")
    for _ in range(400):
        if stat.read_text().rsplit(")", 1)[1].split()[0] in states:
            return True
        time.sleep(0.005)
    return False


def test_pod_state() -> None:
    assert e2e.pod_state({"spec": {"nodeName": "n1"}}) == "bound"
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    assert e2e.pod_state({"spec": {}, "status": {"conditions": [unschedulable]}}) == "unschedulable"
    assert e2e.pod_state({"spec": {}, "status": {}}) == "pending"


def test_parse_schedulers() -> None:
    assert e2e.parse_schedulers("policyd, kube-scheduler") == ("policyd", "kube-scheduler")
    with pytest.raises(ValueError, match="unknown scheduler"):
        e2e.parse_schedulers("kube-scheduler,volcano")
    with pytest.raises(ValueError):
        e2e.parse_schedulers(" , ")


def bench_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_bench_command_argument_checks() -> None:
    assert bench.usage_problem(bench_args("--mode", "e2e", "--qps", "100", "--burst", "200")) == ""
    assert bench.usage_problem(bench_args("--mode", "both")) == ""
    assert "only with --mode e2e" in bench.usage_problem(bench_args("--qps", "100"))
    assert "--qps must be positive" in bench.usage_problem(bench_args("--mode", "e2e", "--qps", "0"))
    assert "--burst" in bench.usage_problem(bench_args("--mode", "e2e", "--burst", "0"))
    assert "--schedulers" in bench.usage_problem(bench_args("--mode", "e2e", "--schedulers", "x"))
    assert "positive" in bench.usage_problem(bench_args("--scale", "0"))
    assert "--rounds must be at least 1" in bench.usage_problem(bench_args("--mode", "e2e", "--rounds", "0"))
    assert "--rounds, --profile: only with" in bench.usage_problem(
        bench_args("--rounds", "3", "--profile", "d")
    )
    assert bench.usage_problem(bench_args("--mode", "e2e", "--rounds", "3", "--profile", "d")) == ""


def test_bench_command_rejects_bad_e2e_arguments_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.run(bench_args("--mode", "e2e", "--schedulers", "nope")) == 2
    assert "unknown scheduler" in capsys.readouterr().err
    assert bench.run(bench_args("--mode", "e2e", "-w", "NoSuchWorkload")) == 2


APISERVER_METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",contentType="application/vnd.kubernetes.protobuf",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 4412
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 264
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="",resource="events",scope="resource",subresource="",verb="PATCH",version="v1"} 7
apiserver_request_total{code="404",component="apiserver",contentType="application/json",dry_run="",group="",resource="events",scope="resource",subresource="",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="",resource="events",scope="resource",subresource="",verb="LIST",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 2500
apiserver_request_duration_seconds_count{component="apiserver",resource="events",verb="POST"} 99
"""


def test_event_writes_count_accepted_creates_and_updates_of_either_events_api() -> None:
    # 4412 events.k8s.io creates + 264 core creates + 7 updates; not the 404s, reads, binds or durations
    assert report.event_writes(APISERVER_METRICS) == 4412 + 264 + 7
    assert report.event_writes("") == 0


def test_the_barrier_waits_while_pods_keep_settling_and_fails_once_they_stop() -> None:
    tracker = e2e.PodTracker(FakeClient())
    keys = [f"ns/p{i}" for i in range(4)]
    clock = [0.0]
    settling = iter(range(4))

    def alive() -> None:  # one pod settles every 100 s: 300 s in all, never 100 s without progress
        clock[0] += 100.0
        i = next(settling, None)
        if i is not None:
            tracker.observe(bound(f"p{i}"))

    with (
        mock.patch.object(e2e.time, "monotonic", lambda: clock[0]),
        mock.patch.object(tracker._cond, "wait", lambda timeout: False),  # the clock is the test's
    ):
        tracker.wait_settled(keys, stall=150.0, alive=alive)
        assert tracker.settled(keys) == 4 and clock[0] == 400.0
        with pytest.raises(e2e.BenchError, match="1 of 2 pods not scheduled: none settled in the last 150s"):
            tracker.wait_settled(["ns/p0", "ns/never"], stall=150.0, alive=alive)
    tracker.stop()
