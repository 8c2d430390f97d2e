"""The e2e harness's kubelet stand-in: a pod being deleted is finished with grace 0, once, all at once."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from policyd.bench.e2e import PodTracker
from tests.unit.backends.scripted_http import Server, client_for


def test_a_pod_being_deleted_is_finished_once_and_deletions_overlap() -> None:
    victims = [f"v{i}" for i in range(8)]
    # every deletion in flight together: a reaper with fewer workers than victims never gets past this
    arrived = threading.Barrier(len(victims), timeout=5)
    bodies: list[tuple[str, dict[str, object]]] = []

    def finish(conn: socket.socket, request: bytes) -> bool:
        head, _, body = request.partition(b"\r\n\r\n")
        arrived.wait()
        bodies.append((head.split(b" ")[1].decode(), json.loads(body)))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        return True

    server = Server([finish] * len(victims))
    tracker = PodTracker(client_for(server))
    try:
        for name in victims:
            pod = {
                "metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}", "deletionTimestamp": "x"}
            }
            tracker.observe(pod)
            tracker.observe(pod)  # seen again (another update): not finished twice
        assert tracker._reaper.wait_idle(10)
    finally:
        tracker._reaper.stop(2.0)
        server.close()
    assert sorted(path for path, _ in bodies) == [f"/api/v1/namespaces/ns/pods/{v}" for v in victims]
    got = {(b["gracePeriodSeconds"], b["preconditions"]["uid"]) for _, b in bodies}  # type: ignore[index]
    assert got == {(0, f"u-{v}") for v in victims}


def test_the_stand_ins_connections_are_opened_before_the_victims_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    count = 6
    monkeypatch.setattr("policyd.bench.e2e.REAPER_CONNECTIONS", count)
    # every GET held until all are in: only `count` connections open at once get past this
    arrived = threading.Barrier(count, timeout=5)

    def version(conn: socket.socket, _request: bytes) -> bool:
        arrived.wait()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        return True

    def finish(conn: socket.socket, _request: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        return True

    server = Server([version] * count + [finish] * count)
    tracker = PodTracker(client_for(server))
    try:
        tracker.connect_reaper(timeout=10)
        assert server.connections == count
        for i in range(count):
            tracker.observe({"metadata": {"namespace": "ns", "name": f"v{i}", "deletionTimestamp": "x"}})
        assert tracker._reaper.wait_idle(10)
    finally:
        tracker._reaper.stop(2.0)
        server.close()
    assert server.connections == count  # the deletions went on the connections already open
    deletes = [r.split(b" ")[1].decode() for r in server.requests if r.startswith(b"DELETE")]
    assert sorted(deletes) == [f"/api/v1/namespaces/ns/pods/v{i}" for i in range(count)]
