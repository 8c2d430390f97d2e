"""Fixtures for tests against a real etcd + kube-apiserver on loopback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from policyd.backends.kube.client import KubeClient
from policyd.envtest import LocalControlPlane

from .apiserver import KubeTestContext, provide_assets


def pytest_configure(config: pytest.Config) -> None:
    """The test kubeconfig skips TLS verification on purpose; do not warn about it."""
    config.addinivalue_line("filterwarnings", "ignore::urllib3.exceptions.InsecureRequestWarning")


@pytest.fixture(scope="session")
def envtest_assets() -> Path:
    """The directory of kube-apiserver, etcd and kube-scheduler; fails (never skips) without them."""
    return provide_assets()


@pytest.fixture(scope="session")
def control_plane(envtest_assets: Path) -> Iterator[LocalControlPlane]:
    """One etcd + kube-apiserver for the whole session."""
    with LocalControlPlane(envtest_assets) as plane:
        yield plane


@pytest.fixture
def k8s(control_plane: LocalControlPlane) -> Iterator[KubeTestContext]:
    """A CoreV1Api and a fresh namespace, deleted after the test."""
    api_client = control_plane.api_client()
    core = client.CoreV1Api(api_client)
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    try:
        yield KubeTestContext(control_plane, api_client, core, namespace)
    finally:
        # No controller-manager runs, so the namespace stays Terminating with its contents;
        # names are unique per test, so that is harmless.
        try:
            core.delete_namespace(namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
        api_client.close()


@pytest.fixture
def kube(control_plane: LocalControlPlane) -> Iterator[KubeClient]:
    """A policyd client of the shared control plane (closed after the test)."""
    kube_client = KubeClient.connect(kubeconfig=str(control_plane.kubeconfig_path))
    yield kube_client
    kube_client.close()
