"""Lease-based leader election against a real kube-apiserver (short timings)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from policyd.backends.kube.client import KubeClient, object_path
from policyd.backends.kube.leader import LeaderElectionConfig, LeaderElector
from policyd.envtest import LocalControlPlane

from .apiserver import KubeTestContext

FAST = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.3}


def electors(kube: KubeClient, ns: str, count: int) -> tuple[list[LeaderElector], list[threading.Event]]:
    cfg = LeaderElectionConfig(namespace=ns, name=f"lease-{uuid.uuid4().hex[:6]}", **FAST)
    started = [threading.Event() for _ in range(count)]
    out = [
        LeaderElector(kube, cfg, identity=f"cand-{i}", on_started_leading=started[i].set)
        for i in range(count)
    ]
    return out, started


def test_identity_is_hostname_plus_suffix(kube: KubeClient) -> None:
    a = LeaderElector(kube, LeaderElectionConfig())
    b = LeaderElector(kube, LeaderElectionConfig())
    assert a.identity != b.identity and a.identity.rsplit("_", 1)[0] == b.identity.rsplit("_", 1)[0]
    with pytest.raises(ValueError):
        LeaderElectionConfig(lease_duration=5, renew_deadline=10)


def test_only_one_leads_and_stop_hands_over_within_lease(kube: KubeClient, k8s: KubeTestContext) -> None:
    (a, b), (a_started, b_started) = electors(kube, k8s.namespace, 2)
    a.start()
    assert a.wait_for_leadership(5)
    b.start()
    time.sleep(1.5)  # several retry periods
    assert a.is_leader() and not b.is_leader() and not b_started.is_set()
    assert b.leader() == "cand-0"
    lease = kube.request("GET", object_path("coordination.k8s.io/v1", "leases", k8s.namespace, a.config.name))
    assert lease["spec"]["holderIdentity"] == "cand-0" and lease["spec"]["leaseDurationSeconds"] == 2
    # the leader dies without releasing: the other takes over once the lease has expired
    a.stop()
    t0 = time.monotonic()
    assert b.wait_for_leadership(6)
    assert b_started.wait(1)
    took = time.monotonic() - t0
    assert 1.0 <= took <= FAST["lease_duration"] + 2 * FAST["retry_period"] + 1.0
    b.release()


def test_release_hands_over_immediately(kube: KubeClient, k8s: KubeTestContext) -> None:
    (a, b), _ = electors(kube, k8s.namespace, 2)
    a.start()
    assert a.wait_for_leadership(5)
    b.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    assert a.release()
    assert b.wait_for_leadership(3)
    assert time.monotonic() - t0 < 1.5
    lease = kube.request("GET", object_path("coordination.k8s.io/v1", "leases", k8s.namespace, a.config.name))
    assert lease["spec"]["holderIdentity"] == "cand-1"
    assert lease["spec"]["leaseTransitions"] >= 1
    b.release()


def test_leader_that_cannot_renew_stops_before_lease_expires(
    kube: KubeClient, k8s: KubeTestContext, control_plane: LocalControlPlane
) -> None:
    """The lease is taken away behind the leader's back: it must notice within the renew deadline."""
    stopped = threading.Event()
    cfg = LeaderElectionConfig(namespace=k8s.namespace, name="stolen", **FAST)
    a = LeaderElector(kube, cfg, identity="cand-a", on_stopped_leading=stopped.set)
    a.start()
    assert a.wait_for_leadership(5)
    path = object_path("coordination.k8s.io/v1", "leases", k8s.namespace, "stolen")
    lease = kube.request("GET", path)
    lease["spec"]["holderIdentity"] = "intruder"
    lease["spec"]["leaseDurationSeconds"] = 60
    # keep the intruder's record fresh so the leader's updates keep failing
    stop = threading.Event()

    def intrude() -> None:
        while not stop.is_set():
            cur = kube.request("GET", path)
            cur["spec"]["holderIdentity"] = "intruder"
            cur["spec"]["leaseDurationSeconds"] = 60
            try:
                kube.request("PUT", path, body=cur)
            except Exception:
                pass
            stop.wait(0.1)

    t = threading.Thread(target=intrude, daemon=True)
    t.start()
    try:
        assert stopped.wait(FAST["renew_deadline"] + FAST["retry_period"] + 1.0)
        assert not a.is_leader() and a.lost()
    finally:
        stop.set()
        t.join()
