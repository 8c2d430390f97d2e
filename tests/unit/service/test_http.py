"""Serving endpoints over a real socket on an ephemeral port."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from policyd.scheduler.metrics import SchedulerMetrics
from policyd.service.http import ServingEndpoints


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


@pytest.fixture
def server() -> Iterator[ServingEndpoints]:
    metrics = SchedulerMetrics()
    metrics.observe_attempt("scheduled", "policyd", 0.1)
    srv = ServingEndpoints(
        metrics.registry, port=0, configz=lambda: {"profiles": [{"schedulerName": "policyd"}]}
    )
    srv.start()
    yield srv
    srv.stop()


def test_health_endpoints_ok(server: ServingEndpoints) -> None:
    assert server.port != 0
    for path in ("/healthz", "/livez", "/readyz"):
        assert get(server.url + path)[::2] == (200, "ok")


def test_readyz_reports_failed_check_and_verbose(server: ServingEndpoints) -> None:
    synced = {"ok": False}
    server.readyz.add("informer-sync", lambda: None if synced["ok"] else "caches not synced")
    server.readyz.add("boom", lambda: 1 / 0)
    status, _, body = get(server.url + "/readyz")
    assert status == 500
    assert "[-]informer-sync failed: caches not synced" in body
    assert "[-]boom failed: ZeroDivisionError" in body
    assert body.rstrip().endswith("readyz check failed")
    assert get(server.url + "/livez")[0] == 200  # readiness checks do not affect liveness
    synced["ok"] = True
    status, _, body = get(server.url + "/readyz?verbose&exclude=boom")
    assert status == 200
    assert "[+]informer-sync ok" in body and "[+]ping ok" in body
    assert "[+]boom excluded: ok" in body
    assert body.rstrip().endswith("readyz check passed")
    assert get(server.url + "/readyz/informer-sync")[::2] == (200, "ok")
    assert get(server.url + "/readyz/boom")[0] == 500
    assert get(server.url + "/readyz/nope")[0] == 404


def test_shutdown_fails_readiness(server: ServingEndpoints) -> None:
    server.mark_shutting_down()
    status, _, body = get(server.url + "/readyz")
    assert status == 500 and "[-]shutdown failed: process is shutting down" in body
    assert get(server.url + "/livez")[0] == 200


def test_metrics_and_configz(server: ServingEndpoints) -> None:
    status, ctype, body = get(server.url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert 'scheduler_schedule_attempts_total{profile="policyd",result="scheduled"} 1.0' in body
    status, ctype, body = get(server.url + "/configz")
    assert status == 200 and ctype == "application/json"
    assert json.loads(body) == {"profiles": [{"schedulerName": "policyd"}]}
    assert get(server.url + "/nothing")[0] == 404


def test_passed_check_detail_is_shown_by_verbose_readyz() -> None:
    from policyd.service.http import Passed

    endpoints = ServingEndpoints(port=0)
    checks = endpoints.readyz
    checks.add("policy", lambda: Passed("generation 2 in force; last reload failed: p.policy:3:7: error"))
    checks.add("informers", lambda: None)
    assert [r for r in checks.run() if r[0] in ("policy", "informers")] == [
        ("policy", None),
        ("informers", None),
    ]
    status, _, body = endpoints.handle("GET", "/readyz?verbose")
    assert status == 200
    assert b"[+]policy ok: generation 2 in force; last reload failed: p.policy:3:7: error" in body
    assert b"[+]informers ok\n" in body
