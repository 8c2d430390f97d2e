"""The bounded LRU map behind the per-group caches."""

from __future__ import annotations

from policyd.scheduler.lru import BoundedLRU


def test_keeps_valid_entries_replaces_invalid_ones_and_drops_the_least_recently_used() -> None:
    lru: BoundedLRU[str, list[int]] = BoundedLRU(2)
    a = lru.get("a", lambda _: True, lambda: [1])
    assert a == [1]
    b = lru.get("b", lambda _: True, lambda: [2])
    assert lru.get("a", lambda _: True, lambda: [9]) is a  # "a" is now the most recently used
    lru.get("c", lambda _: True, lambda: [3])  # drops "b", used longest ago
    assert len(lru) == 2
    b2 = lru.get("b", lambda _: True, lambda: [4])
    assert b2 == [4] and b2 is not b
    assert lru.get("b", lambda entry: entry != [4], lambda: [5]) == [5]  # no longer valid: made again
    lru.clear()
    assert len(lru) == 0
