"""confluent-kafka (librdkafka, PyPI) against the Kafka listener of one real sidecar
(module-scoped: each test has its own topics, groups and transactional ids): idempotent
acks=all produce under every codec read back exactly; consumer groups over the classic
protocol and KIP-848's ``group.protocol=consumer``; a transaction committed and one
aborted, read under read_committed; and the AdminClient. librdkafka is strict about the
protocol (ApiVersions, Metadata's fields, error handling), so each of these is a check on
the listener as much as on the engine. ``debug=protocol,broker`` in a client's config
shows the exchange when one fails."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar, unique_name
from tests.support.sidecars import Sidecars

TIMESTAMP_MS = 1_700_000_000_000
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        sidecar = start_kafka_sidecar(
            started,
            tmp_path_factory.mktemp("librdkafka") / "data",
            "offsets.topic.num.partitions=1",
            "transaction.state.log.num.partitions=1",
            "group.consumer.heartbeat.interval.ms=500",
        )
        sidecar.load_offsets_topic(1)
        yield sidecar


def _config(broker: KafkaSidecar, **settings: Any) -> dict[str, Any]:
    return {"bootstrap.servers": broker.kafka_address, **settings}


def _flush(producer: Producer) -> None:
    assert producer.flush(TIMEOUT_S) == 0, "records left unacknowledged"


def _produce_all(producer: Producer, topic: str, sent: list[tuple[bytes, bytes, int]]) -> None:
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failures.append(error)

    for key, value, partition in sent:
        producer.produce(
            topic,
            value,
            key,
            partition=partition,
            headers=[("trace", key)],
            timestamp=TIMESTAMP_MS,
            on_delivery=delivered,
        )
    _flush(producer)
    assert failures == []


def _drain(consumer: Consumer, count: int) -> list[Message]:
    """Poll until ``count`` records arrived; a consumer error fails the test."""
    read: list[Message] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(read) < count:
        assert time.monotonic() < deadline, f"read {len(read)} of {count}"
        message = consumer.poll(0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        read.append(message)
    return read


def _read_partition(
    broker: KafkaSidecar, topic: str, partition: int, **settings: Any
) -> list[Message]:
    """Every record of a partition, read by an assigned consumer up to the end it is told
    (librdkafka's partition EOF: the high watermark, or the last stable offset under
    read_committed)."""
    consumer = Consumer(
        _config(
            broker,
            **{
                "group.id": unique_name("reader"),
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                **settings,
            },
        )
    )
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        read: list[Message] = []
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            assert time.monotonic() < deadline, f"no end after {len(read)} records"
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                return read
            assert error is None, error
            read.append(message)
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_idempotent_acks_all_produce_reads_back_every_codec(
    broker: KafkaSidecar, codec: str
) -> None:
    topic = unique_name(f"codec-{codec}")
    broker.create_topic(topic, partitions=2)
    producer = Producer(
        _config(
            broker,
            **{
                "enable.idempotence": True,
                "acks": "all",
                "compression.type": codec,
                "linger.ms": 20,
            },
        )
    )
    sent = [(f"key-{i}".encode(), f"value-{i}".encode() * 20, i % 2) for i in range(40)]
    _produce_all(producer, topic, sent)

    for partition in (0, 1):
        read = _read_partition(broker, topic, partition)
        expected = [(k, v) for k, v, p in sent if p == partition]
        assert [m.offset() for m in read] == list(range(len(expected)))
        assert [(m.key(), m.value()) for m in read] == expected
        assert [m.headers() for m in read] == [[("trace", k)] for k, _ in expected]
        assert {m.timestamp() for m in read} == {(1, TIMESTAMP_MS)}  # CreateTime


def _group_consumer(broker: KafkaSidecar, group: str, protocol: str) -> Consumer:
    settings: dict[str, Any] = {
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol == "classic":
        settings |= {
            "group.protocol": "classic",
            "session.timeout.ms": 6_000,
            "heartbeat.interval.ms": 500,
        }
    else:
        settings |= {"group.protocol": "consumer"}
    return Consumer(_config(broker, **settings))


def _poll_until_assigned(consumers: list[Consumer], partitions: int) -> list[set[int]]:
    """Poll every consumer until the group's assignment covers ``partitions`` once."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        for consumer in consumers:
            message = consumer.poll(0.2)
            assert message is None or message.error() is None, message.error()
        owned = [{tp.partition for tp in consumer.assignment()} for consumer in consumers]
        if all(owned) and sorted(p for mine in owned for p in mine) == list(range(partitions)):
            return owned
        assert time.monotonic() < deadline, f"assignment never settled: {owned}"


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_splits_partitions_hands_over_on_close_with_commits(
    broker: KafkaSidecar, protocol: str
) -> None:
    """Two members split two partitions, each reads its own and commits; the second
    closes, and the first, now owning both, resumes the second's partition at its commit."""
    topic, group = unique_name(f"group-{protocol}"), unique_name(f"g-{protocol}")
    broker.create_topic(topic, partitions=2)
    producer = Producer(_config(broker, acks="all"))
    first, second = (
        _group_consumer(broker, group, protocol),
        _group_consumer(broker, group, protocol),
    )
    first.subscribe([topic])
    second.subscribe([topic])
    owned = _poll_until_assigned([first, second], 2)
    assert owned[0].isdisjoint(owned[1])

    _produce_all(producer, topic, [(b"k", f"v{i}".encode(), i % 2) for i in range(10)])
    for consumer, (partition,) in zip((first, second), owned, strict=True):
        assert {m.partition() for m in _drain(consumer, 5)} == {partition}
        # Committed by both: a classic (eager) rebalance revokes the first's partition
        # too, and it then resumes at its commit.
        consumer.commit(asynchronous=False)
    second.close()

    assert _poll_until_assigned([first], 2) == [{0, 1}]
    _produce_all(producer, topic, [(b"k", f"w{i}".encode(), i % 2) for i in range(10)])
    read = _drain(first, 10)
    assert sorted(m.value() for m in read) == sorted(f"w{i}".encode() for i in range(10))
    first.commit(asynchronous=False)
    committed = first.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], TIMEOUT_S)
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 10), (1, 10)]
    first.close()


def test_transaction_commit_and_abort_read_committed(broker: KafkaSidecar) -> None:
    source, sink, group = unique_name("txn-in"), unique_name("txn-out"), unique_name("txn-group")
    broker.create_topic(source)
    broker.create_topic(sink)
    _produce_all(Producer(_config(broker, acks="all")), source, [(b"in", b"input", 0)])
    consumer = _group_consumer(broker, group, "classic")
    consumer.subscribe([source])
    (incoming,) = _drain(consumer, 1)

    producer = Producer(_config(broker, **{"transactional.id": unique_name("txn")}))
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    _produce_all(producer, sink, [(b"a", b"committed", 0)])
    producer.send_offsets_to_transaction(
        [TopicPartition(source, 0, incoming.offset() + 1)],
        consumer.consumer_group_metadata(),
        TIMEOUT_S,
    )
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    _produce_all(producer, sink, [(b"b", b"aborted", 0)])
    producer.abort_transaction(TIMEOUT_S)
    consumer.close()

    committed = _read_partition(broker, sink, 0, **{"isolation.level": "read_committed"})
    assert [m.value() for m in committed] == [b"committed"]
    uncommitted = _read_partition(broker, sink, 0, **{"isolation.level": "read_uncommitted"})
    assert [m.value() for m in uncommitted] == [b"committed", b"aborted"]
    offsets = Consumer(_config(broker, **{"group.id": group}))
    (tp,) = offsets.committed([TopicPartition(source, 0)], TIMEOUT_S)
    offsets.close()
    assert tp.offset == 1


# AlterConfigs is still a call Kafka serves and clients send; librdkafka warns that it is
# deprecated in favour of IncrementalAlterConfigs, which the test calls too.
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_admin_client_topics_configs_and_groups(broker: KafkaSidecar) -> None:
    admin = AdminClient(_config(broker))
    topic, group = unique_name("admin"), unique_name("admin-group")
    (created,) = admin.create_topics(
        [NewTopic(topic, 3, 1, config={"retention.ms": "3600000"})]
    ).values()
    created.result(TIMEOUT_S)
    assert len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 3

    resource = ConfigResource(ResourceType.TOPIC, topic)
    (described,) = admin.describe_configs([resource]).values()
    assert described.result(TIMEOUT_S)["retention.ms"].value == "3600000"
    altered = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "7200000"})
    (future,) = admin.alter_configs([altered]).values()
    future.result(TIMEOUT_S)
    incremental = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (future,) = admin.incremental_alter_configs([incremental]).values()
    future.result(TIMEOUT_S)
    (described,) = admin.describe_configs([resource]).values()
    configs = described.result(TIMEOUT_S)
    assert (configs["retention.ms"].value, configs["cleanup.policy"].value) == (
        "7200000",
        "compact",
    )

    member = _group_consumer(broker, group, "classic")
    member.subscribe([topic])
    _poll_until_assigned([member], 3)
    listed = admin.list_consumer_groups().result(TIMEOUT_S)
    assert group in {g.group_id for g in listed.valid}
    (description,) = admin.describe_consumer_groups([group]).values()
    members = description.result(TIMEOUT_S).members
    assert [sorted(tp.partition for tp in m.assignment.topic_partitions) for m in members] == [
        [0, 1, 2]
    ]
    member.close()

    (deleted,) = admin.delete_topics([topic]).values()
    deleted.result(TIMEOUT_S)
    assert topic not in admin.list_topics(timeout=TIMEOUT_S).topics
