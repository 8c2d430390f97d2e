"""A bounded least-recently-used map: the per-group caches of node results, nominated verdicts and
dry-run outcomes each keep at most `capacity` groups and drop the one used longest ago."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedLRU(Generic[K, V]):
    """At most `capacity` entries; `get` and `put` make an entry the most recently used."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, valid: Callable[[V], bool], make: Callable[[], V]) -> V:
        """The entry of `key` if `valid(entry)`, else a new one from `make()` in its place."""
        entry = self._entries.get(key)
        if entry is not None and valid(entry):
            self._entries.move_to_end(key)
            return entry
        entry = make()
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return entry

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
