"""The image of `make image` run the way a pod runs it, against the suite's real kube-apiserver.

`podman run` (runtime runc) of localhost/policyd:<version>: the ServiceAccount token and CA at the
in-cluster path, KUBERNETES_SERVICE_HOST/PORT, deploy/'s RBAC only, deploy/'s config ConfigMap
rendered as the kubelet renders a ConfigMap volume (..data symlinks) at the Deployment's mountPath,
the Deployment's container args, user and read-only root filesystem. The apiserver listens on
loopback, so the container shares the host network; that is the one difference from a pod, and
the reason the serving port is a free one (the same port number for every probe the Deployment names).
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from policyd.backends.kube.client import ApiError, KubeClient, object_path
from policyd.envtest import LocalControlPlane

from .apiserver import KubeTestContext
from .test_api_backend import make_node, make_pod, node_of, wait_for
from .test_reload_api import zone_policy
from .test_run import apply_deploy_rbac, service_account_token

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# crun cannot run here at all (hybrid cgroups), and this machine lacks CAP_SYS_RESOURCE, so the
# runtime may only lower rlimits: runc with limits below the host's hard limits.
PODMAN = ["podman", "--runtime", "runc"]
ULIMITS = ["--ulimit", "nofile=16384:16384", "--ulimit", "nproc=4096:4096"]


def deployment_container() -> dict[str, Any]:
    """deploy/deployment.yaml's policyd container, with the pod's securityContext merged under `pod`."""
    deployment = yaml.safe_load((DEPLOY / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return dict(container, pod=pod)


def probe_targets(container: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(scheme, path, containerPort) of each probe, the named port resolved as the kubelet does."""
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    out = []
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        if key in container:
            get = container[key]["httpGet"]
            port = ports[get["port"]] if isinstance(get["port"], str) else int(get["port"])
            out.append((get.get("scheme", "HTTP").lower(), get["path"], port))
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def image() -> str:
    """localhost/policyd:<version> from scripts/image.sh (rebuilt only when the wheel changed)."""
    if shutil.which("podman") is None and os.geteuid() != 0:
        pytest.skip("podman is not installed and scripts/image.sh needs root to install it")
    built = subprocess.run(
        ["bash", str(REPO / "scripts" / "image.sh")],
        capture_output=True,
        text=True,
        env=dict(os.environ, POLICYD_IMAGE_ARCHIVE=""),
        timeout=1800,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    ref = built.stdout.strip().splitlines()[-1]
    probe = run(*PODMAN, "run", "--rm", *ULIMITS, "--network=host", "--entrypoint", "/bin/true", ref)
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run a container here: {probe.stderr.strip()}")
    return ref


def write_atomic_dir(target: Path, files: dict[str, str], mode: int = 0o644) -> None:
    """`files` in `target` as the kubelet writes a ConfigMap or projected volume: ..data -> a timestamped dir."""
    target.mkdir(parents=True)
    target.chmod(0o755)
    stamp = target / "..2026_11_23_00_00_00.000000001"
    stamp.mkdir()
    stamp.chmod(0o755)
    for name, text in files.items():
        (stamp / name).write_text(text)
        (stamp / name).chmod(mode)
        (target / name).symlink_to(f"..data/{name}")
    (target / "..data").symlink_to(stamp.name)


def get(url: str) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the kubelet does not verify a probe's certificate either
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode()
    except OSError:
        return 0, ""


@pytest.fixture
def container_name() -> Iterator[str]:
    name = "policyd-test-" + uuid.uuid4().hex[:8]
    yield name
    run(*PODMAN, "rm", "-f", "-t", "5", name)


def test_image_runs_in_cluster_style_schedules_reloads_and_answers_probes(
    image: str,
    kube: KubeClient,
    k8s: KubeTestContext,
    control_plane: LocalControlPlane,
    tmp_path: Path,
    container_name: str,
) -> None:
    ns = k8s.namespace
    suffix = "-" + uuid.uuid4().hex[:6]
    container = deployment_container()
    apply_deploy_rbac(kube, suffix)
    token = service_account_token(kube, "policyd-system", "policyd" + suffix)

    # deploy/'s ConfigMaps, names suffixed (the suite shares one apiserver), the port a free one
    config_map = yaml.safe_load((DEPLOY / "config.yaml").read_text())
    settings = yaml.safe_load(config_map["data"]["policyd.yaml"])
    policies_map = yaml.safe_load((DEPLOY / "policies-configmap.yaml").read_text())
    policies_name = policies_map["metadata"]["name"] + suffix
    policies_map["metadata"]["name"] = policies_name
    kube.request("POST", object_path("v1", "configmaps", "policyd-system"), body=policies_map)
    (profile,) = settings["profiles"]
    assert profile["policySources"] == [{"configMap": "policyd-system/policyd-policies"}]
    profile["policySources"] = [{"configMap": f"policyd-system/{policies_name}"}]
    settings["leaderElection"]["resourceName"] += suffix
    probes = probe_targets(container)
    assert {port for _, _, port in probes} == {settings["serving"]["port"]}, "probes name the serving port"
    port = free_port()
    settings["serving"]["port"] = port

    (mount,) = container["volumeMounts"]
    (volume,) = [v for v in container["pod"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    config_dir, sa_dir = tmp_path / "config", tmp_path / "serviceaccount"
    write_atomic_dir(config_dir, {"policyd.yaml": yaml.safe_dump(settings)})
    ca = (control_plane.workdir / "certs" / "apiserver.crt").read_text()
    write_atomic_dir(sa_dir, {"token": token, "ca.crt": ca, "namespace": "policyd-system"})

    user = container["pod"]["securityContext"]["runAsUser"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    host, api_port = control_plane.url.removeprefix("https://").rsplit(":", 1)
    started = run(
        *PODMAN, "run", "-d", "--name", container_name, *ULIMITS,
        "--network=host", "--read-only", "--read-only-tmpfs=false", "--user", str(user),
        "--cap-drop=ALL", "--security-opt=no-new-privileges",
        "-e", f"KUBERNETES_SERVICE_HOST={host}", "-e", f"KUBERNETES_SERVICE_PORT={api_port}",
        "-v", f"{sa_dir}:{SA_DIR}:ro", "-v", f"{config_dir}:{mount['mountPath']}:ro",
        image, *container["args"],
    )  # fmt: skip
    assert started.returncode == 0, started.stderr

    def logs() -> str:
        out = run(*PODMAN, "logs", container_name)
        return (out.stdout + out.stderr)[-4000:]

    # the probes, as the kubelet sends them
    for scheme, path, _ in probes:
        url = f"{scheme}://127.0.0.1:{port}{path}"
        assert wait_for(lambda url=url: get(url)[0] == 200, timeout=90), f"{url}\n{logs()}"

    key = f"zone{suffix}"
    make_node(kube, f"{ns}-a", labels={key: "a"})
    make_node(kube, f"{ns}-b", labels={key: "b"})
    make_pod(kube, ns, "before")
    assert wait_for(lambda: node_of(kube, ns, "before"), timeout=60), logs()
    ready = f"{scheme}://127.0.0.1:{port}/readyz?verbose"
    assert "generation 1 " in get(ready)[1]

    # an edit of the policies ConfigMap in the API takes effect on the next pods
    policies_map = kube.request("GET", object_path("v1", "configmaps", "policyd-system", policies_name))
    policies_map["data"] = {"zones.policy": zone_policy(key, "b")}
    kube.request("PUT", object_path("v1", "configmaps", "policyd-system", policies_name), body=policies_map)
    assert wait_for(lambda: "generation 2 " in get(ready)[1], timeout=60), get(ready)[1] + logs()
    for i in range(3):
        make_pod(kube, ns, f"after{i}")
    for i in range(3):
        assert wait_for(lambda i=i: node_of(kube, ns, f"after{i}"), timeout=60) == f"{ns}-b", logs()

    # nothing it asked for was denied by RBAC, and it wrote nothing to its root filesystem
    full = run(*PODMAN, "logs", container_name)
    # an RBAC denial (not the 403 for other tests' terminating namespaces in the shared apiserver)
    denied = [
        line
        for line in (full.stdout + full.stderr).splitlines()
        if "permission denied" in line or "is forbidden: User" in line
    ]
    assert denied == [], "\n".join(denied[:10])
    changed = run(*PODMAN, "diff", container_name)
    mounts = (mount["mountPath"], SA_DIR.removeprefix("/var"))  # podman makes the mount points
    written = [
        line
        for line in changed.stdout.splitlines()
        if not any(m == line[2:] or m.startswith(line[2:] + "/") for m in mounts)
    ]
    assert changed.returncode == 0 and written == [], changed.stdout + changed.stderr
    stopped = run(*PODMAN, "stop", "-t", "20", container_name, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    state = run(*PODMAN, "inspect", "--format", "{{.State.ExitCode}}", container_name)
    assert state.stdout.strip() == "0", logs()
    try:
        lease = kube.request(
            "GET", object_path("coordination.k8s.io/v1", "leases", "policyd-system", "policyd" + suffix)
        )
        assert not lease["spec"].get("holderIdentity"), "the lease is released on SIGTERM"
    except ApiError as err:
        assert err.status == 404, err


TABLES_USED = """
import logging
import lark
messages = []
class Keep(logging.Handler):
    def emit(self, record):
        messages.append(record.getMessage())
lark.logger.addHandler(Keep())
lark.logger.setLevel(logging.DEBUG)
from policyd.backends import kube_fields
from policyd.cel import parser
from policyd.policy import text_form
parser._parser()
text_form._parser()
def derive():
    raise SystemExit("the field table was derived")
kube_fields.derive_table = derive
kube_fields.field_table()
print("\\n".join(messages))
"""


def test_the_image_reads_the_tables_it_was_built_with(image: str, container_name: str) -> None:
    """The grammars' parse tables and the API's field table are read from the image (made when it
    was built), not derived at each start, by the Deployment's user on a read-only root filesystem."""
    user = deployment_container()["pod"]["securityContext"]["runAsUser"]
    done = run(
        *PODMAN, "run", "--name", container_name, *ULIMITS, "--read-only", "--read-only-tmpfs=false",
        "--user", str(user), "--entrypoint", "python3", image, "-c", TABLES_USED,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # both grammars loaded from their files, and neither built nor saved
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["Loading grammar from cache"] * 2, done.stdout
