"""The event inbox: events apply on the scheduling thread, a batch per call."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from policyd.errors import PolicydError
from policyd.scheduler.eventhandlers import EventHandlers


class Inbox(EventHandlers):
    def __init__(self) -> None:
        self._inbox: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = collections.deque()
        self._inbox_lock = threading.Condition()


def test_events_posted_while_applying_wait_for_the_next_call() -> None:
    inbox = Inbox()
    applied: list[str] = []

    def first() -> None:
        applied.append("first")
        inbox._post(applied.append, "posted meanwhile")

    def rejected() -> None:
        raise PolicydError("bad object")

    inbox._post(first)
    inbox._post(rejected)
    inbox._post(applied.append, "second")
    assert inbox.apply_events() == 3  # a rejected event counts as applied, and does not stop the rest
    assert applied == ["first", "second"]
    assert inbox.apply_events() == 1
    assert applied == ["first", "second", "posted meanwhile"]
    assert inbox.apply_events() == 0


class _Queue:
    def __init__(self) -> None:
        self.moves: list[str] = []

    def move_on_event(self, kind: str, match: Any = None) -> int:
        self.moves.append(kind)
        return 0


def test_a_batch_moves_parked_pods_once_per_kind_of_event_after_its_events() -> None:
    inbox = Inbox()
    queue = _Queue()
    inbox.queue = queue  # type: ignore[assignment]
    inbox.metrics = None
    inbox._moves_pending = None
    seen_when_applied: list[list[str]] = []

    def deleted() -> None:  # an assigned pod's deletion, as _pod_deleted applies it
        inbox._move("AssignedPodDelete")
        seen_when_applied.append(list(queue.moves))

    for _ in range(3000):
        inbox._post(deleted)
    inbox._post(inbox._move, "NodeAdd")
    inbox._post(deleted)
    assert inbox.apply_events() == 3002
    assert seen_when_applied[-1] == []  # no walk of the parked pods while the batch applied
    assert queue.moves == ["AssignedPodDelete", "NodeAdd"]
    inbox._move("AssignedPodUpdate")  # outside a batch: at once
    assert queue.moves == ["AssignedPodDelete", "NodeAdd", "AssignedPodUpdate"]
