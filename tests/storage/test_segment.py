"""A segment: its file names, sparse index entries, reads, timestamp lookups and recovery."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from tests.storage.conftest import T0, FakeClock, config, headers_of, make_batch
from tierlog.storage import file_records
from tierlog.storage.errors import InvalidRecordError
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType
from tierlog.storage.segment import (
    INT32_MAX,
    AppendedBatch,
    LogSegment,
    RollPolicy,
    segment_path,
)


def test_segment_files_are_named_by_the_20_digit_base_offset(tmp_path: Path) -> None:
    assert segment_path(tmp_path, 0, ".log").name == "00000000000000000000.log"
    assert segment_path(tmp_path, 1234567, ".index").name == "00000000000001234567.index"
    assert segment_path(tmp_path, 2**63 - 1, ".timeindex").name == "09223372036854775807.timeindex"


def expected_index_entries(batches: list[bytes], interval: int) -> list[tuple[int, int]]:
    """Kafka's rule: an entry for a batch once more than ``interval`` bytes went unindexed."""
    entries, unindexed, position, next_offset = [], 0, 0, 0
    for batch in batches:
        last_offset = next_offset + headers_of(batch)[0].record_count - 1
        if unindexed > interval:
            entries.append((last_offset, position))
            unindexed = 0
        unindexed += len(batch)
        position += len(batch)
        next_offset = last_offset + 1
    return entries


@pytest.mark.parametrize("interval", [0, 100, 500, 4096])
def test_index_entries_every_interval_bytes_point_at_batch_last_offsets(
    tmp_path: Path, interval: int
) -> None:
    log = Log.open(tmp_path / "t-0", config(index_interval_bytes=interval))
    batches = [make_batch(1 + i % 4, value_size=20 + 13 * i, tag=str(i)) for i in range(30)]
    for batch in batches:
        log.append(batch)
    segment = log.active_segment
    index = segment.offset_index
    entries = [tuple(index.entry(slot)) for slot in range(index.entries)]
    assert entries == expected_index_entries(batches, interval)
    for offset, position in entries:
        found = segment.log.header_at(position)
        assert found is not None
        assert found.header.last_offset == offset
    log.close()


def test_time_index_entries_carry_the_max_timestamp_so_far_and_its_batch(
    tmp_path: Path,
) -> None:
    log = Log.open(tmp_path / "t-0", config(index_interval_bytes=0))
    # Timestamps step back now and then; the index only ever grows.
    for i, start in enumerate([T0 + 10, T0 + 5, T0 + 30, T0 + 20, T0 + 40]):
        log.append(make_batch(2, start_ts=start, tag=str(i)))
    time_index = log.active_segment.time_index
    entries = [tuple(time_index.entry(slot)) for slot in range(time_index.entries)]
    # Entries are made from the second batch on (the first only starts the interval count).
    assert entries == [(T0 + 11, 1), (T0 + 31, 5), (T0 + 41, 9)]
    log.close()
    # Closing adds nothing new here: the max timestamp already has its entry.
    reopened = Log.open(tmp_path / "t-0", clean_shutdown=True)
    assert reopened.active_segment.max_timestamp_so_far == T0 + 41
    assert reopened.active_segment.offset_of_max_timestamp == 9
    reopened.close()


def test_read_returns_whole_batches_from_the_one_holding_the_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", config(index_interval_bytes=0))
    batches = [make_batch(3, tag=str(i)) for i in range(5)]  # offsets 0-2, 3-5, ...
    for batch in batches:
        log.append(batch)
    segment = log.active_segment
    found = segment.read(7, 10_000)
    assert found is not None
    assert [h.base_offset for h in headers_of(found.records)] == [6, 9, 12]
    assert found.position == 2 * len(batches[0])
    just_two = segment.read(7, 2 * len(batches[0]))
    assert just_two is not None
    assert [h.base_offset for h in headers_of(just_two.records)] == [6, 9]
    assert segment.read(15, 10_000) is None
    log.close()


def test_a_window_holding_one_whole_batch_reads_that_batch_alone(tmp_path: Path) -> None:
    """1 MiB batches fetched 1 MiB at a time (Kafka's max.partition.fetch.bytes): the
    window holds the first batch and a piece of the next; the batch is read alone, not
    the window and then a copy of its whole part."""
    log = Log.open(tmp_path / "t-0", config(index_interval_bytes=0))
    batches = [make_batch(500, value_size=2000, tag=str(i)) for i in range(3)]
    for batch in batches:
        log.append(batch)
    segment = log.active_segment
    window = len(batches[1]) + len(batches[2]) // 2

    tracemalloc.start()
    try:
        found = segment.read(500, window)
        _current, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert found is not None and found.position == len(batches[0])
    assert [h.base_offset for h in headers_of(found.records)] == [500]
    assert len(found.records) == len(batches[1])
    assert peak_bytes < 1.25 * len(batches[1])  # the window and its whole part: 2.5x
    assert segment.read(500, window, upper_bound_offset=700) == (len(batches[0]), b"")
    cut = len(batches[0]) + len(batches[1]) - 1  # the batch ends past max_position
    assert segment.read(500, window, max_position=cut) == (len(batches[0]), b"")
    assert segment.read(500, window // 2, min_one_batch=False) == (len(batches[0]), b"")
    alone = segment.read(500, window // 2)
    assert alone is not None and alone.records == found.records
    log.close()


def test_segment_read_stops_before_max_position_and_upper_bound(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    size = len(make_batch(2))
    for i in range(4):
        log.append(make_batch(2, tag=str(i)))
    segment = log.active_segment
    capped = segment.read(0, 10_000, max_position=2 * size)
    assert capped is not None
    assert [h.base_offset for h in headers_of(capped.records)] == [0, 2]
    bounded = segment.read(0, 10_000, upper_bound_offset=5)
    assert bounded is not None
    assert [h.last_offset for h in headers_of(bounded.records)] == [1, 3]
    assert segment.read(0, 10, min_one_batch=False) == (0, b"")
    log.close()


def test_find_offset_by_timestamp_looks_inside_compressed_batches(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", config(index_interval_bytes=0))
    for i in range(6):
        log.append(make_batch(5, start_ts=T0 + 100 * i, compression=CompressionType.GZIP))
    segment = log.active_segment
    assert segment.find_offset_by_timestamp(T0 + 203, 0) == (T0 + 203, 13)
    assert segment.find_offset_by_timestamp(T0 + 210, 0) == (T0 + 300, 15)
    assert segment.find_offset_by_timestamp(T0, 0) == (T0, 0)
    assert segment.find_offset_by_timestamp(T0, 7) == (T0 + 102, 7)
    assert segment.find_offset_by_timestamp(T0 + 505, 0) is None
    log.close()


def test_should_roll_when_full_old_or_the_offset_does_not_fit(tmp_path: Path) -> None:
    segment = LogSegment(
        tmp_path, 100, index_interval_bytes=4096, max_index_bytes=1024, active=True
    )
    policy = RollPolicy(segment_bytes=1000, segment_ms=60_000)

    def should_roll(incoming_bytes: int = 10, timestamp: int = T0, last_offset: int = 101) -> bool:
        return segment.should_roll(
            policy,
            incoming_bytes=incoming_bytes,
            incoming_max_timestamp=timestamp,
            incoming_last_offset=last_offset,
            now_ms=T0,
        )

    assert not should_roll(timestamp=T0 + 10**9)  # an empty segment never rolls by time
    assert should_roll(last_offset=100 + INT32_MAX + 1)
    assert not should_roll(last_offset=100 + INT32_MAX)
    batch = make_batch(1)
    segment.append([batch], [AppendedBatch(100, T0, len(batch))], len(batch))
    assert not should_roll()
    assert should_roll(incoming_bytes=1000 - len(batch) + 1)
    assert not should_roll(incoming_bytes=1000 - len(batch))
    assert not should_roll(timestamp=T0 + 60_000)
    assert should_roll(timestamp=T0 + 60_001)
    segment.close()


def test_an_offset_beyond_int32_of_the_base_is_refused(tmp_path: Path) -> None:
    segment = LogSegment(tmp_path, 0, index_interval_bytes=4096, max_index_bytes=1024, active=True)
    batch = make_batch(1)
    with pytest.raises(InvalidRecordError):
        segment.append([batch], [AppendedBatch(INT32_MAX + 1, T0, len(batch))], len(batch))
    assert segment.size == 0
    segment.close()


def test_recover_rebuilds_the_same_indexes_the_appends_made(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", config(index_interval_bytes=200), clock_ms=FakeClock())
    for i in range(40):
        log.append(make_batch(1 + i % 3, start_ts=T0 + (i * 37) % 500, tag=str(i)))
    segment = log.active_segment
    offsets = [segment.offset_index.entry(s) for s in range(segment.offset_index.entries)]
    times = [segment.time_index.entry(s) for s in range(segment.time_index.entries)]
    max_ts = (segment.max_timestamp_so_far, segment.offset_of_max_timestamp)
    end = segment.next_offset
    assert segment.recover() == 0
    assert [segment.offset_index.entry(s) for s in range(segment.offset_index.entries)] == offsets
    assert [segment.time_index.entry(s) for s in range(segment.time_index.entries)] == times
    assert (segment.max_timestamp_so_far, segment.offset_of_max_timestamp) == max_ts
    assert segment.next_offset == end
    log.close()


def test_recover_keeps_a_batch_whose_header_a_scan_chunk_cuts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment larger than a scan chunk (8 MiB) lost everything after a header the
    chunk's end cut in two."""
    log = Log.open(tmp_path / "t-0", config(), clock_ms=FakeClock())
    for i in range(6):
        log.append(make_batch(2, value_size=300, tag=str(i)))
    segment = log.active_segment
    size, end = segment.size, segment.next_offset
    monkeypatch.setattr(file_records, "SCAN_CHUNK_BYTES", len(make_batch(2, value_size=300)) + 30)
    assert segment.recover() == 0
    assert (segment.size, segment.next_offset) == (size, end)
    log.close()


def test_truncate_to_cuts_whole_batches_and_recomputes_the_max_timestamp(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", config(index_interval_bytes=0))
    for i, start in enumerate([T0 + 50, T0 + 10, T0 + 90, T0 + 20]):
        log.append(make_batch(2, start_ts=start, tag=str(i)))  # offsets 0-1, 2-3, 4-5, 6-7
    segment = log.active_segment
    size_of_two = 2 * len(make_batch(2, tag="0"))
    size_before = segment.size
    assert segment.truncate_to(5) == size_before - size_of_two  # offset 5 is inside 4-5
    assert segment.size == size_of_two
    assert segment.next_offset == 4
    assert (segment.max_timestamp_so_far, segment.offset_of_max_timestamp) == (T0 + 51, 1)
    assert all(segment.offset_index.entry(s).key < 4 for s in range(segment.offset_index.entries))
    assert segment.truncate_to(100) == 0
    log.close()
