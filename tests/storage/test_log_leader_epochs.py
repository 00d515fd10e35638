"""A log keeps its leader-epoch cache in step with its offsets: appends are stamped with
the epoch that leads, and every cut of the log (truncation, a new start, a recovery)
is a cut of the epochs too, as Kafka's ``UnifiedLog`` does."""

from __future__ import annotations

from pathlib import Path

from tests.storage.conftest import config, headers_of, make_batch, read_all_bytes
from tierlog.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)
from tierlog.storage.log import Log

CONFIG = config(segment_bytes=1_000)


def _epochs(log: Log) -> list[tuple[int, int]]:
    on_disk = read_epoch_checkpoint(log.directory / LEADER_EPOCH_CHECKPOINT)
    assert on_disk == [tuple(entry) for entry in log.leader_epoch_cache.entries]
    return on_disk


def _append(log: Log, batches: int) -> None:
    for _ in range(batches):
        log.append(make_batch(3))


def test_each_leader_stamps_its_batches_and_the_checkpoint_says_where_it_began(
    tmp_path: Path,
) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    _append(log, 2)
    log.become_leader(4)
    _append(log, 1)
    log.become_leader(4)  # the same epoch again: nothing new begins
    _append(log, 1)

    assert _epochs(log) == [(0, 0), (4, 6)]
    epochs = [(h.base_offset, h.partition_leader_epoch) for h in headers_of(read_all_bytes(log))]
    assert epochs == [(0, 0), (3, 0), (6, 4), (9, 4)]
    log.close()

    reopened = Log.open(tmp_path / "t-0", CONFIG, clean_shutdown=True, recovery_point=12)
    assert reopened.leader_epoch == 4  # appends after a restart keep the latest epoch
    _append(reopened, 1)
    assert headers_of(read_all_bytes(reopened))[-1].partition_leader_epoch == 4
    reopened.close()


def test_truncation_forgets_the_epochs_that_began_past_the_cut(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    _append(log, 2)
    log.become_leader(1)
    _append(log, 2)  # epoch 1 from 6
    log.become_leader(2)
    _append(log, 1)  # epoch 2 from 12

    log.truncate_to(9)
    assert _epochs(log) == [(0, 0), (1, 6)]
    log.truncate_to(6)
    assert _epochs(log) == [(0, 0)]
    log.truncate_fully_and_start_at(40)
    assert _epochs(log) == []
    log.close()


def test_a_truncation_at_the_end_forgets_an_epoch_that_wrote_nothing(tmp_path: Path) -> None:
    """A deposed leader that began an epoch and appended nothing in it: the follower it
    becomes is told its log diverged where that epoch began, at its end; the cut there
    must drop the epoch, or every fetch is told the same again (the fault run found it)."""
    log = Log.open(tmp_path / "t-0", CONFIG)
    _append(log, 2)
    log.become_leader(1)  # epoch 1 from 6, nothing written in it
    assert _epochs(log) == [(0, 0), (1, 6)]
    log.truncate_to(6)
    assert _epochs(log) == [(0, 0)]
    assert log.log_end_offset == 6
    log.close()


def test_an_epoch_written_ahead_of_batches_a_crash_lost_is_dropped_at_open(
    tmp_path: Path,
) -> None:
    """The epoch entry goes to disk before the batches it stamps; a crash between the two
    leaves an entry at or past the log end, which the next open drops."""
    log = Log.open(tmp_path / "t-0", CONFIG)
    _append(log, 2)
    log.close()
    write_epoch_checkpoint(tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT, [(0, 0), (3, 6), (5, 9)])

    reopened = Log.open(tmp_path / "t-0", CONFIG, clean_shutdown=True, recovery_point=6)
    assert _epochs(reopened) == [(0, 0)]
    assert reopened.leader_epoch == 0
    reopened.close()


def test_a_later_log_start_moves_the_first_epoch_up_to_it(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    _append(log, 2)
    log.become_leader(1)
    _append(log, 2)  # epoch 1 from 6
    log.become_leader(2)
    _append(log, 2)  # epoch 2 from 12

    log.increment_log_start_offset(8)  # DeleteRecords
    assert _epochs(log) == [(1, 8), (2, 12)]
    log.increment_log_start_offset(13)
    assert _epochs(log) == [(2, 13)]
    log.close()

    reopened = Log.open(tmp_path / "t-0", CONFIG, log_start_offset=13, recovery_point=18)
    assert _epochs(reopened) == [(2, 13)]
    reopened.close()
