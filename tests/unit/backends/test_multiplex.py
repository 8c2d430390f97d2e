"""The request loop: many requests in flight on one thread, against a scripted server on loopback."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from policyd.backends.kube import multiplex
from policyd.backends.kube.client import JSON, ApiError, PermissionDenied, RateLimiter
from policyd.backends.kube.multiplex import RequestLoop
from tests.unit.backends.scripted_http import Handler, Server, client_for, json_reply, reply

Serve = Callable[[list[Handler]], Server]


class Answers:
    """Collects completions: (result, error, thread name) per request, in completion order."""

    def __init__(self) -> None:
        self.got: list[tuple[JSON, ApiError | None, str]] = []
        self._cond = threading.Condition()

    def __call__(self, result: JSON, error: ApiError | None) -> None:
        with self._cond:
            self.got.append((result, error, threading.current_thread().name))
            self._cond.notify_all()

    def wait(self, n: int, timeout: float = 10.0) -> list[tuple[JSON, ApiError | None, str]]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.got) >= n, timeout), self.got
            return list(self.got)


@pytest.fixture
def loops() -> Iterator[Callable[[Server], RequestLoop]]:
    made: list[RequestLoop] = []

    def make(server: Server, **kwargs: float) -> RequestLoop:
        made.append(RequestLoop(client_for(server), name="test-loop", **kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for loop in made:
        loop.stop(2.0)


def test_requests_are_in_flight_together_on_one_thread(
    serve: Serve, loops: Callable[..., RequestLoop]
) -> None:
    n = 6
    arrived = threading.Barrier(n, timeout=5)

    def answer_when_all_arrived(conn: socket.socket, request: bytes) -> bool:
        arrived.wait()  # a client sending one request at a time never gets past this
        body = request.split(b"\r\n\r\n", 1)[1]
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        return True

    server = serve([answer_when_all_arrived] * n)
    loop = loops(server)
    answers = Answers()
    for i in range(n):
        loop.submit("POST", f"/api/v1/namespaces/d/pods/p{i}/binding", answers, body={"i": i}, decode=True)
    got = answers.wait(n)
    assert sorted(result["i"] for result, _, _ in got) == list(range(n))
    assert {error for _, error, _ in got} == {None}
    assert {thread for _, _, thread in got} == {"test-loop"}
    assert server.connections == n
    assert loop.wait_idle(1.0) and loop.pending() == 0


def test_one_request_at_a_time_reuses_one_connection(serve: Serve, loops: Callable[..., RequestLoop]) -> None:
    server = serve([json_reply(200, b'{"a":1}'), json_reply(200, b'{"a":2}'), json_reply(200, b'{"a":3}')])
    loop = loops(server)
    answers = Answers()
    for i in range(3):
        loop.submit("GET", f"/x/{i}", answers, decode=True)
        answers.wait(i + 1)
    assert [r for r, _, _ in answers.got] == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"GET /x/0 HTTP/1.1\r\n") and b"Authorization: Bearer secret\r\n" in first


def test_chunked_interim_and_to_end_of_connection_bodies(
    serve: Serve, loops: Callable[..., RequestLoop]
) -> None:
    chunked = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'4;ext=1\r\n{"a"\r\n3\r\n:1}\r\n0\r\nTrailer: x\r\n\r\n'
    )
    to_close = b'HTTP/1.0 200 OK\r\n\r\n{"b":2}'
    server = serve([reply(chunked), reply(to_close, keep=False), json_reply(200, b'{"c":3}')])
    loop = loops(server)
    answers = Answers()
    for i in range(3):
        loop.submit("GET", "/x", answers, decode=True)
        answers.wait(i + 1)
    assert [r for r, _, _ in answers.got] == [{"a": 1}, {"b": 2}, {"c": 3}]
    assert server.connections == 2  # the body that ended with its connection closed it


def test_a_response_arriving_in_pieces(serve: Serve, loops: Callable[..., RequestLoop]) -> None:
    def dribble(conn: socket.socket, _request: bytes) -> bool:
        raw = b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{"ok":true}'
        for i in range(0, len(raw), 7):
            conn.sendall(raw[i : i + 7])
            time.sleep(0.01)
        return True

    server = serve([dribble])
    loop = loops(server)
    answers = Answers()
    loop.submit("GET", "/x", answers, decode=True)
    assert answers.wait(1)[0][:2] == ({"ok": True}, None)


def test_a_kept_alive_connection_closed_unanswered_is_sent_again(
    serve: Serve, loops: Callable[..., RequestLoop]
) -> None:
    def swallow(_conn: socket.socket, _request: bytes) -> bool:
        return False

    server = serve([json_reply(200, b"{}"), swallow, json_reply(200, b'{"again":true}')])
    loop = loops(server)
    answers = Answers()
    loop.submit("GET", "/a", answers, decode=True)
    answers.wait(1)
    loop.submit("GET", "/b", answers, decode=True)
    assert answers.wait(2)[1][:2] == ({"again": True}, None)
    assert len(server.requests) == 3 and server.connections == 2


def test_a_fresh_connection_closed_unanswered_fails(serve: Serve, loops: Callable[..., RequestLoop]) -> None:
    def swallow(_conn: socket.socket, _request: bytes) -> bool:
        return False

    server = serve([swallow])
    loop = loops(server)
    answers = Answers()
    loop.submit("POST", "/api/v1/namespaces/d/pods/p/binding", answers, body={})
    _, error, _ = answers.wait(1)[0]
    assert isinstance(error, ApiError) and error.status == 0 and error.reason == "Unreachable"
    assert len(server.requests) == 1


def test_error_statuses_become_api_errors_and_the_connection_stays(
    serve: Serve, loops: Callable[..., RequestLoop]
) -> None:
    conflict = b'{"kind":"Status","reason":"Conflict","message":"pod p is already assigned"}'
    forbidden = b'{"kind":"Status","reason":"Forbidden","message":"cannot create pods/binding"}'
    server = serve([json_reply(409, conflict), json_reply(403, forbidden), json_reply(201, b"{}")])
    loop = loops(server)
    answers = Answers()
    for i in range(3):
        loop.submit("POST", "/api/v1/namespaces/d/pods/p/binding", answers, body={})
        answers.wait(i + 1)
    (_, e1, _), (_, e2, _), (_, e3, _) = answers.got
    assert isinstance(e1, ApiError) and e1.conflict and "already assigned" in e1.message
    assert isinstance(e2, PermissionDenied)
    assert e3 is None
    assert server.connections == 1


def test_401_reads_the_credential_afresh_and_sends_once_more(
    serve: Serve, loops: Callable[..., RequestLoop]
) -> None:
    unauthorized = json_reply(401, b'{"kind":"Status","reason":"Unauthorized","message":"no"}')
    server = serve([json_reply(200, b"{}"), unauthorized, json_reply(200, b'{"ok":1}')])
    loop = loops(server)
    tokens = iter(["t1", "t2"])

    def refresh(cfg: object) -> None:
        cfg.api_key = {"authorization": next(tokens)}  # type: ignore[attr-defined]

    loop.client.configuration.refresh_api_key_hook = refresh
    answers = Answers()
    loop.submit("GET", "/a", answers)
    answers.wait(1)
    loop.submit("GET", "/b", answers, decode=True)
    assert answers.wait(2)[1][:2] == ({"ok": 1}, None)
    assert [r.split(b"Authorization: Bearer ")[1][:2] for r in server.requests] == [b"t1", b"t1", b"t2"]


def test_an_unanswered_request_times_out(serve: Serve, loops: Callable[..., RequestLoop]) -> None:
    release = threading.Event()

    def hang(_conn: socket.socket, _request: bytes) -> bool:
        release.wait(5)
        return False

    server = serve([hang])
    loop = loops(server)
    answers = Answers()
    loop.submit("GET", "/slow", answers, timeout=0.2)
    _, error, _ = answers.wait(1)[0]
    release.set()
    assert isinstance(error, ApiError) and error.status == 0 and "timed out" in error.message


def test_a_connections_earlier_deadline_does_not_time_out_its_next_request(
    serve: Serve, loops: Callable[..., RequestLoop]
) -> None:
    quick = json_reply(200, b"{}")

    def after(delay: float) -> Handler:
        def answer(conn: socket.socket, request: bytes) -> bool:
            time.sleep(delay)
            return quick(conn, request)

        return answer

    # "first" (deadline 1 s) is still in flight when "quick" (1.2 s) is answered, so quick's entry
    # stays behind first's; "slow" (5 s) then goes out on quick's connection, past quick's deadline
    server = serve([after(0.5), quick, after(1.6)])
    loop = loops(server)
    first, quick_answer, slow = Answers(), Answers(), Answers()
    loop.submit("GET", "/first", first, timeout=1.0)
    time.sleep(0.05)
    loop.submit("GET", "/quick", quick_answer, timeout=1.2)
    assert quick_answer.wait(1)[0][1] is None
    loop.submit("GET", "/slow", slow, timeout=10)
    assert first.wait(1)[0][1] is None
    assert slow.wait(1)[0][1] is None  # not timed out at quick's deadline
    assert server.connections == 2


def test_requests_wait_for_their_tokens(serve: Serve, loops: Callable[..., RequestLoop]) -> None:
    server = serve([json_reply(200, b"{}")] * 3)
    loop = loops(server)
    loop.client.limiter = RateLimiter(qps=10, burst=1)
    answers = Answers()
    start = time.monotonic()
    for i in range(3):
        loop.submit("GET", f"/t/{i}", answers)
    answers.wait(3)
    # one token at once, then one per 0.1 s: the third cannot have been sent before 0.2 s
    assert time.monotonic() - start >= 0.19


def test_a_delayed_request_is_sent_when_due_and_takes_its_token_then(
    serve: Serve, loops: Callable[..., RequestLoop]
) -> None:
    server = serve([json_reply(200, b"{}")] * 3)
    loop = loops(server)
    loop.client.limiter = RateLimiter(qps=10, burst=1)
    answers = Answers()
    start = time.monotonic()
    loop.submit("GET", "/later", answers, delay=0.3)
    loop.submit("GET", "/now", answers)
    first = answers.wait(1)[0]
    assert server.requests[0].startswith(b"GET /now ") and first[1] is None
    answers.wait(2)
    assert server.requests[1].startswith(b"GET /later ")
    assert time.monotonic() - start >= 0.3
    # its token was taken when it was due, not when submitted: the next request waits 0.1 s for one
    again = time.monotonic()
    loop.submit("GET", "/next", answers)
    answers.wait(3)
    assert time.monotonic() - again >= 0.05
    assert loop.pending() == 0


def test_calls_run_on_the_loop_and_stop_completes_what_was_submitted(
    serve: Serve, loops: Callable[..., RequestLoop]
) -> None:
    server = serve([json_reply(200, b'{"n":1}'), json_reply(200, b'{"n":2}')])
    loop = loops(server)
    answers = Answers()
    ran: list[str] = []

    def chained() -> None:  # a call submitting a follow-up request, as the event recorder does
        ran.append(threading.current_thread().name)
        loop.submit("GET", "/second", answers, decode=True)

    loop.submit("GET", "/first", answers, decode=True)
    loop.call_soon(chained)
    loop.stop(5.0)
    assert ran == ["test-loop"]
    assert sorted(r["n"] for r, _, _ in answers.got) == [1, 2]
    with pytest.raises(RuntimeError):
        loop.submit("GET", "/late", answers)


def _thread_cpu(name: str) -> float:
    """CPU seconds used so far by the live thread called `name` (Linux)."""
    (thread,) = [t for t in threading.enumerate() if t.name == name]
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def test_a_request_too_big_to_write_at_once_is_finished_when_the_socket_has_room(
    serve: Serve, loops: Callable[..., RequestLoop]
) -> None:
    def echo_size(conn: socket.socket, request: bytes) -> bool:
        body = b'{"size":%d}' % len(request.split(b"\r\n\r\n", 1)[1])
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        return True

    # (a third answer keeps the server reading the connection, so it stays open while idle)
    server = serve([echo_size, json_reply(200, b'{"next":true}'), json_reply(200, b"{}")])
    loop = loops(server)
    answers = Answers()
    big = {"data": "x" * (32 << 20)}  # far more than a loopback socket's buffers take at once
    loop.submit("PUT", "/big", answers, body=big, decode=True, timeout=30)
    ((result, error, _),) = answers.wait(1, timeout=30)
    assert error is None and result["size"] == len('{"data":""}') + (32 << 20)
    loop.submit("GET", "/next", answers, decode=True)  # the same connection, back to reading only
    assert answers.wait(2)[1][:2] == ({"next": True}, None)
    assert server.connections == 1
    # idle again: the loop waits for something to read, it does not spin on a writable socket
    before = _thread_cpu("test-loop")
    time.sleep(0.5)
    assert _thread_cpu("test-loop") - before < 0.05


def test_a_response_bigger_than_one_read(serve: Serve, loops: Callable[..., RequestLoop]) -> None:
    items = [{"name": f"pod-{i}", "pad": "y" * 100} for i in range(3000)]  # about 370 kB
    body = json.dumps({"items": items}).encode()
    server = serve([json_reply(200, body), json_reply(200, b'{"after":1}')])
    loop = loops(server)
    answers = Answers()
    loop.submit("GET", "/list", answers, decode=True)
    loop.submit("GET", "/after", answers, decode=True)
    got = answers.wait(2)
    assert {"items": items} in [r for r, _, _ in got] and {"after": 1} in [r for r, _, _ in got]
    assert {e for _, e, _ in got} == {None}


def test_a_connection_being_opened_holds_up_no_answer(
    serve: Serve, loops: Callable[..., RequestLoop], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_connect = multiplex.Connection.connect
    openers: list[str] = []
    release = threading.Event()

    def connect(endpoint: object, timeout: float | None) -> socket.socket:
        openers.append(threading.current_thread().name)
        if len(openers) == 2:
            release.wait(10)  # the second connection takes its time (a slow TLS handshake, a proxy)
        return real_connect(endpoint, timeout)  # type: ignore[arg-type]

    monkeypatch.setattr(multiplex.Connection, "connect", staticmethod(connect))
    second_waiting = threading.Event()

    def answer_once_the_second_waits(conn: socket.socket, _request: bytes) -> bool:
        second_waiting.wait(5)
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{"n":1}')
        return True

    server = serve([answer_once_the_second_waits, json_reply(200, b'{"n":2}'), json_reply(200, b"{}")])
    loop = loops(server)
    answers = Answers()
    loop.submit("GET", "/1", answers, decode=True)
    deadline = time.monotonic() + 5
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    loop.submit("GET", "/2", answers, decode=True)  # the only connection is busy: a second one opens
    while len(openers) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    second_waiting.set()
    # the first answer is read, and the second request goes on the connection it freed, while the
    # second connection is still being opened
    got = answers.wait(2, timeout=5)
    assert not release.is_set()
    assert [r for r, _, _ in got] == [{"n": 1}, {"n": 2}]
    assert openers == ["test-loop-connect"] * 2  # never the loop thread itself
    release.set()


def test_requests_to_a_server_that_cannot_be_reached_fail(
    serve: Serve, loops: Callable[..., RequestLoop]
) -> None:
    server = serve([])
    server.close()  # nothing listens on its port any more: every connection is refused
    loop = loops(server, max_connections=2)
    answers = Answers()
    for i in range(5):
        loop.submit("GET", f"/x/{i}", answers)
    got = answers.wait(5)
    assert all(isinstance(e, ApiError) and e.status == 0 and e.reason == "Unreachable" for _, e, _ in got)
    assert loop.wait_idle(1.0) and loop.pending() == 0
