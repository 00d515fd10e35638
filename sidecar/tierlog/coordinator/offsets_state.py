"""The groups one ``__consumer_offsets`` partition holds, as its log says: their
committed offsets and their KIP-848 membership (``consumer_group``).

The log is the truth and this is its materialized view: replaying the partition from
its start gives the latest commit per (group, topic, partition), a tombstone deleting
it, which is also what compaction keeps. Each entry remembers the log offset of the
record that made it, and a record older than the entry's is ignored: commits of one key
can be acknowledged out of log order (two in flight, the later one answered first), and
the view must still end where the log does. Membership records are written one group
at a time under the coordinator's lock, so they arrive in log order and are simply
replayed. A classic group (``classic_group``) is its latest ``GroupMetadataValue``: a
record of the generation the live group is at is its own write and changes nothing; any
other (a load, or another coordinator's write) rebuilds the group from it.

A transactional offset commit (TxnOffsetCommit: a batch with its producer's id) stays
pending under that producer id until the producer's marker reaches this partition: a
COMMIT applies its offsets, at their own log offsets (so a later plain commit still
wins), an ABORT drops them, as Kafka's ``OffsetMetadataManager`` replays an end
transaction marker; a tombstone of the key drops it from open transactions too. A
partition with a pending transactional commit is unstable for OffsetFetch's
``require_stable``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tierlog.coordinator.classic_group import ClassicGroup
from tierlog.coordinator.classic_group_records import GroupMetadataKey, GroupMetadataValue
from tierlog.coordinator.consumer_group import ConsumerGroup, consumer_group_of
from tierlog.coordinator.group_records import CoordinatorRecord
from tierlog.coordinator.offset_records import OffsetCommitKey, OffsetCommitValue
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["CommittedOffset", "OffsetsState"]


@dataclass(frozen=True)
class CommittedOffset:
    """A group's committed offset of one partition, and where its record is."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    log_offset: int  # of the __consumer_offsets record that committed it


class OffsetsState:
    def __init__(self) -> None:
        self._groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # The log offset of the last record applied per key, tombstones included, so a
        # commit acknowledged after a later delete does not bring the offset back.
        self._applied: dict[OffsetCommitKey, int] = {}
        # Commits appended but not acknowledged yet (OffsetFetch's require_stable).
        self._pending: Counter[tuple[str, TopicPartition]] = Counter()
        self._consumer_groups: dict[str, ConsumerGroup] = {}
        self._classic_groups: dict[str, ClassicGroup] = {}
        # Transactional commits per producer id, waiting for its marker: the record and
        # its log offset, the latest per key.
        self._transactional: dict[int, dict[OffsetCommitKey, tuple[CoordinatorRecord, int]]] = {}
        # Groups whose offsets a tombstone removed, until ``take_deleted_groups``.
        self._deleted_groups: set[str] = set()

    # -- the log's records ------------------------------------------------------------

    def replay(self, record: CoordinatorRecord, log_offset: int) -> None:
        """Apply one record found (or just written) at ``log_offset``."""
        key = record.key
        group_id = consumer_group_of(record)
        if group_id is not None:
            self._replay_membership(group_id, record)
            return
        if isinstance(key, GroupMetadataKey):
            self._replay_classic(key.group, record.value)
            return
        if not isinstance(key, OffsetCommitKey):
            return
        if self._applied.get(key, -1) >= log_offset:
            return
        self._applied[key] = log_offset
        tp = TopicPartition(key.topic, key.partition)
        if record.value is None:
            self._forget(key.group, tp)
            self._deleted_groups.add(key.group)
            for pending in self._transactional.values():  # deleted in open transactions too
                pending.pop(key, None)
            return
        assert isinstance(record.value, OffsetCommitValue)
        value = record.value
        self._groups.setdefault(key.group, {})[tp] = CommittedOffset(
            value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms, log_offset
        )

    def replay_transactional(
        self, record: CoordinatorRecord, log_offset: int, producer_id: int
    ) -> None:
        """Hold one record of ``producer_id``'s transactional batch until its marker."""
        if not isinstance(record.key, OffsetCommitKey):
            self.replay(record, log_offset)  # only offset commits are transactional
            return
        self._transactional.setdefault(producer_id, {})[record.key] = (record, log_offset)

    def replay_marker(self, producer_id: int, committed: bool) -> None:
        """The producer's transaction ended: its offsets applied (COMMIT) or dropped."""
        pending = self._transactional.pop(producer_id, {})
        if not committed:
            return
        for record, log_offset in pending.values():
            self.replay(record, log_offset)

    def take_deleted_groups(self) -> set[str]:
        """The groups whose offsets tombstones removed since last asked: by the load (a
        deletion another broker, or this one before a restart, wrote) or by a write here.
        The bucket's copy of their offsets may be owed a deletion (``group_offsets_mirror``)."""
        deleted, self._deleted_groups = self._deleted_groups, set()
        return deleted

    def _replay_membership(self, group_id: str, record: CoordinatorRecord) -> None:
        group = self._consumer_groups.get(group_id)
        if group is None:
            group = self._consumer_groups[group_id] = ConsumerGroup(group_id)
        group.replay(record)
        if not group.exists and not group.subscriptions:
            del self._consumer_groups[group_id]

    def _replay_classic(self, group_id: str, value: object) -> None:
        if value is None:
            self._classic_groups.pop(group_id, None)
            return
        assert isinstance(value, GroupMetadataValue)
        live = self._classic_groups.get(group_id)
        if live is None or live.generation != value.generation:
            self._classic_groups[group_id] = ClassicGroup.loaded(group_id, value)

    def _forget(self, group: str, tp: TopicPartition) -> None:
        offsets = self._groups.get(group)
        if offsets is None:
            return
        offsets.pop(tp, None)
        if not offsets:
            del self._groups[group]

    # -- commits in flight ------------------------------------------------------------

    def begin_commit(self, group: str, partitions: list[TopicPartition]) -> None:
        self._pending.update((group, tp) for tp in partitions)

    def end_commit(self, group: str, partitions: list[TopicPartition]) -> None:
        self._pending.subtract((group, tp) for tp in partitions)
        for tp in partitions:
            if self._pending[(group, tp)] <= 0:
                del self._pending[(group, tp)]

    def is_pending(self, group: str, tp: TopicPartition) -> bool:
        """Whether a commit of the partition is not acknowledged, or waits for its
        transaction's marker."""
        if self._pending[(group, tp)] > 0:
            return True
        key = OffsetCommitKey(group, tp.topic, tp.partition)
        return any(key in pending for pending in self._transactional.values())

    def is_busy(self, group: str) -> bool:
        """Whether a commit of the group is on its way (or in an open transaction)."""
        return group in self._transactional_groups() or any(g == group for g, _tp in self._pending)

    def transactional_partitions(self, group: str) -> set[TopicPartition]:
        """The group's partitions with an offset in an open transaction."""
        return {
            TopicPartition(key.topic, key.partition)
            for pending in self._transactional.values()
            for key in pending
            if key.group == group
        }

    def _transactional_groups(self) -> set[str]:
        return {key.group for pending in self._transactional.values() for key in pending}

    # -- questions --------------------------------------------------------------------

    def groups(self) -> list[str]:
        """The groups with offsets here, membership, or a commit on the way."""
        pending = (group for group, _tp in self._pending)
        return sorted(
            {
                *self._groups,
                *self._consumer_groups,
                *self._classic_groups,
                *pending,
                *self._transactional_groups(),
            }
        )

    def has_group(self, group: str) -> bool:
        return (
            group in self._groups
            or group in self._consumer_groups
            or group in self._classic_groups
            or self.is_busy(group)
        )

    def classic_group(self, group: str) -> ClassicGroup | None:
        """The group's classic membership (None: not a classic group)."""
        return self._classic_groups.get(group)

    def add_classic_group(self, group: ClassicGroup) -> None:
        """A classic group's first member is joining (its record comes with the first
        assignment or the group's emptying)."""
        self._classic_groups[group.group_id] = group

    def classic_groups(self) -> list[ClassicGroup]:
        return [self._classic_groups[group] for group in sorted(self._classic_groups)]

    def consumer_group(self, group: str) -> ConsumerGroup | None:
        """The group's membership (None: it never had a KIP-848 member, or was deleted)."""
        return self._consumer_groups.get(group)

    def consumer_groups(self) -> list[ConsumerGroup]:
        return [self._consumer_groups[group] for group in sorted(self._consumer_groups)]

    def offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._groups.get(group, {}))

    def committed(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """Every group's offsets, for a metrics thread: each dict is copied in one step
        (no Python code runs during the copy), so the event loop's writes cannot break it."""
        return {group: dict(offsets) for group, offsets in list(self._groups.items())}

    def expired(self, now_ms: int, retention_ms: int) -> dict[str, list[TopicPartition]]:
        """Per group without members, the offsets committed more than ``retention_ms``
        ago (Kafka's rule for such a group: each offset expires on its own commit time;
        a group with members keeps them all)."""
        due: dict[str, list[TopicPartition]] = {}
        for group, offsets in self._groups.items():
            members = self._consumer_groups.get(group)
            if members is not None and members.subscriptions:
                continue  # a group with members keeps its offsets
            classic = self._classic_groups.get(group)
            if classic is not None and not classic.is_empty():
                continue
            old = [
                tp
                for tp, committed in offsets.items()
                if committed.commit_timestamp_ms + retention_ms <= now_ms
                and not self.is_pending(group, tp)
            ]
            if old:
                due[group] = sorted(old)
        return due
