"""Answers that ask to wait (429, or 5xx with Retry-After) are sent again after the wait, as client-go
does, by the blocking client and by the request loop; other errors are not, and the waits are bounded."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from policyd.backends.kube.client import MAX_RETRY_AFTER_RETRIES, ApiError, retry_after
from policyd.backends.kube.multiplex import RequestLoop
from tests.unit.backends.scripted_http import Handler, Server, client_for, reply

Serve = Callable[[list[Handler]], Server]

OK = reply(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}')


def asking(status: int, seconds: str | None) -> Handler:
    header = b"" if seconds is None else b"Retry-After: %s\r\n" % seconds.encode()
    body = b'{"kind":"Status","message":"too many requests","reason":"TooManyRequests"}'
    return reply(b"HTTP/1.1 %d X\r\n%sContent-Length: %d\r\n\r\n%s" % (status, header, len(body), body))


@pytest.mark.parametrize(
    ("status", "transient"),
    [
        (0, True),
        (429, True),
        (500, True),
        (503, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
    ],
)
def test_which_errors_are_worth_trying_again(status: int, transient: bool) -> None:
    assert ApiError(status, "get", "/api/v1/pods", "x").transient is transient


def test_which_answers_ask_to_wait() -> None:
    assert retry_after(429, {"retry-after": "2"}) == 2.0
    assert retry_after(503, {"retry-after": "1"}) == 1.0
    assert retry_after(500, {"retry-after": " 0 "}) == 0.0
    assert retry_after(429, {}) is None  # no header: the error stands
    assert retry_after(409, {"retry-after": "1"}) is None
    assert retry_after(429, {"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"}) is None  # seconds only
    assert retry_after(429, {"retry-after": "3600"}) == 60.0


def test_the_blocking_client_sends_again_after_the_wait(serve: Serve) -> None:
    server = serve([asking(429, "1"), asking(503, "0"), OK])
    started = time.monotonic()
    assert client_for(server).request("GET", "/api/v1/nodes") == {"ok": True}
    assert time.monotonic() - started >= 0.9  # it waited the second it was asked to
    assert len(server.requests) == 3


def test_the_blocking_client_keeps_other_errors(serve: Serve) -> None:
    server = serve([asking(429, None), OK])
    with pytest.raises(ApiError) as err:
        client_for(server).request("GET", "/api/v1/nodes")
    assert err.value.status == 429 and len(server.requests) == 1


def test_the_blocking_client_gives_up_after_the_last_retry(serve: Serve) -> None:
    server = serve([asking(429, "0")] * (MAX_RETRY_AFTER_RETRIES + 1) + [OK])
    with pytest.raises(ApiError) as err:
        client_for(server).request("GET", "/api/v1/nodes")
    assert err.value.status == 429 and len(server.requests) == MAX_RETRY_AFTER_RETRIES + 1


def test_the_request_loop_sends_again_after_the_wait(serve: Serve) -> None:
    server = serve([asking(429, "1"), asking(504, "0"), OK, asking(429, None)])
    loop = RequestLoop(client_for(server), name="test-loop")  # type: ignore[arg-type]
    got: list[tuple[object, ApiError | None, float]] = []
    started = time.monotonic()
    try:
        loop.submit(
            "POST", "/api/v1/namespaces/d/pods/p/binding", lambda r, e: got.append((r, e, 0.0)), body={}
        )
        assert loop.wait_idle(10)
        assert got == [({}, None, 0.0)] and time.monotonic() - started >= 0.9
        assert [r.split(b" ", 2)[:2] for r in server.requests] == [
            [b"POST", b"/api/v1/namespaces/d/pods/p/binding"]
        ] * 3
        loop.submit("GET", "/api/v1/nodes", lambda r, e: got.append((r, e, 0.0)))
        assert loop.wait_idle(10)
        assert got[1][1] is not None and got[1][1].status == 429  # no Retry-After: the error stands
    finally:
        loop.stop(2.0)


def test_the_blocking_client_does_not_wait_past_its_timeout(serve: Serve) -> None:
    server = serve([asking(429, "5"), OK])
    started = time.monotonic()
    with pytest.raises(ApiError) as err:
        client_for(server).request("GET", "/apis/coordination.k8s.io/v1/leases", timeout=2.0)
    assert err.value.status == 429 and len(server.requests) == 1
    assert time.monotonic() - started < 4.0


def test_text_returns_the_body_as_is_after_the_same_waits(serve: Serve) -> None:
    """`KubeClient.text` (the API server's /metrics for the benchmark) goes through the same sending as
    `request`: a wait asked for is honoured; a non-2xx answer raises."""
    metrics = b"# TYPE x counter\nx_total 3\n"
    text = reply(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
        % (len(metrics), metrics)
    )
    server = serve([asking(429, "0"), text, asking(429, None)])
    client = client_for(server)
    assert client.text("/metrics") == metrics.decode()
    assert server.requests[-1].startswith(b"GET /metrics HTTP/1.1\r\n")
    with pytest.raises(ApiError) as err:
        client.text("/metrics")
    assert err.value.status == 429 and len(server.requests) == 3
