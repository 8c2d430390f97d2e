"""The HTTP/1.1 transport against a scripted plain-TCP server on loopback."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import pytest
from kubernetes import client as k8s_client

from policyd.backends.kube.client import (
    ApiError,
    bypasses_proxy,
    endpoint_of,
)
from policyd.backends.kube.transport import (
    ConnectionPool,
    Endpoint,
    TransportError,
    parse_proxy,
    request_head,
)
from policyd.errors import PolicydError
from tests.unit.backends.scripted_http import Handler, Server, client_for, json_reply, reply


def get(pool: ConnectionPool, path: str = "/x") -> tuple[int, bytes]:
    head = request_head("GET", path, {"Host": "h"}, None)
    resp = pool.request("GET", head, None, 5.0)
    return resp.status, resp.body


def test_keep_alive_reuses_one_connection(serve: Callable[[list[Handler]], Server]) -> None:
    server = serve([json_reply(200, b'{"a":1}'), json_reply(200, b'{"a":2}')])
    kube = client_for(server)
    assert kube.request("GET", "/api/v1/nodes", query={"limit": 5, "watch": True}) == {"a": 1}
    assert kube.request("POST", "/api/v1/nodes", body={"metadata": {"name": "n"}}) == {"a": 2}
    assert server.connections == 1
    first, second = server.requests
    assert first.startswith(b"GET /api/v1/nodes?limit=5&watch=true HTTP/1.1\r\n")
    assert b"Authorization: Bearer secret\r\n" in first
    assert second.endswith(b'{"metadata":{"name":"n"}}')
    assert b"Content-Type: application/json\r\n" in second


def test_chunked_body_and_interim_response(serve: Callable[[list[Handler]], Server]) -> None:
    raw = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'4;ext=1\r\n{"a"\r\n3\r\n:1}\r\n0\r\nTrailer: x\r\n\r\n'
    )
    server = serve([reply(raw), json_reply(200, b"{}")])
    pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{server.port}"))
    assert get(pool) == (200, b'{"a":1}')
    assert get(pool) == (200, b"{}")
    assert server.connections == 1


def test_body_to_end_of_connection(serve: Callable[[list[Handler]], Server]) -> None:
    server = serve([reply(b"HTTP/1.0 200 OK\r\n\r\nhello", keep=False), json_reply(200, b"{}")])
    pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{server.port}"))
    assert get(pool) == (200, b"hello")
    assert get(pool) == (200, b"{}")
    assert server.connections == 2


def test_connection_close_is_not_reused(serve: Callable[[list[Handler]], Server]) -> None:
    close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    server = serve([reply(close, keep=False), json_reply(200, b"{}")])
    pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{server.port}"))
    assert get(pool) == (200, b"{}")
    assert get(pool) == (200, b"{}")
    assert server.connections == 2


def test_request_on_a_connection_closed_by_the_server_is_sent_again(
    serve: Callable[[list[Handler]], Server],
) -> None:
    def swallow(conn: socket.socket, _request: bytes) -> bool:
        return False  # closes the kept-alive connection without answering

    server = serve([json_reply(200, b"{}"), swallow, json_reply(200, b'{"again":true}')])
    pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{server.port}"))
    assert get(pool) == (200, b"{}")
    assert get(pool) == (200, b'{"again":true}')
    assert len(server.requests) == 3


def test_fresh_connection_failure_is_an_unreachable_api_error(
    serve: Callable[[list[Handler]], Server],
) -> None:
    def swallow(conn: socket.socket, _request: bytes) -> bool:
        return False

    server = serve([swallow])
    kube = client_for(server)
    with pytest.raises(ApiError) as err:
        kube.request("GET", "/api/v1/pods")
    assert err.value.status == 0 and err.value.reason == "Unreachable"
    assert len(server.requests) == 1


def test_error_status_becomes_api_error(serve: Callable[[list[Handler]], Server]) -> None:
    body = b'{"kind":"Status","reason":"Conflict","message":"pod p is already assigned"}'
    server = serve([json_reply(409, body), json_reply(200, b"{}")])
    kube = client_for(server)
    with pytest.raises(ApiError) as err:
        kube.request("POST", "/api/v1/namespaces/d/pods/p/binding", body={})
    assert err.value.conflict and "already assigned" in err.value.message
    assert kube.request("GET", "/api/v1/pods") == {}  # the connection stays usable
    assert server.connections == 1


def test_watch_stream_yields_lines_and_closes_from_another_thread(
    serve: Callable[[list[Handler]], Server],
) -> None:
    release = threading.Event()

    def watch(conn: socket.socket, _request: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in (b'{"type":"ADDED",', b'"object":{}}\n{"type":"BOOK', b'MARK","object":{}}\n'):
            conn.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        release.wait(5)
        return False

    server = serve([watch])
    stream = client_for(server).stream("/api/v1/pods", query={"watch": True})
    events = iter(stream)
    assert next(events) == {"type": "ADDED", "object": {}}
    assert next(events) == {"type": "BOOKMARK", "object": {}}
    threading.Timer(0.05, stream.close).start()
    assert list(events) == []  # ends quietly once closed
    release.set()


def test_truncated_chunked_body_raises(serve: Callable[[list[Handler]], Server]) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort"
    server = serve([reply(raw, keep=False)])
    pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{server.port}"))
    with pytest.raises(TransportError):
        get(pool)


def test_endpoint_keeps_the_path_prefix_and_default_port() -> None:
    ep = Endpoint.parse("https://gateway.example/k8s/clusters/c1/")
    assert (ep.scheme, ep.host, ep.port, ep.prefix) == ("https", "gateway.example", 443, "/k8s/clusters/c1")
    assert ep.host_header == "gateway.example"
    assert Endpoint.parse("http://10.0.0.1:8080").host_header == "10.0.0.1:8080"
    with pytest.raises(PolicydError):
        Endpoint.parse("ftp://x")


def test_proxy_settings() -> None:
    proxy = parse_proxy("http://user:pa%40ss@proxy:3128")
    assert (proxy.host, proxy.port) == ("proxy", 3128)
    assert proxy.authorization == "Basic dXNlcjpwYUBzcw=="
    with pytest.raises(PolicydError):
        parse_proxy("socks5://proxy:1080")
    assert bypasses_proxy("api.internal.example", "localhost, .example")
    assert not bypasses_proxy("api.other", "localhost,example")
    cfg = k8s_client.Configuration()
    cfg.host = "https://api.internal.example:6443"
    cfg.proxy = "http://proxy:3128"
    assert endpoint_of(cfg).proxy is not None
    cfg.no_proxy = "internal.example"
    assert endpoint_of(cfg).proxy is None


def test_credential_is_reused_and_read_afresh_after_401(serve: Callable[[list[Handler]], Server]) -> None:
    unauthorized = json_reply(401, b'{"kind":"Status","reason":"Unauthorized","message":"no"}')
    server = serve([json_reply(200, b"{}"), json_reply(200, b"{}"), unauthorized, json_reply(200, b"{}")])
    kube = client_for(server)
    tokens = iter(["t1", "t2"])
    reads: list[str] = []

    def refresh(cfg: k8s_client.Configuration) -> None:
        reads.append(next(tokens))
        cfg.api_key = {"authorization": reads[-1]}

    kube.configuration.refresh_api_key_hook = refresh
    kube.request("GET", "/a")
    kube.request("GET", "/b")
    assert reads == ["t1"]  # read once, reused by the second request
    assert kube.request("GET", "/c") == {}  # 401 with the reused credential: read afresh, sent again
    assert reads == ["t1", "t2"]
    assert [r.split(b"Authorization: Bearer ")[1][:2] for r in server.requests] == [
        b"t1",
        b"t1",
        b"t1",
        b"t2",
    ]
