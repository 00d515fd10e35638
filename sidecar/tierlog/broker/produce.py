"""Appending a client's record batches: the one produce path under every front door.

A front door (gRPC's ``LogService``, the Kafka listener) decodes its request, then calls
``Appender.target`` (the topic may be written by clients, the acknowledgement is one
Kafka knows, this broker leads the partition in the named epoch) and ``append`` with the
batches as bytes; ``committed`` answers once the in-sync replicas hold them when the
producer asked for ``acks=all``. The batches are validated by the log (Kafka's
LogValidator, ``storage/records/validation.py``) and stored as they came.

An append that cannot wait for an fsync (``Log.append_waits_for_sync``) runs on the event
loop: a validation and a page-cache write, tens of microseconds, where a hop to a thread
and back costs ~0.3 ms of CPU per request (measured on 64 KiB batches: 1.14 -> 0.81 ms
per Produce). A compressed batch is validated there too unless it decodes to more than a
couple of MiB or would wait for the broker's budget of decoded bytes
(``tierlog.validation.max.inflight.decompressed.bytes``, ``storage/records/inflight.py``):
then the append starts again in a thread, so a decompression bomb neither fills memory
nor stalls the loop, whichever front door it came through (measured, always going to a
thread cost lz4 produce 0.82 -> 1.10 ms of sidecar CPU per MiB in 1 MiB batches). A slow
disk that throttles page-cache writes then stalls the loop as it would stall Kafka's
request handlers. ``acks=0`` appends run after their answer, at most
``max_unacknowledged_appends`` at once, and ``drain`` waits for them at shutdown.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

from tierlog.api.errors import InvalidRequestError, InvalidRequiredAcksError
from tierlog.broker.partitions import Leader, Leaders, Partitions
from tierlog.broker.watch import AppendWatch
from tierlog.storage.errors import InvalidTopicError, KafkaStorageError, TierlogError
from tierlog.storage.log import AppendInfo, AppendOrigin, Log
from tierlog.storage.records.inflight import ValidationWouldWait
from tierlog.storage.topic_partition import TopicPartition
from tierlog.storage.verification_guards import VerificationGuard

__all__ = ["Acks", "Appended", "Appender", "CommittingLeader", "Produced"]

log = logging.getLogger(__name__)


class Acks(enum.IntEnum):
    """Kafka's ``acks``: how much of the cluster holds a batch before it is answered."""

    NONE = 0
    LEADER = 1
    ALL = -1


class CommittingLeader(Leader, Protocol):
    """What an acknowledged append needs of replication's ``LeaderPartition``."""

    def check_enough_replicas(self, min_insync_replicas: int) -> None: ...

    def advance_high_watermark(self) -> bool: ...

    async def wait_until_committed(
        self, end_offset: int, min_insync_replicas: int, timeout_s: float
    ) -> None: ...


@dataclass(frozen=True)
class Produced:
    """A produce's answer: Kafka's ProduceResponse partition fields (-1 under acks=0)."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False


@dataclass(frozen=True)
class Appended:
    """Batches in the log, waiting for their answer."""

    log: Log
    info: AppendInfo | None  # None: acks=0, appended (or appending) unacknowledged
    leader: CommittingLeader | None  # set when the answer waits for the in-sync replicas


class Appender:
    def __init__(
        self,
        partitions: Partitions[Leaders[CommittingLeader]],
        watch: AppendWatch,
        internal_topics: Collection[str],
        *,
        max_unacknowledged_appends: int = 64,
        acks_all_timeout_ms: int = 30_000,
    ):
        self.partitions = partitions
        self.watch = watch
        self.internal_topics = internal_topics  # only the broker's coordinators write these
        self.max_unacknowledged_appends = max_unacknowledged_appends
        # How long an acks=all produce waits for the in-sync replicas (Kafka's produce
        # request timeout.ms, 30 s by default): then REQUEST_TIMED_OUT.
        self.acks_all_timeout_ms = acks_all_timeout_ms
        self._unacknowledged: set[asyncio.Task[None]] = set()

    def target(
        self,
        topic: str,
        partition: int,
        leader_epoch: int,
        acks: int,
        *,
        internal: bool = False,
    ) -> tuple[TopicPartition, Log]:
        """The log a produce appends to, after the checks that need no batch: a client may
        not write an internal topic (as Kafka refuses it), acks is 0, 1 or -1, and this
        broker leads the partition in ``leader_epoch``."""
        if topic in self.internal_topics and not internal:
            raise InvalidTopicError(f"cannot append to internal topic {topic}")
        if acks not in Acks._value2member_map_:
            raise InvalidRequiredAcksError(f"acks {acks} is none of 0, 1, -1 (all)")
        return self.partitions.log(topic, partition, leader_epoch)

    async def append(
        self,
        tp: TopicPartition,
        partition_log: Log,
        data: bytes,
        acks: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        *,
        verification_guard: VerificationGuard | None = None,
    ) -> Appended:
        """Validate and append ``data`` (v2 batches) to ``target``'s log; the answer waits
        in ``committed``. A transactional batch verified at its coordinator comes with the
        verification's guard (``Log.append``)."""
        if not data:
            raise InvalidRequestError("a produce request without records")
        if acks == Acks.NONE:
            task = asyncio.create_task(self._append_unacknowledged(tp, partition_log, data))
            self._unacknowledged.add(task)
            task.add_done_callback(self._unacknowledged.discard)
            if len(self._unacknowledged) > self.max_unacknowledged_appends:
                await asyncio.shield(task)  # too many in flight: answer once this one lands
            return Appended(partition_log, info=None, leader=None)
        leader = self._leadership(tp)
        if leader is not None and acks == Acks.ALL:
            leader.check_enough_replicas(partition_log.config.min_insync_replicas)
        try:
            append = functools.partial(
                partition_log.append, data, origin=origin, verification_guard=verification_guard
            )
            if partition_log.append_waits_for_sync(len(data)):
                info = await asyncio.to_thread(append)
            else:
                info = await _append_here_unless_it_waits(append)
        except KafkaStorageError as error:
            # Nothing was stored and the client retries, but the disk is full or failing:
            # the operator must see it here, as Kafka's broker logs it.
            log.error("append to %s failed: %s", tp, error)
            raise
        if leader is not None:
            leader.advance_high_watermark()  # alone in the ISR, the append is committed
        self.watch.appended(tp)
        return Appended(partition_log, info, leader if acks == Acks.ALL else None)

    async def committed(self, appended: Appended) -> Produced:
        """The answer to appended batches, once the in-sync replicas have them if asked."""
        info = appended.info
        if info is None:  # acks=0: nothing to say but the log start
            return Produced(-1, -1, -1, appended.log.log_start_offset)
        if appended.leader is not None:
            await appended.leader.wait_until_committed(
                info.last_offset + 1,
                appended.log.config.min_insync_replicas,
                self.acks_all_timeout_ms / 1000,
            )
        return Produced(
            info.first_offset,
            info.last_offset,
            info.log_append_time_ms,
            info.log_start_offset,
            info.duplicate,
        )

    async def _append_unacknowledged(self, tp: TopicPartition, target: Log, data: bytes) -> None:
        try:
            await asyncio.to_thread(target.append, data)
        except TierlogError as error:
            log.warning("acks=0 produce to %s failed: %s: %s", tp, error.reason, error)
        except Exception:  # nobody to answer: log it
            log.exception("an acks=0 produce to %s failed unexpectedly", tp)
        else:
            leader = self._leadership(tp)
            if leader is not None and leader.log is target:
                leader.advance_high_watermark()
            self.watch.appended(tp)

    def _leadership(self, tp: TopicPartition) -> CommittingLeader | None:
        """``tp``'s leadership on this broker (None without replication: the owner alone
        holds the log, and what it appended is committed)."""
        replicas = self.partitions.replicas
        return None if replicas is None else replicas.leader(tp)

    async def drain(self) -> None:
        """Wait for the acks=0 appends still in flight (at shutdown)."""
        if self._unacknowledged:
            await asyncio.gather(*self._unacknowledged, return_exceptions=True)


async def _append_here_unless_it_waits(append: Callable[..., AppendInfo]) -> AppendInfo:
    """Append on the event loop, or in a thread if validating the data would wait."""
    try:
        return append(may_wait=False)
    except ValidationWouldWait:  # a bomb, or a large batch: nothing was appended
        return await asyncio.to_thread(append)
