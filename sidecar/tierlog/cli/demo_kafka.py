"""The demo's Kafka step: the sidecar's two front doors over one topic.

kafka-python, a Kafka client that knows nothing of tierlog, produces records through
the Kafka listener and tierlog's own consumer reads them over gRPC; then tierlog's
producer writes and kafka-python reads. Both directions are checked record by record:
offset, key, value, headers and timestamp.

kafka-python is not one of tierlog's dependencies (``pip install 'tierlog[kafka]'``
brings it): without it the step says so and how to get it, and the demo goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tierlog.cli.local_sidecar import LocalSidecar
from tierlog.client import AdminClient, Consumer, Producer, TopicPartition

__all__ = ["KAFKA_SIDECAR_CONFIGS", "KAFKA_TOPIC", "both_front_doors"]

KAFKA_TOPIC = "demo-kafka"
RECORDS = 100
# The Kafka listener on a free loopback port beside gRPC's.
KAFKA_SIDECAR_CONFIGS = ("listeners=PLAINTEXT://127.0.0.1:0",)
_READ_TIMEOUT_S = 15.0

Say = Callable[[str], None]
Check = Callable[[bool, str], None]
Record = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


def both_front_doors(sidecar: LocalSidecar, step: int, say: Say, check: Check) -> None:
    say(f"{step}. Kafka's wire protocol on {sidecar.kafka_address}, beside gRPC, over one topic")
    try:
        import kafka  # optional: only this step needs it
    except ImportError:
        say("   skipped: kafka-python is not installed (pip install 'tierlog[kafka]' brings it)")
        say("")
        return
    partition = TopicPartition(KAFKA_TOPIC, 0)
    with AdminClient(sidecar.address) as admin:
        if KAFKA_TOPIC not in admin.list_topics():
            admin.create_topic(KAFKA_TOPIC, 1)
    with Consumer({"bootstrap.servers": sidecar.address}) as consumer:
        consumer.assign([partition])
        start = consumer.end_offsets([partition])[partition]
    now_ms = int(time.time() * 1000)

    sent = [_record(start + i, b"kafka-python", now_ms + i) for i in range(RECORDS)]
    producer = kafka.KafkaProducer(bootstrap_servers=sidecar.kafka_address, acks="all")
    try:
        for _offset, key, value, headers, timestamp in sent:
            producer.send(
                KAFKA_TOPIC,
                value=value,
                key=key,
                headers=list(headers),
                partition=0,
                timestamp_ms=timestamp,
            )
        producer.flush()
    finally:
        producer.close()
    read = _read_over_grpc(sidecar.address, partition, start)
    check(read == sent, "tierlog's consumer did not read what kafka-python produced")
    say(
        f"   kafka-python produced {RECORDS} records (acks=all); tierlog's consumer read them "
        f"over gRPC at offsets {start}..{start + RECORDS - 1}, each the same"
    )

    start += RECORDS
    sent = [_record(start + i, b"tierlog", now_ms + RECORDS + i) for i in range(RECORDS)]
    with Producer({"bootstrap.servers": sidecar.address, "linger.ms": 5}) as tierlog_producer:
        for _offset, key, value, headers, timestamp in sent:
            tierlog_producer.send(
                KAFKA_TOPIC, value, key=key, headers=headers, partition=0, timestamp=timestamp
            )
    read = _read_over_kafka(kafka, sidecar.kafka_address, start)
    check(read == sent, "kafka-python did not read what tierlog's producer wrote")
    say(
        f"   tierlog's producer wrote {RECORDS} more; kafka-python read them through the "
        f"Kafka listener at offsets {start}..{start + RECORDS - 1}, each the same"
    )
    say("   (offset, key, value, headers and timestamp compared record by record)")
    say("")


def _record(offset: int, writer: bytes, timestamp: int) -> Record:
    return (
        offset,
        b"user-%02d" % (offset % 7),
        b'{"order":%d,"written by":"%s"}' % (offset, writer),
        (("writer", writer),),
        timestamp,
    )


def _read_over_grpc(server: str, partition: TopicPartition, start: int) -> list[Record]:
    read: list[Record] = []
    with Consumer({"bootstrap.servers": server}) as consumer:
        consumer.assign([partition])
        consumer.seek(partition, start)
        deadline = time.monotonic() + _READ_TIMEOUT_S
        while len(read) < RECORDS and time.monotonic() < deadline:
            read += [
                (r.offset, r.key, r.value, tuple(r.headers), r.timestamp)
                for r in consumer.poll(500)
            ]
    return read[:RECORDS]


def _read_over_kafka(kafka: Any, bootstrap: str, start: int) -> list[Record]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, consumer_timeout_ms=int(_READ_TIMEOUT_S * 1000)
    )
    read: list[Record] = []
    try:
        consumer.assign([kafka.TopicPartition(KAFKA_TOPIC, 0)])
        consumer.seek(kafka.TopicPartition(KAFKA_TOPIC, 0), start)
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
            if len(read) == RECORDS:
                break
    finally:
        consumer.close()
    return read
