"""The API back-end's writes: a victim's deletion is not queued behind status patches."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from policyd.backends.kube.api_backend import ApiBackend


@dataclass
class _Pod:
    key: str
    uid: str = "u"


class _Client:
    """Answers DELETEs at once; holds every PATCH until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.deleted = threading.Event()
        self.calls: list[tuple[str, str]] = []

    def sibling(self, user_agent: str) -> _Client:
        return self

    def close(self) -> None:
        pass

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method, path))
        if method == "PATCH":
            self.release.wait(10)
        if method == "DELETE":
            self.deleted.set()
        return {}


def test_a_victim_is_deleted_while_status_patches_wait() -> None:
    client = _Client()
    backend = ApiBackend(client)  # type: ignore[arg-type]
    try:
        for i in range(3):  # a slow status writer with work queued
            backend.patch_pod_scheduled(_Pod(f"ns/pending-{i}"), {"status": "False", "message": "m"})
        backend.delete_pod(_Pod("ns/victim"), 0)  # type: ignore[arg-type]
        assert client.deleted.wait(5), client.calls
        assert ("DELETE", "/api/v1/namespaces/ns/pods/victim") in client.calls
        assert sum(1 for method, _ in client.calls if method == "PATCH") == 1  # the others still wait
    finally:
        client.release.set()
        assert backend.flush(10)
    assert sum(1 for method, _ in client.calls if method == "PATCH") == 3
