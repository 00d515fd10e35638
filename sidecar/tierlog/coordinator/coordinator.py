"""The group coordinator: committed offsets kept in ``__consumer_offsets``.

A group belongs to the partition its id hashes to (``offsets_topic``), and this broker
coordinates it while it leads that partition (``loaded_partitions``: each partition led
here is loaded by replaying its log, ``loader``, once per leadership epoch;
COORDINATOR_LOAD_IN_PROGRESS meanwhile, NOT_COORDINATOR elsewhere).

Writes are Kafka's records (``group_records``) appended through the broker's own produce
path with acks=all (``Append``), one batch per request, and applied to the state only
once acknowledged, at the offset the log gave them (``OffsetsState`` keeps log order).
A group may have KIP-848 members (``consumer_group``): their heartbeats are computed
into records under a lock per group (so a group's records are made from the state the
previous ones left), written the same way, and a member not heard from for
``group.consumer.session.timeout.ms`` is removed by the same path. A classic group
(``classic_group``: JoinGroup/SyncGroup) lives in memory under the same lock, its
JoinGroup and SyncGroup answers long polls, and its ``GroupMetadataValue`` is written
with each generation's assignment and when it empties. The one expiry loop ends both
kinds' sessions (and classic rebalances that ran out of time), woken early when a
classic call sets a nearer deadline. A group id is one kind or the other while it has
members (INCONSISTENT_GROUP_PROTOCOL). A group without
members is Kafka's "Empty" group of consumers that assign their own partitions, whose
offsets each expire ``offsets.retention.minutes`` after their commit.

A transactional producer's offsets (TxnOffsetCommit, KIP-98/447) are written the same
way, as a transactional batch stamped with the producer's id and epoch (so the log
fences an older epoch); they stay pending in the state until the transaction
coordinator's marker is appended to the partition (``complete_transaction``), which
applies or drops them.

On a broker restored from the tier, the offsets the restore kept (``restored_groups``)
are committed as each partition loads, by the same write path, for the groups that have
none there yet; those groups' calls wait (COORDINATOR_LOAD_IN_PROGRESS) until then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from tierlog.api.errors import (
    CoordinatorLoadInProgressError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    LeaderNotAvailableError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    OffsetMetadataTooLargeError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from tierlog.broker.partition_series import PartitionSeries
from tierlog.broker.partitions import Leader, Leaders, Partitions
from tierlog.coordinator.classic_group import ClassicGroup, JoinAnswer, JoinRequest, Timeouts
from tierlog.coordinator.classic_group_records import GroupMetadataKey
from tierlog.coordinator.config import GroupCoordinatorConfig
from tierlog.coordinator.consumer_group import (
    ConsumerGroup,
    GroupState,
    Heartbeat,
    HeartbeatAnswer,
    TopicImage,
    TopicInfo,
)
from tierlog.coordinator.group_metrics import GroupMetrics
from tierlog.coordinator.group_records import CoordinatorRecord, encode_record
from tierlog.coordinator.loaded_partitions import Loaded, LoadedPartitions
from tierlog.coordinator.loader import load_offsets
from tierlog.coordinator.offset_records import OffsetCommitKey, OffsetCommitValue
from tierlog.coordinator.offsets_state import CommittedOffset, OffsetsState
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for_group
from tierlog.coordinator.restored_groups import RestoredGroups
from tierlog.storage.errors import TierlogError
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "Append",
    "GroupCoordinator",
    "ListedGroup",
    "OffsetToCommit",
    "PartitionOutcome",
    "TransactionalProducer",
]

log = logging.getLogger(__name__)

# Appends a batch to a partition with acks=all; the base offset it got.
Append = Callable[[TopicPartition, bytes], Awaitable[int]]
# A partition's answer: None (done) or its error.
PartitionOutcome = tuple[TopicPartition, TierlogError | None]

NO_GENERATION = -1  # a commit from a consumer outside any membership
EMPTY = GroupState.EMPTY  # Kafka's state of a group with offsets and no members


@dataclass(frozen=True)
class TransactionalProducer:
    """The producer whose transaction a TxnOffsetCommit belongs to."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True)
class ListedGroup:
    """A group as ListGroups names it: ``group_type`` "classic" or "consumer"."""

    group_id: str
    state: str
    group_type: str
    protocol_type: str


@dataclass(frozen=True)
class OffsetToCommit:
    tp: TopicPartition
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


class GroupCoordinator:
    def __init__(
        self,
        partitions: Partitions[Leaders[Leader]],
        config: GroupCoordinatorConfig,
        append: Append,
        *,
        follow_interval_s: float = 0.2,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        partition_series: PartitionSeries | None = None,
        restored: RestoredGroups | None = None,
    ) -> None:
        self.partitions = partitions
        self.config = config
        self.append = append
        self.follow_interval_s = follow_interval_s
        self.clock_ms = clock_ms
        # Offsets a restore from the tier found, committed as their partitions load.
        self.restored = restored
        self._loaded = LoadedPartitions(
            partitions,
            OFFSETS_TOPIC,
            config.offsets_topic_partitions,
            load_offsets,
            on_loaded=self._on_loaded,
            on_unloaded=_answer_classic_waiters,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._restoring: set[asyncio.Task[None]] = set()
        # The sidecar registers it; membership feeds it.
        self.metrics = GroupMetrics(self, partition_series or PartitionSeries())
        self._group_locks: dict[str, asyncio.Lock] = {}
        # Set when a classic call may have set a nearer deadline: the expiry loop looks now.
        self._session_waker: asyncio.Future[None] | None = None
        # Told (on the loop) each group whose offsets tombstones removed (DeleteGroups,
        # OffsetDelete, expiry), once they are acknowledged, and each a loaded partition's
        # log holds such tombstones of: the bucket's copy of its offsets follows
        # (``group_offsets_mirror``), whoever wrote that copy and whoever deleted it.
        self.on_offsets_deleted: Callable[[str], None] | None = None

    # -- running ----------------------------------------------------------------------

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(
                self._loaded.follow(self.follow_interval_s), name="group-coordinator-follow"
            ),
            asyncio.create_task(self._expire_offsets(), name="group-coordinator-expire"),
            asyncio.create_task(self._expire_sessions(), name="group-coordinator-sessions"),
        ]

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._restoring]
        for task in tasks:
            task.cancel()
        self._loaded.stop()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _on_loaded(self, loaded: Loaded[OffsetsState]) -> None:
        assert loaded.state is not None
        self._report_deleted(loaded.state)
        self._commit_restored_soon(loaded)

    def _report_deleted(self, state: OffsetsState) -> None:
        deleted = state.take_deleted_groups()
        if self.on_offsets_deleted is not None:
            for group in sorted(deleted):
                self.on_offsets_deleted(group)

    def _commit_restored_soon(self, loaded: Loaded[OffsetsState]) -> None:
        if self.restored is None:
            return
        groups = self.restored.of_partition(self.partition_of, loaded.partition)
        if groups:
            task = asyncio.create_task(self._commit_restored(loaded, groups))
            self._restoring.add(task)
            task.add_done_callback(self._restoring.discard)

    async def _commit_restored(self, loaded: Loaded[OffsetsState], groups: list[str]) -> None:
        """Commit the restored offsets of ``groups`` (of the partition just loaded) that
        have none here yet, as a simple commit from outside the group (an admin tool's);
        retried while the partition stays loaded here, their calls waiting meanwhile."""
        assert self.restored is not None and loaded.state is not None
        state = loaded.state
        while self._loaded.is_current(loaded):
            try:
                for group in groups:
                    restored = self.restored.pending(group)
                    if restored is None:
                        continue
                    if not state.offsets(group):
                        offsets = [
                            OffsetToCommit(tp, o.offset, o.leader_epoch, o.metadata)
                            for tp, o in sorted(restored.offsets.items())
                        ]
                        _outcomes, records = self._commit_records(group, offsets)
                        if records:  # none: its topics are gone
                            async with self._group_lock(group):
                                await self._write(loaded.partition, state, group, records)
                        log.info("group %s: %d offsets restored from the tier", group, len(records))
                    await asyncio.to_thread(self.restored.drop, [group])
                return
            except TierlogError as error:
                log.warning("restoring group offsets failed (%s); trying again", error)
                await asyncio.sleep(self.follow_interval_s)

    async def _expire_offsets(self) -> None:
        while True:
            await asyncio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            try:
                await self.expire_once()
            except TierlogError as error:  # not leading any more, the disk...: next time
                log.warning("expiring offsets failed: %s: %s", error.reason, error)

    async def _expire_sessions(self) -> None:
        # Looked at when the first session ends (as Kafka's per-member timers fire), so
        # a member goes at its session timeout, not up to a scan interval later; and at
        # least several times per session, for groups loaded meanwhile.
        while True:
            await self._sleep_unless_woken(self.next_session_check_s())
            try:
                await self.expire_sessions_once()
            except TierlogError as error:
                log.warning("expiring members failed: %s: %s", error.reason, error)

    async def _sleep_unless_woken(self, seconds: float) -> None:
        # A future and a timer, not wait_for: Python 3.11's wait_for can swallow a
        # cancellation that coincides with the wake-up, and stop() would wait forever.
        loop = asyncio.get_running_loop()
        waker = self._session_waker = loop.create_future()
        timer = loop.call_later(seconds, self._wake_sessions)
        try:
            await waker
        finally:
            timer.cancel()

    def _wake_sessions(self) -> None:
        waker = self._session_waker
        if waker is not None and not waker.done():
            waker.set_result(None)

    def next_session_check_s(self) -> float:
        """Seconds until the earliest session of a loaded group ends, at most a quarter
        session (and a second): a member joining meanwhile ends its session later."""
        timeout_ms = self.config.consumer_session_timeout_ms
        wait_ms = min(1000, timeout_ms / 4)
        now_ms = self.clock_ms()
        for loaded in self._loaded:  # the loaded ones
            assert loaded.state is not None
            for group in loaded.state.consumer_groups():
                expiry_ms = group.next_expiry_ms(timeout_ms)
                if expiry_ms is not None:
                    # Not 0: an expiry that failed is not asked again in a busy loop.
                    wait_ms = min(wait_ms, max(expiry_ms - now_ms, 10))
            for classic in loaded.state.classic_groups():
                deadline_ms = classic.next_deadline_ms()
                if deadline_ms is not None:
                    wait_ms = min(wait_ms, max(deadline_ms - now_ms, 10))
        return wait_ms / 1000

    async def expire_sessions_once(self) -> list[tuple[str, str]]:
        """Remove every member not heard from for a session timeout; (group, member)s."""
        removed: list[tuple[str, str]] = []
        now_ms = self.clock_ms()
        timeout_ms = self.config.consumer_session_timeout_ms
        for loaded in self._loaded:
            assert loaded.state is not None
            partition = loaded.partition
            for group in loaded.state.consumer_groups():
                for member_id in group.expired_members(now_ms, timeout_ms):
                    async with self._group_lock(group.group_id):
                        current = loaded.state.consumer_group(group.group_id)
                        if current is None or member_id not in current.subscriptions:
                            continue
                        records = current.remove(member_id, self.topic_image())
                        await self._write(partition, loaded.state, group.group_id, records)
                    removed.append((group.group_id, member_id))
                    log.info("group %s: member %s expired", group.group_id, member_id)
            for classic in loaded.state.classic_groups():
                removed.extend(await self._expire_classic(partition, loaded.state, classic))
        return removed

    async def _expire_classic(
        self, partition: int, state: OffsetsState, classic: ClassicGroup
    ) -> list[tuple[str, str]]:
        group = classic.group_id
        async with self._group_lock(group):
            if state.classic_group(group) is not classic:
                return []
            before = set(classic.members)
            now_ms = self.clock_ms()
            if classic.expire(now_ms):
                await self._write(partition, state, group, [classic.record(now_ms)])
        gone = sorted(before - set(classic.members))
        for member_id in gone:
            log.info("group %s: member %s left by timeout", group, member_id)
        return [(group, member_id) for member_id in gone]

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
            await self._delete_empty_groups(loaded.partition, loaded.state)
        return expired

    async def _delete_empty_groups(self, partition: int, state: OffsetsState) -> None:
        """A group without members or offsets is gone (Kafka's cleanup)."""
        for classic in state.classic_groups():
            group = classic.group_id
            async with self._group_lock(group):
                if not classic.is_empty() or state.offsets(group) or state.is_busy(group):
                    continue
                await self._write(partition, state, group, [_classic_tombstone(group)])
                log.info("group %s: empty, deleted", group)
        for members in state.consumer_groups():
            group = members.group_id
            async with self._group_lock(group):
                if members.subscriptions or state.offsets(group) or state.is_busy(group):
                    continue
                await self._write(partition, state, group, members.delete())
                log.info("group %s: empty, deleted", group)

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
        if self.restored is not None and self.restored.pending(group) is not None:
            raise CoordinatorLoadInProgressError(
                f"group {group!r}: its offsets restored from the tier are being committed"
            )
        return partition, state

    def coordinated_partitions(self) -> dict[int, OffsetsState | None]:
        """For the metrics thread: the partitions led here, their states (None: loading)."""
        return self._loaded.led()

    def _group_lock(self, group: str) -> asyncio.Lock:
        return self._group_locks.setdefault(group, asyncio.Lock())

    def topic_image(self) -> TopicImage:
        """The topics a subscription can name, with their ids and partition counts:
        every topic, internal ones too, as Kafka 4.1 resolves names and regexes against
        its whole metadata image (only authorization narrows it there)."""
        manager = self.partitions.manager
        return {
            topic.name: TopicInfo(manager.topic_id(topic.name), topic.partition_count)
            for topic in self.partitions.topics.topics()
        }

    def coordinated_states(self) -> Iterable[OffsetsState]:
        return [loaded.state for loaded in self._loaded if loaded.state is not None]

    # -- writing ----------------------------------------------------------------------

    async def _write(
        self,
        partition: int,
        state: OffsetsState,
        group: str,
        records: Sequence[CoordinatorRecord],
        producer: TransactionalProducer | None = None,
    ) -> None:
        """Append ``records`` as one batch, acks=all; once acknowledged, apply them (a
        ``producer``'s transactional batch: hold them until its marker)."""
        now_ms = self.clock_ms()
        simple = [SimpleRecord(*encode_record(record), now_ms) for record in records]
        if producer is None:
            batch = build_batch(simple)
        else:
            batch = build_batch(
                simple,
                producer_id=producer.producer_id,
                producer_epoch=producer.producer_epoch,
                is_transactional=True,
            )
        keys = [
            TopicPartition(record.key.topic, record.key.partition)
            for record in records
            if isinstance(record.key, OffsetCommitKey)
        ]
        before = state.consumer_group(group)
        target_before = 0 if before is None else before.target_epoch
        state.begin_commit(group, keys)
        try:
            base_offset = await self.append(TopicPartition(OFFSETS_TOPIC, partition), batch)
        except (NotLeaderOrFollowerError, LeaderNotAvailableError) as error:
            raise NotCoordinatorError(f"group {group!r}: {error}") from None
        finally:
            state.end_commit(group, keys)
        for index, record in enumerate(records):
            if producer is None:
                state.replay(record, base_offset + index)
            else:
                state.replay_transactional(record, base_offset + index, producer.producer_id)
        self._report_membership(state, group, target_before)
        self._report_deleted(state)

    def _report_membership(self, state: OffsetsState, group: str, target_before: int) -> None:
        """Tell the metrics what the group's membership is now; a target assignment newer
        than ``target_before`` is a rebalance."""
        members = state.consumer_group(group)
        if members is None:
            self.metrics.group_removed(group)
            return
        if members.target_epoch > target_before:
            self.metrics.rebalance_completed(group)
        self.metrics.membership_changed(group, members.state(), len(members.members))

    # -- the calls --------------------------------------------------------------------

    async def commit(
        self,
        group: str,
        offsets: Sequence[OffsetToCommit],
        *,
        member_id: str = "",
        generation_id: int = NO_GENERATION,
        group_instance_id: str | None = None,
    ) -> list[PartitionOutcome]:
        partition, state = self._state(group)
        members = state.consumer_group(group)
        classic = state.classic_group(group)
        if classic is not None:
            classic.check_commit(member_id, group_instance_id, generation_id)
        elif members is not None:
            members.check_commit(member_id, generation_id)
        else:
            _check_no_member(group, member_id, generation_id)
        outcomes, records = self._commit_records(group, offsets)
        if records:
            await self._write(partition, state, group, records)
            self.metrics.offsets_committed(group, len(records))
        return outcomes

    async def commit_transactional(
        self,
        group: str,
        producer: TransactionalProducer,
        offsets: Sequence[OffsetToCommit],
        *,
        member_id: str = "",
        generation_id: int = NO_GENERATION,
        group_instance_id: str | None = None,
    ) -> list[PartitionOutcome]:
        """TxnOffsetCommit: the offsets written in the producer's transaction, applied
        once its COMMIT marker reaches the partition (dropped on ABORT). The member and
        its generation or epoch are checked when given (KIP-447), as Kafka does, in a
        classic group as in a KIP-848 one."""
        partition, state = self._state(group)
        members = state.consumer_group(group)
        classic = state.classic_group(group)
        if classic is not None:
            classic.check_transactional_commit(member_id, group_instance_id, generation_id)
        elif members is not None:
            members.check_transactional_commit(member_id, generation_id)
        else:
            _check_no_member(group, member_id, generation_id)
        outcomes, records = self._commit_records(group, offsets)
        if records:
            await self._write(partition, state, group, records, producer)
        return outcomes

    def complete_transaction(self, partition: int, producer_id: int, committed: bool) -> None:
        """A marker of ``producer_id`` was appended to our partition: its pending
        offsets applied (COMMIT) or dropped (ABORT)."""
        loaded = self._loaded.loaded(partition, f"the marker of producer {producer_id}")
        assert loaded.state is not None
        loaded.state.replay_marker(producer_id, committed)

    def check_loaded(self, partition: int) -> None:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS unless the partition's state
        is loaded here (a marker written while it loads could be missed by the load)."""
        self._loaded.loaded(partition, f"{OFFSETS_TOPIC}-{partition}")

    def _commit_records(
        self, group: str, offsets: Sequence[OffsetToCommit]
    ) -> tuple[list[PartitionOutcome], list[CoordinatorRecord]]:
        """The records of the offsets that pass the checks, and every partition's outcome."""
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
        return outcomes, records

    def _check_commit(self, item: OffsetToCommit) -> None:
        self.partitions.topics.check_partition(item.tp.topic, item.tp.partition)
        size = len(item.metadata.encode())
        if size > self.config.offset_metadata_max_bytes:
            raise OffsetMetadataTooLargeError(
                f"{item.tp}: metadata of {size} bytes is over offset.metadata.max.bytes "
                f"({self.config.offset_metadata_max_bytes})"
            )

    def fetch(
        self,
        group: str,
        partitions: Sequence[TopicPartition],
        *,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = NO_GENERATION,
    ) -> list[tuple[TopicPartition, CommittedOffset | None, TierlogError | None]]:
        """The group's offsets of ``partitions`` (every one it has, if empty); None for a
        partition without one (and for every partition of an unknown group). A KIP-848
        member that names itself is checked (``ConsumerGroup.check_fetch``)."""
        _partition, state = self._state(group)
        members = state.consumer_group(group)
        if members is not None:
            members.check_fetch(member_id, member_epoch)
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
        """Tombstones for the group's offsets of ``partitions``, but for the topics its
        members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC, as Kafka refuses them)."""
        partition, state = self._state(group)
        self._check_exists(state, group)
        members = state.consumer_group(group)
        in_use = set() if members is None else members.subscribed_topics(self.topic_image())
        # An offset in an open transaction is deleted too (its COMMIT, older in the log
        # than the tombstone, then changes nothing), as Kafka deletes it.
        known = state.offsets(group).keys() | state.transactional_partitions(group)
        gone = [tp for tp in partitions if tp in known and tp.topic not in in_use]
        if gone:
            await self._write(partition, state, group, _tombstones(group, gone))
        return [(tp, _subscribed(group, tp) if tp.topic in in_use else None) for tp in partitions]

    async def delete_group(self, group: str) -> None:
        """Forget the group: a tombstone for each offset and for its group record."""
        partition, state = self._state(group)
        self._check_exists(state, group)
        async with self._group_lock(group):
            members = state.consumer_group(group)
            if members is not None and members.subscriptions:
                raise NonEmptyGroupError(f"group {group!r} has members: {members.members}")
            classic = state.classic_group(group)
            if classic is not None and not classic.is_empty():
                raise NonEmptyGroupError(f"group {group!r} has members: {sorted(classic.members)}")
            records = [
                *_tombstones(
                    group,
                    sorted(state.offsets(group).keys() | state.transactional_partitions(group)),
                ),
                *(members.delete() if members is not None else ()),
                _classic_tombstone(group),
            ]
            await self._write(partition, state, group, records)

    async def heartbeat(self, group: str, request: Heartbeat) -> HeartbeatAnswer:
        """A KIP-848 ConsumerGroupHeartbeat: the member's records written, its answer."""
        partition, state = self._state(group)
        async with self._group_lock(group):
            members = state.consumer_group(group) or ConsumerGroup(group)
            replaced = self._replaced_classic(state, group)
            records, answer = members.heartbeat(
                request, self.topic_image(), max_size=self.config.consumer_max_size
            )
            if records and replaced:
                records = [_classic_tombstone(group), *records]
            if records:
                await self._write(partition, state, group, records)
            else:  # a coordinator that reloaded the group learns its members here too
                self._report_membership(state, group, members.target_epoch)
            loaded = state.consumer_group(group)
            if loaded is not None:
                loaded.touch(answer.member_id, self.clock_ms())
            return answer

    def consumer_group(self, group: str) -> ConsumerGroup | None:
        """The group's membership (None when it has none), GROUP_ID_NOT_FOUND if unknown."""
        _partition, state = self._state(group)
        self._check_exists(state, group)
        return state.consumer_group(group)

    def classic_group(self, group: str) -> ClassicGroup | None:
        """The group's classic membership (None: not a classic group), GROUP_ID_NOT_FOUND
        if unknown."""
        _partition, state = self._state(group)
        self._check_exists(state, group)
        return state.classic_group(group)

    def describe(self, group: str) -> str:
        """The group's state (GROUP_ID_NOT_FOUND for a group unknown here)."""
        _partition, state = self._state(group)
        self._check_exists(state, group)
        return _listed(state, group).state

    def list_groups(self) -> list[ListedGroup]:
        """Every group this broker coordinates, with its state and type."""
        return sorted(
            (
                _listed(state, group)
                for state in self.coordinated_states()
                for group in state.groups()
            ),
            key=lambda listed: listed.group_id,
        )

    # -- classic groups ---------------------------------------------------------------

    async def join_group(self, group: str, request: JoinRequest) -> JoinAnswer:
        """A JoinGroup, answered once the rebalance it joins completes (MEMBER_ID_REQUIRED
        first for a new dynamic member)."""
        config = self.config
        timeout_ms = request.session_timeout_ms
        if not (
            config.classic_min_session_timeout_ms
            <= timeout_ms
            <= config.classic_max_session_timeout_ms
        ):
            raise InvalidSessionTimeoutError(
                f"session timeout {timeout_ms} ms is outside group.min.session.timeout.ms.."
                f"group.max.session.timeout.ms ({config.classic_min_session_timeout_ms}.."
                f"{config.classic_max_session_timeout_ms})"
            )
        partition, state = self._state(group)
        async with self._group_lock(group):
            classic = state.classic_group(group)
            if classic is None:
                replaced = state.consumer_group(group)
                if replaced is not None and replaced.subscriptions:
                    raise InconsistentGroupProtocolError(
                        f"group {group!r} is a consumer group (KIP-848) with members"
                    )
                if replaced is not None:  # an empty consumer group becomes classic
                    await self._write(partition, state, group, replaced.delete())
                classic = ClassicGroup(group)
                state.add_classic_group(classic)
            timeouts = Timeouts(config.classic_initial_rebalance_delay_ms)
            waiter = classic.join(request, self.clock_ms(), timeouts)
        self._wake_sessions()
        return await waiter

    async def sync_group(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes],
        *,
        group_instance_id: str | None = None,
        protocol: tuple[str | None, str | None] = (None, None),
    ) -> bytes:
        """A SyncGroup: the member's assignment, once its leader's is written."""
        partition, state = self._state(group)
        async with self._group_lock(group):
            classic = self._classic(state, group, member_id)
            waiter, write = classic.sync(
                member_id,
                group_instance_id,
                generation,
                assignments,
                self.clock_ms(),
                protocol=protocol,
            )
            if write:
                try:
                    await self._write(partition, state, group, [classic.record(self.clock_ms())])
                except TierlogError as error:
                    classic.assignment_failed(error, self.clock_ms())
                else:
                    classic.assignment_written(self.clock_ms())
        self._wake_sessions()
        return await waiter

    def classic_heartbeat(
        self, group: str, member_id: str, generation: int, group_instance_id: str | None = None
    ) -> None:
        """A classic Heartbeat: REBALANCE_IN_PROGRESS tells the member to join again."""
        _partition, state = self._state(group)
        classic = self._classic(state, group, member_id)
        classic.heartbeat(member_id, group_instance_id, generation, self.clock_ms())

    async def leave_group(
        self, group: str, members: Sequence[tuple[str, str | None]]
    ) -> list[TierlogError | None]:
        """A LeaveGroup of (member id, instance id)s: each one's outcome."""
        partition, state = self._state(group)
        outcomes: list[TierlogError | None] = []
        async with self._group_lock(group):
            classic = self._classic(state, group, members[0][0] if members else "")
            now_ms = self.clock_ms()
            emptied = False
            for member_id, instance_id in members:
                try:
                    emptied = classic.leave(member_id, instance_id, now_ms) or emptied
                except TierlogError as error:
                    outcomes.append(error)
                else:
                    outcomes.append(None)
            if emptied:
                await self._write(partition, state, group, [classic.record(now_ms)])
        self._wake_sessions()
        return outcomes

    @staticmethod
    def _classic(state: OffsetsState, group: str, member_id: str) -> ClassicGroup:
        classic = state.classic_group(group)
        if classic is None:
            raise UnknownMemberIdError(f"group {group!r} has no member {member_id!r}")
        return classic

    @staticmethod
    def _replaced_classic(state: OffsetsState, group: str) -> bool:
        """Whether a KIP-848 member takes over an empty classic group (Kafka converts
        it); INCONSISTENT_GROUP_PROTOCOL while it has members."""
        classic = state.classic_group(group)
        if classic is None:
            return False
        if not classic.is_empty():
            raise InconsistentGroupProtocolError(f"group {group!r} is a classic group with members")
        return True

    @staticmethod
    def _check_exists(state: OffsetsState, group: str) -> None:
        if not state.has_group(group):
            raise GroupIdNotFoundError(f"group {group!r} does not exist")


def _check_no_member(group: str, member_id: str, generation_id: int) -> None:
    """A commit to a group without members names none (and no generation)."""
    if member_id:
        raise UnknownMemberIdError(
            f"group {group!r} has no member {member_id!r} (it has no members)"
        )
    if generation_id != NO_GENERATION:
        raise IllegalGenerationError(
            f"group {group!r} has no generation {generation_id}: commit with -1"
        )


def _listed(state: OffsetsState, group: str) -> ListedGroup:
    classic = state.classic_group(group)
    if classic is not None:
        return ListedGroup(group, classic.state, "classic", classic.protocol_type or "")
    members = state.consumer_group(group)
    if members is not None:
        return ListedGroup(group, members.state(), "consumer", "consumer")
    return ListedGroup(group, EMPTY, "classic", "")  # offsets only: Kafka lists it so


def _classic_tombstone(group: str) -> CoordinatorRecord:
    return CoordinatorRecord(GroupMetadataKey(group), None)


def _answer_classic_waiters(loaded: Loaded[OffsetsState]) -> None:
    """A partition no longer coordinated here: its classic groups' long polls end."""
    assert loaded.state is not None
    for classic in loaded.state.classic_groups():
        classic.kill(NotCoordinatorError(f"group {classic.group_id!r} moved"))


def _subscribed(group: str, tp: TopicPartition) -> GroupSubscribedToTopicError:
    return GroupSubscribedToTopicError(
        f"{tp}: a member of group {group!r} subscribes to {tp.topic!r}; its offset is kept"
    )


def _tombstones(group: str, tps: Iterable[TopicPartition]) -> list[CoordinatorRecord]:
    return [CoordinatorRecord(OffsetCommitKey(group, tp.topic, tp.partition), None) for tp in tps]
