"""Replica directories compared with the storage engine's reader: a follower fed the
leader's reads (as ReplicaFetch will) is the same, and each way replicas can part (a
changed byte, a missing batch, another roll) is found at its first batch."""

from __future__ import annotations

from pathlib import Path

from tests.storage.conftest import T0, config, make_batch, make_records
from tests.support.replica_dirs import (
    ReplicaBatch,
    checkpointed_high_watermark,
    compare_replica_dirs,
    read_values,
    replica_batches,
)
from tierlog.storage.checkpoints import REPLICATION_OFFSET_CHECKPOINT, write_offset_checkpoint
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.topic_partition import TopicPartition

BATCHES, RECORDS_EACH = 10, 3  # offsets 0-29
# Three batches to a segment: segments at 0, 9, 18 and 27.
SEGMENTS = config(segment_bytes=3 * len(make_batch(RECORDS_EACH, tag="00")), index_interval_bytes=0)


def _leader(directory: Path) -> Log:
    log = Log.open(directory, SEGMENTS)
    for i in range(BATCHES):
        log.become_leader(1 + i // 4)  # a few epochs, as leadership moves
        log.append(make_batch(RECORDS_EACH, start_ts=T0 + i, tag=f"{i:02d}"))
    return log


def _follower(directory: Path, leader: Log, log_config: LogConfig = SEGMENTS) -> Log:
    """A replica fed the leader's batches in small fetches, as a follower is."""
    log = Log.open(directory, log_config)
    while log.log_end_offset < leader.log_end_offset:
        fetched = leader.read(log.log_end_offset, 200).records
        log.append_as_follower(fetched)
    return log


def _replicas(tmp_path: Path, follower_config: LogConfig = SEGMENTS) -> tuple[Path, Path]:
    leader = _leader(tmp_path / "broker-0" / "orders-0")
    follower = _follower(tmp_path / "broker-1" / "orders-0", leader, follower_config)
    leader.close()
    follower.close()
    return leader.directory, follower.directory


def _damage_batch_at(directory: Path, base_offset: int) -> ReplicaBatch:
    """Flip the last byte (a record's value) of the batch at ``base_offset``, in place."""
    batch = next(b for b in replica_batches(directory, 30) if b.header.base_offset == base_offset)
    with batch.segment.open("r+b") as file:
        file.seek(batch.position + len(batch.data) - 1)
        file.write(bytes([batch.data[-1] ^ 0xFF]))
    return batch


def test_a_follower_fed_the_leaders_batches_holds_the_same_files(tmp_path: Path) -> None:
    leader, follower = _replicas(tmp_path)
    assert len(list(leader.glob("*.log"))) == 4
    assert compare_replica_dirs([leader, follower], upto_offset=BATCHES * RECORDS_EACH) is None


def test_a_changed_byte_is_found_at_its_batch(tmp_path: Path) -> None:
    leader, follower = _replicas(tmp_path)
    victim = _damage_batch_at(follower, 12)

    difference = compare_replica_dirs([leader, follower, leader], upto_offset=30)
    assert difference is not None
    assert (difference.offset, difference.reason) == (12, "the batches' bytes differ")
    leaders, followers, _ = difference.batches
    assert leaders is not None and followers is not None
    assert (leaders.segment.name, followers.segment.name) == (f"{9:020d}.log",) * 2
    assert leaders.position == followers.position == victim.position
    assert "offsets 12-14" in str(difference)


def test_differences_at_or_past_the_offset_compared_up_to_are_not_looked_at(
    tmp_path: Path,
) -> None:
    leader, follower = _replicas(tmp_path)
    _damage_batch_at(follower, 12)
    assert compare_replica_dirs([leader, follower], upto_offset=12) is None
    assert compare_replica_dirs([leader, follower], upto_offset=13) is not None


def test_a_replica_missing_batches_is_found_at_the_first_it_lacks(tmp_path: Path) -> None:
    leader, follower = _replicas(tmp_path)
    truncated = Log.open(follower, SEGMENTS)
    truncated.truncate_to(21)
    truncated.close()

    assert compare_replica_dirs([leader, follower], upto_offset=21) is None
    difference = compare_replica_dirs([leader, follower], upto_offset=30)
    assert difference is not None
    assert (difference.offset, difference.reason) == (21, "a replica has no batch here")
    assert difference.batches[1] is None


def test_a_replica_that_rolled_elsewhere_is_found_at_the_first_batch_out_of_place(
    tmp_path: Path,
) -> None:
    """The same bytes in other segments: the files are not the same, and the design
    asks followers to roll where the leader rolled."""
    bigger_segments = config(segment_bytes=4 * len(make_batch(RECORDS_EACH, tag="00")))
    leader, follower = _replicas(tmp_path, bigger_segments)
    difference = compare_replica_dirs([leader, follower], upto_offset=30)
    assert difference is not None
    assert (difference.offset, difference.reason) == (9, "the batches are in different segments")


def test_values_are_read_back_with_their_offsets_below_the_bound(tmp_path: Path) -> None:
    leader, _ = _replicas(tmp_path)
    produced = [
        record.value.decode()
        for i in range(BATCHES)
        for record in make_records(RECORDS_EACH, tag=f"{i:02d}")
        if record.value is not None
    ]
    # 29 cuts the last batch in the middle: its last record is left out.
    assert read_values(leader, upto_offset=29) == list(enumerate(produced))[:29]


def test_the_checkpointed_high_watermark_is_read_per_partition(tmp_path: Path) -> None:
    write_offset_checkpoint(
        tmp_path / REPLICATION_OFFSET_CHECKPOINT,
        {TopicPartition("orders", 0): 30, TopicPartition("orders", 1): 7},
    )
    assert checkpointed_high_watermark(tmp_path, "orders", 0) == 30
    assert checkpointed_high_watermark(tmp_path, "orders", 1) == 7
    assert checkpointed_high_watermark(tmp_path, "orders", 2) == 0
    assert checkpointed_high_watermark(tmp_path / "never-started", "orders", 0) == 0
