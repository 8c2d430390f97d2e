"""The in-process benchmark's peak RSS is the workload's own: a reset starts a new peak."""

from __future__ import annotations

from policyd.bench.inprocess import peak_rss_mib, reset_peak_rss

MIB = 1024 * 1024


def test_a_reset_starts_a_new_peak() -> None:
    assert reset_peak_rss()  # Linux: /proc/self/clear_refs
    base = peak_rss_mib()
    block = b"x" * (200 * MIB)  # written, so resident
    high = peak_rss_mib()
    del block
    assert high >= base + 150
    assert peak_rss_mib() >= base + 150  # freeing the memory leaves the peak where it was
    assert reset_peak_rss()
    assert peak_rss_mib() < high - 150  # the next workload starts from what is resident now
