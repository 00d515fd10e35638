"""TLS on the Kafka listener (``SSL://`` and ``SASL_SSL://``) with the gRPC port's own
certificate settings: kafka-python over TLS produces and consumes, a client that does
not speak TLS is refused at the handshake while others are served, and ``SASL_SSL``
with mutual TLS asks for both a client certificate and the token."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar
from tests.kafka.test_sasl import TOKEN
from tests.support.certs import Authority
from tests.support.scrape import METRICS, scrape_sidecar
from tests.support.sidecars import Sidecars
from tierlog.client.admin import AdminClient

TOPIC = "private"
REFUSED = "tierlog_kafka_connections_refused_total"


@pytest.fixture(scope="module")
def authority() -> Authority:
    return Authority("tierlog kafka test CA")


@pytest.fixture(scope="module")
def ca_file(authority: Authority, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "ca.crt"
    path.write_bytes(authority.certificate_pem)
    return path


def _tls_configs(authority: Authority, work: Path) -> list[str]:
    certificate, key = authority.issue("broker-0", server=True).write(work, "tls")
    return [f"ssl.keystore.location={certificate}", f"tierlog.ssl.keystore.key.location={key}"]


def _create_topic(sidecar: KafkaSidecar, ca_file: Path, **security: str) -> None:
    config = {"bootstrap.servers": sidecar.address, "security.protocol": "SSL"}
    with AdminClient({**config, "ssl.truststore.location": str(ca_file), **security}) as admin:
        admin.create_topic(TOPIC, 1, {})


@pytest.fixture(scope="module")
def sidecar(
    authority: Authority, ca_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaSidecar]:
    work = tmp_path_factory.mktemp("tls")
    with Sidecars() as started:
        sidecar = start_kafka_sidecar(
            started, work / "data", METRICS, *_tls_configs(authority, work), protocol="SSL"
        )
        _create_topic(sidecar, ca_file)
        yield sidecar


def _round_trip(sidecar: KafkaSidecar, value: bytes, **security: Any) -> bytes:
    """Produce ``value`` and read it back, both over ``security``."""
    producer = KafkaProducer(bootstrap_servers=sidecar.kafka_address, acks="all", **security)
    try:
        stored = producer.send(TOPIC, value=value).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=sidecar.kafka_address, **security)
    try:
        partition = TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek(partition, stored.offset)
        read: bytes = consumer.poll(timeout_ms=30_000)[partition][0].value
        return read
    finally:
        consumer.close()


def test_kafka_python_over_tls_produces_and_consumes(sidecar: KafkaSidecar, ca_file: Path) -> None:
    assert "(SSL)" in sidecar.output
    tls = {"security_protocol": "SSL", "ssl_cafile": str(ca_file)}
    assert _round_trip(sidecar, b"over tls", **tls) == b"over tls"


def _until_closed(conn: socket.socket) -> bytes:
    received = b""
    try:
        while chunk := conn.recv(1024):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def test_a_client_not_speaking_tls_is_refused_at_the_handshake(
    sidecar: KafkaSidecar, ca_file: Path
) -> None:
    before = scrape_sidecar(sidecar).value(REFUSED, reason="tls_handshake")
    with socket.create_connection(("127.0.0.1", sidecar.kafka_port), timeout=30) as plain:
        plain.sendall(b"\0\0\0\x10" + bytes(16))  # a Kafka frame, not a ClientHello
        answer = _until_closed(plain)
    assert not answer.startswith(b"\0\0")  # no Kafka answer: at most a TLS alert record
    deadline = time.monotonic() + 10
    while scrape_sidecar(sidecar).value(REFUSED, reason="tls_handshake") != before + 1:
        assert time.monotonic() < deadline, "the refused handshake was not counted"
        time.sleep(0.05)
    tls = {"security_protocol": "SSL", "ssl_cafile": str(ca_file)}
    assert _round_trip(sidecar, b"still served", **tls) == b"still served"


def test_sasl_ssl_with_mutual_tls_asks_for_a_certificate_and_the_token(
    sidecars: Sidecars, tmp_path: Path, authority: Authority, ca_file: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    sidecar = start_kafka_sidecar(
        sidecars,
        tmp_path / "data",
        *_tls_configs(authority, tmp_path),
        f"ssl.truststore.location={ca_file}",
        "ssl.client.auth=required",
        f"tierlog.auth.token.file={token_file}",
        protocol="SASL_SSL",
    )
    client_certificate, client_key = authority.issue("billing", server=False).write(
        tmp_path, "client"
    )
    _create_topic(
        sidecar,
        ca_file,
        **{
            "ssl.keystore.location": str(client_certificate),
            "tierlog.ssl.keystore.key.location": str(client_key),
            "tierlog.auth.token.file": str(token_file),
        },
    )
    security = {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(ca_file),
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "billing",
        "sasl_plain_password": TOKEN,
    }
    certified = {"ssl_certfile": str(client_certificate), "ssl_keyfile": str(client_key)}
    assert _round_trip(sidecar, b"both", **security, **certified) == b"both"
    with pytest.raises(KafkaError):  # no client certificate: no TLS session, no SASL
        KafkaProducer(
            bootstrap_servers=sidecar.kafka_address, bootstrap_timeout_ms=2_000, **security
        ).close()
