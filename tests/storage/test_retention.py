"""Retention: Kafka's time, size and log-start-offset rules, two-phase deletion, and the
hooks tiered storage relies on (local budgets, "is this segment safely tiered?")."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from tests.storage.conftest import (
    T0,
    FakeClock,
    config,
    make_batch,
    read_all_records,
    records_of,
)
from tierlog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT, read_offset_checkpoint
from tierlog.storage.errors import OffsetMovedToTieredStorageError, OffsetOutOfRangeError
from tierlog.storage.log import Log
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.retention import RetentionBudget, RetentionReason, deletable_segments
from tierlog.storage.topic_partition import TopicPartition

HOUR_MS = 3_600_000


class Seg:
    """A stand-in segment for the pure rules: just the three facts they read."""

    def __init__(self, base_offset: int, size: int, largest_timestamp: int):
        self.base_offset, self.size, self.largest_timestamp = base_offset, size, largest_timestamp


def plan(
    segments: list[Seg],
    *,
    ms: int = -1,
    size: int = -1,
    start: int = 0,
    delete: bool = True,
    now: int = T0,
) -> tuple[int, str | None]:
    return deletable_segments(
        segments,
        RetentionBudget(ms, size),
        now_ms=now,
        log_start_offset=start,
        delete_policy=delete,
    )


# -- the rules ----------------------------------------------------------------------------


def test_time_rule_takes_the_oldest_segments_while_they_are_expired() -> None:
    segments = [Seg(0, 10, T0 - 5 * HOUR_MS), Seg(10, 10, T0 - 3 * HOUR_MS), Seg(20, 10, T0)]
    assert plan(segments, ms=4 * HOUR_MS) == (1, RetentionReason.TIME)
    assert plan(segments, ms=2 * HOUR_MS) == (2, RetentionReason.TIME)
    assert plan(segments, ms=-1) == (0, None)


def test_time_rule_never_makes_holes() -> None:
    segments = [Seg(0, 10, T0), Seg(10, 10, T0 - 9 * HOUR_MS), Seg(20, 10, T0)]
    assert plan(segments, ms=HOUR_MS) == (0, None)


def test_size_rule_keeps_the_log_just_within_retention_bytes() -> None:
    segments = [Seg(0, 100, T0), Seg(10, 100, T0), Seg(20, 100, T0), Seg(30, 50, T0)]
    # As Kafka: a segment goes only if the log is still at least retention.bytes without it.
    assert plan(segments, size=260) == (0, None)
    assert plan(segments, size=250) == (1, RetentionReason.SIZE)
    assert plan(segments, size=150) == (2, RetentionReason.SIZE)
    assert plan(segments, size=350) == (0, None)


def test_log_start_rule_takes_segments_wholly_below_it() -> None:
    segments = [Seg(0, 10, T0), Seg(10, 10, T0), Seg(20, 10, T0)]
    assert plan(segments, start=9) == (0, None)
    assert plan(segments, start=10) == (1, RetentionReason.LOG_START_OFFSET)
    assert plan(segments, start=25) == (2, RetentionReason.LOG_START_OFFSET)


def test_compact_only_topics_answer_to_the_log_start_rule_alone() -> None:
    segments = [Seg(0, 10, T0 - 9 * HOUR_MS), Seg(10, 10, T0)]
    assert plan(segments, ms=HOUR_MS, size=1, delete=False) == (0, None)
    assert plan(segments, ms=HOUR_MS, start=10, delete=False) == (
        1,
        RetentionReason.LOG_START_OFFSET,
    )


def test_an_empty_active_segment_is_never_counted() -> None:
    segments = [Seg(0, 10, T0 - 9 * HOUR_MS), Seg(10, 0, -1)]
    assert plan(segments, ms=HOUR_MS) == (1, RetentionReason.TIME)


def test_tiered_logs_only_lose_local_copies_that_are_in_the_tier() -> None:
    segments = [Seg(0, 10, T0 - 9 * HOUR_MS), Seg(10, 10, T0 - 9 * HOUR_MS), Seg(20, 10, T0)]
    tiered = {0}
    count, _ = deletable_segments(
        segments,
        RetentionBudget(HOUR_MS, -1),
        now_ms=T0,
        log_start_offset=0,
        delete_policy=True,
        is_tiered=lambda segment: segment.base_offset in tiered,
    )
    assert count == 1


def test_local_budgets_borrow_the_total_ones_when_minus_two() -> None:
    local_rules = (RetentionReason.LOCAL_TIME, RetentionReason.LOCAL_SIZE)
    both = config(retention_ms=5000, retention_bytes=900)
    assert RetentionBudget.local(both) == RetentionBudget(5000, 900, *local_rules)
    own = config(retention_ms=5000, local_retention_ms=100, local_retention_bytes=10)
    assert RetentionBudget.local(own) == RetentionBudget(100, 10, *local_rules)


# -- on a real log ------------------------------------------------------------------------


def _log(directory: Path, clock: FakeClock, **props: object) -> Log:
    settings = {"segment_bytes": 2000, "file_delete_delay_ms": 60_000, **props}
    return Log.open(directory, config(**settings), clock_ms=clock)


def _fill(log: Log, batches: int, *, start_ts: int) -> None:
    for i in range(batches):
        log.append(make_batch(3, start_ts=start_ts + i, value_size=200, tag=f"b{i}"))


def test_expired_segments_go_in_two_phases(log_dir: Path, clock: FakeClock) -> None:
    log = _log(log_dir, clock, retention_ms=HOUR_MS)
    _fill(log, 12, start_ts=T0)
    old_segments = log.segments[:-1]
    assert len(old_segments) >= 3
    clock.advance(2 * HOUR_MS)
    log.append(make_batch(1, start_ts=clock.now_ms, tag="fresh"))

    retired = log.delete_old_segments()

    assert retired == len(old_segments)
    assert log.log_start_offset == log.segments[0].base_offset
    names = {path.name for path in log_dir.iterdir()}
    for segment in old_segments:
        assert f"{segment.base_offset:020d}.log.deleted" in names  # phase one: renamed
        assert f"{segment.base_offset:020d}.log" not in names
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)

    assert log.delete_retired_files(clock.now_ms + 59_999) == 0
    assert log.delete_retired_files(clock.now_ms + 60_000) == len(old_segments)
    assert not any(path.name.endswith(".deleted") for path in log_dir.iterdir())  # phase two
    remaining = read_all_records(log)
    assert remaining[0].offset == log.log_start_offset
    assert remaining[-1].key == b"fresh-0"
    log.close()


def test_when_everything_expired_a_new_empty_segment_keeps_the_log_end(
    log_dir: Path, clock: FakeClock
) -> None:
    log = _log(log_dir, clock, retention_ms=HOUR_MS)
    _fill(log, 6, start_ts=T0)
    end = log.log_end_offset
    clock.advance(2 * HOUR_MS)
    log.delete_old_segments()
    assert [segment.base_offset for segment in log.segments] == [end]
    assert log.log_start_offset == log.log_end_offset == end
    info = log.append(make_batch(1, start_ts=clock.now_ms))
    assert info.first_offset == end
    log.close()


def test_segments_without_timestamps_age_by_modification_time(
    log_dir: Path, clock: FakeClock
) -> None:
    log = _log(log_dir, clock, retention_ms=HOUR_MS)
    for i in range(10):
        untimed = [SimpleRecord(f"n{i}-{j}".encode(), b"x" * 200, -1) for j in range(3)]
        log.append(build_batch(untimed))
    first = log.segments[0]
    assert first.max_timestamp_so_far == -1
    old = (clock.now_ms - 2 * HOUR_MS) / 1000
    os.utime(first.log.path, (old, old))
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == log.segments[0].base_offset > 0
    log.close()


def test_retention_bytes_bounds_the_whole_log(log_dir: Path, clock: FakeClock) -> None:
    log = _log(log_dir, clock, retention_bytes=5000)
    _fill(log, 40, start_ts=T0)
    log.delete_old_segments()
    assert log.size_bytes <= 5000 + 2000  # within budget but for the segment that tips it
    assert sum(segment.size for segment in log.segments[1:]) <= 5000
    log.close()


def test_delete_records_then_retention_drops_wholly_covered_segments(
    log_dir: Path, clock: FakeClock
) -> None:
    log = _log(log_dir, clock)
    _fill(log, 12, start_ts=T0)
    second = log.segments[1].base_offset
    log.increment_log_start_offset(second + 1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(second, 100)  # below the log start already, before any file is touched
    assert log.delete_old_segments() == 1
    assert log.segments[0].base_offset == second
    assert read_all_records(log)[0].offset >= second
    log.close()


def test_a_tiered_log_keeps_local_copies_the_tier_has_not_confirmed(
    log_dir: Path, clock: FakeClock
) -> None:
    log = _log(log_dir, clock, remote_storage_enable="true", local_retention_ms=HOUR_MS)
    _fill(log, 12, start_ts=T0)
    clock.advance(2 * HOUR_MS)
    log.append(make_batch(1, start_ts=clock.now_ms, tag="fresh"))
    assert log.delete_old_segments() == 0  # no tier to ask: nothing goes
    first_two = {segment.base_offset for segment in log.segments[:2]}
    retired = log.delete_old_segments(is_tiered=lambda segment: segment.base_offset in first_two)
    assert retired == 2
    assert log.log_start_offset == 0  # the data lives on in the tier
    assert log.local_log_start_offset == log.segments[0].base_offset
    with pytest.raises(OffsetMovedToTieredStorageError):
        log.read(0, 1000)
    log.close()


def test_readers_racing_deletion_get_data_or_a_clean_error(log_dir: Path, clock: FakeClock) -> None:
    log = _log(log_dir, clock, retention_bytes=4000, file_delete_delay_ms=0)
    _fill(log, 10, start_ts=T0)
    stop = threading.Event()
    problems: list[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            offset = log.log_start_offset
            try:
                records = records_of(log.read(offset, 4000).records)
            except OffsetOutOfRangeError:
                continue
            except BaseException as error:  # anything else is a bug
                problems.append(error)
                return
            if records and records[0].offset > offset + 3:
                problems.append(AssertionError(f"read at {offset} began at {records[0].offset}"))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    for i in range(120):
        log.append(make_batch(3, start_ts=T0 + i, value_size=200, tag=f"c{i}"))
        log.delete_old_segments()
        log.delete_retired_files()
    stop.set()
    for thread in threads:
        thread.join()
    assert problems == []
    # Kept everything it should: every offset from the log start to the end, in order.
    kept = [record.offset for record in read_all_records(log)]
    assert kept == list(range(log.log_start_offset, log.log_end_offset))
    # Dropped everything it should: one more segment would put the log under budget.
    assert sum(segment.size for segment in log.segments[1:]) < 4000 <= log.size_bytes
    log.close()


def test_a_crash_between_the_two_phases_recovers(log_dir: Path, clock: FakeClock) -> None:
    log = _log(log_dir, clock, retention_ms=HOUR_MS)
    _fill(log, 12, start_ts=T0)
    clock.advance(2 * HOUR_MS)
    log.append(make_batch(1, start_ts=clock.now_ms, tag="fresh"))
    log.delete_old_segments()
    start = log.log_start_offset
    assert any(path.name.endswith(".deleted") for path in log_dir.iterdir())
    # crash: the Log is dropped without closing; the .deleted files are still there
    before = read_all_records(log)
    reopened = Log.open(log_dir, log.config, log_start_offset=start, clock_ms=clock)
    assert not any(path.name.endswith(".deleted") for path in log_dir.iterdir())
    assert reopened.log_start_offset == start
    assert read_all_records(reopened) == before
    reopened.close()


def test_the_manager_runs_retention_and_checkpoints_the_log_start(tmp_path: Path) -> None:
    retention = config(retention_bytes=3000, segment_bytes=2000, file_delete_delay_ms=0)
    manager = LogManager(
        LogManagerConfig(log_dirs=(tmp_path,), retention_check_interval_ms=10**9),
        topic_config=lambda _topic: retention,
    )
    manager.startup()
    tp = TopicPartition("events", 0)
    partition_log = manager.get_or_create_log(tp)
    for i in range(20):
        manager.append(tp, make_batch(3, start_ts=T0 + i, value_size=200, tag=f"m{i}"))
    assert manager.run_retention_pass() > 0
    start = partition_log.log_start_offset
    assert start > 0
    assert read_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {tp: start}
    manager.shutdown()


def test_a_tiered_log_says_local_retention_freed_its_segments(
    log_dir: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The log line names the budget that applied: local.retention.*, not retention.*."""
    log = _log(log_dir, clock, remote_storage_enable=True, local_retention_bytes=0)
    for i in range(8):
        log.append(make_batch(3, start_ts=clock.now_ms, value_size=200, tag=f"b{i}"))
    with caplog.at_level(logging.INFO, logger="tierlog.storage.log"):
        retired = log.delete_old_segments(is_tiered=lambda _segment: True)
    assert retired > 0
    (line,) = [r.getMessage() for r in caplog.records if "retiring" in r.getMessage()]
    assert line.endswith("(local.retention.bytes)")
    log.close()


def test_turning_tiering_off_starts_the_log_at_its_first_local_offset(
    log_dir: Path, clock: FakeClock
) -> None:
    """KIP-950: the tier is on its way out, so what only it held is out of range at once
    (and after a restart, which opens the log under the new config)."""
    tiered = {"remote_storage_enable": "true", "local_retention_bytes": 0}
    log = _log(log_dir, clock, **tiered)
    _fill(log, 12, start_ts=clock.now_ms)
    assert log.delete_old_segments(is_tiered=lambda _segment: True) > 0
    log.append(make_batch(3, start_ts=clock.now_ms, tag="local"))
    local_start = log.segments[0].base_offset
    assert log.log_start_offset == 0 < local_start

    turned_off = config(
        segment_bytes=2000, remote_storage_enable="false", remote_log_delete_on_disable="true"
    )
    log.update_config(turned_off)
    assert log.log_start_offset == local_start
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)
    assert log.read(local_start, 1000).records
    log.close()

    reopened = Log.open(log_dir, turned_off, log_start_offset=0, clock_ms=clock)
    assert reopened.log_start_offset == local_start
    reopened.close()


def test_a_read_only_tier_frees_nothing_locally_and_total_retention_moves_the_log_start(
    log_dir: Path, clock: FakeClock
) -> None:
    """remote.log.copy.disable: no local segment waits for an upload that will not come,
    nor goes under the local budget; retention.* applies as to a log without a tier."""
    log = _log(
        log_dir,
        clock,
        remote_storage_enable="true",
        remote_log_copy_disable="true",
        retention_bytes=4000,
        local_retention_bytes=4000,
    )
    _fill(log, 12, start_ts=clock.now_ms)
    assert log.delete_old_segments(is_tiered=lambda _segment: False) > 0
    assert log.log_start_offset == log.segments[0].base_offset > 0
    log.close()
