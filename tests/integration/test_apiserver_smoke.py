"""Smoke tests proving the real kube-apiserver plumbing policyd's integration tests rely on."""

from __future__ import annotations

import datetime as dt
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, dynamic, watch
from kubernetes.client.rest import ApiException

from .apiserver import KubeTestContext

SCHEDULER_NAME = "policyd"


def node(name: str, cpu: str = "4", memory: str = "8Gi") -> client.V1Node:
    """A Node object with the given capacity."""
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name}),
        status=client.V1NodeStatus(capacity=capacity, allocatable=capacity),
    )


def pod(name: str, cpu: str = "100m") -> client.V1Pod:
    """A Pod for the policyd scheduler requesting the given CPU."""
    container = client.V1Container(
        name="main",
        image="registry.k8s.io/pause:3.2",
        resources=client.V1ResourceRequirements(requests={"cpu": cpu}),
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": name}),
        spec=client.V1PodSpec(scheduler_name=SCHEDULER_NAME, containers=[container]),
    )


def binding(pod_name: str, uid: str, node_name: str) -> client.V1Binding:
    """A Binding of the pod (guarded by its UID) to the node."""
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod_name, uid=uid),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node_name),
    )


def bind(k8s: KubeTestContext, pod_name: str, uid: str, node_name: str) -> int:
    """POST pods/{name}/binding and return the HTTP status.

    The raw urllib3 response is read because some client versions fail to deserialize the
    (successful) answer with "Invalid value for `target`".
    """
    response: Any = k8s.core.create_namespaced_pod_binding(
        pod_name, k8s.namespace, binding(pod_name, uid, node_name), _preload_content=False
    )
    json.loads(response.data)
    return int(response.status)


@pytest.fixture
def ready_node(k8s: KubeTestContext) -> Iterator[str]:
    """A Node marked Ready through its status subresource; deleted afterwards."""
    name = f"node-{k8s.namespace}"
    k8s.core.create_node(node(name))
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    k8s.core.patch_node_status(name, {"status": {"conditions": [ready]}})
    try:
        yield name
    finally:
        k8s.core.delete_node(name)


def test_node_is_ready_and_untainted(k8s, ready_node):
    got = k8s.core.read_node(ready_node)
    conditions = {c.type: c.status for c in got.status.conditions}
    assert conditions == {"Ready": "True"}
    assert not got.spec.taints
    assert got.status.allocatable["cpu"] == "4"


def test_bind_pod_then_rebind_conflicts(k8s, ready_node):
    created = k8s.core.create_namespaced_pod(k8s.namespace, pod("web"))
    assert created.spec.scheduler_name == SCHEDULER_NAME
    assert not created.spec.node_name

    assert bind(k8s, "web", created.metadata.uid, ready_node) == 201

    got = k8s.core.read_namespaced_pod("web", k8s.namespace)
    assert got.spec.node_name == ready_node
    scheduled = [c for c in got.status.conditions or [] if c.type == "PodScheduled"]
    assert [c.status for c in scheduled] == ["True"]

    with pytest.raises(ApiException) as excinfo:
        bind(k8s, "web", created.metadata.uid, ready_node)
    assert excinfo.value.status == 409


def test_binding_uid_is_not_a_precondition_in_1_20(k8s, ready_node):
    """1.20's BindingREST ignores metadata.uid: a bind meant for a deleted pod lands on its successor."""
    version = client.VersionApi(k8s.api_client).get_code()
    if (version.major, version.minor.rstrip("+")) != ("1", "20"):
        pytest.skip(f"characterises 1.20 only; server is {version.git_version}")
    k8s.core.create_namespaced_pod(k8s.namespace, pod("web"))

    assert bind(k8s, "web", "00000000-0000-0000-0000-000000000000", ready_node) == 201
    assert k8s.core.read_namespaced_pod("web", k8s.namespace).spec.node_name == ready_node


def test_list_then_watch_sees_added(k8s):
    listed = k8s.core.list_namespaced_pod(k8s.namespace)
    assert listed.items == []
    k8s.core.create_namespaced_pod(k8s.namespace, pod("late"))

    seen = watch_until(k8s, listed.metadata.resource_version, ("ADDED", "late"))
    assert ("ADDED", "late") in seen


def test_unauthenticated_request_is_forbidden(k8s):
    url = f"{k8s.control_plane.url}/api/v1/namespaces/{k8s.namespace}/pods"
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(url, timeout=5, context=context)
    assert excinfo.value.code == 403


def test_pdb_served_as_policy_v1beta1(k8s):
    groups = client.ApisApi(k8s.api_client).get_api_versions().groups
    policy = {v.version for g in groups if g.name == "policy" for v in g.versions}
    assert "v1beta1" in policy

    pdbs = dynamic.DynamicClient(k8s.api_client).resources.get(
        api_version="policy/v1beta1", kind="PodDisruptionBudget"
    )
    body = {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    pdbs.create(body=body, namespace=k8s.namespace)
    got = pdbs.get(name="web", namespace=k8s.namespace)
    assert got.spec.minAvailable == 1
    assert got.spec.selector.matchLabels.app == "web"


def test_lease_create_and_update(k8s):
    leases = client.CoordinationV1Api(k8s.api_client)
    now = dt.datetime.now(dt.UTC)
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="policyd"),
        spec=client.V1LeaseSpec(
            holder_identity="a", lease_duration_seconds=15, acquire_time=now, renew_time=now
        ),
    )
    created = leases.create_namespaced_lease(k8s.namespace, lease)
    assert created.spec.holder_identity == "a"

    created.spec.holder_identity = "b"
    created.spec.renew_time = now + dt.timedelta(seconds=5)
    updated = leases.replace_namespaced_lease("policyd", k8s.namespace, created)
    assert updated.spec.holder_identity == "b"
    assert updated.metadata.resource_version != created.metadata.resource_version

    # A writer holding the old resourceVersion loses.
    created.spec.holder_identity = "c"
    with pytest.raises(ApiException) as excinfo:
        leases.replace_namespaced_lease("policyd", k8s.namespace, created)
    assert excinfo.value.status == 409


def test_restart_apiserver_keeps_objects(k8s):
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="kept"), data={"k": "v"})
    k8s.core.create_namespaced_config_map(k8s.namespace, cm)
    before = k8s.core.list_namespaced_pod(k8s.namespace).metadata.resource_version

    k8s.control_plane.restart_apiserver()

    assert k8s.core.read_namespaced_config_map("kept", k8s.namespace).data == {"k": "v"}
    k8s.core.create_namespaced_pod(k8s.namespace, pod("after-restart"))
    # The new apiserver's watch cache starts at etcd's current revision: a watch from a
    # pre-restart resourceVersion resumes or ends with 410 Gone, after which a reflector relists.
    try:
        seen = watch_until(k8s, before, ("ADDED", "after-restart"))
    except ApiException as exc:
        assert exc.status == 410
        relisted = k8s.core.list_namespaced_pod(k8s.namespace)
        assert [p.metadata.name for p in relisted.items] == ["after-restart"]
    else:
        assert ("ADDED", "after-restart") in seen


def watch_until(
    k8s: KubeTestContext, resource_version: str | None, wanted: tuple[str, str]
) -> list[tuple[str, str]]:
    """Watch the namespace's pods from resource_version until (type, name) == wanted or 10s pass."""
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    for event in w.stream(
        k8s.core.list_namespaced_pod,
        k8s.namespace,
        resource_version=resource_version,
        timeout_seconds=10,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if seen[-1] == wanted:
            w.stop()
    return seen
