"""Kafka's RecordAccumulator: records gather per partition into batches the transport drains.

A record joins the last open batch of its partition, or opens a new one.  A batch is
*full* once its size estimate reaches ``batch.size`` (or a record did not fit); a
partition is *ready* to send when its first batch is full, has waited ``linger.ms``
(``retry.backoff.ms``, growing to ``retry.backoff.max.ms``, for a retry), or when the
producer flushes, closes or waits for memory.  ``drain`` takes the first batch of
each given partition, builds it (one v2 batch, compressed with ``compression.type``),
and has the idempotence bookkeeping stamp it.  Nothing here waits or starts a thread:
the transport calls in, with time from the injected ``clock``.

Memory is bounded as Kafka's ``BufferPool`` bounds it: opening a batch reserves
``max(batch.size, the record's upper bound)`` bytes of ``buffer.memory``, held until
the transport ``deallocate``s the batch when its fate is known (stored, or failed for
good), so batches waiting for the sidecar count too.  When the pool is short,
``append`` returns ``MemoryBlocked`` with the deadline (``max.block.ms`` from the
first try): the transport waits for a ``deallocate`` and tries again, and past the
deadline ``append`` raises ``BufferExhaustedError``.  While an append waits, every
partition is ready, so memory comes back without waiting for ``linger.ms``.

``max.request.size`` bounds each record (with a batch header, as Kafka's
``ensureValidRecordSize``), each drained request, and each built batch: a compressed
batch whose estimate was too hopeful is split before it is stamped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tierlog.client.config import ProducerConfig
from tierlog.client.errors import BufferExhaustedError, RecordTooLargeError
from tierlog.client.idempotence import IdempotenceManager, sequence_after
from tierlog.client.partitioner import StickyPartitioner, partition_for_key
from tierlog.client.producer_batch import (
    CompressionRatioEstimator,
    ProducerBatch,
    batch_size_upper_bound,
)
from tierlog.storage.records import NO_TIMESTAMP, Header
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["AppendResult", "MemoryBlocked", "ReadyCheck", "RecordAccumulator"]

Clock = Callable[[], int]
_new_tuple = tuple.__new__


class AppendResult(NamedTuple):
    """Where a record went: record ``record_index`` of ``batch`` (a tuple: one is made
    per record, and a tuple costs a fraction of a dataclass)."""

    batch: ProducerBatch
    record_index: int
    batch_is_full: bool  # the partition has a batch to send: wake the sender
    new_batch_created: bool
    appended_bytes: int  # the record's encoded size


@dataclass(frozen=True)
class MemoryBlocked:
    """Not enough ``buffer.memory`` free: try again (same ``deadline_ms``) after a
    ``deallocate``, or by the deadline, when the append raises instead."""

    deadline_ms: int
    needed_bytes: int


@dataclass(frozen=True)
class ReadyCheck:
    """Partitions with a batch to send now, and when to look again (None: nothing queued)."""

    ready: frozenset[TopicPartition]
    next_check_delay_ms: int | None


class RecordAccumulator:
    """One producer's batches, per partition, and its ``buffer.memory`` pool."""

    def __init__(
        self,
        config: ProducerConfig,
        clock: Clock,
        *,
        idempotence: IdempotenceManager | None = None,
        partitioner: StickyPartitioner | None = None,
        known_leader: Callable[[TopicPartition], str] = lambda _tp: "",
    ) -> None:
        """``known_leader(tp)``: the address the metadata at hand names as ``tp``'s
        leader ("" when none), asked without a request: a retry to a new leader skips
        its back-off."""
        self._config = config
        self._clock = clock
        self._known_leader = known_leader
        self._idempotence = idempotence
        self._partitioner = partitioner or StickyPartitioner(config.batch_size)
        self._ratio = CompressionRatioEstimator()
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._free_memory_bytes = config.buffer_memory
        self._memory_waiters = 0
        self._incomplete: dict[int, ProducerBatch] = {}  # id() -> batch, until deallocated
        self._flushes_in_progress = 0
        self._closed = False
        self._drain_start = 0
        self._topic_partitions: dict[str, list[TopicPartition]] = {}
        # Records of at most this many key and value bytes (and no headers) pass the size
        # checks whatever their varints: the checks are skipped for them.
        self._unchecked_record_bytes = (
            min(config.max_request_size, config.buffer_memory) - batch_size_upper_bound(b"", b"")
        ) - 2 * 5

    # --- append ----------------------------------------------------------------------

    def append(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[Header],
        num_partitions: int,
        partition: int | None = None,
        deadline_ms: int | None = None,
    ) -> AppendResult | MemoryBlocked:
        """Add a record to ``topic`` (at ``partition``, or where the partitioner says).

        A record with timestamp ``NO_TIMESTAMP`` gets the clock's.  Raises
        ``RecordTooLargeError`` if the record alone exceeds ``max.request.size`` or
        ``buffer.memory``, and ``BufferExhaustedError`` if memory is still short at
        ``deadline_ms``.  The producer passes everything by position, once per record:
        keywords cost more to match.
        """
        if self._closed:
            raise RuntimeError("the accumulator is closed")
        now_ms = self._clock()
        if timestamp == NO_TIMESTAMP:
            timestamp = now_ms
        elif timestamp < 0:
            raise ValueError(f"invalid negative timestamp {timestamp}")
        # One partition leaves the sticky partitioner nothing to choose (its draws are all 0).
        sticky = (
            partition is None
            and num_partitions > 1
            and (key is None or self._config.partitioner_ignore_keys)
        )
        if partition is None:
            partition = (
                0
                if num_partitions == 1
                else self._pick_partition(topic, key, num_partitions, sticky)
            )
        elif not 0 <= partition < num_partitions:
            raise ValueError(f"partition {partition} is not in {topic}'s {num_partitions}")
        data_bytes = (0 if key is None else len(key)) + (0 if value is None else len(value))
        if headers or data_bytes > self._unchecked_record_bytes:
            self._check_record_size(key, value, headers)
        known = self._topic_partitions.get(topic)
        if known is not None and partition < len(known):
            tp = known[partition]
        else:
            tp = self._topic_partition(topic, partition)
        queue = self._queues.get(tp)
        result: AppendResult | MemoryBlocked | None = None
        if queue:  # the common case, inlined: the partition's open batch takes it
            last = queue[-1]
            appended_bytes = last.try_append(key, value, timestamp, headers)
            if appended_bytes is not None:
                full = len(queue) > 1 or last.is_full
                index = len(last.timestamps) - 1
                result = _new_tuple(AppendResult, (last, index, full, False, appended_bytes))
                if deadline_ms is None and not sticky:
                    return result
        if result is None:
            upper_bound = self._check_record_size(key, value, headers)
            result = self._append_to_new_batch(
                tp, key, value, timestamp, headers, upper_bound, now_ms, deadline_ms
            )
        if isinstance(result, MemoryBlocked):
            return result
        if deadline_ms is not None:  # this append had been waiting for memory
            self._memory_waiters = max(0, self._memory_waiters - 1)
        if sticky:
            self._partitioner.on_sticky_append(
                topic,
                partition,
                result.appended_bytes,
                num_partitions,
                last_batch_full=self._queues[tp][-1].is_full,
            )
        return result

    def _topic_partition(self, topic: str, partition: int) -> TopicPartition:
        """The one ``TopicPartition`` of each partition, not a new tuple per record."""
        known = [TopicPartition(topic, p) for p in range(partition + 1)]
        self._topic_partitions[topic] = known
        return known[partition]

    def _append_to_new_batch(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[Header],
        upper_bound: int,
        now_ms: int,
        deadline_ms: int | None,
    ) -> AppendResult | MemoryBlocked:
        size = max(self._config.batch_size, upper_bound)
        if size > self._free_memory_bytes:
            return self._blocked(now_ms, deadline_ms, size)
        batch = ProducerBatch(
            tp,
            created_ms=now_ms,
            write_limit_bytes=size,
            reserved_memory_bytes=size,
            compression=self._config.compression,
            ratio=self._ratio,
            is_transactional=bool(self._config.transactional_id),
        )
        # The record first: if it cannot be encoded, no empty batch is left queued.
        appended_bytes = batch.try_append(key, value, timestamp, headers)
        assert appended_bytes is not None, "a fresh batch takes any record that passed the checks"
        self._free_memory_bytes -= size
        queue = self._queues.setdefault(tp, deque())
        if queue:
            queue[-1].close_for_appends()
        queue.append(batch)
        self._incomplete[id(batch)] = batch
        full = len(queue) > 1 or batch.is_full
        return AppendResult(batch, 0, full, True, appended_bytes)

    def _pick_partition(
        self, topic: str, key: bytes | None, num_partitions: int, sticky: bool
    ) -> int:
        if not sticky and key is not None:
            return partition_for_key(key, num_partitions)
        current = self._partitioner.sticky_partition(topic, num_partitions)
        # A switch held back because the partition's last batch was not yet full may
        # happen now that it is full or gone (Kafka's ``partitionChanged``).
        queue = self._queues.get(TopicPartition(topic, current))
        if not queue or queue[-1].is_full:
            self._partitioner.on_sticky_append(
                topic, current, 0, num_partitions, last_batch_full=True
            )
        return self._partitioner.sticky_partition(topic, num_partitions)

    def _check_record_size(
        self, key: bytes | None, value: bytes | None, headers: Sequence[Header]
    ) -> int:
        upper_bound = batch_size_upper_bound(key, value, headers)
        if upper_bound > self._config.max_request_size:
            raise RecordTooLargeError(
                f"the record is {upper_bound} bytes when serialized, more than "
                f"max.request.size ({self._config.max_request_size})"
            )
        if upper_bound > self._config.buffer_memory:
            raise RecordTooLargeError(
                f"the record is {upper_bound} bytes when serialized, more than "
                f"buffer.memory ({self._config.buffer_memory})"
            )
        return upper_bound

    def _blocked(self, now_ms: int, deadline_ms: int | None, size: int) -> MemoryBlocked:
        if deadline_ms is None:
            deadline_ms = now_ms + self._config.max_block_ms
            self._memory_waiters += 1
        if now_ms >= deadline_ms:
            self._memory_waiters = max(0, self._memory_waiters - 1)
            raise BufferExhaustedError(
                f"failed to allocate {size} bytes within the configured max blocking time "
                f"{self._config.max_block_ms} ms; total memory {self._config.buffer_memory}, "
                f"free {self._free_memory_bytes}"
            )
        return MemoryBlocked(deadline_ms, size)

    def abandon_append(self) -> None:
        """The caller of a ``MemoryBlocked`` append gave up without retrying."""
        self._memory_waiters = max(0, self._memory_waiters - 1)

    # --- ready and drain -------------------------------------------------------------

    def ready(self) -> ReadyCheck:
        """Which partitions have a batch to send now (Kafka's ``ready``)."""
        now_ms = self._clock()
        send_all = self._memory_waiters > 0 or self._closed or self._flushes_in_progress > 0
        ready: set[TopicPartition] = set()
        next_delay: int | None = None
        for tp, queue in self._queues.items():
            if not queue:
                continue
            first = queue[0]
            backoff_ms = self._backoff_ms(first)
            waited_ms = now_ms - first.last_attempt_ms
            backing_off = first.attempts > 0 and waited_ms < backoff_ms
            wait_ms = backoff_ms if first.attempts > 0 else self._config.linger_ms
            full = len(queue) > 1 or first.is_full
            if not backing_off and (full or waited_ms >= wait_ms or send_all):
                ready.add(tp)
                continue
            remaining = max(0, wait_ms - waited_ms)
            next_delay = remaining if next_delay is None else min(next_delay, remaining)
        if ready:
            next_delay = 0 if next_delay is None else next_delay
        return ReadyCheck(frozenset(ready), next_delay)

    def drain(
        self,
        partitions: Sequence[TopicPartition],
        max_request_size: int | None = None,
        *,
        batches_per_partition: int = 1,
    ) -> list[ProducerBatch]:
        """Stamped batches of ``partitions`` (those of one sidecar), a partition's
        together and in order: its first, then up to ``batches_per_partition`` in all
        while the next is full, within ``max_request_size`` (default
        ``max.request.size``; the first batch always goes) by their size estimates.  The
        caller builds them (``ProducerBatch.close``: compression and CRC) after letting
        go of the lock.  Retries go first in sequence order; partitions take turns at
        going first across calls."""
        limit = self._config.max_request_size if max_request_size is None else max_request_size
        now_ms = self._clock()
        if self._idempotence is not None:
            self._idempotence.bump_epoch_if_needed()
        drained: list[ProducerBatch] = []
        size = 0
        count = len(partitions)
        start = self._drain_start % count if count else 0
        self._drain_start += 1
        for i in range(count):
            tp = partitions[(start + i) % count]
            for taken in range(batches_per_partition):
                batch = self._drainable(tp, now_ms)
                if batch is None or (taken and not batch.is_full):
                    break  # an open batch after a full one lingers on
                if drained and size + batch.estimated_size_bytes > limit:
                    return drained
                batch = self._split_if_too_large(tp, batch)
                if self._idempotence is not None:
                    self._idempotence.stamp(batch)
                self._queues[tp].popleft()
                batch.close_for_appends()
                batch.drained_ms = now_ms
                size += batch.estimated_size_bytes
                drained.append(batch)
        return drained

    def take_queued(self, partitions: Iterable[TopicPartition]) -> list[ProducerBatch]:
        """The batches of ``partitions`` not in flight (never sent, or waiting to be
        retried), taken out of their queues in order, for the transport to fail: a
        transactional producer's partition its transaction could not take, or the batches
        of a transaction being aborted (Kafka's ``abortUndrainedBatches``)."""
        taken: list[ProducerBatch] = []
        for tp in partitions:
            queue = self._queues.get(tp, deque())
            while queue:
                batch = queue.popleft()
                batch.close_for_appends()
                taken.append(batch)
        return taken

    @property
    def queued_partitions(self) -> list[TopicPartition]:
        return [tp for tp, queue in self._queues.items() if queue]

    @property
    def retrying_partitions(self) -> list[TopicPartition]:
        """Partitions whose next batch waits to be sent again (backing off, maybe)."""
        return [tp for tp, queue in self._queues.items() if queue and queue[0].attempts > 0]

    def _drainable(self, tp: TopicPartition, now_ms: int) -> ProducerBatch | None:
        queue = self._queues.get(tp)
        if not queue:
            return None
        first = queue[0]
        if first.attempts > 0 and now_ms - first.last_attempt_ms < self._backoff_ms(first):
            return None
        if self._idempotence is not None and not self._idempotence.may_drain(first):
            return None
        return first

    def _split_if_too_large(self, tp: TopicPartition, batch: ProducerBatch) -> ProducerBatch:
        limit = self._config.max_request_size
        if batch.has_sequence or batch.record_count < 2 or batch.worst_size_bytes <= limit:
            return batch
        if len(batch.close()) <= limit:  # built here, under the lock: only batches that
            return batch  # may compress past the limit, which must split before stamping
        parts = batch.split(limit)
        queue = self._queues[tp]
        queue.popleft()
        queue.extendleft(reversed(parts))
        del self._incomplete[id(batch)]
        for part in parts:
            self._incomplete[id(part)] = part
        return parts[0]

    def _backoff_ms(self, batch: ProducerBatch) -> int:
        """Kafka's exponential retry backoff (KIP-580) without its jitter, grown by the
        attempts at the partition's current leader: none for a retry whose partition
        has another leader now than its last attempt went to (KIP-951), and from
        ``retry.backoff.ms`` again at a new one (which may not know it leads yet): the
        back-off was for the old one."""
        if batch.attempts == 0:
            return 0
        leader = self._known_leader(batch.topic_partition)
        if leader and leader != batch.sent_to:
            return 0
        backoff = self._config.retry_backoff_ms * 2 ** (max(batch.attempts_at_leader, 1) - 1)
        return int(
            min(backoff, max(self._config.retry_backoff_max_ms, self._config.retry_backoff_ms))
        )

    # --- after a send ----------------------------------------------------------------

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a batch to retry back at the front of its partition, in sequence order
        among other retries (Kafka's ``reenqueue`` and ``insertInSequenceOrder``)."""
        batch.attempts += 1
        batch.attempts_at_leader += 1
        batch.last_attempt_ms = self._clock()
        queue = self._queues.setdefault(batch.topic_partition, deque())
        position = 0
        if batch.has_sequence:
            while (
                position < len(queue)
                and queue[position].has_sequence
                and sequence_after(batch.base_sequence, queue[position].base_sequence)
            ):
                position += 1
        queue.insert(position, batch)

    def deallocate(self, batch: ProducerBatch) -> None:
        """``batch`` is done (stored, or failed for good): its memory goes back to the pool."""
        if self._incomplete.pop(id(batch), None) is not None:
            self._free_memory_bytes += batch.reserved_memory_bytes

    def expired_batches(self) -> list[ProducerBatch]:
        """Queued batches past ``delivery.timeout.ms``, never sent or waiting to be
        retried, taken out of their queues in order (Kafka's ``expiredBatches``); the
        transport fails and deallocates them."""
        now_ms = self._clock()
        expired: list[ProducerBatch] = []
        for queue in self._queues.values():
            while queue:
                first = queue[0]
                if now_ms - first.created_ms < self._config.delivery_timeout_ms:
                    break
                first.close_for_appends()
                expired.append(queue.popleft())
        return expired

    # --- flush and close -------------------------------------------------------------

    def begin_flush(self) -> None:
        """Everything queued is ready until ``end_flush`` (Kafka's ``beginFlush``)."""
        self._flushes_in_progress += 1

    def end_flush(self) -> None:
        self._flushes_in_progress = max(0, self._flushes_in_progress - 1)

    def close(self) -> None:
        """No more appends; everything queued is ready."""
        self._closed = True

    # --- state -----------------------------------------------------------------------

    @property
    def free_memory_bytes(self) -> int:
        return self._free_memory_bytes

    @property
    def incomplete_batches(self) -> tuple[ProducerBatch, ...]:
        """Batches not yet deallocated: queued, in flight, or waiting for a retry."""
        return tuple(self._incomplete.values())

    def queued(self, tp: TopicPartition) -> tuple[ProducerBatch, ...]:
        queue = self._queues.get(tp)
        return () if queue is None else tuple(queue)

    @property
    def has_undrained(self) -> bool:
        return any(self._queues.values())
