"""Kafka 4.1.1 judges compacted segments: after cleaning rounds that drop records, rewrite
batches in every codec, keep empty batches and delete horizons, and merge segments,
DumpLogSegments' deep iteration, --verify-index-only and --index-sanity-check find the
cleaned files valid and read back exactly what tierlog reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.storage.cleaner import Cleaner
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import (
    BatchHeader,
    CompressionType,
    Record,
    SimpleRecord,
    build_batch,
    decode_records,
    iter_batches,
)

from .kafka import DumpOutput, dump_log_segments, segment_files, verify_partition_dir

pytestmark = pytest.mark.interop

CODECS = [
    CompressionType.NONE,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.LZ4,
    CompressionType.ZSTD,
]
T0 = 1_700_000_000_000
CONFIG = LogConfig.from_properties(
    {
        "cleanup.policy": "compact",
        "segment.bytes": 3000,
        "index.interval.bytes": 200,
        "delete.retention.ms": 1000,
        "file.delete.delay.ms": 0,
        "message.timestamp.after.max.ms": 2**62,
    }
)


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = T0

    def __call__(self) -> int:
        return self.now_ms


def keyed_batch(
    pairs: list[tuple[bytes, bytes | None]],
    *,
    timestamp: int = T0,
    compression: CompressionType = CompressionType.NONE,
    producer_id: int = -1,
    base_sequence: int = -1,
) -> bytes:
    return build_batch(
        [SimpleRecord(key, value, timestamp) for key, value in pairs],
        compression=compression,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
    )


def batches_of(log: Log) -> list[tuple[BatchHeader, list[Record]]]:
    whole = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20).records
        whole += chunk
        offset = list(iter_batches(chunk))[-1].last_offset + 1
    return [(header, decode_records(whole, header)) for header in iter_batches(whole)]


def records(log: Log) -> list[Record]:
    return [record for _header, batch in batches_of(log) for record in batch]


def clean(log: Log) -> None:
    Cleaner(1 << 20).clean(log, 0, log.active_segment.base_offset)


def write_and_clean(directory: Path) -> Log:
    """Overwrites of 30 keys in every codec, some by idempotent producers, tombstones for
    a few keys; one cleaning, then another after the tombstones' horizon."""
    clock = FakeClock()
    log = Log.open(directory, CONFIG, clock_ms=clock)
    sequences = {7: 0, 8: 0}
    for round_number in range(12):
        for start in range(0, 30, 5):
            codec = CODECS[(round_number + start) % len(CODECS)]
            producer_id = (7, 8, -1)[start % 3]
            pairs = [
                (
                    b"key-%02d" % key,
                    None
                    if round_number == 11 and key % 10 == 0
                    else b"value-%d-%d" % (round_number, key),
                )
                for key in range(start, start + 5)
            ]
            sequence = sequences.get(producer_id, -1)
            log.append(
                keyed_batch(
                    pairs,
                    timestamp=T0 + round_number,
                    compression=codec,
                    producer_id=producer_id,
                    base_sequence=sequence,
                )
            )
            if producer_id in sequences:
                sequences[producer_id] += len(pairs)
    log.append(keyed_batch([(b"key-00", b"after")]))  # in the active segment
    log.roll()
    clean(log)
    return log


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Log, DumpOutput]:
    directory = tmp_path_factory.mktemp("cleaned") / "compacted-0"
    write_and_clean(directory).close()  # trims the active segment's preallocated indexes
    checks = verify_partition_dir(directory)
    return directory, Log.open(directory, CONFIG, clean_shutdown=True), checks


def kafka_findings(checks: DumpOutput) -> list[str]:
    """Kafka's findings, less the gaps in offsets that compaction leaves by design."""
    return [error for error in checks.errors if "Non-consecutive offsets" not in error]


def test_kafka_finds_the_cleaned_segments_and_their_indexes_valid(
    cleaned: tuple[Path, Log, DumpOutput],
) -> None:
    directory, _log, checks = cleaned
    assert kafka_findings(checks) == []
    assert all(batch.is_valid for batch in checks.batches)
    indexes = [path.name for path in segment_files(directory) if path.suffix != ".log"]
    sane = {dump.path.name for dump in checks.files if dump.passed_sanity_check}
    empty = {dump.path.name for dump in checks.files if dump.is_empty}
    assert sorted(sane | empty) == sorted(indexes)


def test_kafka_reads_what_tierlog_reads_from_the_cleaned_log(
    cleaned: tuple[Path, Log, DumpOutput],
) -> None:
    directory, log, _checks = cleaned
    deep = dump_log_segments(
        [path for path in segment_files(directory) if path.suffix == ".log"],
        "--deep-iteration",
        "--print-data-log",
    )
    ours = records(log)
    assert [r.offset for r in deep.records] == [r.offset for r in ours]
    assert [r.key for r in deep.records] == [r.key.decode() if r.key else None for r in ours]
    assert [r.payload for r in deep.records] == [
        r.value.decode() if r.value is not None else None for r in ours
    ]
    our_batches = batches_of(log)
    assert [(b.base_offset, b.last_offset, b.count) for b in deep.batches] == [
        (h.base_offset, h.last_offset, h.record_count) for h, _ in our_batches
    ]
    assert [(b.producer_id, b.base_sequence) for b in deep.batches] == [
        (h.producer_id, h.base_sequence) for h, _ in our_batches
    ]
    assert [b.compression for b in deep.batches] == [
        h.compression.name.lower() for h, _ in our_batches
    ]
    # The cleaning did something worth checking: gaps, empty batches, tombstones kept.
    assert len(ours) < log.log_end_offset // 4
    assert any(b.count == 0 for b in deep.batches)
    assert any(r.value_size == -1 for r in deep.records)
    assert any(h.delete_horizon_ms is not None for h, _ in our_batches)


def test_tombstones_past_their_horizon_go_and_kafka_still_agrees(tmp_path: Path) -> None:
    directory = tmp_path / "compacted-0"
    log = write_and_clean(directory)
    assert isinstance(log.clock_ms, FakeClock)
    log.clock_ms.now_ms += 1000
    clean(log)
    assert all(r.value is not None for r in records(log))
    log.close()
    checks = verify_partition_dir(directory)
    assert kafka_findings(checks) == []
    assert [r.offset for r in checks.records] == [
        r.offset for r in records(Log.open(directory, CONFIG, clean_shutdown=True))
    ]
