"""What the follower applies where: one partition's answer of the default
``replica.fetch.max.bytes`` (a producer's 1 MiB batch) is appended on the event loop, as
the leader appends the producer's batch, not after a hop to a thread and back. And where
it starts over when it fell below the leader's log start on a tiered partition, and what
it makes of the tier's end its leader tells it."""

from __future__ import annotations

from pathlib import Path

from tests.storage.conftest import FakeClock
from tests.storage.tier.test_tier_state import idempotent_batch
from tests.storage.tier.tiering import TP, open_log, produce
from tests.storage.tier.uploads import tier_closed_segments
from tierlog.api.v1 import common_pb2
from tierlog.api.v1 import replication_service_pb2 as pb
from tierlog.replication.fetcher import FetchSettings
from tierlog.replication.follower import applies_without_waiting, apply_fetched
from tierlog.storage.cleaner import local_cleaning_floor
from tierlog.storage.log import UNKNOWN_TIERED_END_OFFSET, Log
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest_store import load_view

LEADER_EPOCH = 0


def _batch(base_offset: int, records: int) -> bytes:
    return build_batch(
        [SimpleRecord(value=bytes(1000), timestamp=1_000 + i) for i in range(records)],
        base_offset=base_offset,
        partition_leader_epoch=LEADER_EPOCH,
    )


def test_an_answer_of_replica_fetch_max_bytes_is_applied_on_the_loop(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.append_as_follower(_batch(0, 1))  # the log holds the epoch it follows
    batch = _batch(1, 1000)
    assert len(batch) <= FetchSettings().partition_max_bytes
    answer = pb.ReplicaFetchPartitionData(
        record_batches=batch, segment_base_offset=log.active_segment.base_offset
    )

    assert applies_without_waiting(log, answer, LEADER_EPOCH)


def test_a_follower_below_the_leaders_log_start_starts_over_from_the_tier_at_it(
    tmp_path: Path,
) -> None:
    """Away while retention moved the leader's log start past its end (OFFSET_OUT_OF_RANGE),
    on a partition whose leader's log reaches into the tier: the follower takes the
    leader's log start, below its own first offset (the leader's local log start), and
    the producers and leader epochs of the tier there, as Kafka's follower does; not a
    log start of its own at its first offset, which would make it, leading, refuse the
    offsets the tier holds."""
    leader = open_log(tmp_path / "leader", FakeClock())
    produce(leader, 3)
    leader.append(idempotent_batch(7, 0))
    leader.become_leader(2)
    produce(leader, 8, start=3)
    store = LocalDirectoryStore(tmp_path / "tier")
    tier_closed_segments(store, TP, leader)
    ends = [segment.end_offset for segment in load_view(store, TP).all_segments()]
    assert len(ends) >= 2
    local_start = ends[-1]  # the leader freed its local copies of what the tier holds
    leader_start = ends[0] - 1  # retention (or DeleteRecords) inside the first object
    answer = pb.ReplicaFetchPartitionData(
        topic=TP.topic,
        partition=TP.partition,
        error=common_pb2.Error(reason="OFFSET_OUT_OF_RANGE"),
        log_start_offset=leader_start,
        local_log_start_offset=local_start,
        log_end_offset=leader.log_end_offset,
        segment_base_offset=-1,
    )
    follower = open_log(tmp_path / "follower", FakeClock())
    produce(follower, 1)  # what it held before it went away: below the leader's start

    apply_fetched(follower, follower.log_end_offset, answer, tier=store)

    assert follower.log_start_offset == leader_start
    assert (follower.local_log_start_offset, follower.log_end_offset) == (local_start, local_start)
    assert [entry.epoch for entry in follower.leader_epoch_cache.entries] == [0, 2]
    assert 7 in follower.producer_state.producers


def test_a_follower_keeps_the_tiers_end_it_knew_while_a_new_leader_has_not_claimed_it(
    tmp_path: Path,
) -> None:
    """A leader that has not claimed the tier since its start says it does not know the
    tier's end (not 0): a follower that knew it keeps it, so its local cleaner rewrites
    no copy of a tiered segment; one that never knew it waits, cleaning nothing."""
    store = LocalDirectoryStore(tmp_path / "tier")
    follower = open_log(tmp_path / "follower", FakeClock())
    produce(follower, 12)
    end = follower.log_end_offset
    assert local_cleaning_floor(follower) == end  # after a start, nothing is known

    def told(tiered_end_offset: int) -> None:
        answer = pb.ReplicaFetchPartitionData(
            topic=TP.topic,
            partition=TP.partition,
            high_watermark=end,
            log_start_offset=0,
            local_log_start_offset=0,
            log_end_offset=end,
            tiered_end_offset=tiered_end_offset,
            segment_base_offset=-1,
        )
        apply_fetched(follower, end, answer, tier=store)

    told(UNKNOWN_TIERED_END_OFFSET)
    assert local_cleaning_floor(follower) == end
    told(24)  # the leader claimed the tier
    assert local_cleaning_floor(follower) == 24
    told(UNKNOWN_TIERED_END_OFFSET)  # a new leader, not claimed yet
    assert (follower.tiered_end_offset, local_cleaning_floor(follower)) == (24, 24)
