"""The group coordinator: committed offsets kept in ``__consumer_offsets``.

A group belongs to the partition its id hashes to (``offsets_topic``), and this broker
coordinates it while it leads that partition (``loaded_partitions``: each partition led
here is loaded by replaying its log, ``loader``, once per leadership epoch;
COORDINATOR_LOAD_IN_PROGRESS meanwhile, NOT_COORDINATOR elsewhere).

Writes are Kafka's records (``group_records``) appended through the broker's own produce
path with acks=all (``Append``), one batch per request, and applied to the state only
once acknowledged, at the offset the log gave them (``OffsetsState`` keeps log order).
Groups have no members yet (issue 19's part 2): every group is Kafka's "Empty" group of
consumers that assign their own partitions, whose offsets each expire
``offsets.retention.minutes`` after their commit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from tierlog.api.errors import (
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidGroupIdError,
    LeaderNotAvailableError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    OffsetMetadataTooLargeError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from tierlog.coordinator.classic_group_records import GroupMetadataKey
from tierlog.coordinator.config import GroupCoordinatorConfig
from tierlog.coordinator.group_records import CoordinatorRecord, encode_record
from tierlog.coordinator.loaded_partitions import LoadedPartitions
from tierlog.coordinator.loader import load_offsets
from tierlog.coordinator.offset_records import OffsetCommitKey, OffsetCommitValue
from tierlog.coordinator.offsets_state import CommittedOffset, OffsetsState
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for_group
from tierlog.sidecar.partitions import Partitions
from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.errors import TierlogError
from tierlog.storage.records import SimpleRecord, build_batch

__all__ = ["Append", "GroupCoordinator", "OffsetToCommit", "PartitionOutcome"]

log = logging.getLogger(__name__)

# Appends a batch to a partition with acks=all; the base offset it got.
Append = Callable[[TopicPartition, bytes], Awaitable[int]]
# A partition's answer: None (done) or its error.
PartitionOutcome = tuple[TopicPartition, TierlogError | None]

NO_GENERATION = -1  # a commit from a consumer outside any membership
EMPTY = "Empty"  # Kafka's state of a group with offsets and no members


@dataclass(frozen=True)
class OffsetToCommit:
    tp: TopicPartition
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


class GroupCoordinator:
    def __init__(
        self,
        partitions: Partitions,
        config: GroupCoordinatorConfig,
        append: Append,
        *,
        follow_interval_s: float = 0.2,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.partitions = partitions
        self.config = config
        self.append = append
        self.follow_interval_s = follow_interval_s
        self.clock_ms = clock_ms
        self._loaded = LoadedPartitions(
            partitions, OFFSETS_TOPIC, config.offsets_topic_partitions, load_offsets
        )
        self._tasks: list[asyncio.Task[None]] = []

    # -- running ----------------------------------------------------------------------

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(
                self._loaded.follow(self.follow_interval_s), name="group-coordinator-follow"
            ),
            asyncio.create_task(self._expire_offsets(), name="group-coordinator-expire"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._loaded.stop()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _expire_offsets(self) -> None:
        while True:
            await asyncio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            try:
                await self.expire_once()
            except TierlogError as error:  # not leading any more, the disk...: next time
                log.warning("expiring offsets failed: %s: %s", error.reason, error)

    async def expire_once(self) -> int:
        """Tombstone every offset older than ``offsets.retention.minutes``; how many."""
        expired = 0
        now_ms = self.clock_ms()
        retention_ms = self.config.offsets_retention_ms
        for loaded in self._loaded:
            assert loaded.state is not None
            for group, tps in loaded.state.expired(now_ms, retention_ms).items():
                await self._write(loaded.partition, loaded.state, group, _tombstones(group, tps))
                expired += len(tps)
                log.info("group %s: %d offsets expired", group, len(tps))
        return expired

    # -- leadership and loading -------------------------------------------------------

    def partition_count(self) -> int:
        """``__consumer_offsets``' partitions (``offsets.topic.num.partitions`` before it
        exists)."""
        return self._loaded.partition_count()

    def partition_of(self, group: str) -> int:
        if not group:
            raise InvalidGroupIdError("a group id cannot be empty")
        return partition_for_group(group, self.partition_count())

    def _state(self, group: str) -> tuple[int, OffsetsState]:
        """The group's partition and its loaded state; NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS."""
        partition = self.partition_of(group)
        state = self._loaded.loaded(partition, f"group {group!r}").state
        assert state is not None
        return partition, state

    def coordinated_states(self) -> Iterable[OffsetsState]:
        return [loaded.state for loaded in self._loaded if loaded.state is not None]

    # -- writing ----------------------------------------------------------------------

    async def _write(
        self, partition: int, state: OffsetsState, group: str, records: Sequence[CoordinatorRecord]
    ) -> None:
        """Append ``records`` as one batch, acks=all; once acknowledged, apply them."""
        now_ms = self.clock_ms()
        batch = build_batch([SimpleRecord(*encode_record(record), now_ms) for record in records])
        keys = [
            TopicPartition(record.key.topic, record.key.partition)
            for record in records
            if isinstance(record.key, OffsetCommitKey)
        ]
        state.begin_commit(group, keys)
        try:
            base_offset = await self.append(TopicPartition(OFFSETS_TOPIC, partition), batch)
        except (NotLeaderOrFollowerError, LeaderNotAvailableError) as error:
            raise NotCoordinatorError(f"group {group!r}: {error}") from None
        finally:
            state.end_commit(group, keys)
        for index, record in enumerate(records):
            state.replay(record, base_offset + index)

    # -- the calls --------------------------------------------------------------------

    async def commit(
        self,
        group: str,
        offsets: Sequence[OffsetToCommit],
        *,
        member_id: str = "",
        generation_id: int = NO_GENERATION,
    ) -> list[PartitionOutcome]:
        partition, state = self._state(group)
        if member_id:
            raise UnknownMemberIdError(
                f"group {group!r} has no member {member_id!r} (it has no members)"
            )
        if generation_id != NO_GENERATION:
            raise IllegalGenerationError(
                f"group {group!r} has no generation {generation_id}: commit with -1"
            )
        outcomes: list[PartitionOutcome] = []
        records: list[CoordinatorRecord] = []
        now_ms = self.clock_ms()
        for item in offsets:
            try:
                self._check_commit(item)
            except TierlogError as error:
                outcomes.append((item.tp, error))
                continue
            key = OffsetCommitKey(group, item.tp.topic, item.tp.partition)
            value = OffsetCommitValue(item.offset, now_ms, item.metadata, item.leader_epoch)
            records.append(CoordinatorRecord(key, value))
            outcomes.append((item.tp, None))
        if records:
            await self._write(partition, state, group, records)
        return outcomes

    def _check_commit(self, item: OffsetToCommit) -> None:
        self.partitions.topics.check_partition(item.tp.topic, item.tp.partition)
        size = len(item.metadata.encode())
        if size > self.config.offset_metadata_max_bytes:
            raise OffsetMetadataTooLargeError(
                f"{item.tp}: metadata of {size} bytes is over offset.metadata.max.bytes "
                f"({self.config.offset_metadata_max_bytes})"
            )

    def fetch(
        self, group: str, partitions: Sequence[TopicPartition], *, require_stable: bool = False
    ) -> list[tuple[TopicPartition, CommittedOffset | None, TierlogError | None]]:
        """The group's offsets of ``partitions`` (every one it has, if empty); None for a
        partition without one (and for every partition of an unknown group)."""
        _partition, state = self._state(group)
        committed = state.offsets(group)
        answers: list[tuple[TopicPartition, CommittedOffset | None, TierlogError | None]] = []
        for tp in partitions or sorted(committed):
            if require_stable and state.is_pending(group, tp):
                unstable = UnstableOffsetCommitError(f"{tp}: a commit is not acknowledged yet")
                answers.append((tp, None, unstable))
            else:
                answers.append((tp, committed.get(tp), None))
        return answers

    async def delete_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> list[PartitionOutcome]:
        partition, state = self._state(group)
        self._check_exists(state, group)
        committed = state.offsets(group)
        gone = [tp for tp in partitions if tp in committed]
        if gone:
            await self._write(partition, state, group, _tombstones(group, gone))
        return [(tp, None) for tp in partitions]

    async def delete_group(self, group: str) -> None:
        """Forget the group: a tombstone for each offset and for its group record."""
        partition, state = self._state(group)
        self._check_exists(state, group)
        records = [
            *_tombstones(group, sorted(state.offsets(group))),
            CoordinatorRecord(GroupMetadataKey(group), None),
        ]
        await self._write(partition, state, group, records)

    def describe(self, group: str) -> str:
        """The group's state (GROUP_ID_NOT_FOUND for a group unknown here)."""
        _partition, state = self._state(group)
        self._check_exists(state, group)
        return EMPTY

    def list_groups(self) -> list[tuple[str, str]]:
        """Every group this broker coordinates, with its state."""
        return sorted(
            (group, EMPTY) for state in self.coordinated_states() for group in state.groups()
        )

    @staticmethod
    def _check_exists(state: OffsetsState, group: str) -> None:
        if not state.has_group(group):
            raise GroupIdNotFoundError(f"group {group!r} does not exist")


def _tombstones(group: str, tps: Iterable[TopicPartition]) -> list[CoordinatorRecord]:
    return [CoordinatorRecord(OffsetCommitKey(group, tp.topic, tp.partition), None) for tp in tps]
