"""SASL on the Kafka listener (``listeners=SASL_PLAINTEXT://...``), over the broker's
bearer token: kafka-python authenticates with PLAIN and OAUTHBEARER and is served;
wrong credentials, an unknown mechanism and a request before authentication end the
connection as Kafka's broker ends it; handshake v0's bare messages work too."""

from __future__ import annotations

import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError
from kafka.net.sasl.oauth import AbstractTokenProvider

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar
from tests.kafka.test_bad_input import _wait_for_log
from tests.kafka.test_fetch_sessions import FETCH, NAMES_V, _fetch
from tests.kafka.test_protocol import METADATA, METADATA_V, _metadata
from tests.kafka.wire import KafkaWire
from tests.support.scrape import METRICS, scrape_sidecar
from tests.support.sidecars import Sidecars, console_script
from tierlog.client.admin import AdminClient

TOKEN = "the-brokers-bearer-token"
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
TOPIC = "secured"


class _Token(AbstractTokenProvider):  # type: ignore[misc]
    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def token(self) -> str:
        return self._token


def start_token_sidecar(
    started: Sidecars, work: Path, topics: tuple[str, ...], *configs: str
) -> KafkaSidecar:
    """A SASL_PLAINTEXT listener whose broker token is ``TOKEN``, with ``topics`` created
    (one partition each) over gRPC."""
    token_file = work / "token"
    token_file.write_text(TOKEN + "\n")
    sidecar = start_kafka_sidecar(
        started,
        work / "data",
        METRICS,
        f"tierlog.auth.token.file={token_file}",
        *configs,
        protocol="SASL_PLAINTEXT",
    )
    with AdminClient(
        {"bootstrap.servers": sidecar.address, "tierlog.auth.token.file": token_file}
    ) as admin:
        for topic in topics:
            admin.create_topic(topic, 1, {})
    return sidecar


def produce_and_read_back(security: dict[str, Any], topic: str, value: bytes) -> bytes:
    """``value`` produced (acks=all) and read back at its offset, both with ``security``."""
    producer = KafkaProducer(acks="all", **security)
    try:
        stored = producer.send(topic, value=value).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(**security)
    try:
        partition = TopicPartition(topic, stored.partition)
        consumer.assign([partition])
        consumer.seek(partition, stored.offset)
        records = consumer.poll(timeout_ms=30_000)[partition]
    finally:
        consumer.close()
    value_read: bytes = records[0].value
    return value_read


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        yield start_token_sidecar(started, tmp_path_factory.mktemp("sasl"), (TOPIC,))


def _credentials(mechanism: str, secret: str) -> dict[str, Any]:
    if mechanism == "PLAIN":
        return {"sasl_plain_username": "billing", "sasl_plain_password": secret}
    return {"sasl_oauth_token_provider": _Token(secret)}


@pytest.mark.parametrize("mechanism", ["PLAIN", "OAUTHBEARER"])
def test_kafka_python_authenticates_and_is_served(sidecar: KafkaSidecar, mechanism: str) -> None:
    security = {
        "bootstrap_servers": sidecar.kafka_address,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        **_credentials(mechanism, TOKEN),
    }
    assert produce_and_read_back(security, TOPIC, mechanism.encode()) == mechanism.encode()


def _authenticate(wire: KafkaWire, mechanism: str, message: bytes) -> Any:
    shake = wire.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    assert shake.error_code.name == "none"
    assert list(shake.mechanisms) == ["PLAIN", "OAUTHBEARER"]
    return wire.call(SASL_AUTHENTICATE, 2, {"auth_bytes": message})


def _closed(wire: KafkaWire) -> bool:
    try:
        return wire.sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize(
    ("mechanism", "message"),
    [
        ("PLAIN", b"\0billing\0not-the-token"),
        ("PLAIN", b"someone-else\0billing\0" + TOKEN.encode()),
        ("OAUTHBEARER", b"n,,\x01auth=Bearer not-the-token\x01\x01"),
        ("OAUTHBEARER", b"garbage"),
    ],
    ids=["plain-wrong-password", "plain-other-authzid", "oauth-wrong-token", "oauth-garbage"],
)
def test_failed_credentials_are_answered_then_the_connection_is_closed(
    sidecar: KafkaSidecar, mechanism: str, message: bytes
) -> None:
    failed = "tierlog_kafka_errors_total"
    labels = {"api": "SaslAuthenticate", "reason": "SASL_AUTHENTICATION_FAILED"}
    before = scrape_sidecar(sidecar).value(failed, **labels)
    wire = KafkaWire(sidecar.kafka_port)
    try:
        answer = _authenticate(wire, mechanism, message)
        assert answer.error_code.name == "sasl_authentication_failed"
        assert answer.error_message.startswith(f"SASL/{mechanism}:")
        assert _closed(wire)
    finally:
        wire.close()
    assert scrape_sidecar(sidecar).value(failed, **labels) == before + 1


def test_kafka_python_with_a_wrong_password_fails_to_authenticate(sidecar: KafkaSidecar) -> None:
    with pytest.raises(KafkaError):
        producer = KafkaProducer(
            bootstrap_servers=sidecar.kafka_address,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            bootstrap_timeout_ms=2_000,
            **_credentials("PLAIN", "wrong"),
        )
        try:
            producer.send(TOPIC, value=b"never").get(timeout=10)
        finally:
            producer.close()
    _wait_for_log(sidecar, "authentication failed: SASL/PLAIN: the credentials are not valid")


def test_a_request_before_authentication_closes_the_connection(sidecar: KafkaSidecar) -> None:
    wire = KafkaWire(sidecar.kafka_port)
    try:
        versions = wire.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert versions.error_code.name == "none"  # ApiVersions is answered first
        wire.send(METADATA, METADATA_V, _metadata(None))
        assert _closed(wire)
    finally:
        wire.close()
    assert "api key 3 v12 before SASL authentication ended" in sidecar.output


def test_a_mechanism_not_enabled_is_refused_with_the_enabled_ones(sidecar: KafkaSidecar) -> None:
    wire = KafkaWire(sidecar.kafka_port)
    try:
        shake = wire.call(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
        assert shake.error_code.name == "unsupported_sasl_mechanism"
        assert list(shake.mechanisms) == ["PLAIN", "OAUTHBEARER"]
        assert _closed(wire)
    finally:
        wire.close()


def test_once_authenticated_sasl_requests_are_illegal_sasl_state(sidecar: KafkaSidecar) -> None:
    wire = KafkaWire(sidecar.kafka_port)
    try:
        oauth = b"n,a=billing,\x01auth=Bearer " + TOKEN.encode() + b"\x01\x01"
        assert _authenticate(wire, "OAUTHBEARER", oauth).error_code.name == "none"
        again = wire.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert again.error_code.name == "illegal_sasl_state"
        assert wire.call(METADATA, METADATA_V, _metadata(None)).topics  # served
    finally:
        wire.close()


def _bare(conn: socket.socket, message: bytes) -> bytes:
    conn.sendall(struct.pack(">i", len(message)) + message)
    size = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
    return conn.recv(size, socket.MSG_WAITALL) if size else b""


def test_handshake_v0_takes_the_mechanisms_message_bare(sidecar: KafkaSidecar) -> None:
    wire = KafkaWire(sidecar.kafka_port)
    try:
        assert wire.call(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code.name == "none"
        assert _bare(wire.sock, b"\0billing\0" + TOKEN.encode()) == b""
        assert wire.call(METADATA, METADATA_V, _metadata(None)).topics
    finally:
        wire.close()
    refused = KafkaWire(sidecar.kafka_port)
    try:
        assert refused.call(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code.name == "none"
        refused.sock.sendall(struct.pack(">i", 11) + b"\0billing\0no")
        assert _closed(refused)
    finally:
        refused.close()


def test_a_sasl_listener_without_a_token_stops_the_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            console_script("tierlog-sidecar"),
            "--data-dir", str(tmp_path / "data"),
            "--listen", "127.0.0.1:0",
            "--config", "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        ],
        capture_output=True,
        encoding="utf-8",
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "INVALID_CONFIG: a SASL_PLAINTEXT Kafka listener checks clients" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_fetch_session_belongs_to_the_principal_that_made_it(sidecar: KafkaSidecar) -> None:
    """Another principal naming the session's id is told it does not exist; the owner's
    next connection goes on with it (sessions are not tied to a connection)."""

    def authenticated(user: str) -> KafkaWire:
        wire = KafkaWire(sidecar.kafka_port)
        plain = f"\0{user}\0{TOKEN}".encode()
        assert _authenticate(wire, "PLAIN", plain).error_code.name == "none"
        return wire

    owner, other = authenticated("billing"), authenticated("shipping")
    try:
        made = owner.call(FETCH, NAMES_V, _fetch((0, 0), {TOPIC: {0: 0}}))
        session = made.session_id
        stolen = other.call(FETCH, NAMES_V, _fetch((session, 1), {}))
        owner.close()
        owner = authenticated("billing")
        kept = owner.call(FETCH, NAMES_V, _fetch((session, 1), {}))
    finally:
        owner.close()
        other.close()

    assert session != 0
    assert stolen.error_code.name == "fetch_session_id_not_found"
    assert (kept.error_code.name, kept.session_id) == ("none", session)
