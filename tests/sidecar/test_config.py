"""The sidecar's broker config: Kafka's names, the broker-to-topic defaults, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.sidecar.config import SidecarConfig
from tierlog.storage.errors import InvalidConfigError


def test_broker_log_settings_become_topic_defaults(tmp_path: Path) -> None:
    config = SidecarConfig.from_properties(
        {
            "log.dirs": f"{tmp_path}/a,{tmp_path}/b",
            "node.id": "3",
            "log.segment.bytes": "1048576",
            "log.flush.interval.messages": "1",
            "log.retention.hours": "24",
        }
    )
    defaults = config.storage.default_log_config
    assert config.storage.log_dirs == (tmp_path / "a", tmp_path / "b")
    assert config.storage.node_id == 3
    assert defaults.segment_bytes == 1048576
    assert defaults.flush_messages == 1
    assert defaults.retention_ms == 24 * 3_600_000


def test_replication_settings_are_kafkas_broker_defaults(tmp_path: Path) -> None:
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "unclean.leader.election.enable": "true",
        }
    )
    assert config.default_replication_factor == 3
    assert config.storage.default_log_config.min_insync_replicas == 2
    assert config.storage.default_log_config.unclean_leader_election_enable is True
    kafkas = SidecarConfig.from_properties({"log.dirs": str(tmp_path)})
    assert kafkas.default_replication_factor == 1
    assert kafkas.storage.default_log_config.min_insync_replicas == 1
    assert kafkas.storage.default_log_config.unclean_leader_election_enable is False


def test_the_tier_bound_has_a_broker_default_under_the_topic_configs_name(
    tmp_path: Path,
) -> None:
    key = "tierlog.remote.segment.max.upload.interval.ms"
    config = SidecarConfig.from_properties({"log.dirs": str(tmp_path), key: "60000"})
    assert config.storage.default_log_config.remote_segment_max_upload_interval_ms == 60_000
    off = SidecarConfig.from_properties({"log.dirs": str(tmp_path)})
    assert off.storage.default_log_config.remote_segment_max_upload_interval_ms == -1
    with pytest.raises(InvalidConfigError, match=key):
        SidecarConfig.from_properties({"log.dirs": str(tmp_path), key: "-5"})


def test_cleaner_settings_configure_the_log_cleaner(tmp_path: Path) -> None:
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "log.cleaner.threads": "2",
            "log.cleaner.backoff.ms": "500",
            "log.cleaner.min.cleanable.ratio": "0.25",
        }
    )
    assert config.storage.cleaner.threads == 2
    assert config.storage.cleaner.backoff_ms == 500
    assert config.storage.default_log_config.min_cleanable_dirty_ratio == 0.25


def test_the_finer_unit_wins_as_in_kafka(tmp_path: Path) -> None:
    config = SidecarConfig.from_properties(
        {"log.dirs": str(tmp_path), "log.retention.hours": "1", "log.retention.ms": "5000"}
    )
    assert config.storage.default_log_config.retention_ms == 5000


@pytest.mark.parametrize(
    ("props", "complaint"),
    [
        ({"log.dirs": "/x", "log.segmnet.bytes": "1"}, "unknown broker config"),
        ({}, "log.dirs"),
        ({"log.dirs": "/x", "log.segment.bytes": "lots"}, "invalid value"),
        ({"log.dirs": "/x", "log.segment.bytes": "3"}, "below its minimum"),
        ({"log.dirs": "/x", "node.id": "one"}, "invalid number"),
        ({"log.dirs": "/x", "listeners": "9092"}, "HOST:PORT"),
        ({"log.dirs": "/x", "listeners": "host:99999"}, "HOST:PORT"),
        ({"log.dirs": "/x", "tierlog.cluster.brokers": "0:h:1"}, "ID@HOST:PORT"),
        ({"log.dirs": "/x", "tierlog.cluster.brokers": "0@h:1,0@g:1"}, "twice"),
        ({"log.dirs": "/x", "tierlog.cluster.kafka.brokers": "0@h"}, "kafka.brokers.*HOST:PORT"),
        ({"log.dirs": "/x", "tierlog.cluster.kafka.brokers": "h:1"}, "kafka.brokers.*ID@HOST"),
        ({"log.dirs": "/x", "socket.request.max.bytes": "0"}, "socket.request.max.bytes"),
        ({"log.dirs": "/x", "socket.request.max.bytes": str(2**31)}, "socket.request.max.bytes"),
        ({"log.dirs": "/x", "default.replication.factor": "0"}, "default.replication.factor"),
        ({"log.dirs": "/x", "default.replication.factor": "three"}, "invalid number"),
        ({"log.dirs": "/x", "min.insync.replicas": "0"}, "min.insync.replicas"),
    ],
)
def test_bad_settings_are_typed_errors(props: dict[str, str], complaint: str) -> None:
    with pytest.raises(InvalidConfigError, match=complaint):
        SidecarConfig.from_properties(props)


def test_network_and_cluster_settings(tmp_path: Path) -> None:
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "broker.id": "2",
            "listeners": "0.0.0.0:9093",
            "advertised.listeners": "broker-2.tierlog:9093",
            "tierlog.cluster.brokers": "1@broker-1.tierlog:9093, 2@broker-2.tierlog:9093",
            "tierlog.cluster.kafka.brokers": "2@broker-2.tierlog:19093,1@broker-1.tierlog:19093",
            "tierlog.shutdown.grace.ms": "5000",
            "socket.request.max.bytes": "8388608",
        }
    )
    assert config.node_id == 2
    assert config.listen == "0.0.0.0:9093"
    assert config.advertised_listener == "broker-2.tierlog:9093"
    assert config.cluster_brokers == ((1, "broker-1.tierlog:9093"), (2, "broker-2.tierlog:9093"))
    assert config.cluster_kafka_brokers == (
        (1, "broker-1.tierlog:19093"),
        (2, "broker-2.tierlog:19093"),
    )
    assert config.shutdown_grace_ms == 5000
    assert config.socket_request_max_bytes == 8388608
    defaults = SidecarConfig.from_properties({"log.dirs": str(tmp_path)})
    assert defaults.socket_request_max_bytes == 100 * 1024 * 1024  # Kafka's default


def test_listeners_name_the_kafka_listener_in_kafkas_syntax(tmp_path: Path) -> None:
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "listeners": "0.0.0.0:9092, PLAINTEXT://0.0.0.0:19092",
            "advertised.listeners": "PLAINTEXT://broker-0.example:19092,broker-0.example:9092",
        }
    )
    assert (config.listen, config.kafka_listen) == ("0.0.0.0:9092", "0.0.0.0:19092")
    assert config.advertised_listener == "broker-0.example:9092"
    assert config.kafka_advertised_listener == "broker-0.example:19092"
    kafka_only = SidecarConfig.from_properties(
        {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}
    )
    assert (kafka_only.listen, kafka_only.kafka_listen) == ("0.0.0.0:9092", "127.0.0.1:0")


@pytest.mark.parametrize(
    ("listeners", "complaint"),
    [
        ("SASL_SSL://0.0.0.0:19092", "serves the certificate of ssl.keystore.location"),
        ("CLIENT://0.0.0.0:19092", "no security protocol for the listener .CLIENT."),
        ("PLAINTEXT://a:1,PLAINTEXT://b:2", "two Kafka listeners"),
        ("a:1,b:2", "two gRPC listeners"),
        ("PLAINTEXT://nowhere", "HOST:PORT"),
    ],
)
def test_listeners_that_cannot_be_served_are_invalid_config(
    tmp_path: Path, listeners: str, complaint: str
) -> None:
    with pytest.raises(InvalidConfigError, match=complaint):
        SidecarConfig.from_properties({"log.dirs": str(tmp_path), "listeners": listeners})


def test_kafka_connection_limits_and_sasl_take_kafkas_names(tmp_path: Path) -> None:
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "oauthbearer,scram-sha-512",
            "connections.max.reauth.ms": "3600000",
            "max.connections": "100",
            "max.connections.per.ip": "10",
            "max.connections.per.ip.overrides": "localhost:50,10.0.0.7:0",
            "max.incremental.fetch.session.cache.slots": "20",
        }
    )
    assert config.kafka_fetch_sessions.cache_slots == 20
    assert config.kafka_fetch_sessions.eviction_ms == 120_000  # Kafka's fixed 2 minutes
    limits = config.kafka_connection_limits
    assert (limits.max_connections, limits.per_ip("10.0.0.1")) == (100, 10)
    assert (limits.per_ip("127.0.0.1"), limits.per_ip("10.0.0.7")) == (50, 0)
    security = config.kafka_security
    assert (security.protocol, security.sasl_mechanisms, security.max_reauth_ms) == (
        "SASL_PLAINTEXT", ("OAUTHBEARER", "SCRAM-SHA-512"), 3_600_000
    )  # fmt: skip


@pytest.mark.parametrize(
    ("props", "complaint"),
    [
        ({"max.connections": "-1"}, "max.connections must be a count"),
        ({"max.connections.per.ip": "many"}, "max.connections.per.ip must be a count"),
        ({"max.connections.per.ip": "0"}, "admits nobody"),
        ({"max.connections.per.ip.overrides": "10.0.0.7"}, "HOST:COUNT"),
        ({"max.connections.per.ip.overrides": "no-such-host.invalid:5"}, "cannot resolve"),
        ({"listener.security.protocol.map": "CLIENT:TLS"}, "NAME:PROTOCOL"),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI"),
        ({"connections.max.reauth.ms": "-1"}, "connections.max.reauth.ms must be 0 or more"),
        ({"sasl.server.max.receive.size": "0"}, "must be positive"),
        ({"max.incremental.fetch.session.cache.slots": "-1"}, "cache.slots must be a count"),
        ({"tierlog.kafka.fetch.session.eviction.ms": "0"}, "eviction.ms must be a count"),
    ],
)
def test_bad_kafka_listener_settings_are_invalid_config(
    tmp_path: Path, props: dict[str, str], complaint: str
) -> None:
    with pytest.raises(InvalidConfigError, match=complaint):
        SidecarConfig.from_properties({"log.dirs": str(tmp_path), **props})
