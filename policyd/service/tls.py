"""TLS for the secure serving port: the server's SSL context and the self-signed certificate used without one.

As kube-scheduler, with no `--tls-cert-file` a certificate for `localhost`, 127.0.0.1 and the host's
name is generated at start. It never touches the filesystem (a pod's root filesystem is read-only):
`ssl` loads certificates only from paths, so the PEM goes into an anonymous memory file
(`memfd_create`) read through /proc/self/fd. With `--client-ca-file`, client certificates signed by
that CA are asked for (not required) and verified; the authenticator reads the verified subject.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from policyd.errors import PolicydError

VALIDITY = datetime.timedelta(days=365)


class TLSConfigError(PolicydError):
    """A certificate, key or CA file that cannot be used."""


@dataclass(frozen=True)
class ServingCertificate:
    """A PEM certificate and its PEM private key."""

    certificate_pem: bytes
    private_key_pem: bytes


def default_hosts(bind_address: str) -> tuple[str, ...]:
    """Names the generated certificate is valid for: localhost, 127.0.0.1, the host name, a specific bind address."""
    hosts = ["localhost", "127.0.0.1", socket.gethostname()]
    if bind_address not in ("", "0.0.0.0", "::"):
        hosts.append(bind_address)
    return tuple(dict.fromkeys(h for h in hosts if h))


def self_signed(hosts: Iterable[str], now: datetime.datetime | None = None) -> ServingCertificate:
    """A new P-256 key and a self-signed server certificate for `hosts` (DNS names or IP addresses)."""
    names = list(dict.fromkeys(hosts))
    if not names:
        raise TLSConfigError("a self-signed certificate needs at least one host name")
    start = now or datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{names[0]}@{int(start.timestamp())}")])
    alt_names: list[x509.GeneralName] = []
    for host in names:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - datetime.timedelta(minutes=1))
        .not_valid_after(start + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .sign(key, hashes.SHA256())
    )
    return ServingCertificate(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def server_context(
    cert_file: str = "",
    key_file: str = "",
    client_ca_file: str = "",
    generated: ServingCertificate | None = None,
) -> ssl.SSLContext:
    """A TLS 1.2+ server context from certificate files, or from `generated` when no file is named."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file or key_file:
        _load_files(context, cert_file, key_file)
    elif generated is not None:
        _load_in_memory(context, generated)
    else:
        raise TLSConfigError("a serving certificate is needed: --tls-cert-file and --tls-private-key-file")
    if client_ca_file:
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError) as err:
            raise TLSConfigError(f"--client-ca-file {client_ca_file}: {_reason(err)}") from err
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _load_files(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    if not (cert_file and key_file):
        raise TLSConfigError("--tls-cert-file and --tls-private-key-file go together")
    for flag, path in (("--tls-cert-file", cert_file), ("--tls-private-key-file", key_file)):
        if not os.access(path, os.R_OK):
            raise TLSConfigError(f"{flag} {path}: cannot read")
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(
            f"--tls-cert-file {cert_file} / --tls-private-key-file {key_file}: {_reason(err)}"
        ) from err


def _load_in_memory(context: ssl.SSLContext, cert: ServingCertificate) -> None:
    if sys.platform != "linux":
        raise TLSConfigError(
            "cannot hold a generated certificate in memory on this platform (no memfd_create): "
            "give --tls-cert-file and --tls-private-key-file, or --port for plain HTTP"
        )
    fd = os.memfd_create("policyd-serving-cert", os.MFD_CLOEXEC)
    try:
        os.write(fd, cert.private_key_pem + cert.certificate_pem)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def _reason(err: OSError | ssl.SSLError) -> str:
    if isinstance(err, ssl.SSLError):
        return f"not a usable PEM certificate/key ({err.reason or err})"
    return err.strerror or str(err)
