"""A real etcd + kube-apiserver (1.20) on loopback: for `policyd bench --mode e2e` and the integration tests.

The binaries (kube-apiserver, etcd, and kube-scheduler for the benchmark) are not part of the package:
`KUBEBUILDER_ASSETS` names the directory holding them (envtest's convention). In a source checkout
`scripts/envtest.sh` provides them: `KUBEBUILDER_ASSETS=$(bash scripts/envtest.sh | tail -n 1)`.
"""

from __future__ import annotations

import csv
import ctypes
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)

ASSETS_VARIABLE = "KUBEBUILDER_ASSETS"
CONTROL_PLANE_BINARIES = ("kube-apiserver", "etcd")
ADMIN_USER = "policyd-admin"
ADMIN_GROUP = "system:masters"
# Without a controller-manager no default ServiceAccount exists, and TaintNodesByCondition
# would leave every new Node tainted not-ready forever: both plugins are turned off.
DISABLED_ADMISSION_PLUGINS = ("ServiceAccount", "TaintNodesByCondition")
LOG_TAIL_LINES = 40
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PORT_ATTEMPTS = 3


class ControlPlaneError(RuntimeError):
    """The local control plane could not be provided or started."""


class MissingAssetsError(ControlPlaneError):
    """The binaries are not where `KUBEBUILDER_ASSETS` says (or it is unset)."""


class PortInUseError(ControlPlaneError):
    """A process exited because the free port picked for it was taken meanwhile."""


def has_binaries(path: Path, names: tuple[str, ...] = CONTROL_PLANE_BINARIES) -> bool:
    """True when every one of `names` is an executable file in `path`."""
    return all(os.access(path / name, os.X_OK) for name in names)


def find_assets(names: tuple[str, ...] = CONTROL_PLANE_BINARIES) -> Path:
    """The directory `KUBEBUILDER_ASSETS` names, holding `names`; raises MissingAssetsError otherwise."""
    assets = os.environ.get(ASSETS_VARIABLE, "")
    if assets and has_binaries(Path(assets), names):
        return Path(assets)
    where = f"{ASSETS_VARIABLE}={assets}" if assets else f"{ASSETS_VARIABLE} is not set"
    raise MissingAssetsError(
        f"needs {', '.join(names)} ({where}): set {ASSETS_VARIABLE} to the directory holding them "
        f"(in a source checkout: {ASSETS_VARIABLE}=$(bash scripts/envtest.sh | tail -n 1))"
    )


def die_with_parent() -> None:
    """In a child process: receive SIGKILL when the process that started it dies (Linux prctl
    PR_SET_PDEATHSIG), so a harness killed outright leaves no control plane or scheduler behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalControlPlane:
    """etcd and kube-apiserver processes on loopback with a token-authenticated admin.

    `assets` is the directory holding the binaries (default: `find_assets()`).
    """

    def __init__(self, assets: Path | None = None, workdir: Path | None = None) -> None:
        self.assets = assets if assets is not None else find_assets()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="policyd-cp-"))
        self.token = os.urandom(16).hex()
        self.etcd_port = 0
        self.apiserver_port = 0
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._logs: list[IO[bytes]] = []
        self._log_offsets: dict[str, int] = {}

    # -- public API ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """The https URL of the apiserver."""
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig_path(self) -> Path:
        """Path of a kubeconfig for the admin token (TLS verification skipped)."""
        return self.workdir / "kubeconfig"

    @property
    def pids(self) -> dict[str, int]:
        """The process ids of the running `kube-apiserver` and `etcd`, by binary name."""
        running = (("kube-apiserver", self._apiserver), ("etcd", self._etcd))
        return {name: proc.pid for name, proc in running if proc is not None and proc.poll() is None}

    @property
    def etcd_url(self) -> str:
        """The http URL of etcd's client endpoint."""
        return f"http://127.0.0.1:{self.etcd_port}"

    def start(self) -> LocalControlPlane:
        """Start etcd then the apiserver, and wait until the apiserver is ready."""
        try:
            self._prepare_files()
            for attempt in range(PORT_ATTEMPTS):
                try:
                    self._start_etcd()
                    self.apiserver_port = free_port()
                    self._start_apiserver()
                    break
                except PortInUseError:
                    _terminate(self._etcd)
                    if attempt == PORT_ATTEMPTS - 1:
                        raise
                    log.warning("port taken, retrying with fresh ports attempt=%d", attempt + 1)
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop both processes and delete the work directory (unless POLICYD_ENVTEST_KEEP=1)."""
        _terminate(self._apiserver)
        _terminate(self._etcd)
        self._apiserver = self._etcd = None
        for handle in self._logs:
            handle.close()
        self._logs.clear()
        if self._own_workdir and os.environ.get("POLICYD_ENVTEST_KEEP") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart_apiserver(self) -> None:
        """Stop the apiserver and start it again on the same port, keeping etcd."""
        self.stop_apiserver()
        self.start_apiserver()

    def stop_apiserver(self) -> None:
        """Stop the apiserver, keeping etcd (`start_apiserver` brings it back on the same port)."""
        _terminate(self._apiserver)
        self._apiserver = None

    def kill_apiserver(self) -> None:
        """SIGKILL the apiserver (requests in flight get no answer), keeping etcd; `start_apiserver`
        brings it back on the same port."""
        if self._apiserver is not None and self._apiserver.poll() is None:
            self._apiserver.kill()
            self._apiserver.wait()
        self._apiserver = None

    def start_apiserver(self) -> None:
        """Start the apiserver stopped by `stop_apiserver` or `kill_apiserver`."""
        if self._apiserver is None:
            self._start_apiserver()

    def api_client(self) -> ApiClient:
        """Return a kubernetes.client.ApiClient built from kubeconfig_path."""
        from kubernetes import config  # imported late: the module itself needs no client

        return config.new_client_from_config(config_file=str(self.kubeconfig_path))

    def apiserver_log(self) -> str:
        """Return the tail of the apiserver log."""
        return _tail_file(self.workdir / "kube-apiserver.log")

    def __enter__(self) -> LocalControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- processes ----------------------------------------------------------------

    def _prepare_files(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "certs").mkdir(exist_ok=True)
        with open(self.workdir / "tokens.csv", "w", newline="") as handle:
            csv.writer(handle).writerow([self.token, ADMIN_USER, ADMIN_USER, ADMIN_GROUP])
        key = self.workdir / "sa.key"
        if not key.exists():
            _write_rsa_key(key)

    def _start_etcd(self) -> None:
        self.etcd_port = free_port()
        peer_port = free_port()
        peer = f"http://127.0.0.1:{peer_port}"
        args = [
            str(self.assets / "etcd"),
            "--name=policyd",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=policyd={peer}",
        ]
        self._etcd = self._spawn(args, "etcd.log")
        self._wait_ready(
            self._etcd,
            "etcd",
            "etcd.log",
            lambda: _http_ok(f"{self.etcd_url}/health"),
            timeout=30,
        )

    def _start_apiserver(self) -> None:
        key = self.workdir / "sa.key"
        args = [
            str(self.assets / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={self.workdir / 'certs'}",
            f"--secure-port={self.apiserver_port}",
            "--insecure-port=0",  # 1.20 still opens an unauthenticated :8080 by default
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            f"--service-account-key-file={key}",
            f"--service-account-signing-key-file={key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--disable-admission-plugins={','.join(DISABLED_ADMISSION_PLUGINS)}",
            "--allow-privileged=true",
            "--v=1",
        ]
        self._apiserver = self._spawn(args, "kube-apiserver.log")
        self._wait_ready(
            self._apiserver,
            "kube-apiserver",
            "kube-apiserver.log",
            lambda: _http_ok(f"{self.url}/readyz", token=self.token),
            timeout=60,
        )

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen[bytes]:
        handle = open(self.workdir / log_name, "ab")
        self._logs.append(handle)
        self._log_offsets[log_name] = handle.tell()
        log.info("starting cmd=%s log=%s", args[0], self.workdir / log_name)
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            start_new_session=True,
            # a harness killed outright (SIGKILL, a timeout) leaves no etcd or kube-apiserver behind
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
        )

    def _wait_ready(
        self,
        proc: subprocess.Popen[bytes],
        name: str,
        log_name: str,
        probe: Callable[[], bool],
        timeout: float,
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = _tail_file(self.workdir / log_name, self._log_offsets.get(log_name, 0))
                error = PortInUseError if "address already in use" in tail else ControlPlaneError
                raise error(f"{name} exited with code {proc.returncode}; log tail:\n{tail}")
            if probe():
                log.info("ready name=%s seconds=%.1f", name, timeout - (deadline - time.monotonic()))
                return
            time.sleep(0.1)
        tail = _tail_file(self.workdir / log_name, self._log_offsets.get(log_name, 0))
        raise ControlPlaneError(f"{name} not ready after {timeout}s; log tail:\n{tail}")

    def _write_kubeconfig(self) -> None:
        self.kubeconfig_path.write_text(
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: policyd-test\n"
            "  cluster:\n"
            f"    server: {self.url}\n"
            "    insecure-skip-tls-verify: true\n"
            "users:\n"
            f"- name: {ADMIN_USER}\n"
            "  user:\n"
            f"    token: {self.token}\n"
            "contexts:\n"
            "- name: policyd-test\n"
            "  context:\n"
            "    cluster: policyd-test\n"
            f"    user: {ADMIN_USER}\n"
            "current-context: policyd-test\n"
        )


def _write_rsa_key(path: Path) -> None:
    """Write a 2048-bit RSA private key in PEM form (with openssl)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ControlPlaneError("needs openssl on PATH to make the service-account key")
    subprocess.run(
        [openssl, "genrsa", "-out", str(path), "2048"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _http_ok(url: str, token: str | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _terminate(proc: subprocess.Popen[bytes] | None, timeout: float = 10) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _tail_file(path: Path, offset: int = 0, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return _tail(handle.read().decode(errors="replace"), lines)
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
