"""One partition's reads across the tiers: the local log first, the tier below it.

The log owns the offsets: its ``log_start_offset`` counts the tier (the remote log
manager joins the two), its local segments hold ``[local_log_start_offset, end)``.
A read the log answers with ``OffsetMovedToTieredStorageError`` (the offset is in
the log, below its first local segment) is served by the ``RemoteLogReader``; one
that falls between the tier's end and the local start (nothing is there, e.g. a
segment a cleaner emptied) carries on at the local start, as a local read carries
on into the next segment. ListOffsets by time asks the tier first when the log
holds offsets below its local start, since the first record at or after a time
is there if anywhere. A read_committed read asks ``aborted_transactions`` for the
aborted transactions overlapping what it returns: the tier's transaction indexes, then
the local ones (Kafka's RemoteLogManager searches on into the local segments alike).

A tiered read that fails is logged here, once, with what it names (the object key of
a damaged batch at ERROR: the operator must act; an unreachable store at WARNING: the
client retries), and raised on to be answered with its Kafka error name.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from tierlog.storage.errors import (
    CorruptRecordError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    TierlogError,
)
from tierlog.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    LogRead,
)
from tierlog.storage.records import whole_batches_length
from tierlog.storage.segment import TimestampAndOffset
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.topic_partition import TopicPartition
from tierlog.storage.transaction_index import AbortedTxn

__all__ = ["aborted_transactions", "offset_for_timestamp", "read", "timestamp_lookup_reads_tier"]

logger = logging.getLogger(__name__)  # "log" is the partition's Log here


def read(
    tp: TopicPartition,
    log: Log,
    remote: RemoteLogReader | None,
    offset: int,
    max_bytes: int,
    upper_bound_offset: int | None = None,
) -> LogRead:
    """Whole batches from the one holding ``offset``, from local disk or the tier, and
    none at or past ``upper_bound_offset`` (the high watermark, or the last stable
    offset, which a transaction left open in a tiered segment may hold below its end)."""
    try:
        return log.read(offset, max_bytes, upper_bound_offset=upper_bound_offset)
    except OffsetMovedToTieredStorageError:
        if remote is None:
            raise
    with _failures_logged(tp, f"read at offset {offset}"):
        records = remote.read(tp, offset, max_bytes)
    if not records:  # past the tier's end, below the local start: nothing lies between
        return log.read(
            log.local_log_start_offset, max_bytes, upper_bound_offset=upper_bound_offset
        )
    if upper_bound_offset is not None:
        records = records[: whole_batches_length(records, upper_bound_offset)]
    return LogRead(records, log.log_start_offset, log.log_end_offset)


def aborted_transactions(
    tp: TopicPartition,
    log: Log,
    remote: RemoteLogReader | None,
    start_offset: int,
    upper_bound_offset: int,
) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``, each
    once (a segment still local after its upload lists its own in both places)."""
    found: list[AbortedTxn] = []
    if remote is not None and start_offset < log.local_log_start_offset:
        with _failures_logged(tp, f"aborted transactions from offset {start_offset}"):
            found += remote.collect_aborted_transactions(tp, start_offset, upper_bound_offset)
    found += log.collect_aborted_transactions(start_offset, upper_bound_offset)
    return list(dict.fromkeys(found))


@contextlib.contextmanager
def _failures_logged(tp: TopicPartition, what: str) -> Iterator[None]:
    try:
        yield
    except OffsetOutOfRangeError:
        raise  # the client's to handle (retention moved the start meanwhile)
    except CorruptRecordError as error:
        logger.error("%s: tiered %s refused: %s", tp, what, error)
        raise
    except TierlogError as error:
        logger.warning("%s: tiered %s failed: %s: %s", tp, what, error.reason, error)
        raise


def offset_for_timestamp(
    tp: TopicPartition, log: Log, remote: RemoteLogReader | None, timestamp: int
) -> TimestampAndOffset | None:
    """Kafka's ListOffsets over the whole log (-2 earliest, -1 latest, -3 the largest
    timestamp, -4 the first local offset, -5 the last tiered one, otherwise the first
    record at or after ``timestamp``)."""
    with _failures_logged(tp, f"offset lookup for timestamp {timestamp}"):
        return _offset_for_timestamp(tp, log, remote, timestamp)


def timestamp_lookup_reads_tier(log: Log, remote: RemoteLogReader | None, timestamp: int) -> bool:
    """Whether ``offset_for_timestamp`` looks into the tier's segments (a time, or the
    largest timestamp, on a log whose start is tiered), not only the local log and the
    tier's metadata: what ListOffsets v10's timeout bounds (KIP-1075)."""
    tiered = remote is not None and log.log_start_offset < log.local_log_start_offset
    local_only = (
        EARLIEST_TIMESTAMP,
        LATEST_TIMESTAMP,
        EARLIEST_LOCAL_TIMESTAMP,
        LATEST_TIERED_TIMESTAMP,
    )
    return tiered and timestamp not in local_only


def _offset_for_timestamp(
    tp: TopicPartition, log: Log, remote: RemoteLogReader | None, timestamp: int
) -> TimestampAndOffset | None:
    if timestamp == EARLIEST_LOCAL_TIMESTAMP:
        return TimestampAndOffset(-1, log.local_log_start_offset)
    if timestamp == LATEST_TIERED_TIMESTAMP:
        view = remote.view(tp) if remote is not None else None
        return TimestampAndOffset(-1, view.end_offset - 1) if view and view.top else None
    if remote is None or not timestamp_lookup_reads_tier(log, remote, timestamp):
        return log.offset_for_timestamp(timestamp)
    if timestamp == MAX_TIMESTAMP:
        local = log.offset_for_timestamp(MAX_TIMESTAMP)
        found = remote.max_timestamp(tp)
        if found is None or found.offset < log.log_start_offset:
            return local
        return found if local is None or found.timestamp >= local.timestamp else local
    found = remote.offset_for_timestamp(tp, timestamp, log.log_start_offset)
    if found is not None and found.offset < log.local_log_start_offset:
        return found
    return log.offset_for_timestamp(timestamp)
