"""Many requests in flight on one thread: non-blocking keep-alive connections behind one selector.

The write path of a scheduler is many small independent requests (a bind per pod, an Event per pod).
Sent from a pool of blocking worker threads, every request costs the process several GIL round
trips (the worker wakes for the job, for the socket write and for each read of the answer), and
each is a context switch away from the scheduling thread, which holds the GIL nearly all the time:
with 64 bind workers, `policyd bench --mode e2e` counted 13 voluntary context switches per bind on
the workers and six involuntary ones per pod on the scheduling thread. A `RequestLoop` instead
handles every request of its client on one thread: it wakes when a request is submitted or an
answer arrives, and then deals with all of them at once.

Requests go over the client's endpoint, credentials and token bucket (`KubeClient`): a request
waits for its token on the loop's timer rather than by sleeping. Connections are opened when all
open ones are busy (at most `max_connections`) and kept alive. Opening one (TCP, proxy CONNECT, TLS
handshake) is done on a connector thread (at most `CONNECTORS`, started when first needed), never on
the loop: a burst of binds after a quiet spell used to open 128 connections one after another on the
loop, 2-35 ms each, while the answers to the binds already sent sat unread (TopologySpreading/500 end
to end: the first binds were answered 0.6 s after they were sent, those behind them waited up to
0.9 s for a connection). A request waiting for a connection takes the first one free or opened. A
request on a reused connection that the server closed before answering is sent once more on a fresh
connection, and a 401 with a reused credential once more with the credential read afresh, as
`KubeClient.request` does; an answer asking to wait (429, or 5xx with Retry-After) sends the request
again once the wait is over, on the loop's timer, as client-go does (`client.retry_after`). A request
still unanswered after its timeout fails (its connection is closed); one whose connection cannot be
opened fails with the error. The completion callback runs on the loop thread, with the decoded
JSON (or {}) and None, or {} and the `ApiError`; it must be short.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import json
import logging
import queue
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from policyd.backends.kube.client import (
    DEFAULT_TIMEOUT,
    JSON,
    MAX_RETRY_AFTER_RETRIES,
    VERBS,
    ApiError,
    KubeClient,
    error_from,
    retry_after,
)
from policyd.backends.kube.transport import MAX_HEADERS, MAX_LINE, READ_SIZE, Connection, TransportError

log = logging.getLogger(__name__)

Done = Callable[[JSON, ApiError | None], None]

DEFAULT_MAX_CONNECTIONS = 64
CONNECTORS = 4  # connections opened at once, each on a thread of its own (TLS handshakes release the GIL)
_WANT = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError)


@dataclass(eq=False)
class _Request:
    method: str
    path: str
    body: Any  # JSON-encoded on the loop thread
    content_type: str | None
    decode: bool
    done: Done
    timeout: float
    payload: bytes | None = None
    fresh_credential: bool = False  # sent with a credential read afresh (a 401 is final)
    resent: bool = False  # already sent once more after a stale connection
    waits: int = 0  # sent again after the API server asked to wait (Retry-After)
    deadline: float = 0.0
    after: float = 0.0  # not sent before this monotonic time (`submit(delay=...)`)

    @property
    def verb(self) -> str:
        return VERBS.get(self.method, self.method.lower())


@dataclass(eq=False)
class _Conn:
    """One non-blocking connection and the request on it."""

    sock: socket.socket
    reused: bool = False
    request: _Request | None = None
    out: memoryview | None = None  # the part of the request not written yet
    buf: bytearray = field(default_factory=bytearray)
    status: int = 0  # of the response being read (0: its head is not in yet)
    headers: dict[str, str] = field(default_factory=dict)
    keep_alive: bool = True
    length: int | None = None  # Content-Length; None: chunked or to the end of the connection
    chunked: bool = False
    body: bytearray = field(default_factory=bytearray)
    answered: bool = False  # some byte of the response arrived
    closed: bool = False
    writable_wanted: bool = False  # registered for EVENT_WRITE too (a write is waiting for room)


class RequestLoop:
    """Requests of one `KubeClient` on one thread over non-blocking keep-alive connections."""

    def __init__(
        self,
        client: KubeClient,
        name: str = "api-requests",
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.client = client
        self.max_connections = max(1, max_connections)
        self.timeout = timeout
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Condition()
        self._submitted: collections.deque[_Request | Callable[[], None]] = collections.deque()
        self._sleeping = False
        self._closing = False
        self._abort = False  # stop() gave up waiting: fail what is left
        self._pending = 0  # submitted and not completed
        # loop thread only
        self._idle: list[_Conn] = []
        self._busy: set[_Conn] = set()
        self._waiting: collections.deque[_Request] = collections.deque()  # for a free connection
        self._fresh: collections.deque[_Request] = collections.deque()  # for a newly opened one
        self._opening = 0  # connections being opened by the connector threads
        self._connectors = 0  # connector threads started
        self._connect_jobs: queue.SimpleQueue[bool] = queue.SimpleQueue()  # True: open one; False: stop
        # any thread, under the lock: each opened connection's socket, or the error opening it
        self._connected: list[socket.socket | Exception] = []
        self._finished = False  # the loop thread has ended
        self._timers: list[tuple[float, int, _Request]] = []  # (send at, seq, request): token waits
        self._seq = itertools.count()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ---- any thread -------------------------------------------------------------------------------

    def submit(
        self,
        method: str,
        path: str,
        done: Done,
        *,
        body: Any = None,
        content_type: str | None = None,
        decode: bool = False,
        timeout: float | None = None,
        delay: float = 0.0,
    ) -> None:
        """Send a request (`delay` seconds from now, on the loop's timer); `done(result, error)` is
        called on the loop thread once it is answered."""
        request = _Request(method, path, body, content_type, decode, done, timeout or self.timeout)
        if delay > 0:
            request.after = time.monotonic() + delay
        self._enqueue(request)

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the loop thread (it may submit requests; it counts as pending until it ran)."""
        self._enqueue(fn)

    def _enqueue(self, item: _Request | Callable[[], None]) -> None:
        with self._lock:
            # once stopping, only the loop's own follow-ups (a call's requests) are taken
            if self._closing and (self._abort or threading.current_thread() is not self._thread):
                raise RuntimeError("request loop stopped")
            self._submitted.append(item)
            self._pending += 1
            wake, self._sleeping = self._sleeping, False
        if wake:
            self._wake()

    def pending(self) -> int:
        """Requests submitted and not completed."""
        with self._lock:
            return self._pending

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every submitted request completed; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Complete the submitted requests (those still unanswered after `timeout` fail), then stop."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        if not self.wait_idle(timeout):
            with self._lock:
                self._abort = True
        self._wake()
        self._thread.join(timeout + 5.0)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # the loop has a wake-up byte unread already, or is gone

    # ---- the loop ---------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closing and self._pending == 0:
                        return
                    abort = self._abort
                    if not abort:
                        submitted, self._submitted = self._submitted, collections.deque()
                        connected, self._connected = self._connected, []
                if abort:
                    self._fail_all("request loop stopped")
                    return
                for opened in connected:
                    self._opened(opened)
                for item in submitted:
                    if isinstance(item, _Request):
                        self._admit(item)
                    else:
                        self._call(item)
                self._start_due()
                timeout = self._next_timeout()
                with self._lock:
                    if self._submitted or self._connected:
                        timeout = 0.0
                    else:
                        self._sleeping = True
                events = self._selector.select(timeout)
                with self._lock:
                    self._sleeping = False
                for key, mask in events:
                    if key.data is None:
                        self._drain_wake()
                    elif mask & selectors.EVENT_WRITE:
                        self._write(key.data)
                    if key.data is not None and mask & selectors.EVENT_READ:
                        self._read(key.data)
                self._expire()
        except Exception:  # the loop must not die silently: fail what is pending
            log.exception("request loop failed")
            self._fail_all("request loop failed")
        finally:
            self._close_all()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _call(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # a failing call must not take the loop with it
            log.exception("request loop call failed")
        finally:
            self._completed()

    def _admit(self, request: _Request) -> None:
        """Take the request's token: send it now, or when the token is due."""
        if request.payload is None and request.body is not None:
            request.payload = json.dumps(request.body, separators=(",", ":")).encode()
        if request.after > time.monotonic():  # admitted again when due: its token is taken then
            heapq.heappush(self._timers, (request.after, next(self._seq), request))
            return
        delay = self.client.limiter.reserve()
        if delay > 0:
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), request))
        else:
            self._start(request)

    def _start_due(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            request = heapq.heappop(self._timers)[2]
            if request.after:
                request.after = 0.0
                self._admit(request)
            else:
                self._start(request)
        while self._waiting and self._idle:
            self._reuse(self._waiting.popleft())
        if self._waiting or self._fresh:
            self._open_wanted()  # a connection that closed or timed out left room for another

    def _next_timeout(self) -> float | None:
        now = time.monotonic()
        due = [self._timers[0][0]] if self._timers else []
        due += [c.request.deadline for c in self._busy if c.request is not None]
        return max(0.0, min(due) - now) if due else None

    def _start(self, request: _Request, fresh: bool = False) -> None:
        """Write the request on an idle connection, or queue it for the next one free or opened (a
        `fresh` one: for the next one opened)."""
        if self._idle and not fresh and not self._waiting:
            self._reuse(request)
            return
        (self._fresh if fresh else self._waiting).append(request)
        self._open_wanted()

    def _open_wanted(self) -> None:
        """Have as many connections opening as requests wait for one, within max_connections."""
        wanted = len(self._waiting) + len(self._fresh) - self._opening
        room = self.max_connections - len(self._busy) - self._opening
        for _ in range(min(wanted, room)):
            self._opening += 1
            self._connect_jobs.put(True)
            if self._connectors < min(CONNECTORS, self._opening):
                self._connectors += 1
                name = f"{self._thread.name}-connect"
                threading.Thread(target=self._connect_worker, name=name, daemon=True).start()

    def _reuse(self, request: _Request) -> None:
        conn = self._idle.pop()
        conn.reused = True
        self._send(conn, request)

    def _connect_worker(self) -> None:
        """A connector thread: open a connection per job and hand it (or the error) to the loop."""
        while self._connect_jobs.get():
            opened: socket.socket | Exception
            try:
                opened = Connection.connect(self.client.endpoint, self.timeout)
                opened.setblocking(False)
            except (OSError, ValueError) as err:
                opened = err
            with self._lock:
                late = self._finished
                if not late:
                    self._connected.append(opened)
                    wake, self._sleeping = self._sleeping, False
            if late:  # opened after the loop ended
                if isinstance(opened, socket.socket):
                    opened.close()
            elif wake:
                self._wake()

    def _opened(self, opened: socket.socket | Exception) -> None:
        """A connection was opened (or could not be): the oldest request waiting for one goes on it
        (or fails); with none waiting it is kept idle."""
        self._opening -= 1
        waiting = self._fresh or self._waiting
        if isinstance(opened, Exception):
            if waiting:
                request = waiting.popleft()
                self._complete(request, {}, self._unreachable(request, opened))
            self._open_wanted()  # for those still waiting, a connection each (within max_connections)
            return
        conn = _Conn(opened)
        self._selector.register(conn.sock, selectors.EVENT_READ, conn)  # for as long as it is open
        if waiting:
            self._send(conn, waiting.popleft())
        else:
            self._idle.append(conn)

    def _send(self, conn: _Conn, request: _Request) -> None:
        """Write `request` on `conn` (an idle one, or one just opened for it)."""
        authorization, fresh_credential = self.client.authorization(fresh=request.fresh_credential)
        request.fresh_credential = request.fresh_credential or fresh_credential
        length = None if request.payload is None else len(request.payload)
        head = self.client.request_head(
            request.method, request.path, None, request.content_type, length, authorization
        )
        conn.request = request
        conn.out = memoryview(head + request.payload if request.payload else head)
        conn.buf.clear()
        conn.status, conn.headers, conn.length, conn.chunked, conn.answered = 0, {}, None, False, False
        conn.body = bytearray()
        request.deadline = time.monotonic() + request.timeout
        self._busy.add(conn)
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        out = conn.out
        if out is None or conn.closed:
            return
        try:
            while out:
                sent = conn.sock.send(out)
                out = out[sent:]
        except _WANT:
            conn.out = out
            self._want_writable(conn, True)  # the rest once the socket has room
            return
        except OSError as err:
            self._broken(conn, err)
            return
        conn.out = None
        self._want_writable(conn, False)

    def _want_writable(self, conn: _Conn, wanted: bool) -> None:
        """Register for EVENT_WRITE only while a write waits for room: most requests are written
        whole at once, and two epoll_ctl calls per request cost the loop as much as its TLS send."""
        if conn.writable_wanted != wanted:
            conn.writable_wanted = wanted
            events = selectors.EVENT_READ | selectors.EVENT_WRITE if wanted else selectors.EVENT_READ
            self._selector.modify(conn.sock, events, conn)

    def _read(self, conn: _Conn) -> None:
        if conn.closed:  # discarded earlier in this round of events
            return
        eof = False
        try:
            while True:
                data = conn.sock.recv(READ_SIZE)
                if not data:
                    eof = True
                    break
                conn.buf += data
                if len(data) < READ_SIZE:
                    # drained: the selector tells when more arrives (no failing recv to find out); a
                    # TLS read returns at most one record (16 kB), whole, so nothing stays decrypted
                    break
        except _WANT:
            pass
        except OSError as err:
            self._broken(conn, err)
            return
        if conn.request is None:  # idle: the server closed it (or sent something unasked)
            self._discard(conn)
            return
        if conn.buf:
            conn.answered = True
        try:
            finished = self._parse(conn, eof)
        except TransportError as err:
            self._broken(conn, err)
            return
        if finished:
            self._answered(conn)
        elif eof:
            self._broken(conn, TransportError("server closed the connection"))

    def _parse(self, conn: _Conn, eof: bool) -> bool:
        """Consume what arrived; True once the whole response is in."""
        while conn.status == 0:
            end = conn.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(conn.buf) > MAX_LINE * 4:
                    raise TransportError("response head too long")
                return False
            head = bytes(conn.buf[:end]).decode("latin-1").split("\r\n")
            del conn.buf[: end + 4]
            version, _, rest = head[0].partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise TransportError(f"not an HTTP/1.x status line: {head[0][:80]!r}")
            if len(head) > MAX_HEADERS + 1:
                raise TransportError(f"more than {MAX_HEADERS} response headers")
            status = int(code)
            if 100 <= status < 200 and status != 101:
                continue
            headers: dict[str, str] = {}
            for line in head[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    raise TransportError(f"malformed header line {line[:80]!r}")
                key, value = name.strip().lower(), value.strip()
                headers[key] = f"{headers[key]}, {value}" if key in headers else value
            connection = headers.get("connection", "").lower()
            conn.keep_alive = "close" not in connection and (
                version != "HTTP/1.0" or "keep-alive" in connection
            )
            conn.status, conn.headers = status, headers
            conn.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
            length = headers.get("content-length")
            conn.length = int(length) if length is not None and not conn.chunked else None
            assert conn.request is not None
            if conn.request.method == "HEAD" or status in (204, 304):
                conn.length = 0
            if conn.length is None and not conn.chunked:
                conn.keep_alive = False  # the body ends with the connection
        if conn.chunked:
            return self._parse_chunks(conn)
        if conn.length is not None:
            if len(conn.buf) < conn.length:
                return False
            conn.body = conn.buf[: conn.length]
            del conn.buf[: conn.length]
            return True
        conn.body += conn.buf
        conn.buf.clear()
        return eof

    @staticmethod
    def _parse_chunks(conn: _Conn) -> bool:
        buf = conn.buf
        while True:
            end = buf.find(b"\r\n")
            if end < 0:
                return False
            try:
                size = int(bytes(buf[:end]).split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise TransportError(f"bad chunk size line {bytes(buf[:end])[:80]!r}") from None
            if size == 0:
                trailer_end = buf.find(b"\r\n\r\n", end) if buf[end + 2 : end + 4] != b"\r\n" else end
                if trailer_end < 0:
                    return False
                del buf[: trailer_end + 4]
                return True
            if len(buf) < end + 2 + size + 2:
                return False
            if buf[end + 2 + size : end + 4 + size] != b"\r\n":
                raise TransportError("malformed chunk")
            conn.body += buf[end + 2 : end + 2 + size]
            del buf[: end + 4 + size]

    def _answered(self, conn: _Conn) -> None:
        request = conn.request
        assert request is not None
        status, body = conn.status, bytes(conn.body)
        self._busy.discard(conn)
        conn.request = None
        if not conn.reused:  # its first answer: the session is resumable by now
            self.client.endpoint.sessions.keep(conn.sock)
        if conn.keep_alive and not conn.buf:
            self._want_writable(conn, False)
            self._idle.append(conn)
        else:
            self._discard(conn)
        if status == 401 and not request.fresh_credential:
            request.fresh_credential = True
            self._admit(request)  # once more with the credential read afresh
            return
        wait = retry_after(status, conn.headers)
        if wait is not None and request.waits < MAX_RETRY_AFTER_RETRIES:
            request.waits += 1  # sent again once the wait is over (and the limiter's token is due)
            due = time.monotonic() + wait + self.client.limiter.reserve()
            heapq.heappush(self._timers, (due, next(self._seq), request))
            return
        if self.client.on_response is not None:
            self.client.on_response(request.verb, request.path, status)
        if not 200 <= status <= 299:
            self._complete(request, {}, error_from(status, request.verb, request.path, body))
            return
        result: JSON = {}
        if request.decode and body:
            try:
                decoded = json.loads(body)
            except ValueError as err:
                self._complete(request, {}, self._unreachable(request, err))
                return
            result = decoded if isinstance(decoded, dict) else {"items": decoded}
        self._complete(request, result, None)

    def _broken(self, conn: _Conn, err: Exception) -> None:
        """The connection failed: send its request once more when a reused one was closed unanswered."""
        request, conn.request = conn.request, None
        self._busy.discard(conn)
        self._discard(conn)
        if request is None:
            return
        if conn.reused and not conn.answered and not request.resent:
            request.resent = True
            self._start(request, fresh=True)
            return
        self._complete(request, {}, self._unreachable(request, err))

    def _discard(self, conn: _Conn) -> None:
        conn.closed = True
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        if conn in self._idle:
            self._idle.remove(conn)
        try:
            conn.sock.close()
        except OSError:
            pass

    def _expire(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self._busy if c.request is not None and c.request.deadline <= now]:
            request, conn.request = conn.request, None
            assert request is not None
            self._busy.discard(conn)
            self._discard(conn)
            self._complete(
                request, {}, self._unreachable(request, TimeoutError(f"timed out after {request.timeout:g}s"))
            )
        if self._waiting or self._timers:
            self._start_due()

    @staticmethod
    def _unreachable(request: _Request, err: Exception) -> ApiError:
        return ApiError(0, request.verb, request.path, str(err) or repr(err), "Unreachable")

    def _complete(self, request: _Request, result: JSON, error: ApiError | None) -> None:
        try:
            request.done(result, error)
        except Exception:  # a failing callback must not take the loop with it
            log.exception("request completion failed method=%s path=%s", request.method, request.path)
        finally:
            self._completed()

    def _completed(self) -> None:
        with self._lock:
            self._pending -= 1
            if self._pending == 0:
                self._lock.notify_all()

    def _fail_all(self, message: str) -> None:
        requests = [c.request for c in self._busy if c.request is not None]
        requests += [*self._waiting, *self._fresh, *(t[2] for t in self._timers)]
        with self._lock:
            calls = [item for item in self._submitted if not isinstance(item, _Request)]
            requests += [item for item in self._submitted if isinstance(item, _Request)]
            self._submitted.clear()
            self._closing = True
        for _ in calls:
            self._completed()
        self._busy.clear()
        self._waiting.clear()
        self._fresh.clear()
        self._timers.clear()
        for request in requests:
            self._complete(request, {}, ApiError(0, request.verb, request.path, message, "Unreachable"))

    def _close_all(self) -> None:
        with self._lock:
            self._finished = True  # a connection still opening is closed once open
            socks = [sock for sock in self._connected if isinstance(sock, socket.socket)]
            self._connected.clear()
        for _ in range(self._connectors):
            self._connect_jobs.put(False)
        for sock in [*(c.sock for c in self._idle), *(c.sock for c in self._busy), *socks]:
            try:
                sock.close()
            except OSError:
                pass
        self._idle.clear()
        self._busy.clear()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
