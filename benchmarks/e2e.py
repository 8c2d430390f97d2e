"""End to end: policyd and kube-scheduler side by side against a real kube-apiserver and etcd.

For each workload and each scheduler (kube-scheduler first, then `policyd run`), a fresh etcd +
kube-apiserver 1.20 starts on loopback (`tests/integration/apiserver.py`, binaries from
`scripts/envtest.sh` or `KUBEBUILDER_ASSETS`); the workload's nodes are created Ready (no kubelets:
the status is patched, TaintNodesByCondition is off); the scheduler process starts with the same
client QPS/burst (kube-scheduler: its v1beta1 config's clientConnection; policyd: its config's
clientConnection); then the ops run. Pods are created by `CREATE_THREADS` threads on an unthrottled
client, so creation runs well ahead of scheduling. A pod watch in this process records when each pod
is first seen with `spec.nodeName`; a Barrier waits until every pod is bound or marked
`PodScheduled=False/Unschedulable`. Pods being deleted (preemption victims) are deleted at once with
grace period 0, standing in for the kubelet.

Figures per (workload, scheduler): pods/s from the first measured pod's creation to the last measured
pod seen bound; p50/p99 attempt latency estimated from the scheduler's own histogram buckets (difference
between a scrape before and after the measured pods): kube-scheduler 1.20's
`scheduler_e2e_scheduling_duration_seconds` (from the start of an attempt to the bind's end; 1.23+ call
it `scheduler_scheduling_attempt_duration_seconds`) and policyd's
`policyd_scheduling_attempt_duration_seconds` (the same span); p50/p99 of the scheduling algorithm
alone likewise; peak RSS is the scheduler process's VmHWM. `python -m benchmarks.e2e
SchedulingBasic/5000 --scale 0.1` or `policyd bench --mode e2e`.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.inprocess import DEFAULT_OUT, DEFAULT_POLICY, machine
from benchmarks.workloads import (
    Barrier,
    CreateNodes,
    CreatePods,
    KubeObject,
    Workload,
    instantiate_node,
    instantiate_pod,
)
from benchmarks.workloads import workload as find_workload

REPO = Path(__file__).resolve().parents[1]

KUBE_SCHEDULER = "kube-scheduler"
POLICYD = "policyd"
SCHEDULERS = (KUBE_SCHEDULER, POLICYD)
DEFAULT_QPS = 50.0  # kube-scheduler's clientConnection defaults
DEFAULT_BURST = 100
CREATE_THREADS = 16
READY_TIMEOUT = 120.0

# histograms to read, first present wins
ATTEMPT_METRICS = {
    KUBE_SCHEDULER: (
        "scheduler_e2e_scheduling_duration_seconds",
        "scheduler_scheduling_attempt_duration_seconds",
    ),
    POLICYD: ("policyd_scheduling_attempt_duration_seconds",),
}
ALGORITHM_METRICS = {
    KUBE_SCHEDULER: ("scheduler_scheduling_algorithm_duration_seconds",),
    POLICYD: ("policyd_scheduling_algorithm_duration_seconds",),
}


class BenchError(RuntimeError):
    """A run could not be completed (a process failed, pods did not get scheduled in time)."""


# ---- histograms ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram: cumulative counts per upper bound (ascending, `inf` last)."""

    buckets: tuple[tuple[float, float], ...] = ()
    count: float = 0.0
    total: float = 0.0

    def minus(self, earlier: Histogram) -> Histogram:
        """The observations made since `earlier` (a scrape of the same histogram)."""
        before = dict(earlier.buckets)
        return Histogram(
            tuple((le, c - before.get(le, 0.0)) for le, c in self.buckets),
            self.count - earlier.count,
            self.total - earlier.total,
        )

    def quantile(self, q: float) -> float:
        """The `q` quantile (0..1), interpolated inside its bucket as PromQL's histogram_quantile; nan if empty."""
        if not self.buckets or self.count <= 0:
            return math.nan
        rank = q * self.buckets[-1][1]
        lower, below = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(le):
                    return lower  # beyond the last finite bound: report that bound
                if cumulative == below:
                    return le
                return lower + (le - lower) * (rank - below) / (cumulative - below)
            lower, below = le, cumulative
        return lower


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LE = re.compile(r'(?:^|,)\s*le="([^"]*)"')


def parse_histogram(text: str, name: str, labels: Mapping[str, str] | None = None) -> Histogram | None:
    """The histogram `name` from Prometheus text, summed over its label sets (those matching `labels`)."""
    buckets: dict[float, float] = {}
    count = total = 0.0
    found = False
    wanted = [f'{k}="{v}"' for k, v in (labels or {}).items()]
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        metric, label_text, value = m.group(1), m.group(2) or "", m.group(3)
        if any(w not in label_text for w in wanted):
            continue
        if metric == name + "_bucket":
            le = _LE.search(label_text)
            if le is None:
                continue
            bound = float(le.group(1))  # "+Inf" parses as inf
            buckets[bound] = buckets.get(bound, 0.0) + float(value)
            found = True
        elif metric == name + "_count":
            count += float(value)
            found = True
        elif metric == name + "_sum":
            total += float(value)
    if not found:
        return None
    return Histogram(tuple(sorted(buckets.items())), count, total)


def first_histogram(text: str, names: Sequence[str]) -> tuple[str, Histogram]:
    """The first of `names` present in `text` (an empty histogram named after the first when none is)."""
    for name in names:
        hist = parse_histogram(text, name)
        if hist is not None:
            return name, hist
    return names[0], Histogram()


# ---- results -------------------------------------------------------------------------------------


@dataclass
class E2EResult:
    """One (workload, scheduler) run."""

    workload: str
    scheduler: str
    scale: float
    node_scale: float
    nodes: int
    measured_pods: int
    scheduled: int
    seconds: float
    pods_per_second: float
    attempt_p50_ms: float
    attempt_p99_ms: float
    algorithm_p50_ms: float
    algorithm_p99_ms: float
    peak_rss_mib: float
    qps: float
    burst: int
    attempt_metric: str = ""
    attempts: int = 0
    create_pods_per_second: float = 0.0
    setup_seconds: float = 0.0
    machine: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (one entry of the result file)."""
        return asdict(self)


def ratios(results: Sequence[E2EResult]) -> dict[str, float]:
    """policyd pods/s divided by kube-scheduler pods/s, per workload having both."""
    by: dict[tuple[str, str], E2EResult] = {(r.workload, r.scheduler): r for r in results}
    out: dict[str, float] = {}
    for (wl, sched), r in by.items():
        base = by.get((wl, KUBE_SCHEDULER))
        if sched == POLICYD and base is not None and base.pods_per_second > 0:
            out[wl] = round(r.pods_per_second / base.pods_per_second, 2)
    return out


MARKDOWN_HEADER = (
    "| workload | scheduler | nodes | measured pods | scheduled | QPS/burst | pods/s | ratio | "
    "attempt p50 ms | attempt p99 ms | algorithm p50 ms | algorithm p99 ms | peak RSS MiB |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
)


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def markdown_row(r: E2EResult, ratio: float | None = None) -> str:
    """One markdown table row; `ratio` (policyd / kube-scheduler pods/s) on policyd rows."""
    ratio_text = f"{ratio:.2f}x" if ratio is not None else ""
    return (
        f"| {r.workload} | {r.scheduler} | {r.nodes} | {r.measured_pods} | {r.scheduled} | "
        f"{r.qps:g}/{r.burst} | {r.pods_per_second:.1f} | {ratio_text} | {_ms(r.attempt_p50_ms)} | "
        f"{_ms(r.attempt_p99_ms)} | {_ms(r.algorithm_p50_ms)} | {_ms(r.algorithm_p99_ms)} | "
        f"{r.peak_rss_mib:.0f} |\n"
    )


def markdown_table(results: Sequence[E2EResult]) -> str:
    """The result table with the policyd / kube-scheduler ratio on policyd rows."""
    rs = ratios(results)
    rows = [markdown_row(r, rs.get(r.workload) if r.scheduler == POLICYD else None) for r in results]
    return MARKDOWN_HEADER + "".join(rows)


def write_results(results: Sequence[E2EResult], out_dir: str) -> tuple[Path, Path]:
    """Write `<out>/e2e-<time>.json` and `.md`; returns both paths."""
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    json_path = path / f"e2e-{stamp}.json"
    md_path = path / f"e2e-{stamp}.md"
    document = {
        "machine": machine(),
        "ratios": ratios(results),
        "results": [_json_safe(r.to_json()) for r in results],
    }
    json_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown_table(results), encoding="utf-8")
    return json_path, md_path


def _json_safe(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in doc.items()}


# ---- scheduler processes -------------------------------------------------------------------------


def kube_scheduler_config(kubeconfig: str, qps: float, burst: int, port: int) -> str:
    """kube-scheduler 1.20's v1beta1 configuration: one client QPS/burst, no leader election, HTTP metrics."""
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1beta1\n"
        "kind: KubeSchedulerConfiguration\n"
        "clientConnection:\n"
        f"  kubeconfig: {json.dumps(kubeconfig)}\n"
        f"  qps: {qps:g}\n"
        f"  burst: {burst}\n"
        "leaderElection:\n"
        "  leaderElect: false\n"
        f"healthzBindAddress: 127.0.0.1:{port}\n"
        f"metricsBindAddress: 127.0.0.1:{port}\n"
    )


def kube_scheduler_command(binary: str, config: str, port: int) -> list[str]:
    """The kube-scheduler command line (insecure port for /healthz and /metrics, no HTTPS)."""
    return [binary, f"--config={config}", "--secure-port=0", f"--port={port}", "--address=127.0.0.1"]


def policyd_config(
    kubeconfig: str, qps: float, burst: int, port: int, policies: Sequence[str]
) -> dict[str, Any]:
    """`policyd run`'s configuration: profile `policyd` from `policies`, the same client QPS/burst."""
    return {
        "apiVersion": "policyd.io/v1alpha1",
        "kind": "PolicydConfiguration",
        "profiles": [{"schedulerName": POLICYD, "policySources": [{"path": p} for p in policies]}],
        "clientConnection": {"kubeconfig": kubeconfig, "qps": qps, "burst": burst},
        "leaderElection": {"leaderElect": False},
        "serving": {"bindAddress": "127.0.0.1", "port": port},
    }


def policyd_command(config: str) -> list[str]:
    """The `policyd run` command line (this interpreter, the repository's package)."""
    return [sys.executable, "-m", "policyd.cli", "run", "--config", config]


def pod_scheduler_name(scheduler: str) -> str:
    """`spec.schedulerName` of the pods a scheduler under test serves."""
    return "default-scheduler" if scheduler == KUBE_SCHEDULER else POLICYD


def _die_with_parent() -> None:
    """In the child: receive SIGKILL when the benchmark process dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class SchedulerProcess:
    """One scheduler under test: started with its config file, probed, scraped, stopped."""

    def __init__(self, scheduler: str, args: list[str], port: int, log_path: Path, ready_path: str) -> None:
        self.scheduler = scheduler
        self.args = args
        self.port = port
        self.log_path = log_path
        self.ready_path = ready_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process (its own session; it dies with this process)."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
            )

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until the health endpoint answers 200; raises BenchError if the process exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if _get(f"http://127.0.0.1:{self.port}{self.ready_path}") is not None:
                return
            time.sleep(0.2)
        raise BenchError(f"{self.scheduler} not ready after {timeout:.0f}s; log tail:\n{self.log_tail()}")

    def check_alive(self) -> None:
        """Raise BenchError when the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise BenchError(
                f"{self.scheduler} exited with {self.proc.returncode}; log tail:\n{self.log_tail()}"
            )

    def metrics(self) -> str:
        """The Prometheus text of /metrics."""
        text = _get(f"http://127.0.0.1:{self.port}/metrics")
        if text is None:
            raise BenchError(f"{self.scheduler}: cannot read /metrics on port {self.port}")
        return text

    def peak_rss_mib(self) -> float:
        """VmHWM of the process (MiB; 0 when unknown)."""
        return peak_rss_of(self.proc.pid) if self.proc is not None else 0.0

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the process's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def peak_rss_of(pid: int) -> float:
    """VmHWM (peak resident set size) of process `pid` in MiB, from /proc; 0 when unavailable."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            if response.status == 200:
                return str(response.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError):
        pass
    return None


def make_scheduler(
    scheduler: str,
    *,
    assets: Path,
    kubeconfig: str,
    workdir: Path,
    qps: float,
    burst: int,
    policies: Sequence[str],
) -> SchedulerProcess:
    """The process for `scheduler` (kube-scheduler from `assets`, or `policyd run`), not started."""
    from tests.integration.apiserver import free_port

    port = free_port()
    if scheduler == KUBE_SCHEDULER:
        config = workdir / "kube-scheduler.yaml"
        config.write_text(kube_scheduler_config(kubeconfig, qps, burst, port), encoding="utf-8")
        args = kube_scheduler_command(str(assets / "kube-scheduler"), str(config), port)
        return SchedulerProcess(scheduler, args, port, workdir / "kube-scheduler.log", "/healthz")
    if scheduler == POLICYD:
        config = workdir / "policyd.yaml"
        doc = policyd_config(kubeconfig, qps, burst, port, [str(Path(p).resolve()) for p in policies])
        config.write_text(json.dumps(doc, indent=2), encoding="utf-8")
        return SchedulerProcess(
            scheduler, policyd_command(str(config)), port, workdir / "policyd.log", "/readyz"
        )
    raise ValueError(f"unknown scheduler {scheduler!r} (one of {', '.join(SCHEDULERS)})")


# ---- the pod watch -------------------------------------------------------------------------------


def pod_state(obj: KubeObject) -> str:
    """`bound`, `unschedulable` (PodScheduled=False, Unschedulable) or `pending`."""
    if (obj.get("spec") or {}).get("nodeName"):
        return "bound"
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            if cond.get("reason") == "Unschedulable":
                return "unschedulable"
    return "pending"


class PodTracker:
    """Watches every pod: when each was first seen bound, which are unschedulable; reaps deleted pods."""

    def __init__(self, client: Any) -> None:
        from policyd.runtime.kube.informer import Informer, Resource

        self.client = client
        self.bound_at: dict[str, float] = {}
        self.unschedulable: set[str] = set()
        self._cond = threading.Condition()
        self._reaper = ThreadPoolExecutor(max_workers=4, thread_name_prefix="reaper")
        self._reaped: set[str] = set()
        self.informer = Informer(
            client,
            Resource("v1", "pods", "Pod"),
            on_add=self._seen,
            on_update=lambda _old, new: self._seen(new),
            on_delete=self._deleted,
        )

    def start(self) -> None:
        """Start watching (returns once the initial list is in)."""
        self.informer.start()
        if not self.informer.wait_for_sync(60):
            raise BenchError("pod watch did not sync in 60 s")

    def stop(self) -> None:
        """Stop watching and reaping."""
        self.informer.stop()
        self._reaper.shutdown(wait=False, cancel_futures=True)

    def _seen(self, obj: KubeObject) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        now = time.monotonic()
        state = pod_state(obj)
        if meta.get("deletionTimestamp") and key not in self._reaped:
            self._reaped.add(key)  # no kubelet: finish the deletion as the kubelet would
            self._reaper.submit(
                self._reap, str(meta.get("namespace")), str(meta.get("name")), meta.get("uid")
            )
        with self._cond:
            if state == "bound":
                self.bound_at.setdefault(key, now)
                self.unschedulable.discard(key)
            elif state == "unschedulable":
                self.unschedulable.add(key)
            self._cond.notify_all()

    def _deleted(self, obj: KubeObject) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self._cond:
            self.unschedulable.discard(key)
            self._cond.notify_all()

    def _reap(self, namespace: str, name: str, uid: Any) -> None:
        from policyd.runtime.kube.api_backend import delete_pod

        try:
            delete_pod(self.client, namespace, name, str(uid or ""), grace=0)
        except Exception:  # noqa: BLE001 - best effort; a deleted pod no longer counts anyway
            pass

    def settled(self, keys: Sequence[str]) -> int:
        """How many of `keys` are bound or unschedulable."""
        with self._cond:
            return sum(1 for k in keys if k in self.bound_at or k in self.unschedulable)

    def wait_settled(self, keys: Sequence[str], timeout: float, alive: Callable[[], None]) -> None:
        """Block until every pod of `keys` is bound or unschedulable; `alive()` may raise meanwhile."""
        deadline = time.monotonic() + timeout
        pending = set(keys)
        while True:
            with self._cond:
                pending = {k for k in pending if k not in self.bound_at and k not in self.unschedulable}
                if not pending:
                    return
                self._cond.wait(1.0)
            alive()
            if time.monotonic() > deadline:
                raise BenchError(f"{len(pending)} of {len(keys)} pods not scheduled after {timeout:.0f}s")

    def last_bound(self, keys: Sequence[str]) -> tuple[int, float]:
        """(how many of `keys` are bound, monotonic time the last of them was first seen bound)."""
        with self._cond:
            times = [self.bound_at[k] for k in keys if k in self.bound_at]
        return len(times), max(times, default=0.0)


# ---- one run -------------------------------------------------------------------------------------


def node_objects(op: CreateNodes, first_index: int) -> list[tuple[KubeObject, KubeObject]]:
    """(object to POST, status to patch) for every node of a CreateNodes op."""
    out = []
    for i in range(op.count):
        obj = instantiate_node(op, first_index + i)
        obj["metadata"].pop("uid", None)
        status = obj.pop("status", {})
        out.append((obj, status))
    return out


def pod_object(op: CreatePods, index: int, prefix: str, scheduler_name: str) -> KubeObject:
    """The API form of one workload pod: server-set fields dropped, `priority` through a PriorityClass."""
    obj = instantiate_pod(op, index, prefix)
    meta = obj["metadata"]
    meta.pop("uid", None)
    meta.pop("creationTimestamp", None)
    spec = obj["spec"]
    spec["schedulerName"] = scheduler_name
    priority = spec.pop("priority", None)
    if priority is not None:
        spec["priorityClassName"] = priority_class_name(int(priority))
    return obj


def priority_class_name(value: int) -> str:
    """The PriorityClass standing for a template's `spec.priority` (the Priority admission computes it)."""
    return f"bench-priority-{value}" if value >= 0 else f"bench-priority-minus-{-value}"


def _parallel(work: Callable[[Any], Any], items: Sequence[Any], threads: int) -> None:
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="create") as pool:
        for _ in pool.map(work, items):
            pass


@contextmanager
def _terminated_by_sigterm() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt (so every `finally` runs) while the block runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_one(
    wl: Workload,
    scheduler: str,
    *,
    scale: float = 1.0,
    node_scale: float = 1.0,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    policies: Sequence[str] = (DEFAULT_POLICY,),
    threads: int = CREATE_THREADS,
    progress: Callable[[str], None] | None = None,
) -> E2EResult:
    """Run `wl` (scaled) against a fresh control plane with `scheduler`, and measure the measured ops."""
    import urllib3

    from policyd.runtime.kube.client import KubeClient, object_path
    from tests.integration.apiserver import LocalControlPlane

    # the harness's kubeconfig skips TLS verification on purpose (loopback, throwaway certificates)
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

    say = progress or (lambda _text: None)
    wl = wl.scaled(scale, node_scale)
    started = time.monotonic()
    with _terminated_by_sigterm(), LocalControlPlane() as plane:
        assert plane.assets is not None
        # the creating client is not rate-limited (qps 0): creation must not be the bottleneck
        client = KubeClient.connect(kubeconfig=str(plane.kubeconfig_path), qps=0, burst=1)
        client.api_client.configuration.connection_pool_maxsize = threads * 2
        sched = make_scheduler(
            scheduler,
            assets=plane.assets,
            kubeconfig=str(plane.kubeconfig_path),
            workdir=plane.workdir,
            qps=qps,
            burst=burst,
            policies=policies,
        )
        tracker = PodTracker(client)
        try:
            for ns in sorted({op.namespace for op in wl.ops if isinstance(op, CreatePods)}):
                client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
            _create_priority_classes(client, wl)
            tracker.start()
            node_index = 0
            leading = 0
            for op in wl.ops:  # nodes before the scheduler starts: it lists them at once
                if not isinstance(op, CreateNodes):
                    break
                t0 = time.monotonic()
                _create_nodes(client, op, node_index, threads)
                node_index += op.count
                leading += 1
                say(f"{wl.name} [{scheduler}]: {op.count} nodes in {time.monotonic() - t0:.1f}s")
            sched.start()
            sched.wait_ready()
            say(f"{wl.name} [{scheduler}]: scheduler ready")
            created: list[str] = []
            measured: list[str] = []
            before: str | None = None
            t_measure = 0.0
            create_seconds = 0.0
            measured_seconds = 0.0
            scheduled = 0
            after: str | None = None
            name = pod_scheduler_name(scheduler)
            for op_number, op in enumerate(wl.ops):
                if op_number < leading:
                    continue
                if isinstance(op, CreateNodes):
                    _create_nodes(client, op, node_index, threads)
                    node_index += op.count
                elif isinstance(op, CreatePods):
                    bodies = [pod_object(op, i, f"op{op_number}", name) for i in range(op.count)]
                    keys = [f"{op.namespace}/{b['metadata']['name']}" for b in bodies]
                    path = object_path("v1", "pods", op.namespace)
                    t0 = time.monotonic()
                    if op.collect_metrics and before is None:
                        before = sched.metrics()
                        t_measure = t0 = time.monotonic()
                    _create_pods(client, path, bodies, threads)
                    created += keys
                    if op.collect_metrics:
                        measured += keys
                        create_seconds += time.monotonic() - t0
                    say(f"{wl.name} [{scheduler}]: {op.count} pods created in {time.monotonic() - t0:.1f}s")
                elif isinstance(op, Barrier):
                    timeout = max(300.0, 2.0 * len(created) / max(qps, 1.0))
                    tracker.wait_settled(created, timeout, sched.check_alive)
                    if measured and after is None:
                        scheduled, t_end = tracker.last_bound(measured)
                        measured_seconds = t_end - t_measure if scheduled else time.monotonic() - t_measure
                        after = sched.metrics()
                    n_bound, _ = tracker.last_bound(created)
                    say(f"{wl.name} [{scheduler}]: barrier: {n_bound}/{len(created)} bound")
            if measured and after is None:  # no Barrier after the measured pods
                tracker.wait_settled(
                    created, max(300.0, 2.0 * len(created) / max(qps, 1.0)), sched.check_alive
                )
                scheduled, t_end = tracker.last_bound(measured)
                measured_seconds = t_end - t_measure if scheduled else time.monotonic() - t_measure
                after = sched.metrics()
            peak = sched.peak_rss_mib()
        except BaseException:
            if isinstance(sched.proc, subprocess.Popen):
                say(f"{wl.name} [{scheduler}]: failed; scheduler log tail:\n{sched.log_tail()}")
            raise
        finally:
            sched.stop()
            tracker.stop()
            client.close()
    attempt_name, attempt = _delta(after, before, ATTEMPT_METRICS[scheduler])
    _, algorithm = _delta(after, before, ALGORITHM_METRICS[scheduler])
    total = time.monotonic() - started
    return E2EResult(
        workload=wl.name,
        scheduler=scheduler,
        scale=scale,
        node_scale=node_scale,
        nodes=wl.nodes,
        measured_pods=len(measured),
        scheduled=scheduled,
        seconds=round(measured_seconds, 3),
        pods_per_second=round(scheduled / measured_seconds, 1) if measured_seconds > 0 else 0.0,
        attempt_p50_ms=round(attempt.quantile(0.5) * 1000, 2),
        attempt_p99_ms=round(attempt.quantile(0.99) * 1000, 2),
        algorithm_p50_ms=round(algorithm.quantile(0.5) * 1000, 2),
        algorithm_p99_ms=round(algorithm.quantile(0.99) * 1000, 2),
        peak_rss_mib=round(peak, 1),
        qps=qps,
        burst=burst,
        attempt_metric=attempt_name,
        attempts=int(attempt.count),
        create_pods_per_second=round(len(measured) / create_seconds, 1) if create_seconds > 0 else 0.0,
        setup_seconds=round(total - measured_seconds, 1),
        machine=machine(),
    )


def _delta(after: str | None, before: str | None, names: Sequence[str]) -> tuple[str, Histogram]:
    if after is None:
        return names[0], Histogram()
    name, hist = first_histogram(after, names)
    if before is not None:
        earlier = parse_histogram(before, name)
        if earlier is not None:
            hist = hist.minus(earlier)
    return name, hist


def _create_nodes(client: Any, op: CreateNodes, first_index: int, threads: int) -> None:
    def create(item: tuple[KubeObject, KubeObject]) -> None:
        obj, status = item
        name = obj["metadata"]["name"]
        client.request("POST", "/api/v1/nodes", body=obj)
        # status is ignored on create: set it (Ready, capacity) through the subresource
        client.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )

    _parallel(create, node_objects(op, first_index), threads)


def _create_pods(client: Any, path: str, bodies: Sequence[KubeObject], threads: int) -> None:
    def create(body: KubeObject) -> None:
        client.request("POST", path, body=body)

    _parallel(create, bodies, threads)


def _create_priority_classes(client: Any, wl: Workload) -> None:
    values = sorted(
        {
            int(op.template["spec"]["priority"])
            for op in wl.ops
            if isinstance(op, CreatePods) and "priority" in op.template["spec"]
        }
    )
    for value in values:
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": priority_class_name(value)},
            "value": value,
        }
        client.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body=body)


def run_workloads(
    workloads: Sequence[Workload],
    *,
    schedulers: Sequence[str] = SCHEDULERS,
    scale: float = 1.0,
    node_scale: float = 1.0,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    policies: Sequence[str] = (DEFAULT_POLICY,),
    threads: int = CREATE_THREADS,
    progress: Callable[[str], None] | None = None,
    on_result: Callable[[E2EResult], Any] | None = None,
) -> list[E2EResult]:
    """Every workload with every scheduler, one fresh control plane each; the results in order."""
    results = []
    for wl in workloads:
        for scheduler in schedulers:
            result = run_one(
                wl,
                scheduler,
                scale=scale,
                node_scale=node_scale,
                qps=qps,
                burst=burst,
                policies=policies,
                threads=threads,
                progress=progress,
            )
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def parse_schedulers(text: str) -> tuple[str, ...]:
    """`kube-scheduler,policyd` -> the schedulers in that order; raises ValueError on unknown names."""
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [n for n in names if n not in SCHEDULERS]
    if unknown or not names:
        raise ValueError(
            f"unknown scheduler(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(SCHEDULERS)}"
        )
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run workloads end to end with both schedulers and write the result files."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("workloads", nargs="*", default=["SchedulingBasic/5000"])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply pod counts (quick runs)")
    parser.add_argument("--node-scale", type=float, default=1.0, help="multiply node counts")
    parser.add_argument("--qps", type=float, default=DEFAULT_QPS, help="client QPS of both schedulers")
    parser.add_argument("--burst", type=int, default=DEFAULT_BURST, help="client burst of both schedulers")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS), help="comma-separated, run in order")
    parser.add_argument("--policies", nargs="+", default=[DEFAULT_POLICY])
    parser.add_argument("--threads", type=int, default=CREATE_THREADS, help="pod/node creating threads")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    try:
        schedulers = parse_schedulers(args.schedulers)
        chosen = [find_workload(name) for name in args.workloads]
    except (KeyError, ValueError) as exc:
        parser.error(str(exc.args[0]))
    sys.stdout.write(MARKDOWN_HEADER)
    results = run_workloads(
        chosen,
        schedulers=schedulers,
        scale=args.scale,
        node_scale=args.node_scale,
        qps=args.qps,
        burst=args.burst,
        policies=args.policies,
        threads=args.threads,
        progress=lambda text: print(text, file=sys.stderr, flush=True),
        on_result=lambda r: sys.stdout.write(markdown_row(r)),
    )
    sys.stdout.write("\n" + markdown_table(results))
    json_path, md_path = write_results(results, args.out)
    sys.stdout.write(f"wrote {json_path} and {md_path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
