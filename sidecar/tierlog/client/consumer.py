"""The consumer: assigned partitions, positions it keeps itself, ``poll`` over fetch sessions.

Kafka's ``KafkaConsumer`` with ``assign`` and ``seek``, or ``subscribe``: with a
``group.id`` the consumer is a member of the group (KIP-848, ``membership``) and its
partitions are the ones the coordinator gives it, reconciled at each ``poll`` (revoked
ones committed first when auto-commit is on, then ``on_revoke``; new ones
``on_assign``; all of them ``on_lost`` when the member was fenced); ``close`` leaves the
group. Without a ``group.id``, ``subscribe`` assigns every partition of the topics named.
A partition without a
position takes its group's committed offset (with a ``group.id``: ``groups``), else one
from ``auto.offset.reset`` (``earliest``/``latest`` via ListOffsets; ``none`` raises
``NoOffsetForPartitionError``); one whose position fell out of the log
(``OFFSET_OUT_OF_RANGE``) is reset by the policy.  An assigned partition that fresh
metadata says does not exist, for ``retry.backoff.max.ms``, raises
``UnknownTopicOrPartitionError`` from ``poll`` (one the group assigned is revoked by the
group instead).
``commit`` stores the positions (or
the offsets given) as the group's, ``commit_async`` does so on a thread of its own, in
order, and with ``enable.auto.commit`` every ``poll`` after
``auto.commit.interval.ms`` commits the positions of the records returned before it, as
does ``close`` (at least once: a record is committed only once a later poll began).

The assigned partitions are read through one fetch session per broker
(``fetch_session``), each partition added from its position: the sidecar sends the
next message, each a long poll of ``fetch.max.wait.ms`` for ``fetch.min.bytes`` over
the session's partitions as a Fetch is, while this process decodes the last one, and
one reader thread per broker holds at most ``PREFETCH`` messages the consumer has not
taken.  ``poll`` returns buffered records first; when none are buffered it decodes the
next message that arrived, from any broker, waiting for one while its timeout lasts.
A partition names its leader epoch from the metadata: a broker that leads in another
epoch (or no longer leads) answers the partition's error and drops it from the
session, and it is added again once the metadata is refreshed (KIP-320).
A message holds whole batches:
records before the position are skipped, control batches (transaction markers) are
skipped without being returned, and CRCs are checked when ``check.crcs`` says so.
With ``isolation.level=read_committed`` the streams, ListOffsets (so
``auto.offset.reset=latest``, ``end_offsets`` and ``seek_to_end``) and the lag end at
the last stable offset, and the records of the aborted transactions each message lists
are dropped (``aborted_transactions``); the position moves past them, and past the
markers, as past any batch the message ends with.  A
batch that fails its CRC here, or that the sidecar calls ``CORRUPT_MESSAGE``, raises
``CorruptRecordError`` from ``poll`` naming the partition and offset (Kafka's
``CorruptRecordException``), every poll until a seek moves past it: it is never retried.
The records of the batches before it are returned first, even from the same message:
they are buffered, the partition is dropped from its session, and the read from the
damaged batch raises.
Positions move as records are returned; a seek discards what was buffered and adds the
partition to its session again from there, as does a partition that failed (after
``retry.backoff.ms``).  Records are decoded straight from the message's bytes into
rows (``decode_record_rows``: runs of records laid out alike at C speed) and become
``ConsumerRecord`` tuples without a Python-level call.
"""

from __future__ import annotations

import functools
import logging
import math
import queue
import re
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import repeat
from operator import add
from typing import NamedTuple

from tierlog.api.errors import InvalidGroupIdError, NotLeaderOrFollowerError
from tierlog.api.v1 import log_service_pb2
from tierlog.client.aborted_transactions import AbortedTransactionFilter
from tierlog.client.client_metrics import ConsumerMetrics
from tierlog.client.cluster import NO_ANSWER, Cluster, ClusterClient, OffsetAndTimestamp
from tierlog.client.config import ConsumerConfig
from tierlog.client.errors import (
    NoOffsetForPartitionError,
    RequestTimedOutError,
    TierlogError,
    WakeupError,
    is_retriable,
    reason_of,
    with_reason,
)
from tierlog.client.fetch_session import Arrival, SessionStream
from tierlog.client.groups import ConsumerGroupMetadata, GroupClient, OffsetAndMetadata
from tierlog.client.membership import GroupMembership, Subscription
from tierlog.client.rpc import error_from_proto
from tierlog.storage.errors import CorruptRecordError, UnknownTopicOrPartitionError
from tierlog.storage.records import (
    Header,
    crc_is_valid,
    decode_record_rows,
    iter_batches,
)
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["CommitCallback", "Consumer", "ConsumerRecord", "OffsetAndTimestamp", "Rebalance"]

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1
# How often a poll that waits looks for streams the sidecar stopped answering on.
STALL_CHECK_S = 1.0
# How long ``close`` waits for each stream's reader thread to end.
CLOSE_WAIT_S = 5.0


class ConsumerRecord(NamedTuple):
    """One record as ``poll`` returns it: a named tuple (as kafka-python's), because one is
    made per record and a tuple subclass is made from the decoder's rows by C-level calls,
    several times cheaper than any class with an ``__init__``."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


# Told the partitions revoked, assigned or lost (Kafka's ConsumerRebalanceListener).
Rebalance = Callable[[list[TopicPartition]], None]
# How long a poll waits at most before it looks for news from the group's coordinator.
MEMBERSHIP_CHECK_S = 0.1

# Told the offsets an asynchronous commit stored, or its error.
CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], None]


class Consumer(ClusterClient):
    def __init__(
        self, config: ConsumerConfig | Mapping[str, object], *, cluster: Cluster | None = None
    ) -> None:
        self.config = (
            config if isinstance(config, ConsumerConfig) else ConsumerConfig.from_properties(config)
        )
        self._own_cluster = cluster is None
        self.cluster = cluster or Cluster.for_client(self.config)
        self._timeout_s = self.config.request_timeout_ms / 1000
        self._positions: dict[TopicPartition, int | None] = {}
        self._buffers: dict[TopicPartition, _Buffered] = {}
        self._sessions: dict[str, SessionStream] = {}  # by broker address
        self._streams: dict[TopicPartition, SessionStream] = {}  # where each is read
        # The sessions' messages, and None: a wake-up's mark (``wakeup``).
        self._arrivals: queue.SimpleQueue[Arrival | None] = queue.SimpleQueue()
        self._woken = False
        # When a partition whose read failed (or whose session ended) may be read again.
        self._retry_at: dict[TopicPartition, float] = {}
        self._unanswering: set[str] = set()  # brokers whose session failed, until one answers
        # Since when fresh metadata has said each partition does not exist (``_check_exists``).
        self._missing_since: dict[TopicPartition, float] = {}
        self._metrics = ConsumerMetrics()
        self._isolation_level = _ISOLATION_LEVELS[self.config.isolation_level]
        # Where each partition's readable log ends (the high watermark, or the last stable
        # offset under read_committed) as the last message said: the lag is measured to it.
        self._fetchable_ends: dict[TopicPartition, int] = {}
        self._group = (
            GroupClient(
                self.cluster,
                self.config.group_id,
                timeout_ms=self.config.default_api_timeout_ms,
                retry_backoff_ms=self.config.retry_backoff_ms,
                retry_backoff_max_ms=self.config.retry_backoff_max_ms,
            )
            if self.config.group_id
            else None
        )
        self._auto_commit = self._group is not None and self.config.enable_auto_commit
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
        self._committer: ThreadPoolExecutor | None = None  # commit_async's, made on first use
        self._membership: GroupMembership | None = None  # once subscribed with a group.id
        self._on_assign: Rebalance | None = None
        self._on_revoke: Rebalance | None = None
        self._on_lost: Rebalance | None = None

    # --- assignment and positions -----------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (positions of those kept are kept)."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        for tp in set(self._streams) - set(wanted):
            self._drop_stream(tp)
        self._positions = {tp: self._positions.get(tp) for tp in wanted}
        self._buffers = {tp: self._buffers.get(tp, _Buffered()) for tp in wanted}

    def subscribe(
        self,
        topics: str | Iterable[str] | re.Pattern[str],
        *,
        on_assign: Rebalance | None = None,
        on_revoke: Rebalance | None = None,
        on_lost: Rebalance | None = None,
    ) -> list[TopicPartition]:
        """With a ``group.id``: join the group for ``topics`` (names, or a compiled
        regular expression); the partitions come at later polls, and [] is returned.
        Without: assign every partition of the topics named; the partitions.
        ``on_lost`` defaults to ``on_revoke``, as Kafka's listener does."""
        if isinstance(topics, re.Pattern):
            subscription = Subscription(pattern=topics.pattern)
        else:
            names = (topics,) if isinstance(topics, str) else tuple(topics)
            subscription = Subscription(topics=names)
        if self._group is None:
            if subscription.pattern is not None:
                raise InvalidGroupIdError("subscribing to a pattern needs a group.id")
            return self._assign_all(subscription.topics)
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._on_lost = on_lost or on_revoke
        if self._membership is not None:
            self._membership.subscribe(subscription)
            return []
        self.assign([])
        self._membership = GroupMembership(
            self._group,
            subscription,
            client_id=self.config.client_id,
            instance_id=self.config.group_instance_id,
            server_assignor=self.config.group_remote_assignor,
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
        )
        self._membership.start()
        return []

    def _assign_all(self, topics: tuple[str, ...]) -> list[TopicPartition]:
        partitions = [
            TopicPartition(topic, p)
            for topic in topics
            for p in range(self.cluster.owners(topic, refresh=True).partition_count)
        ]
        self.assign(partitions)
        return partitions

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The member id and epoch this consumer commits with (Kafka's
        ``groupMetadata()``)."""
        group = self._group_client()
        member_id, epoch = group.generation
        instance_id = self.config.group_instance_id or None
        return ConsumerGroupMetadata(group.group_id, member_id, epoch, instance_id)

    def unsubscribe(self) -> None:
        """Give up the partitions (revoked: committed first with auto-commit) and leave."""
        membership, self._membership = self._membership, None
        if membership is None:
            self.assign([])
            return
        self._revoke(set(self._positions))
        self.assign([])
        membership.leave()

    def assignment(self) -> list[TopicPartition]:
        return list(self._positions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._check_assigned(tp)
        self._positions[tp] = offset
        self._buffers[tp] = _Buffered()
        self._drop_stream(tp)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] = ()) -> None:
        for tp in list(partitions) or self.assignment():
            self.seek(tp, self.list_offset(tp, EARLIEST).offset)

    def seek_to_end(self, partitions: Iterable[TopicPartition] = ()) -> None:
        for tp in list(partitions) or self.assignment():
            self.seek(tp, self.list_offset(tp, LATEST).offset)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is at or after each one (None: no such record)."""
        found: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, timestamp in timestamps.items():
            if timestamp < 0:
                raise ValueError(f"a timestamp in ms since the epoch, not {timestamp}")
            answer = self.list_offset(tp, timestamp)
            found[tp] = None if answer.offset < 0 else answer
        return found

    def seek_to_timestamp(
        self, timestamp_ms: int, partitions: Iterable[TopicPartition] = ()
    ) -> None:
        """Each partition to its first record at or after ``timestamp_ms`` (its end if none)."""
        chosen = list(partitions) or self.assignment()
        for tp, found in self.offsets_for_times(dict.fromkeys(chosen, timestamp_ms)).items():
            self.seek(tp, self.list_offset(tp, LATEST).offset if found is None else found.offset)

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``tp``."""
        self._check_assigned(tp)
        position = self._positions[tp]
        if position is None:
            self._initial_positions([tp])
            position = self.position(tp)
        return position

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.list_offset(tp, EARLIEST).offset for tp in partitions}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.list_offset(tp, LATEST).offset for tp in partitions}

    def list_offset(
        self,
        tp: TopicPartition,
        timestamp: int,
        attempts: int = 5,
        *,
        isolation_level: log_service_pb2.IsolationLevel.ValueType | None = None,
    ) -> OffsetAndTimestamp:
        """``ClusterClient.list_offset``, by default under this consumer's
        ``isolation.level``: latest is the last stable offset under read_committed (as
        Kafka's consumer asks)."""
        level = self._isolation_level if isolation_level is None else isolation_level
        return super().list_offset(tp, timestamp, attempts, isolation_level=level)

    def _check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self._positions:
            raise ValueError(f"{tp} is not assigned to this consumer")

    def _initial_positions(self, partitions: list[TopicPartition], attempts: int = 5) -> None:
        """Positions for ``partitions`` (none yet): the group's committed offsets, else
        ``auto.offset.reset`` (asking each leader up to ``attempts`` times)."""
        committed = self.committed(partitions) if self._group is not None else {}
        for tp in partitions:
            found = committed.get(tp)
            if found is None:
                self._reset(tp, attempts)
            else:
                self._positions[tp] = found.offset
                self._buffers[tp] = _Buffered()
                self._drop_stream(tp)

    def _initial_positions_meanwhile(self, partitions: list[TopicPartition]) -> None:
        """``_initial_positions`` while polling: a partition whose broker (or the group's
        coordinator) does not answer keeps no position until its back-off ends, and the
        others are read meanwhile, as Kafka's consumer resets offsets asynchronously."""
        try:
            self._initial_positions(partitions, attempts=1)
            return
        except TierlogError as error:
            if not is_retriable(error):
                raise
        for tp in partitions:  # one at a time, once each, to tell which cannot be had
            if self._positions[tp] is not None:
                continue
            try:
                self._initial_positions([tp], attempts=1)
            except TierlogError as error:
                if not is_retriable(error):
                    raise
                self._check_exists(tp, error)
                log.info("no position for %s yet (%s); will retry", tp, error)
                retry_s = self.config.retry_backoff_max_ms / 1000
                self._retry_at[tp] = time.monotonic() + retry_s

    def _reset(self, tp: TopicPartition, attempts: int = 5) -> int:
        policy = self.config.auto_offset_reset
        if policy == "none":
            raise NoOffsetForPartitionError(f"{tp} has no position and auto.offset.reset is none")
        when = EARLIEST if policy == "earliest" else LATEST
        offset = self.list_offset(tp, when, attempts).offset
        self._positions[tp] = offset
        self._buffers[tp] = _Buffered()
        self._drop_stream(tp)
        return offset

    # --- poll -------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Up to ``max.poll.records`` records, waiting at most ``timeout_ms`` for some;
        ``WakeupError`` if ``wakeup`` was called during the wait or since the last poll."""
        self._raise_if_woken()
        deadline = time.monotonic() + timeout_ms / 1000
        self._reconcile()
        self._maybe_auto_commit()
        now = time.monotonic()
        unknown = [
            tp
            for tp, position in self._positions.items()
            if position is None and self._retry_at.get(tp, 0.0) <= now
        ]
        if unknown:
            self._initial_positions_meanwhile(unknown)
        while True:
            # News from the group first: no record of a partition revoked or lost
            # meanwhile (a paused process wakes up to records it no longer owns).
            self._reconcile()
            records = self._take_buffered()
            if records:
                return records
            next_retry = self._open_streams()
            # Back by the end of a failed stream's back-off, to open it again (and soon,
            # when the group may send news).
            until = min(deadline, next_retry)
            if self._membership is not None:
                until = min(until, time.monotonic() + MEMBERSHIP_CHECK_S)
            arrival = self._next_arrival(until)
            if arrival is not None:
                self._take(arrival)
            elif time.monotonic() >= deadline:
                return []

    # --- the group's assignment (KIP-848) ---------------------------------------------

    def _reconcile(self) -> bool:
        """Apply the group's news, callbacks included; whether anything changed."""
        membership = self._membership
        update = membership.update() if membership is not None else None
        if membership is None or update is None:
            return False
        if update.lost:
            lost = sorted(self._positions)
            self.assign([])
            if lost and self._on_lost is not None:
                self._on_lost(lost)
            membership.lost_handled()
            return True
        assert update.assignment is not None
        target = update.assignment
        owned = set(self._positions)
        self._revoke(owned - target)
        self.assign(sorted(target))
        added = sorted(target - owned)
        if added and self._on_assign is not None:
            self._on_assign(added)
        membership.reconciled(frozenset(target))
        return True

    def _revoke(self, revoked: set[TopicPartition]) -> None:
        """Before partitions go: their positions committed (auto-commit), then
        ``on_revoke`` (where an application commits its own)."""
        if not revoked:
            return
        if self._auto_commit:
            positions = {
                tp: OffsetAndMetadata(position)
                for tp, position in self._positions.items()
                if tp in revoked and position is not None
            }
            try:
                if positions:
                    self._group_client().commit(positions)
            except TierlogError as error:  # the next owner re-reads: at least once
                log.warning("the commit of revoked partitions failed: %s", error)
        if self._on_revoke is not None:
            self._on_revoke(sorted(revoked))

    def metrics(self) -> dict[str, float]:
        """Kafka's ``consumer-fetch-manager-metrics`` by name: ``records-consumed-rate``,
        ``records-lag-max``, ... (``client_metrics``)."""
        return self._metrics.snapshot()

    def close(self) -> None:
        if self._membership is not None:
            self.unsubscribe()  # commits (auto-commit) and revokes, then leaves
        elif self._auto_commit:
            try:
                self.commit()
            except TierlogError as error:  # closing goes on, as Kafka's consumer does
                log.warning("the commit on close failed: %s", error)
        if self._committer is not None:
            self._committer.shutdown(wait=True)
        sessions, self._sessions, self._streams = list(self._sessions.values()), {}, {}
        for session in sessions:
            session.cancel()
        super().close()  # closing its channels ends the calls still running
        for session in sessions:  # none outlives the consumer
            session.join(CLOSE_WAIT_S)

    # --- committed offsets ------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        """Store ``offsets`` (by default every assigned partition's position) as the
        group's, once the coordinator's log committed them (Kafka's ``commitSync``)."""
        group = self._group_client()
        chosen = self._offsets_to_commit(offsets)
        if chosen:
            group.commit(chosen)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
        callback: CommitCallback | None = None,
    ) -> Future[None]:
        """``commit`` on the consumer's commit thread: commits are sent one at a time, in
        the order asked (Kafka's ``commitAsync``); ``callback`` is told how it went."""
        group = self._group_client()
        chosen = self._offsets_to_commit(offsets)
        if self._committer is None:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="tierlog-commit")

        def commit() -> None:
            try:
                if chosen:
                    group.commit(chosen)
            except BaseException as error:
                if callback is not None:
                    callback(chosen, error)
                raise
            if callback is not None:
                callback(chosen, None)

        return self._committer.submit(commit)

    def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of ``partitions`` (None: none committed)."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        found = self._group_client().committed(wanted)
        return {tp: found.get(tp) for tp in wanted}

    def _group_client(self) -> GroupClient:
        if self._group is None:
            raise InvalidGroupIdError(
                "committed offsets need a group.id (this consumer was given none)"
            )
        return self._group

    def _offsets_to_commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is not None:
            return {TopicPartition(*tp): committed for tp, committed in offsets.items()}
        return {
            tp: OffsetAndMetadata(position)
            for tp, position in self._positions.items()
            if position is not None
        }

    def _maybe_auto_commit(self) -> None:
        if not self._auto_commit or time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
        self.commit_async(callback=_log_failed_auto_commit)

    def _take_buffered(self) -> list[ConsumerRecord]:
        taken: list[ConsumerRecord] = []
        room = self.config.max_poll_records
        for tp, buffered in self._buffers.items():
            if room and buffered:
                chunk = buffered.take(room)
                taken += chunk
                room -= len(chunk)
                # Past the batches the message ends with too (markers, aborted data).
                position = chunk[-1].offset + 1 if buffered else buffered.next_offset
                self._positions[tp] = position
                if tp in self._fetchable_ends:
                    lag = self._fetchable_ends[tp] - position
                    self._metrics.lags[(tp.topic, tp.partition)] = max(0, lag)
        if taken:
            self._metrics.records.record(len(taken))
        return taken

    # --- fetch sessions ---------------------------------------------------------------

    def _open_streams(self) -> float:
        """Add to its broker's session each assigned partition not read yet and not
        waiting out the back-off of a failure, send what changed, and close the sessions
        left with no partition; when the first still unread may be added (inf: none)."""
        next_retry = math.inf
        if len(self._streams) != len(self._positions):
            now = time.monotonic()
            for tp in self.assignment():
                if tp not in self._streams and self._retry_at.get(tp, 0.0) <= now:
                    self._open_stream(tp)
                if tp not in self._streams:  # backing off, or failed to open just now
                    next_retry = min(next_retry, self._retry_at.get(tp, 0.0))
        for address, session in list(self._sessions.items()):
            if session.partitions:
                session.flush()
            else:
                del self._sessions[address]
                session.cancel()
        return next_retry

    def _open_stream(self, tp: TopicPartition) -> None:
        if self._positions[tp] is None:
            self._initial_positions_meanwhile([tp])
            if self._positions[tp] is None:
                return  # backing off
        try:
            leader = self.cluster.leader(tp)
        except TierlogError as error:
            self._stream_failed(tp, error)
            return
        session = self._sessions.get(leader.address)
        if session is None:
            session = self._sessions[leader.address] = SessionStream(
                leader.address,
                self.cluster.log_stub(leader.address),
                log_service_pb2.FetchSessionRequest(
                    max_bytes=self.config.fetch_max_bytes,
                    max_wait_ms=self.config.fetch_max_wait_ms,
                    min_bytes=self.config.fetch_min_bytes,
                    isolation_level=self._isolation_level,
                ),
                self._arrivals.put,
            )
        session.add(
            tp,
            self.position(tp),
            leader.epoch,
            min(self.config.max_partition_fetch_bytes, self.config.fetch_max_bytes),
        )
        self._streams[tp] = session

    def _drop_stream(self, tp: TopicPartition) -> None:
        """Stop reading ``tp`` (sent with the session's next request)."""
        session = self._streams.pop(tp, None)
        if session is not None:
            session.forget(tp)

    def _next_arrival(self, until: float) -> Arrival | None:
        """The next message (or end) of a session, waited for until ``until``; sessions
        the sidecar stopped answering on are cancelled meanwhile."""
        while True:
            wait_s = min(until - time.monotonic(), STALL_CHECK_S)
            try:
                if wait_s <= 0:
                    arrival = self._arrivals.get_nowait()
                else:
                    arrival = self._arrivals.get(timeout=wait_s)
            except queue.Empty:
                self._cancel_stalled()
                if wait_s < STALL_CHECK_S:
                    return None
                continue
            if arrival is not None:
                return arrival
            self._raise_if_woken()  # else the mark of a wake-up already raised

    def wakeup(self) -> None:
        """End the poll under way (or else the next one) with ``WakeupError``, as Kafka's
        ``wakeup``: from another thread, or from a signal handler (it only sets a flag
        and puts a mark on a ``SimpleQueue``, which is safe there).  How a command stops
        its consumer on SIGINT or SIGTERM: an exception raised by the handler itself
        lands wherever the main thread is, and inside gRPC's ``with condition:`` (a
        Python ``__enter__`` that can raise after taking the lock) it leaves the lock
        held, so gRPC's own threads, and then ``close``, wait for it forever."""
        self._woken = True
        self._arrivals.put(None)

    def _raise_if_woken(self) -> None:
        if self._woken:
            self._woken = False
            raise WakeupError("the consumer was woken up (Consumer.wakeup)")

    def _cancel_stalled(self) -> None:
        """Each message is due within ``fetch.max.wait.ms`` (an empty one if need be), so
        one not there ``request.timeout.ms`` later will not come: as a Fetch would, the
        session times out.  (With ``fetch.max.wait.ms`` 0 a quiet session sends nothing.)"""
        if not self.config.fetch_max_wait_ms:
            return
        limit_s = self._timeout_s + self.config.fetch_max_wait_ms / 1000
        for session in list(self._sessions.values()):
            if session.stalled(limit_s):
                self._session_ended(
                    session,
                    RequestTimedOutError(f"{session.address}: no message in {limit_s} s"),
                )

    def _session_ended(self, session: SessionStream, error: TierlogError | None) -> None:
        """Its partitions are read again after the back-off (error None: the sidecar
        shut down), each failed as its read would have."""
        session.cancel()
        del self._sessions[session.address]
        if isinstance(error, NO_ANSWER) and session.address not in self._unanswering:
            self._unanswering.add(session.address)  # said once, not at every retry
            log.warning(
                "broker %s does not answer (%s); reading its partitions again once it does",
                session.address,
                with_reason(error),
            )
        for tp in session.partitions:
            if self._streams.get(tp) is not session:
                continue
            del self._streams[tp]
            if error is None:
                self._retry_at[tp] = time.monotonic() + self.config.retry_backoff_ms / 1000
            else:
                self._stream_failed(tp, error)

    def _take(self, arrival: Arrival) -> None:
        """Buffer the records of a session's message (or see to the session's end)."""
        session = arrival.session
        if self._sessions.get(session.address) is not session:
            return  # from a session closed or cancelled since
        if arrival.message is None:
            self._session_ended(session, arrival.error)
            return
        session.release()  # the next message may come while this one is decoded
        if self._unanswering:
            self._unanswering.discard(session.address)
        pending = [
            data
            for data in arrival.message.partitions
            if session.current(data)
            and self._streams.get(TopicPartition(data.topic, data.partition)) is session
        ]
        for index, data in enumerate(pending):
            try:
                self._take_partition(session, data)
            except BaseException:  # the rest are read again from their positions
                for rest in pending[index + 1 :]:
                    self._drop_stream(TopicPartition(rest.topic, rest.partition))
                raise

    def _take_partition(
        self, session: SessionStream, data: log_service_pb2.FetchSessionPartitionData
    ) -> None:
        tp = TopicPartition(data.topic, data.partition)
        if data.HasField("error"):
            session.left(tp)
            del self._streams[tp]
            self._stream_failed(tp, error_from_proto(data.error))
            return
        batches = data.record_batches  # (each read of a bytes field copies it)
        self._fetchable_ends[tp] = (
            data.last_stable_offset
            if self._isolation_level == log_service_pb2.ISOLATION_LEVEL_READ_COMMITTED
            else data.high_watermark
        )
        self._metrics.fetches.record(len(batches))
        aborted = AbortedTransactionFilter(
            (txn.producer_id, txn.first_offset) for txn in data.aborted_transactions
        )
        try:
            whole = self._buffer(tp, self.position(tp), batches, aborted)
        except BaseException:
            self._drop_stream(tp)  # the next poll reads from the position again
            raise
        if not whole:  # the records before a damaged batch are returned first, then the
            self._drop_stream(tp)  # read from the damaged batch raises (as Kafka's does)

    def _stream_failed(self, tp: TopicPartition, error: TierlogError) -> None:
        """Act on a stream's error as Kafka's consumer does on a fetch's."""
        self._retry_at[tp] = time.monotonic() + self.config.retry_backoff_ms / 1000
        reason = reason_of(error)
        if isinstance(error, NotLeaderOrFollowerError):
            self.cluster.moved(tp, error.leader_address)
        elif reason == "OFFSET_OUT_OF_RANGE":
            self._positions[tp] = None
            self._reset(tp)  # auto.offset.reset, or NoOffsetForPartitionError
        elif reason == "CORRUPT_MESSAGE":
            # Retriable for a produce (damaged on the way, sent again); stored bytes are
            # damaged for good, and reading them again would spin: raise, as Kafka's
            # consumer does, naming where (a seek past the batch goes on).
            raise CorruptRecordError(
                f"{tp}: corrupt data fetching offset {self._positions[tp]}: {error}"
            ) from error
        elif is_retriable(error):
            self._check_exists(tp, error)
            self.cluster.invalidate(tp.topic)
        else:
            raise error

    def _check_exists(self, tp: TopicPartition, error: TierlogError) -> None:
        """A broker's ``UNKNOWN_TOPIC_OR_PARTITION`` is retriable (it may not know a new
        topic yet), but once fresh metadata has agreed that ``tp`` does not exist for
        ``retry.backoff.max.ms`` (a new topic reaches every broker well within it), polling
        on would return [] for ever: raise it (Kafka's consumer only logs it, each time).
        Partitions a group gave come and go with its assignment instead."""
        if reason_of(error) != UnknownTopicOrPartitionError.reason or self._membership is not None:
            return
        try:
            count = self.cluster.owners(tp.topic, refresh=True).partition_count
        except NO_ANSWER:
            return  # no broker to ask: retried
        except UnknownTopicOrPartitionError:
            self._raise_if_missing_for_long(tp, f"{tp}: the topic does not exist")
            return
        if tp.partition < count:
            self._missing_since.pop(tp, None)
            return
        self._raise_if_missing_for_long(
            tp, f"{tp} does not exist: the topic has {count} partition(s)"
        )

    def _raise_if_missing_for_long(self, tp: TopicPartition, why: str) -> None:
        """``UNKNOWN_TOPIC_OR_PARTITION`` once ``tp`` has been missing for the back-off."""
        now = time.monotonic()
        since = self._missing_since.setdefault(tp, now)
        if now - since >= self.config.retry_backoff_max_ms / 1000:
            raise UnknownTopicOrPartitionError(why)

    def _buffer(
        self, tp: TopicPartition, position: int, data: bytes, aborted: AbortedTransactionFilter
    ) -> bool:
        """Buffer the records at or after ``position`` of the batches in ``data`` but those
        ``aborted`` drops; False when a damaged batch ended them early, after some records
        (before any: raised)."""
        records: list[ConsumerRecord] = []
        next_offset = position
        topic_partition = (tp.topic, tp.partition)
        try:
            for header in iter_batches(data):
                if self.config.check_crcs and not crc_is_valid(data, header):
                    raise CorruptRecordError(f"batch at offset {header.base_offset} fails its CRC")
                next_offset = max(next_offset, header.next_offset)
                if aborted and aborted.drops(data, header):
                    continue
                if header.is_control:
                    continue
                rows = decode_record_rows(data, header)
                if header.base_offset < position:
                    rows = [row for row in rows if row[0] >= position]
                records += map(_new_record, map(add, repeat(topic_partition), rows))
        except CorruptRecordError as error:
            if not records:
                raise CorruptRecordError(
                    f"{tp}: corrupt data at offset {next_offset}: {error}"
                ) from error
            self._buffers[tp] = _Buffered(records, next_offset)
            return False
        if records:
            self._buffers[tp] = _Buffered(records, next_offset)
        else:  # only control batches, aborted data or records before the position
            self._positions[tp] = next_offset
        return True


def _log_failed_auto_commit(
    offsets: Mapping[TopicPartition, OffsetAndMetadata], error: BaseException | None
) -> None:
    if error is not None:  # the next one commits later positions
        log.warning("an automatic commit of %d offsets failed: %s", len(offsets), error)


_ISOLATION_LEVELS = {
    "read_uncommitted": log_service_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED,
    "read_committed": log_service_pb2.ISOLATION_LEVEL_READ_COMMITTED,
}

# ``ConsumerRecord`` from a (topic, partition, *row) tuple, without a Python-level call.
_new_record = functools.partial(tuple.__new__, ConsumerRecord)


class _Buffered:
    """A partition's fetched records not yet returned by ``poll``, and the offset after
    the batches they came in (the position once they are all returned)."""

    __slots__ = ("_next", "_records", "next_offset")

    def __init__(self, records: list[ConsumerRecord] | None = None, next_offset: int = 0) -> None:
        self._records = records or []
        self._next = 0
        self.next_offset = next_offset

    def __bool__(self) -> bool:
        return self._next < len(self._records)

    def take(self, count: int) -> list[ConsumerRecord]:
        chunk = self._records[self._next : self._next + count]
        self._next += len(chunk)
        return chunk
