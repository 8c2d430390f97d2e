"""Asynchronous binding on a bounded worker pool (kube-scheduler's binding cycle goroutines).

kube-scheduler binds each pod in a goroutine of its own, bounded only by its client's QPS. A worker
here is a thread blocked on one request, so the pool must cover the binds in flight: under a burst on
a loaded API server a bind takes tens of milliseconds (the server's queueing, and the wait for the
GIL while the scheduling thread runs), and 16 workers capped policyd at 16 / 0.03 s, about 500 binds/s,
with pods waiting for a worker most of their attempt (`policyd bench --mode e2e`, SchedulingBasic/500:
64 workers bound 20-30 % more pods/s than 16; 192 no more than 64).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from policyd.scheduler.backend import ClusterBackend
from policyd.scheduler.cluster.volume_store import PodVolumeBindings
from policyd.scheduler.snapshot import PodInfoLike

log = logging.getLogger(__name__)

BindDone = Callable[[PodInfoLike, str, Exception | None], None]

DEFAULT_BIND_WORKERS = 64


class Binder:
    """Runs `backend.bind` for assumed pods on at most `workers` threads (0: inline, for tests)."""

    def __init__(self, backend: ClusterBackend, workers: int = DEFAULT_BIND_WORKERS) -> None:
        self._backend = backend
        self._pool = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bind") if workers > 0 else None
        )
        self._idle = threading.Condition()
        self._in_flight = 0

    def submit(
        self, pod: PodInfoLike, node: str, done: BindDone, volumes: PodVolumeBindings | None = None
    ) -> None:
        """Bind `pod` to `node` in the background (after PreBind binds its `volumes`); `done(pod, node,
        error)` is called afterwards."""
        with self._idle:
            self._in_flight += 1
        if self._pool is None:
            self._run(pod, node, done, volumes)
        else:
            self._pool.submit(self._run, pod, node, done, volumes)

    def _run(self, pod: PodInfoLike, node: str, done: BindDone, volumes: PodVolumeBindings | None) -> None:
        error: Exception | None = None
        try:
            if volumes is not None and not volumes.empty:
                self._backend.bind_volumes(pod, volumes)  # PreBind (VolumeBinding)
            self._backend.bind(pod, node)
        except Exception as exc:  # noqa: BLE001 - every failure forgets and requeues the pod
            log.warning("bind failed pod=%s node=%s error=%s", pod.key, node, exc)
            error = exc
        try:
            done(pod, node, error)
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def in_flight(self) -> int:
        """Binds submitted and not yet finished."""
        with self._idle:
            return self._in_flight

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no bind is in flight; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def shutdown(self) -> None:
        """Finish in-flight binds and stop the workers."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
