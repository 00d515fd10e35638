"""Which log the cleaner takes next, its checkpoint, pauses, and the cleaner threads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.storage.compaction import compacted, keyed_batch, live_values, records
from tests.storage.conftest import T0, FakeClock
from tierlog.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT, read_offset_checkpoint
from tierlog.storage.cleaner import Cleaner
from tierlog.storage.cleaner_manager import (
    CleanerConfig,
    LogCleaner,
    LogCleanerManager,
    cleanable_offsets,
)
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.log import Log
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.topic_partition import TopicPartition

A, B, C = TopicPartition("a", 0), TopicPartition("b", 0), TopicPartition("c", 0)


def dirty_log(
    directory: Path,
    clock: FakeClock,
    *,
    rounds: int,
    keys: int = 10,
    timestamp: int = T0,
    log_config: LogConfig | None = None,
) -> Log:
    """``rounds`` overwrites of ``keys`` keys, one segment each, and an empty active one."""
    log = Log.open(directory, log_config or compacted(), clock_ms=clock)
    for round_number in range(rounds):
        pairs = [(b"k%d" % key, b"v%d" % round_number) for key in range(keys)]
        log.append(keyed_batch(pairs, timestamp=timestamp))
        log.roll()
    return log


class Partitions:
    """The ``PartitionLogs`` a LogManager would give, for a hand-made set of logs."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.logs: dict[TopicPartition, Log] = {}

    def __call__(self) -> list[tuple[TopicPartition, Log, Path]]:
        return [(tp, log, self.log_dir) for tp, log in self.logs.items()]


# -- the cleanable range ----------------------------------------------------------------


def test_the_dirty_range_starts_at_the_checkpoint_and_stops_at_the_active_segment(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = dirty_log(tmp_path / "a-0", clock, rounds=3)
    assert cleanable_offsets(log, None, clock()) == (0, 30, False)
    assert cleanable_offsets(log, 10, clock()) == (10, 30, False)
    # A checkpoint past the log's end (it was truncated) starts over at the log start.
    assert cleanable_offsets(log, 99, clock())[0] == 0
    log.increment_log_start_offset(5)
    assert cleanable_offsets(log, 2, clock())[0] == 5


def test_min_compaction_lag_keeps_young_segments_out(tmp_path: Path, clock: FakeClock) -> None:
    log = Log.open(tmp_path / "a-0", compacted(min_compaction_lag_ms=1000), clock_ms=clock)
    log.append(keyed_batch([(b"k", b"old")], timestamp=T0 - 5000))
    log.roll()
    log.append(keyed_batch([(b"k", b"young")], timestamp=T0 - 10))
    log.roll()
    assert cleanable_offsets(log, None, clock()) == (0, 1, False)
    clock.advance(1000)
    assert cleanable_offsets(log, None, clock()) == (0, 2, False)


def test_max_compaction_lag_makes_a_log_due_whatever_its_ratio(
    tmp_path: Path, clock: FakeClock
) -> None:
    log_config = compacted(max_compaction_lag_ms=60_000)
    partitions = Partitions(tmp_path)
    log = partitions.logs[A] = dirty_log(tmp_path / "a-0", clock, rounds=3, log_config=log_config)
    manager = LogCleanerManager([tmp_path], partitions)
    manager.load_checkpoints()
    first = manager.grab_filthiest_log()
    assert first is not None and not first.needs_compaction_now
    result = Cleaner(1 << 20).clean(log, 0, first.first_uncleanable_offset)
    manager.done_cleaning(first, result.end_offset)
    log.append(keyed_batch([(b"k0", b"late")]))
    log.roll()
    assert manager.grab_filthiest_log() is None  # 1 dirty batch of 11: far below 0.5
    clock.advance(60_001)
    due = manager.grab_filthiest_log()
    assert due is not None and due.needs_compaction_now and due.cleanable_ratio < 0.5


# -- choosing the filthiest log ---------------------------------------------------------


def test_the_log_with_the_highest_dirty_ratio_above_its_minimum_goes_first(
    tmp_path: Path, clock: FakeClock
) -> None:
    partitions = Partitions(tmp_path)
    partitions.logs[A] = dirty_log(tmp_path / "a-0", clock, rounds=4)
    partitions.logs[B] = dirty_log(tmp_path / "b-0", clock, rounds=4)
    partitions.logs[C] = Log.open(tmp_path / "c-0", LogConfig(), clock_ms=clock)  # not compacted
    manager = LogCleanerManager([tmp_path], partitions)
    manager.load_checkpoints()
    cleaner = Cleaner(1 << 20)
    # Clean A fully, then make it a little dirty again: B (all dirty) is filthier.
    first = manager.grab_filthiest_log()
    assert first is not None and first.cleanable_ratio == 1.0
    result = cleaner.clean(first.log, first.first_dirty_offset, first.first_uncleanable_offset)
    manager.done_cleaning(first, result.end_offset)
    other = B if first.tp == A else A
    partitions.logs[first.tp].append(keyed_batch([(b"k0", b"again")]))
    partitions.logs[first.tp].roll()
    second = manager.grab_filthiest_log()
    assert second is not None and second.tp == other
    # While B is in progress nothing else qualifies: A's ratio is below 0.5.
    again = next(each for each in manager.cleanable_logs() if each.tp == first.tp)
    assert 0 < again.cleanable_ratio < 0.5
    assert manager.grab_filthiest_log() is None
    manager.done_cleaning(second, None)


def test_progress_is_kept_in_the_cleaner_offset_checkpoint(
    tmp_path: Path, clock: FakeClock
) -> None:
    partitions = Partitions(tmp_path)
    partitions.logs[A] = dirty_log(tmp_path / "a-0", clock, rounds=3)
    cleaner = LogCleaner(CleanerConfig(enable=False), [tmp_path], partitions)
    cleaner.startup()
    assert cleaner.clean_filthiest_log(cleaner.new_cleaner())
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    assert path.read_text() == "0\n1\na 0 30\n"
    assert read_offset_checkpoint(path) == {A: 30}
    assert not cleaner.clean_filthiest_log(cleaner.new_cleaner())  # nothing dirty is left
    # A new cleaner (a restart) starts from the checkpoint.
    again = LogCleaner(CleanerConfig(enable=False), [tmp_path], partitions)
    again.startup()
    assert again.manager.checkpoint(A, tmp_path) == 30


def test_abort_and_pause_stops_a_round_and_keeps_the_log_out_until_resumed(
    tmp_path: Path, clock: FakeClock
) -> None:
    partitions = Partitions(tmp_path)
    partitions.logs[A] = dirty_log(tmp_path / "a-0", clock, rounds=3)
    cleaner = LogCleaner(CleanerConfig(enable=False), [tmp_path], partitions)
    cleaner.startup()
    started, results = threading.Event(), []

    class SlowCleaner(Cleaner):
        def clean(self, log: Log, first: int, stop: int, **kwargs: object) -> object:  # type: ignore[override]
            should_abort = kwargs["should_abort"]
            started.set()
            while not should_abort():  # type: ignore[operator]
                time.sleep(0.001)
            return super().clean(log, first, stop, should_abort=should_abort)  # type: ignore[arg-type]

    thread = threading.Thread(
        target=lambda: results.append(cleaner.clean_filthiest_log(SlowCleaner(1 << 20)))
    )
    thread.start()
    assert started.wait(10)
    cleaner.abort_and_pause(A)  # returns once the round has stopped
    thread.join()
    assert results == [False]
    assert cleaner.manager.checkpoint(A, tmp_path) is None
    assert cleaner.manager.grab_filthiest_log() is None  # paused
    cleaner.resume(A)
    assert cleaner.clean_filthiest_log(cleaner.new_cleaner())


def test_cleaner_configs_use_kafka_names_and_split_the_buffer_between_threads() -> None:
    config = CleanerConfig.from_properties(
        {"log.cleaner.threads": "2", "log.cleaner.dedupe.buffer.size": str(64 << 20)}
    )
    assert config.dedupe_buffer_per_thread == 32 << 20
    with pytest.raises(InvalidConfigError):
        CleanerConfig.from_properties({"log.cleaner.nope": "1"})
    with pytest.raises(InvalidConfigError):
        CleanerConfig(dedupe_buffer_size=1024)


def test_the_cleaner_throttle_holds_a_rounds_reads_and_writes_to_its_rate(
    tmp_path: Path, clock: FakeClock
) -> None:
    """log.cleaner.io.max.bytes.per.second: the bytes a round maps, reads and writes take
    at least their excess over one second's burst at that rate (unthrottled, this round
    takes milliseconds)."""
    rate = 12_000
    partitions = Partitions(tmp_path)
    partitions.logs[A] = dirty_log(tmp_path / "a-0", clock, rounds=6, keys=200)
    props = {"log.cleaner.enable": "false", "log.cleaner.io.max.bytes.per.second": str(rate)}
    cleaner = LogCleaner(CleanerConfig.from_properties(props), [tmp_path], partitions)
    cleaner.startup()

    started = time.monotonic()
    assert cleaner.clean_filthiest_log(cleaner.new_cleaner())
    elapsed_s = time.monotonic() - started
    stats = cleaner.last_stats
    assert stats is not None
    moved = stats.map_bytes_read + stats.bytes_read + stats.bytes_written
    assert moved > 2 * rate
    assert elapsed_s >= (moved - rate) / rate


def test_the_cleaner_throttle_is_off_by_default_and_refuses_no_rate() -> None:
    assert CleanerConfig().throttle() is None
    kafka_default = {"log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308"}
    assert CleanerConfig.from_properties(kafka_default).throttle() is None
    for rate in ("0", "-5", "nan", "fast"):
        with pytest.raises(InvalidConfigError, match=r"io\.max\.bytes\.per\.second"):
            CleanerConfig.from_properties({"log.cleaner.io.max.bytes.per.second": rate})


# -- the threads, inside the log manager ------------------------------------------------


def test_the_log_manager_runs_cleaner_threads_that_compact_in_the_background(
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "data"
    manager = LogManager(
        LogManagerConfig(
            log_dirs=(log_dir,),
            # Rounds race the appends: any dirty part is worth a round, or the last one
            # could be left below the default ratio of 0.5 by an earlier round.
            default_log_config=compacted(min_cleanable_dirty_ratio=0.01),
            cleaner=CleanerConfig(threads=2, backoff_ms=10, dedupe_buffer_size=1 << 20),
        )
    )
    manager.startup()
    try:
        log = manager.get_or_create_log(A)
        for round_number in range(5):
            log.append(keyed_batch([(b"k%d" % k, b"v%d" % round_number) for k in range(10)]))
            log.roll()
        expected = live_values(records(log))
        deadline = time.monotonic() + 20
        while len(records(log)) > 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(records(log)) == 10
        assert live_values(records(log)) == expected
        manager.delete_log(A)  # pauses the cleaner for it, and forgets its checkpoint
    finally:
        manager.shutdown()
    assert read_offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT) == {}
