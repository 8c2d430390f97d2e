"""The event recorder's writes: one Event is written one request at a time, so an update never reaches
the API server before the Event's create, and counts recorded meanwhile go out with the next update."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from policyd.backends.kube import events
from policyd.backends.kube.events import EventRecorder
from policyd.scheduler.metrics import SchedulerMetrics
from tests.unit.backends.scripted_http import Handler, Server, client_for, json_reply

POD = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}}


class _Api:
    """Holds every request until released; records what arrived, in order; answers 201 with {}."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Condition()
        self.arrived: list[tuple[str, str, dict[str, object]]] = []

    def handler(self, conn: socket.socket, request: bytes) -> bool:
        line, _, rest = request.partition(b"\r\n")
        method, path = line.decode().split()[:2]
        with self.lock:
            self.arrived.append((method, path, json.loads(rest.partition(b"\r\n\r\n")[2] or b"{}")))
            self.lock.notify_all()
        self.release.wait(10)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}")
        return True


def _wait(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@contextlib.contextmanager
def held(serve: Callable[[list[Handler]], Server], **kwargs: int) -> Iterator[tuple[_Api, EventRecorder]]:
    """A recorder whose writes the API holds until the block ends; then released and flushed."""
    api = _Api()
    rec = EventRecorder(client_for(serve([api.handler] * 10)), **kwargs)  # type: ignore[arg-type]
    try:
        yield api, rec
    finally:
        api.release.set()
        assert rec.flush(10)
        rec.stop()


def arrived(api: _Api, n: int) -> None:
    with api.lock:
        assert api.lock.wait_for(lambda: len(api.arrived) == n, 5)


def test_equal_events_recorded_while_the_create_is_in_flight_go_out_as_one_later_update(
    serve: Callable[[list[Handler]], Server],
) -> None:
    with held(serve, connections=8) as (api, rec):
        for _ in range(5):
            rec.failed_scheduling(POD, "0/1 nodes are available: 1 Insufficient cpu.")
        arrived(api, 1)
        assert _wait(lambda: rec._loop.pending() == 1)  # the four others were recorded: no request yet
        assert len(api.arrived) == 1
    (post_method, post_path, created), (patch_method, patch_path, update) = api.arrived
    assert (post_method, post_path) == ("POST", "/api/v1/namespaces/ns/events")
    assert created["count"] == 1 and created["reason"] == "FailedScheduling"
    name = created["metadata"]["name"]  # type: ignore[index]
    assert (patch_method, patch_path) == ("PATCH", f"/api/v1/namespaces/ns/events/{name}")
    assert update["count"] == 5
    assert rec.written == 2 and rec.dropped == 0


def test_different_events_are_in_flight_together_given_connections(
    serve: Callable[[list[Handler]], Server],
) -> None:
    with held(serve, connections=2) as (api, rec):
        rec.failed_scheduling(POD, "0/1 nodes are available: 1 Insufficient cpu.")
        rec.scheduled(POD, "node-1")
        arrived(api, 2)
    assert sorted(body["reason"] for _, _, body in api.arrived) == ["FailedScheduling", "Scheduled"]


def test_by_default_one_event_write_is_in_flight_at_a_time(serve: Callable[[list[Handler]], Server]) -> None:
    with held(serve) as (api, rec):
        rec.failed_scheduling(POD, "0/1 nodes are available: 1 Insufficient cpu.")
        rec.scheduled(POD, "node-1")
        arrived(api, 1)
        assert _wait(lambda: rec._loop.pending() == 2)  # both recorded; the second waits its turn
        assert len(api.arrived) == 1
    assert [body["reason"] for _, _, body in api.arrived] == ["FailedScheduling", "Scheduled"]


def test_a_full_queue_drops_new_events_and_the_metrics_count_them(
    serve: Callable[[list[Handler]], Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond `MAX_QUEUED` waiting events new ones are dropped (as client-go's broadcaster drops when
    its queue is full); the drops, the writes and the backlog are exported as metrics."""
    monkeypatch.setattr(events, "MAX_QUEUED", 3)
    metrics = SchedulerMetrics()
    with held(serve) as (api, rec):
        metrics.watch_events(rec.stats)
        pods = [
            {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u-{i}"}}
            for i in range(5)
        ]
        for pod in pods:
            rec.scheduled(pod, "node-1")
        arrived(api, 1)
        assert rec.stats() == (0, 0, 2, 3)
        assert sample(metrics, "policyd_events_queued") == 3
        assert sample(metrics, "policyd_events_dropped_total", reason="queue_full") == 2
    assert [body["involvedObject"]["name"] for _, _, body in api.arrived] == ["p0", "p1", "p2"]  # type: ignore[index]
    assert sample(metrics, "policyd_event_writes_total") == 3
    assert sample(metrics, "policyd_events_dropped_total", reason="rate_limit") == 0
    assert sample(metrics, "policyd_events_queued") == 0


def sample(metrics: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def _unanswered(_conn: socket.socket, _request: bytes) -> bool:
    return False  # the connection closes without an answer: the write did not reach the API server


def _created(conn: socket.socket, _request: bytes) -> bool:
    conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}")
    return True


def test_a_write_that_did_not_reach_the_api_server_is_sent_again_later(
    serve: Callable[[list[Handler]], Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As client-go's sink: an Event lost to an unreachable API server (a restart) is written once it
    answers, the first retry at a random point of the interval, the next ones an interval apart."""
    monkeypatch.setattr(events, "RETRY_SECONDS", 0.2)
    server = serve([_unanswered, _unanswered, _created])
    rec = EventRecorder(client_for(server))  # type: ignore[arg-type]
    try:
        start = time.monotonic()
        rec.scheduled(POD, "node-1")
        assert rec.flush(10)
        assert time.monotonic() - start >= 0.2  # the second retry waited a whole interval
        assert len(server.requests) == 3 and all(r.startswith(b"POST ") for r in server.requests)
        assert rec.stats()[0] == 1
    finally:
        rec.stop()


def _writes_one_event(server: Server) -> int:
    """Record one event against `server`, wait until it is written or given up; the writes counted."""
    rec = EventRecorder(client_for(server))  # type: ignore[arg-type]
    try:
        rec.scheduled(POD, "node-1")
        assert rec.flush(10)
        return rec.stats()[0]
    finally:
        rec.stop()


def test_an_answer_even_an_error_is_final_and_tries_are_bounded(
    serve: Callable[[list[Handler]], Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "RETRY_SECONDS", 0.01)
    monkeypatch.setattr(events, "MAX_TRIES", 3)
    refused = b'{"kind":"Status","code":500,"message":"etcd is down"}'
    error = serve([json_reply(500, refused), _created])
    assert _writes_one_event(error) == 0 and len(error.requests) == 1
    lost = serve([_unanswered] * 5)
    assert _writes_one_event(lost) == 0 and len(lost.requests) == 3
