"""Permit (gang): wait until min members are reserved; timeout rejects the whole waiting group."""

from __future__ import annotations

from policyd.framework import PermitSpec, RuleRef
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.permit import Permits
from tests.unit.scheduler.fakes import FakePod, FakeProfile

GANG = PermitSpec(
    rule=RuleRef("fake", "gang"),
    group=lambda pod: pod["labels"].get("group", ""),
    min_members=lambda pod: 3,
    timeout_seconds=30.0,
)
PROFILE = FakeProfile(permits=(GANG,))


def member(name: str, group: str = "g") -> FakePod:
    return FakePod(name, labels={"group": group} if group else {})


def test_pods_without_group_pass_at_once() -> None:
    permits = Permits(FakeClock())
    assert permits.permit(PROFILE, member("solo", "").cel, "default/solo", "n", None).status == "allow"


def test_group_released_together_when_complete() -> None:
    permits = Permits(FakeClock())
    assert permits.permit(PROFILE, member("a").cel, "default/a", "n1", "A").status == "wait"
    assert permits.permit(PROFILE, member("b").cel, "default/b", "n2", "B").status == "wait"
    assert permits.is_waiting("default/a")
    decision = permits.permit(PROFILE, member("c").cel, "default/c", "n3", "C")
    assert decision.status == "allow"
    assert sorted(w.payload for w in decision.released) == ["A", "B"]
    assert permits.waiting() == []
    # a later member of an admitted group passes at once
    assert permits.permit(PROFILE, member("d").cel, "default/d", "n1", "D").status == "allow"


def test_timeout_rejects_the_whole_group() -> None:
    clock = FakeClock()
    permits = Permits(clock)
    permits.permit(PROFILE, member("a").cel, "default/a", "n1", None)
    clock.advance(10)
    permits.permit(PROFILE, member("b").cel, "default/b", "n1", None)
    other = member("x", "other")
    permits.permit(PROFILE, other.cel, "default/x", "n1", None)
    assert permits.next_deadline() == 30.0
    clock.advance(19.9)
    assert permits.expire() == []
    clock.advance(0.1)
    rejected = permits.expire()
    assert sorted(w.key for w in rejected) == ["default/a", "default/b"]
    assert [w.key for w in permits.waiting()] == ["default/x"]


def test_deleted_waiting_pod_rejects_its_group() -> None:
    permits = Permits(FakeClock())
    permits.permit(PROFILE, member("a").cel, "default/a", "n1", None)
    permits.permit(PROFILE, member("b").cel, "default/b", "n1", None)
    assert sorted(w.key for w in permits.reject_pod("default/a")) == ["default/a", "default/b"]
    assert permits.waiting() == []
