"""Injectable clocks: the real monotonic clock and a fake clock that tests and `simulate` advance."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """A source of monotonic time in seconds."""

    def now(self) -> float:
        """The current time in seconds."""
        ...


class RealClock:
    """The process's monotonic clock."""

    def now(self) -> float:
        """The current monotonic time in seconds."""
        return time.monotonic()


class FakeClock:
    """A clock that only moves when told to (tests, simulation)."""

    def __init__(self, start: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._now = start

    def now(self) -> float:
        """The current fake time in seconds."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds` (never backwards)."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._now += seconds

    def advance_to(self, when: float) -> None:
        """Move time forward to `when` when it lies in the future."""
        with self._lock:
            self._now = max(self._now, when)
