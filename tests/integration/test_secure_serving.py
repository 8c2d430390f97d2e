"""`policyd run` serves as kube-scheduler does: HTTPS, TokenReview + SubjectAccessReview against the API server."""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from policyd.backends.kube.client import KubeClient
from policyd.envtest import LocalControlPlane, free_port

from .apiserver import KubeTestContext
from .test_api_backend import wait_for
from .test_run import POLICY, REPO, apply_deploy_rbac, service_account_kubeconfig, service_account_token


def get(url: str, token: str = "") -> tuple[int, str]:
    """GET over HTTPS without verifying the (self-signed) certificate, as the kubelet's probes do."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)


def test_metrics_need_an_authorised_token_and_probes_need_none(
    kube: KubeClient, k8s: KubeTestContext, control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    ns = k8s.namespace
    suffix = "-" + uuid.uuid4().hex[:6]
    apply_deploy_rbac(kube, suffix)
    policyd = service_account_kubeconfig(
        kube, control_plane, "policyd-system", "policyd" + suffix, tmp_path / "kubeconfig"
    )
    reader, nobody = service_account_token(kube, ns, "reader"), service_account_token(kube, ns, "nobody")
    reader_account = {"kind": "ServiceAccount", "name": "reader", "namespace": ns}
    apply_deploy_rbac(kube, suffix, "metrics-reader.yaml", subjects=[reader_account])
    port = free_port()
    args = [sys.executable, "-m", "policyd.cli", "-v", "run", "--kubeconfig", policyd, "--policies", POLICY]
    args += ["--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", str(port)]
    # appending: the process's writes go to the end, whatever our reads' seek(0) did to the shared offset
    with open(tmp_path / "policyd.log", "a+") as log:
        proc = subprocess.Popen(args, cwd=REPO, stderr=log, text=True)
        try:
            base = f"https://127.0.0.1:{port}"
            assert wait_for(lambda: get(base + "/readyz")[0] == 200, timeout=60), log.read()
            assert get(base + "/healthz") == (200, "ok")
            assert get(base + "/livez") == (200, "ok")

            status, body = get(base + "/metrics")
            assert status == 403
            assert (
                json.loads(body)["message"] == 'forbidden: User "system:anonymous" cannot get path "/metrics"'
            )

            status, body = get(base + "/metrics", reader)
            assert status == 200 and "scheduler_schedule_attempts_total" in body

            status, body = get(base + "/metrics", nobody)
            assert status == 403
            assert f'User "system:serviceaccount:{ns}:nobody" cannot get path' in json.loads(body)["message"]
            assert get(base + "/configz", reader)[0] == 403  # the example role grants /metrics only

            status, body = get(base + "/metrics", "not-a-token")
            assert status == 401 and json.loads(body)["reason"] == "Unauthorized"
            assert get(base + "/healthz", "not-a-token")[0] == 401  # authentication comes first, as in kube
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(30)
            log.seek(0)
            output = log.read()
    assert code == 0, output
    assert "permission denied" not in output
