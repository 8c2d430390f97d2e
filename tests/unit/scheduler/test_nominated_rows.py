"""The nominated-pod columns (`NominatedRows`) kept in step with the queue's nominator agree with asking
the queue node by node, and a stamp never stays the same while the row's pods change."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from policyd.scheduler import queue as queue_module
from policyd.scheduler.algorithm.feasibility import nominated_others
from policyd.scheduler.algorithm.nominated import NominatedRows
from policyd.scheduler.cache import Cache
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.queue import QueueConfig, SchedulingQueue
from policyd.scheduler.snapshot import Snapshot
from tests.unit.scheduler.fakes import FakeNode, FakePod, node_obj


class _AffinePod(FakePod):
    """A FakePod with required pod anti-affinity terms."""

    @property
    def cel(self) -> dict[str, Any]:
        return {**super().cel, "affinity": {"podAntiAffinity": {"required": [{}]}}}


PODS = [FakePod(f"p{i}", priority=i % 3) for i in range(6)] + [_AffinePod("aff", priority=1)]

op = st.one_of(
    st.tuples(st.just("nominate"), st.integers(0, len(PODS) - 1), st.integers(0, 5)),
    st.tuples(st.just("clear"), st.integers(0, len(PODS) - 1), st.just(0)),
    st.tuples(st.just("delete"), st.integers(0, len(PODS) - 1), st.just(0)),
    st.tuples(st.just("sync"), st.just(0), st.just(0)),
    st.tuples(st.just("add-node"), st.just(0), st.just(0)),
)


def _snapshot(cache: Cache) -> Snapshot:
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    return snapshot


def _check(rows: NominatedRows, q: SchedulingQueue, snapshot: Snapshot) -> None:
    for row, name in enumerate(snapshot.names()):
        pods = q.nominated_pods(name)
        assert list(rows.pods[row]) == pods
        assert (rows.stamps[row] >= 0) == bool(pods)
    for pod in PODS:
        for plain_allowed in (False, True):
            plain, others = rows.split(pod, plain_allowed)
            expected = {}
            for row, name in enumerate(snapshot.names()):
                counting = nominated_others(pod, q.nominated_pods(name))
                if counting:
                    expected[row] = counting
            got = {row: list(rows.pods[row]) for row in plain.tolist()} | others
            assert got == expected
            for row in plain.tolist():  # every pod nominated there counts, none has affinity terms
                assert plain_allowed and list(rows.pods[row]) == expected[row]
                assert not any(isinstance(p, _AffinePod) for p in expected[row])


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(st.lists(op, max_size=60), st.sampled_from([4, 1 << 16]))
def test_columns_follow_the_nominator(ops: list[tuple[str, int, int]], log_limit: int) -> None:
    """Any interleaving of nominations, clears, deletions, node additions and syncs (with a log short
    enough to be outrun): after each sync the columns and `split` are what the queue answers node by
    node, and a row keeping its stamp kept its pods."""
    with mock.patch.object(queue_module, "NOMINATION_LOG_LIMIT", log_limit):
        q = SchedulingQueue(FakeClock(0.0), QueueConfig())
        cache = Cache(FakeNode, FakeClock())
        nodes = 4
        for i in range(nodes):
            cache.add_node(node_obj(f"n{i}"))
        snapshot = _snapshot(cache)
        rows = NominatedRows().sync(snapshot, q)
        seen: dict[str, tuple[int, tuple[Any, ...]]] = {}
        for kind, pod, node in [*ops, ("sync", 0, 0)]:
            if kind == "nominate":
                q.nominate(PODS[pod], f"n{node}")  # n4, n5: not (yet) nodes of the snapshot
            elif kind == "clear":
                q.clear_nomination(PODS[pod].key)
            elif kind == "delete":
                q.delete(PODS[pod].key)
            elif kind == "add-node":
                cache.add_node(node_obj(f"n{nodes}"))
                nodes += 1
                cache.update_snapshot(snapshot)
            else:
                rows.sync(snapshot, q)
                _check(rows, q, snapshot)
                for row, name in enumerate(snapshot.names()):
                    stamp, pods = int(rows.stamps[row]), rows.pods[row]
                    if name in seen and seen[name][0] == stamp:
                        assert all(a is b for a, b in zip(seen[name][1], pods, strict=True))
                    seen[name] = (stamp, pods)
