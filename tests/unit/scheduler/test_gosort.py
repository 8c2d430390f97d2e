"""Go's sort.Slice reproduced: the same order as Go 1.19.8 gives, for comparisons that hold both ways."""

from __future__ import annotations

import json
from pathlib import Path

from policyd.scheduler.gosort import sort_slice
from policyd.scheduler.preemption import sort_by_importance
from tests.unit.scheduler.fakes import FakePod

# written by data/go_sort_slice.go (Go 1.19.8): random pods, kube-scheduler's MoreImportantPod, and
# the order Go's sort.Slice left them in; lengths 1-60 and 60 up to 160, every path of pdqsort taken
# (insertion sort, partitions, equal partitions, partial insertion sort, pattern breaking, heapsort)
VECTORS = Path(__file__).parent / "data" / "go_sort_slice.json"


def test_the_order_go_leaves_pods_in() -> None:
    samples = json.loads(VECTORS.read_text())
    assert len(samples) == 120
    for sample in samples:
        pods = [
            FakePod(str(i), priority=p, start_time=float(s))
            for i, (p, s) in enumerate(zip(sample["priority"], sample["start"], strict=True))
        ]
        sort_by_importance(pods)  # type: ignore[arg-type]
        assert [int(p.name) for p in pods] == sample["order"], f"{len(pods)} pods"


def test_thirteen_pods_whose_comparison_always_holds() -> None:
    # go: idx := []int{0..12}; sort.Slice(idx, func(i, j int) bool { return true })
    order = list(range(13))
    sort_slice(order, lambda _a, _b: True)
    assert order == [11, 10, 9, 8, 7, 0, 5, 4, 3, 2, 1, 12, 6]


def test_a_strict_order_sorts() -> None:
    values = [(i * 7919) % 1000 for i in range(500)]
    sort_slice(values, lambda a, b: a < b)
    assert values == sorted(values)
