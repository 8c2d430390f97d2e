"""New connections to the real API server resume the TLS session of an earlier one."""

from __future__ import annotations

import threading

from policyd.backends.kube.client import ApiError, KubeClient
from policyd.backends.kube.multiplex import RequestLoop
from policyd.backends.kube.transport import Connection, TLSSessions
from policyd.envtest import LocalControlPlane


def _fresh_client(kube: KubeClient) -> KubeClient:
    """The fixture's client may have handshaken already; count from a client of its own."""
    return KubeClient(kube.configuration)


def test_second_connection_resumes_the_first_ones_session(kube: KubeClient) -> None:
    client = _fresh_client(kube)
    try:
        sessions = client.endpoint.sessions
        assert isinstance(sessions, TLSSessions)
        assert client.request("GET", "/version")["major"] == "1"
        assert (sessions.full, sessions.resumed) == (1, 0)
        conn = Connection(client.endpoint, 10.0)  # a second connection, as a watch opens
        try:
            assert conn.sock.session_reused  # type: ignore[attr-defined]
        finally:
            conn.close()
        assert (sessions.full, sessions.resumed) == (1, 1)
    finally:
        client.close()


def test_a_burst_on_the_request_loop_resumes_every_connection_after_the_first(kube: KubeClient) -> None:
    client = _fresh_client(kube)
    loop = RequestLoop(client, name="test-tls", max_connections=8)
    answered: list[ApiError | None] = []
    lock = threading.Lock()

    def done(_result: object, err: ApiError | None) -> None:
        with lock:
            answered.append(err)

    try:
        loop.submit("GET", "/version", done)  # the first connection: a full handshake
        assert loop.wait_idle(30)
        for _ in range(40):  # more at once than one connection carries: up to 8 are opened
            loop.submit("GET", "/api/v1/namespaces/default/pods", done)
        assert loop.wait_idle(30)
    finally:
        loop.stop()
        client.close()
    assert answered == [None] * 41
    sessions = client.endpoint.sessions
    assert sessions.full == 1
    assert sessions.resumed >= 2


def test_a_session_a_restarted_server_does_not_know_gives_a_full_handshake(
    kube: KubeClient, control_plane: LocalControlPlane
) -> None:
    client = _fresh_client(kube)
    try:
        client.request("GET", "/version")
        control_plane.restart_apiserver()  # new session ticket keys
        assert client.request("GET", "/version")["major"] == "1"  # on a new connection
        sessions = client.endpoint.sessions
        assert (sessions.full, sessions.resumed) == (2, 0)
    finally:
        client.close()
