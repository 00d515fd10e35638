"""The JVM reader's column batches through ``spark.read``: exactly what the storage engine
reads, every codec, v0/v1/v2 batches, headers as an array of structs (null without
headers), Kafka's timestamp types, control batches left out, compacted logs with gaps."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from tests.pipeline.conftest import (
    SMALL_SEGMENTS,
    expected_rows,
    rows_of_table,
    write_legacy_then_v2,
    write_log,
)
from tests.storage.compaction import clean_fully, keyed_batch, open_compacted
from tests.storage.conftest import T0, FakeClock, read_all_records
from tierlog.storage.log import Log
from tierlog.storage.records import (
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    parse_header,
)
from tierlog.storage.topic_partition import TopicPartition

pytestmark = pytest.mark.slow

TP = TopicPartition("orders", 0)


def read_table(spark: SparkSession, options: dict[str, str]) -> pa.Table:
    """The query's rows in offset order, as Arrow (what Spark hands Python)."""
    frame = spark.read.format("tierlog").options(**options).load()
    return frame.orderBy("partition", "offset").toArrow()


def test_every_codec_reads_back_as_storage_reads_it(spark: SparkSession, tmp_path: Path) -> None:
    records = write_log(tmp_path, TP, 500)

    table = read_table(spark, {"path": str(tmp_path), "subscribe": "orders"})

    assert rows_of_table(table) == expected_rows(TP, records)
    assert table.num_rows == 500


def test_headers_are_an_array_of_structs_and_null_without_headers(
    spark: SparkSession, tmp_path: Path
) -> None:
    records = write_log(tmp_path, TP, 40)

    table = read_table(
        spark, {"path": str(tmp_path), "subscribe": "orders", "includeHeaders": "true"}
    )

    expected = [
        [{"key": key, "value": value} for key, value in r.headers] if r.headers else None
        for r in records
    ]
    assert table.column("headers").to_pylist() == expected


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_sets_then_v2_batches_read_as_one_run(
    spark: SparkSession, tmp_path: Path, magic: int
) -> None:
    records = write_legacy_then_v2(tmp_path, TP, magic)

    table = read_table(spark, {"path": str(tmp_path), "subscribe": "orders"})

    assert table.column("offset").to_pylist() == [r.offset for r in records]
    assert table.column("value").to_pylist() == [r.value for r in records]
    types = table.column("timestampType").to_pylist()
    legacy = 20
    # v0 messages carry no timestamp: Kafka's NO_TIMESTAMP_TYPE (-1) and timestamp -1.
    assert types[:legacy] == [-1 if magic == 0 else 0] * legacy
    assert types[legacy:] == [0] * (len(records) - legacy)
    millis = [row[5] for row in rows_of_table(table)]
    assert millis == [r.timestamp for r in records]


def test_control_batches_are_not_returned(spark: SparkSession, tmp_path: Path) -> None:
    # Producers cannot write markers through Log.append (only a coordinator does), so
    # the segment is laid down as bytes and opened (recovered) by the storage engine.
    plain = [SimpleRecord(key=b"k", value=b"plain %d" % i, timestamp=T0) for i in range(3)]
    in_txn = [SimpleRecord(key=b"t", value=b"txn %d" % i, timestamp=T0) for i in range(2)]
    marker = EndTransactionMarker(ControlRecordType.COMMIT, coordinator_epoch=0)
    directory = tmp_path / TP.dir_name
    directory.mkdir()
    (directory / f"{0:020d}.log").write_bytes(
        build_batch(plain)
        + build_batch(
            in_txn,
            base_offset=3,
            producer_id=7,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
            compression=CompressionType.ZSTD,
        )
        + build_end_txn_marker_batch(
            marker, producer_id=7, producer_epoch=0, timestamp_ms=T0, base_offset=5
        )
        + build_batch(plain, base_offset=6)
    )
    Log.open(directory, SMALL_SEGMENTS).close()

    table = read_table(spark, {"path": str(tmp_path), "subscribe": "orders"})

    assert table.column("offset").to_pylist() == [0, 1, 2, 3, 4, 6, 7, 8]  # 5: the marker
    assert b"txn 1" in table.column("value").to_pylist()


def test_a_compacted_log_reads_with_its_offset_gaps(spark: SparkSession, tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_compacted(tmp_path / TP.dir_name, clock, segment_bytes=300)
    for round_number in range(20):
        # One hot key overwritten every round, one key per round that survives.
        pairs = [(b"hot", b"h%d" % round_number), (b"cold-%d" % round_number, b"c")]
        log.append(keyed_batch(pairs, compression=CompressionType.LZ4))
    clean_fully(log)
    kept = read_all_records(log)
    log.close()

    table = read_table(spark, {"path": str(tmp_path), "subscribe": "orders"})

    offsets = table.column("offset").to_pylist()
    assert offsets == [r.offset for r in kept]
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # gaps are real


def test_a_corrupt_batch_fails_the_query_naming_its_segment_and_position(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Found by the task that reads it: Spark's error carries the reader's message."""
    write_log(tmp_path, TP, 30)
    segment = sorted((tmp_path / TP.dir_name).glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    second = parse_header(data, 0).size
    data[second + 16] = 9  # the second batch's magic byte
    segment.write_bytes(data)

    frame = spark.read.format("tierlog").option("subscribe", "orders").load(str(tmp_path))

    with pytest.raises(Exception, match=f"CORRUPT_MESSAGE: {segment} at position {second}: "):
        frame.count()
