"""A log segment: one ``.log`` file with its ``.index``, ``.timeindex`` and ``.txnindex``.

The segment named N holds batches whose offsets are all >= N and below the next
segment's base offset, so each index stores offsets as int32 deltas from N. Index
entries are sparse: one per ``index.interval.bytes`` of log, each pointing at a
batch's *last* offset and its position, which is what Kafka writes and what its
``DumpLogSegments`` verifies. The time index keeps the largest timestamp seen so
far with the last offset of the batch that carried it, growing strictly. The
transaction index (transaction_index.py) lists the transactions aborted by markers
in this segment; the log appends to it, since only the log knows the producers.

A flushed segment found damaged when it is opened keeps its bytes (acknowledged data
may follow the damage, and cutting a middle segment would leave a hole in the
offsets): ``rebuild_indexes`` indexes the batches before the first damaged byte and
records each damaged range, which reads then refuse with CorruptRecordError and
every walk over the batches skips. The index stopping at the damage is what finds it
again at the next start: ``sanity_check`` checks every batch after the last entry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tierlog.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    UnsupportedCompressionTypeError,
)
from tierlog.storage.file_records import Buffer, FileBatch, FileRecords
from tierlog.storage.index import NO_TIMESTAMP, IndexEntry, OffsetIndex, TimeIndex
from tierlog.storage.records import crc_is_valid, decode_records, whole_batches_length
from tierlog.storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

__all__ = [
    "AppendedBatch",
    "LogSegment",
    "RollPolicy",
    "SegmentDamage",
    "SegmentRead",
    "TimestampAndOffset",
    "segment_path",
]

INT32_MAX = 2**31 - 1

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"


def segment_path(directory: Path, base_offset: int, suffix: str) -> Path:
    """Kafka's file name: the base offset in 20 zero-padded digits plus the suffix."""
    return directory / f"{base_offset:020d}{suffix}"


class AppendedBatch(NamedTuple):
    """What the segment must know of each batch it appends, taken from its header."""

    last_offset: int
    max_timestamp: int
    size: int


class SegmentDamage(NamedTuple):
    """Bytes [position, end_position) of a segment's log that are not whole, valid
    batches, and the offsets [first_offset, end_offset) they stand for: the offsets
    between the last valid batch before them and the first valid batch after them (or
    the segment's end, when nothing after the damage checks out)."""

    position: int
    end_position: int
    first_offset: int
    end_offset: int


class SegmentRead(NamedTuple):
    position: int
    records: bytes


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int


@dataclass(frozen=True)
class RollPolicy:
    """When the active segment must give way to a new one (Kafka's shouldRoll)."""

    segment_bytes: int
    segment_ms: int


class LogSegment:
    """Batches in one file plus their sparse indexes; not thread-safe for writers."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        active: bool,
        suffix: str = "",
    ):
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        # Set before the files go: a lock-free reader holding this segment checks it
        # after reading and retries on the log's current segments instead.
        self.deleted = False
        self.log = FileRecords(segment_path(directory, base_offset, LOG_SUFFIX + suffix))
        self.max_index_bytes = max_index_bytes
        self._index_paths = (
            segment_path(directory, base_offset, INDEX_SUFFIX + suffix),
            segment_path(directory, base_offset, TIME_INDEX_SUFFIX + suffix),
        )
        # Kafka's LazyIndex: a sealed segment maps its indexes only when first searched,
        # so a log of thousands of segments does not hold thousands of mappings.
        self._indexes: tuple[OffsetIndex, TimeIndex] | None = None
        self._index_lock = threading.Lock()
        self.txn_index = TransactionIndex(
            segment_path(directory, base_offset, TXN_INDEX_SUFFIX + suffix), base_offset
        )
        try:
            if active:
                self._load_indexes(writable=True)
                last = self.time_index.last_entry()
            else:
                last = TimeIndex.read_last_entry(self._index_paths[1], base_offset)
        except BaseException:  # e.g. no space for the indexes: leave nothing open
            self.log.close()
            raise
        self.created_ms = int(time.time() * 1000)
        # When this process first wrote to the segment (or opened it, holding data): how
        # long its oldest records have waited for the tier (the log's clock sets it).
        self.first_append_ms = self.created_ms
        self.roll_jitter_ms = 0  # chosen by the log, subtracted from segment.ms
        self.bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self.max_timestamp_so_far = last.key if last else NO_TIMESTAMP
        self.offset_of_max_timestamp = last.value if last else base_offset
        self._next_offset: int | None = None
        self.damage: tuple[SegmentDamage, ...] = ()  # set by rebuild_indexes

    # -- indexes ----------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        indexes = self._indexes or self._load_indexes(writable=False)
        return indexes[0]

    @property
    def time_index(self) -> TimeIndex:
        indexes = self._indexes or self._load_indexes(writable=False)
        return indexes[1]

    def _load_indexes(self, *, writable: bool) -> tuple[OffsetIndex, TimeIndex]:
        with self._index_lock:
            if self._indexes is not None:
                return self._indexes
            if self.deleted:  # a reader racing retirement: it retries on live segments
                raise OffsetOutOfRangeError(f"segment {self.base_offset} was deleted")
            offset_path, time_path = self._index_paths
            offsets = OffsetIndex(
                offset_path, self.base_offset, self.max_index_bytes, writable=writable
            )
            try:
                times = TimeIndex(
                    time_path, self.base_offset, self.max_index_bytes, writable=writable
                )
            except BaseException:
                offsets.close()
                raise
            self._indexes = (offsets, times)
            return self._indexes

    def release_indexes(self) -> None:
        """Let a sealed segment's index mappings go until they are searched again.

        Safe under concurrent readers: a reader keeps the mapping it holds alive; the
        files were trimmed when the segment was sealed, so nothing needs writing."""
        with self._index_lock:
            self._indexes = None

    # -- size and offsets -------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (its base offset when empty)."""
        if self._next_offset is None:
            self._next_offset = self._read_next_offset()
        return self._next_offset

    def _read_next_offset(self) -> int:
        start = self.offset_index.lookup(2**63 - 1).value
        if not 0 <= start < self.size:
            start = 0  # a damaged index (sanity_check will say so): do not read through it
        next_offset = self.base_offset
        for batch in self.headers(start):
            next_offset = batch.header.last_offset + 1
        return next_offset

    def can_hold_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's modification time when it has none."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return int(self.log.path.stat().st_mtime * 1000)

    # -- appending --------------------------------------------------------------------

    def append(
        self, pieces: Sequence[Buffer], batches: Sequence[AppendedBatch], total_bytes: int
    ) -> None:
        """Write already-offset-assigned batches and index them.

        ``pieces`` are the bytes of ``batches`` in order (possibly split into several
        buffers so header patches need no copy of the payload), ``total_bytes`` long.
        """
        if not batches:
            return
        if not self.can_hold_offset(batches[-1].last_offset):
            raise InvalidRecordError(
                f"offset {batches[-1].last_offset} does not fit segment {self.base_offset}"
            )
        self._reserve_index_room(len(batches))
        position = self.log.size
        if position == 0:
            self._rolling_based_timestamp = batches[0].max_timestamp
        self.log.append(pieces, total_bytes)
        for last_offset, max_timestamp, size in batches:
            if max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = max_timestamp
                self.offset_of_max_timestamp = last_offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes and self._has_room():
                self.offset_index.append(last_offset, position)
                self.time_index.maybe_append(
                    self.max_timestamp_so_far, self.offset_of_max_timestamp
                )
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += size
            position += size
        self._next_offset = batches[-1].last_offset + 1

    def _reserve_index_room(self, batches: int) -> None:
        # Each batch adds at most one entry to each index, and sealing the segment one
        # more to the time index: with their blocks reserved before the log is written,
        # a full disk fails the append here and leaves the segment as it was.
        self.offset_index.reserve(self.offset_index.entries + batches)
        self.time_index.reserve(self.time_index.entries + batches + 1)

    def _has_room(self) -> bool:
        # A request of many batches can fill an index part way (the roll check runs once
        # per request): later batches go unindexed rather than fail after being written.
        return not (self.offset_index.is_full or self.time_index.is_full)

    def should_roll(
        self,
        policy: RollPolicy,
        *,
        incoming_bytes: int,
        incoming_max_timestamp: int,
        incoming_last_offset: int,
        now_ms: int,
    ) -> bool:
        """Kafka's roll rule: full by size, old by time, a full index, or an offset overflow."""
        waited_ms = self._time_waited_for_roll(now_ms, incoming_max_timestamp)
        return (
            self.size > policy.segment_bytes - incoming_bytes
            or (self.size > 0 and waited_ms > policy.segment_ms - self.roll_jitter_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or not self.can_hold_offset(incoming_last_offset)
        )

    def _time_waited_for_roll(self, now_ms: int, incoming_timestamp: int) -> int:
        if self._rolling_based_timestamp is None and self.size > 0:
            first = self.log.header_at(0)
            self._rolling_based_timestamp = first.header.max_timestamp if first else NO_TIMESTAMP
        if self._rolling_based_timestamp is not None and self._rolling_based_timestamp >= 0:
            return incoming_timestamp - self._rolling_based_timestamp
        return now_ms - self.created_ms

    def on_become_inactive(self) -> None:
        """Seal the segment: the final time-index entry, then trimmed index files."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, max_index_bytes: int) -> None:
        """Preallocate the indexes again (the segment is the active one)."""
        self.max_index_bytes = max_index_bytes
        self.offset_index.max_entries = max(max_index_bytes // 8, 1)
        self.time_index.max_entries = max(max_index_bytes // 12, 1)
        self.offset_index.resize(max_index_bytes)
        self.time_index.resize(max_index_bytes)

    # -- reading ----------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> FileBatch | None:
        """The first batch holding an offset >= ``offset``, if any (header only)."""
        start = max(self.offset_index.lookup(offset).value, start_position)
        for batch in self.headers(start):
            if batch.header.last_offset >= offset:
                return batch
        return None

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_position: int | None = None,
        upper_bound_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> SegmentRead | None:
        """Whole batches from the one holding ``start_offset``, within ``max_bytes``.

        The first batch is returned even when larger than ``max_bytes`` (if
        ``min_one_batch``) so a consumer can always make progress. Batches at or past
        ``upper_bound_offset`` or ``max_position`` are not returned.
        """
        end = self.size if max_position is None else min(max_position, self.size)
        self._refuse_damaged(start_offset)
        first = self.translate_offset(start_offset)
        if first is None or first.position >= end:
            return None
        end = min([end, *(d.position for d in self.damage if d.position > first.position)])
        window_bytes = min(max(max_bytes, 0), end - first.position)
        if self._holds_first_batch_alone(first, window_bytes, end):
            header = first.header
            answered = first.end <= end and (header.size <= window_bytes or min_one_batch)
            if answered and (upper_bound_offset is None or header.last_offset < upper_bound_offset):
                return SegmentRead(first.position, self.log.read(first.position, header.size))
            return SegmentRead(first.position, b"")
        # One read of the window, then a walk over its headers in memory: a header read
        # per batch cost more than the copy of the one batch cut off at the window's end.
        window = self.log.read(first.position, window_bytes)
        length = whole_batches_length(window, upper_bound_offset)
        if length == 0 and min_one_batch:  # the first batch alone may be over max_bytes
            batch = self.log.header_at(first.position, end)
            if batch is not None and (
                upper_bound_offset is None or batch.header.last_offset < upper_bound_offset
            ):
                return SegmentRead(first.position, self.log.read(first.position, batch.header.size))
        return SegmentRead(first.position, window if length == len(window) else window[:length])

    def _holds_first_batch_alone(self, first: FileBatch, window_bytes: int, end: int) -> bool:
        """Whether a window of ``window_bytes`` from ``first`` holds no other whole batch:
        then ``first`` is read alone, not the window and a copy of its whole part (1 MiB
        of batches near 1 MiB each, Kafka's max.partition.fetch.bytes: the copy of
        ~1 MiB into fresh memory cost a Fetch more than this one header's read)."""
        if 2 * first.header.size <= window_bytes:  # room for more, perhaps many
            return False
        try:
            following = self.log.header_at(first.end, end)
        except (CorruptRecordError, UnsupportedCompressionTypeError):  # damaged since
            return True
        return following is None or first.header.size + following.header.size > window_bytes

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int
    ) -> TimestampAndOffset | None:
        """First record at or after ``start_offset`` whose timestamp is >= ``timestamp``."""
        indexed = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(indexed.value, start_offset)).value
        for batch in self.batches(position):
            header = batch.header
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            for record in decode_records(batch.buffer, header):
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return TimestampAndOffset(record.timestamp, record.offset)
        return None

    def batches(self, start_position: int = 0) -> Iterator[FileBatch]:
        """The batches (with their bytes) from ``start_position``, stepping over damage."""
        return self._walk(self.log.batches, start_position)

    def headers(self, start_position: int = 0) -> Iterator[FileBatch]:
        """The batch headers from ``start_position``, stepping over damage."""
        return self._walk(self.log.headers, start_position)

    def _walk(
        self, walk: Callable[[int, int | None], Iterator[FileBatch]], start_position: int
    ) -> Iterator[FileBatch]:
        """``walk`` over the bytes below ``size`` (as it is now) outside ``damage``.

        Those bytes are whole batches: appends are whole, and at opening recovery cut or
        recorded everything else. So a walk that cannot go on before its end met damage
        done since (a flipped length field, say), and raises CorruptRecordError there:
        ending quietly would move a read on to the next segment, past every offset left
        in this one."""
        end = self.size
        position = start_position
        for damage in self.damage:
            if damage.end_position > position:
                yield from self._whole_batches(walk, position, damage.position)
                position = damage.end_position
        yield from self._whole_batches(walk, position, end)

    def _whole_batches(
        self, walk: Callable[[int, int | None], Iterator[FileBatch]], start: int, end: int
    ) -> Iterator[FileBatch]:
        position = start
        try:
            for batch in walk(start, end):
                yield batch
                position = batch.end
        except (CorruptRecordError, UnsupportedCompressionTypeError) as error:
            raise self._damaged_at(position, str(error)) from error
        if position < end:
            raise self._damaged_at(
                position, f"it claims more than the {end - position} bytes left in the segment"
            )

    def _damaged_at(self, position: int, why: str) -> CorruptRecordError:
        # The base offset leads the header, ahead of the length field a flip most
        # often hits; it names what the reader lost even when the rest is garbage.
        claimed = int.from_bytes(self.log.read(position, 8), "big", signed=True)
        return CorruptRecordError(
            f"{self.log.path}: the batch at byte {position} (offset {claimed} by its "
            f"header) is damaged: {why}"
        )

    def _refuse_damaged(self, offset: int) -> None:
        for damage in self.damage:
            if damage.first_offset <= offset < damage.end_offset:
                raise CorruptRecordError(
                    f"offsets {damage.first_offset}..{damage.end_offset - 1} of "
                    f"{self.log.path} are damaged (bytes {damage.position}.."
                    f"{damage.end_position - 1}); the next readable offset is "
                    f"{damage.end_offset}"
                )

    # -- recovery and truncation ------------------------------------------------------

    def sanity_check(self) -> None:
        """Raise CorruptRecordError when an index cannot belong to this log file, or a
        batch after the one the last offset-index entry points at is not whole and valid.

        Kafka checks the index files only. The unindexed batches (normally under
        ``index.interval.bytes``) are checked too, because a segment rebuilt around
        damage is indexed only up to it: this is how the damage is found again at every
        start instead of being served. The batch the last entry points at was valid
        when it was indexed, and is only walked over."""
        self.offset_index.sanity_check(self.size, self.next_offset)
        self.time_index.sanity_check(self.size)
        self.txn_index.sanity_check()
        next_offset, position = self.base_offset, 0
        last = self.offset_index.last_entry()
        if last is not None:
            indexed = self.log.header_at(last.value)
            if indexed is None:
                raise CorruptRecordError(f"the indexed batch at byte {last.value} is cut short")
            next_offset, position = indexed.header.last_offset + 1, indexed.end
        for batch in self.log.batches(position):
            if not _batch_is_valid(batch, next_offset, self):
                raise CorruptRecordError(f"the batch at byte {batch.position} fails its check")
            next_offset, position = batch.header.last_offset + 1, batch.end
        if position != self.size:
            raise CorruptRecordError(f"bytes {position}..{self.size - 1} are not a whole batch")

    def keep_synced_index_prefix(self, flushed_below: int) -> IndexEntry | None:
        """Where recovery must start checking batches, given that every batch below
        ``flushed_below`` (the recovery point) was synced with the index entries for it:
        the last offset-index entry below it (its batch's last offset and position), or
        None for byte 0.

        Run before the indexes are mapped: the files are cut to the entries kept (a
        crashed active segment's are still preallocated, see index.py)."""
        self.release_indexes()
        offset_path, time_path = self._index_paths
        last = OffsetIndex.keep_synced_prefix(
            offset_path, self.base_offset, flushed_below, self.size
        )
        if last is not None and not self._starts_batch_ending_at(last.value, last.key):
            last = None  # not the batch it names: trust no entry
            OffsetIndex.keep_synced_prefix(offset_path, self.base_offset, self.base_offset, 0)
        TimeIndex.keep_synced_prefix(
            time_path, self.base_offset, self.base_offset - 1 if last is None else last.key
        )
        return last

    def _starts_batch_ending_at(self, position: int, last_offset: int) -> bool:
        try:
            batch = self.log.header_at(position)
        except (CorruptRecordError, UnsupportedCompressionTypeError):
            return False
        return batch is not None and batch.header.last_offset == last_offset

    def recover(self, start_position: int = 0) -> int:
        """Rebuild the offset and time indexes from the log, from ``start_position`` on,
        cutting it at the first invalid batch; returns the number of bytes truncated.

        ``start_position`` 0 rebuilds everything; another is the position of the entry
        ``keep_synced_index_prefix`` returned, and the index entries before it are kept.
        The transaction index loses its entries from there on: the log's producer state
        writes them again (they depend on the transactions open before them, which only
        a replay from a snapshot knows). A batch is valid when its header parses, its
        CRC matches, and its offsets increase and fit this segment.
        """
        valid_bytes, next_offset = self._index_valid_prefix(start_position)
        truncated = self.log.truncate_to(valid_bytes)
        self._next_offset = next_offset
        return truncated

    def rebuild_indexes(self, end_offset: int | None) -> tuple[SegmentDamage, ...]:
        """Rebuild the indexes as ``recover`` does, but keep every byte: the invalid
        batches and any unreadable tail become ``damage``, and the valid batches after
        them stay readable (they are found by following batch lengths from the damage,
        and trusted only once a batch's CRC checks out again).

        ``end_offset`` is where the segment's offsets end (the next segment's base
        offset, or the known log end); None when unknown, and then offsets lost in
        damage at the end of the file are not counted. Returns the damage found."""
        valid_bytes, expected = self._index_valid_prefix()
        damage: list[SegmentDamage] = []
        damaged_since: int | None = valid_bytes if valid_bytes < self.size else None
        walked = valid_bytes
        try:
            for batch in self.log.batches(valid_bytes):
                header = batch.header
                fits = end_offset is None or header.last_offset < end_offset
                if batch.position == valid_bytes or not (
                    fits and header.base_offset >= expected and _batch_is_valid(batch, 0, self)
                ):
                    walked = batch.end
                    continue
                if damaged_since is not None:
                    damage.append(
                        SegmentDamage(damaged_since, batch.position, expected, header.base_offset)
                    )
                    damaged_since = None
                self._note_timestamp(header.max_timestamp, header.last_offset)
                expected, walked = header.last_offset + 1, batch.end
        except (CorruptRecordError, UnsupportedCompressionTypeError):
            pass  # bytes that cannot start a batch: the damage runs to the end of the file
        if walked < self.size and damaged_since is None:
            damaged_since = walked
        if damaged_since is not None:
            end = expected if end_offset is None else max(end_offset, expected)
            damage.append(SegmentDamage(damaged_since, self.size, expected, end))
            expected = end
        self._next_offset = expected
        self.damage = tuple(damage)
        return self.damage

    def _index_valid_prefix(self, start: int = 0) -> tuple[int, int]:
        """Index the batches from ``start`` up to the first invalid one, dropping the
        transaction index's entries from ``start`` on; returns where they end (bytes,
        next offset). The indexes must hold exactly the entries before ``start``."""
        self.damage = ()
        next_offset = self.base_offset
        if start == 0:
            self.offset_index.reset()
            self.time_index.reset()
            self.txn_index.reset()
        else:
            indexed = self.log.header_at(start)
            assert indexed is not None  # keep_synced_index_prefix checked it
            next_offset = indexed.header.base_offset
            self.txn_index.truncate_to(next_offset)
        last = self.time_index.last_entry()
        self.max_timestamp_so_far = last.key if last else NO_TIMESTAMP
        self.offset_of_max_timestamp = last.value if last else self.base_offset
        valid_bytes = last_indexed = start
        try:
            for batch in self.log.batches(start):
                header = batch.header
                if not _batch_is_valid(batch, next_offset, self):
                    break
                self._note_timestamp(header.max_timestamp, header.last_offset)
                if valid_bytes - last_indexed > self.index_interval_bytes and self._has_room():
                    self.offset_index.append(header.last_offset, valid_bytes)
                    self.time_index.maybe_append(
                        self.max_timestamp_so_far, self.offset_of_max_timestamp
                    )
                    last_indexed = valid_bytes
                valid_bytes += header.size
                next_offset = header.last_offset + 1
        except (CorruptRecordError, UnsupportedCompressionTypeError):
            pass  # bytes that cannot start a batch (a garbled codec id too): cut here
        self.bytes_since_last_index_entry = valid_bytes - last_indexed
        self._rolling_based_timestamp = None
        return valid_bytes, next_offset

    def _note_timestamp(self, max_timestamp: int, last_offset: int) -> None:
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp = last_offset

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; returns bytes removed."""
        self.txn_index.truncate_to(offset)
        first = self.translate_offset(offset)
        if first is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        removed = self.log.truncate_to(first.position)
        self.damage = tuple(d for d in self.damage if d.end_position <= first.position)
        self._next_offset = None
        last = self.time_index.last_entry()
        self.max_timestamp_so_far = last.key if last else NO_TIMESTAMP
        self.offset_of_max_timestamp = last.value if last else self.base_offset
        for batch in self.log.headers(self.offset_index.lookup(offset).value):
            if batch.header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = batch.header.max_timestamp
                self.offset_of_max_timestamp = batch.header.last_offset
        self.bytes_since_last_index_entry = 0
        if self.size == 0:
            self._rolling_based_timestamp = None
        return removed

    # -- files ------------------------------------------------------------------------

    def flush(self) -> None:
        """Make the segment durable: the log data first, then the indexes that point into it."""
        self.log.flush()
        for index in self._indexes or ():
            index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self._indexes is not None:  # sealed, unloaded segments already have it all
            if self.max_timestamp_so_far >= 0:
                self.time_index.maybe_append(
                    self.max_timestamp_so_far, self.offset_of_max_timestamp, skip_full_check=True
                )
            for index in self._indexes:
                index.close()
        self.log.close()

    def rename_with_suffix(self, suffix: str) -> None:
        """Give every file of the segment ``suffix`` (e.g. ``.deleted``) after its own."""
        self.log.rename_to(self.log.path.with_name(_base_name(self.log.path) + suffix))
        with self._index_lock:
            renamed = tuple(path.with_name(_base_name(path) + suffix) for path in self._index_paths)
            for index, new_path in zip(self._indexes or (), renamed, strict=False):
                index.rename_to(new_path)
            if self._indexes is None:
                for path, new_path in zip(self._index_paths, renamed, strict=True):
                    if path.exists():
                        path.replace(new_path)
            self._index_paths = (renamed[0], renamed[1])
        self.txn_index.rename_to(
            self.txn_index.path.with_name(_base_name(self.txn_index.path) + suffix)
        )

    def delete(self) -> None:
        self.deleted = True
        with self._index_lock:
            for index in self._indexes or ():
                index.delete()
            self._indexes = None
            for path in self._index_paths:
                path.unlink(missing_ok=True)
        self.txn_index.delete()
        self.log.close()
        self.log.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"


def _base_name(path: Path) -> str:
    """``00..05.log.deleted`` -> ``00..05.log``: the name up to the first real suffix."""
    name = path.name
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        cut = name.find(suffix)
        if cut >= 0 and name[cut:].startswith(suffix):
            return name[: cut + len(suffix)]
    return name


def _batch_is_valid(batch: FileBatch, next_offset: int, segment: LogSegment) -> bool:
    return (
        batch.header.last_offset >= next_offset
        and segment.can_hold_offset(batch.header.last_offset)
        and crc_is_valid(batch.buffer, batch.header)
    )
