"""HTTP/1.1 to one API server over persistent (TLS) connections: whole responses, and streamed bodies.

What policyd sends is small JSON to one host, so the transport is the protocol and no more: a request
line and a few headers written at once; a status line, headers, and a body framed by Content-Length,
chunked encoding or the end of the connection. Connections are kept alive in a pool shared by the
threads of one client, all made from one `ssl.SSLContext` built once from the client configuration
(the CA store is read once, not per connection). A general-purpose stack (the Python client's
`ApiClient` over urllib3 over http.client) spent about four times the CPU per request, with the GIL
held, on header objects, URL parsing and retry bookkeeping policyd never uses; per scheduled pod there
are two requests (the bind and the Scheduled event), so that was most of what `policyd run` did
besides the scheduling algorithm.

A request on a reused connection that fails before any byte of the response arrived (the server closed
the idle connection) is sent once more on a fresh connection, as Go's http.Transport does. A new TLS
connection resumes the session of an earlier one (`TLSSessions`): one HTTP/1.1 connection carries
one request at a time, so a burst of writes opens dozens, and each full handshake costs the API server
a signature with its serving key (client-go needs one: it multiplexes HTTP/2 on a single connection). HTTPS
proxies are reached through CONNECT (`proxy-url` of a kubeconfig); SOCKS proxies are not supported.
"""

from __future__ import annotations

import base64
import io
import select
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from policyd.errors import PolicydError

MAX_LINE = 65536
MAX_HEADERS = 200
READ_SIZE = 65536


class TransportError(OSError):
    """The connection broke or the server spoke something other than HTTP/1.x."""


class _Stale(TransportError):
    """A reused connection was closed by the server before the request got any answer."""


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy tunnelling to the API server with CONNECT."""

    host: str
    port: int
    authorization: str = ""  # Proxy-Authorization value, from the proxy URL's user info
    headers: tuple[tuple[str, str], ...] = ()


class TLSSessions:
    """The newest resumable TLS session to one endpoint, offered by each connection opened after it.

    A resumed handshake skips the certificate and the server's signature with its key, the costly
    part of a full one; where the server does not take the session (restarted, the ticket expired)
    the handshake is a full one."""

    def __init__(self) -> None:
        self._session: ssl.SSLSession | None = None
        self._lock = threading.Lock()
        self.full = 0  # handshakes done in full
        self.resumed = 0  # handshakes that resumed a kept session

    def offer(self) -> ssl.SSLSession | None:
        """The session a new connection should try to resume (None: none kept yet)."""
        return self._session

    def handshaken(self, sock: ssl.SSLSocket) -> None:
        """Count a completed handshake."""
        with self._lock:
            if sock.session_reused:
                self.resumed += 1
            else:
                self.full += 1

    def keep(self, sock: socket.socket) -> None:
        """Keep the session of a connection that has read a response (by then TLS 1.3 has delivered
        its tickets) when it can be resumed."""
        if not isinstance(sock, ssl.SSLSocket):
            return
        session = sock.session
        if session is not None and (session.has_ticket or sock.version() != "TLSv1.3"):
            self._session = session


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect: scheme, address, path prefix, TLS context and optional proxy."""

    scheme: str
    host: str
    port: int
    prefix: str = ""  # a path the server is mounted under (`https://gateway/k8s/clusters/c1`)
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str = ""
    proxy: Proxy | None = None
    # its own: a session resumes only through the SSLContext that made it (not copied by `replace`)
    sessions: TLSSessions = field(default_factory=TLSSessions, init=False, compare=False, repr=False)

    @classmethod
    def parse(
        cls,
        url: str,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str = "",
        proxy: Proxy | None = None,
    ) -> Endpoint:
        """The endpoint of a server URL (`https://10.0.0.1:6443`, `http://127.0.0.1:8080/prefix`)."""
        parts = urlsplit(url if "://" in url else f"https://{url}")
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise PolicydError(f"API server URL {url!r}: scheme must be http or https")
        if not parts.hostname:
            raise PolicydError(f"API server URL {url!r} names no host")
        port = parts.port or (443 if scheme == "https" else 80)
        return cls(
            scheme,
            parts.hostname,
            port,
            parts.path.rstrip("/"),
            ssl_context if scheme == "https" else None,
            server_hostname or parts.hostname,
            proxy,
        )

    @property
    def host_header(self) -> str:
        """The Host header: the address, with the port unless it is the scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def parse_proxy(url: str, headers: Mapping[str, str] | None = None) -> Proxy:
    """A `Proxy` from `http://[user:password@]host:port` (raises PolicydError for other schemes)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise PolicydError(f"proxy {url!r}: only http proxies (CONNECT) are supported")
    authorization = ""
    if parts.username is not None:
        user_info = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(user_info.encode()).decode()
    return Proxy(
        parts.hostname,
        parts.port or 80,
        authorization,
        tuple((str(k), str(v)) for k, v in (headers or {}).items()),
    )


@dataclass(frozen=True)
class Response:
    """A whole response: status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class Connection:
    """One connection: write a request, read the head of its response, then its body."""

    def __init__(self, endpoint: Endpoint, timeout: float | None) -> None:
        self.endpoint = endpoint
        self.reused = False  # set by the pool when handed out a second time
        self.keep_alive = True
        sock = self.connect(endpoint, timeout)
        self.sock: socket.socket = sock
        self._file = io.BufferedReader(socket.SocketIO(sock, "rb"), READ_SIZE)

    @staticmethod
    def connect(endpoint: Endpoint, timeout: float | None) -> socket.socket:
        """A socket to the endpoint: TCP, the proxy tunnel when there is one, then TLS."""
        proxy = endpoint.proxy
        address = (proxy.host, proxy.port) if proxy is not None else (endpoint.host, endpoint.port)
        sock = socket.create_connection(address, timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if proxy is not None:
                _tunnel(sock, endpoint, proxy)
            if endpoint.ssl_context is not None:
                sock = endpoint.ssl_context.wrap_socket(
                    sock, server_hostname=endpoint.server_hostname, session=endpoint.sessions.offer()
                )
                endpoint.sessions.handshaken(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    def settimeout(self, timeout: float | None) -> None:
        """Timeout of each later socket operation (None: block)."""
        self.sock.settimeout(timeout)

    def dropped(self) -> bool:
        """True when an idle connection became readable: the server closed it (or sent junk)."""
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def send(self, head: bytes, body: bytes | None) -> None:
        """Write one request."""
        try:
            self.sock.sendall(head + body if body else head)
        except OSError as err:
            raise (_Stale if self.reused else TransportError)(f"send failed: {err}") from err

    def read_head(self) -> tuple[int, dict[str, str]]:
        """The status and headers of the response (1xx interim responses skipped)."""
        while True:
            try:
                line = self._file.readline(MAX_LINE + 1)
            except ConnectionResetError as err:
                raise (_Stale if self.reused else TransportError)(f"connection reset: {err}") from err
            if not line:
                raise (_Stale if self.reused else TransportError)("server closed the connection")
            version, _, rest = line.decode("latin-1").partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise TransportError(f"not an HTTP/1.x status line: {line[:80]!r}")
            headers = self._read_headers()
            status = int(code)
            if 100 <= status < 200 and status != 101:
                continue
            connection = headers.get("connection", "").lower()
            self.keep_alive = "close" not in connection and (
                version != "HTTP/1.0" or "keep-alive" in connection
            )
            if not self.reused:
                self.endpoint.sessions.keep(self.sock)
            return status, headers

    def _read_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS):
            line = self._file.readline(MAX_LINE + 1)
            if line in (b"\r\n", b"\n"):
                return headers
            if not line:
                raise TransportError("connection closed in the response headers")
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise TransportError(f"malformed header line {line[:80]!r}")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        raise TransportError(f"more than {MAX_HEADERS} response headers")

    def read_body(self, headers: Mapping[str, str], method: str, status: int) -> bytes:
        """The whole body of the response whose head was just read."""
        return b"".join(self.body_chunks(headers, method, status))

    def body_chunks(self, headers: Mapping[str, str], method: str, status: int) -> Iterator[bytes]:
        """The body as it arrives (chunk by chunk for chunked encoding)."""
        if method == "HEAD" or status in (204, 304):
            return
        if "chunked" in headers.get("transfer-encoding", "").lower():
            yield from self._chunked()
            return
        length = headers.get("content-length")
        if length is not None:
            remaining = int(length)
            while remaining > 0:
                data = self._file.read1(min(remaining, READ_SIZE))
                if not data:
                    raise TransportError("connection closed in the response body")
                remaining -= len(data)
                yield data
            return
        self.keep_alive = False  # the body ends with the connection
        while True:
            data = self._file.read1(READ_SIZE)
            if not data:
                return
            yield data

    def _chunked(self) -> Iterator[bytes]:
        read = self._file.read
        while True:
            line = self._file.readline(MAX_LINE + 1)
            if not line:
                raise TransportError("connection closed in a chunked body")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise TransportError(f"bad chunk size line {line[:80]!r}") from None
            if size == 0:
                self._read_headers()  # trailers
                return
            data = read(size)
            if len(data) < size or read(2) != b"\r\n":
                raise TransportError("connection closed in a chunk")
            yield data

    def shutdown(self) -> None:
        """Unblock a reader on another thread (the socket stays open until `close`)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        """Close the connection."""
        self.keep_alive = False
        try:
            self._file.close()
        finally:
            self.sock.close()


def _tunnel(sock: socket.socket, endpoint: Endpoint, proxy: Proxy) -> None:
    """CONNECT through an HTTP proxy to the endpoint."""
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    target = f"{host}:{endpoint.port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if proxy.authorization:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    lines += [f"{k}: {v}" for k, v in proxy.headers]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    reader = sock.makefile("rb", buffering=0)
    status_line = reader.readline(MAX_LINE + 1)
    parts = status_line.split(None, 2)
    if len(parts) < 2 or parts[1] != b"200":
        raise TransportError(f"proxy CONNECT refused: {status_line.strip()[:120]!r}")
    while reader.readline(MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
        pass


class ConnectionPool:
    """Keep-alive connections to one endpoint, shared by threads: at most `maxsize` idle ones kept."""

    def __init__(self, endpoint: Endpoint, maxsize: int = 32) -> None:
        self.endpoint = endpoint
        self.maxsize = maxsize
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    def _get(self, timeout: float | None, fresh: bool) -> Connection:
        while True:
            conn = None
            if not fresh:
                with self._lock:
                    conn = self._idle.pop() if self._idle else None
            if conn is None:
                return Connection(self.endpoint, timeout)
            if not conn.dropped():
                conn.reused = True
                return conn
            conn.close()

    def _put(self, conn: Connection) -> None:
        if conn.keep_alive:
            with self._lock:
                if len(self._idle) < self.maxsize:
                    self._idle.append(conn)
                    return
        conn.close()

    def request(self, method: str, head: bytes, body: bytes | None, timeout: float | None) -> Response:
        """Send one request (`head`: request line and headers, as bytes) and read its whole response;
        sent once more, on a new connection, when a reused one turns out closed by the server."""
        for attempt in (1, 2):
            conn = self._get(timeout, fresh=attempt == 2)
            try:
                conn.settimeout(timeout)
                conn.send(head, body)
                status, headers = conn.read_head()
                data = conn.read_body(headers, method, status)
            except _Stale:
                conn.close()
                if attempt == 2:
                    raise
                continue
            except BaseException:
                conn.close()
                raise
            self._put(conn)
            return Response(status, headers, data)
        raise AssertionError("unreachable")

    def open_stream(
        self, method: str, head: bytes, connect_timeout: float | None, read_timeout: float | None
    ) -> StreamedResponse:
        """Send one request and return once its response head is in; the body is read from the result."""
        conn = Connection(self.endpoint, connect_timeout)
        try:
            conn.settimeout(read_timeout)
            conn.send(head, None)
            status, headers = conn.read_head()
        except BaseException:
            conn.close()
            raise
        return StreamedResponse(conn, method, status, headers)

    def close(self) -> None:
        """Close the idle connections (connections in use close when their response is done)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class StreamedResponse:
    """A response whose body is read as it arrives, on a connection of its own; `close()` from any thread."""

    def __init__(self, conn: Connection, method: str, status: int, headers: Mapping[str, str]) -> None:
        self._conn = conn
        self._method = method
        self.status = status
        self.headers = headers
        self._closed = threading.Event()

    def chunks(self) -> Iterator[bytes]:
        """The body's bytes as they arrive; ends quietly after `close()`."""
        try:
            for data in self._conn.body_chunks(self.headers, self._method, self.status):
                if self._closed.is_set():
                    return
                yield data
        except (OSError, ValueError):
            if self._closed.is_set():
                return
            raise
        finally:
            self.close()

    def read(self) -> bytes:
        """The rest of the body."""
        return b"".join(self.chunks())

    def close(self) -> None:
        """Abort the response and close its connection (unblocks a reader on another thread)."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._conn.shutdown()
        self._conn.close()


def request_head(method: str, target: str, headers: Mapping[str, Any], body_length: int | None) -> bytes:
    """The request line and headers of one request, encoded."""
    lines = [f"{method} {target} HTTP/1.1"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body_length is not None:
        lines.append(f"Content-Length: {body_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
