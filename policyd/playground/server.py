"""The playground's HTTP server: one page, its static files, the shipped examples, lint and run.

Served by the standard library's ThreadingHTTPServer, as policyd's /healthz and /metrics endpoints
are: four routes need no framework, and policyd gains no dependency. Every request body is JSON and
at most `MAX_BODY` bytes (413 beyond); lint and run execute in `worker.Workers` (504 when a request
runs too long, 503 when every worker is busy); refused input comes back as 422 with `error` and
`diagnostics` (file, line, column). POSTs must say `Content-Type: application/json`, so a form on
another site cannot post to the server; it binds to 127.0.0.1 unless told otherwise, and then
answers only requests whose `Host` names a loopback address or `localhost` (403 otherwise), so a
page whose DNS name is rebound to 127.0.0.1 cannot reach it either.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from policyd.playground import examples
from policyd.playground.session import RequestError
from policyd.playground.worker import Operation, WorkerBusy, WorkerFailed, Workers, WorkerTimeout
from policyd.yaml_loading import json_loads

log = logging.getLogger(__name__)

DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 8765
MAX_BODY = 1 << 20  # 1 MiB: the largest policy + cluster text a request may carry
DRAIN_LIMIT = 16 * MAX_BODY  # a refused body up to this size is read and dropped before the 413
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True)
class Limits:
    """How long lint and run may take, and how many may run at once."""

    lint_seconds: float = 10.0
    run_seconds: float = 30.0
    workers: int = 2


def host_allowed(host_header: str | None, bound_address: str) -> bool:
    """Whether a request's `Host` header may reach a server bound to `bound_address`: any host when it
    listens beyond loopback (the operator chose to expose it), else only loopback names."""
    if bound_address not in LOOPBACK_HOSTS and not bound_address.startswith("127."):
        return True
    if not host_header:
        return False
    host = urlsplit(f"//{host_header}").hostname or ""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def static_files() -> dict[str, tuple[bytes, str]]:
    """The shipped static assets by URL path (`/` is index.html): body and content type."""
    out: dict[str, tuple[bytes, str]] = {}
    for entry in resources.files("policyd.playground").joinpath("static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in CONTENT_TYPES:
            out[f"/static/{entry.name}"] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    out["/"] = out["/static/index.html"]
    return out


class PlaygroundServer:
    """The playground on `address:port` (0 picks a free port; `port` is the bound one); `lint` and `run`
    answer `POST /api/lint` and `/api/run` (module-level functions: they run in a child process)."""

    def __init__(
        self,
        lint: Operation,
        run: Operation,
        address: str = DEFAULT_ADDRESS,
        port: int = DEFAULT_PORT,
        limits: Limits | None = None,
    ) -> None:
        limits = limits or Limits()
        self.files = static_files()
        self.examples = examples.shipped_examples()
        self.workers = Workers(
            limits.workers, {"lint": (lint, limits.lint_seconds), "run": (run, limits.run_seconds)}
        )
        handler = type("Handler", (_Handler,), {"playground": self})
        self._httpd = ThreadingHTTPServer((address, port), handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """The bound address."""
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The page's URL."""
        host = str(self._httpd.server_address[0])
        return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{self.port}/"

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="playground", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        """Serve on this thread until interrupted."""
        self._httpd.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()


class _Handler(BaseHTTPRequestHandler):
    playground: PlaygroundServer
    server_version = "policyd-playground"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, doc: Any) -> None:
        self._send(status, json.dumps(doc).encode(), "application/json")

    def _error(self, status: int, message: str, diagnostics: tuple[dict[str, object], ...] = ()) -> None:
        self._json(status, {"error": message, "diagnostics": list(diagnostics)})

    def _host_refused(self) -> bool:
        """Answer 403 and say so when the `Host` header names another server (DNS rebinding)."""
        if host_allowed(self.headers.get("Host"), self.playground.address):
            return False
        self._error(
            HTTPStatus.FORBIDDEN, f"Host {self.headers.get('Host')!r} is not this playground's address"
        )
        return True

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        """Static files and `/api/examples`."""
        if self._host_refused():
            return
        path = urlsplit(self.path).path
        if path == "/api/examples":
            self._json(HTTPStatus.OK, self.playground.examples)
        elif path in self.playground.files:
            self._send(HTTPStatus.OK, *self.playground.files[path])
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no page {path}")

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        """`/api/lint` and `/api/run`: a JSON body in, a JSON document out."""
        if self._host_refused():
            return
        operation = {"/api/lint": "lint", "/api/run": "run"}.get(urlsplit(self.path).path)
        if operation is None:
            self._error(HTTPStatus.NOT_FOUND, f"no endpoint {self.path}")
            return
        doc = self._body()
        if doc is None:
            return
        try:
            self._json(HTTPStatus.OK, self.playground.workers.call(operation, doc))
        except RequestError as err:
            self._error(HTTPStatus.UNPROCESSABLE_ENTITY, err.message, err.diagnostics)
        except WorkerTimeout as err:
            self._error(HTTPStatus.GATEWAY_TIMEOUT, str(err))
        except WorkerBusy as err:
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, str(err))
        except WorkerFailed as err:
            log.warning("playground %s failed: %s", operation, err)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"the {operation} failed: {err}")

    def _body(self) -> Any:
        """The request's JSON document, or None after answering with the error."""
        if self.headers.get_content_type() != "application/json":
            self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "the request body must be application/json")
            return None
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(HTTPStatus.LENGTH_REQUIRED, "the request needs a Content-Length")
            return None
        if length > MAX_BODY:
            # read and drop a body of modest size first, so the client can finish sending and read the
            # answer (an unread body makes its writes fail with a broken pipe); larger ones are not read
            if length <= DRAIN_LIMIT:
                while length > 0:
                    chunk = self.rfile.read(min(length, 1 << 16))
                    if not chunk:
                        break
                    length -= len(chunk)
            self.close_connection = True  # any unread body must not be taken for the next request
            self._error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"the request body is {length} bytes; the playground takes at most {MAX_BODY} bytes",
            )
            return None
        raw = self.rfile.read(length)
        try:
            return json_loads(raw)
        except ValueError as err:  # undecodable bytes, invalid or too deeply nested JSON
            self._error(HTTPStatus.BAD_REQUEST, f"the request body is not JSON: {err}")
            return None
