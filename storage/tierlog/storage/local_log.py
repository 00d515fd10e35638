"""The local half of a partition's log: its segment files (Kafka's ``LocalLog``).

What it keeps, and why:

- At least one segment, in base-offset order, the last one active; the next offset (the
  log end) is the active segment's. The segment list and its base offsets change
  together in one attribute, so a lock-free reader never sees them disagree.
- Writers hold ``lock``, the lock of the log that owns this one (``log.Log``): one lock
  orders the segment files and the unified state above them (log start, epochs,
  producers), as Kafka's ``LocalLog`` leans on ``UnifiedLog``'s. Readers take no lock:
  they read a snapshot of the segment list below each segment's size, and
  ``read_consistently`` retries one that raced a retirement or a truncation, so a read
  returns whole batches of one version of the log or a clean error.
- Everything below ``recovery_point`` is durable; ``unflushed_messages`` counts what
  was appended past the last flush.
- A retired segment leaves the list first and is renamed ``.deleted``; its files go
  only after ``file.delete.delay.ms``, so a reader still holding it keeps reading.

It knows nothing of the log start offset, the high watermark, leader epochs,
producers or the tier: those belong to the unified log above it.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple, TypeVar

from tierlog.storage.config import LogConfig
from tierlog.storage.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from tierlog.storage.file_records import Buffer
from tierlog.storage.records import decode_records, parse_header
from tierlog.storage.segment import (
    DELETED_SUFFIX,
    AppendedBatch,
    LogSegment,
    RollPolicy,
    TimestampAndOffset,
)
from tierlog.storage.transaction_index import AbortedTxn, collect_aborted

__all__ = ["LocalLog", "LocalRead", "RangeCheck", "SegmentsSnapshot"]

_T = TypeVar("_T")
SegmentsSnapshot = tuple[list[LogSegment], list[int]]  # segments and their base offsets
# Raises if ``offset`` may not be read from a log ending at ``log_end``: (offset, log_end).
RangeCheck = Callable[[int, int], None]

# A read that keeps racing deletions gives up with a clean error after this many tries.
_READ_ATTEMPTS = 8


class LocalRead(NamedTuple):
    """Whole batches read from the segment files."""

    records: bytes
    log_end_offset: int
    # The base offset of the segment the batches come from (-1: nothing read).
    segment_base_offset: int


class LocalLog:
    """The segments of one partition in a directory ``<topic>-<partition>``."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: Sequence[LogSegment],
        *,
        recovery_point: int,
        clock_ms: Callable[[], int],
        lock: threading.Lock | None = None,
    ):
        if not segments:
            raise ValueError("a log has at least one segment")
        self.directory = directory
        self.config = config
        self.recovery_point = recovery_point
        self.clock_ms = clock_ms
        self.lock = lock or threading.Lock()
        self.unflushed_messages = 0
        self.last_flush_ms = clock_ms()
        self._roll_policy = RollPolicy(config.segment_bytes, config.segment_ms)
        self._set_segments(segments)
        self._retired: list[tuple[int, LogSegment]] = []  # (delete at ms, segment)
        # Odd while a truncation rewrites the log: a lock-free read that overlapped one
        # (the count moved) may hold bytes from before and after it, so it is retried.
        self._truncations = 0
        # Set before the files close when the partition is deleted: a lock-free reader
        # still holding this log checks it after reading, since what it read from closed
        # files is an error or, through a reused descriptor, another file's bytes.
        self.deleted = False
        opened_ms = clock_ms()  # segment.ms runs on the log's clock
        for segment in segments:
            segment.roll_jitter_ms = self._jitter_ms(segment.base_offset)
            segment.first_append_ms = opened_ms  # no record of when the data came
        self.active_segment.created_ms = opened_ms

    # -- segments ---------------------------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def first_segment_base_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def segments_and_bases(self) -> SegmentsSnapshot:
        """The segment list and its base offsets as one consistent snapshot."""
        return self._segments_and_bases

    def _set_segments(self, segments: Sequence[LogSegment]) -> None:
        self._segments_and_bases = (
            list(segments),
            [segment.base_offset for segment in segments],
        )

    @property
    def _segments(self) -> list[LogSegment]:
        return self._segments_and_bases[0]

    @staticmethod
    def segment_index(base_offsets: list[int], offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (O(log n) over base offsets)."""
        return max(bisect.bisect_right(base_offsets, offset) - 1, 0)

    def update_config(self, config: LogConfig) -> None:
        """Later appends, rolls and flushes follow ``config``; segments stay as they are."""
        self.config = config
        self._roll_policy = RollPolicy(config.segment_bytes, config.segment_ms)

    def check_not_deleted(self) -> None:
        if self.deleted:
            raise UnknownTopicOrPartitionError(f"{self.directory.name} was deleted")

    # -- append and roll (under ``lock``) ---------------------------------------------

    def should_roll(
        self, batches: Sequence[AppendedBatch], max_timestamp: int, now_ms: int
    ) -> bool:
        """Whether ``batches`` go to a new segment by the roll policy."""
        return self.active_segment.should_roll(
            self._roll_policy,
            incoming_bytes=sum(batch.size for batch in batches),
            incoming_max_timestamp=max_timestamp,
            incoming_last_offset=batches[-1].last_offset,
            now_ms=now_ms,
        )

    def append(
        self, pieces: Sequence[Buffer], batches: Sequence[AppendedBatch], first_offset: int
    ) -> LogSegment:
        """Write offset-assigned batches to the active segment; the segment written to."""
        segment = self.active_segment
        if segment.size == 0:
            segment.first_append_ms = self.clock_ms()
        segment.append(pieces, batches, sum(batch.size for batch in batches))
        self.unflushed_messages += batches[-1].last_offset - first_offset + 1
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (a no-op if the active one is empty)."""
        old = self.active_segment
        new_base = old.next_offset
        if old.size == 0 and old.base_offset == new_base:
            return old
        old.on_become_inactive()
        segment = self._new_segment(new_base)
        old.release_indexes()  # sealed: mapped again only if a reader searches it
        self._set_segments([*self._segments, segment])
        return segment

    def _new_segment(self, base_offset: int) -> LogSegment:
        segment = LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            active=True,
        )
        segment.roll_jitter_ms = self._jitter_ms(base_offset)
        segment.created_ms = self.clock_ms()
        return segment

    def _jitter_ms(self, base_offset: int) -> int:
        """A per-segment, repeatable jitter so that many partitions do not roll together."""
        jitter = min(self.config.segment_jitter_ms, self.config.segment_ms)
        if jitter <= 0:
            return 0
        seed = f"{self.directory.name}/{base_offset}".encode()
        return zlib.crc32(seed) % jitter

    # -- flush ------------------------------------------------------------------------

    def segments_to_flush(self, up_to_offset: int) -> list[LogSegment]:
        """The segments holding unflushed offsets below ``up_to_offset`` (under ``lock``;
        they are synced outside it, while appends go on)."""
        return [
            segment
            for segment in self._segments
            if segment.next_offset > self.recovery_point and segment.base_offset < up_to_offset
        ]

    def mark_flushed(self, up_to_offset: int, flushed_messages: int) -> None:
        """Everything below ``up_to_offset`` is durable (under ``lock``);
        ``flushed_messages`` is what ``unflushed_messages`` was when the flush began."""
        self.recovery_point = max(self.recovery_point, up_to_offset)
        if up_to_offset >= self.log_end_offset:
            self.unflushed_messages -= flushed_messages
        self.last_flush_ms = self.clock_ms()

    # -- truncate (under ``lock``, inside ``truncating``) ------------------------------

    @contextlib.contextmanager
    def truncating(self) -> Iterator[None]:
        """Mark a truncation under way, for the lock-free readers to retry around it."""
        self._truncations += 1
        try:
            yield
        finally:
            self._truncations += 1

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset`` (whole batches only)."""
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        keep = self.segment_index(self._segments_and_bases[1], offset)
        if self._segments[keep].base_offset == offset and keep > 0:
            keep -= 1
        for segment in self._segments[keep + 1 :]:
            segment.delete()
        self._set_segments(self._segments[: keep + 1])
        active = self._segments[-1]
        active.truncate_to(offset)
        if active.damage:  # damage kept below the cut: appends go on in a new segment
            self.roll()
        else:
            active.resize_indexes(self.config.segment_index_bytes)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and continue, empty, at ``offset``."""
        for segment in self._segments:
            segment.delete()
        self._set_segments([self._new_segment(offset)])
        self.recovery_point = offset
        self.unflushed_messages = 0

    # -- retire and replace (under ``lock``) ------------------------------------------

    def retire(self, doomed: Sequence[LogSegment], now_ms: int) -> None:
        """Take segments out of the readable list, then rename their files ``.deleted``.

        Readers still holding them keep reading through open descriptors until
        ``file.delete.delay.ms`` has passed and ``delete_retired_files`` removes them.
        """
        self._set_segments([segment for segment in self._segments if segment not in doomed])
        due_ms = now_ms + self.config.file_delete_delay_ms
        for segment in doomed:
            segment.deleted = True
            segment.rename_with_suffix(DELETED_SUFFIX)
            self._retired.append((due_ms, segment))

    def delete_retired_files(self, now_ms: int) -> int:
        """Delete the files of retired segments whose delay has passed; returns how many."""
        with self.lock:
            due = [segment for due_ms, segment in self._retired if due_ms <= now_ms]
            self._retired = [(at, segment) for at, segment in self._retired if at > now_ms]
        for segment in due:
            segment.delete()
        return len(due)

    def replace_segments(self, new: Sequence[LogSegment], old: Sequence[LogSegment]) -> bool:
        """Swap cleaned segments in for those they were made from (Kafka's replaceSegments).

        ``new`` are flushed ``.cleaned`` segments holding exactly the offsets of ``old``,
        a run of closed segments of this log, and ending with the same batch. ``new``
        become ``.swap`` (from here recovery finishes the swap), the segment list changes
        in one step, ``old`` are retired as ``.deleted``, and ``new`` take their final
        names. Returns False, changing nothing, when ``old`` are no longer what the log
        holds (a truncation or retention got there first).
        """
        from tierlog.storage.checkpoints import fsync_directory
        from tierlog.storage.recovery import SWAP_SUFFIX

        if not self._replaceable(new, old):
            return False
        for segment in new:
            segment.rename_with_suffix(SWAP_SUFFIX)
        fsync_directory(self.directory)
        doomed = {id(segment) for segment in old}
        kept = [segment for segment in self._segments if id(segment) not in doomed]
        self._set_segments(sorted([*kept, *new], key=lambda segment: segment.base_offset))
        self.retire(old, self.clock_ms())
        for segment in new:
            segment.rename_with_suffix("")
        fsync_directory(self.directory)
        return True

    def _replaceable(self, new: Sequence[LogSegment], old: Sequence[LogSegment]) -> bool:
        segments = self._segments
        if not new or not old or any(segment.deleted for segment in old):
            return False
        try:
            first = next(i for i, segment in enumerate(segments) if segment is old[0])
        except StopIteration:
            return False
        run = segments[first : first + len(old)]
        return (
            first + len(old) < len(segments)  # never the active segment
            and all(mine is theirs for mine, theirs in zip(run, old, strict=True))
            and new[0].base_offset == old[0].base_offset
            and new[-1].next_offset == old[-1].next_offset
        )

    def close(self) -> None:
        """Close every segment (the active one keeps its closing index entries) and delete
        the retired ones; everything written counts as recovered (under ``lock``)."""
        for segment in self._segments:
            segment.close()
        for _due, segment in self._retired:
            segment.delete()
        self._retired = []
        self.recovery_point = self.log_end_offset

    # -- lock-free reads --------------------------------------------------------------

    def read_consistently(
        self, attempt: Callable[[SegmentsSnapshot], tuple[_T, Sequence[LogSegment]]], what: str
    ) -> _T:
        """Run a lock-free read on a snapshot of the segments until nothing raced it.

        ``attempt`` returns its answer and the segments it relied on. It raced when one
        of those was retired meanwhile (it may have read nothing from it and moved on)
        or a truncation overlapped it: then it runs again on the current segments.
        """
        for _attempt in range(_READ_ATTEMPTS):
            self.check_not_deleted()
            seen = self._truncations
            if self._await_truncation(seen):
                continue
            snapshot = self._segments_and_bases
            try:
                answer, relied_on = attempt(snapshot)
            except Exception:  # a segment retired or truncated under us fails in any way
                self.check_not_deleted()
                raced = any(s.deleted for s in snapshot[0]) or self._await_truncation(seen)
                if not raced:
                    raise
                continue
            self.check_not_deleted()
            if self._await_truncation(seen):
                continue
            if not any(segment.deleted for segment in relied_on):
                return answer
        raise OffsetOutOfRangeError(f"{what} was deleted while being read")

    def _await_truncation(self, seen: int) -> bool:
        """Whether a truncation overlapped a read that began at count ``seen``; if one is
        running, wait for it (it holds the lock) so the retry sees the new log."""
        if seen == self._truncations and not seen % 2:
            return False
        with self.lock:
            return True

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        upper_bound_offset: int | None = None,
        min_one_batch: bool = True,
        check_range: RangeCheck | None = None,
    ) -> LocalRead:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``.

        ``check_range`` says which offsets may be read (by default those from the first
        segment's base offset to the log end, else OffsetOutOfRangeError); it runs on
        each attempt's snapshot."""
        check = check_range or self._check_local_range

        def attempt(snapshot: SegmentsSnapshot) -> tuple[LocalRead, Sequence[LogSegment]]:
            segments, base_offsets = snapshot
            log_end = segments[-1].next_offset
            check(offset, log_end)
            records, visited = self._read_from(
                segments, base_offsets, offset, max_bytes, upper_bound_offset, min_one_batch
            )
            base = visited[-1].base_offset if records else -1
            return LocalRead(records, log_end, base), visited

        return self.read_consistently(attempt, f"offset {offset}")

    def _check_local_range(self, offset: int, log_end: int) -> None:
        start = self._segments[0].base_offset
        if offset > log_end or offset < start:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [{start}, {log_end}]")

    def _read_from(
        self,
        segments: Sequence[LogSegment],
        base_offsets: list[int],
        offset: int,
        max_bytes: int,
        upper_bound_offset: int | None,
        min_one_batch: bool,
    ) -> tuple[bytes, list[LogSegment]]:
        """Whole batches from the first segment at or after ``offset`` that has some,
        and the segments visited on the way."""
        index = self.segment_index(base_offsets, offset)
        visited: list[LogSegment] = []
        while index < len(segments):
            segment = segments[index]
            visited.append(segment)
            found = segment.read(
                offset,
                max_bytes,
                max_position=segment.size,
                upper_bound_offset=upper_bound_offset,
                min_one_batch=min_one_batch,
            )
            if found is not None and found.records:
                return found.records, visited
            if (
                upper_bound_offset is not None
                and index + 1 < len(segments)
                and base_offsets[index + 1] >= upper_bound_offset
            ):
                break
            index += 1
        return b"", visited

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``, from
        the transaction indexes of the segment holding ``start_offset`` onwards."""

        def attempt(snapshot: SegmentsSnapshot) -> tuple[list[AbortedTxn], Sequence[LogSegment]]:
            segments, base_offsets = snapshot
            first = self.segment_index(base_offsets, start_offset)
            searched = segments[first:]
            indexes = (segment.txn_index.entries() for segment in searched)
            return collect_aborted(indexes, start_offset, upper_bound_offset), searched

        return self.read_consistently(attempt, f"offset {start_offset}")

    def find_offset_by_timestamp(
        self, timestamp: int, *, first_offset: Callable[[], int]
    ) -> TimestampAndOffset | None:
        """The first record whose timestamp is >= ``timestamp``, at or past
        ``first_offset()`` (asked on each attempt: the log start may move meanwhile)."""

        def attempt(
            snapshot: SegmentsSnapshot,
        ) -> tuple[TimestampAndOffset | None, Sequence[LogSegment]]:
            return _first_at_or_after(snapshot[0], timestamp, first_offset()), snapshot[0]

        return self.read_consistently(attempt, f"timestamp {timestamp}")

    def max_timestamp_record(self) -> TimestampAndOffset | None:
        """The record with the largest timestamp (ListOffsets' -3)."""

        def attempt(
            snapshot: SegmentsSnapshot,
        ) -> tuple[TimestampAndOffset | None, Sequence[LogSegment]]:
            return _max_timestamp_record(snapshot[0]), snapshot[0]

        return self.read_consistently(attempt, "the largest timestamp")


def _first_at_or_after(
    segments: Sequence[LogSegment], timestamp: int, first_offset: int
) -> TimestampAndOffset | None:
    for segment in segments:
        if segment.max_timestamp_so_far < timestamp:
            continue
        found = segment.find_offset_by_timestamp(timestamp, first_offset)
        if found is not None:
            return found
    return None


def _max_timestamp_record(segments: Sequence[LogSegment]) -> TimestampAndOffset | None:
    holder = max(segments, key=lambda segment: segment.max_timestamp_so_far)
    if holder.max_timestamp_so_far < 0:
        return None
    found = holder.translate_offset(holder.offset_of_max_timestamp)
    if found is None:
        return None
    whole = holder.log.read(found.position, found.header.size)
    for record in decode_records(whole, parse_header(whole, 0)):
        if record.timestamp == holder.max_timestamp_so_far:
            return TimestampAndOffset(record.timestamp, record.offset)
    return TimestampAndOffset(holder.max_timestamp_so_far, holder.offset_of_max_timestamp)
