"""End to end: policyd and kube-scheduler side by side against a real kube-apiserver and etcd.

For each workload and each scheduler (kube-scheduler first, then `policyd run`), a fresh etcd +
kube-apiserver 1.20 starts on loopback (`policyd.envtest`; kube-apiserver, etcd and kube-scheduler
from the `assets` directory, `KUBEBUILDER_ASSETS`); the workload's nodes are created Ready (no kubelets:
the status is patched, TaintNodesByCondition is off); the scheduler process starts with the same
client QPS/burst (kube-scheduler: its v1beta1 config's clientConnection; policyd: its config's
clientConnection); then the ops run. Pods are created by `CREATE_THREADS` threads on an unthrottled
client. A pod watch in this process records when each pod is first seen with `spec.nodeName`; a
Barrier waits until every pod is bound or marked `PodScheduled=False/Unschedulable`. Pods being deleted
(preemption victims) are deleted at once with grace period 0, standing in for the kubelets, on
connections opened before the measured pods are released (`PodTracker.connect_reaper`).

The measured pods are created with the scheduler process stopped (SIGSTOP; `SchedulerProcess.paused`)
and released at once (SIGCONT): on 2 cores one creating process makes 300-400 pods/s while a scheduler
runs, less than either scheduler binds, so pods created during the measurement would time the
creation, not the scheduler. Stopped, the scheduler sees the pods only when it continues, as a burst of
watch events (or a re-list if the API server dropped the watch of the unresponsive client); it does
the same work on the same pods, the same way for both schedulers. Leader election is off in both, so no
lease lapses meanwhile. The scrape of /metrics before the measured pods is taken before the pause. The
Barrier after the measured pods also waits until they are bound, for as long as binds keep coming
(`BIND_STALL_SECONDS`): a preemptor is parked as unschedulable after the attempt that preempts, and
bound on a later attempt once its victims are gone; counting it settled when parked ended the
measurement with few preemptors bound.

Figures per (workload, scheduler, round): pods/s between the first and the last measured pod seen
bound on the watch ((bound - 1) / span) and from the release (bound / (last bind - release): this one
includes the scheduler's intake of the burst and, for Preemption, the preempting attempts before the
first bind); p50/p90/p99 attempt latency estimated from the scheduler's own histogram buckets (difference
between a scrape before and after the measured pods): kube-scheduler 1.20's
`scheduler_e2e_scheduling_duration_seconds` (from the start of an attempt to the bind's end; 1.23+ call
it `scheduler_scheduling_attempt_duration_seconds`) and policyd's
`scheduler_scheduling_attempt_duration_seconds` (the same span); p50/p99 of the scheduling algorithm
alone likewise; peak RSS is the scheduler process's VmHWM; the CPU seconds (user + system, from
/proc) the scheduler, kube-apiserver and etcd each used from the release until the last measured pod
was seen bound; the creation rate of the measured pods (with the scheduler stopped). With `rounds` > 1
every workload runs with every scheduler once per round, the schedulers' order alternating
(`round_order`); the report takes medians over rounds (`e2e_report.medians`). `profile_dir` attaches
py-spy to each scheduler process once it is ready (`e2e_schedulers.Profiler`). `policyd bench --mode
e2e -w SchedulingBasic/500 --scale 0.2 --qps 1000 --burst 1000 --rounds 3`.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policyd import shipped
from policyd.bench.e2e_report import KUBE_SCHEDULER, POLICYD, E2EResult, event_writes, histogram_delta
from policyd.bench.e2e_schedulers import (
    SCHEDULERS,
    BenchError,
    Profiler,
    SchedulerProcess,
    cpu_seconds_of,
    make_scheduler,
    pod_scheduler_name,
)
from policyd.bench.results import machine
from policyd.bench.workloads import (
    Barrier,
    CreateNodes,
    CreatePods,
    KubeObject,
    Workload,
    instantiate_node,
    instantiate_pod,
)
from policyd.envtest import CONTROL_PLANE_BINARIES, LocalControlPlane, find_assets

DEFAULT_QPS = 50.0  # kube-scheduler's clientConnection defaults
DEFAULT_BURST = 100
CREATE_THREADS = 16
# the Barrier after the measured pods waits for them to be bound until none more was bound for this
# long: longer than kube-scheduler 1.20's retry of a parked pod (unschedulable for 60 s, flushed every 30 s)
BIND_STALL_SECONDS = 120.0
# how the measured pods reach the scheduler (E2EResult.creation)
CREATION = "paused"

# histograms to read, first present wins
ATTEMPT_METRICS = {
    KUBE_SCHEDULER: (
        "scheduler_e2e_scheduling_duration_seconds",
        "scheduler_scheduling_attempt_duration_seconds",
    ),
    POLICYD: ("scheduler_scheduling_attempt_duration_seconds",),
}
ALGORITHM_METRICS = {
    KUBE_SCHEDULER: ("scheduler_scheduling_algorithm_duration_seconds",),
    POLICYD: ("scheduler_scheduling_algorithm_duration_seconds",),
}


# ---- the pod watch -------------------------------------------------------------------------------


# deletions finished at the same time by the kubelet stand-in: every node's kubelet finishes its own
# pods on a connection of its own, opened long before; kube-apiserver admits 200 mutating requests at
# once (--max-mutating-requests-inflight), so more would only queue there
REAPER_CONNECTIONS = 200


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
    """Watches every pod: when each was first seen bound, which are unschedulable, when each was seen
    deleted; reaps deleted pods."""

    def __init__(self, client: Any) -> None:
        from policyd.backends.kube.informer import Informer, Resource
        from policyd.backends.kube.multiplex import RequestLoop

        self.client = client
        self.bound_at: dict[str, float] = {}
        self.gone_at: dict[str, float] = {}  # seen deleted (a preemption victim once the reaper finished it)
        self.unschedulable: set[str] = set()
        self._cond = threading.Condition()
        # the kubelets' part: a pod being deleted is finished at once, every one in flight together
        # (one kubelet per node works in parallel; 4 blocking threads finished 1500 preemption victims
        # over 3-4 s, the deletion events of Preemption/500 then arrived 3.3 s after the scheduler's
        # DELETE was answered, and that, not the scheduler, spaced the preemptors' binds; with 64
        # connections opened as the victims came, a finishing DELETE still waited up to 1.6 s for its
        # turn)
        self._reaper = RequestLoop(client, name="reaper", max_connections=REAPER_CONNECTIONS)
        self._reaped: set[str] = set()
        self.informer = Informer(
            client,
            Resource("v1", "pods", "Pod"),
            on_add=self.observe,
            on_update=lambda _old, new: self.observe(new),
            on_delete=self._deleted,
        )

    def start(self) -> None:
        """Start watching (returns once the initial list is in)."""
        self.informer.start()
        if not self.informer.wait_for_sync(60):
            raise BenchError("pod watch did not sync in 60 s")

    def connect_reaper(self, timeout: float = 60.0) -> None:
        """Open the kubelet stand-in's connections now (`REAPER_CONNECTIONS` at once, kept alive), as
        kubelets hold theirs: opened only when victims come, their handshakes would share the API
        server's cores with the deletions being measured."""
        failed: list[BaseException] = []

        def answered(_result: Any, error: BaseException | None) -> None:
            if error is not None:
                failed.append(error)

        for _ in range(REAPER_CONNECTIONS):
            self._reaper.submit("GET", "/version", answered)
        if not self._reaper.wait_idle(timeout) or failed:
            raise BenchError(f"the kubelet stand-in could not connect: {failed[0] if failed else 'timeout'}")

    def stop(self) -> None:
        """Stop watching and reaping."""
        self.informer.stop()
        self._reaper.stop(2.0)

    def observe(self, obj: KubeObject) -> None:
        """Record one pod as the watch delivers it (added or updated)."""
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        now = time.monotonic()
        state = pod_state(obj)
        if meta.get("deletionTimestamp") and key not in self._reaped:
            self._reaped.add(key)  # no kubelet: finish the deletion as the kubelet would
            self._reap(str(meta.get("namespace")), str(meta.get("name")), meta.get("uid"))
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
        now = time.monotonic()
        with self._cond:
            self.gone_at.setdefault(key, now)
            self.unschedulable.discard(key)
            self._cond.notify_all()

    def _reap(self, namespace: str, name: str, uid: Any) -> None:
        from policyd.backends.kube.api_backend import delete_options
        from policyd.backends.kube.client import object_path

        path = object_path("v1", "pods", namespace, name)
        try:
            # best effort: a failed deletion leaves the pod terminating, and a deleted pod no longer counts
            self._reaper.submit(
                "DELETE", path, lambda _result, _error: None, body=delete_options(str(uid or ""), 0)
            )
        except RuntimeError:  # stopping
            pass

    def settled(self, keys: Sequence[str]) -> int:
        """How many of `keys` are bound or unschedulable."""
        with self._cond:
            return sum(1 for k in keys if k in self.bound_at or k in self.unschedulable)

    def wait_settled(self, keys: Sequence[str], stall: float, alive: Callable[[], None]) -> None:
        """Block until every pod of `keys` is bound or unschedulable; `alive()` may raise meanwhile.

        Fails once no pod of `keys` settled for `stall` seconds: a slow scheduler that keeps placing
        pods (kube-scheduler preempting for 5000 pods, one at a time) is waited for, a stuck one is not."""
        pending = self._wait(keys, lambda k: k in self.bound_at or k in self.unschedulable, stall, alive)
        if pending:
            raise BenchError(
                f"{pending} of {len(keys)} pods not scheduled: none settled in the last {stall:.0f}s"
            )

    def wait_bound(self, keys: Sequence[str], stall: float, alive: Callable[[], None]) -> None:
        """Block until every pod of `keys` is bound, or until none more got bound for `stall` seconds."""
        self._wait(keys, lambda k: k in self.bound_at, stall, alive)

    def _wait(
        self, keys: Sequence[str], done: Callable[[str], bool], stall: float, alive: Callable[[], None]
    ) -> int:
        """Wait until `done` holds for every pod of `keys`, or until it came to hold for none more in
        `stall` seconds; returns how many it does not hold for."""
        pending = set(keys)
        progress = time.monotonic()
        while True:
            with self._cond:
                still = {k for k in pending if not done(k)}
                if not still:
                    return 0
                if len(still) < len(pending):
                    progress = time.monotonic()
                pending = still
                self._cond.wait(1.0)
            alive()
            if time.monotonic() - progress > stall:
                return len(pending)

    def last_bound(self, keys: Sequence[str]) -> tuple[int, float]:
        """(how many of `keys` are bound, monotonic time the last of them was first seen bound)."""
        count, _, last = self.bound_span(keys)
        return count, last

    def deletions(self, since: float, until: float) -> list[float]:
        """When each pod seen deleted between `since` and `until` (monotonic, both included) was seen so."""
        with self._cond:
            return sorted(t for t in self.gone_at.values() if since <= t <= until)

    def bound_span(self, keys: Sequence[str]) -> tuple[int, float, float]:
        """(how many of `keys` are bound, when the first and the last of them were first seen bound)."""
        with self._cond:
            times = [self.bound_at[k] for k in keys if k in self.bound_at]
        return len(times), min(times, default=0.0), max(times, default=0.0)


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


@dataclass
class _Measurement:
    """What the measured ops left: pods, times and the two metric scrapes."""

    pods: list[str] = field(default_factory=list)
    creating_seconds: float = 0.0
    released: float = 0.0  # when the scheduler was continued after the measured pods were created
    seconds: float = 0.0  # from the first to the last measured pod seen bound
    first_bind_seconds: float = 0.0  # from the release to the first measured pod seen bound
    scheduled: int = 0
    before: str | None = None
    after: str | None = None
    events_before: int | None = None  # Event writes the API server had accepted at the release
    events_by_last_bind: float = math.nan  # and since then, read once the last measured bind was seen
    deleted_by_last_bind: float = math.nan  # pods seen deleted from the release to the last measured bind
    deleted_after_first_bind: float = math.nan  # of them, those seen deleted after the first measured bind
    cpu_at_release: dict[str, float] = field(default_factory=dict)  # CPU seconds used so far, by process
    cpu_by_last_bind: dict[str, float] = field(default_factory=dict)  # and used from the release on


class WorkloadRun:
    """One workload with one scheduler against its own control plane (`run()`, then `result()`)."""

    def __init__(
        self,
        wl: Workload,
        scheduler: str,
        *,
        assets: Path,
        qps: float,
        burst: int,
        policies: Sequence[str],
        threads: int,
        say: Callable[[str], None],
        profile: Path | None = None,
    ) -> None:
        self.wl = wl
        self.profile = profile
        self.scheduler = scheduler
        self.assets = assets
        self.qps = qps
        self.burst = burst
        self.policies = policies
        self.threads = threads
        self._say = say
        self.created: list[str] = []
        self.measured = _Measurement()
        self.peak_rss_mib = 0.0
        self._node_index = 0
        self._control_plane: dict[str, int] = {}  # kube-apiserver's and etcd's process ids

    def say(self, text: str) -> None:
        """Progress, prefixed with the workload and the scheduler."""
        self._say(f"{self.wl.name} [{self.scheduler}]: {text}")

    def run(self) -> None:
        """Start everything, run the ops, stop everything (also on errors, Ctrl-C and SIGTERM)."""
        from policyd.backends.kube.client import KubeClient

        with _terminated_by_sigterm(), LocalControlPlane(self.assets) as plane:
            # the creating client is not rate-limited (qps 0): creation must not be the bottleneck
            client = KubeClient.connect(kubeconfig=str(plane.kubeconfig_path), qps=0, burst=1)
            sched = make_scheduler(
                self.scheduler,
                assets=self.assets,
                kubeconfig=str(plane.kubeconfig_path),
                workdir=plane.workdir,
                qps=self.qps,
                burst=self.burst,
                policies=self.policies,
            )
            tracker = PodTracker(client)
            self._control_plane = plane.pids
            profiler: list[Profiler] = []
            try:
                self._run_ops(client, sched, tracker, profiler)
                self.peak_rss_mib = sched.peak_rss_mib()
            except BaseException:
                if sched.proc is not None:
                    self.say(f"failed; scheduler log tail:\n{sched.log_tail()}")
                raise
            finally:
                for p in profiler:
                    p.stop()
                    self.say(f"profile written to {p.output}")
                sched.stop()
                tracker.stop()
                client.close()

    def _run_ops(
        self, client: Any, sched: SchedulerProcess, tracker: PodTracker, profiler: list[Profiler]
    ) -> None:
        for ns in sorted({op.namespace for op in self.wl.ops if isinstance(op, CreatePods)}):
            client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        _create_priority_classes(client, self.wl)
        tracker.start()
        ops = list(enumerate(self.wl.ops))
        while ops and isinstance(ops[0][1], CreateNodes):  # nodes first: the scheduler lists them at once
            self._create_nodes(client, ops.pop(0)[1])  # type: ignore[arg-type]
        sched.start()
        sched.wait_ready()
        self.say("scheduler ready")
        if self.profile is not None and sched.proc is not None:
            profiler.append(Profiler(sched.proc.pid, self.profile))
            profiler[0].start()
        for number, op in ops:
            if isinstance(op, CreateNodes):
                self._create_nodes(client, op)
            elif isinstance(op, CreatePods):
                self._create_pods(client, sched, tracker, op, number)
            elif isinstance(op, Barrier):
                self._barrier(client, sched, tracker)
        if self.measured.pods and self.measured.after is None:  # no Barrier after the measured pods
            self._barrier(client, sched, tracker)

    def _create_nodes(self, client: Any, op: CreateNodes) -> None:
        t0 = time.monotonic()
        _create_nodes(client, op, self._node_index, self.threads)
        self._node_index += op.count
        self.say(f"{op.count} nodes created in {time.monotonic() - t0:.1f}s")

    def _create_pods(
        self, client: Any, sched: SchedulerProcess, tracker: PodTracker, op: CreatePods, number: int
    ) -> None:
        from policyd.backends.kube.client import object_path

        name = pod_scheduler_name(self.scheduler)
        bodies = [pod_object(op, i, f"op{number}", name) for i in range(op.count)]
        keys = [f"{op.namespace}/{b['metadata']['name']}" for b in bodies]
        path = object_path("v1", "pods", op.namespace)
        m = self.measured
        t0 = time.monotonic()
        if not op.collect_metrics:
            _create_pods(client, path, bodies, self.threads)
            self.created += keys
            self.say(f"{op.count} pods created in {time.monotonic() - t0:.1f}s")
            return
        if m.before is None:
            m.before = sched.metrics()  # before the pause: a stopped process does not answer
        with sched.paused():  # the scheduler sees none of them until all exist
            t0 = time.monotonic()
            _create_pods(client, path, bodies, self.threads)
            seconds = time.monotonic() - t0
            if m.events_before is None:  # the first measured pods
                tracker.connect_reaper()
                m.events_before = event_writes(client.text("/metrics"))
            m.cpu_at_release = self._cpu_seconds(sched)
            m.released = time.monotonic()
        self.created += keys
        m.pods += keys
        m.creating_seconds += seconds
        self.say(f"{op.count} measured pods created in {seconds:.1f}s with the scheduler stopped; released")

    def _barrier(self, client: Any, sched: SchedulerProcess, tracker: PodTracker) -> None:
        stall = max(300.0, 2.0 * len(self.created) / max(self.qps, 1.0))
        tracker.wait_settled(self.created, stall, sched.check_alive)
        m = self.measured
        if m.pods and m.after is None:
            # a measured pod parked as unschedulable may still be bound (a preemptor, once its victims
            # are gone): wait for the binds, as long as they keep coming
            tracker.wait_bound(m.pods, BIND_STALL_SECONDS, sched.check_alive)
            cpu = self._cpu_seconds(sched)
            m.cpu_by_last_bind = {name: cpu[name] - used for name, used in m.cpu_at_release.items()}
            m.scheduled, first, last = tracker.bound_span(m.pods)
            if m.events_before is not None:
                m.events_by_last_bind = event_writes(client.text("/metrics")) - m.events_before
            m.seconds = last - first if m.scheduled > 1 else 0.0
            if m.scheduled:
                gone = tracker.deletions(m.released, last)
                m.deleted_by_last_bind = len(gone)
                m.deleted_after_first_bind = sum(1 for t in gone if t > first)
            m.first_bind_seconds = first - m.released if m.scheduled else 0.0
            m.after = self._settled_metrics(sched, m.before, m.scheduled)
            if m.scheduled < len(m.pods):
                self.say(
                    f"{len(m.pods) - m.scheduled} measured pods not bound "
                    f"({BIND_STALL_SECONDS:.0f}s without a bind); the result counts {m.scheduled}"
                )
        bound, _ = tracker.last_bound(self.created)
        self.say(f"barrier: {bound}/{len(self.created)} bound")

    def _cpu_seconds(self, sched: SchedulerProcess) -> dict[str, float]:
        """The CPU seconds the scheduler, kube-apiserver and etcd have used so far (nan: unknown)."""
        used = {name: cpu_seconds_of(pid) for name, pid in self._control_plane.items()}
        used["scheduler"] = sched.cpu_seconds()
        return used

    def _settled_metrics(self, sched: SchedulerProcess, before: str | None, scheduled: int) -> str:
        """A /metrics scrape once the attempts of the bound pods are counted (waits at most 5 s)."""
        # a pod's attempt is observed just after its bind returns: the last ones can trail the watch
        names = ATTEMPT_METRICS[self.scheduler]
        deadline = time.monotonic() + 5.0
        while True:
            text = sched.metrics()
            _, attempts = histogram_delta(text, before, names)
            if attempts.count >= scheduled or time.monotonic() > deadline:
                return text
            time.sleep(0.1)

    def result(
        self, scale: float, node_scale: float, setup_seconds: float, round_number: int = 1
    ) -> E2EResult:
        """The figures of the measured ops (pods/s: binds per second between the first and the last
        measured pod seen bound on the watch)."""
        m = self.measured
        attempt_name, attempt = histogram_delta(m.after, m.before, ATTEMPT_METRICS[self.scheduler])
        _, algorithm = histogram_delta(m.after, m.before, ALGORITHM_METRICS[self.scheduler])
        return E2EResult(
            workload=self.wl.name,
            scheduler=self.scheduler,
            scale=scale,
            node_scale=node_scale,
            nodes=self.wl.nodes,
            measured_pods=len(m.pods),
            scheduled=m.scheduled,
            seconds=round(m.seconds, 3),
            pods_per_second=round((m.scheduled - 1) / m.seconds, 1) if m.seconds > 0 else 0.0,
            pods_per_second_from_release=round(m.scheduled / (m.first_bind_seconds + m.seconds), 1)
            if m.scheduled and m.first_bind_seconds + m.seconds > 0
            else 0.0,
            first_bind_seconds=round(m.first_bind_seconds, 3),
            attempt_p50_ms=round(attempt.quantile(0.5) * 1000, 2),
            attempt_p90_ms=round(attempt.quantile(0.9) * 1000, 2),
            attempt_p99_ms=round(attempt.quantile(0.99) * 1000, 2),
            algorithm_p50_ms=round(algorithm.quantile(0.5) * 1000, 2),
            algorithm_p99_ms=round(algorithm.quantile(0.99) * 1000, 2),
            peak_rss_mib=round(self.peak_rss_mib, 1),
            qps=self.qps,
            burst=self.burst,
            attempt_metric=attempt_name,
            attempts=int(attempt.count),
            create_pods_per_second=round(len(m.pods) / m.creating_seconds, 1) if m.creating_seconds else 0.0,
            creation=CREATION,
            events_by_last_bind=m.events_by_last_bind,
            deleted_by_last_bind=m.deleted_by_last_bind,
            deleted_after_first_bind=m.deleted_after_first_bind,
            scheduler_cpu_seconds=_cpu(m.cpu_by_last_bind, "scheduler"),
            apiserver_cpu_seconds=_cpu(m.cpu_by_last_bind, "kube-apiserver"),
            etcd_cpu_seconds=_cpu(m.cpu_by_last_bind, "etcd"),
            setup_seconds=round(setup_seconds, 1),
            round=round_number,
            machine=machine(),
        )


def _cpu(used: dict[str, float], name: str) -> float:
    return round(used[name], 2) if name in used and not math.isnan(used[name]) else math.nan


def find_e2e_assets(schedulers: Sequence[str]) -> Path:
    """The binaries' directory for a run of `schedulers` (`KUBEBUILDER_ASSETS`); raises MissingAssetsError."""
    kube_scheduler = ("kube-scheduler",) if KUBE_SCHEDULER in schedulers else ()
    return find_assets(CONTROL_PLANE_BINARIES + kube_scheduler)


def run_one(
    wl: Workload,
    scheduler: str,
    *,
    assets: Path,
    scale: float = 1.0,
    node_scale: float = 1.0,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    policies: Sequence[str] | None = None,
    threads: int = CREATE_THREADS,
    progress: Callable[[str], None] | None = None,
    round_number: int = 1,
    profile: Path | None = None,
) -> E2EResult:
    """Run `wl` (scaled) against a fresh control plane from `assets` with `scheduler`; measure the measured ops.

    `profile`: a py-spy output file for the scheduler process (see `Profiler`).
    """
    import urllib3

    # the harness's kubeconfig skips TLS verification on purpose (loopback, throwaway certificates)
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    started = time.monotonic()
    run = WorkloadRun(
        wl.scaled(scale, node_scale),
        scheduler,
        assets=assets,
        qps=qps,
        burst=burst,
        policies=policies or [str(shipped.default_policy())],
        threads=threads,
        say=progress or (lambda _text: None),
        profile=profile,
    )
    run.run()
    return run.result(scale, node_scale, time.monotonic() - started - run.measured.seconds, round_number)


def create_node(client: Any, obj: KubeObject, status: KubeObject) -> None:
    """Create a Node, then set its status (Ready, capacity: ignored on create) through the subresource."""
    client.request("POST", "/api/v1/nodes", body=obj)
    client.request(
        "PATCH",
        f"/api/v1/nodes/{obj['metadata']['name']}/status",
        body={"status": status},
        content_type="application/merge-patch+json",
    )


def _create_nodes(client: Any, op: CreateNodes, first_index: int, threads: int) -> None:
    def create(item: tuple[KubeObject, KubeObject]) -> None:
        create_node(client, *item)

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
    assets: Path,
    schedulers: Sequence[str] = SCHEDULERS,
    scale: float = 1.0,
    node_scale: float = 1.0,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    policies: Sequence[str] | None = None,
    threads: int = CREATE_THREADS,
    progress: Callable[[str], None] | None = None,
    on_result: Callable[[E2EResult], Any] | None = None,
    rounds: int = 1,
    profile_dir: Path | None = None,
) -> list[E2EResult]:
    """Every workload with every scheduler, `rounds` times, one fresh control plane each; the results in order.

    The schedulers alternate (`round_order`): round 1 runs them in the given order, round 2 reversed, ...
    `profile_dir`: one py-spy file per scheduler run, `<workload>-<scheduler>-r<round>.txt` (raw stacks).
    """
    results = []
    for round_number in range(1, rounds + 1):
        for wl, scheduler in round_order(workloads, schedulers, round_number):
            profile = None
            if profile_dir is not None:
                profile_dir.mkdir(parents=True, exist_ok=True)
                stem = f"{wl.name.replace('/', '-')}-{scheduler}-r{round_number}"
                profile = profile_dir / f"{stem}.txt"
            result = run_one(
                wl,
                scheduler,
                assets=assets,
                scale=scale,
                node_scale=node_scale,
                qps=qps,
                burst=burst,
                policies=policies,
                threads=threads,
                progress=progress,
                round_number=round_number,
                profile=profile,
            )
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def round_order(
    workloads: Sequence[Workload], schedulers: Sequence[str], round_number: int
) -> list[tuple[Workload, str]]:
    """The (workload, scheduler) runs of round `round_number` (1-based): every workload in turn, its
    schedulers in the given order in odd rounds and reversed in even ones (so neither always goes first)."""
    order = list(schedulers) if round_number % 2 == 1 else list(reversed(schedulers))
    return [(wl, scheduler) for wl in workloads for scheduler in order]


def parse_schedulers(text: str) -> tuple[str, ...]:
    """`kube-scheduler,policyd` -> the schedulers in that order; raises ValueError on unknown names."""
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [n for n in names if n not in SCHEDULERS]
    if unknown or not names:
        raise ValueError(
            f"unknown scheduler(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(SCHEDULERS)}"
        )
    return names
