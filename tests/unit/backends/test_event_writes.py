"""The event recorder's writes: one Event is written one request at a time, so an update never reaches
the API server before the Event's create, and counts recorded meanwhile go out with the next update."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

from policyd.backends.kube.events import EventRecorder
from tests.unit.backends.scripted_http import Handler, Server, client_for

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
