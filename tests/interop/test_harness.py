"""The harness, proven against Kafka itself: a real broker writes a log through the real
producer, and Kafka's DumpLogSegments, read through our parser, finds exactly what was
produced, with valid indexes. If these fail, no other interop result means anything."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest

from .datasets import CODECS, RECORDS_PER_BATCH, KafkaWrittenLog
from .kafka import DumpOutput, dump_log_segments, segment_files, verify_partition_dir

pytestmark = pytest.mark.interop

OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12


@pytest.fixture(scope="module")
def kafka_checks(kafka_written_log: KafkaWrittenLog) -> DumpOutput:
    return verify_partition_dir(kafka_written_log.partition_dir)


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode()


def test_kafka_finds_no_errors_in_its_own_log(
    kafka_written_log: KafkaWrittenLog, kafka_checks: DumpOutput
) -> None:
    assert kafka_checks.errors == []
    assert all(batch.is_valid for batch in kafka_checks.batches)
    indexes = [p for p in segment_files(kafka_written_log.partition_dir) if p.suffix != ".log"]
    sane = [dump.path.name for dump in kafka_checks.files if dump.passed_sanity_check]
    assert sorted(sane) == sorted(path.name for path in indexes)


def test_log_rolled_into_several_segments(kafka_written_log: KafkaWrittenLog) -> None:
    logs = [
        path for path in segment_files(kafka_written_log.partition_dir) if path.suffix == ".log"
    ]
    assert len(logs) >= 5
    for log in logs:
        assert len(log.stem) == 20
        for suffix in (".index", ".timeindex"):
            assert log.with_suffix(suffix).exists()


def test_dump_shows_every_produced_record(
    kafka_written_log: KafkaWrittenLog, kafka_checks: DumpOutput
) -> None:
    produced = kafka_written_log.records
    assert [record.offset for record in produced] == list(range(len(produced)))
    dumped = kafka_checks.records
    assert [r.offset for r in dumped] == [p.offset for p in produced]
    assert [r.timestamp_ms for r in dumped] == [p.timestamp_ms for p in produced]
    assert [r.key for r in dumped] == [_text(p.key) for p in produced]
    assert [r.payload for r in dumped] == [_text(p.value) for p in produced]
    assert [r.header_keys for r in dumped] == [tuple(k for k, _ in p.headers) for p in produced]
    assert {r.timestamp_type for r in dumped} == {"CreateTime"}


def test_batches_carry_the_producers_codecs(
    kafka_written_log: KafkaWrittenLog, kafka_checks: DumpOutput
) -> None:
    batches = kafka_checks.batches
    assert {batch.magic for batch in batches} == {2}
    assert all(batch.count == RECORDS_PER_BATCH for batch in batches)
    by_offset = {record.offset: record.compression for record in kafka_written_log.records}
    assert [batch.compression for batch in batches] == [
        by_offset[batch.base_offset] for batch in batches
    ]
    assert {batch.compression for batch in batches} == set(CODECS)
    for before, after in itertools.pairwise(batches):
        assert after.base_offset == before.last_offset + 1


def test_index_entries_point_at_batches(
    kafka_written_log: KafkaWrittenLog, kafka_checks: DumpOutput
) -> None:
    """An .index entry is (last offset of a batch, position where that batch starts);
    a .timeindex entry is (max timestamp so far, last offset of the batch holding it)."""
    indexes = [p for p in segment_files(kafka_written_log.partition_dir) if p.suffix != ".log"]
    entries = dump_log_segments(indexes)  # without --verify-index-only: the entries
    assert entries.errors == []
    for log in (dump for dump in kafka_checks.files if dump.path.suffix == ".log"):
        batches = {batch.last_offset: batch for batch in log.batches}
        index = entries.file(log.path.with_suffix(".index")).index_entries
        time_index = entries.file(log.path.with_suffix(".timeindex")).time_index_entries
        assert index, f"{log.path.name}: no index entries"
        for entry in index:
            assert batches[entry.offset].position == entry.position
        for time_entry in time_index:
            assert batches[time_entry.offset].max_timestamp_ms == time_entry.timestamp_ms
        assert time_index[-1].timestamp_ms == max(b.max_timestamp_ms for b in log.batches)


def test_clean_shutdown_leaves_trimmed_indexes(kafka_written_log: KafkaWrittenLog) -> None:
    assert (kafka_written_log.log_dir / ".kafka_cleanshutdown").exists()
    for path in segment_files(kafka_written_log.partition_dir):
        size = path.stat().st_size
        if path.suffix == ".index":
            assert size % OFFSET_ENTRY_BYTES == 0 and size < 64 * OFFSET_ENTRY_BYTES, path
        elif path.suffix == ".timeindex":
            assert size % TIME_ENTRY_BYTES == 0 and size < 64 * TIME_ENTRY_BYTES, path
            assert size >= TIME_ENTRY_BYTES, f"{path}: no entry for the segment's max timestamp"


def _rewrite(path: Path, entry: int, fmt: str, *values: int) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, entry * struct.calcsize(fmt), *values)
    path.write_bytes(bytes(data))


def test_kafka_checks_catch_corrupt_indexes(kafka_log_copy: KafkaWrittenLog) -> None:
    """The checks are not vacuous: a moved .index position and a wrong .timeindex
    timestamp are both reported."""
    first_log = next(p for p in segment_files(kafka_log_copy.partition_dir) if p.suffix == ".log")
    index, time_index = first_log.with_suffix(".index"), first_log.with_suffix(".timeindex")
    relative_offset, _ = struct.unpack_from(">ii", index.read_bytes(), 0)
    _rewrite(index, 0, ">ii", relative_offset, 0)  # position 0 starts the first batch instead
    timestamp, time_relative_offset = struct.unpack_from(">qi", time_index.read_bytes(), 0)
    _rewrite(time_index, 0, ">qi", timestamp + 1, time_relative_offset)

    errors = verify_partition_dir(kafka_log_copy.partition_dir).errors
    assert any(e.startswith("Mismatches in :") and str(index) in e for e in errors), errors
    assert any(e.startswith("Found timestamp mismatch in :") for e in errors), errors


def test_running_broker_leaves_preallocated_active_indexes(
    kafka_unclean_log: KafkaWrittenLog, kafka_written_log: KafkaWrittenLog
) -> None:
    """While Kafka runs, the active segment's indexes are preallocated to
    segment.index.bytes (rounded down to whole entries) and there is no clean-shutdown
    marker: the state recovery starts from after a crash."""
    assert not (kafka_unclean_log.log_dir / ".kafka_cleanshutdown").exists()
    active = segment_files(kafka_unclean_log.partition_dir)[-1].stem
    index_bytes = 10 * 1024 * 1024  # segment.index.bytes' default
    active_index = kafka_unclean_log.partition_dir / f"{active}.index"
    active_time_index = kafka_unclean_log.partition_dir / f"{active}.timeindex"
    assert active_index.stat().st_size == index_bytes
    assert active_time_index.stat().st_size == index_bytes // TIME_ENTRY_BYTES * TIME_ENTRY_BYTES
    for path in segment_files(kafka_unclean_log.partition_dir):
        clean = (kafka_written_log.partition_dir / path.name).read_bytes()
        if path.suffix == ".log" or path.stem != active:
            assert path.read_bytes() == clean, path.name
    # the clean shutdown only trimmed the active offset index to its entries
    preallocated = active_index.read_bytes()
    trimmed = (kafka_written_log.partition_dir / active_index.name).read_bytes()
    assert preallocated == trimmed + bytes(index_bytes - len(trimmed))
