"""One partition's log: offsets, rolling, reads, timestamp lookups, truncation, reopening."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import (
    T0,
    FakeClock,
    batch_with_timestamps,
    config,
    headers_of,
    make_batch,
    read_all_bytes,
    read_all_records,
    records_of,
    segment_files,
)
from tierlog.storage.config import LogConfig, TimestampType
from tierlog.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    TierlogError,
    UnsupportedForMessageFormatError,
)
from tierlog.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from tierlog.storage.records import (
    CompressionType,
    SimpleRecord,
    build_batch,
    build_legacy_message_set,
    crc_is_valid,
    parse_header,
)
from tierlog.storage.recovery import load_segments
from tierlog.storage.segment import INT32_MAX


def open_log(directory: Path, log_config: LogConfig | None = None, **kwargs: object) -> Log:
    return Log.open(directory, log_config, clock_ms=kwargs.pop("clock", FakeClock()), **kwargs)  # type: ignore[arg-type]


def log_files(log: Log) -> list[str]:
    return segment_files(log.directory)


# -- appending --------------------------------------------------------------------------


def test_offsets_and_leader_epoch_are_patched_in_and_the_crc_still_holds(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.leader_epoch = 7
    first = make_batch(3, tag="a")
    second = make_batch(2, tag="b", compression=CompressionType.LZ4)
    assert log.append(first).first_offset == 0
    info = log.append(second)
    assert (info.first_offset, info.last_offset, info.batches, info.size_bytes) == (
        3,
        4,
        1,
        len(second),
    )
    stored = read_all_bytes(log)
    headers = headers_of(stored)
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 4)]
    assert [h.partition_leader_epoch for h in headers] == [7, 7]
    assert all(crc_is_valid(stored, h) for h in headers)
    # Only the base offset and leader epoch changed: everything under the CRC is as produced.
    assert stored[16 : len(first)] == first[16:]
    assert stored[len(first) + 16 :] == second[16:]
    assert [r.offset for r in records_of(stored)] == [0, 1, 2, 3, 4]
    log.close()


def test_a_request_with_several_batches_gets_consecutive_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    request = make_batch(2, tag="a") + make_batch(3, tag="b") + make_batch(1, tag="c")
    info = log.append(request)
    assert (info.first_offset, info.last_offset, info.batches) == (0, 5, 3)
    assert [r.key for r in read_all_records(log)] == [
        b"a-0",
        b"a-1",
        b"b-0",
        b"b-1",
        b"b-2",
        b"c-0",
    ]
    assert log.log_end_offset == 6
    log.close()


def test_log_append_time_rewrites_the_max_timestamp_with_a_valid_crc(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 5_000)
    log = open_log(tmp_path / "t-0", config(message_timestamp_type="LogAppendTime"), clock=clock)
    info = log.append(make_batch(3, start_ts=T0 - 10**9))  # far too old for CreateTime checks
    assert info.log_append_time_ms == T0 + 5_000
    assert info.max_timestamp == T0 + 5_000
    stored = read_all_bytes(log)
    header = parse_header(stored)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == T0 + 5_000
    assert crc_is_valid(stored, header)
    assert [r.timestamp for r in records_of(stored)] == [T0 + 5_000] * 3
    assert log.offset_for_timestamp(T0 + 5_000) == (T0 + 5_000, 0)
    log.close()


# -- invalid produce requests leave the log untouched -----------------------------------


def corrupt_crc(batch: bytes) -> bytes:
    damaged = bytearray(batch)
    damaged[-1] ^= 0xFF
    return bytes(damaged)


def no_key_batch() -> bytes:
    return build_batch([SimpleRecord(key=None, value=b"v", timestamp=T0)])


def nonzero_base_offset() -> bytes:
    return build_batch([SimpleRecord(key=b"k", value=b"v", timestamp=T0)], base_offset=5)


@pytest.mark.parametrize(
    ("produced", "props", "error"),
    [
        (lambda: corrupt_crc(make_batch(3)), {}, CorruptRecordError),
        (lambda: make_batch(2) + corrupt_crc(make_batch(1)), {}, CorruptRecordError),
        (lambda: make_batch(2) + make_batch(1)[:-3], {}, CorruptRecordError),
        (lambda: make_batch(1, value_size=500), {"max.message.bytes": "300"}, RecordTooLargeError),
        (
            lambda: make_batch(1, value_size=300) + make_batch(1, value_size=300),
            {"segment.bytes": "500"},
            RecordBatchTooLargeError,
        ),
        (
            lambda: build_legacy_message_set([SimpleRecord(b"k", b"v", T0)], magic=1),
            {},
            UnsupportedForMessageFormatError,
        ),
        (no_key_batch, {"cleanup.policy": "compact"}, InvalidRecordError),
        (nonzero_base_offset, {}, InvalidRecordError),
        (lambda: make_batch(1, start_ts=T0 + 2 * 3600 * 1000), {}, InvalidTimestampError),
        (lambda: b"", {}, InvalidRecordError),
    ],
)
def test_an_invalid_request_raises_a_typed_error_and_changes_nothing(
    tmp_path: Path,
    produced: object,
    props: dict[str, str],
    error: type[TierlogError],
) -> None:
    log = open_log(tmp_path / "t-0", LogConfig.from_properties(props))
    log.append(make_batch(2, tag="before"))
    files_before = {p.name: p.read_bytes() for p in log.directory.iterdir()}
    state_before = (log.log_end_offset, log.size_bytes, len(log.segments))
    with pytest.raises(error):
        log.append(produced())  # type: ignore[operator]
    assert (log.log_end_offset, log.size_bytes, len(log.segments)) == state_before
    assert {p.name: p.read_bytes() for p in log.directory.iterdir()} == files_before
    assert log.append(make_batch(1, tag="after")).first_offset == 2
    assert [r.key for r in read_all_records(log)] == [b"before-0", b"before-1", b"after-0"]
    log.close()


def test_an_append_below_the_log_start_is_refused_not_acknowledged(tmp_path: Path) -> None:
    """However a log came to start past its end, an offset below its start could never
    be read back, so no append is given one."""
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append(make_batch(5))
    log.close()
    loaded = load_segments(
        directory, LogConfig(), log_start_offset=0, recovery_point=5, clean_shutdown=True
    )
    broken = Log(directory, LogConfig(), loaded.segments, log_start_offset=1000, recovery_point=5)
    with pytest.raises(KafkaStorageError, match="offset 5 is below the log start 1000"):
        broken.append(make_batch(1))
    assert broken.log_end_offset == 5
    broken.close()


# -- rolling ----------------------------------------------------------------------------


def test_rolls_when_the_next_batch_would_overflow_segment_bytes(tmp_path: Path) -> None:
    batch_size = len(make_batch(1, value_size=100))
    log = open_log(tmp_path / "t-0", config(segment_bytes=3 * batch_size + 10))
    for i in range(10):
        log.append(make_batch(1, value_size=100, tag=f"{i:x}"))
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert all(s.size <= 3 * batch_size + 10 for s in log.segments)
    assert [name for name in log_files(log) if name.endswith(".log")] == [
        f"{base:020d}.log" for base in (0, 3, 6, 9)
    ]
    assert [r.offset for r in read_all_records(log)] == list(range(10))
    log.close()


def test_rolled_segments_have_trimmed_indexes_and_a_closing_time_entry(tmp_path: Path) -> None:
    batch_size = len(make_batch(1))
    log = open_log(
        tmp_path / "t-0", config(segment_bytes=4 * batch_size, index_interval_bytes=1_000_000)
    )
    for i in range(6):
        log.append(make_batch(1, start_ts=T0 + i))
    closed, active = log.segments
    assert closed.offset_index.path.stat().st_size == 0
    assert closed.time_index.path.stat().st_size == 12  # the entry written on roll
    assert tuple(closed.time_index.entry(0)) == (T0 + 3, 3)
    assert active.offset_index.path.stat().st_size == 10 * 1024 * 1024
    log.close()


def test_rolls_by_segment_ms_on_record_timestamps(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", config(segment_ms=60_000), clock=clock)
    log.append(make_batch(1, start_ts=clock()))
    clock.advance(60_000)
    log.append(make_batch(1, start_ts=clock()))
    assert len(log.segments) == 1
    clock.advance(1)
    log.append(make_batch(1, start_ts=clock()))
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_rolls_by_segment_ms_on_the_clock_when_records_have_no_timestamp(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", config(segment_ms=60_000), clock=clock)
    untimed = build_batch([SimpleRecord(key=b"k", value=b"v", timestamp=-1)])
    log.append(untimed)
    clock.advance(30_000)
    log.append(untimed)
    assert len(log.segments) == 1
    clock.advance(30_001)
    log.append(untimed)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_rolls_when_an_index_is_full(tmp_path: Path) -> None:
    # 16 bytes: two offset-index entries, one time-index entry.
    log = open_log(tmp_path / "t-0", config(segment_index_bytes=16, index_interval_bytes=0))
    for i in range(8):
        log.append(make_batch(1, start_ts=T0 + i, tag=str(i)))
    assert len(log.segments) > 1
    for segment in log.segments:
        assert segment.offset_index.entries <= 2
    assert [r.offset for r in read_all_records(log)] == list(range(8))
    log.close()


def test_a_request_of_many_batches_never_overfills_a_small_index(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(segment_index_bytes=8, index_interval_bytes=0))
    request = b"".join(make_batch(2, start_ts=T0 + i, tag=str(i)) for i in range(5))
    info = log.append(request)
    assert (info.first_offset, info.last_offset) == (0, 9)
    assert log.log_end_offset == 10
    assert log.append(make_batch(1, tag="next")).first_offset == 10
    assert [r.offset for r in read_all_records(log)] == list(range(11))
    log.close()


def test_rolls_when_an_offset_would_not_fit_the_segment(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    # A segment 0 that already holds offset 2^31 - 1, the last one it can index.
    near_the_edge = build_batch([SimpleRecord(b"k", b"v", T0)], base_offset=INT32_MAX)
    (directory / "00000000000000000000.log").write_bytes(near_the_edge)
    log = open_log(directory)
    assert log.log_end_offset == INT32_MAX + 1
    info = log.append(make_batch(2))
    assert info.first_offset == INT32_MAX + 1
    assert [s.base_offset for s in log.segments] == [0, INT32_MAX + 1]
    assert f"{INT32_MAX + 1:020d}.log" in log_files(log)
    assert [r.offset for r in read_all_records(log)] == [INT32_MAX, INT32_MAX + 1, INT32_MAX + 2]
    log.close()


def test_roll_starts_an_empty_segment_once(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(make_batch(2))
    new = log.roll()
    assert new.base_offset == 2
    assert log.roll() is new
    assert len(log.segments) == 2
    log.close()


# -- reading ----------------------------------------------------------------------------


@pytest.fixture
def three_segment_log(tmp_path: Path) -> Log:
    """Offsets 0-29 in batches of 3 records, 4 batches per segment except the last."""
    batch_size = len(make_batch(3, tag="00"))
    log = open_log(tmp_path / "t-0", config(segment_bytes=4 * batch_size, index_interval_bytes=0))
    for i in range(10):
        log.append(make_batch(3, start_ts=T0 + 10 * i, tag=f"{i:02d}"))
    assert [s.base_offset for s in log.segments] == [0, 12, 24]
    return log


def test_read_starts_at_the_batch_holding_the_offset(three_segment_log: Log) -> None:
    log = three_segment_log
    for offset in (0, 4, 13, 24, 29):
        found = log.read(offset, 1_000_000)
        first = headers_of(found.records)[0]
        assert first.base_offset <= offset <= first.last_offset
        assert (found.log_start_offset, found.log_end_offset) == (0, 30)
    # A read stays within one segment; the next read picks up at the next segment.
    assert headers_of(log.read(5, 1_000_000).records)[-1].last_offset == 11
    log.close()


def test_read_returns_whole_batches_and_the_first_even_when_too_big(
    three_segment_log: Log,
) -> None:
    log = three_segment_log
    batch_size = len(make_batch(3, tag="00"))
    assert len(headers_of(log.read(0, 1).records)) == 1
    assert len(log.read(0, 2 * batch_size + batch_size // 2).records) == 2 * batch_size
    assert log.read(0, 1, min_one_batch=False).records == b""
    log.close()


def test_read_honours_the_upper_bound_offset(three_segment_log: Log) -> None:
    log = three_segment_log
    assert [
        h.base_offset for h in headers_of(log.read(0, 10**6, upper_bound_offset=9).records)
    ] == [
        0,
        3,
        6,
    ]
    assert log.read(12, 10**6, upper_bound_offset=12).records == b""
    assert log.read(12, 10**6, upper_bound_offset=11).records == b""
    log.close()


def test_read_outside_the_log_is_out_of_range(three_segment_log: Log) -> None:
    log = three_segment_log
    assert log.read(30, 1000).records == b""  # the log end itself: nothing yet
    with pytest.raises(OffsetOutOfRangeError):
        log.read(31, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    log.increment_log_start_offset(14)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(13, 1000)
    assert headers_of(log.read(14, 1000).records)[0].base_offset == 12
    with pytest.raises(OffsetOutOfRangeError):
        log.increment_log_start_offset(31)
    log.close()


def flip_length_byte(log: Log, base_offset: int, byte: int) -> None:
    """Flip every bit of ``byte`` (8: the length's sign, 9: +16 MiB) of the stored
    length field of the batch at ``base_offset``, under the running log."""
    segment = next(s for s in reversed(log.segments) if s.base_offset <= base_offset)
    data = segment.log.path.read_bytes()
    header = next(h for h in headers_of(data) if h.base_offset == base_offset)
    with segment.log.path.open("r+b") as file:
        file.seek(header.position + byte)
        file.write(bytes([data[header.position + byte] ^ 0xFF]))


@pytest.mark.parametrize(
    "byte", [8, 9], ids=["length below a header", "length past the segment's end"]
)
def test_a_length_damaged_under_the_running_log_is_refused_not_skipped(
    tmp_path: Path, byte: int
) -> None:
    """Reads keep the batches before the damage; a read of the damaged batch is
    CorruptRecordError naming partition and offset, never the next segment's batches."""
    batch_size = len(make_batch(3, tag="00"))
    log = open_log(tmp_path / "t-0", config(segment_bytes=4 * batch_size))
    for i in range(10):
        log.append(make_batch(3, tag=f"{i:02d}"))
    flip_length_byte(log, 3, byte)
    assert [h.base_offset for h in headers_of(log.read(0, 10**6).records)] == [0]
    for offset in (3, 5, 6):  # a walk from the segment's start meets the damage
        with pytest.raises(CorruptRecordError, match=r"t-0/0+\.log.*offset 3 "):
            log.read(offset, 10**6)
    assert headers_of(log.read(12, 10**6).records)[0].base_offset == 12
    log.close()


# -- timestamp lookups ------------------------------------------------------------------


def test_special_timestamps(three_segment_log: Log) -> None:
    log = three_segment_log
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (-1, 0)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (-1, 30)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (T0 + 92, 29)
    log.increment_log_start_offset(5)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (-1, 5)
    log.close()


def test_max_timestamp_points_at_the_record_inside_its_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(index_interval_bytes=0))
    log.append(batch_with_timestamps([T0, T0 + 5, T0 + 1]))
    log.append(batch_with_timestamps([T0 + 900, T0 + 3], CompressionType.ZSTD))
    log.append(batch_with_timestamps([T0 + 2, T0 + 4]))
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (T0 + 900, 3)
    log.close()


def test_an_empty_log_has_no_max_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
    assert log.offset_for_timestamp(T0) is None
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (-1, 0)
    log.close()


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.SNAPPY])
def test_offset_for_timestamp_is_the_first_record_at_or_after_it(
    tmp_path: Path, codec: CompressionType
) -> None:
    batch = batch_with_timestamps([T0] * 4, codec)
    log = open_log(
        tmp_path / "t-0", config(segment_bytes=3 * len(batch) + 40, index_interval_bytes=0)
    )
    # Timestamps out of order within and across batches and segments.
    stamps = [
        [T0 + 50, T0 + 10, T0 + 60, T0 + 20],
        [T0 + 5, T0 + 70, T0 + 70, T0 + 30],
        [T0 + 100, T0 + 90, T0 + 40, T0 + 110],
        [T0 + 80, T0 + 200, T0 + 150, T0 + 1],
        [T0 + 120, T0 + 130, T0 + 140, T0 + 300],
    ]
    for batch_stamps in stamps:
        log.append(batch_with_timestamps(batch_stamps, codec))
    assert len(log.segments) >= 2
    flat = [ts for batch_stamps in stamps for ts in batch_stamps]
    for target in range(T0 - 1, T0 + 302):
        expected = next(((ts, off) for off, ts in enumerate(flat) if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    log.close()


# -- truncation -------------------------------------------------------------------------


def test_truncate_to_the_middle_of_a_segment_drops_later_segments(
    three_segment_log: Log,
) -> None:
    log = three_segment_log
    log.flush()
    log.truncate_to(16)  # inside the batch 15-17
    assert log.log_end_offset == 15
    assert [s.base_offset for s in log.segments] == [0, 12]
    assert not (log.directory / f"{24:020d}.log").exists()
    assert log.recovery_point == 15
    assert [r.offset for r in read_all_records(log)] == list(range(15))
    # The max timestamp is recomputed from what is left.
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (T0 + 42, 14)
    assert log.offset_for_timestamp(T0 + 43) is None
    assert log.append(make_batch(1, start_ts=T0 + 5)).first_offset == 15
    assert log.offset_for_timestamp(T0 + 41) == (T0 + 41, 13)
    log.close()


def test_truncate_to_a_segment_boundary_makes_the_previous_segment_active(
    three_segment_log: Log,
) -> None:
    log = three_segment_log
    log.truncate_to(24)
    assert [s.base_offset for s in log.segments] == [0, 12]
    assert log.log_end_offset == 24
    active = log.active_segment
    assert active.offset_index.path.stat().st_size == 10 * 1024 * 1024 // 8 * 8
    assert log.append(make_batch(1)).first_offset == 24
    assert [s.base_offset for s in log.segments] == [0, 12, 24]  # full: rolls again
    log.close()


def test_truncate_to_the_log_end_or_beyond_changes_nothing(three_segment_log: Log) -> None:
    log = three_segment_log
    size = log.size_bytes
    log.truncate_to(30)
    log.truncate_to(1000)
    assert (log.log_end_offset, log.size_bytes) == (30, size)
    log.close()


def test_truncate_below_the_first_segment_starts_over_there(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.truncate_fully_and_start_at(100)
    assert log_files(log) == ["00000000000000000100.index", "00000000000000000100.log",
                              "00000000000000000100.timeindex"]  # fmt: skip
    log.append(make_batch(3))
    assert (log.log_start_offset, log.log_end_offset) == (100, 103)
    log.truncate_to(50)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (50, 50, 50)
    assert [s.base_offset for s in log.segments] == [50]
    assert not (log.directory / f"{100:020d}.log").exists()
    assert log.append(make_batch(1)).first_offset == 50
    log.close()


def test_truncate_fully_and_start_at_drops_everything(three_segment_log: Log) -> None:
    log = three_segment_log
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (1000, 1000, 0)
    assert [name for name in log_files(log) if name.endswith(".log")] == [f"{1000:020d}.log"]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert log.append(make_batch(2)).first_offset == 1000
    assert [r.offset for r in read_all_records(log)] == [1000, 1001]
    log.close()


# -- flushing, closing, reopening -------------------------------------------------------


def test_flush_advances_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(make_batch(3))
    assert (log.recovery_point, log.unflushed_messages) == (0, 3)
    log.flush()
    assert (log.recovery_point, log.unflushed_messages) == (3, 0)
    log.append(make_batch(2))
    log.flush(up_to_offset=4)
    assert log.recovery_point == 4
    log.flush()
    assert log.recovery_point == 5
    log.close()


def test_flush_messages_flushes_during_append(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(flush_messages=4))
    log.append(make_batch(3))
    assert log.recovery_point == 0
    log.append(make_batch(1))
    assert log.recovery_point == 4
    log.append(make_batch(2))
    assert log.recovery_point == 4
    log.close()


def test_an_append_that_may_reach_flush_messages_is_said_to_wait_for_a_sync(
    tmp_path: Path,
) -> None:
    unbounded = open_log(tmp_path / "t-0")  # Kafka's default: never by count
    assert not unbounded.append_waits_for_sync(len(make_batch(1000)))
    unbounded.close()

    log = open_log(tmp_path / "t-1", config(flush_messages=4))
    batch = make_batch(3)
    assert log.append_waits_for_sync(len(batch))  # its size bounds its records: 4 may be among them
    log.append(make_batch(3))
    assert log.append_waits_for_sync(1)  # a fourth record would reach the threshold
    log.append(make_batch(1))
    assert log.recovery_point == 4 and log.unflushed_messages == 0
    assert not log.append_waits_for_sync(3)
    log.close()


def test_close_and_reopen_keeps_everything(three_segment_log: Log) -> None:
    log = three_segment_log
    directory, log_config = log.directory, log.config
    content = read_all_bytes(log)
    lookups = [log.offset_for_timestamp(T0 + t) for t in range(0, 100, 7)]
    log.close()
    index_sizes = {
        p.name: p.stat().st_size
        for p in directory.iterdir()
        if p.suffix in (".index", ".timeindex")
    }
    # Every index on disk holds exactly its entries after a close.
    for segment_base in (0, 12, 24):
        assert index_sizes[f"{segment_base:020d}.index"] % 8 == 0
        assert index_sizes[f"{segment_base:020d}.index"] < 1024
    assert index_sizes[f"{24:020d}.timeindex"] == 12  # its only entry has the max timestamp

    reopened = Log.open(directory, log_config, recovery_point=30, clean_shutdown=True)
    assert (reopened.log_end_offset, reopened.recovery_point) == (30, 30)
    assert read_all_bytes(reopened) == content
    assert [reopened.offset_for_timestamp(T0 + t) for t in range(0, 100, 7)] == lookups
    active = reopened.active_segment
    assert active.offset_index.path.stat().st_size == 10 * 1024 * 1024
    assert active.time_index.path.stat().st_size == 10 * 1024 * 1024 // 12 * 12
    assert reopened.segments[0].offset_index.path.stat().st_size == index_sizes[f"{0:020d}.index"]
    assert reopened.append(make_batch(1)).first_offset == 30
    reopened.close()
