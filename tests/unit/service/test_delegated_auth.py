"""The secure port end to end in one process: HTTPS, delegated authentication and authorization, kube's answers."""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from policyd.scheduler.metrics import SchedulerMetrics
from policyd.service import tls
from policyd.service.authentication import DelegatedAuthenticator
from policyd.service.authorization import DelegatedAuthorizer
from policyd.service.delegated_auth import DelegatedAccess
from policyd.service.http import ServingEndpoints


def token_answer(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["token"] == "reader-token":
        return {"authenticated": True, "user": {"username": "reader", "groups": ["system:authenticated"]}}
    return {"authenticated": False}


def sar_answer(spec: dict[str, Any]) -> dict[str, Any]:
    allowed = spec["user"] == "reader" and spec["nonResourceAttributes"] == {
        "path": "/metrics",
        "verb": "get",
    }
    return {"allowed": allowed, "reason": "no RBAC policy matched" if not allowed else ""}


def write_pair(tmp_path: Path, generated: tls.ServingCertificate) -> tuple[str, str]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(generated.certificate_pem)
    key.write_bytes(generated.private_key_pem)
    return str(cert), str(key)


def make_ca(tmp_path: Path) -> tuple[Path, ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "ca.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key, cert


def client_certificate(
    tmp_path: Path, ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, user: str, groups: list[str]
) -> tuple[str, str]:
    """A client certificate for CN=user, O=groups signed by the CA: (cert file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    generated = tls.ServingCertificate(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    (tmp_path / user).mkdir()
    return write_pair(tmp_path / user, generated)


@pytest.fixture
def secure(tmp_path: Path, make_reviews: Any) -> Iterator[tuple[ServingEndpoints, Any, Path]]:
    ca_file, ca_key, ca = make_ca(tmp_path)
    reviews = make_reviews(lambda spec: token_answer(spec) if "token" in spec else sar_answer(spec))
    metrics = SchedulerMetrics()
    server = ServingEndpoints(
        metrics.registry,
        port=0,
        configz=lambda: {"ok": True},
        tls=tls.server_context(generated=tls.self_signed(["localhost"]), client_ca_file=str(ca_file)),
        access=DelegatedAccess(DelegatedAuthenticator(reviews), DelegatedAuthorizer(reviews)),
    )
    server.start()
    admin = client_certificate(tmp_path, ca_key, ca, "admin", ["system:masters"])
    yield server, reviews, Path(admin[0]).parent
    server.stop()


def get(url: str, token: str = "", cert_dir: Path | None = None) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert_dir is not None:
        context.load_cert_chain(str(cert_dir / "tls.crt"), str(cert_dir / "tls.key"))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_https_with_delegated_access_answers_as_kube(secure: tuple[ServingEndpoints, Any, Path]) -> None:
    server, reviews, admin = secure
    assert server.url.startswith("https://")
    assert get(server.url + "/healthz") == (200, "ok")
    assert get(server.url + "/readyz?verbose")[0] == 200
    status, body = get(server.url + "/metrics")
    assert status == 403
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'forbidden: User "system:anonymous" cannot get path "/metrics": no RBAC policy matched',
        "reason": "Forbidden",
        "details": {},
        "code": 403,
    }
    status, body = get(server.url + "/metrics", "reader-token")
    assert status == 200 and "scheduler_schedule_attempts_total" in body
    assert get(server.url + "/configz", "reader-token")[0] == 403
    status, body = get(server.url + "/metrics", "stolen")
    assert status == 401 and json.loads(body)["message"] == "Unauthorized"
    sent = len(reviews.sent)
    assert get(server.url + "/configz", cert_dir=admin) == (200, '{\n  "ok": true\n}\n')  # system:masters
    assert len(reviews.sent) == sent  # the certificate named the user; its group needs no review


def test_review_failure_is_500_and_plain_http_is_not_served(
    secure: tuple[ServingEndpoints, Any, Path],
) -> None:
    server, reviews, _ = secure
    reviews.down = True
    status, body = get(server.url + "/metrics", "reader-token")
    assert status == 401  # the TokenReview failed
    reviews.down = False
    get(server.url + "/metrics", "reader-token")
    reviews.down = True
    status, body = get(server.url + "/configz", "reader-token")  # token cached, the access review fails
    assert status == 500 and "SubjectAccessReview failed" in json.loads(body)["message"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        assert b"200" not in sock.recv(1024)
    assert get(server.url + "/healthz") == (200, "ok")  # still serving
