"""Fixtures of the cluster function tests."""

from __future__ import annotations

import pytest

from policyd.scheduler.cluster.functions import ClusterFunctions
from policyd.scheduler.cluster.tables import ClusterIndex
from tests.unit.scheduler.cluster.reference import ReferenceCluster
from tests.unit.scheduler.cluster.snapshots import ClusterFactory, snapshot_of


@pytest.fixture(params=["reference", "product"])
def make_cluster(request: pytest.FixtureRequest) -> ClusterFactory:
    """The reference walk over node dicts, or the product over a snapshot of them (one shared index)."""
    if request.param == "reference":
        return lambda nodes: ReferenceCluster(snapshot_of(nodes))
    index = ClusterIndex()
    return lambda nodes: ClusterFunctions(snapshot_of(nodes), index=index)
