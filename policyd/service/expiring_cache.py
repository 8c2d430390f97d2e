"""A thread-safe map whose entries expire: the review caches of delegated authentication and authorization.

kube-apiserver's delegating authenticator and authorizer keep TokenReview and SubjectAccessReview
answers for a few seconds (10 s by default) so a scraper polling /metrics costs one review per TTL,
not one per request. Each entry carries its own time to live (allowed and denied answers differ).
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

from policyd.scheduler.clock import Clock, RealClock

K = TypeVar("K")
V = TypeVar("V")

MAX_ENTRIES = 4096  # a flood of distinct tokens cannot grow the cache without bound


class ExpiringCache(Generic[K, V]):
    """Key -> value for `ttl` seconds per entry; expired entries are dropped when met or when full."""

    def __init__(self, clock: Clock | None = None, max_entries: int = MAX_ENTRIES) -> None:
        self._clock: Clock = clock if clock is not None else RealClock()
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: dict[K, tuple[float, V]] = {}

    def get(self, key: K) -> V | None:
        """The live value of `key`, or None when absent or expired."""
        now = self._clock.now()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= now:
                del self._entries[key]
                return None
            return entry[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        """Keep `value` under `key` for `ttl` seconds (a TTL of 0 or less keeps nothing)."""
        if ttl <= 0:
            return
        now = self._clock.now()
        with self._lock:
            if key not in self._entries and len(self._entries) >= self._max:
                self._entries = {k: e for k, e in self._entries.items() if e[0] > now}
                if len(self._entries) >= self._max:
                    del self._entries[next(iter(self._entries))]  # the oldest insertion
            self._entries[key] = (now + ttl, value)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
