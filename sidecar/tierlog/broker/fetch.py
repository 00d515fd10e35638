"""Reading partitions for consumers: the one fetch path under every front door.

A fetch reads whole batches as the log holds them (local, or from the remote tier below
the local log start: ``tiered_reads``), up to the high watermark, or under read_committed
(Kafka's ``FetchIsolation.TXN_COMMITTED``) up to the last stable offset with the aborted
transactions overlapping the batches returned, as Kafka's ``UnifiedLog.read`` does. A
long poll reads, and when it found fewer than ``min_bytes`` waits on the partitions'
append events (``watch``) and reads again, until ``wait_s`` passes. Each look checks
again that this broker leads every partition in the epoch asked (a change of role wakes
it too), so a deposed leader stops serving at once, with the reason. Reads run in a
thread (local files or the tier's GETs); the loop only waits.

The partitions of one fetch whose offsets lie in the tier are read at once, on up to
``partition_concurrency`` threads, not one after another (Kafka serves one remote
partition per fetch, apache/kafka#19336): a tiered read waits on GETs, and eight of them
in flight take about as long as one. The answers are still exactly those of reading the
partitions in turn: each partition read ahead gets the share of the budget it would get
in turn when that is knowable in advance (its own limit, while the limits up to it fit
in ``max_bytes``), else the budget split evenly; a partition whose turn gives it another
share is read again in turn, from the chunks its first read brought into the cache. The
fetch waits for every read it started before it answers.

``list_offset`` answers ListOffsets: the earliest, the latest a consumer can read, or the
first offset at or after a timestamp, local or tiered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from tierlog.api.errors import InvalidRequestError, RequestTimedOutError
from tierlog.broker.partitions import Leader, Leaders, Partitions
from tierlog.broker.watch import AppendWatch
from tierlog.storage.errors import OffsetOutOfRangeError, TierlogError
from tierlog.storage.log import EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP, LATEST_TIMESTAMP, Log
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH, iter_batches
from tierlog.storage.tier import tiered_reads
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "MAX_WAIT_MS",
    "AbortedTransaction",
    "FetchAnswer",
    "FetchReader",
    "ListedOffset",
    "PartitionFetch",
    "next_offset",
]

# The longest a fetch may wait, whatever it asks (Kafka caps fetch.max.wait.ms alike).
MAX_WAIT_MS = 60_000


class AbortedTransaction(NamedTuple):
    """A transaction aborted within the batches returned: its producer and first offset."""

    producer_id: int
    first_offset: int


class FetchAnswer(NamedTuple):
    """One partition's fetch: its batches and where its log stands."""

    record_batches: bytes
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    aborted_transactions: Sequence[AbortedTransaction] = ()


@dataclass(frozen=True)
class PartitionFetch:
    """What a fetch asks of one partition."""

    tp: TopicPartition
    offset: int
    max_bytes: int
    leader_epoch: int = NO_PARTITION_LEADER_EPOCH


class ListedOffset(NamedTuple):
    """A ListOffsets answer: the offset and its record's timestamp (-1, -1: none)."""

    offset: int
    timestamp_ms: int


class FetchReader:
    def __init__(
        self,
        partitions: Partitions[Leaders[Leader]],
        watch: AppendWatch,
        remote: RemoteLogReader | None = None,
        *,
        partition_concurrency: int = 10,
    ):
        """``partition_concurrency``: tiered partitions of a fetch read at once (Kafka's
        ``remote.log.reader.threads``; 1 reads them in turn)."""
        self.partitions = partitions
        self.watch = watch
        self.remote = remote  # serves offsets below the local log start
        self.partition_concurrency = max(partition_concurrency, 1)
        self._pool = ThreadPoolExecutor(self.partition_concurrency, "fetch-tiered")

    def close(self) -> None:
        """Wait for the reads in flight; no fetch reads afterwards."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    async def long_poll(
        self,
        fetches: Sequence[PartitionFetch],
        max_bytes: int,
        min_bytes: int,
        wait_s: float | None,
        read_committed: bool,
    ) -> list[FetchAnswer | TierlogError]:
        """Each partition's batches (or why not) once they add up to ``min_bytes`` (at
        least one byte) or a partition has an error; or what there is when ``wait_s``
        passed (None: no limit) or the broker shuts down. Together the batches stay
        within ``max_bytes``, but for the first one returned (Kafka's KIP-74: a consumer
        always makes progress)."""
        loop = asyncio.get_running_loop()
        deadline = None if wait_s is None else loop.time() + wait_s
        while True:
            appended = [self.watch.event(fetch.tp) for fetch in fetches]
            answers = await asyncio.to_thread(self.read_many, fetches, max_bytes, read_committed)
            found = sum(len(a.record_batches) for a in answers if isinstance(a, FetchAnswer))
            failed = any(isinstance(answer, TierlogError) for answer in answers)
            remaining_s = None if deadline is None else deadline - loop.time()
            timed_out = remaining_s is not None and remaining_s <= 0
            if found >= max(min_bytes, 1) or failed or timed_out or self.watch.closed:
                return answers
            await self.watch.wait_any(appended, remaining_s)

    def read_many(
        self, fetches: Sequence[PartitionFetch], max_bytes: int, read_committed: bool
    ) -> list[FetchAnswer | TierlogError]:
        """Blocking: each partition's batches, or why not, as if read in turn within
        ``max_bytes`` together (bar the first batch); once it is spent, the partitions
        left are read for where their logs stand only. Tiered partitions are read at
        once first (see the module's docstring)."""
        located: list[tuple[TopicPartition, Log] | TierlogError] = []
        for fetch in fetches:
            try:
                located.append(
                    self.partitions.log(fetch.tp.topic, fetch.tp.partition, fetch.leader_epoch)
                )
            except TierlogError as error:
                located.append(error)
        early = self._read_tiered_at_once(fetches, located, max_bytes, read_committed)
        try:
            return self._in_turn(fetches, located, max_bytes, read_committed, early)
        finally:
            for _limit, future in early.values():
                future.cancel()
            for _limit, future in early.values():
                if not future.cancelled():
                    future.exception()  # ended, whatever it raised: nothing runs on

    def _read_tiered_at_once(
        self,
        fetches: Sequence[PartitionFetch],
        located: Sequence[tuple[TopicPartition, Log] | TierlogError],
        max_bytes: int,
        read_committed: bool,
    ) -> dict[int, tuple[int, Future[FetchAnswer | TierlogError]]]:
        """Start reading the partitions whose offsets lie in the tier, when more than one
        does: fetch index -> (the byte limit it is read with, its read)."""
        tiered = [
            index
            for index, (fetch, where) in enumerate(zip(fetches, located, strict=True))
            if not isinstance(where, TierlogError)
            and 0 <= fetch.offset < where[1].local_log_start_offset
        ]
        if len(tiered) < 2 or self.partition_concurrency < 2 or max_bytes <= 0:
            return {}
        limits = [min(fetch.max_bytes, max_bytes) for fetch in fetches]
        fits = sum(limits[: tiered[-1] + 1]) <= max_bytes  # each gets its own limit in turn
        share = max(max_bytes // len(tiered), 1)
        early: dict[int, tuple[int, Future[FetchAnswer | TierlogError]]] = {}
        for index in tiered:
            where = located[index]
            assert not isinstance(where, TierlogError)
            fetch, limit = fetches[index], limits[index] if fits else min(limits[index], share)
            try:
                future = self._pool.submit(
                    self._answer, fetch.tp, where[1], fetch.offset, limit, read_committed
                )
            except RuntimeError:  # closed (shutting down): the rest are read in turn
                break
            early[index] = (limit, future)
        return early

    def _in_turn(
        self,
        fetches: Sequence[PartitionFetch],
        located: Sequence[tuple[TopicPartition, Log] | TierlogError],
        max_bytes: int,
        read_committed: bool,
        early: dict[int, tuple[int, Future[FetchAnswer | TierlogError]]],
    ) -> list[FetchAnswer | TierlogError]:
        budget = max_bytes
        answers: list[FetchAnswer | TierlogError] = []
        for index, (fetch, where) in enumerate(zip(fetches, located, strict=True)):
            if isinstance(where, TierlogError):
                answers.append(where)
                continue
            limit = min(fetch.max_bytes, budget)
            read_early = early.get(index)
            if read_early is not None and read_early[0] == limit:
                answer = read_early[1].result()
            else:
                answer = self._answer(fetch.tp, where[1], fetch.offset, limit, read_committed)
            answers.append(answer)
            if isinstance(answer, FetchAnswer):
                budget = max(0, budget - len(answer.record_batches))
        return answers

    def _answer(
        self,
        tp: TopicPartition,
        partition_log: Log,
        offset: int,
        max_bytes: int,
        read_committed: bool,
    ) -> FetchAnswer | TierlogError:
        try:
            return self.read(tp, partition_log, offset, max_bytes, read_committed)
        except TierlogError as error:
            return error

    def read(
        self,
        tp: TopicPartition,
        partition_log: Log,
        offset: int,
        max_bytes: int,
        read_committed: bool,
    ) -> FetchAnswer:
        """Blocking (local files or the tier's GETs): called in a thread. Consumers see
        only what every in-sync replica holds: the log below the high watermark; under
        read_committed only below the last stable offset, with the aborted transactions
        overlapping the batches returned (from the fetched offset, as Kafka lists them).
        ``max_bytes`` 0 reads no batch, only where the log stands."""
        high_watermark = self.partitions.high_watermark(tp, partition_log)
        # Answered under either level, as Kafka's FetchResponse does: a read_uncommitted
        # reader sees how far the decided records go too.
        last_stable = partition_log.stable_offset_below(high_watermark)
        if max_bytes <= 0:
            return FetchAnswer(b"", high_watermark, partition_log.log_start_offset, last_stable)
        upper_bound = last_stable if read_committed else high_watermark
        read = tiered_reads.read(
            tp, partition_log, self.remote, offset, max_bytes, upper_bound_offset=upper_bound
        )
        if not read_committed or not read.records:
            return FetchAnswer(read.records, high_watermark, read.log_start_offset, last_stable)
        aborted = tiered_reads.aborted_transactions(
            tp, partition_log, self.remote, offset, next_offset(read.records)
        )
        return FetchAnswer(
            read.records,
            high_watermark,
            read.log_start_offset,
            last_stable,
            [AbortedTransaction(txn.producer_id, txn.first_offset) for txn in aborted],
        )

    def start_offset(
        self, tp: TopicPartition, partition_log: Log, offset: int, read_committed: bool
    ) -> int:
        """Where a subscription starts: ``offset``, or the log start for -2, the fetchable
        end for -1."""
        if offset == EARLIEST_TIMESTAMP:
            return partition_log.log_start_offset
        if offset == LATEST_TIMESTAMP:
            return self.fetchable_end(tp, partition_log, read_committed)
        if offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset}: use -2 (earliest) or -1 (latest)")
        return offset

    def fetchable_end(self, tp: TopicPartition, partition_log: Log, read_committed: bool) -> int:
        """Where a consumer's reads end: the last stable offset under read_committed, else
        the high watermark."""
        if read_committed:
            return self.partitions.last_stable_offset(tp, partition_log)
        return self.partitions.high_watermark(tp, partition_log)

    async def list_offset(
        self,
        tp: TopicPartition,
        partition_log: Log,
        timestamp_ms: int,
        read_committed: bool,
        tier_timeout_s: float | None = None,
    ) -> ListedOffset:
        """ListOffsets for one partition: -1 the latest a consumer can read, -2 the log
        start, -3 the largest timestamp, -4 the local log start, -5 the tier's end, else
        the first record at or after ``timestamp_ms`` that a consumer can read. A lookup
        in the tier's segments taking over ``tier_timeout_s`` is ``RequestTimedOutError``
        (the thread finishes on its own)."""
        if timestamp_ms < LATEST_TIERED_TIMESTAMP:
            raise InvalidRequestError(
                f"timestamp {timestamp_ms}: use -1, -2, -3, -4, -5 or a time in ms"
            )
        fetchable_end = self.fetchable_end(tp, partition_log, read_committed)
        if timestamp_ms == LATEST_TIMESTAMP:
            return ListedOffset(fetchable_end, -1)
        bounded = tier_timeout_s is not None and tiered_reads.timestamp_lookup_reads_tier(
            partition_log, self.remote, timestamp_ms
        )
        try:
            async with asyncio.timeout(tier_timeout_s if bounded else None):
                found = await asyncio.to_thread(
                    tiered_reads.offset_for_timestamp, tp, partition_log, self.remote, timestamp_ms
                )
        except TimeoutError:
            raise RequestTimedOutError(
                f"{tp}: the lookup of timestamp {timestamp_ms} in the remote tier took over "
                f"{tier_timeout_s} s"
            ) from None
        unreadable = timestamp_ms >= 0 and found is not None and found.offset >= fetchable_end
        if found is None or unreadable:
            return ListedOffset(-1, -1)
        return ListedOffset(found.offset, found.timestamp)


def next_offset(records: bytes) -> int:
    """The offset after the last of ``records``' batches."""
    last = None
    for header in iter_batches(records):
        last = header
    assert last is not None
    return last.next_offset
