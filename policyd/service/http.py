"""The serving endpoints: /healthz, /livez, /readyz, /metrics, /configz on a ThreadingHTTPServer.

Plain HTTP on 127.0.0.1:10259 by default. Health checks are registered by name; `/readyz?verbose`
lists them like kube-apiserver (`[+]name ok`, `[-]name failed: reason`). TLS and authentication
are left to a sidecar (kube-rbac-proxy) when the port is exposed beyond loopback.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from policyd import lifecycle

log = logging.getLogger(__name__)

# A check returns None, True or Passed(detail) when healthy; a string, False, or an exception means failed.
Check = Callable[[], "str | bool | None"]


class Passed(str):
    """A healthy check's result carrying a detail shown by `?verbose` (`[+]name ok: detail`)."""


DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 10259


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
    ) -> None:
        self.registry = registry
        self.address = address
        self.requested_port = port
        self.configz = configz
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
        return f"http://{self.address}:{self.port}"

    def start(self) -> None:
        """Bind and serve on a daemon thread."""
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer((self.address, self.requested_port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http-serving", daemon=True)
        self._thread.start()
        lifecycle.serving(self.address, self.port)

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

    def handle(self, method: str, raw_path: str) -> tuple[int, str, bytes]:
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


def _make_handler(endpoints: ServingEndpoints) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "policyd"

        def _answer(self, method: str) -> None:
            status, ctype, body = endpoints.handle(method, self.path)
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
