"""A TLS client certificate names the connection's principal on an ``SSL`` listener with
``ssl.client.auth=required``, as Kafka's default principal builder names it: subjects of
every shape rendered byte for byte as Kafka's own ``SslPrincipalMapper`` (rules
``DEFAULT``) over Java's ``X500Principal`` renders them; kafka-python with a certificate
produces and consumes, one without is refused at the handshake; a fetch session belongs
to the certificate that made it; the broker's log names the principal."""

from __future__ import annotations

import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID
from kafka import KafkaProducer
from kafka.errors import KafkaError

from tests.interop.kafka import kafka_tools
from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar
from tests.kafka.test_fetch_sessions import FETCH, NAMES_V, _fetch
from tests.kafka.test_tls import _round_trip
from tests.kafka.wire import KafkaWire
from tests.support.certs import Authority
from tests.support.scrape import METRICS, scrape_sidecar
from tests.support.sidecars import Sidecars
from tierlog.client.admin import AdminClient
from tierlog.kafka.tls_principal import subject_principal

TOPIC = "private"
BILLING = "CN=billing,OU=Payments,O=Example\\, Inc.,C=US"  # as Kafka names it
REFUSED = "tierlog_kafka_connections_refused_total"
JAVA_PRINCIPALS = Path(__file__).parent / "java" / "CertificatePrincipal.java"

_A = x509.NameAttribute
SUBJECTS = [
    x509.Name([_A(NameOID.COMMON_NAME, "billing")]),
    # RDNs last-first; escapes anywhere, and of leading and trailing spaces; UTF-8 as is;
    # an attribute RFC 2253 has no keyword for (an e-mail address) as its DER in hex.
    x509.Name(
        [
            _A(NameOID.COUNTRY_NAME, "CH"),
            _A(NameOID.STATE_OR_PROVINCE_NAME, "ZH"),
            _A(NameOID.LOCALITY_NAME, "Zürich"),
            _A(NameOID.ORGANIZATION_NAME, "Example, Inc."),
            _A(NameOID.ORGANIZATIONAL_UNIT_NAME, "Pay+ments"),
            _A(NameOID.COMMON_NAME, ' lead#a=b;c<d>e"f\\g '),
            _A(NameOID.EMAIL_ADDRESS, "ops@example.com"),
        ]
    ),
    x509.Name.from_rfc4514_string("CN=svc+UID=42,DC=example,DC=com"),  # a multi-valued RDN
    x509.Name(
        [
            _A(NameOID.SERIAL_NUMBER, "1234"),
            _A(NameOID.STREET_ADDRESS, "1 Main St"),
            _A(NameOID.COMMON_NAME, "bmp", _ASN1Type.BMPString),
            _A(NameOID.ORGANIZATION_NAME, "printable", _ASN1Type.PrintableString),
            _A(NameOID.TITLE, "Boss"),
        ]
    ),
]


def test_subjects_are_named_as_kafkas_default_principal_mapping_names_them(
    tmp_path: Path,
) -> None:
    authority = Authority("principals CA")
    paths, ours = [], []
    for index, subject in enumerate(SUBJECTS):
        issued = authority.issue("", server=False, subject=subject)
        certificate, _key = issued.write(tmp_path, f"client-{index}")
        paths.append(str(certificate))
        der = x509.load_pem_x509_certificate(issued.certificate_pem).public_bytes(
            serialization.Encoding.DER
        )
        ours.append(f"User:{subject_principal(der)}")
    tools = kafka_tools()
    java = [str(tools.java), "-cp", tools.classpath, str(JAVA_PRINCIPALS), *paths]
    done = subprocess.run(java, capture_output=True, encoding="utf-8", timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert ours == done.stdout.splitlines()
    assert ours[0] == "User:CN=billing"


@pytest.mark.parametrize(
    "garbage", [b"", b"\x30", b"\x30\x82\xff\xff", b"\x30\x03\x30\x01\x02", b"not a certificate"]
)
def test_bytes_that_are_not_a_certificate_are_a_value_error(garbage: bytes) -> None:
    with pytest.raises(ValueError):
        subject_principal(garbage)


@pytest.fixture(scope="module")
def authority() -> Authority:
    return Authority("tierlog kafka mTLS test CA")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mtls")


def _client(authority: Authority, work: Path, name: str, subject: str) -> dict[str, str]:
    issued = authority.issue(name, server=False, subject=x509.Name.from_rfc4514_string(subject))
    certificate, key = issued.write(work, name)
    return {"ssl_certfile": str(certificate), "ssl_keyfile": str(key)}


@pytest.fixture(scope="module")
def sidecar(authority: Authority, work: Path) -> Iterator[KafkaSidecar]:
    ca_file = work / "ca.crt"
    ca_file.write_bytes(authority.certificate_pem)
    certificate, key = authority.issue("broker-0", server=True).write(work, "tls")
    with Sidecars() as started:
        sidecar = start_kafka_sidecar(
            started,
            work / "data",
            METRICS,
            f"ssl.keystore.location={certificate}",
            f"tierlog.ssl.keystore.key.location={key}",
            f"ssl.truststore.location={ca_file}",
            "ssl.client.auth=required",
            protocol="SSL",
        )
        admin_certificate = _client(authority, work, "admin", "CN=admin")
        config = {
            "bootstrap.servers": sidecar.address,
            "security.protocol": "SSL",
            "ssl.truststore.location": str(ca_file),
            "ssl.keystore.location": admin_certificate["ssl_certfile"],
            "tierlog.ssl.keystore.key.location": admin_certificate["ssl_keyfile"],
        }
        with AdminClient(config) as admin:
            admin.create_topic(TOPIC, 1, {})
        yield sidecar


def _security(work: Path, certificate: dict[str, str] | None) -> dict[str, str]:
    return {"security_protocol": "SSL", "ssl_cafile": str(work / "ca.crt"), **(certificate or {})}


def _wire(sidecar: KafkaSidecar, work: Path, certificate: dict[str, str]) -> KafkaWire:
    context = ssl.create_default_context(cafile=str(work / "ca.crt"))
    context.load_cert_chain(certificate["ssl_certfile"], certificate["ssl_keyfile"])
    return KafkaWire(sidecar.kafka_port, tls=context)


def test_a_client_certificate_is_required_and_kafka_python_presents_one(
    sidecar: KafkaSidecar, authority: Authority, work: Path
) -> None:
    billing = _client(authority, work, "billing", BILLING)
    before = scrape_sidecar(sidecar).value(REFUSED, reason="tls_handshake")

    assert _round_trip(sidecar, b"certified", **_security(work, billing)) == b"certified"
    with pytest.raises(KafkaError):  # no certificate: no TLS session
        KafkaProducer(
            bootstrap_servers=sidecar.kafka_address,
            bootstrap_timeout_ms=2_000,
            **_security(work, None),
        ).close()

    deadline = time.monotonic() + 10
    while scrape_sidecar(sidecar).value(REFUSED, reason="tls_handshake") <= before:
        assert time.monotonic() < deadline, "the handshake without a certificate was not refused"
        time.sleep(0.05)


def test_a_fetch_session_belongs_to_the_certificate_that_made_it(
    sidecar: KafkaSidecar, authority: Authority, work: Path
) -> None:
    billing = _client(authority, work, "billing", BILLING)
    shipping = _client(authority, work, "shipping", "CN=shipping,O=Example")
    owner, other = _wire(sidecar, work, billing), _wire(sidecar, work, shipping)
    try:
        session = owner.call(FETCH, NAMES_V, _fetch((0, 0), {TOPIC: {0: 0}})).session_id
        stolen = other.call(FETCH, NAMES_V, _fetch((session, 1), {}))
        owner.close()
        owner = _wire(sidecar, work, billing)  # the same principal, a new connection
        kept = owner.call(FETCH, NAMES_V, _fetch((session, 1), {}))
    finally:
        owner.close()
        other.close()

    assert session != 0
    assert stolen.error_code.name == "fetch_session_id_not_found"
    assert (kept.error_code.name, kept.session_id) == ("none", session)


def test_the_brokers_log_names_the_certificates_principal(
    sidecar: KafkaSidecar, authority: Authority, work: Path
) -> None:
    wire = _wire(sidecar, work, _client(authority, work, "billing", BILLING))
    try:
        wire.sock.sendall(b"\0\0\0\1x")  # too small for a header: closed, and logged
        assert wire.sock.recv(1) == b""
    finally:
        wire.close()
    deadline = time.monotonic() + 10
    while f"(User:{BILLING}): " not in sidecar.output:
        assert time.monotonic() < deadline, sidecar.output[-2000:]
        time.sleep(0.05)
