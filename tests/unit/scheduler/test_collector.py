"""The collector thresholds a scheduler sets: raised to the scheduler's, never lowered."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from policyd.scheduler import collector


@pytest.fixture
def thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_defaults_are_raised(thresholds: None) -> None:
    gc.set_threshold(700, 10, 10)
    collector.tune()
    assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, collector.MIDDLE_THRESHOLD, 10)


def test_higher_settings_are_kept(thresholds: None) -> None:
    gc.set_threshold(100_000, 50, 7)
    collector.tune()
    assert gc.get_threshold() == (100_000, 50, 7)
