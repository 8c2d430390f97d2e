"""The cyclic garbage collector, tuned for a scheduler's heap.

A scheduler holds a large, long-lived heap (every node and pod of the cluster, their CEL views, the
informers' objects) and allocates many short-lived containers per cycle that are freed by reference
counting. CPython's default thresholds (700, 10, 10) then run a young collection every 700 net
allocations and a full one, which walks the whole long-lived heap, every 100 young ones (once the
heap grew by a quarter): in-process TopologySpreading at 5000 nodes made 9 full collections taking
1.1-2.2 s of a 7-14 s run (2 cores, shared, load 2-3). With a young threshold of 20000 and 20 young
collections per middle one, the same run made no full collection and spent 0.3-1.0 s collecting; in
two alternating pairs of runs it scheduled 1.5x the pods per second. Cyclic garbage is still
collected, later. Set once per process, by the first `Scheduler`.

What a scheduling cycle makes (the cluster functions, their tables and states, evaluators, failures)
holds no reference cycle, so reference counting frees it when the cycle drops it and the collector's
runs only walk what lives on (tests/unit/scheduler/test_collector.py).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000
MIDDLE_THRESHOLD = 20


def tune() -> None:
    """Raise the collector's young and middle thresholds to the scheduler's (never lowers them)."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), max(middle, MIDDLE_THRESHOLD), old)
