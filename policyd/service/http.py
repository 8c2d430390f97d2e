"""The serving endpoints: /healthz, /livez, /readyz, /metrics, /configz on a ThreadingHTTPServer.

Health checks are registered by name; `/readyz?verbose` lists them like kube-apiserver (`[+]name ok`,
`[-]name failed: reason`). Given an SSL context the server speaks HTTPS (the TLS handshake runs on
the request's thread, so a slow client cannot stall accepting others), and given an `AccessControl`
every request passes it first: `policyd run` serves as kube-scheduler does, HTTPS on the secure port
with delegated authentication and authorization (`policyd.service.delegated_auth`). Without either
it is plain, open HTTP (`policyd run --port`, tests).
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, cast
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from policyd import lifecycle
from policyd.service.authentication import Subject

log = logging.getLogger(__name__)

# A check returns None, True or Passed(detail) when healthy; a string, False, or an exception means failed.
Check = Callable[[], "str | bool | None"]


class Passed(str):
    """A healthy check's result carrying a detail shown by `?verbose` (`[+]name ok: detail`)."""


DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 10259
REQUEST_TIMEOUT = 30.0  # seconds a connection may take for its TLS handshake or to send a request

Reply = tuple[int, str, bytes]  # (status, content type, body)


class AccessControl(Protocol):
    """Decides whether a request is served (authentication and authorization)."""

    def admit(self, method: str, path: str, authorization: str, peer_subject: Subject | None) -> Reply | None:
        """None to serve the request; otherwise the refusal to send."""
        ...


class HealthChecks:
    """Named checks for one endpoint (/livez or /readyz); thread-safe registration."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checks: dict[str, Check] = {}

    def add(self, name: str, check: Check) -> None:
        """Register (or replace) the check `name`."""
        with self._lock:
            self._checks[name] = check

    def run(self, exclude: frozenset[str] = frozenset()) -> list[tuple[str, str | None]]:
        """Run every check; (name, None) when it passed, (name, reason) when it failed."""
        return [(name, reason) for name, reason, _ in self.run_detailed(exclude)]

    def run_detailed(self, exclude: frozenset[str] = frozenset()) -> list[tuple[str, str | None, str]]:
        """Run every check; (name, failure reason or None, detail of a passed check or "")."""
        with self._lock:
            checks = list(self._checks.items())
        results: list[tuple[str, str | None, str]] = []
        for name, check in checks:
            if name in exclude:
                continue
            try:
                outcome = check()
            except Exception as err:
                outcome = f"{type(err).__name__}: {err}"
            if isinstance(outcome, Passed):
                results.append((name, None, str(outcome)))
            elif outcome is None or outcome is True:
                results.append((name, None, ""))
            else:
                results.append((name, "check failed" if outcome is False else str(outcome), ""))
        return results


class ServingEndpoints:
    """The HTTP server; `start()` serves on a daemon thread, `port` is the bound port (0 picks one)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        address: str = DEFAULT_ADDRESS,
        port: int = DEFAULT_PORT,
        configz: Callable[[], Any] | None = None,
        tls: ssl.SSLContext | None = None,
        access: AccessControl | None = None,
    ) -> None:
        self.registry = registry
        self.address = address
        self.requested_port = port
        self.configz = configz
        self.tls = tls
        self.access = access
        self.livez = HealthChecks()
        self.readyz = HealthChecks()
        self.livez.add("ping", lambda: None)
        self.readyz.add("ping", lambda: None)
        self._shutting_down = threading.Event()
        self.readyz.add(
            "shutdown", lambda: "process is shutting down" if self._shutting_down.is_set() else None
        )
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port actually bound (valid after `start()`)."""
        if self._server is None:
            return self.requested_port
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL of the server."""
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.address}:{self.port}"

    def start(self) -> None:
        """Bind and serve on a daemon thread."""
        handler = _make_handler(self)
        self._server = _Server((self.address, self.requested_port), handler)
        self._server.daemon_threads = True
        if self.tls is not None:
            self._server.socket = self.tls.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread = threading.Thread(target=self._server.serve_forever, name="http-serving", daemon=True)
        self._thread.start()
        lifecycle.serving(self.url)

    def mark_shutting_down(self) -> None:
        """Fail /readyz from now on (graceful shutdown)."""
        self._shutting_down.set()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ---- request handling -------------------------------------------------------------------------

    def admit(
        self, method: str, raw_path: str, authorization: str, peer_subject: Subject | None
    ) -> Reply | None:
        """None when the request may be served; otherwise the refusal (always None without access control)."""
        if self.access is None:
            return None
        return self.access.admit(method, urlsplit(raw_path).path, authorization, peer_subject)

    def handle(self, method: str, raw_path: str) -> Reply:
        """Answer one request: (status, content type, body)."""
        url = urlsplit(raw_path)
        path = url.path.rstrip("/") or "/"
        query = parse_qs(url.query, keep_blank_values=True)
        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", b"method not allowed\n"
        if path in ("/healthz", "/livez", "/readyz"):
            checks = self.readyz if path == "/readyz" else self.livez
            return self._health(path.lstrip("/"), checks, query)
        for prefix, checks in (("/livez/", self.livez), ("/readyz/", self.readyz), ("/healthz/", self.livez)):
            if path.startswith(prefix):
                name = path[len(prefix) :]
                for check_name, reason in checks.run():
                    if check_name == name:
                        if reason is None:
                            return 200, "text/plain; charset=utf-8", b"ok"
                        return 500, "text/plain; charset=utf-8", f"internal server error: {reason}\n".encode()
                return 404, "text/plain; charset=utf-8", b"404 page not found\n"
        if path == "/metrics":
            if self.registry is None:
                return 404, "text/plain; charset=utf-8", b"no metrics registry\n"
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path == "/configz":
            body = self.configz() if self.configz is not None else {}
            return 200, "application/json", (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()
        return 404, "text/plain; charset=utf-8", b"404 page not found\n"

    def _health(
        self, endpoint: str, checks: HealthChecks, query: dict[str, list[str]]
    ) -> tuple[int, str, bytes]:
        exclude = frozenset(v for values in query.get("exclude", []) for v in values.split(","))
        results = checks.run_detailed(exclude)
        failed = [(name, reason) for name, reason, _ in results if reason is not None]
        verbose = "verbose" in query
        lines = []
        if verbose or failed:
            for name, reason, detail in results:
                if reason is not None:
                    lines.append(f"[-]{name} failed: {reason}")
                else:
                    lines.append(f"[+]{name} ok: {detail}" if detail else f"[+]{name} ok")
            for name in sorted(exclude):
                lines.append(f"[+]{name} excluded: ok")
        if failed:
            lines.append(f"{endpoint} check failed")
            return 500, "text/plain; charset=utf-8", ("\n".join(lines) + "\n").encode()
        if verbose:
            lines.append(f"{endpoint} check passed")
            return 200, "text/plain; charset=utf-8", ("\n".join(lines) + "\n").encode()
        return 200, "text/plain; charset=utf-8", b"ok"


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # a failed TLS handshake (plain HTTP sent to the HTTPS port, a client CA mismatch) or a dropped
        # connection: the client's problem, not worth a traceback on stderr
        log.debug("http connection failed client=%s", client_address, exc_info=True)


def _peer_subject(connection: Any) -> Subject | None:
    """The subject of a client certificate the TLS layer verified (None without one)."""
    if not isinstance(connection, ssl.SSLSocket):
        return None
    cert = connection.getpeercert()
    if not cert:
        return None
    # the ssl module documents "subject" as a tuple of relative distinguished names
    return cast(Subject, cert.get("subject", ()))


def _make_handler(endpoints: ServingEndpoints) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "policyd"
        timeout = REQUEST_TIMEOUT

        def setup(self) -> None:
            super().setup()
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()

        def _answer(self, method: str) -> None:
            authorization = self.headers.get("Authorization", "")
            reply = endpoints.admit(method, self.path, authorization, _peer_subject(self.connection))
            status, ctype, body = reply or endpoints.handle(method, self.path)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            self._answer("GET")

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer("HEAD")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("http %s", format % args)

    return Handler
