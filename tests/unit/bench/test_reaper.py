"""The e2e harness's kubelet stand-in: a pod being deleted is finished with grace 0, once, at once."""

from __future__ import annotations

import json
import socket
import threading

from policyd.bench.e2e import PodTracker
from tests.unit.backends.scripted_http import Server, client_for


def test_a_pod_being_deleted_is_finished_once_and_deletions_overlap() -> None:
    arrived = threading.Barrier(3, timeout=5)
    bodies: list[tuple[str, dict[str, object]]] = []

    def finish(conn: socket.socket, request: bytes) -> bool:
        head, _, body = request.partition(b"\r\n\r\n")
        bodies.append((head.split(b" ")[1].decode(), json.loads(body)))
        arrived.wait()  # three victims' deletions in flight together, not one after another
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        return True

    server = Server([finish] * 3)
    tracker = PodTracker(client_for(server))
    try:
        for name in ("v1", "v2", "v3"):
            pod = {
                "metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}", "deletionTimestamp": "x"}
            }
            tracker.observe(pod)
            tracker.observe(pod)  # seen again (another update): not finished twice
        assert tracker._reaper.wait_idle(10)
    finally:
        tracker._reaper.stop(2.0)
        server.close()
    assert sorted(path for path, _ in bodies) == [f"/api/v1/namespaces/ns/pods/v{i}" for i in (1, 2, 3)]
    assert {(b["gracePeriodSeconds"], b["preconditions"]["uid"]) for _, b in bodies} == {  # type: ignore[index]
        (0, "u-v1"),
        (0, "u-v2"),
        (0, "u-v3"),
    }
