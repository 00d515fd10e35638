"""SASL/SCRAM on the Kafka listener with real clients: Kafka's own ``kafka-configs``
(ConfigCommand 4.1.1) adds and describes a user's credentials over a connection that
holds the broker's token (PLAIN); kafka-python and Kafka's console consumer then log in
as that user with SCRAM-SHA-256 and SCRAM-SHA-512 and produce and consume. A wrong
password, an unknown user and a SCRAM user altering credentials are refused with
Kafka's codes."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError
from kafka.net.sasl.scram import ScramClient

from tests.kafka.conftest import KafkaSidecar, run_java
from tests.kafka.test_bad_input import _wait_for_log
from tests.kafka.test_protocol import METADATA, METADATA_V, _metadata
from tests.kafka.test_sasl import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    TOKEN,
    produce_and_read_back,
    start_token_sidecar,
)
from tests.kafka.wire import KafkaWire
from tests.support.local_cluster import kafka_bootstrap, running_cluster
from tests.support.sidecars import Sidecars
from tests.tools.franz_go import franz_go_test_bin

CONFIGS = "kafka.admin.ConfigCommand"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
TOPIC, JAVA_TOPIC = "scram", "scram-java"
DESCRIBE, ALTER = 50, 51
USER, PASSWORD = "alice", "alice-secret"


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    """A SASL listener with PLAIN (the token) and both SCRAMs, and alice's credentials
    added by ``kafka-configs`` as an operator adds them."""
    work = tmp_path_factory.mktemp("scram")
    with Sidecars() as started:
        sidecar = start_token_sidecar(
            started, work, (TOPIC, JAVA_TOPIC), f"sasl.enabled.mechanisms={','.join(MECHANISMS)}"
        )
        admin = _client_config(work / "admin.properties", "PLAIN", "admin", TOKEN)
        run_java(
            CONFIGS, "--bootstrap-server", sidecar.kafka_address, "--command-config", admin,
            "--alter", "--entity-type", "users", "--entity-name", USER, "--add-config",
            f"SCRAM-SHA-256=[iterations=8192,password={PASSWORD}],"
            f"SCRAM-SHA-512=[password={PASSWORD}]",
        )  # fmt: skip
        sidecar.admin_config = admin  # type: ignore[attr-defined]
        yield sidecar


def _client_config(path: Path, mechanism: str, user: str, password: str) -> str:
    module = (
        "org.apache.kafka.common.security.plain.PlainLoginModule"
        if mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule"
    )
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        f'sasl.jaas.config={module} required username="{user}" password="{password}";\n'
    )
    return str(path)


def test_kafka_configs_describes_the_credentials_it_added(sidecar: KafkaSidecar) -> None:
    printed = run_java(
        CONFIGS, "--bootstrap-server", sidecar.kafka_address,
        "--command-config", sidecar.admin_config,  # type: ignore[attr-defined]
        "--describe", "--entity-type", "users", "--entity-name", USER,
    )  # fmt: skip
    assert printed.splitlines() == [  # 4096: kafka-configs' default iterations
        f"SCRAM credential configs for user-principal '{USER}' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"
    ]


def _scram(mechanism: str, password: str = PASSWORD) -> dict[str, Any]:
    return {
        "bootstrap_servers": "",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": USER,
        "sasl_plain_password": password,
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_logs_in_with_scram_and_produces_and_consumes(
    sidecar: KafkaSidecar, mechanism: str
) -> None:
    security = {**_scram(mechanism), "bootstrap_servers": sidecar.kafka_address}
    assert produce_and_read_back(security, TOPIC, mechanism.encode()) == mechanism.encode()


def test_kafka_console_consumer_logs_in_with_scram_sha_512(
    sidecar: KafkaSidecar, tmp_path: Path
) -> None:
    security = {**_scram("SCRAM-SHA-512"), "bootstrap_servers": sidecar.kafka_address}
    producer = KafkaProducer(acks="all", **security)
    try:
        stored = producer.send(JAVA_TOPIC, value=b"read by java").get(timeout=30)
    finally:
        producer.close()
    config = _client_config(tmp_path / "alice.properties", "SCRAM-SHA-512", USER, PASSWORD)
    printed = run_java(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", sidecar.kafka_address, "--consumer.config", config,
        "--topic", JAVA_TOPIC, "--partition", "0", "--offset", str(stored.offset),
        "--max-messages", "1",
    )  # fmt: skip
    assert printed.splitlines() == ["read by java"]


def test_kafka_python_with_a_wrong_password_fails_to_authenticate(sidecar: KafkaSidecar) -> None:
    with pytest.raises(KafkaError):
        producer = KafkaProducer(
            **{**_scram("SCRAM-SHA-256", "wrong"), "bootstrap_servers": sidecar.kafka_address},
            bootstrap_timeout_ms=2_000,
        )
        try:
            producer.send(TOPIC, value=b"never").get(timeout=10)
        finally:
            producer.close()
    _wait_for_log(sidecar, "authentication failed: SCRAM: invalid user credentials")


def _scram_login(wire: KafkaWire, mechanism: str, user: str, password: str) -> Any:
    """SCRAM over SaslAuthenticate v2 (kafka-python's client computes the messages): the
    answer to the client's final message, or the first failing answer."""
    assert wire.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code.name == "none"
    client = ScramClient(user, password, mechanism)
    first = wire.call(SASL_AUTHENTICATE, 2, {"auth_bytes": client.first_message()})
    if first.error_code.name != "none":
        return first
    client.process_server_first_message(first.auth_bytes)
    final = wire.call(SASL_AUTHENTICATE, 2, {"auth_bytes": client.final_message()})
    if final.error_code.name == "none":
        client.process_server_final_message(final.auth_bytes)  # the server's proof checks
    return final


@pytest.mark.parametrize(
    ("user", "password"), [(USER, "wrong"), ("mallory", PASSWORD)], ids=["wrong", "unknown"]
)
def test_a_wrong_password_or_unknown_user_is_sasl_authentication_failed(
    sidecar: KafkaSidecar, user: str, password: str
) -> None:
    wire = KafkaWire(sidecar.kafka_port)
    try:
        answer = _scram_login(wire, "SCRAM-SHA-256", user, password)
        assert answer.error_code.name == "sasl_authentication_failed"
        assert answer.error_message == "SCRAM: invalid user credentials"  # the same for both
        assert wire.sock.recv(1) == b""  # closed
    finally:
        wire.close()


def _upsertion(user: str, iterations: int) -> dict[str, Any]:
    return {
        "name": user,
        "mechanism": 1,
        "iterations": iterations,
        "salt": b"salt",
        "salted_password": b"x" * 32,
    }


def test_a_scram_user_may_not_alter_or_describe_credentials(sidecar: KafkaSidecar) -> None:
    wire = KafkaWire(sidecar.kafka_port)
    try:
        assert _scram_login(wire, "SCRAM-SHA-512", USER, PASSWORD).error_code.name == "none"
        assert wire.call(METADATA, METADATA_V, _metadata(None)).topics is not None  # served
        altered = wire.call(ALTER, 0, {"deletions": [], "upsertions": [_upsertion(USER, 8192)]})
        described = wire.call(DESCRIBE, 0, {"users": None})
    finally:
        wire.close()
    assert [(r.user, r.error_code.name) for r in altered.results] == [
        (USER, "cluster_authorization_failed")
    ]
    assert described.error_code.name == "cluster_authorization_failed"


def test_the_token_holder_adds_deletes_and_describes_credentials(
    sidecar: KafkaSidecar,
) -> None:
    admin = KafkaWire(sidecar.kafka_port)
    try:
        plain = f"\0admin\0{TOKEN}".encode()
        assert admin.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code.name == "none"
        assert admin.call(SASL_AUTHENTICATE, 2, {"auth_bytes": plain}).error_code.name == "none"
        added = admin.call(
            ALTER,
            0,
            {"deletions": [], "upsertions": [_upsertion("bob", 4096), _upsertion("eve", 1)]},
        )
        deleted = admin.call(
            ALTER, 0, {"deletions": [{"name": "bob", "mechanism": 1}], "upsertions": []}
        )
        described = admin.call(DESCRIBE, 0, {"users": [{"name": "bob"}, {"name": USER}]})
    finally:
        admin.close()
    assert [(r.user, r.error_code.name) for r in added.results] == [
        ("bob", "none"), ("eve", "unacceptable_credential")
    ]  # fmt: skip
    assert [(r.user, r.error_code.name) for r in deleted.results] == [("bob", "none")]
    assert [(r.user, r.error_code.name) for r in described.results] == [
        ("bob", "resource_not_found"), (USER, "none")
    ]  # fmt: skip
    assert [(i.mechanism, i.iterations) for i in described.results[1].credential_infos] == [
        (1, 8192), (2, 4096)
    ]  # fmt: skip


def test_credentials_altered_through_one_broker_log_in_at_another(tmp_path: Path) -> None:
    """``tierlog cluster up`` (2 brokers, their Kafka listeners mapped to SASL_PLAINTEXT):
    the credentials live in the cluster's partition-state store, not in a broker."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    cluster = tmp_path / "cluster"
    with running_cluster(
        cluster,
        2,
        f"tierlog.auth.token.file={token_file}",
        "listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT",
        f"sasl.enabled.mechanisms={','.join(MECHANISMS)}",
    ):
        first, second = (int(a.rpartition(":")[2]) for a in kafka_bootstrap(cluster).split(","))
        salted = hashlib.pbkdf2_hmac("sha512", PASSWORD.encode(), b"pepper", 4096)
        upsertion = {**_upsertion("carol", 4096), "mechanism": 2}
        upsertion.update(salt=b"pepper", salted_password=salted)
        admin = KafkaWire(first)
        try:
            plain = f"\0admin\0{TOKEN}".encode()
            assert admin.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code.name == "none"
            assert admin.call(SASL_AUTHENTICATE, 2, {"auth_bytes": plain}).error_code.name == "none"
            altered = admin.call(ALTER, 0, {"deletions": [], "upsertions": [upsertion]})
        finally:
            admin.close()
        assert [(r.user, r.error_code.name) for r in altered.results] == [("carol", "none")]
        elsewhere = KafkaWire(second)
        try:
            login = _scram_login(elsewhere, "SCRAM-SHA-512", "carol", PASSWORD)
        finally:
            elsewhere.close()
    assert login.error_code.name == "none"


@pytest.mark.go_tools
@pytest.mark.parametrize("bits", ["256", "512"])
def test_franz_gos_scram_tests_pass(sidecar: KafkaSidecar, tmp_path: Path, bits: str) -> None:
    """franz-go's own TestSCRAMAuth (logs in as the user it is given) and
    TestSCRAMAuthBadCredentials (expects SASL_AUTHENTICATION_FAILED), as its suite runs
    them against a SCRAM listener (``KGO_TEST_SCRAM=user:pass:bits``)."""
    env = {
        **os.environ,
        "KGO_SEEDS": sidecar.kafka_address,  # its admin client only asks ApiVersions here
        "KGO_TEST_SCRAM_SEEDS": sidecar.kafka_address,
        "KGO_TEST_SCRAM": f"{USER}:{PASSWORD}:{bits}",
    }
    done = subprocess.run(
        [franz_go_test_bin("kgo"), "-test.run", "^TestSCRAMAuth", "-test.v"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--- PASS: TestSCRAMAuth " in done.stdout
    assert "--- PASS: TestSCRAMAuthBadCredentials " in done.stdout
    assert "SASL_AUTHENTICATION_FAILED" in done.stdout
