"""Segments of v0/v1 message sets (a log from before Kafka 0.11) under tierlog's recovery
and reads: a torn tail is cut to the last whole message, CRC-32 damage is found and cut,
a segment without timestamps indexes none, and a log continues with v2 appends after
its legacy data, read back across the change of format as one run of offsets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import (
    T0,
    FakeClock,
    config,
    headers_of,
    read_all_bytes,
    read_all_records,
    records_of,
)
from tierlog.storage.config import TimestampType
from tierlog.storage.log import MAX_TIMESTAMP, Log
from tierlog.storage.records import (
    BatchHeader,
    CompressionType,
    Record,
    SimpleRecord,
    build_batch,
    build_legacy_message_set,
    crc_is_valid,
)

CONFIG = config(index_interval_bytes=0)
FORMATS = [
    pytest.param(magic, codec, id=f"v{magic}-{codec.name.lower()}")
    for magic in (0, 1)
    for codec in (CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4)
]


def name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def legacy_records(first_offset: int, count: int) -> list[SimpleRecord]:
    return [
        SimpleRecord(key=b"k%d" % offset, value=b"legacy %d" % offset, timestamp=T0 + offset)
        for offset in range(first_offset, first_offset + count)
    ]


def legacy_sets(
    magic: int, codec: CompressionType, *, first_offset: int = 0, sets: int = 4, per_set: int = 3
) -> bytes:
    """``sets`` message sets of ``per_set`` records at consecutive offsets."""
    return b"".join(
        build_legacy_message_set(
            legacy_records(first_offset + per_set * i, per_set),
            magic=magic,
            compression=codec,
            base_offset=first_offset + per_set * i,
        )
        for i in range(sets)
    )


def expected_records(data: bytes) -> list[Record]:
    return records_of(data)


def recover(directory: Path, clock: FakeClock | None = None) -> Log:
    """Open as after a crash: every segment is scanned and its indexes rebuilt."""
    return Log.open(directory, CONFIG, clean_shutdown=False, clock_ms=clock or FakeClock())


# -- a torn tail --------------------------------------------------------------------------


@pytest.mark.parametrize(("magic", "codec"), FORMATS)
def test_a_torn_tail_is_cut_to_the_last_whole_message(
    tmp_path: Path, magic: int, codec: CompressionType
) -> None:
    data = legacy_sets(magic, codec)
    entries = headers_of(data)
    last = entries[-1]
    whole = data[: last.position]
    # Cuts inside the log overhead, inside the message header, and inside the body.
    for keep in sorted({1, 11, 12, 17, 20, 25, last.size // 2, last.size - 1}):
        directory = tmp_path / f"cut-{keep}" / "t-0"
        directory.mkdir(parents=True)
        (directory / name(0)).write_bytes(data[: last.position + keep])

        log = recover(directory)

        assert (directory / name(0)).read_bytes() == whole, keep
        assert log.log_end_offset == entries[-2].last_offset + 1
        assert read_all_records(log) == expected_records(whole)
        log.close()


@pytest.mark.parametrize(("magic", "codec"), FORMATS)
def test_appends_after_a_cut_tail_continue_from_the_last_whole_message(
    tmp_path: Path, magic: int, codec: CompressionType
) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    data = legacy_sets(magic, codec)
    last = headers_of(data)[-1]
    (directory / name(0)).write_bytes(data[: last.end_position - 3])

    log = recover(directory)
    info = log.append(build_batch([SimpleRecord(b"new", b"v2 record", T0)]))

    assert info.first_offset == headers_of(data)[-2].last_offset + 1
    records = read_all_records(log)
    assert [r.offset for r in records] == list(range(info.first_offset + 1))
    assert records[-1].value == b"v2 record"
    log.close()


# -- CRC-32 damage ------------------------------------------------------------------------


def flip(data: bytes, position: int) -> bytes:
    damaged = bytearray(data)
    damaged[position] ^= 0x01
    return bytes(damaged)


def damage_points(entry: BatchHeader) -> dict[str, int]:
    """Bytes under a legacy message's CRC-32 (magic onwards), and the CRC itself."""
    return {
        "crc": entry.position + 14,
        "attributes": entry.position + 17,
        "last byte": entry.end_position - 1,
        "middle": entry.position + entry.size // 2 + 2,
    }


@pytest.mark.parametrize(("magic", "codec"), FORMATS)
def test_crc_damage_is_detected_and_the_log_cut_before_it(
    tmp_path: Path, magic: int, codec: CompressionType
) -> None:
    data = legacy_sets(magic, codec)
    entries = headers_of(data)
    hit = entries[2]
    for what, position in damage_points(hit).items():
        damaged = flip(data, position)
        assert not crc_is_valid(damaged, headers_of(damaged)[2]), what
        directory = tmp_path / what.replace(" ", "-") / "t-0"
        directory.mkdir(parents=True)
        (directory / name(0)).write_bytes(damaged)
        # A later segment can only hold data written after the damage: it goes too.
        later = entries[-1].last_offset + 1
        (directory / name(later)).write_bytes(legacy_sets(magic, codec, first_offset=later))

        log = recover(directory)

        assert (directory / name(0)).read_bytes() == data[: hit.position], what
        assert not (directory / name(later)).exists()
        assert log.log_end_offset == entries[1].last_offset + 1
        assert read_all_records(log) == expected_records(data[: hit.position])
        log.close()


def test_damage_inside_a_compressed_wrapper_fails_the_wrappers_crc(tmp_path: Path) -> None:
    """The outer CRC-32 covers the compressed inner messages: damage there is found by
    recovery's shallow scan, without decompressing anything."""
    data = legacy_sets(1, CompressionType.GZIP, sets=2)
    first, second = headers_of(data)
    damaged = flip(data, second.end_position - 10)  # in the gzip stream of the second
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / name(0)).write_bytes(damaged)

    log = recover(directory)

    assert log.log_end_offset == first.last_offset + 1
    assert (directory / name(0)).read_bytes() == data[: second.position]
    log.close()


# -- indexes ------------------------------------------------------------------------------


def test_a_v0_segment_has_no_timestamps_to_index(tmp_path: Path) -> None:
    """Kafka's time index starts from (-1, base offset) and only takes larger timestamps:
    v0 messages (no timestamp) leave it empty, however many index entries are made."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / name(0)).write_bytes(legacy_sets(0, CompressionType.NONE))

    log = recover(directory)
    segment = log.active_segment
    assert segment.offset_index.entries == len(headers_of(legacy_sets(0, CompressionType.NONE))) - 1
    assert segment.time_index.entries == 0
    untimed = build_batch([SimpleRecord(b"k", b"v", -1)] * 2)
    log.append(untimed)
    log.append(untimed)
    assert segment.time_index.entries == 0
    assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
    log.close()
    assert (directory / "00000000000000000000.timeindex").stat().st_size == 0


@pytest.mark.parametrize(("magic", "codec"), FORMATS)
def test_rebuilt_indexes_point_at_each_entrys_last_offset(
    tmp_path: Path, magic: int, codec: CompressionType
) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    data = legacy_sets(magic, codec)
    (directory / name(0)).write_bytes(data)

    log = recover(directory)
    segment = log.active_segment
    entries = headers_of(data)
    offset_entries = [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)]
    assert offset_entries == [(e.last_offset, e.position) for e in entries[1:]]
    if magic == 1:
        time_entries = [segment.time_index.entry(i) for i in range(segment.time_index.entries)]
        assert time_entries == [(e.max_timestamp, e.last_offset) for e in entries[1:]]
    log.close()


# -- legacy data followed by v2 appends ---------------------------------------------------


def v2_batch(first_offset: int, count: int) -> bytes:
    return build_batch(
        [
            SimpleRecord(key=b"k%d" % offset, value=b"v2 %d" % offset, timestamp=T0 + offset)
            for offset in range(first_offset, first_offset + count)
        ],
        compression=CompressionType.SNAPPY,
    )


@pytest.fixture
def upgraded_log(tmp_path: Path) -> Log:
    """A v0 segment (offsets 0-11), a v1 segment (12-23) holding v2 batches after its
    legacy messages (24-35), and a v2 segment (36-47): a log from before and after an
    upgrade of the message format."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / name(0)).write_bytes(legacy_sets(0, CompressionType.GZIP))
    (directory / name(12)).write_bytes(legacy_sets(1, CompressionType.NONE, first_offset=12))
    clock = FakeClock(T0 + 1_000)
    log = Log.open(directory, CONFIG, clean_shutdown=False, clock_ms=clock)
    assert log.log_end_offset == 24
    for first in range(24, 36, 4):
        assert log.append(v2_batch(first, 4)).first_offset == first
    log.roll()
    for first in range(36, 48, 4):
        log.append(v2_batch(first, 4))
    return log


def check_upgraded(log: Log) -> None:
    records = read_all_records(log)
    assert [r.offset for r in records] == list(range(48))
    assert [r.timestamp for r in records] == [-1] * 12 + [T0 + o for o in range(12, 48)]
    assert [r.value for r in records] == [
        (b"legacy %d" if o < 24 else b"v2 %d") % o for o in range(48)
    ]
    magics = [header.magic for header in headers_of(read_all_bytes(log))]
    assert magics == [0] * 4 + [1] * 12 + [2] * 6


def test_reads_cross_from_legacy_messages_to_v2_batches(upgraded_log: Log) -> None:
    log = upgraded_log
    check_upgraded(log)
    across = log.read(22, 1 << 20).records  # the last v1 messages, then v2 batches
    assert [h.magic for h in headers_of(across)] == [1, 1, 2, 2, 2]
    assert [r.offset for r in records_of(across)] == list(range(22, 36))
    for offset in (11, 12, 23, 24, 35, 36):
        first = headers_of(log.read(offset, 1).records)[0]
        assert first.last_offset >= offset and first.base_offset <= offset
    assert log.offset_for_timestamp(T0 + 5) == (T0 + 12, 12)  # v0 has no timestamps
    assert log.offset_for_timestamp(T0 + 23) == (T0 + 23, 23)
    assert log.offset_for_timestamp(T0 + 24) == (T0 + 24, 24)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (T0 + 47, 47)
    log.close()


def test_a_log_with_legacy_segments_survives_reopening_and_crashes(upgraded_log: Log) -> None:
    directory = upgraded_log.directory
    upgraded_log.close()
    clean = Log.open(directory, CONFIG, recovery_point=48, clean_shutdown=True)
    check_upgraded(clean)
    clean.close()
    crashed = recover(directory)
    check_upgraded(crashed)
    assert crashed.recovery_point == 48
    crashed.close()


def test_truncation_walks_back_from_v2_into_legacy_messages(upgraded_log: Log) -> None:
    log = upgraded_log
    log.truncate_to(30)  # inside a v2 batch (28-31): the whole batch goes
    assert log.log_end_offset == 28
    log.truncate_to(18)  # inside the v1 messages, one per offset
    assert log.log_end_offset == 18
    assert log.append(v2_batch(18, 2)).first_offset == 18
    records = read_all_records(log)
    assert [r.offset for r in records] == list(range(20))
    assert [h.magic for h in headers_of(read_all_bytes(log))] == [0] * 4 + [1] * 6 + [2]
    log.close()


def test_log_append_time_v1_messages_read_with_their_append_time(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    data = build_legacy_message_set(
        legacy_records(0, 3),
        magic=1,
        compression=CompressionType.SNAPPY,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time_ms=T0 + 500,
    )
    (directory / name(0)).write_bytes(data)
    log = recover(directory)
    assert [r.timestamp for r in read_all_records(log)] == [T0 + 500] * 3
    assert log.offset_for_timestamp(T0 + 1) == (T0 + 500, 0)
    assert log.offset_for_timestamp(T0 + 501) is None
    log.close()
