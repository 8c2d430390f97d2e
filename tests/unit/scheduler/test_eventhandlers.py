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
