"""The integration tests' side of the control plane: binaries from the checkout, and each test's context.

The launcher itself is `policyd.envtest`; here the repository's `scripts/envtest.sh` provides the
binaries when `KUBEBUILDER_ASSETS` does not (building them on the first run).
"""

from __future__ import annotations

import collections
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from policyd.envtest import LOG_TAIL_LINES, ControlPlaneError, MissingAssetsError, find_assets, has_binaries

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, CoreV1Api

    from policyd.envtest import LocalControlPlane

ENVTEST_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "envtest.sh"


@dataclasses.dataclass(frozen=True)
class KubeTestContext:
    """What one integration test gets: the control plane, clients and its own namespace."""

    control_plane: LocalControlPlane
    api_client: ApiClient
    core: CoreV1Api
    namespace: str


def provide_assets() -> Path:
    """The directory holding kube-apiserver, etcd and kube-scheduler: KUBEBUILDER_ASSETS or scripts/envtest.sh."""
    try:
        return find_assets()
    except MissingAssetsError:
        pass
    # The first run builds for minutes: its progress goes to our stderr as it comes.
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
    with subprocess.Popen(
        ["bash", str(ENVTEST_SCRIPT)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stderr is not None and proc.stdout is not None
        for line in proc.stderr:
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))
        lines = proc.stdout.read().strip().splitlines()
    if proc.returncode != 0 or not lines or not has_binaries(Path(lines[-1])):
        raise ControlPlaneError(f"{ENVTEST_SCRIPT} failed (exit {proc.returncode}):\n" + "\n".join(tail))
    return Path(lines[-1])
