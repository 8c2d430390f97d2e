"""Asynchronous binding (kube-scheduler's binding cycle goroutines).

kube-scheduler binds each pod in a goroutine of its own, bounded only by its client's QPS. A back-end
that can send binds without blocking (`AsyncBinds`: the API back-end's request loop,
policyd.backends.kube.multiplex) gets every bind at once; its answers come back on its own thread.
Otherwise, and for pods whose volumes PreBind must bind first (a wait for the PV controller), a bind is
a thread blocked on it, so the pool must cover the binds in flight: under a burst on a loaded API
server a bind takes tens of milliseconds, and 16 workers capped policyd at 16 / 0.03 s, about 500
binds/s (`policyd bench --mode e2e`, SchedulingBasic/500: 64 workers bound 20-30 % more pods/s than
16; 192 no more than 64). Each blocking bind costs the process several GIL hand-offs, which the
request loop does not.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from policyd.scheduler.backend import AsyncBinds, ClusterBackend
from policyd.scheduler.cluster.volume_store import PodVolumeBindings
from policyd.scheduler.snapshot import PodInfoLike

log = logging.getLogger(__name__)

BindDone = Callable[[PodInfoLike, str, Exception | None], None]
_Job = tuple[PodInfoLike, str, BindDone, PodVolumeBindings | None]

DEFAULT_BIND_WORKERS = 64


class Binder:
    """Binds assumed pods: through the back-end's own non-blocking binds when it has them (`AsyncBinds`),
    else (and for pods with volumes to bind first) by `backend.bind` on `workers` threads (0: inline,
    for tests)."""

    def __init__(self, backend: ClusterBackend, workers: int = DEFAULT_BIND_WORKERS) -> None:
        self._backend = backend
        self._bind_async = backend.bind_async if isinstance(backend, AsyncBinds) and workers else None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._in_flight = 0
        self._closed = False
        # every worker starts now: a thread started on demand (ThreadPoolExecutor) makes the submitting
        # thread wait until it runs, a GIL round trip per worker paid by the scheduling thread at the
        # start of a burst, when the first binds matter most
        self._workers = [
            threading.Thread(target=self._work, name=f"bind_{i}", daemon=True) for i in range(workers)
        ]
        for worker in self._workers:
            worker.start()

    def submit(
        self, pod: PodInfoLike, node: str, done: BindDone, volumes: PodVolumeBindings | None = None
    ) -> None:
        """Bind `pod` to `node` in the background (after PreBind binds its `volumes`); `done(pod, node,
        error)` is called afterwards."""
        if self._closed:
            raise RuntimeError("binder shut down")
        with self._idle:
            self._in_flight += 1
        if self._bind_async is not None and (volumes is None or volumes.empty):
            try:
                self._bind_async(pod, node, lambda error: self._finish(pod, node, done, error))
            except Exception as exc:  # noqa: BLE001 - not sent (the back-end is stopping): requeue the pod
                self._finish(pod, node, done, exc)
        elif self._workers:
            self._jobs.put((pod, node, done, volumes))
        else:
            self._run(pod, node, done, volumes)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._run(*job)
            except Exception:  # a failing completion must not take the worker with it
                log.exception("bind completion failed pod=%s node=%s", job[0].key, job[1])

    def _run(self, pod: PodInfoLike, node: str, done: BindDone, volumes: PodVolumeBindings | None) -> None:
        error: Exception | None = None
        try:
            if volumes is not None and not volumes.empty:
                self._backend.bind_volumes(pod, volumes)  # PreBind (VolumeBinding)
            self._backend.bind(pod, node)
        except Exception as exc:  # noqa: BLE001 - every failure forgets and requeues the pod
            error = exc
        self._finish(pod, node, done, error)

    def _finish(self, pod: PodInfoLike, node: str, done: BindDone, error: Exception | None) -> None:
        if error is not None:
            log.warning("bind failed pod=%s node=%s error=%s", pod.key, node, error)
        try:
            done(pod, node, error)
        except Exception:  # a failing completion must not take the worker or the request loop with it
            log.exception("bind completion failed pod=%s node=%s", pod.key, node)
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
        """Finish the submitted binds and stop the workers."""
        if self._closed:
            return
        self._closed = True
        for _ in self._workers:
            self._jobs.put(None)  # after every submitted bind
        for worker in self._workers:
            worker.join()
