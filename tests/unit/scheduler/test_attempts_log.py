"""The attempt log's bounds: a long-running scheduler must not keep every failure of every attempt."""

from __future__ import annotations

from policyd.framework import FilterFailure, RuleRef
from policyd.scheduler.attempts import Attempt, AttemptLog

RULE = RuleRef("p", "Fit")


def attempt(pod: str, number: int = 1) -> Attempt:
    names = tuple(f"n{i}" for i in range(3))
    failures = {n: FilterFailure(RULE, ("Insufficient cpu",)) for n in names}
    return Attempt(
        pod=pod, number=number, profile="s", generation=1, time=0.0, node_names=names, failures=failures
    )


def test_unbounded_log_keeps_every_detail() -> None:
    log = AttemptLog()
    for i in range(5):
        log.add(attempt("ns/a", i))
    assert all(len(a.nodes) == 3 and a.failures for a in log.for_pod("ns/a"))


def test_detail_is_kept_for_the_latest_attempts_only() -> None:
    log = AttemptLog(max_detailed=2)
    for i in range(4):
        log.add(attempt(f"ns/p{i}"))
    kept = [bool(log.for_pod(f"ns/p{i}")[0].failures) for i in range(4)]
    assert kept == [False, False, True, True]
    stripped = log.for_pod("ns/p0")[0]
    assert stripped.nodes == [] and stripped.pod == "ns/p0" and stripped.result == "unschedulable"


def test_oldest_pods_are_dropped_beyond_the_pod_bound() -> None:
    log = AttemptLog(max_pods=2)
    for name in ("a", "b", "c"):
        log.add(attempt(f"ns/{name}"))
    assert log.pods() == ["ns/b", "ns/c"]
    assert log.for_pod("ns/a") == []
