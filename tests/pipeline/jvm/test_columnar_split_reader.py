"""The JVM decoder (``tierlog.spark.read.ColumnarSplitReader``, Kafka's own record
classes) held equal to the storage engine's Python row decoder on generated logs.

Every magic (v0/v1 message sets, v2 batches) and codec the storage engine writes,
headers, null keys and values, LogAppendTime, transactional batches of an aborted
transaction and control markers (both skipped), offset bounds, column batches cut
anywhere; then the same logs damaged (bytes changed anywhere, the file cut short),
which must fail on both sides or on neither, with equal rows when neither fails. The
JVM is reached through the test session's py4j gateway (``SplitRows``).

One difference is Kafka's, kept on purpose: a header key that is not UTF-8 fails the
Python decoder, while Kafka's classes (and so Spark's Kafka source) decode it with
replacement characters. Damage that makes such a key is left out of the comparison.
A timestamp Spark's microseconds cannot hold (damage, or a year past 294 000) fails the
JVM reader, as it fails Spark's Kafka source, where the Python decoder hands it on.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from tests.pipeline.read_all import split_records, timestamp_type_id
from tierlog.pipeline.planner import InputSplit
from tierlog.pipeline.segments import SegmentRef
from tierlog.storage.config import TimestampType
from tierlog.storage.errors import CorruptRecordError, TierlogError
from tierlog.storage.records import (
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    build_legacy_message_set,
)
from tierlog.storage.topic_partition import TopicPartition
from tierlog.storage.transaction_index import AbortedTxn

pytestmark = pytest.mark.slow

PRODUCER = 7
TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000
NULLABLE_BYTES = st.none() | st.binary(max_size=30)
HEADERS = st.lists(st.tuples(st.text(max_size=5), NULLABLE_BYTES), max_size=2).map(tuple)
RECORDS = st.lists(
    st.builds(
        SimpleRecord,
        key=NULLABLE_BYTES,
        value=NULLABLE_BYTES,
        timestamp=st.integers(0, 2**41),
        headers=HEADERS,
    ),
    min_size=1,
    max_size=6,
)
LEGACY_CODECS = [c for c in CompressionType if c is not CompressionType.ZSTD]

# What one entry of a log is: built at the base offset it is given.
Entry = tuple[str, Any]
ENTRIES: st.SearchStrategy[Entry] = st.one_of(
    st.tuples(
        st.just("v2"),
        st.tuples(RECORDS, st.sampled_from(list(CompressionType)), st.booleans(), st.booleans()),
    ),
    st.tuples(
        st.just("legacy"),
        st.tuples(
            RECORDS.map(lambda rs: [SimpleRecord(r.key, r.value, r.timestamp) for r in rs]),
            st.sampled_from([0, 1]),
            st.sampled_from(LEGACY_CODECS),
        ),
    ),
    st.tuples(st.just("marker"), st.booleans()),
)


def build_entry(entry: Entry, base_offset: int) -> tuple[bytes, int]:
    """The entry's bytes and how many offsets it takes."""
    kind, spec = entry
    if kind == "marker":
        marker = EndTransactionMarker(
            ControlRecordType.COMMIT if spec else ControlRecordType.ABORT, 0
        )
        data = build_end_txn_marker_batch(
            marker, producer_id=PRODUCER, producer_epoch=0, timestamp_ms=T0, base_offset=base_offset
        )
        return data, 1
    if kind == "legacy":
        records, magic, codec = spec
        data = build_legacy_message_set(
            records, magic=magic, compression=codec, base_offset=base_offset
        )
        return data, len(records)
    records, codec, transactional, log_append = spec
    data = build_batch(
        records,
        compression=codec,
        base_offset=base_offset,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time_ms=T0 if log_append else -1,
        producer_id=PRODUCER if transactional else -1,
        producer_epoch=0 if transactional else -1,
        base_sequence=0 if transactional else -1,
        is_transactional=transactional,
    )
    return data, len(records)


def build_log(entries: Sequence[Entry]) -> tuple[bytes, int]:
    pieces, offset = [], 0
    for entry in entries:
        data, taken = build_entry(entry, offset)
        pieces.append(data)
        offset += taken
    return b"".join(pieces), offset


Outcome = list[tuple[Any, ...]] | str
SPARK_MAX_TIMESTAMP_MS = (2**63 - 1) // 1000
NOT_UTF8 = "a header key that is not UTF-8"


def python_rows(path: Path, start: int, end: int, aborted: Sequence[AbortedTxn]) -> Outcome:
    """The split read with the storage engine's row decoder, by the reader's rules."""
    split = InputSplit(
        TP, SegmentRef(0, str(path)), 0, path.stat().st_size, start, end, tuple(aborted)
    )
    rows: list[tuple[Any, ...]] = []
    try:
        for header, record in split_records(split):
            if abs(record.timestamp) > SPARK_MAX_TIMESTAMP_MS:
                return "corrupt"
            headers = [[key, value] for key, value in record.headers] or None
            row = (record.offset, record.timestamp, timestamp_type_id(header))
            rows.append((*row, record.key, record.value, headers))
    except CorruptRecordError as error:
        return NOT_UTF8 if "header key is not UTF-8" in str(error) else "corrupt"
    except TierlogError:
        return "corrupt"
    return rows


def decode_in_jvm(
    spark: SparkSession,
    path: Path,
    start: int,
    end: int,
    aborted: Sequence[AbortedTxn],
    batch_rows: int,
) -> str:
    """The split of the whole file ``path`` read by the JVM decoder: its rows' JSON."""
    split = {
        "topic": "t",
        "partition": 0,
        "source": {"kind": "file", "path": str(path), "base": 0, "name": str(path)},
        "start_position": 0,
        "end_position": path.stat().st_size,
        "start_offset": start,
        "end_offset": end,
        "aborted": [[t.producer_id, t.first_offset, t.last_offset] for t in aborted],
    }
    plan = json.dumps({"batch_rows": batch_rows, "splits": [split]})
    jvm = spark._jvm
    assert jvm is not None
    answer: str = jvm.tierlog.spark.read.SplitRows.decode(plan)
    return answer


def jvm_rows(
    spark: SparkSession,
    path: Path,
    start: int,
    end: int,
    aborted: Sequence[AbortedTxn],
    batch_rows: int,
) -> Outcome:
    """The same split read by the JVM decoder, as a Spark task reads it."""
    try:
        answer = decode_in_jvm(spark, path, start, end, aborted, batch_rows)
    except Py4JJavaError as error:
        name = error.java_exception.getClass().getName()
        assert name == "tierlog.spark.read.CorruptSegmentException", str(error)
        return "corrupt"
    return [
        (
            offset,
            timestamp_us // 1000,
            type_id,
            None if key is None else bytes(key),
            None if value is None else bytes(value),
            None if headers is None else [[k, None if v is None else bytes(v)] for k, v in headers],
        )
        for offset, timestamp_us, type_id, key, value, headers in json.loads(answer)
    ]


Case = tuple[bytes, int, int, list[AbortedTxn], int]  # the log, the split's bounds, batch rows


@st.composite
def splits(draw: st.DrawFn) -> Case:
    data, next_offset = build_log(draw(st.lists(ENTRIES, min_size=1, max_size=6)))
    start = draw(st.integers(0, next_offset))
    end = draw(st.integers(start, next_offset + 1))
    firsts = draw(st.lists(st.integers(0, next_offset), max_size=2, unique=True))
    aborted = [AbortedTxn(PRODUCER, first, first + draw(st.integers(0, 4)), 0) for first in firsts]
    return data, start, end, aborted, draw(st.integers(1, 8))


def both_read(spark: SparkSession, case: Case) -> Outcome:
    """The outcome of reading ``case`` on both sides, checked equal."""
    data, start, end, aborted, batch_rows = case
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / f"{0:020d}.log"
        path.write_bytes(data)
        expected = python_rows(path, start, end, aborted)
        assume(expected != NOT_UTF8)  # Kafka's classes decode it leniently (module docstring)
        assert jvm_rows(spark, path, start, end, aborted, batch_rows) == expected
    return expected


SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(splits())
def test_the_jvm_reads_the_rows_the_storage_engine_reads(spark: SparkSession, case: Case) -> None:
    assert both_read(spark, case) != "corrupt"


@SETTINGS
@given(splits(), st.data())
def test_a_damaged_log_fails_on_both_sides_or_reads_the_same(
    spark: SparkSession,
    case: Case,
    draw: st.DataObject,
) -> None:
    data, start, end, aborted, batch_rows = case
    damaged = bytearray(data)
    for _ in range(draw.draw(st.integers(0, 3))):
        at = draw.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = draw.draw(st.integers(0, 255))
    damaged = damaged[: draw.draw(st.integers(len(damaged) // 2, len(damaged)))]
    both_read(spark, (bytes(damaged), start, end, aborted, batch_rows))


def test_a_corrupt_batch_is_named_by_its_segment_and_position(
    spark: SparkSession, tmp_path: Path
) -> None:
    first = build_batch([SimpleRecord(b"k", b"v", T0)], base_offset=0)
    second = bytearray(build_batch([SimpleRecord(b"k", b"v", T0)], base_offset=1))
    second[16] = 7  # the magic byte
    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(first + second)

    with pytest.raises(Py4JJavaError) as raised:
        decode_in_jvm(spark, path, 0, 2, [], 10)

    assert f"CORRUPT_MESSAGE: {path} at position {len(first)}: unknown magic 7" in str(raised.value)


RECORD_COUNT_AT = 57  # a v2 header's record count (not under a CRC the reader checks)


@pytest.mark.parametrize("declared", [1, 3])
@pytest.mark.parametrize("codec", list(CompressionType))
def test_a_batch_declaring_other_than_its_records_fails_on_both_sides(
    spark: SparkSession, tmp_path: Path, codec: CompressionType, declared: int
) -> None:
    """The walk over a records section counts them as the storage engine does: records
    left after the declared count, or fewer than it, are damage, whatever the codec."""
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v", T0)] * 2, compression=codec))
    batch[RECORD_COUNT_AT : RECORD_COUNT_AT + 4] = declared.to_bytes(4, "big")

    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(batch)

    assert python_rows(path, 0, 2, []) == "corrupt"
    assert jvm_rows(spark, path, 0, 2, [], 10) == "corrupt"


def test_batches_larger_than_the_arena_and_cut_across_column_batches_read_the_same(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Keys and values are positions into one arena per column batch (issue 21): batches
    whose records outgrow its first 64 KiB, cut by every column batch, with v0/v1 entries
    appended between them, read as the storage engine reads them."""
    rng = random.Random(21)
    pieces, offset = [], 0
    for codec in [*CompressionType, CompressionType.NONE]:
        records = [
            SimpleRecord(
                key=rng.randbytes(8) if i % 5 else None, value=rng.randbytes(size), timestamp=T0
            )
            for i, size in enumerate(rng.choices(range(2000), k=300))
        ]
        pieces.append(build_batch(records, compression=codec, base_offset=offset))
        offset += len(records)
        legacy = [SimpleRecord(b"legacy", rng.randbytes(100), T0)] * 3
        pieces.append(build_legacy_message_set(legacy, magic=1, base_offset=offset))
        offset += len(legacy)
    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(b"".join(pieces))

    expected = python_rows(path, 0, offset, [])

    assert len(expected) == offset
    assert jvm_rows(spark, path, 0, offset, [], 250) == expected
