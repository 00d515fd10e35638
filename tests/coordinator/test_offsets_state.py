"""The offsets a ``__consumer_offsets`` partition holds, replayed from its records: the
latest commit per key, tombstones delete, and the log's order wins over the order of
acknowledgements."""

from __future__ import annotations

from tierlog.coordinator.classic_group_records import GroupMetadataKey
from tierlog.coordinator.consumer_group_records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
)
from tierlog.coordinator.group_records import CoordinatorRecord
from tierlog.coordinator.offset_records import OffsetCommitKey, OffsetCommitValue
from tierlog.coordinator.offsets_state import OffsetsState
from tierlog.storage.topic_partition import TopicPartition

TP0, TP1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def commit(group: str, tp: TopicPartition, offset: int, at_ms: int = 0) -> CoordinatorRecord:
    key = OffsetCommitKey(group, tp.topic, tp.partition)
    return CoordinatorRecord(key, OffsetCommitValue(offset, at_ms, f"m{offset}", 7))


def tombstone(group: str, tp: TopicPartition) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group, tp.topic, tp.partition), None)


def test_the_latest_commit_per_key_wins_and_a_tombstone_deletes() -> None:
    state = OffsetsState()
    for log_offset, record in enumerate(
        [commit("g", TP0, 5), commit("g", TP1, 9), commit("g", TP0, 6), tombstone("g", TP1)]
    ):
        state.replay(record, log_offset)
    offsets = state.offsets("g")
    assert list(offsets) == [TP0]
    assert (offsets[TP0].offset, offsets[TP0].metadata, offsets[TP0].leader_epoch) == (6, "m6", 7)
    assert offsets[TP0].log_offset == 2
    state.replay(tombstone("g", TP0), 4)
    assert state.groups() == [] and not state.has_group("g")


def test_the_groups_tombstones_reached_are_told_once() -> None:
    """Even a tombstone of an offset the log no longer holds (compaction removed the
    commit): the bucket may still keep that group's copy."""
    state = OffsetsState()
    for log_offset, record in enumerate(
        [commit("kept", TP0, 5), tombstone("gone", TP0), commit("back", TP1, 2)]
    ):
        state.replay(record, log_offset)
    state.replay(tombstone("back", TP1), 3)
    assert state.take_deleted_groups() == {"gone", "back"}
    assert state.take_deleted_groups() == set()


def test_an_acknowledgement_older_in_the_log_changes_nothing() -> None:
    """Two commits of a key in flight: the later one (offset 11 in the log) is answered
    first; the earlier one (offset 10) must not win, nor bring back a deleted key."""
    state = OffsetsState()
    state.replay(commit("g", TP0, 8), 11)
    state.replay(commit("g", TP0, 3), 10)
    assert state.offsets("g")[TP0].offset == 8
    state.replay(tombstone("g", TP0), 12)
    state.replay(commit("g", TP0, 9), 11)
    assert state.offsets("g") == {}


def test_records_of_membership_are_skipped() -> None:
    state = OffsetsState()
    state.replay(CoordinatorRecord(GroupMetadataKey("g"), None), 0)
    assert state.groups() == []


def test_a_pending_commit_makes_the_group_known_and_the_partition_unstable() -> None:
    state = OffsetsState()
    state.begin_commit("g", [TP0])
    state.begin_commit("g", [TP0])
    assert state.groups() == ["g"] and state.is_pending("g", TP0)
    state.end_commit("g", [TP0])
    assert state.is_pending("g", TP0)
    state.end_commit("g", [TP0])
    assert not state.is_pending("g", TP0) and state.groups() == []


def test_offsets_expire_on_their_own_commit_time() -> None:
    state = OffsetsState()
    state.replay(commit("old", TP0, 1, at_ms=1_000), 0)
    state.replay(commit("mixed", TP0, 1, at_ms=1_000), 1)
    state.replay(commit("mixed", TP1, 1, at_ms=5_000), 2)
    assert state.expired(now_ms=4_000, retention_ms=3_000) == {"old": [TP0], "mixed": [TP0]}
    assert state.expired(now_ms=3_999, retention_ms=3_000) == {}
    state.begin_commit("old", [TP0])  # a commit on the way is not expired under it
    assert state.expired(now_ms=4_000, retention_ms=3_000) == {"mixed": [TP0]}


def test_a_group_with_members_keeps_its_offsets_and_an_empty_one_expires_them() -> None:
    state = OffsetsState()
    state.replay(commit("g", TP0, 1, at_ms=1_000), 0)
    member = ConsumerGroupMemberMetadataKey("g", "m1")
    subscription = ConsumerGroupMemberMetadataValue("client", "/127.0.0.1", ("orders",))
    state.replay(CoordinatorRecord(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(1)), 1)
    state.replay(CoordinatorRecord(member, subscription), 2)
    group = state.consumer_group("g")
    assert group is not None and group.members == ["m1"]
    assert state.expired(now_ms=10_000, retention_ms=3_000) == {}
    state.replay(CoordinatorRecord(member, None), 3)
    assert state.expired(now_ms=10_000, retention_ms=3_000) == {"g": [TP0]}
    state.replay(CoordinatorRecord(ConsumerGroupMetadataKey("g"), None), 4)
    assert state.consumer_group("g") is None


def test_transactional_commits_wait_for_their_producers_marker() -> None:
    """Kafka's pending transactional offsets: COMMIT applies a producer's, ABORT drops
    them, another producer's stay pending, and the partition is unstable meanwhile."""
    state = OffsetsState()
    state.replay(commit("g", TP0, 2), 0)
    state.replay_transactional(commit("g", TP0, 6), 1, producer_id=7)
    state.replay_transactional(commit("g", TP1, 4), 2, producer_id=8)
    assert state.offsets("g")[TP0].offset == 2 and TP1 not in state.offsets("g")
    assert state.is_pending("g", TP0) and state.is_pending("g", TP1)
    state.replay_marker(7, committed=False)
    assert state.offsets("g")[TP0].offset == 2 and not state.is_pending("g", TP0)
    state.replay_marker(8, committed=True)
    assert state.offsets("g")[TP1].offset == 4 and not state.is_pending("g", TP1)
    assert state.offsets("g")[TP1].log_offset == 2


def test_a_committed_transaction_does_not_undo_a_later_plain_commit() -> None:
    """The transaction's offsets take effect at their own place in the log: a plain
    commit written after them (a higher log offset) stays."""
    state = OffsetsState()
    state.replay_transactional(commit("g", TP0, 6), 3, producer_id=7)
    state.replay(commit("g", TP0, 9), 4)
    state.replay_marker(7, committed=True)
    assert state.offsets("g")[TP0].offset == 9


def test_a_transactional_commit_makes_its_group_known() -> None:
    state = OffsetsState()
    state.replay_transactional(commit("txn", TP0, 1), 0, producer_id=3)
    assert state.has_group("txn") and state.groups() == ["txn"] and state.is_busy("txn")
    state.replay_marker(3, committed=False)
    assert not state.has_group("txn")


def test_a_tombstone_deletes_an_offset_in_an_open_transaction_too() -> None:
    state = OffsetsState()
    state.replay_transactional(commit("g", TP0, 6), 0, producer_id=7)
    state.replay(tombstone("g", TP0), 1)
    assert not state.is_pending("g", TP0)  # stable at once, as Kafka's
    state.replay_marker(7, committed=True)
    assert state.offsets("g") == {} and not state.has_group("g")
