"""The review caches: per-entry TTLs and a bounded size."""

from __future__ import annotations

from policyd.scheduler.clock import FakeClock
from policyd.service.expiring_cache import ExpiringCache


def test_entries_expire_after_their_own_ttl() -> None:
    clock = FakeClock()
    cache: ExpiringCache[str, int] = ExpiringCache(clock)
    cache.put("short", 1, 2)
    cache.put("long", 2, 10)
    cache.put("never", 3, 0)  # a TTL of 0 keeps nothing
    assert (cache.get("short"), cache.get("long"), cache.get("never")) == (1, 2, None)
    clock.advance(2)
    assert (cache.get("short"), cache.get("long")) == (None, 2)
    assert len(cache) == 1


def test_a_full_cache_drops_expired_entries_then_the_oldest() -> None:
    clock = FakeClock()
    cache: ExpiringCache[int, int] = ExpiringCache(clock, max_entries=3)
    cache.put(1, 1, 1)
    cache.put(2, 2, 10)
    cache.put(3, 3, 10)
    clock.advance(1)
    cache.put(4, 4, 10)  # 1 expired: room without evicting a live entry
    assert [cache.get(k) for k in (2, 3, 4)] == [2, 3, 4]
    cache.put(5, 5, 10)  # full of live entries: the oldest (2) goes
    assert [cache.get(k) for k in (2, 3, 4, 5)] == [None, 3, 4, 5]
