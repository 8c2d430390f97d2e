"""The bind worker pool: workers started up front, completions, shutdown after the submitted binds."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from policyd.scheduler.binder import Binder


class Pod:
    def __init__(self, key: str) -> None:
        self.key = key


class Backend:
    binds_in_memory = False

    def __init__(self, fail: frozenset[str] = frozenset()) -> None:
        self.fail = fail
        self.bound: list[tuple[str, str]] = []
        self.gate = threading.Event()
        self.gate.set()

    def bind(self, pod: Any, node: str) -> None:
        self.gate.wait(5)
        if pod.key in self.fail:
            raise RuntimeError("rejected")
        self.bound.append((pod.key, node))


def names() -> set[str]:
    return {t.name for t in threading.enumerate()}


def test_workers_start_before_the_first_bind_and_stop_at_shutdown() -> None:
    before = names()
    binder = Binder(Backend(), workers=3)
    started = names() - before
    assert len([n for n in started if n.startswith("bind_")]) == 3
    binder.shutdown()
    assert not (names() - before)


def test_submitted_binds_finish_before_shutdown_returns() -> None:
    backend = Backend(fail=frozenset({"ns/b"}))
    backend.gate.clear()
    binder = Binder(backend, workers=2)
    results: list[tuple[str, str, str | None]] = []
    lock = threading.Lock()

    def done(pod: Any, node: str, error: Exception | None) -> None:
        with lock:
            results.append((pod.key, node, None if error is None else str(error)))

    for key in ("ns/a", "ns/b", "ns/c", "ns/d"):
        binder.submit(Pod(key), "n1", done)
    assert binder.in_flight() == 4
    backend.gate.set()
    binder.shutdown()
    assert sorted(results) == [
        ("ns/a", "n1", None),
        ("ns/b", "n1", "rejected"),
        ("ns/c", "n1", None),
        ("ns/d", "n1", None),
    ]
    assert binder.in_flight() == 0 and binder.wait_idle(0)
    with pytest.raises(RuntimeError):
        binder.submit(Pod("ns/e"), "n1", done)


def test_a_failing_completion_keeps_the_worker() -> None:
    binder = Binder(Backend(), workers=1)
    seen: list[str] = []

    def done(pod: Any, node: str, error: Exception | None) -> None:
        seen.append(pod.key)
        if pod.key == "ns/a":
            raise ValueError("boom")

    binder.submit(Pod("ns/a"), "n1", done)
    binder.submit(Pod("ns/b"), "n1", done)
    assert binder.wait_idle(5)
    assert seen == ["ns/a", "ns/b"]
    binder.shutdown()


def test_no_workers_binds_inline() -> None:
    backend = Backend()
    binder = Binder(backend, workers=0)
    binder.submit(Pod("ns/a"), "n1", lambda pod, node, error: None)
    assert backend.bound == [("ns/a", "n1")]
    binder.shutdown()


class AsyncBackend(Backend):
    """Binds without a thread per bind: completions come later, from the back-end's own thread."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str, Any]] = []

    def bind_async(self, pod: Any, node: str, done: Any) -> None:
        self.sent.append((pod.key, node, done))

    def bind_volumes(self, pod: Any, bindings: Any) -> None:
        pass

    def answer(self, error: Exception | None = None) -> None:
        key, node, done = self.sent.pop(0)
        threading.Thread(target=done, args=(error,), name="backend-loop").start()


class Volumes:
    def __init__(self, empty: bool) -> None:
        self.empty = empty


def test_async_binds_skip_the_workers_and_volume_binds_use_them() -> None:
    backend = AsyncBackend()
    binder = Binder(backend, workers=1)
    results: list[tuple[str, str | None, str]] = []
    finished = threading.Condition()

    def done(pod: Any, node: str, error: Exception | None) -> None:
        with finished:
            results.append((pod.key, None if error is None else str(error), threading.current_thread().name))
            finished.notify_all()

    binder.submit(Pod("ns/a"), "n1", done)
    binder.submit(Pod("ns/b"), "n1", done, Volumes(empty=True))
    binder.submit(Pod("ns/c"), "n2", done, Volumes(empty=False))  # PreBind blocks: a worker's job
    assert [key for key, _, _ in backend.sent] == ["ns/a", "ns/b"]
    assert binder.wait_idle(0) is False and binder.in_flight() == 3
    with finished:
        assert finished.wait_for(lambda: len(results) == 1, 5)
    assert results == [("ns/c", None, "bind_0")] and backend.bound == [("ns/c", "n2")]
    backend.answer()
    backend.answer(RuntimeError("conflict"))
    assert binder.wait_idle(5)
    assert sorted(results) == [
        ("ns/a", None, "backend-loop"),
        ("ns/b", "conflict", "backend-loop"),
        ("ns/c", None, "bind_0"),
    ]
    binder.shutdown()


def test_an_async_bind_that_cannot_be_sent_completes_with_its_error() -> None:
    class Stopped(AsyncBackend):
        def bind_async(self, pod: Any, node: str, done: Any) -> None:
            raise RuntimeError("request loop stopped")

    binder = Binder(Stopped(), workers=1)
    errors: list[str] = []
    binder.submit(Pod("ns/a"), "n1", lambda pod, node, error: errors.append(str(error)))
    assert errors == ["request loop stopped"] and binder.in_flight() == 0
    binder.shutdown()
