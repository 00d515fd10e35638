"""v0 and v1 message sets (Kafka before 0.11) that tierlog writes, judged by Kafka 4.1.1.

Kafka 4 no longer accepts produce requests in these formats, but its readers still take
them from disk: DumpLogSegments' deep iteration must find every message valid, with the
offsets, keys, payloads and (v1) timestamps written, uncompressed and in each codec a
legacy wrapper can use. tierlog then recovers the same files as a crashed broker's log
(indexes rebuilt), reads them back record for record, answers timestamp lookups, and
the indexes it rebuilt pass Kafka's index checks.

Kafka rejects one thing: a zstd-compressed legacy wrapper (zstd came with v2). Its
shallow iteration calls such a wrapper valid (its CRC holds), but deep iteration throws
``InvalidRecordException: Invalid wrapper compressionType found in legacy deep record
iterator <magic>`` (the message names the wrapper's magic, not the codec).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tierlog.storage.config import LogConfig, TimestampType
from tierlog.storage.errors import InvalidRecordError
from tierlog.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from tierlog.storage.records import (
    CompressionType,
    Record,
    SimpleRecord,
    build_batch,
    build_legacy_message_set,
    decode_records,
    iter_batches,
    parse_header,
)

from .datasets import BASE_TIMESTAMP_MS
from .kafka import (
    DumpOutput,
    FileDump,
    dump_log_segments,
    kafka_tools,
    segment_files,
    verify_partition_dir,
)

pytestmark = pytest.mark.interop

LEGACY_CODECS = (
    CompressionType.NONE,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.LZ4,
)
RECORDS_PER_SET = 4
SETS_PER_CODEC = 2
SETS = len(LEGACY_CODECS) * SETS_PER_CODEC
# An index entry for every message set after the first, so Kafka's index checks see many.
CONFIG = LogConfig.from_properties({"index.interval.bytes": 0})
LOG_NAME = "00000000000000000000.log"


@dataclass(frozen=True)
class Layout:
    """One partition directory of legacy message sets, and the records it holds."""

    name: str
    magic: int
    timestamp_type: TimestampType

    @property
    def kafka_timestamp_type(self) -> str:
        if self.magic == 0:
            return "NoTimestampType"
        return self.timestamp_type.value


LAYOUTS = (
    Layout("legacy-v0-0", 0, TimestampType.CREATE_TIME),
    Layout("legacy-v1-create-0", 1, TimestampType.CREATE_TIME),
    Layout("legacy-v1-append-0", 1, TimestampType.LOG_APPEND_TIME),
)


def _record(offset: int) -> SimpleRecord:
    """Keys and values that are sometimes null; timestamps that sometimes go backwards."""
    return SimpleRecord(
        key=None if offset % 5 == 3 else f"key-{offset}".encode(),
        value=None if offset % 7 == 6 else f"value {offset}".encode(),
        timestamp=BASE_TIMESTAMP_MS + 10 * offset - (25 if offset % 4 == 2 else 0),
    )


def _append_time(set_number: int) -> int:
    return BASE_TIMESTAMP_MS + 100_000 + 1_000 * set_number


def write_legacy_log(partition_dir: Path, layout: Layout) -> list[Record]:
    """Message sets at consecutive offsets, each codec in turn; returns what they hold."""
    partition_dir.mkdir(parents=True)
    data = bytearray()
    expected: list[Record] = []
    offset = 0
    codecs = [codec for codec in LEGACY_CODECS for _ in range(SETS_PER_CODEC)]
    for set_number, codec in enumerate(codecs):
        records = [_record(offset + i) for i in range(RECORDS_PER_SET)]
        append_time = _append_time(set_number)
        data += build_legacy_message_set(
            records,
            magic=layout.magic,
            compression=codec,
            base_offset=offset,
            timestamp_type=layout.timestamp_type,
            log_append_time_ms=append_time,
        )
        for i, record in enumerate(records):
            if layout.magic == 0:
                timestamp = -1
            elif layout.timestamp_type is TimestampType.LOG_APPEND_TIME:
                timestamp = append_time
            else:
                timestamp = record.timestamp
            expected.append(Record(offset + i, timestamp, record.key, record.value))
        offset += RECORDS_PER_SET
    (partition_dir / LOG_NAME).write_bytes(bytes(data))
    return expected


# DumpLogSegments prints a legacy record as "| offset: .. crc: N} key: K payload: P" (the
# stray brace is Kafka's), each of key and payload only when not null.
_LEGACY_DATA = re.compile(r" crc: \d+\}?(?: key: (?P<key>.*?))?(?: payload: (?P<payload>.*))?$")


def legacy_keys_and_payloads(stdout: str) -> list[tuple[str | None, str | None]]:
    found = []
    for line in stdout.splitlines():
        if line.startswith("| "):
            match = _LEGACY_DATA.search(line)
            assert match, f"not a legacy record line: {line}"
            found.append((match["key"], match["payload"]))
    return found


def dump_of(output: DumpOutput, path: Path) -> FileDump:
    """The first dump of ``path`` (``DumpOutput.file`` matches names, alike across dirs)."""
    return next(dump for dump in output.files if dump.path == path)


def as_text(data: bytes | None) -> str | None:
    return None if data is None else data.decode()


@dataclass
class LegacyLogs:
    root: Path
    expected: dict[str, list[Record]]
    raw_dump: DumpOutput


@pytest.fixture(scope="module")
def legacy_logs(tmp_path_factory: pytest.TempPathFactory) -> LegacyLogs:
    """The three layouts written, and Kafka's deep dump of their raw .log files."""
    root = tmp_path_factory.mktemp("legacy")
    expected = {layout.name: write_legacy_log(root / layout.name, layout) for layout in LAYOUTS}
    raw_files = [root / layout.name / LOG_NAME for layout in LAYOUTS]
    raw_dump = dump_log_segments(raw_files, "--deep-iteration", "--print-data-log")
    return LegacyLogs(root, expected, raw_dump)


def test_kafka_reads_every_legacy_message_as_written(legacy_logs: LegacyLogs) -> None:
    dump = legacy_logs.raw_dump
    assert dump.errors == []
    for layout in LAYOUTS:
        data = (legacy_logs.root / layout.name / LOG_NAME).read_bytes()
        ours = list(iter_batches(data))
        file_dump = dump_of(dump, legacy_logs.root / layout.name / LOG_NAME)
        batches = file_dump.batches
        assert [(b.position, b.last_offset, b.size, b.crc) for b in batches] == [
            (h.position, h.last_offset, h.size, h.crc) for h in ours
        ]
        assert all(b.is_valid and b.magic == layout.magic for b in batches)
        assert [b.compression for b in batches] == [h.compression.name.lower() for h in ours]
        assert {b.timestamp_type for b in batches} == {layout.kafka_timestamp_type}

        expected = legacy_logs.expected[layout.name]
        records = file_dump.records
        assert [r.offset for r in records] == [e.offset for e in expected]
        assert [r.timestamp_ms for r in records] == [e.timestamp for e in expected]
        assert {r.timestamp_type for r in records} == {layout.kafka_timestamp_type}
        assert [r.key_size for r in records] == [len(e.key) if e.key else -1 for e in expected]
        assert [r.value_size for r in records] == [
            len(e.value) if e.value else -1 for e in expected
        ]
    keys_and_payloads = legacy_keys_and_payloads(dump.stdout)
    assert keys_and_payloads == [
        (as_text(e.key), as_text(e.value))
        for layout in LAYOUTS
        for e in legacy_logs.expected[layout.name]
    ]


@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout.name for layout in LAYOUTS])
def test_tierlog_recovers_and_reads_the_same_legacy_records(
    legacy_logs: LegacyLogs, layout: Layout, tmp_path: Path
) -> None:
    partition_dir = tmp_path / layout.name
    partition_dir.mkdir()
    (partition_dir / LOG_NAME).write_bytes((legacy_logs.root / layout.name / LOG_NAME).read_bytes())
    expected = legacy_logs.expected[layout.name]

    log = Log.open(partition_dir, CONFIG, clean_shutdown=False)
    try:
        assert log.log_end_offset == len(expected)
        assert log.recovery_point == len(expected)
        assert (partition_dir / LOG_NAME).read_bytes() == (
            legacy_logs.root / layout.name / LOG_NAME
        ).read_bytes(), "recovery must keep every valid legacy message"
        # Rebuilt: an entry for every entry after the first (index.interval.bytes=0).
        entries = len(list(iter_batches((partition_dir / LOG_NAME).read_bytes())))
        assert log.active_segment.offset_index.entries == entries - 1

        whole = log.read(0, 1 << 20).records
        assert whole == (partition_dir / LOG_NAME).read_bytes()
        assert [r for h in iter_batches(whole) for r in decode_records(whole, h)] == expected
        for record in expected:
            first = next(iter_batches(log.read(record.offset, 1).records))
            held = decode_records(log.read(record.offset, 1).records, first)
            assert record in held, f"read({record.offset}) starts elsewhere"
        check_timestamp_lookups(log, expected, layout)
    finally:
        log.close()


def check_timestamp_lookups(log: Log, expected: list[Record], layout: Layout) -> None:
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (-1, 0)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (-1, len(expected))
    if layout.magic == 0:
        assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
        assert log.offset_for_timestamp(BASE_TIMESTAMP_MS) is None
        return
    largest = max(record.timestamp for record in expected)
    first_largest = next(r.offset for r in expected if r.timestamp == largest)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (largest, first_largest)
    stamps = sorted({record.timestamp for record in expected})
    for target in [stamps[0] - 1, *stamps, largest + 1]:
        answer = next(((r.timestamp, r.offset) for r in expected if r.timestamp >= target), None)
        assert log.offset_for_timestamp(target) == answer, target


def test_kafka_accepts_the_indexes_tierlog_rebuilt(legacy_logs: LegacyLogs, tmp_path: Path) -> None:
    """Recovered and closed by tierlog, the directories pass every DumpLogSegments check."""
    for layout in LAYOUTS:
        partition_dir = tmp_path / layout.name
        partition_dir.mkdir()
        raw = (legacy_logs.root / layout.name / LOG_NAME).read_bytes()
        (partition_dir / LOG_NAME).write_bytes(raw)
        Log.open(partition_dir, CONFIG, clean_shutdown=False).close()
    files = [path for layout in LAYOUTS for path in segment_files(tmp_path / layout.name)]
    # Without --verify-index-only the same checks run and the index entries are listed too.
    checks = dump_log_segments(files, "--print-data-log")
    indexes = [path for path in files if path.suffix != ".log"]
    checks.extend(dump_log_segments(indexes, "--index-sanity-check"))
    assert checks.errors == []

    for layout in LAYOUTS:
        data = (tmp_path / layout.name / LOG_NAME).read_bytes()
        headers = list(iter_batches(data))
        index = dump_of(checks, tmp_path / layout.name / "00000000000000000000.index")
        # One entry per log entry after the first: its last offset, at its position.
        assert [(e.offset, e.position) for e in index.index_entries] == [
            (h.last_offset, h.position) for h in headers[1:]
        ]
        time_index = dump_of(checks, tmp_path / layout.name / "00000000000000000000.timeindex")
        if layout.magic == 0:
            assert time_index.time_index_entries == []  # v0 has no timestamps to index
        else:
            assert time_index.time_index_entries, "v1 timestamps should be indexed"
            stamps = [e.timestamp_ms for e in time_index.time_index_entries]
            assert stamps == sorted(set(stamps))
    sane = {dump.path.name for dump in checks.files if dump.passed_sanity_check or dump.is_empty}
    assert {path.name for path in indexes} <= sane


@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_refuses_to_deep_read_a_zstd_legacy_wrapper(magic: int, tmp_path: Path) -> None:
    """zstd needs magic 2: Kafka's shallow walk calls the wrapper valid (its CRC holds),
    its deep iteration throws; tierlog's recovery, which checks CRCs as Kafka's does,
    keeps the wrapper too, and its decoding refuses it as Kafka's does."""
    partition_dir = tmp_path / f"zstd-v{magic}-0"
    partition_dir.mkdir()
    records = [_record(offset) for offset in range(3)]
    data = build_legacy_message_set(records, magic=magic, compression=CompressionType.ZSTD)
    (partition_dir / LOG_NAME).write_bytes(data)

    shallow = dump_log_segments([partition_dir / LOG_NAME])
    assert shallow.errors == []
    (wrapper,) = shallow.batches
    assert (wrapper.last_offset, wrapper.compression, wrapper.is_valid) == (2, "zstd", True)

    deep = kafka_tools().execute(
        "kafka.tools.DumpLogSegments", "--deep-iteration", "--files", str(partition_dir / LOG_NAME)
    )
    assert deep.returncode != 0
    assert (
        "org.apache.kafka.common.InvalidRecordException: Invalid wrapper compressionType "
        f"found in legacy deep record iterator {magic}"
    ) in deep.stderr

    log = Log.open(partition_dir, CONFIG, clean_shutdown=False)
    try:
        assert log.log_end_offset == 3
        assert log.read(0, 1 << 20).records == data
        with pytest.raises(InvalidRecordError, match="zstd"):  # as Kafka's deep iterator
            decode_records(data, parse_header(data, 0))
    finally:
        log.close()


def test_kafka_reads_a_legacy_log_that_tierlog_continued_in_v2(tmp_path: Path) -> None:
    """After an upgrade a segment holds v1 messages, then v2 batches: Kafka checks the
    whole segment, and the index entries tierlog made on both sides of the change."""
    partition_dir = tmp_path / "upgraded-0"
    expected = write_legacy_log(partition_dir, LAYOUTS[1])
    log = Log.open(partition_dir, CONFIG, clean_shutdown=False)
    try:
        for first in range(len(expected), len(expected) + 12, 4):
            batch = [_record(offset) for offset in range(first, first + 4)]
            info = log.append(build_batch(batch, compression=CompressionType.ZSTD))
            assert info.first_offset == first
            expected += [
                Record(first + i, r.timestamp, r.key, r.value) for i, r in enumerate(batch)
            ]
    finally:
        log.close()

    checks = verify_partition_dir(partition_dir)

    assert checks.errors == []
    assert all(batch.is_valid for batch in checks.batches)
    assert [batch.magic for batch in checks.batches][-4:] == [1, 2, 2, 2]
    assert [(r.offset, r.timestamp_ms) for r in checks.records] == [
        (e.offset, e.timestamp) for e in expected
    ]
