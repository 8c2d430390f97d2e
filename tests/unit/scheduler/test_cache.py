"""Scheduler cache: assume, confirm, forget, expire; nodes; snapshots copy only changed nodes."""

from __future__ import annotations

import pytest

from policyd.errors import ClusterDataError
from policyd.scheduler.cache import Cache
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.cluster.objects import node_info, pod_info
from policyd.scheduler.snapshot import Snapshot
from tests.builders import make_node, make_pod
from tests.unit.scheduler.fakes import FakeNode, FakePod, node_obj


def make_cache(ttl: float = 30.0) -> tuple[Cache, FakeClock]:
    clock = FakeClock()
    return Cache(FakeNode, clock, ttl=ttl), clock


def free_cpu(cache: Cache, node: str) -> int:
    snap = Snapshot()
    cache.update_snapshot(snap)
    state = snap.node(node)
    assert state is not None
    return int(state.cel["free"]["cpu"])


def test_assume_counts_at_once_and_confirm_keeps_it() -> None:
    cache, _ = make_cache()
    cache.add_node(node_obj("n1", cpu=1000))
    pod = FakePod("p", cpu=300)
    cache.assume(pod.on("n1"), "n1")
    assert cache.is_assumed(pod.key) and free_cpu(cache, "n1") == 700
    cache.finish_binding(pod.key)
    cache.add_pod(pod.on("n1"))  # the informer observes the bind
    assert not cache.is_assumed(pod.key) and free_cpu(cache, "n1") == 700


def test_forget_releases_the_node() -> None:
    cache, _ = make_cache()
    cache.add_node(node_obj("n1", cpu=1000))
    pod = FakePod("p", cpu=300)
    cache.assume(pod.on("n1"), "n1")
    cache.forget(pod.key)
    assert free_cpu(cache, "n1") == 1000 and cache.pod(pod.key) is None


def test_assumed_pod_expires_after_ttl_only_once_binding_finished() -> None:
    cache, clock = make_cache(ttl=30)
    cache.add_node(node_obj("n1", cpu=1000))
    pod = FakePod("p", cpu=300)
    cache.assume(pod.on("n1"), "n1")
    clock.advance(100)
    assert cache.cleanup_expired() == []  # bind still in flight
    cache.finish_binding(pod.key)
    clock.advance(29)
    assert cache.cleanup_expired() == []
    clock.advance(1)
    assert cache.cleanup_expired() == [pod.key]
    assert free_cpu(cache, "n1") == 1000


def test_confirmed_pod_never_expires() -> None:
    cache, clock = make_cache(ttl=1)
    cache.add_node(node_obj("n1", cpu=1000))
    pod = FakePod("p", cpu=300)
    cache.assume(pod.on("n1"), "n1")
    cache.finish_binding(pod.key)
    cache.add_pod(pod.on("n1"))
    clock.advance(10)
    assert cache.cleanup_expired() == [] and free_cpu(cache, "n1") == 700


def test_pods_of_other_schedulers_and_pods_before_their_node_count() -> None:
    cache, _ = make_cache()
    cache.add_pod(FakePod("other", cpu=500, scheduler_name="someone-else").on("n1"))
    cache.add_node(node_obj("n1", cpu=1000))
    assert free_cpu(cache, "n1") == 500
    cache.remove_pod("default/other")
    assert free_cpu(cache, "n1") == 1000


def test_node_update_and_delete() -> None:
    cache, _ = make_cache()
    cache.add_node(node_obj("n1", cpu=1000))
    cache.add_node(node_obj("n2", cpu=1000))
    cache.update_node(node_obj("n1", cpu=2000))
    assert free_cpu(cache, "n1") == 2000
    cache.remove_node("n2")
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert snap.names() == ("n1",)


def test_snapshot_copies_only_changed_nodes_and_is_stable() -> None:
    cache, _ = make_cache()
    for n in ("n1", "n2", "n3"):
        cache.add_node(node_obj(n, cpu=1000))
    snap = Snapshot()
    cache.update_snapshot(snap)
    before = {n.name: n for n in snap.nodes()}
    gen = snap.generation
    cache.update_snapshot(snap)
    assert snap.generation == gen  # nothing changed
    cache.assume(FakePod("p", cpu=100).on("n2"), "n2")
    assert snap.node("n2").cel["free"]["cpu"] == 1000  # type: ignore[union-attr]
    cache.update_snapshot(snap)
    assert snap.generation > gen
    assert snap.node("n1") is before["n1"] and snap.node("n3") is before["n3"]
    assert snap.node("n2") is not before["n2"]
    assert snap.node("n2").cel["free"]["cpu"] == 900  # type: ignore[union-attr]


def test_a_snapshot_names_the_rows_changed_since_one_of_its_generations() -> None:
    cache, _ = make_cache()
    for n in ("n0", "n1", "n2", "n3"):
        cache.add_node(node_obj(n, cpu=1000))
    snap = Snapshot()
    cache.update_snapshot(snap)
    start = snap.generation
    assert snap.rows_changed_since(start).tolist() == []
    cache.assume(FakePod("a", cpu=100).on("n2"), "n2")
    cache.update_snapshot(snap)
    middle = snap.generation
    cache.assume(FakePod("b", cpu=100).on("n0"), "n0")
    cache.assume(FakePod("c", cpu=100).on("n2"), "n2")
    cache.update_snapshot(snap)
    assert snap.rows_changed_since(start).tolist() == [0, 2]
    assert snap.rows_changed_since(middle).tolist() == [0, 2]
    cache.assume(FakePod("d", cpu=100).on("n3"), "n3")
    cache.update_snapshot(snap)
    assert snap.rows_changed_since(middle).tolist() == [0, 2, 3]
    assert snap.rows_changed_since(-1) is None  # never one of its generations
    derived = snap.replace(snap.nodes()[1].clone_without(()))
    assert derived.rows_changed_since(middle) is None  # a what-if: compare the versions
    last = snap.generation
    for i in range(70):  # more updates than remembered
        cache.assume(FakePod(f"x{i}", cpu=1).on("n1"), "n1")
        cache.update_snapshot(snap)
    assert snap.rows_changed_since(last) is None
    assert snap.rows_changed_since(snap.generation).tolist() == []
    recent = snap.generation
    cache.add_node(node_obj("n4", cpu=1000))  # a new layout: nothing before it is known
    cache.update_snapshot(snap)
    assert snap.rows_changed_since(recent) is None


def test_confirmation_keeps_the_assumed_pods_place_on_its_node() -> None:
    """kube-scheduler 1.20's AddPod leaves a confirmed pod where it was assumed; an update moves a
    pod to the end (RemovePod then AddPod). The order is the order preemption collects victims in."""
    cache = Cache(node_info, FakeClock())
    cache.add_node(make_node("n1", cpu="4"))
    pending = {x: make_pod(x, cpu="500m", labels={"v": "1"}) for x in "abc"}
    for x in "abc":
        cache.assume(pod_info({**pending[x], "spec": {**pending[x]["spec"], "nodeName": "n1"}}), "n1")

    def order() -> list[str]:
        snap = Snapshot()
        cache.update_snapshot(snap)
        state = snap.node("n1")
        assert state is not None
        return [p["metadata"]["name"] for p in state.cel["pods"]]

    for x in "abc":  # the binds are observed in the order they were made
        cache.add_pod(pod_info(make_pod(x, cpu="500m", labels={"v": "1"}, node_name="n1")))
        assert not cache.is_assumed(f"default/{x}")
    assert order() == ["a", "b", "c"]
    cache.update_pod(pod_info(make_pod("a", cpu="500m", labels={"v": "2"}, node_name="n1")))
    assert order() == ["c", "b", "a"]  # the last pod takes a's place, a goes last
    assert free_cpu(cache, "n1") == 2500


def test_a_bound_pod_that_would_take_a_nodes_sums_beyond_int64_is_not_counted() -> None:
    """Pods bound past the scheduler may request more than any node holds; kube-scheduler's int64
    sums wrap around, numpy's int64 columns cannot hold them: the pod is refused, nothing changes."""
    cache = Cache(node_info, FakeClock())
    cache.add_node(make_node("n1", cpu="4"))
    first, second = (pod_info(make_pod(name, cpu="5P", node_name="n1")) for name in ("a", "b"))
    cache.add_pod(first)  # 5 * 10^18 millicores: fits int64
    with pytest.raises(ClusterDataError, match=r"^pod default/b: node n1's cpu requests with this pod's"):
        cache.add_pod(second)
    assert cache.pod("default/b") is None and [p.key for p in cache.pods_on("n1")] == ["default/a"]
    assert free_cpu(cache, "n1") == 4000 - 5 * 10**18
    cache.add_pod(first)  # the same pod observed again replaces itself: no sum beyond


def test_orphan_pods_beyond_int64_are_left_out_when_their_node_comes() -> None:
    cache = Cache(node_info, FakeClock())
    for name in ("a", "b"):
        cache.add_pod(pod_info(make_pod(name, cpu="5P", node_name="n1")))  # before the node
    cache.add_node(make_node("n1", cpu="4"))
    assert [p.key for p in cache.pods_on("n1")] == ["default/a"] and cache.pod("default/b") is None
