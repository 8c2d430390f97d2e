"""The bounded LRU map behind the per-group caches."""

from __future__ import annotations

from policyd.scheduler.lru import BoundedLRU


def test_keeps_valid_entries_replaces_invalid_ones_and_drops_the_least_recently_used() -> None:
    lru: BoundedLRU[str, list[int]] = BoundedLRU(2)
    a, kept = lru.get("a", lambda _: True, lambda: [1])
    assert a == [1] and not kept
    b, _ = lru.get("b", lambda _: True, lambda: [2])
    again, kept = lru.get("a", lambda _: True, lambda: [9])  # "a" is now the most recently used
    assert again is a and kept
    lru.get("c", lambda _: True, lambda: [3])  # drops "b", used longest ago
    assert len(lru) == 2
    b2, kept = lru.get("b", lambda _: True, lambda: [4])
    assert b2 == [4] and b2 is not b and not kept
    replaced, kept = lru.get("b", lambda entry: entry != [4], lambda: [5])  # no longer valid
    assert replaced == [5] and not kept
    lru.clear()
    assert len(lru) == 0
