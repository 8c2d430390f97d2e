"""The API back-end's writes: a victim's deletion is never queued behind status patches, and one pod's
status patches are sent in order, one at a time, while different pods' are in flight together."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from policyd.backends.kube.api_backend import ApiBackend
from tests.unit.backends.scripted_http import Handler, Server, client_for


@dataclass
class _Pod:
    key: str
    uid: str = "u"


class _Api:
    """Holds every request `held` picks (by method and path; default: PATCHes) until released, answers
    the others at once; records what arrived, in order."""

    def __init__(self, held: Callable[[str, str], bool] = lambda method, _path: method == "PATCH") -> None:
        self.held = held
        self.release = threading.Event()
        self.lock = threading.Condition()
        self.arrived: list[tuple[str, str, bytes]] = []

    def handler(self, conn: socket.socket, request: bytes) -> bool:
        line, _, rest = request.partition(b"\r\n")
        method, path = line.decode().split()[:2]
        with self.lock:
            self.arrived.append((method, path, rest.partition(b"\r\n\r\n")[2]))
            self.lock.notify_all()
        if self.held(method, path):
            self.release.wait(10)
        if path.endswith(("/gone", "/broken")):
            status = b"404 Not Found" if path.endswith("/gone") else b"500 Internal Server Error"
            conn.sendall(b"HTTP/1.1 %s\r\nContent-Length: 2\r\n\r\n{}" % status)
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        return True

    def wait_for(self, predicate: Callable[[list[tuple[str, str, bytes]]], bool]) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: predicate(self.arrived), 5), self.arrived


def test_deletions_and_other_pods_patches_do_not_wait_for_a_pods_earlier_patch(
    serve: Callable[[list[Handler]], Server],
) -> None:
    api = _Api()
    server = serve([api.handler] * 10)
    backend = ApiBackend(client_for(server))
    try:
        a, b = _Pod("ns/a"), _Pod("ns/b")
        backend.patch_pod_scheduled(a, {"status": "False", "message": "0/3 nodes are available"})
        backend.set_nominated_node(a, "node-1")  # after a's first patch is answered, not before
        backend.patch_pod_scheduled(b, {"status": "False", "message": "m"})
        backend.delete_victims([_Pod("ns/victim")], False)  # type: ignore[list-item]
        api.wait_for(lambda got: len(got) == 3)
        paths = {(m, p) for m, p, _ in api.arrived}
        assert paths == {
            ("PATCH", "/api/v1/namespaces/ns/pods/a/status"),
            ("PATCH", "/api/v1/namespaces/ns/pods/b/status"),
            ("DELETE", "/api/v1/namespaces/ns/pods/victim"),
        }
        delete = next(body for m, _, body in api.arrived if m == "DELETE")
        # the victim's own grace period (none given), and only the pod we meant
        assert json.loads(delete) == {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": "u"},
        }
        assert not backend.flush(0.2)  # the patches are still held
    finally:
        api.release.set()
        assert backend.flush(10)
    a_patches = [json.loads(body)["status"] for m, p, body in api.arrived if p.endswith("/a/status")]
    assert [sorted(s) for s in a_patches] == [["conditions"], ["nominatedNodeName"]]
    assert a_patches[0]["conditions"][0]["message"] == "0/3 nodes are available"
    assert a_patches[1] == {"nominatedNodeName": "node-1"}
    backend.stop()


def test_victims_are_deleted_one_after_another_in_order(serve: Callable[[list[Handler]], Server]) -> None:
    # kube-scheduler deletes a preemptor's victims in sequence, so the watch delivers their deletions
    # in that order; a victim already gone, or a failed deletion, does not hold back the next
    api = _Api(held=lambda method, path: method == "DELETE" and path.endswith("/first"))
    server = serve([api.handler] * 10)
    backend = ApiBackend(client_for(server))
    try:
        victims = [_Pod("ns/first"), _Pod("ns/gone"), _Pod("ns/broken"), _Pod("ns/last")]
        backend.delete_victims(victims, True)  # type: ignore[arg-type]
        api.wait_for(lambda got: len(got) == 1)
        assert not backend.flush(0.3)  # the first deletion is held: nothing else was sent
        assert [p for _, p, _ in api.arrived] == ["/api/v1/namespaces/ns/pods/first"]
    finally:
        api.release.set()
        assert backend.flush(10)
    assert [(m, p.rsplit("/", 1)[1]) for m, p, _ in api.arrived] == [
        ("DELETE", "first"),
        ("DELETE", "gone"),
        ("DELETE", "broken"),
        ("DELETE", "last"),
    ]
    backend.stop()


def test_victims_whose_order_cannot_matter_are_deleted_together(
    serve: Callable[[list[Handler]], Server],
) -> None:
    api = _Api(held=lambda method, path: method == "DELETE" and path.endswith("/first"))
    server = serve([api.handler] * 10)
    backend = ApiBackend(client_for(server))
    try:
        backend.delete_victims([_Pod("ns/first"), _Pod("ns/second")], False)  # type: ignore[list-item]
        api.wait_for(lambda got: len(got) == 2)  # the second is sent while the first is held
    finally:
        api.release.set()
        assert backend.flush(10)
    backend.stop()
