"""Scheduling queue: ordering, backoff timing, event-driven requeue, sweep (fake clock)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from policyd.framework import EVENT_NODE_LABELS, EVENT_POD_ASSIGNED_DELETE, EVENT_POLICY_CHANGE
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.queue import QueueConfig, QueuedPod, SchedulingQueue
from tests.unit.scheduler.fakes import FIT, LABEL, FakePod, FakeProfile

PROFILE = FakeProfile()
OPS = ("add", "ungate", "pop", "park", "backoff", "move", "flush", "delete")


def make_queue() -> tuple[SchedulingQueue, FakeClock]:
    clock = FakeClock(100.0)
    return SchedulingQueue(clock, QueueConfig()), clock


def test_active_queue_orders_by_queue_key_then_arrival() -> None:
    q, _ = make_queue()
    q.add(FakePod("low", priority=1), PROFILE)
    q.add(FakePod("b-high", priority=10), PROFILE)
    q.add(FakePod("a-high", priority=10), PROFILE)
    order = [q.pop().key for _ in range(3)]  # type: ignore[union-attr]
    assert order == ["default/b-high", "default/a-high", "default/low"]
    assert q.pop() is None


def test_bound_and_deleting_pods_are_not_queued() -> None:
    q, _ = make_queue()
    q.add(FakePod("bound", node_name="n1"), PROFILE)
    q.add(FakePod("gone", deleting=True), PROFILE)
    assert q.pop() is None


def test_backoff_doubles_to_the_cap() -> None:
    q, _ = make_queue()
    assert [q.backoff_duration(a) for a in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_backoff_timing_with_fake_clock() -> None:
    q, clock = make_queue()
    q.add(FakePod("p"), PROFILE)
    for attempt, wait in [(1, 1.0), (2, 2.0), (3, 4.0)]:
        qp = q.pop()
        assert qp is not None and qp.attempts == attempt
        q.add_backoff(qp)
        clock.advance(wait - 0.5)
        q.flush_backoff()
        assert q.pop() is None, f"attempt {attempt}: popped before its backoff of {wait}s"
        clock.advance(0.5)
        q.flush_backoff()
    assert q.pop() is not None


def test_event_moves_only_pods_whose_rules_wake_on_it() -> None:
    q, clock = make_queue()
    q.add(FakePod("label"), PROFILE)
    q.add(FakePod("cpu"), PROFILE)
    a, b = q.pop(), q.pop()
    assert a and b
    q.add_unschedulable(a, [LABEL])
    q.add_unschedulable(b, [FIT])
    clock.advance(20)  # backoff over
    assert q.move_on_event(EVENT_POD_ASSIGNED_DELETE) == 1
    first = q.pop()
    assert first is not None and first.key == "default/cpu"
    assert q.pop() is None
    assert q.pending()["unschedulable"] == 1
    assert q.move_on_event(EVENT_NODE_LABELS) == 1
    second = q.pop()
    assert second is not None and second.key == "default/label"


def test_moved_pod_still_backing_off_goes_to_backoff_queue() -> None:
    q, clock = make_queue()
    q.add(FakePod("p"), PROFILE)
    qp = q.pop()
    assert qp
    q.add_unschedulable(qp, [FIT])
    q.move_on_event(EVENT_POD_ASSIGNED_DELETE)
    assert q.pending() == {"active": 0, "backoff": 1, "unschedulable": 0, "gated": 0}
    assert q.pop() is None
    clock.advance(1.0)
    q.flush()
    assert q.pop() is not None


def test_policy_change_wakes_everything() -> None:
    q, clock = make_queue()
    q.add(FakePod("p"), PROFILE)
    qp = q.pop()
    assert qp
    q.add_unschedulable(qp, [LABEL])
    clock.advance(5)
    assert q.move_on_event(EVENT_POLICY_CHANGE) == 1


def test_event_during_cycle_sends_pod_to_backoff_not_unschedulable() -> None:
    q, _ = make_queue()
    q.add(FakePod("p"), PROFILE)
    qp = q.pop()
    assert qp
    q.move_on_event(EVENT_NODE_LABELS)  # arrives while the pod is being scheduled
    q.add_unschedulable(qp, [FIT])
    assert q.pending()["backoff"] == 1


def test_unschedulable_sweep_after_five_minutes() -> None:
    q, clock = make_queue()
    q.add(FakePod("p"), PROFILE)
    qp = q.pop()
    assert qp
    q.add_unschedulable(qp, [LABEL])
    clock.advance(299)
    q.flush()
    assert q.pending()["unschedulable"] == 1
    clock.advance(30)  # next 30 s tick is past the 5 minutes
    q.flush()
    assert q.pending()["unschedulable"] == 0
    assert q.pop() is not None


def test_update_to_bound_removes_and_delete_forgets() -> None:
    q, _ = make_queue()
    q.add(FakePod("a"), PROFILE)
    q.add(FakePod("b"), PROFILE)
    q.update(FakePod("a", node_name="n1"))
    q.delete("default/b")
    assert q.pop() is None


def test_nominated_pods_tracked_per_node() -> None:
    q, _ = make_queue()
    p = FakePod("p", priority=5)
    q.nominate(p, "n1")
    assert q.nominated_pods("n1") == [p] and q.nominated_node(p.key) == "n1"
    q.nominate(p, "n2")
    assert q.nominated_pods("n1") == [] and q.nominated_pods("n2") == [p]
    q.delete(p.key)
    assert q.nominated_pods("n2") == []


def test_gated_pod_waits_apart_until_its_gates_are_removed() -> None:
    """PreEnqueue: a pod with scheduling gates is counted as gated, never popped, never moved by
    cluster events or flushes; the update that removes its last gate puts it in activeQ."""
    q, clock = make_queue()
    q.add(FakePod("g", scheduling_gates=("example.com/a", "example.com/b")), PROFILE)
    q.add(FakePod("free"), PROFILE)
    assert q.pending() == {"active": 1, "backoff": 0, "unschedulable": 0, "gated": 1}
    assert q.where("default/g") == "gated"
    assert q.pop().key == "default/free"  # type: ignore[union-attr]
    assert q.move_on_event(EVENT_POLICY_CHANGE) == 0
    clock.advance(600)
    q.flush_unschedulable()
    q.flush_backoff()
    assert q.pop() is None
    q.update(FakePod("g", scheduling_gates=("example.com/b",)))
    assert q.where("default/g") == "gated" and q.pop() is None
    q.update(FakePod("g"))
    assert q.where("default/g") == "active"
    assert [qp.key for qp in q.gated_pods()] == []
    popped = q.pop()
    assert popped is not None and popped.key == "default/g" and popped.attempts == 1


def test_a_preemptor_waits_for_its_own_victims_not_for_any_deletion() -> None:
    q, clock = make_queue()
    q.add(FakePod("preemptor", priority=10), PROFILE)
    qp = q.pop()
    assert qp
    q.await_victims(qp.key, ["default/v1", "default/v2"])
    q.move_on_event(EVENT_POD_ASSIGNED_DELETE)  # another preemptor's victim, during this cycle
    q.add_unschedulable(qp, [FIT])
    assert q.pending()["unschedulable"] == 1  # parked, not sent to backoffQ by that event
    clock.advance(2)
    q.victim_gone("default/other-victim")
    assert q.move_on_event(EVENT_POD_ASSIGNED_DELETE) == 0
    q.victim_gone("default/v1")
    assert q.move_on_event(EVENT_POD_ASSIGNED_DELETE) == 0  # v2 still in the cache
    q.victim_gone("default/v2")
    assert q.move_on_event(EVENT_POD_ASSIGNED_DELETE) == 1
    popped = q.pop()
    assert popped is not None and popped.key == "default/preemptor"


def parked_preemptor(q: SchedulingQueue, victims: list[str]) -> str:
    """A preemptor popped, its victims being deleted, parked unschedulable; its key."""
    q.add(FakePod("preemptor", priority=10), PROFILE)
    qp = q.pop()
    assert qp
    q.await_victims(qp.key, victims)
    q.add_unschedulable(qp, [FIT])
    return qp.key


def test_a_preemptor_whose_victims_are_not_seen_gone_moves_again_after_the_wait() -> None:
    q, clock = make_queue()
    parked_preemptor(q, ["default/v1"])
    clock.advance(QueueConfig().victims_wait - 0.1)
    assert q.move_on_event(EVENT_POD_ASSIGNED_DELETE) == 0
    clock.advance(0.2)
    assert q.move_on_event(EVENT_POD_ASSIGNED_DELETE) == 1
    q.victim_gone("default/v1")  # late: nothing left to wait for
    assert q.pop() is not None


def test_a_deleted_preemptor_stops_waiting() -> None:
    q, _ = make_queue()
    q.delete(parked_preemptor(q, ["default/v1"]))
    q.add(FakePod("preemptor", priority=10), PROFILE)  # re-created under the same name
    again = q.pop()
    assert again is not None
    q.add_unschedulable(again, [FIT])
    assert q.move_on_event(EVENT_POD_ASSIGNED_DELETE) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 5)), min_size=8, max_size=60))
@example([("add", 1), ("pop", 0), ("park", 0), ("move", 1), ("add", 2), ("pop", 0), ("park", 1)])
@example([("add", 1), ("add", 5), ("pop", 0), ("park", 1), ("delete", 1), ("ungate", 5), ("flush", 5)])
def test_pending_counts_and_parked_changes_follow_every_operation(ops: list[tuple[str, int]]) -> None:
    """The per-sub-queue counts the gauges read are kept as pods move, never walked: after any
    sequence of queue operations they equal a count of where every pod is, and `parked_changes`
    moves whenever the set of parked pods does."""
    q, clock = make_queue()
    popped: dict[str, QueuedPod] = {}
    for op, n in ops:
        name = f"p{n}"
        key = f"default/{name}"
        parked_before = {qp.key for qp in q.unschedulable_pods()}
        changes_before = q.parked_changes()
        if op == "add":
            q.add(FakePod(name, scheduling_gates=("g",) if n == 5 else ()), PROFILE)
        elif op == "ungate":
            q.update(FakePod(name))
        elif op == "pop":
            qp = q.pop()
            if qp is not None:
                popped[qp.key] = qp
        elif op == "park" and popped:
            q.add_unschedulable(popped.pop(sorted(popped)[n % len(popped)]), [FIT if n % 2 else LABEL])
        elif op == "backoff" and popped:
            q.add_backoff(popped.pop(sorted(popped)[n % len(popped)]))
        elif op == "move":
            q.move_on_event(EVENT_NODE_LABELS if n % 2 else EVENT_POD_ASSIGNED_DELETE)
        elif op == "flush":
            clock.advance(n * 100.0)
            q.flush_backoff()
            q.flush_unschedulable()
        elif op == "delete":
            q.delete(key)
            popped.pop(key, None)
        walked = {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
        for i in range(6):
            where = q.where(f"default/p{i}")
            if where is not None:
                walked[where] += 1
        assert q.pending() == walked
        parked_after = {qp.key for qp in q.unschedulable_pods()}
        assert parked_after == {
            k for k in (f"default/p{i}" for i in range(6)) if q.where(k) == "unschedulable"
        }
        if parked_after != parked_before:
            assert q.parked_changes() != changes_before
