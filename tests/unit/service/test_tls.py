"""The serving certificate: self-signed in memory, or files; client certificates verified against a CA."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from policyd.service import tls


def test_self_signed_certificate_names_the_hosts_and_serves_tls() -> None:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    generated = tls.self_signed(["localhost", "127.0.0.1", "policyd-0"], now=now)
    cert = x509.load_pem_x509_certificate(generated.certificate_pem)
    assert cert.issuer == cert.subject
    assert (
        cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        == f"localhost@{int(now.timestamp())}"
    )
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "policyd-0"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.not_valid_after_utc - now == tls.VALIDITY
    context = tls.server_context(generated=generated)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE


def test_default_hosts_add_a_specific_bind_address_only() -> None:
    assert tls.default_hosts("0.0.0.0")[:2] == ("localhost", "127.0.0.1")
    assert "0.0.0.0" not in tls.default_hosts("0.0.0.0")
    assert tls.default_hosts("10.1.2.3")[-1] == "10.1.2.3"


def write_pair(tmp_path: Path, generated: tls.ServingCertificate) -> tuple[str, str]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(generated.certificate_pem)
    key.write_bytes(generated.private_key_pem)
    return str(cert), str(key)


def test_certificate_files_and_clear_errors(tmp_path: Path) -> None:
    cert, key = write_pair(tmp_path, tls.self_signed(["localhost"]))
    assert tls.server_context(cert, key) is not None
    with pytest.raises(tls.TLSConfigError, match="go together"):
        tls.server_context(cert, "")
    with pytest.raises(tls.TLSConfigError, match=r"--tls-private-key-file .*missing.key: cannot read"):
        tls.server_context(cert, str(tmp_path / "missing.key"))
    other = tls.self_signed(["localhost"])
    (tmp_path / "other.key").write_bytes(other.private_key_pem)
    with pytest.raises(tls.TLSConfigError, match="not a usable PEM"):
        tls.server_context(cert, str(tmp_path / "other.key"))  # a key of another certificate
    with pytest.raises(tls.TLSConfigError, match=r"--client-ca-file .*nope.crt"):
        tls.server_context(cert, key, str(tmp_path / "nope.crt"))
