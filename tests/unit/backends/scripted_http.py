"""A scripted plain-TCP HTTP server on loopback, for the transport and request-loop tests."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from kubernetes import client as k8s_client

from policyd.backends.kube.client import KubeClient

# a handler reads the request from the file and answers on the socket; returns False to close
Handler = Callable[[socket.socket, bytes], bool]


def read_request(f: object) -> bytes:
    """One request (head and Content-Length body) from a socket file; b"" at EOF."""
    head = b""
    while True:
        line = f.readline()  # type: ignore[attr-defined]
        if not line:
            return b""
        head += line
        if line == b"\r\n":
            break
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + (f.read(length) if length else b"")  # type: ignore[attr-defined]


class Server:
    """Accepts connections; each request on a connection is answered by the next handler in turn."""

    def __init__(self, handlers: list[Handler]) -> None:
        self.handlers = handlers
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        f = conn.makefile("rb")
        with conn:
            while self.handlers:
                request = read_request(f)
                if not request:
                    return
                self.requests.append(request)
                if not self.handlers.pop(0)(conn, request):
                    return

    def close(self) -> None:
        self.sock.close()


def reply(raw: bytes, keep: bool = True) -> Handler:
    def handle(conn: socket.socket, _request: bytes) -> bool:
        conn.sendall(raw)
        return keep

    return handle


def json_reply(status: int, body: bytes, keep: bool = True) -> Handler:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return reply(head.encode() + body, keep)


def client_for(server: Server) -> KubeClient:
    cfg = k8s_client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.port}"
    cfg.api_key = {"authorization": "secret"}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return KubeClient(cfg, qps=0)
