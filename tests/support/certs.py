"""Throwaway certificate authorities and certificates for TLS tests (EC P-256, one day)."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    certificate_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """``name.crt`` and ``name.key``, as a Kubernetes TLS Secret mounts them."""
        certificate, key = directory / f"{name}.crt", directory / f"{name}.key"
        certificate.write_bytes(self.certificate_pem)
        key.write_bytes(self.key_pem)
        return certificate, key


class Authority:
    def __init__(self, name: str):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.certificate = (
            _builder(self.name, self.name, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.certificate_pem = self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        *,
        server: bool,
        hosts: Sequence[str] = (),
        loopback: bool = True,
        subject: x509.Name | None = None,
    ) -> Issued:
        """A leaf certificate; a server's names ``hosts`` (IP addresses or DNS names, e.g.
        ``*.demo-brokers.ns.svc``), plus localhost and 127.0.0.1 unless not ``loopback``.
        Its subject is ``CN=common_name`` unless a whole ``subject`` is given."""
        key = ec.generate_private_key(ec.SECP256R1())
        if subject is None:
            subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            _builder(subject, self.name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            names = [*(("localhost", "127.0.0.1") if loopback else ()), *hosts]
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_name(host) for host in names]), critical=False
            )
        certificate = builder.sign(self.key, hashes.SHA256())
        return Issued(
            certificate.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )


def _name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
