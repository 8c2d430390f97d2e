"""The schedulers under test as processes: kube-scheduler 1.20 and `policyd run`, with equal client QPS/burst.

kube-scheduler reads a v1beta1 KubeSchedulerConfiguration (clientConnection qps/burst, leader election
off) and serves /healthz and /metrics on its deprecated insecure port (HTTPS off: no authn/authz
delegation is needed on loopback). policyd reads a PolicydConfiguration (clientConnection qps/burst,
leader election off, serving on a free loopback port). Each process gets its own session and dies
with the benchmark process (PR_SET_PDEATHSIG), so a killed benchmark leaves no scheduler behind.

`SchedulerProcess.paused()` stops a scheduler (SIGSTOP) while the benchmark creates the measured pods
and continues it (SIGCONT) afterwards, so the pods are all there when it resumes. Nothing in either
scheduler times out meanwhile: leader election is off in both configurations (no lease to renew), and
a watch the API server closes because the stopped client does not read it is resumed or re-listed
by the client's reflector (kube-scheduler) or informer (policyd) as after any dropped watch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from policyd.bench.e2e_report import KUBE_SCHEDULER, POLICYD
from policyd.envtest import die_with_parent, free_port

SCHEDULERS = (KUBE_SCHEDULER, POLICYD)
READY_TIMEOUT = 120.0


class BenchError(RuntimeError):
    """A run could not be completed (a process failed, pods did not get scheduled in time)."""


def kube_scheduler_config(kubeconfig: str, qps: float, burst: int, port: int, extra: str = "") -> str:
    """kube-scheduler 1.20's v1beta1 configuration: one client QPS/burst, no leader election, HTTP metrics.

    `extra` is appended as is (top-level YAML, e.g. a `profiles:` list).
    """
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
    ) + extra


def kube_scheduler_command(binary: str, config: str, port: int, extra_args: Sequence[str] = ()) -> list[str]:
    """The kube-scheduler command line (insecure port for /healthz and /metrics, no HTTPS)."""
    return [
        binary,
        f"--config={config}",
        "--secure-port=0",
        f"--port={port}",
        "--address=127.0.0.1",
        *extra_args,
    ]


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
        # plain HTTP on loopback: the bench reads /metrics as it reads kube-scheduler's insecure port
        "serving": {"bindAddress": "127.0.0.1", "port": port, "insecure": True},
    }


def policyd_command(config: str) -> list[str]:
    """The `policyd run` command line (this interpreter, this package)."""
    return [sys.executable, "-m", "policyd.cli", "run", "--config", config]


def pod_scheduler_name(scheduler: str) -> str:
    """`spec.schedulerName` of the pods a scheduler under test serves."""
    return "default-scheduler" if scheduler == KUBE_SCHEDULER else POLICYD


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
                cwd=self.log_path.parent,
                start_new_session=True,
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
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

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The process stopped (SIGSTOP) while the block runs; continued (SIGCONT) after it, also on errors."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            raise BenchError(f"{self.scheduler} is not running: cannot pause it")
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)

    def peak_rss_mib(self) -> float:
        """VmHWM of the process (MiB; 0 when unknown)."""
        return peak_rss_of(self.proc.pid) if self.proc is not None else 0.0

    def cpu_seconds(self) -> float:
        """CPU time the process has used so far (seconds; nan when unknown)."""
        return cpu_seconds_of(self.proc.pid) if self.proc is not None else math.nan

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        proc, self.proc = self.proc, None
        stop_process(proc, signal.SIGTERM, 10.0)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the process's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Profiler:
    """py-spy recording one running scheduler process (all threads, idle ones left out) into a file.

    Attached by pid after the scheduler is ready, so the scheduler's own command line, start-up
    and peak RSS are those of an unprofiled run; stopped with SIGINT (py-spy then writes its output)
    before the scheduler is stopped. The output format follows the file name: `.svg` a flame graph,
    anything else py-spy's `raw` collapsed stacks (one `frame;frame;... count` line per stack).
    """

    def __init__(self, pid: int, output: Path, rate: int = 25) -> None:
        self.pid = pid
        self.output = output
        self.rate = rate
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self, binary: str) -> list[str]:
        """The py-spy command line."""
        fmt = "flamegraph" if self.output.suffix == ".svg" else "raw"
        return [
            binary, "record", "--pid", str(self.pid), "--threads", "--rate", str(self.rate),
            "--format", fmt, "--output", str(self.output), "--nonblocking",
        ]  # fmt: skip

    def start(self) -> None:
        """Attach py-spy (raises BenchError when it is not installed)."""
        binary = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        if binary is None:
            raise BenchError(
                "--profile needs py-spy on PATH or next to this interpreter (pip install py-spy)"
            )
        with open(self.output.with_suffix(".log"), "ab") as log:
            self.proc = subprocess.Popen(
                self.command(binary),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
            )

    def stop(self) -> None:
        """SIGINT (py-spy writes its output), then wait for it (SIGKILL after 60 s)."""
        proc, self.proc = self.proc, None
        stop_process(proc, signal.SIGINT, 60.0)


def stop_process(proc: subprocess.Popen[bytes] | None, sig: signal.Signals, grace: float) -> None:
    """Send `sig` to a running `proc` and wait for it; SIGKILL when it is still running after `grace` s."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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


def cpu_seconds_of(pid: int) -> float:
    """CPU time (user + system, in seconds) process `pid` has used so far, from /proc; nan when unavailable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            text = f.read()
        # the fields after the command (in parentheses, which may hold spaces): utime and stime are
        # the 14th and 15th of the whole line
        fields = text[text.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return math.nan


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
    kube_scheduler_extra_config: str = "",
    kube_scheduler_extra_args: Sequence[str] = (),
) -> SchedulerProcess:
    """The process for `scheduler` (kube-scheduler from `assets`, or `policyd run`), not started.

    kube-scheduler's configuration gets `kube_scheduler_extra_config` appended (e.g. profiles) and its
    command line `kube_scheduler_extra_args` (e.g. `-v=10`): the differential harness runs it so.
    """
    port = free_port()
    if scheduler == KUBE_SCHEDULER:
        config = workdir / "kube-scheduler.yaml"
        text = kube_scheduler_config(kubeconfig, qps, burst, port, kube_scheduler_extra_config)
        config.write_text(text, encoding="utf-8")
        args = kube_scheduler_command(
            str(assets / "kube-scheduler"), str(config), port, kube_scheduler_extra_args
        )
        return SchedulerProcess(scheduler, args, port, workdir / "kube-scheduler.log", "/healthz")
    if scheduler == POLICYD:
        config = workdir / "policyd.yaml"
        doc = policyd_config(kubeconfig, qps, burst, port, [str(Path(p).resolve()) for p in policies])
        config.write_text(json.dumps(doc, indent=2), encoding="utf-8")
        return SchedulerProcess(
            scheduler, policyd_command(str(config)), port, workdir / "policyd.log", "/readyz"
        )
    raise ValueError(f"unknown scheduler {scheduler!r} (one of {', '.join(SCHEDULERS)})")
