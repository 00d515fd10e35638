"""Spark's own Kafka source and sink (``spark-sql-kafka-0-10``, the run's one SparkSession)
against the Kafka listener of one sidecar: a batch read through the listener under
``read_committed`` gives the rows ``format("tierlog")`` reads from the sidecar's own log
dir, column for column; so does a Structured Streaming query, run twice on one
checkpoint, each run reading only what came after the last; and what Spark's Kafka sink
writes through the listener, ``format("tierlog")`` reads back. Each test has its own
topic."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from pyspark.sql import DataFrame, DataFrameReader, Row, SparkSession
from pyspark.sql.streaming.readwriter import DataStreamReader

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar
from tests.support.sidecars import Sidecars

pytestmark = pytest.mark.slow

# The Kafka source's columns, in its order: the two sources must agree on every one.
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
PARTITIONS = 3
T0 = 1_700_000_000_000
CODECS = (None, "gzip", "snappy", "lz4", "zstd")  # a producer each: one batch codec each


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        yield start_kafka_sidecar(
            started,
            tmp_path_factory.mktemp("spark-kafka") / "data",
            "transaction.state.log.num.partitions=1",
        )


def kafka_source(spark: SparkSession, broker: KafkaSidecar, topic: str) -> DataFrame:
    """The topic from its first offset to its last stable one, through the listener."""
    return kafka_options(spark.read, broker, topic).option("endingOffsets", "latest").load()


def kafka_options(
    reader: DataFrameReader | DataStreamReader, broker: KafkaSidecar, topic: str
) -> DataFrameReader | DataStreamReader:
    """The options a batch and a streaming read of the topic share."""
    return (
        reader.format("kafka")
        .option("kafka.bootstrap.servers", broker.kafka_address)
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )


def stream_until_caught_up(
    spark: SparkSession, broker: KafkaSidecar, topic: str, checkpoint: Path
) -> list[Row]:
    """One run of a streaming query over the topic (``availableNow``: what is stable
    when it starts, from where the checkpoint says the last run ended); its rows."""
    collected: list[Row] = []
    query = (
        kafka_options(spark.readStream, broker, topic)
        .load()
        .writeStream.foreachBatch(lambda batch, _id: collected.extend(rows(batch)))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300), "the streaming query did not catch up in 300 s"
    assert query.exception() is None
    return collected


def tierlog_source(spark: SparkSession, broker: KafkaSidecar, topic: str) -> DataFrame:
    """The topic as ``format("tierlog")`` reads the sidecar's segment files."""
    return (
        spark.read.format("tierlog")
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load(str(broker.data_dir))
    )


def rows(frame: DataFrame) -> list[Row]:
    """The frame's rows by partition and offset (sorted here: a Spark sort is two jobs)."""
    return sorted(frame.select(*COLUMNS).collect(), key=lambda row: (row.partition, row.offset))


def value_of(row: Row) -> bytes | None:
    return None if row.value is None else bytes(row.value)


def as_written(row: Row) -> tuple[bytes, bytes, int, list[tuple[str, bytes]]]:
    """A row read back in the form the sink was given (PySpark answers bytearrays)."""
    headers = [(header.key, bytes(header.value)) for header in row.headers]
    return bytes(row.key), bytes(row.value), row.partition, headers


def produce_every_codec(broker: KafkaSidecar, topic: str) -> list[bytes | None]:
    """Records with keys (one null), headers (or none), set timestamps and a tombstone, in
    batches of every codec over every partition; returns their values."""
    values: list[bytes | None] = []
    for number, codec in enumerate(CODECS):
        producer = KafkaProducer(
            bootstrap_servers=broker.kafka_address, compression_type=codec, linger_ms=100
        )
        for i in range(number * 12, number * 12 + 12):
            key = None if i % 7 == 3 else f"key-{i}".encode()
            value = None if i % 11 == 4 and key else f"{codec}-value-{i}".encode()
            producer.send(
                topic,
                key=key,
                value=value,
                headers=[("i", str(i).encode()), ("codec", str(codec).encode())] if i % 3 else [],
                partition=i % PARTITIONS,
                timestamp_ms=T0 + i,
            )
            values.append(value)
        producer.close()
    return values


def produce_transactions(broker: KafkaSidecar, topic: str) -> tuple[list[bytes], list[bytes]]:
    """An aborted transaction, then a committed one, over two partitions: their values."""
    producer = KafkaProducer(
        bootstrap_servers=broker.kafka_address, transactional_id=f"{topic}-app"
    )
    producer.init_transactions()
    outcomes: dict[bool, list[bytes]] = {False: [], True: []}
    for commit in (False, True):
        producer.begin_transaction()
        for i in range(4):
            value = f"{'committed' if commit else 'aborted'}-{i}".encode()
            producer.send(topic, key=b"txn", value=value, partition=i % 2, timestamp_ms=T0 + i)
            outcomes[commit].append(value)
        producer.flush()  # in the log before the abort (else the abort drops them unsent)
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()
    return outcomes[True], outcomes[False]


def test_spark_kafka_source_reads_through_the_listener_what_format_tierlog_reads(
    spark: SparkSession, broker: KafkaSidecar
) -> None:
    broker.create_topic("events", PARTITIONS)
    plain = produce_every_codec(broker, "events")
    committed, aborted = produce_transactions(broker, "events")

    through_kafka = rows(kafka_source(spark, broker, "events"))
    from_segments = rows(tierlog_source(spark, broker, "events"))

    assert through_kafka == from_segments
    read = [value_of(row) for row in through_kafka]
    assert sorted(read, key=repr) == sorted([*plain, *committed], key=repr)
    assert not set(aborted) & set(read)
    assert {row.partition for row in through_kafka} == set(range(PARTITIONS))


def test_spark_structured_streaming_reads_through_the_listener_and_resumes_from_its_checkpoint(
    spark: SparkSession, broker: KafkaSidecar, tmp_path: Path
) -> None:
    broker.create_topic("streamed", PARTITIONS)
    checkpoint = tmp_path / "checkpoint"
    plain = produce_every_codec(broker, "streamed")
    first = stream_until_caught_up(spark, broker, "streamed", checkpoint)
    committed, aborted = produce_transactions(broker, "streamed")
    second = stream_until_caught_up(spark, broker, "streamed", checkpoint)

    from_segments = rows(tierlog_source(spark, broker, "streamed"))
    assert sorted(first + second, key=lambda row: (row.partition, row.offset)) == from_segments
    assert sorted((value_of(row) for row in first), key=repr) == sorted(plain, key=repr)
    assert sorted((value_of(row) for row in second), key=repr) == sorted(committed, key=repr)
    assert not set(aborted) & {value_of(row) for row in second}


def test_spark_kafka_sink_writes_through_the_listener_what_format_tierlog_reads_back(
    spark: SparkSession, broker: KafkaSidecar
) -> None:
    broker.create_topic("written", 2)
    written = [
        (f"key-{i}".encode(), f"value-{i}".encode(), i % 2, [("i", str(i).encode())])
        for i in range(40)
    ]
    frame = spark.createDataFrame(
        written,
        "key binary, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )

    frame.write.format("kafka").option("kafka.bootstrap.servers", broker.kafka_address).option(
        "topic", "written"
    ).save()

    back = rows(tierlog_source(spark, broker, "written"))
    assert sorted(as_written(row) for row in back) == sorted(written)
    for partition in (0, 1):
        offsets = [row.offset for row in back if row.partition == partition]
        assert offsets == list(range(20))
    assert rows(kafka_source(spark, broker, "written")) == back
