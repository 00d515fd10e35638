"""kafka-python (a real Kafka client, PyPI) against the Kafka listener of a real sidecar:
produce with acks=all under every codec it has, read back exactly; ListOffsets; and the
same records through either front door: written by kafka-python and read by tierlog's
gRPC consumer, written by tierlog's producer and read by kafka-python."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from tests.kafka.conftest import KafkaSidecar
from tierlog.client.consumer import Consumer
from tierlog.client.producer import Producer
from tierlog.storage.topic_partition import TopicPartition

TIMESTAMP_MS = 1_700_000_000_000


def _kafka_records(sidecar: KafkaSidecar, topic: str, count: int) -> list[tuple[object, ...]]:
    consumer = KafkaConsumer(
        bootstrap_servers=sidecar.kafka_address,
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    )
    try:
        consumer.assign([KafkaTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        read: list[tuple[object, ...]] = []
        for message in consumer:
            read.append(
                (
                    message.offset,
                    message.key,
                    message.value,
                    tuple(message.headers),
                    message.timestamp,
                )
            )
            if len(read) == count:
                break
        return read
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_produces_acks_all_and_reads_back_every_codec(
    kafka_sidecar: KafkaSidecar, codec: str | None
) -> None:
    kafka_sidecar.create_topic("events")
    producer = KafkaProducer(
        bootstrap_servers=kafka_sidecar.kafka_address, acks="all", compression_type=codec
    )
    sent = [
        (f"key-{i}".encode(), f"value-{i}".encode() * 20, (("trace", f"t{i}".encode()),))
        for i in range(50)
    ]
    futures = [
        producer.send("events", key=k, value=v, headers=list(h), timestamp_ms=TIMESTAMP_MS + i)
        for i, (k, v, h) in enumerate(sent)
    ]
    producer.flush()
    offsets = [future.get(timeout=10).offset for future in futures]
    producer.close()
    assert offsets == list(range(50))

    read = _kafka_records(kafka_sidecar, "events", 50)

    assert read == [(i, k, v, h, TIMESTAMP_MS + i) for i, (k, v, h) in enumerate(sent)]


def test_list_offsets_earliest_latest_and_by_time(kafka_sidecar: KafkaSidecar) -> None:
    kafka_sidecar.create_topic("timed")
    producer = KafkaProducer(bootstrap_servers=kafka_sidecar.kafka_address, acks="all")
    for i in range(10):
        producer.send("timed", value=b"x", timestamp_ms=TIMESTAMP_MS + 1000 * i).get(timeout=10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_sidecar.kafka_address)
    tp = KafkaTopicPartition("timed", 0)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 10}
        found = consumer.offsets_for_times({tp: TIMESTAMP_MS + 4500})[tp]
        assert (found.offset, found.timestamp) == (5, TIMESTAMP_MS + 5000)
        assert consumer.offsets_for_times({tp: TIMESTAMP_MS + 99_000})[tp] is None
    finally:
        consumer.close()


def test_a_record_written_through_kafka_is_read_through_grpc_and_back(
    kafka_sidecar: KafkaSidecar,
) -> None:
    kafka_sidecar.create_topic("both")
    producer = KafkaProducer(bootstrap_servers=kafka_sidecar.kafka_address, acks="all")
    producer.send(
        "both", key=b"k", value=b"from kafka", headers=[("h", b"1")], timestamp_ms=TIMESTAMP_MS
    ).get(timeout=10)
    producer.close()
    with Producer({"bootstrap.servers": kafka_sidecar.address, "acks": "all"}) as ours:
        ours.send(
            "both", b"from grpc", key=b"g", headers=[("h", b"2")], timestamp=TIMESTAMP_MS + 1
        ).result(10)

    with Consumer({"bootstrap.servers": kafka_sidecar.address}) as consumer:
        consumer.assign([TopicPartition("both", 0)])
        consumer.seek_to_beginning()
        through_grpc: list[tuple[object, ...]] = []
        while len(through_grpc) < 2:
            through_grpc += [
                (r.offset, r.key, r.value, tuple(r.headers), r.timestamp)
                for r in consumer.poll(timeout_ms=1000)
            ]
    through_kafka = _kafka_records(kafka_sidecar, "both", 2)

    expected = [
        (0, b"k", b"from kafka", (("h", b"1"),), TIMESTAMP_MS),
        (1, b"g", b"from grpc", (("h", b"2"),), TIMESTAMP_MS + 1),
    ]
    assert through_grpc == expected
    assert through_kafka == expected


def test_a_read_committed_kafka_consumer_skips_a_transaction_aborted_over_grpc(
    kafka_sidecar: KafkaSidecar,
) -> None:
    kafka_sidecar.create_topic("orders")
    config = {"bootstrap.servers": kafka_sidecar.address, "transactional.id": "app"}
    with Producer({**config, "linger.ms": 0}) as ours:
        ours.init_transactions()
        ours.begin_transaction()
        ours.send("orders", b"aborted", partition=0)
        ours.abort_transaction()
        ours.begin_transaction()
        ours.send("orders", b"committed", partition=0)
        ours.commit_transaction()

    consumer = KafkaConsumer(
        bootstrap_servers=kafka_sidecar.kafka_address, isolation_level="read_committed"
    )
    tp = KafkaTopicPartition("orders", 0)
    read: list[tuple[int, bytes]] = []
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 60
        while consumer.position(tp) < 4:  # past both markers: everything was seen
            assert time.monotonic() < deadline, f"stuck at {consumer.position(tp)}"
            for records in consumer.poll(timeout_ms=1_000).values():
                read += [(m.offset, m.value) for m in records]
    finally:
        consumer.close()

    # offset 0 aborted, 1 its ABORT marker, 2 committed, 3 its COMMIT marker
    assert read == [(2, b"committed")]
