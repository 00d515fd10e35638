"""Kafka's own Java console producer and consumer (kafka-clients 4.1.1, from the jars the
tests already fetch) against the Kafka listener: the producer is idempotent with
acks=all by default, the consumer reads the partition from the earliest offset."""

from __future__ import annotations

from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from tests.kafka.conftest import KafkaSidecar, run_java

LINES = [f"key-{i}\tvalue {i} \u00e9" for i in range(20)]


def test_java_console_producer_and_consumer(kafka_sidecar: KafkaSidecar) -> None:
    kafka_sidecar.create_topic("console")
    bootstrap = kafka_sidecar.kafka_address

    run_java(
        "org.apache.kafka.tools.ConsoleProducer",
        "--bootstrap-server", bootstrap,
        "--topic", "console",
        "--property", "parse.key=true",
        "--producer-property", "acks=all",
        stdin="\n".join(LINES) + "\n",
    )  # fmt: skip
    printed = run_java(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", bootstrap,
        "--topic", "console",
        "--partition", "0",
        "--offset", "earliest",
        "--max-messages", str(len(LINES)),
        "--property", "print.key=true",
        "--property", "print.offset=true",
    )  # fmt: skip

    assert printed.splitlines() == [f"Offset:{i}\t{line}" for i, line in enumerate(LINES)]
    # The same records as another client reads them: offsets, keys, values.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=10_000)
    try:
        consumer.assign([KafkaTopicPartition("console", 0)])
        consumer.seek_to_beginning()
        read = [(m.offset, m.key, m.value) for _, m in zip(LINES, consumer, strict=False)]
    finally:
        consumer.close()
    expected = [line.split("\t") for line in LINES]
    assert read == [(i, k.encode(), v.encode()) for i, (k, v) in enumerate(expected)]
