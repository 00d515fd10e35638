"""SASL re-authentication (KIP-368) on the Kafka listener, with
``connections.max.reauth.ms``: SaslAuthenticate tells the client the session's lifetime,
kafka-python re-authenticates its connections before it ends and goes on serving on
them, a connection that does not is closed at its next request, and a re-authentication
must keep its mechanism and principal."""

from __future__ import annotations

import datetime
import hashlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer

from tests.kafka.conftest import KafkaSidecar
from tests.kafka.test_bad_input import _wait_for_log
from tests.kafka.test_protocol import METADATA, METADATA_V, _metadata
from tests.kafka.test_sasl import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    TOKEN,
    _closed,
    start_token_sidecar,
)
from tests.kafka.test_scram_clients import ALTER
from tests.kafka.wire import KafkaWire
from tests.support.scrape import scrape_sidecar
from tests.support.sidecars import Sidecars

REAUTH_MS = 2000  # kafka-python re-authenticates at 85-95% of it
LIFETIME = datetime.timedelta(milliseconds=REAUTH_MS)
TOPIC = "renewed"
USER, PASSWORD = "dave", "dave-secret"


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        sidecar = start_token_sidecar(
            started,
            tmp_path_factory.mktemp("reauth"),
            (TOPIC,),
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
            f"connections.max.reauth.ms={REAUTH_MS}",
        )
        admin = _plain(sidecar, "admin")
        try:
            salted = hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), b"salt", 4096)
            user = {"name": USER, "mechanism": 1, "iterations": 4096, "salt": b"salt"}
            upsertion = {**user, "salted_password": salted}
            added = admin.call(ALTER, 0, {"deletions": [], "upsertions": [upsertion]})
            assert added.results[0].error_code.name == "none"
        finally:
            admin.close()
        yield sidecar


def _authenticate(wire: KafkaWire, user: str, mechanism: str = "PLAIN") -> Any:
    shake = wire.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if shake.error_code.name != "none":
        return shake
    return wire.call(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{TOKEN}".encode()})


def _plain(sidecar: KafkaSidecar, user: str) -> KafkaWire:
    wire = KafkaWire(sidecar.kafka_port)
    answer = _authenticate(wire, user)
    assert answer.error_code.name == "none"
    assert answer.session_lifetime == LIFETIME
    return wire


def _handshakes(sidecar: KafkaSidecar) -> float:
    return scrape_sidecar(sidecar).value(
        "tierlog_kafka_requests_total", api="SaslHandshake", code="NONE"
    )


def test_kafka_python_re_authenticates_with_scram_and_goes_on(sidecar: KafkaSidecar) -> None:
    closed = {"reason": "authentication"}
    closed_total = "tierlog_kafka_connections_closed_total"
    closed_before = scrape_sidecar(sidecar).value(closed_total, **closed)
    producer = KafkaProducer(
        bootstrap_servers=sidecar.kafka_address,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=USER,
        sasl_plain_password=PASSWORD,
        acks="all",
    )
    try:
        first = producer.send(TOPIC, value=b"before").get(timeout=30)
        open_connections = scrape_sidecar(sidecar).value("tierlog_kafka_connections")
        handshakes = _handshakes(sidecar)
        deadline = time.monotonic() + 3 * REAUTH_MS / 1000 + 30
        while _handshakes(sidecar) < handshakes + open_connections:  # each renewed once
            assert time.monotonic() < deadline, "no re-authentication"
            time.sleep(0.1)
        second = producer.send(TOPIC, value=b"after").get(timeout=30)
    finally:
        producer.close()
    assert second.offset == first.offset + 1
    assert scrape_sidecar(sidecar).value(closed_total, **closed) == closed_before


def test_a_session_not_renewed_closes_the_connection_at_its_next_request(
    sidecar: KafkaSidecar,
) -> None:
    wire = _plain(sidecar, "forgetful")
    try:
        ended = time.monotonic() + REAUTH_MS / 1000
        assert wire.call(METADATA, METADATA_V, _metadata(None)).topics is not None
        while time.monotonic() < ended:  # the lifetime the broker promised, not a guess
            time.sleep(ended - time.monotonic())
        wire.send(METADATA, METADATA_V, _metadata(None))
        assert _closed(wire)
    finally:
        wire.close()
    _wait_for_log(sidecar, "its SASL session ended (connections.max.reauth.ms)")


@pytest.mark.parametrize(
    ("user", "mechanism", "error"),
    [
        ("billing", "PLAIN", "none"),
        ("someone-else", "PLAIN", "sasl_authentication_failed"),
        ("billing", "SCRAM-SHA-256", "unsupported_sasl_mechanism"),
    ],
    ids=["same", "other-principal", "other-mechanism"],
)
def test_a_re_authentication_keeps_its_mechanism_and_principal(
    sidecar: KafkaSidecar, user: str, mechanism: str, error: str
) -> None:
    wire = _plain(sidecar, "billing")
    try:
        again = _authenticate(wire, user, mechanism)
        assert again.error_code.name == error
        if error == "none":
            assert again.session_lifetime == LIFETIME
            assert wire.call(METADATA, METADATA_V, _metadata(None)).topics is not None
        else:
            assert _closed(wire)
    finally:
        wire.close()
