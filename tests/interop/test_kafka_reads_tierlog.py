"""Kafka 4.1.1 judges tierlog's files: segments tierlog writes (across rolls, in every
codec) pass DumpLogSegments' deep iteration, --verify-index-only and
--index-sanity-check; and Kafka's own batches, appended by tierlog, come out as the very
same .log, .index and .timeindex bytes that Kafka's broker wrote."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from pathlib import Path

import pytest

from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import iter_batches

from .datasets import (
    CODECS,
    INDEX_INTERVAL_BYTES,
    RECORDS_PER_BATCH,
    SEGMENT_BYTES,
    KafkaWrittenLog,
    interop_records,
    tierlog_batches,
)
from .kafka import DumpOutput, segment_files, verify_partition_dir

pytestmark = pytest.mark.interop

_PRODUCED_PREFIX = struct.Struct(">qii")  # base offset, length, partition leader epoch
CONFIG = LogConfig.from_properties(
    {"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": INDEX_INTERVAL_BYTES}
)


def _write(directory: Path, batches: Sequence[bytes], config: LogConfig = CONFIG) -> None:
    log = Log.open(directory, config)
    try:
        for batch in batches:
            log.append(batch)
    finally:
        log.close()


def _as_produced(batch: bytes) -> bytes:
    """A stored batch as its producer sent it: base offset 0, no partition leader epoch
    (both outside the CRC; the broker assigns them on append)."""
    produced = bytearray(batch)
    _PRODUCED_PREFIX.pack_into(produced, 0, 0, len(batch) - 12, -1)
    return bytes(produced)


@pytest.fixture(scope="module")
def tierlog_written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DumpOutput]:
    """interop_records() in 25-record batches, one append each, except every fifth
    append, which carries three batches at once."""
    partition_dir = tmp_path_factory.mktemp("tierlog-written") / "tierlog-0"
    batches = tierlog_batches(interop_records(), RECORDS_PER_BATCH)
    appends: list[bytes] = []
    it = iter(batches)
    for i, batch in enumerate(it):
        appends.append(batch + b"".join(itertools.islice(it, 2)) if i % 5 == 4 else batch)
    _write(partition_dir, appends)
    return partition_dir, verify_partition_dir(partition_dir)


def test_kafka_finds_no_errors_in_tierlogs_segments(
    tierlog_written: tuple[Path, DumpOutput],
) -> None:
    partition_dir, checks = tierlog_written
    assert checks.errors == []
    assert all(batch.is_valid for batch in checks.batches)
    logs = [path for path in segment_files(partition_dir) if path.suffix == ".log"]
    assert len(logs) >= 5, "the data should span several rolled segments"
    indexes = [path.name for path in segment_files(partition_dir) if path.suffix != ".log"]
    sane = [dump.path.name for dump in checks.files if dump.passed_sanity_check]
    empty = [dump.path.name for dump in checks.files if dump.is_empty]
    assert sorted(set(sane) | set(empty)) == sorted(indexes)


def test_kafka_reads_back_what_tierlog_wrote(tierlog_written: tuple[Path, DumpOutput]) -> None:
    _, checks = tierlog_written
    written = interop_records()
    records = checks.records
    assert [r.offset for r in records] == list(range(len(written)))
    assert [r.timestamp_ms for r in records] == [w.timestamp_ms for w in written]
    assert [r.key for r in records] == [None if w.key is None else w.key.decode() for w in written]
    assert [r.payload for r in records] == [
        None if w.value is None else w.value.decode() for w in written
    ]
    assert [r.header_keys for r in records] == [tuple(k for k, _ in w.headers) for w in written]
    assert {batch.compression for batch in checks.batches} == set(CODECS)
    assert {batch.magic for batch in checks.batches} == {2}


def test_log_append_time_batches_pass_kafkas_checks(tmp_path: Path) -> None:
    """LogAppendTime rewrites bytes under the CRC: Kafka must still find every batch valid."""
    config = LogConfig.from_properties(
        {**CONFIG.to_properties(), "message.timestamp.type": "LogAppendTime"}
    )
    partition_dir = tmp_path / "append-time-0"
    _write(partition_dir, tierlog_batches(interop_records(300), RECORDS_PER_BATCH), config)
    checks = verify_partition_dir(partition_dir)
    assert checks.errors == []
    assert {batch.timestamp_type for batch in checks.batches} == {"LogAppendTime"}
    assert all(batch.is_valid for batch in checks.batches)


def test_kafkas_batches_appended_by_tierlog_give_kafkas_bytes(
    kafka_written_log: KafkaWrittenLog, tmp_path: Path
) -> None:
    """Same batches, same configs: same rolls, same index entries, same bytes."""
    kafka_files = segment_files(kafka_written_log.partition_dir)
    batches = []
    for log_file in (path for path in kafka_files if path.suffix == ".log"):
        data = log_file.read_bytes()
        batches += [
            _as_produced(data[h.position : h.position + h.size]) for h in iter_batches(data)
        ]
    partition_dir = tmp_path / kafka_written_log.partition_dir.name
    _write(partition_dir, batches)

    ours = segment_files(partition_dir)
    assert [path.name for path in ours] == [path.name for path in kafka_files]
    for kafka_file, our_file in zip(kafka_files, ours, strict=True):
        assert our_file.read_bytes() == kafka_file.read_bytes(), our_file.name
