"""Kafka's Cleaner: one compaction round over one log.

A round has three steps, as in Kafka:

1. **Map.** Scan the dirty range ``[first dirty, first uncleanable)`` batch by batch,
   putting each record's key and offset into the ``OffsetMap``, until the next batch's
   new keys would not fit the map's budget. Where the map stops is the round's *end
   offset* (always a batch boundary) and the next round's first dirty offset.
2. **Group.** Take every closed segment from the log's first up to the end offset, in
   runs whose sizes add up to at most ``segment.bytes``, whose indexes add up to at most
   ``segment.index.bytes``, and whose offsets fit an int32 above the run's base.
3. **Rewrite.** Per run, write the survivors to ``<base>.log.cleaned`` (with indexes),
   flush it, and let ``Log.replace_segments`` swap it in (``.swap``, old segments
   ``.deleted``, final names), so recovery completes or rolls back a crash at any step.

What survives, for each batch below the end offset (batches at or past it, and
everything of a magic 0/1 message set, a transactional batch or a control batch, are
copied as they are; so aborted transactional data is never removed):

- a record whose key maps to a later offset is gone; so is a keyless record (Kafka's
  "invalid message": compacted topics reject them at produce);
- a tombstone (null value) stays until its batch's delete horizon (KIP-534). The first
  round that keeps it rewrites the batch with attribute bit 6 set and base timestamp
  ``now + delete.retention.ms``; a round after that horizon drops it, unless an earlier
  record of its key is pinned in a batch copied as it is (the tombstone still hides it);
- a batch keeps its base offset, its *last* offset (as Kafka's overrideLastOffset),
  leader epoch, producer id, epoch and base sequence, timestamp type and codec (its
  survivors are compressed again with it); a batch all of whose records went is kept
  as an empty batch when it is its producer's last batch in the cleaned range (so
  producer state survives), and when it is the last batch of its run: every rewritten
  segment therefore ends at the offset its originals ended at, which is what lets
  recovery find the segments a ``.swap`` file replaces, and the log end survive.

Since transactional data and markers are copied as they are, the aborted transactions
of a run are exactly those of its segments: the cleaned segment's transaction index is
theirs, concatenated in order.

A round over a tiered log (``remote.storage.enable``) leaves the local segments wholly
below the tier's end alone (``local_cleaning_floor``): such a segment is a copy of a
tiered one that only waits for local retention, and the tier has its own cleaner.
Rewriting it would cost I/O for nothing, and a run merging it with segments not tiered
yet would be uploaded again, overlapping the tier. Until the tier's end is known here
(``Log.tier_end_known``: after a start, the claim of the tier, or the leader's word for
a follower) a tiered log is not cleaned at all: its end reads 0 meanwhile, which would
let a round rewrite copies of tiered segments.

Every byte a round reads (mapping and rewriting) and writes is drawn from the cleaner's
``throttle`` first, when it has one: one bucket that the local cleaner's threads and the
tier's cleaner share (``log.cleaner.io.max.bytes.per.second``, as Kafka's one throttler).

The map and the rewrite read segments through ``CleanableSegment`` (a local
``LogSegment``, or a tiered segment read through the chunk cache:
``tier.tiered_cleaner``), so the tier is compacted by these same rules.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol, TypeVar

from tierlog.storage.config import TimestampType
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.file_records import Buffer, FileBatch
from tierlog.storage.log import Log
from tierlog.storage.offset_map import OffsetMap, key_cost_bytes
from tierlog.storage.rate_limit import TokenBucket
from tierlog.storage.records import (
    NO_TIMESTAMP,
    BatchHeader,
    CompressionType,
    ReadableBuffer,
    Record,
    compress,
    decode_records,
    decompress,
)
from tierlog.storage.records.batch import (
    RECORDS_OFFSET,
    assemble_batch,
    batch_attributes,
)
from tierlog.storage.records.record import MIN_RECORD_SIZE, encode_record
from tierlog.storage.recovery import CLEANED_SUFFIX
from tierlog.storage.segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    AppendedBatch,
    LogSegment,
    segment_path,
)
from tierlog.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

__all__ = [
    "CleanResult",
    "CleanableSegment",
    "Cleaner",
    "CleanerStats",
    "CleaningRound",
    "LogCleaningAbortedError",
    "RecordSpan",
    "SegmentSizes",
    "empty_batch",
    "filter_batch",
    "group_by_size",
    "group_segments_by_size",
    "is_compactable",
    "local_cleaning_floor",
    "rebuild_batch",
    "records_section",
    "scan_records",
    "segments_to_clean",
]

logger = logging.getLogger(__name__)


class LogCleaningAbortedError(Exception):
    """The round stopped before it finished: asked to, or the log changed under it.

    Segments already swapped in stay (each swap is complete on its own); the cleaner
    checkpoint is not moved, so the next round starts from the old first dirty offset.
    """


@dataclass
class CleanerStats:
    """What one round did (Kafka's CleanerStats)."""

    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    batches_rewritten: int = 0
    batches_kept_empty: int = 0
    tombstones_dropped: int = 0
    segments_read: int = 0
    segments_written: int = 0
    map_keys: int = 0
    map_memory_bytes: int = 0


@dataclass(frozen=True)
class CleanResult:
    end_offset: int  # the next round's first dirty offset
    stats: CleanerStats


class CleanableSegment(Protocol):
    """What a round reads of a closed segment: its offsets, size and batches."""

    @property
    def base_offset(self) -> int: ...

    @property
    def next_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    def batches(self) -> Iterator[FileBatch]:
        """Each batch with its whole bytes, in order."""
        ...

    def headers(self) -> Iterator[FileBatch]:
        """Each batch's header (its bytes may be absent), in order."""
        ...


@dataclass
class CleaningRound:
    """The state one round shares between its steps: the map of the dirty range, where
    it ends, each producer's last batch below that end, and the pinned keys."""

    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int
    should_abort: Callable[[], bool]
    stats: CleanerStats
    end_offset: int = 0
    producer_last_offsets: dict[int, int] = field(default_factory=dict)
    pinned_keys: set[bytes] = field(default_factory=set)

    def check_abort(self) -> None:
        if self.should_abort():
            raise LogCleaningAbortedError("cleaning was aborted")


class Cleaner:
    """Cleans one log at a time with its own offset map (one per cleaner thread)."""

    def __init__(
        self,
        dedupe_buffer_bytes: int,
        *,
        io_buffer_bytes: int = 1024 * 1024,
        throttle: TokenBucket | None = None,
    ):
        self.offset_map = OffsetMap(dedupe_buffer_bytes)
        self.io_buffer_bytes = io_buffer_bytes
        self.throttle = throttle

    def _throttled(self, n_bytes: int) -> None:
        if self.throttle is not None:
            self.throttle.acquire(n_bytes)

    def clean(
        self,
        log: Log,
        first_dirty_offset: int,
        first_uncleanable_offset: int,
        *,
        now_ms: int | None = None,
        should_abort: Callable[[], bool] = lambda: False,
    ) -> CleanResult:
        """Compact ``log`` from its start (its floor) up to where the map of the dirty
        range ends."""
        segments = segments_to_clean(log)
        state = self.plan_round(
            segments,
            first_dirty_offset,
            first_uncleanable_offset,
            now_ms=log.clock_ms() if now_ms is None else now_ms,
            delete_retention_ms=log.config.delete_retention_ms,
            should_abort=should_abort,
        )
        stats = state.stats
        to_clean = [segment for segment in segments if segment.base_offset < state.end_offset]
        config = log.config
        for group in group_segments_by_size(
            to_clean, config.segment_bytes, config.segment_index_bytes
        ):
            self._clean_group(log, group, state)
        logger.info(
            "cleaned %s up to %d: %d of %d records kept, %d -> %d bytes",
            log,
            state.end_offset,
            stats.records_retained,
            stats.records_read,
            stats.bytes_read,
            stats.bytes_written,
        )
        return CleanResult(state.end_offset, stats)

    def plan_round(
        self,
        segments: Sequence[CleanableSegment],
        first_dirty_offset: int,
        first_uncleanable_offset: int,
        *,
        now_ms: int,
        delete_retention_ms: int,
        should_abort: Callable[[], bool] = lambda: False,
    ) -> CleaningRound:
        """Step 1 over closed ``segments`` (from the log's first, in offset order): the
        map of the dirty range and the round's end offset. Groups of the segments below
        it are then rewritten with ``write_survivors``."""
        self.offset_map.clear()
        state = CleaningRound(
            self.offset_map, now_ms, delete_retention_ms, should_abort, CleanerStats()
        )
        state.end_offset = self._build_offset_map(
            segments, first_dirty_offset, first_uncleanable_offset, state
        )
        state.stats.map_keys = len(self.offset_map)
        state.stats.map_memory_bytes = self.offset_map.memory_bytes
        return state

    # -- 1. the offset map ------------------------------------------------------------

    def _build_offset_map(
        self, segments: Sequence[CleanableSegment], start: int, stop: int, state: CleaningRound
    ) -> int:
        """Fill the map from ``start``; returns where it stops (at most ``stop``).

        Also notes each producer's last batch below that point, from batch headers.
        """
        offset_map, stats, producers = state.offset_map, state.stats, state.producer_last_offsets
        for segment in segments:
            if segment.base_offset >= stop:
                break
            if segment.next_offset <= start:  # wholly clean: headers tell the producers
                for header_only in segment.headers():
                    _note_producer(producers, header_only.header)
                continue
            state.check_abort()
            for batch in segment.batches():
                header = batch.header
                if header.base_offset >= stop:
                    return stop
                if header.last_offset >= start and is_compactable(header):
                    spans = scan_records(batch, header)
                    if not self._fits(spans, start):
                        return header.base_offset
                    for span in spans:
                        if span.key is not None and span.offset >= start:
                            offset_map.put(span.key, span.offset)
                    stats.map_records_read += len(spans)
                stats.map_bytes_read += header.size
                self._throttled(header.size)
                _note_producer(producers, header)
        return stop

    def _fits(self, spans: Sequence[RecordSpan], start: int) -> bool:
        """Whether the batch's new keys fit the map; the map's first batch always does."""
        offset_map = self.offset_map
        if not len(offset_map):
            return True
        new_keys = {
            span.key
            for span in spans
            if span.key is not None and span.offset >= start and span.key not in offset_map
        }
        return offset_map.fits(sum(key_cost_bytes(key) for key in new_keys))

    # -- 3. rewriting a group of segments ---------------------------------------------

    def _clean_group(self, log: Log, group: Sequence[LogSegment], state: CleaningRound) -> None:
        config = log.config
        base_offset = group[0].base_offset
        suffixes = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        for suffix in suffixes:  # an aborted round's leftovers
            segment_path(log.directory, base_offset, suffix + CLEANED_SUFFIX).unlink(
                missing_ok=True
            )
        cleaned = LogSegment(
            log.directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_bytes=config.segment_index_bytes,
            active=True,
            suffix=CLEANED_SUFFIX,
        )
        try:
            aborted = (entry for segment in group for entry in segment.txn_index.entries())
            self.write_cleaned(group, cleaned, state, aborted)
            _copy_mtime(group[-1].log.path, cleaned.log.path)
        except BaseException:
            cleaned.delete()
            raise
        if not log.replace_segments([cleaned], group):
            cleaned.delete()
            raise LogCleaningAbortedError(f"{log} changed while it was being cleaned")
        state.stats.segments_read += len(group)
        state.stats.segments_written += 1
        state.stats.bytes_written += cleaned.size

    def write_cleaned(
        self,
        group: Sequence[CleanableSegment],
        cleaned: LogSegment,
        state: CleaningRound,
        aborted: Iterable[AbortedTxn],
    ) -> None:
        """Step 3 for one run: what survives of ``group``'s batches into the new,
        empty ``cleaned`` (which then ends where the run ends), the run's ``aborted``
        transactions (all kept: see above) into its transaction index; sealed (trimmed
        indexes) and flushed."""
        self._write_survivors(group, cleaned, state)
        for entry in aborted:
            cleaned.txn_index.append(entry)
        cleaned.on_become_inactive()
        cleaned.flush()

    def _write_survivors(
        self, group: Sequence[CleanableSegment], cleaned: LogSegment, state: CleaningRound
    ) -> None:
        writer = _SegmentWriter(cleaned, self.io_buffer_bytes, self._throttled)
        last: BatchHeader | None = None
        for segment in group:
            state.check_abort()
            state.stats.bytes_read += segment.size
            for batch in segment.batches():
                last = batch.header
                self._throttled(last.size)
                _filter_batch(batch, state, writer)
        if last is not None and writer.last_offset != last.last_offset:
            writer.write(empty_batch(last), last.last_offset, NO_TIMESTAMP)
            state.stats.batches_kept_empty += 1
        writer.flush()


def _filter_batch(batch: FileBatch, state: CleaningRound, writer: _SegmentWriter) -> None:
    """Write what survives of one batch (see the module docstring)."""
    header = batch.header
    stats = state.stats
    if header.last_offset >= state.end_offset or not is_compactable(header):
        if header.last_offset < state.end_offset and not header.is_control:
            state.pinned_keys.update(
                record.key
                for record in decode_records(batch.buffer, header)
                if record.key is not None
            )
        writer.write(batch.data, header.last_offset, header.max_timestamp)
        return
    section = records_section(batch, header)
    spans = scan_records(batch, header, section)
    horizon = header.delete_horizon_ms
    kept = [span for span in spans if _retain(span, horizon, state)]
    stats.records_read += len(spans)
    stats.records_retained += len(kept)
    tombstones_kept = sum(span.is_tombstone for span in kept)
    stats.tombstones_dropped += sum(span.is_tombstone for span in spans) - tombstones_kept
    if horizon is None and tombstones_kept:  # the first cleaning that keeps a tombstone
        offsets = {span.offset for span in kept}
        records = [r for r in decode_records(batch.buffer, header) if r.offset in offsets]
        rebuilt, max_timestamp = rebuild_batch(
            header, records, state.now_ms + state.delete_retention_ms
        )
        writer.write(rebuilt, header.last_offset, max_timestamp)
        stats.batches_rewritten += 1
    elif len(kept) == len(spans):
        writer.write(batch.data, header.last_offset, header.max_timestamp)
    elif kept:
        rebuilt, max_timestamp = filter_batch(header, section, kept)
        writer.write(rebuilt, header.last_offset, max_timestamp)
        stats.batches_rewritten += 1
    elif state.producer_last_offsets.get(header.producer_id) == header.last_offset:
        writer.write(empty_batch(header), header.last_offset, NO_TIMESTAMP)
        stats.batches_kept_empty += 1


def _retain(span: RecordSpan, horizon: int | None, state: CleaningRound) -> bool:
    key = span.key
    if key is None or state.offset_map.get(key) > span.offset:
        return False
    return not (
        span.is_tombstone
        and horizon is not None
        and state.now_ms >= horizon
        and key not in state.pinned_keys
    )


def is_compactable(header: BatchHeader) -> bool:
    """Whether the cleaner filters this batch's records (it copies the others whole)."""
    return header.magic == 2 and not header.is_transactional and not header.is_control


def _note_producer(producers: dict[int, int], header: BatchHeader) -> None:
    if header.has_producer_id:
        producers[header.producer_id] = header.last_offset


def _copy_mtime(source: Path, target: Path) -> None:
    """Retention falls back to a segment's mtime when it has no timestamps: keep it."""
    stat = source.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))


class _SegmentWriter:
    """Buffers batches and appends them to the cleaned segment in large writes.

    An empty batch is written with no timestamp for the indexes: the time index must only
    name batches whose records carry its timestamp (DumpLogSegments checks records).
    """

    def __init__(self, segment: LogSegment, buffer_bytes: int, throttled: Callable[[int], None]):
        self.segment = segment
        self.buffer_bytes = buffer_bytes
        self.throttled = throttled  # the cleaner's throttle, told each write's bytes
        self.last_offset = -1
        self._pieces: list[Buffer] = []
        self._batches: list[AppendedBatch] = []
        self._bytes = 0

    def write(self, data: Buffer, last_offset: int, max_timestamp: int) -> None:
        size = len(data)
        self._pieces.append(data)
        self._batches.append(AppendedBatch(last_offset, max_timestamp, size))
        self._bytes += size
        self.last_offset = last_offset
        if self._bytes >= self.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        if self._batches:
            self.throttled(self._bytes)
            self.segment.append(self._pieces, self._batches, self._bytes)
        self._pieces, self._batches, self._bytes = [], [], 0


# -- batches the cleaner writes ---------------------------------------------------------


def _attributes(header: BatchHeader, compression: CompressionType, horizon: int | None) -> int:
    return batch_attributes(
        compression,
        header.timestamp_type,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        has_delete_horizon=horizon is not None,
    )


def _finish(
    header: BatchHeader,
    payload: Buffer,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    record_count: int,
) -> bytes:
    return assemble_batch(
        payload,
        attributes=attributes,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        record_count=record_count,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )


def rebuild_batch(
    header: BatchHeader, records: Sequence[Record], delete_horizon_ms: int | None
) -> tuple[bytes, int]:
    """``records`` (a non-empty subset of the batch's) as a batch like ``header``'s.

    Same base and last offset, leader epoch, producer fields, timestamp type and codec;
    each record keeps its offset. The base timestamp is the delete horizon when there
    is one (its attribute bit set), else the first record's. Returns the bytes and the
    batch's max timestamp.
    """
    base_timestamp = records[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
    body = bytearray()
    max_timestamp = -1
    for record in records:
        encode_record(
            body,
            record.offset - header.base_offset,
            record.timestamp - base_timestamp,
            record.key,
            record.value,
            record.headers,
        )
        max_timestamp = max(max_timestamp, record.timestamp)
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    payload = compress(header.compression, body) if header.is_compressed else body
    attributes = _attributes(header, header.compression, delete_horizon_ms)
    return (
        _finish(header, payload, attributes, base_timestamp, max_timestamp, len(records)),
        max_timestamp,
    )


def filter_batch(
    header: BatchHeader, section: ReadableBuffer, kept: Sequence[RecordSpan]
) -> tuple[bytes, int]:
    """The batch with only the ``kept`` records of its records ``section``.

    Nothing in a kept record changes (its offset and timestamp deltas stay relative to
    the unchanged base offset and base timestamp), so its bytes are copied as they are
    and only the header and the compression are new. Returns the bytes and the max
    timestamp.
    """
    view = memoryview(section)
    body = b"".join([view[span.start : span.end] for span in kept])
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = header.base_timestamp + max(span.timestamp_delta for span in kept)
    payload = compress(header.compression, body) if header.is_compressed else body
    attributes = _attributes(header, header.compression, header.delete_horizon_ms)
    return (
        _finish(header, payload, attributes, header.base_timestamp, max_timestamp, len(kept)),
        max_timestamp,
    )


def empty_batch(header: BatchHeader) -> bytes:
    """A batch with no records over ``header``'s offsets (Kafka's writeEmptyHeader)."""
    attributes = _attributes(header, CompressionType.NONE, None)
    return _finish(header, b"", attributes, header.max_timestamp, header.max_timestamp, 0)


# -- reading records without decoding them --------------------------------------------


class RecordSpan(NamedTuple):
    """Where one record lies in its batch's (decompressed) records section."""

    offset: int
    timestamp_delta: int
    key: bytes | None
    is_tombstone: bool
    start: int
    end: int


def records_section(batch: FileBatch, header: BatchHeader) -> ReadableBuffer:
    """The batch's records, decompressed if need be."""
    section = batch.buffer[header.position + RECORDS_OFFSET : header.end_position]
    return decompress(header.compression, section) if header.is_compressed else section


def scan_records(
    batch: FileBatch, header: BatchHeader, section: ReadableBuffer | None = None
) -> list[RecordSpan]:
    """Each record's offset, key, tombstone flag and extent, without decoding values or
    headers (the cleaner's hot loop: about a third of the cost of ``decode_records``)."""
    data = records_section(batch, header) if section is None else section
    spans: list[RecordSpan] = []
    base_offset, size, position = header.base_offset, len(data), 0
    for _ in range(header.record_count):
        start = position
        length, position = _varint(data, position)
        end = position + length
        if length < MIN_RECORD_SIZE - 1 or end > size:
            raise CorruptRecordError(f"record at {start} of batch {base_offset} overruns it")
        timestamp_delta, position = _varint(data, position + 1)  # after the attributes
        offset_delta, position = _varint(data, position)
        key_length, position = _varint(data, position)
        key = None
        if key_length >= 0:
            key = bytes(data[position : position + key_length])
            position += key_length
        value_length, _ = _varint(data, position)
        spans.append(
            RecordSpan(
                base_offset + offset_delta, timestamp_delta, key, value_length < 0, start, end
            )
        )
        position = end
    if position != size:
        raise CorruptRecordError(f"batch {base_offset} holds bytes beyond its records")
    return spans


def _varint(data: ReadableBuffer, position: int) -> tuple[int, int]:
    """A zigzag varint (or varlong) at ``position``; returns it and the next position."""
    byte = data[position]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), position + 1
    raw, shift = byte & 0x7F, 7
    while True:
        position += 1
        byte = data[position]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), position + 1
        shift += 7
        if shift > 63:
            raise CorruptRecordError("a varint runs past 10 bytes")


def local_cleaning_floor(log: Log) -> int:
    """Below this offset a local round reads and rewrites nothing: 0, or for a tiered log
    the tier's end, or the log end while that is not known here (see the module doc)."""
    if not log.config.remote_storage_enable:
        return 0
    return log.tiered_end_offset if log.tier_end_known else log.log_end_offset


def segments_to_clean(log: Log) -> list[LogSegment]:
    """The segments a local round may read and rewrite: the closed ones (never the
    active segment) that reach past the floor."""
    floor = local_cleaning_floor(log)
    return [segment for segment in log.segments[:-1] if segment.next_offset > floor]


# -- 2. grouping ----------------------------------------------------------------------


class SegmentSizes(NamedTuple):
    """What grouping weighs of a segment: its log and index bytes and its offsets."""

    base_offset: int
    next_offset: int
    log_bytes: int
    offset_index_bytes: int
    time_index_bytes: int


_Segment = TypeVar("_Segment")


def group_segments_by_size(
    segments: Sequence[LogSegment], max_bytes: int, max_index_bytes: int
) -> list[list[LogSegment]]:
    """Runs of consecutive local segments that one rewritten segment can hold."""
    return group_by_size(segments, _local_sizes, max_bytes, max_index_bytes)


def _local_sizes(segment: LogSegment) -> SegmentSizes:
    return SegmentSizes(
        segment.base_offset,
        segment.next_offset,
        segment.size,
        segment.offset_index.size_bytes,
        segment.time_index.size_bytes,
    )


def group_by_size(
    segments: Sequence[_Segment],
    sizes: Callable[[_Segment], SegmentSizes],
    max_bytes: int,
    max_index_bytes: int,
) -> list[list[_Segment]]:
    """Runs of consecutive segments that one rewritten segment can hold (Kafka's rule:
    their logs and each kind of index add up to at most the limits, and their offsets
    fit an int32 above the run's base)."""
    groups: list[list[_Segment]] = []
    remaining = list(segments)
    while remaining:
        group = [remaining.pop(0)]
        first = sizes(group[0])
        log_bytes, offset_index_bytes, time_index_bytes = (
            first.log_bytes,
            first.offset_index_bytes,
            first.time_index_bytes,
        )
        while remaining:
            candidate = sizes(remaining[0])
            log_bytes += candidate.log_bytes
            offset_index_bytes += candidate.offset_index_bytes
            time_index_bytes += candidate.time_index_bytes
            if (
                log_bytes > max_bytes
                or offset_index_bytes > max_index_bytes
                or time_index_bytes > max_index_bytes
                or candidate.next_offset - 1 - first.base_offset > INT32_MAX
            ):
                break
            group.append(remaining.pop(0))
        groups.append(group)
    return groups
