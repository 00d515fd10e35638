"""Client settings: Kafka's names and defaults, and a typed error for every bad one."""

from __future__ import annotations

import pytest

from tierlog.client.config import ConsumerConfig, ProducerConfig
from tierlog.client.errors import ConfigError
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.records import CompressionType

KAFKA_4_PRODUCER_DEFAULTS = {
    "acks": "all",
    "linger.ms": "5",
    "batch.size": "16384",
    "compression.type": "none",
    "enable.idempotence": "true",
    "max.in.flight.requests.per.connection": "5",
    "retries": "2147483647",
    "retry.backoff.ms": "100",
    "retry.backoff.max.ms": "1000",
    "delivery.timeout.ms": "120000",
    "request.timeout.ms": "30000",
    "buffer.memory": "33554432",
    "max.block.ms": "60000",
    "max.request.size": "1048576",
    "partitioner.ignore.keys": "false",
    "metadata.max.age.ms": "300000",
}

KAFKA_4_CONSUMER_DEFAULTS = {
    "fetch.min.bytes": "1",
    "fetch.max.bytes": "52428800",
    "fetch.max.wait.ms": "500",
    "max.partition.fetch.bytes": "1048576",
    "max.poll.records": "500",
    "auto.offset.reset": "latest",
    "isolation.level": "read_uncommitted",
    "check.crcs": "true",
    "request.timeout.ms": "30000",
    "default.api.timeout.ms": "60000",
}


def test_producer_defaults_are_kafka_4s() -> None:
    props = ProducerConfig().to_properties()
    assert {k: props[k] for k in KAFKA_4_PRODUCER_DEFAULTS} == KAFKA_4_PRODUCER_DEFAULTS


def test_consumer_defaults_are_kafka_4s() -> None:
    props = ConsumerConfig().to_properties()
    assert {k: props[k] for k in KAFKA_4_CONSUMER_DEFAULTS} == KAFKA_4_CONSUMER_DEFAULTS


def test_properties_round_trip_and_take_strings_or_typed_values() -> None:
    config = ProducerConfig.from_properties(
        {
            "bootstrap.servers": "a:9092, b:9092",
            "linger.ms": 20,
            "batch.size": "65536",
            "compression.type": "zstd",
            "enable.idempotence": True,
        }
    )
    assert config.bootstrap_servers == ("a:9092", "b:9092")
    assert (config.linger_ms, config.batch_size) == (20, 65536)
    assert config.compression is CompressionType.ZSTD
    assert ProducerConfig.from_properties(config.to_properties()) == config


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_kafka_codec_is_accepted(codec: str) -> None:
    config = ProducerConfig.from_properties({"compression.type": codec})
    assert config.compression.name.lower() == codec


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"linger.ms": "-1"}, "linger.ms"),
        ({"linger.ms": "soon"}, "linger.ms"),
        ({"batch.size": str(2**31)}, "batch.size"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"acks": "2"}, "acks"),
        ({"enable.idempotence": "yes"}, "enable.idempotence"),
        ({"max.in.flight.requests.per.connection": "0"}, "max.in.flight.requests.per.connection"),
        ({"buffer.memory": "-5"}, "buffer.memory"),
        ({"lingr.ms": "5"}, "lingr.ms"),
        ({"enable.idempotence": "true", "acks": "1"}, "acks"),
        ({"enable.idempotence": "true", "retries": "0"}, "retries"),
        (
            {"enable.idempotence": "true", "max.in.flight.requests.per.connection": "6"},
            "max.in.flight.requests.per.connection",
        ),
        ({"delivery.timeout.ms": "1000"}, "delivery.timeout.ms"),
    ],
)
def test_bad_producer_settings_name_their_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        ProducerConfig.from_properties(props)
    assert raised.value.key == key
    assert key in str(raised.value)
    assert isinstance(raised.value, InvalidConfigError)
    assert raised.value.reason == "INVALID_CONFIG"


@pytest.mark.parametrize(
    "props",
    [
        {"acks": "1"},
        {"acks": "0"},
        {"retries": "0"},
        {"max.in.flight.requests.per.connection": "10"},
    ],
)
def test_idempotence_left_at_its_default_gives_way_to_settings_that_exclude_it(
    props: dict[str, str],
) -> None:
    """As Kafka's ProducerConfig: only an explicit enable.idempotence=true conflicts."""
    assert ProducerConfig.from_properties(props).enable_idempotence is False


def test_acks_minus_one_means_all() -> None:
    assert ProducerConfig.from_properties({"acks": "-1"}).acks == "all"


def test_delivery_timeout_left_at_its_default_covers_linger_and_request_timeout() -> None:
    config = ProducerConfig.from_properties({"linger.ms": "100000", "request.timeout.ms": "50000"})
    assert config.delivery_timeout_ms == 150_000


def test_a_directly_built_config_takes_every_value_as_said() -> None:
    with pytest.raises(ConfigError, match="acks"):
        ProducerConfig(acks="1")
    assert ProducerConfig(acks="1", enable_idempotence=False).acks == "1"
    with pytest.raises(ConfigError, match=r"linger\.ms"):
        ProducerConfig(linger_ms="5")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"batch\.size"):
        ProducerConfig(batch_size=True)


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"auto.offset.reset": "smallest"}, "auto.offset.reset"),
        ({"fetch.min.bytes": "-1"}, "fetch.min.bytes"),
        ({"max.poll.records": "0"}, "max.poll.records"),
        ({"isolation.level": "serializable"}, "isolation.level"),
        ({"group.instance.idd": "x"}, "group.instance.idd"),
    ],
)
def test_bad_consumer_settings_name_their_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        ConsumerConfig.from_properties(props)
    assert raised.value.key == key


def test_consumer_settings_parse() -> None:
    config = ConsumerConfig.from_properties(
        {"auto.offset.reset": "earliest", "fetch.max.wait.ms": "100", "check.crcs": "false"}
    )
    assert (config.auto_offset_reset, config.fetch_max_wait_ms, config.check_crcs) == (
        "earliest",
        100,
        False,
    )


@pytest.mark.parametrize("protocol", ["consumer", "CONSUMER"])
def test_group_protocol_consumer_is_the_one_protocol(protocol: str) -> None:
    """Kafka 4 users set group.protocol=consumer (KIP-848): the only protocol here."""
    config = ConsumerConfig.from_properties({"group.id": "g", "group.protocol": protocol})
    assert config.group_protocol == "consumer"


def test_group_protocol_classic_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="KIP-848") as raised:
        ConsumerConfig.from_properties({"group.protocol": "classic"})
    assert raised.value.key == "group.protocol"


@pytest.mark.parametrize(
    ("key", "instead"),
    [
        ("session.timeout.ms", "group.consumer.session.timeout.ms"),
        ("heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms"),
        ("partition.assignment.strategy", "group.remote.assignor"),
    ],
)
def test_the_classic_protocols_settings_are_refused_as_kafka_4_refuses_them(
    key: str, instead: str
) -> None:
    """As Kafka 4's consumer under group.protocol=consumer: "cannot be set", and what
    sets it instead."""
    with pytest.raises(ConfigError) as raised:
        ConsumerConfig.from_properties({"group.protocol": "consumer", key: "45000"})
    assert raised.value.key == key
    assert "cannot be set when group.protocol=consumer" in str(raised.value)
    assert instead in str(raised.value)
