"""The local log's own contract: segments, roll, read and truncate, with no log start,
epochs or producers above it (those are the unified log's, tests/storage/test_log.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import T0, FakeClock, config, make_records, segment_files
from tierlog.storage.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from tierlog.storage.local_log import LocalLog
from tierlog.storage.records import build_batch, iter_batches
from tierlog.storage.recovery import load_segments
from tierlog.storage.segment import AppendedBatch


def open_local_log(directory: Path, clock: FakeClock, **props: object) -> LocalLog:
    directory.mkdir(parents=True, exist_ok=True)
    log_config = config(**props)
    loaded = load_segments(
        directory, log_config, log_start_offset=0, recovery_point=0, clean_shutdown=False
    )
    return LocalLog(
        directory,
        log_config,
        loaded.segments,
        recovery_point=loaded.recovery_point,
        clock_ms=clock,
    )


def append(local: LocalLog, count: int) -> bytes:
    """One batch of ``count`` records at the log end, offsets already assigned."""
    first_offset = local.log_end_offset
    batch = build_batch(make_records(count), base_offset=first_offset)
    appended = AppendedBatch(first_offset + count - 1, T0 + count - 1, len(batch))
    local.append([batch], [appended], first_offset)
    return batch


def base_offsets(buf: bytes) -> list[int]:
    return [header.base_offset for header in iter_batches(memoryview(buf))]


def test_appends_are_read_back_whole_from_the_batch_holding_the_offset(tmp_path: Path) -> None:
    local = open_local_log(tmp_path / "t-0", FakeClock())
    first, second = append(local, 3), append(local, 2)

    assert local.log_end_offset == 5
    assert local.unflushed_messages == 5
    assert local.read(4, 1 << 20).records == second
    assert local.read(0, 1 << 20).records == first + second
    assert local.read(5, 1 << 20).records == b""  # the log end: nothing yet
    with pytest.raises(OffsetOutOfRangeError):
        local.read(6, 1 << 20)


def test_roll_starts_a_segment_at_the_log_end_and_an_empty_one_stays(tmp_path: Path) -> None:
    local = open_local_log(tmp_path / "t-0", FakeClock())
    empty = local.active_segment
    assert local.roll() is empty  # nothing written: no new segment

    append(local, 3)
    rolled = local.roll()

    assert [segment.base_offset for segment in local.segments] == [0, 3]
    assert rolled is local.active_segment and rolled.size == 0
    append(local, 2)
    found = local.read(3, 1 << 20)
    assert (base_offsets(found.records), found.segment_base_offset) == ([3], 3)


def test_should_roll_follows_segment_bytes(tmp_path: Path) -> None:
    local = open_local_log(tmp_path / "t-0", FakeClock(), segment_bytes=1024)
    append(local, 1)
    small = [AppendedBatch(1, T0, 10)]
    large = [AppendedBatch(1, T0, 1024)]

    assert not local.should_roll(small, T0, T0)
    assert local.should_roll(large, T0, T0)


def test_truncate_cuts_whole_batches_and_deletes_later_segments(tmp_path: Path) -> None:
    local = open_local_log(tmp_path / "t-0", FakeClock())
    first = append(local, 3)
    local.roll()
    append(local, 2)
    local.mark_flushed(local.log_end_offset, local.unflushed_messages)

    with local.truncating():
        local.truncate_to(3)

    assert local.log_end_offset == 3
    assert local.recovery_point == 3
    assert [segment.base_offset for segment in local.segments] == [0]
    assert not any(
        name.startswith("00000000000000000003") for name in segment_files(local.directory)
    )
    assert local.read(0, 1 << 20).records == first


def test_truncate_fully_leaves_one_empty_segment_at_the_new_start(tmp_path: Path) -> None:
    local = open_local_log(tmp_path / "t-0", FakeClock())
    append(local, 3)

    with local.truncating():
        local.truncate_fully_and_start_at(50)

    assert [segment.base_offset for segment in local.segments] == [50]
    assert (local.log_end_offset, local.recovery_point, local.unflushed_messages) == (50, 50, 0)
    with pytest.raises(OffsetOutOfRangeError):
        local.read(0, 1 << 20)  # below its first segment: a local log has nothing there


def test_retired_segments_keep_their_files_until_the_delete_delay(tmp_path: Path) -> None:
    clock = FakeClock()
    local = open_local_log(tmp_path / "t-0", clock, file_delete_delay_ms=1000)
    append(local, 3)
    doomed = local.segments[0]
    local.roll()

    with local.lock:
        local.retire([doomed], clock())

    assert local.segments[0].base_offset == 3
    assert any(name.endswith(".deleted") for name in segment_files(local.directory))
    assert local.delete_retired_files(clock() + 999) == 0
    assert local.delete_retired_files(clock() + 1000) == 1
    assert not any(name.endswith(".deleted") for name in segment_files(local.directory))


def test_reads_of_a_deleted_log_are_refused(tmp_path: Path) -> None:
    local = open_local_log(tmp_path / "t-0", FakeClock())
    append(local, 1)
    local.deleted = True

    with pytest.raises(UnknownTopicOrPartitionError):
        local.read(0, 1 << 20)
