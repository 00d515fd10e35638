"""One partition's log: ordered segments, appends, reads and offset lookups.

The log owns the end offset: append validates a produced buffer at the batch level
(no per-record work on the hot path), assigns offsets by patching each batch header
(base offset and partition leader epoch lie outside the CRC, so the payload is
written as it came, with no copy), rolls the active segment when Kafka would, and
hands the bytes to the segment in one write. Only the appender takes the lock;
readers see a snapshot of the segment list and read below each segment's size.

Transactions: a client writes transactional batches, a transaction coordinator the
COMMIT/ABORT markers (``AppendOrigin.COORDINATOR``). An ABORT goes into the transaction
index of the segment its marker lands in; ``collect_aborted_transactions`` and
``last_stable_offset`` are what a read_committed reader needs.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from pathlib import Path
from typing import NamedTuple, TypeVar

from tierlog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT
from tierlog.storage.config import LogConfig, TimestampType
from tierlog.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
    UnknownTopicOrPartitionError,
)
from tierlog.storage.file_records import Buffer
from tierlog.storage.leader_epoch_cache import LeaderEpochCache
from tierlog.storage.producer_snapshot import SnapshotEntry, snapshot_path, write_snapshot
from tierlog.storage.producer_state import (
    BatchMetadata,
    ProducerAppend,
    ProducerStateManager,
    first_open_txn_offset,
)
from tierlog.storage.records import (
    LOG_OVERHEAD,
    BatchHeader,
    EndTransactionMarker,
    crc_is_valid,
    decode_records,
    iter_batches,
    parse_header,
    patch_offsets,
    read_end_txn_marker,
    set_log_append_time,
    validate_produce,
)
from tierlog.storage.records.inflight import DecompressedBytesBudget
from tierlog.storage.records.validation import NO_BUDGET
from tierlog.storage.retention import RetentionBudget, deletable_segments
from tierlog.storage.segment import (
    DELETED_SUFFIX,
    AppendedBatch,
    LogSegment,
    RollPolicy,
    TimestampAndOffset,
)
from tierlog.storage.transaction_index import AbortedTxn, collect_aborted

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "AppendOrigin",
    "Log",
    "LogRead",
]

_T = TypeVar("_T")
_Snapshot = tuple[list[LogSegment], list[int]]  # segments and their base offsets

# A read that keeps racing deletions gives up with a clean error after this many tries.
_READ_ATTEMPTS = 8

# ListOffsets' special timestamps, as Kafka numbers them (-4 and -5: KIP-1005).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

# Bytes 0..15 of every batch: base offset, length, partition leader epoch (v2). The
# CRC covers only what follows, so rewriting this prefix needs no new checksum.
_PREFIX = struct.Struct(">qii")


log = logging.getLogger(__name__)


def _nothing_is_tiered(_segment: LogSegment) -> bool:
    return False


def _end_txn_markers(
    records: Buffer, headers: Sequence[BatchHeader]
) -> dict[int, EndTransactionMarker]:
    """The marker of each control batch, by its position (InvalidRecordError if one is
    anything else): the producer state needs them before the batches are written."""
    markers: dict[int, EndTransactionMarker] = {}
    for header in headers:
        if header.is_control:
            markers[header.position] = read_end_txn_marker(records, header)
    return markers


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class AppendOrigin(Enum):
    """Who appends (Kafka's AppendOrigin): a client's produce, or a transaction
    coordinator, the only one allowed to write control batches (transaction markers)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    log_start_offset: int
    batches: int
    size_bytes: int
    duplicate: bool = False  # an idempotent retry: nothing written, the original offsets


class LogRead(NamedTuple):
    """Whole batches starting with the one that holds the requested offset."""

    records: bytes
    log_start_offset: int
    log_end_offset: int
    # The base offset of the segment the batches come from (-1: none, or the tier's):
    # a follower rolls where its leader rolled.
    segment_base_offset: int = -1


FlushHook = Callable[["Log"], None]


class Log:
    """Segments of one topic partition in a directory ``<topic>-<partition>``."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: Sequence[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        high_watermark: int = 0,
        clock_ms: Callable[[], int] = wall_clock_ms,
        recovered: Sequence[LogSegment] = (),
    ):
        """``recovered`` are segments recovery rebuilt: their transaction indexes are
        written again while the producer state is loaded."""
        if not segments:
            raise ValueError("a log has at least one segment")
        self.directory = directory
        self.config = config
        self._set_segments(segments)
        # A tiered log may start below its first local segment: the tier holds the rest
        # (``continue_tier`` settles it once the tier's view is known).
        local_start = segments[0].base_offset
        self.log_start_offset = (
            log_start_offset if config.remote_storage_enable else max(log_start_offset, local_start)
        )
        self.recovery_point = recovery_point
        # The offset below which every in-sync replica holds the log (replication moves
        # it; ``replication-offset-checkpoint`` keeps it): consumers read below it.
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        # Which epoch wrote which offsets; what the recovery cut or retention removed is
        # forgotten here too, as Kafka's loader does. Appends are stamped with the
        # latest epoch (0 for a log that has none).
        self.leader_epoch_cache = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.leader_epoch = max(self.leader_epoch_cache.latest_epoch, 0)
        # One past the highest offset safely in the remote tier (the remote log manager
        # keeps it): producer snapshots at or above it are kept for the uploader.
        self.tiered_end_offset = 0
        self.clock_ms = clock_ms
        self.unflushed_messages = 0
        self.last_flush_ms = clock_ms()
        self.flush_hook: FlushHook = Log.flush
        # The broker's bound on what validations hold decoded at once (its log manager's).
        self.decompression_budget: DecompressedBytesBudget = NO_BUDGET
        self._roll_policy = RollPolicy(config.segment_bytes, config.segment_ms)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._retired: list[tuple[int, LogSegment]] = []  # (delete at ms, segment)
        # Odd while a truncation rewrites the log: a lock-free read that overlapped one
        # (the count moved) may hold bytes from before and after it, so it is retried.
        self._truncations = 0
        # Set before the files close when the partition is deleted (``close_deleted``):
        # a lock-free reader still holding this log checks it after reading, since what
        # it read from closed files is an error or, through a reused descriptor, another
        # file's bytes.
        self.deleted = False
        for segment in self._segments:
            segment.roll_jitter_ms = self._jitter_ms(segment.base_offset)
        self.active_segment.created_ms = clock_ms()  # segment.ms runs on the log's clock
        self.producer_state = ProducerStateManager(directory)
        self.producer_state.load(
            self._segments,
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            rebuild_txn_indexes=recovered,
        )

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig | None = None,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        clean_shutdown: bool = False,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> Log:
        """Open (and if need be recover) the log in ``directory``, creating it if absent."""
        from tierlog.storage.recovery import load_segments

        config = config or LogConfig()
        directory.mkdir(parents=True, exist_ok=True)
        loaded = load_segments(
            directory,
            config,
            log_start_offset=log_start_offset,
            recovery_point=recovery_point,
            clean_shutdown=clean_shutdown,
        )
        return cls(
            directory,
            config,
            loaded.segments,
            log_start_offset=log_start_offset,
            recovery_point=loaded.recovery_point,
            clock_ms=clock_ms,
            recovered=loaded.rebuilt,
        )

    # -- offsets ----------------------------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def _set_segments(self, segments: Sequence[LogSegment]) -> None:
        # One attribute holds both lists so a lock-free reader never sees them disagree.
        self._segments_and_bases = (
            list(segments),
            [segment.base_offset for segment in segments],
        )

    @property
    def _segments(self) -> list[LogSegment]:
        return self._segments_and_bases[0]

    @staticmethod
    def _segment_index(base_offsets: list[int], offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (O(log n) over base offsets)."""
        return max(bisect.bisect_right(base_offsets, offset) - 1, 0)

    # -- append -----------------------------------------------------------------------

    def append(
        self, records: Buffer, *, origin: AppendOrigin = AppendOrigin.CLIENT, may_wait: bool = True
    ) -> AppendInfo:
        """Validate a produced buffer of v2 batches, assign offsets and append it.

        Raises a typed error (and leaves the log unchanged) when any batch is invalid,
        including an idempotent producer's epoch or sequence. A request whose producer
        batches are all already in the log writes nothing and answers with their offsets.
        Only a COORDINATOR may write control batches, each one transaction marker.
        Unless ``may_wait``, a compressed batch that would wait for the broker's budget
        of decoded bytes, or decode long, raises ``ValidationWouldWait`` and nothing is
        appended (an event loop's caller retries in a thread).
        """
        config = self.config
        now_ms = self.clock_ms()
        headers = validate_produce(
            records,
            max_message_bytes=config.max_message_bytes,
            require_keys=config.compacted,
            timestamp_type=config.timestamp_type,
            now_ms=now_ms,
            before_max_ms=config.message_timestamp_before_max_ms,
            after_max_ms=config.message_timestamp_after_max_ms,
            allow_control=origin is AppendOrigin.COORDINATOR,
            budget=self.decompression_budget,
            may_wait=may_wait,
        )
        markers = _end_txn_markers(records, headers)
        total_bytes = sum([header.size for header in headers])
        if total_bytes > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"{total_bytes} bytes do not fit a segment of {config.segment_bytes}"
            )
        append_time_ms = now_ms if config.timestamp_type is TimestampType.LOG_APPEND_TIME else -1
        with self._lock:
            self._check_not_deleted()  # never write through a closed (or reused) descriptor
            first_offset = self.log_end_offset
            producers = self.producer_state.prepare_append(
                headers,
                first_offset,
                append_time_ms=append_time_ms,
                markers=markers,
                from_coordinator=origin is AppendOrigin.COORDINATOR,
            )
            if producers.duplicates:
                info = self._duplicate_append(producers.duplicates, append_time_ms)
            else:
                info = self._append_locked(
                    records, headers, producers, first_offset, append_time_ms, now_ms, total_bytes
                )
            # A retry answered as a duplicate syncs too while its first copy may be unsynced
            # (that append's flush may be running now): it is acknowledged no sooner.
            needs_flush = (
                info.last_offset >= self.recovery_point
                and self.unflushed_messages >= config.flush_messages
            )
        if needs_flush:
            self.flush_hook(self)
        return info

    def _append_locked(
        self,
        records: Buffer,
        headers: Sequence[BatchHeader],
        producers: ProducerAppend,
        first_offset: int,
        append_time_ms: int,
        now_ms: int,
        total_bytes: int,
    ) -> AppendInfo:
        pieces, batches, max_timestamp = self._assign_offsets(
            records, headers, first_offset, append_time_ms
        )
        epochs = [(self.leader_epoch, first_offset)]
        segment = self._write_locked(pieces, batches, epochs, first_offset, max_timestamp, now_ms)
        last_offset = batches[-1].last_offset
        self.producer_state.complete_append(producers, last_offset + 1)
        for aborted in producers.aborted:  # Kafka's order: the state, then the index
            segment.txn_index.append(aborted)
        return AppendInfo(
            first_offset=first_offset,
            last_offset=last_offset,
            log_append_time_ms=append_time_ms,
            max_timestamp=max_timestamp,
            log_start_offset=self.log_start_offset,
            batches=len(batches),
            size_bytes=total_bytes,
        )

    def append_as_follower(
        self, records: Buffer, *, leader_segment_base: int | None = None
    ) -> AppendInfo:
        """Append batches exactly as the leader stored them (Kafka's ``appendAsFollower``):
        their offsets, leader epochs and timestamps are the leader's and their bytes are
        written unchanged, so a replica holds the same bytes at the same offsets.
        Given the base offset of the leader's segment they come from, the follower rolls
        where the leader rolled and nowhere else, so its segment files are the leader's.

        Every batch's CRC is checked, and the batches must start at or past the log end
        and rise (a compacted leader's log may skip offsets). The producer state and the
        leader epochs follow what the batches say, unvalidated, as a recovery replays
        them: the leader already validated them."""
        view = memoryview(records).cast("B")
        headers = list(iter_batches(view))  # a cut entry: CORRUPT_MESSAGE
        for header, previous in zip(headers, [None, *headers], strict=False):
            if not crc_is_valid(view, header):
                raise CorruptRecordError(f"batch at offset {header.base_offset} fails its CRC")
            if previous is not None and header.base_offset <= previous.last_offset:
                raise UnexpectedAppendOffsetError(
                    f"batch at offset {header.base_offset} follows one ending at "
                    f"{previous.last_offset}"
                )
        if not headers:
            raise InvalidRecordError("a follower append without batches")
        now_ms = self.clock_ms()
        first_offset, total_bytes = headers[0].base_offset, len(view)
        batches = [AppendedBatch(h.last_offset, h.max_timestamp, h.size) for h in headers]
        max_timestamp = max(h.max_timestamp for h in headers)
        with self._lock:
            self._check_not_deleted()
            if first_offset < self.log_end_offset:
                raise UnexpectedAppendOffsetError(
                    f"batches from offset {first_offset} below the log end {self.log_end_offset}"
                )
            epochs = [(h.partition_leader_epoch, h.base_offset) for h in headers]
            roll = None
            if leader_segment_base is not None:
                active = self.active_segment
                roll = leader_segment_base > active.base_offset and active.size > 0
            segment = self._write_locked(
                [view], batches, epochs, first_offset, max_timestamp, now_ms, roll=roll
            )
            self.producer_state.replay(
                self._segments, self.log_end_offset, rebuild_txn_indexes=[segment]
            )
            needs_flush = self.unflushed_messages >= self.config.flush_messages
        if needs_flush:
            self.flush_hook(self)
        return AppendInfo(
            first_offset=first_offset,
            last_offset=batches[-1].last_offset,
            log_append_time_ms=-1,
            max_timestamp=max_timestamp,
            log_start_offset=self.log_start_offset,
            batches=len(batches),
            size_bytes=total_bytes,
        )

    def _write_locked(
        self,
        pieces: Sequence[Buffer],
        batches: Sequence[AppendedBatch],
        epochs: Sequence[tuple[int, int]],
        first_offset: int,
        max_timestamp: int,
        now_ms: int,
        *,
        roll: bool | None = None,
    ) -> LogSegment:
        """Write offset-assigned batches to the active segment, rolled first if the roll
        policy says so (or as ``roll`` says, when given); the segment written to.
        ``epochs`` are the (leader epoch, start offset) they begin."""
        if first_offset < self.log_start_offset:  # it could never be read back
            raise KafkaStorageError(
                f"{self.directory.name}: an append at offset {first_offset} is below the "
                f"log start {self.log_start_offset}"
            )
        total_bytes = sum(batch.size for batch in batches)
        segment = self.active_segment
        if roll is None:
            roll = segment.should_roll(
                self._roll_policy,
                incoming_bytes=total_bytes,
                incoming_max_timestamp=max_timestamp,
                incoming_last_offset=batches[-1].last_offset,
                now_ms=now_ms,
            )
        if roll:
            segment = self._roll_locked()
        # Written ahead of the batches: an epoch entry at or past the log end (the append
        # failed, or a crash came first) is dropped at the next open.
        for epoch, start_offset in epochs:
            self.leader_epoch_cache.assign(epoch, start_offset)
        segment.append(pieces, batches, total_bytes)
        self.unflushed_messages += batches[-1].last_offset - first_offset + 1
        return segment

    def append_waits_for_sync(self, records_bytes: int) -> bool:
        """Whether appending ``records_bytes`` of batches may wait for an fsync (the flush
        policy's ``flush.messages`` reached): a caller that must not block, such as an
        event loop, hands such an append to a thread.  Every record takes at least a byte,
        so the buffer's size bounds its record count; the answer errs towards waiting."""
        return self.unflushed_messages + records_bytes >= self.config.flush_messages

    def _duplicate_append(self, duplicates: list[BatchMetadata], append_time_ms: int) -> AppendInfo:
        """What a retry of batches already in the log gets back: their original offsets."""
        max_timestamp = max(batch.timestamp for batch in duplicates)
        return AppendInfo(
            first_offset=duplicates[0].first_offset,
            last_offset=duplicates[-1].last_offset,
            log_append_time_ms=max_timestamp if append_time_ms >= 0 else -1,
            max_timestamp=max_timestamp,
            log_start_offset=self.log_start_offset,
            batches=len(duplicates),
            size_bytes=0,
            duplicate=True,
        )

    def _assign_offsets(
        self,
        records: Buffer,
        headers: Sequence[BatchHeader],
        next_offset: int,
        append_time_ms: int,
    ) -> tuple[list[Buffer], list[AppendedBatch], int]:
        """The bytes to write (with offsets assigned), per-batch facts, and the max timestamp.

        With CreateTime only the 16-byte prefix of each batch is new; the rest is
        written straight from the request buffer. LogAppendTime changes bytes under
        the CRC, so those batches are copied, stamped and re-checksummed.
        """
        view = memoryview(records).cast("B")
        pieces: list[Buffer] = []
        batches: list[AppendedBatch] = []
        max_timestamp = -1
        for header in headers:
            start, end = header.position, header.position + header.size
            last_offset = next_offset + header.last_offset - header.base_offset
            if append_time_ms < 0:
                prefix = _PREFIX.pack(next_offset, header.size - LOG_OVERHEAD, self.leader_epoch)
                pieces += (prefix, view[start + _PREFIX.size : end])
                batch_max_timestamp = header.max_timestamp
            else:
                batch = bytearray(view[start:end])
                local = parse_header(batch, 0)
                patch_offsets(batch, local, next_offset, self.leader_epoch)
                set_log_append_time(batch, local, append_time_ms)
                pieces.append(batch)
                batch_max_timestamp = append_time_ms
            batches.append(AppendedBatch(last_offset, batch_max_timestamp, header.size))
            max_timestamp = max(max_timestamp, batch_max_timestamp)
            next_offset = last_offset + 1
        return pieces, batches, max_timestamp

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the earliest transaction still open, else the
        high watermark, and never past it. A read_committed reader gets nothing at or
        past it: a transaction's marker above the high watermark is not on every in-sync
        replica yet, and a new leader may not have it (nor the records it decided)."""
        return self.stable_offset_below(self.high_watermark)

    def stable_offset_below(self, committed_offset: int) -> int:
        """The LSO where ``committed_offset`` ends what consumers may read: the high
        watermark of a replicated log, the log end of a log its owner holds alone."""
        with self._lock:
            first_open = first_open_txn_offset(self.producer_state.producers)
        if first_open is None:
            return committed_offset
        return max(min(first_open, committed_offset), self.log_start_offset)

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``, from
        the transaction indexes of the segment holding ``start_offset`` onwards."""

        def attempt(snapshot: _Snapshot) -> tuple[list[AbortedTxn], Sequence[LogSegment]]:
            segments, base_offsets = snapshot
            first = self._segment_index(base_offsets, start_offset)
            searched = segments[first:]
            indexes = (segment.txn_index.entries() for segment in searched)
            return collect_aborted(indexes, start_offset, upper_bound_offset), searched

        return self._consistently(attempt, f"offset {start_offset}")

    def _jitter_ms(self, base_offset: int) -> int:
        """A per-segment, repeatable jitter so that many partitions do not roll together."""
        jitter = min(self.config.segment_jitter_ms, self.config.segment_ms)
        if jitter <= 0:
            return 0
        seed = f"{self.directory.name}/{base_offset}".encode()
        return zlib.crc32(seed) % jitter

    # -- roll, flush, truncate --------------------------------------------------------

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (a no-op if the active one is empty)."""
        with self._lock:
            return self._roll_locked()

    def _roll_locked(self) -> LogSegment:
        old = self.active_segment
        new_base = old.next_offset
        if old.size == 0 and old.base_offset == new_base:
            return old
        # Kafka's roll-time snapshot: the producers of the log below the new segment.
        self.producer_state.take_snapshot(sync=False)
        self.producer_state.prune_snapshots(
            self.recovery_point,
            keep_from=self.tiered_end_offset if self.config.remote_storage_enable else None,
        )
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

    def flush(self, up_to_offset: int | None = None) -> None:
        """Make every batch below ``up_to_offset`` (default: the log end) durable.

        Data is synced before the indexes that point into it; appends go on meanwhile.
        """
        with self._flush_lock:
            with self._lock:
                target = self.log_end_offset if up_to_offset is None else up_to_offset
                pending = [
                    segment
                    for segment in self._segments
                    if segment.next_offset > self.recovery_point and segment.base_offset < target
                ]
                flushed_messages = self.unflushed_messages
                snapshots = self.producer_state.unsynced_snapshots(target)
            for segment in pending:
                segment.flush()
            self.producer_state.sync_snapshots(snapshots)
            with self._lock:
                self.recovery_point = max(self.recovery_point, target)
                if target >= self.log_end_offset:
                    self.unflushed_messages -= flushed_messages
                self.last_flush_ms = self.clock_ms()

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset`` (whole batches only)."""
        with self._lock:
            if offset >= self.log_end_offset:
                # No batch to cut, but an epoch this log started and wrote nothing in (it
                # led, and another leader was elected first) must go: a follower asking
                # from it would be told it diverged there, again and again (Kafka does
                # the same).
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
                return
            with self._truncating():
                self._truncate_to_locked(offset)

    def _truncate_to_locked(self, offset: int) -> None:
        if offset < self._segments[0].base_offset:
            self._truncate_fully_locked(offset)
            return
        keep = self._segment_index(self._segments_and_bases[1], offset)
        if self._segments[keep].base_offset == offset and keep > 0:
            keep -= 1
        for segment in self._segments[keep + 1 :]:
            segment.delete()
        self._set_segments(self._segments[: keep + 1])
        active = self._segments[-1]
        active.truncate_to(offset)
        if active.damage:  # damage kept below the cut: appends go on in a new segment
            self._roll_locked()
        else:
            active.resize_indexes(self.config.segment_index_bytes)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.producer_state.truncate_and_reload(
            self._segments,
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
        )

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything and continue at ``offset`` (e.g. a replica far behind)."""
        with self._lock, self._truncating():
            self._truncate_fully_locked(offset)

    @contextlib.contextmanager
    def _truncating(self) -> Iterator[None]:
        self._truncations += 1
        try:
            yield
        finally:
            self._truncations += 1

    def _await_truncation(self, seen: int) -> bool:
        """Whether a truncation overlapped a read that began at count ``seen``; if one is
        running, wait for it (it holds the lock) so the retry sees the new log."""
        if seen == self._truncations and not seen % 2:
            return False
        with self._lock:
            return True

    def _truncate_fully_locked(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        self._set_segments([self._new_segment(offset)])
        self.log_start_offset = offset
        self.recovery_point = offset
        self.high_watermark = offset
        self.unflushed_messages = 0
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(offset)

    def increment_log_start_offset(self, offset: int) -> int:
        """Move the log start forward (DeleteRecords); segments below it go with retention."""
        with self._lock:
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"log start {offset} is beyond the log end {self.log_end_offset}"
                )
            self._move_log_start_locked(offset)
            return self.log_start_offset

    def continue_tier(
        self,
        tier_log_start_offset: int,
        tier_end_offset: int,
        producer_snapshot: Sequence[SnapshotEntry] = (),
        leader_epochs: Sequence[tuple[int, int]] = (),
    ) -> None:
        """Join this log to the remote tier that holds its older offsets.

        A local log that ends before the tier does (an empty or stale volume, or a
        follower below its leader's local log start) is dropped and continues at the
        tier's end, with the producers of the tier's snapshot there (so idempotent
        producers carry on) and the leader epochs the tier recorded below it (so
        truncation by epoch still finds where they end). The log then starts where the tier
        starts, unless it was moved further (DeleteRecords not yet passed on to the
        tier), or the tier does not reach the first local segment (then the local
        log start is the first offset anyone holds)."""
        with self._lock, self._truncating():
            recorded_start = self.log_start_offset
            restarted = self.log_end_offset < tier_end_offset
            if restarted:
                self._truncate_fully_locked(tier_end_offset)
            self.tiered_end_offset = max(self.tiered_end_offset, tier_end_offset)
            local_start = self._segments[0].base_offset
            if tier_end_offset < local_start:
                start = max(recorded_start, local_start)
            else:
                start = max(recorded_start, tier_log_start_offset)
            self.log_start_offset = start
            if restarted and producer_snapshot:
                self._restore_producers_locked(tier_end_offset, producer_snapshot)
            if restarted:
                for epoch, epoch_start in leader_epochs:
                    self.leader_epoch_cache.assign(epoch, epoch_start)
            self._move_log_start_locked(start)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, kept within [log start, log end]; the value set."""
        with self._lock:
            self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
            return self.high_watermark

    def become_leader(self, leader_epoch: int) -> None:
        """Lead in ``leader_epoch`` from the log end on (Kafka's ``maybeAssignEpochStartOffset``):
        later appends are stamped with it, and the checkpoint says where it starts."""
        with self._lock:
            self.leader_epoch = leader_epoch
            self.leader_epoch_cache.assign(leader_epoch, self.log_end_offset)

    def _move_log_start_locked(self, offset: int) -> None:
        """The log now starts at ``offset`` (if that is later): producers and epochs
        wholly before it are forgotten."""
        self.log_start_offset = max(self.log_start_offset, offset)
        self.high_watermark = max(self.high_watermark, self.log_start_offset)
        self.producer_state.truncate_head(self.log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    def _restore_producers_locked(self, offset: int, entries: Sequence[SnapshotEntry]) -> None:
        """Start the (empty) local log at ``offset`` with the producers the tier recorded."""
        write_snapshot(snapshot_path(self.directory, offset), entries, sync=True)
        self.producer_state = ProducerStateManager(self.directory)
        self.producer_state.load(
            self._segments, log_start_offset=self.log_start_offset, log_end_offset=offset
        )

    def update_config(self, config: LogConfig) -> None:
        """The topic's config changed (Kafka's ``UnifiedLog.updateConfig``): later appends,
        rolls, flushes and retention passes follow it; existing segments stay as they are."""
        with self._lock:
            self.config = config
            self._roll_policy = RollPolicy(config.segment_bytes, config.segment_ms)

    def close(self) -> None:
        """Flush and close every segment; the active one keeps its closing index entries."""
        self.flush()
        with self._lock:
            self.producer_state.take_snapshot(sync=True)
            for segment in self._segments:
                segment.close()
            for _due, segment in self._retired:
                segment.delete()
            self._retired = []

    def close_deleted(self) -> None:
        """Close the log of a partition being deleted: reads under way or to come raise
        UNKNOWN_TOPIC_OR_PARTITION."""
        self.deleted = True
        self.close()

    def _check_not_deleted(self) -> None:
        if self.deleted:
            raise UnknownTopicOrPartitionError(f"{self.directory.name} was deleted")

    # -- retention --------------------------------------------------------------------

    @property
    def local_log_start_offset(self) -> int:
        """The first offset still on local disk (below it, only the tier has the data)."""
        return max(self.log_start_offset, self._segments[0].base_offset)

    def delete_old_segments(
        self,
        *,
        now_ms: int | None = None,
        is_tiered: Callable[[LogSegment], bool] | None = None,
    ) -> int:
        """Apply retention (time, size, log start offset); returns segments retired.

        With ``remote.storage.enable`` the local budgets apply and a segment's local
        copy goes only once ``is_tiered`` confirms it is safely in the tier; without a
        tier to ask, nothing past the log start offset is deleted locally.
        """
        now_ms = self.clock_ms() if now_ms is None else now_ms
        tiered = self.config.remote_storage_enable
        budget = (
            RetentionBudget.local(self.config) if tiered else RetentionBudget.total(self.config)
        )
        tier_check = (is_tiered or _nothing_is_tiered) if tiered else None
        retired = 0
        while True:
            with self._lock:
                segments = self._segments
                count, reason = deletable_segments(
                    segments,
                    budget,
                    now_ms=now_ms,
                    log_start_offset=self.log_start_offset,
                    delete_policy="delete" in self.config.cleanup_policy,
                    is_tiered=tier_check,
                )
                if not count:
                    return retired
                if count == len(segments):
                    self._roll_locked()  # the log end lives on in a new, empty segment
                log.info("%s: retiring %d segments (%s)", self, count, reason)
                self._retire_locked(segments[:count], now_ms, move_log_start=not tiered)
            retired += count

    def _retire_locked(
        self, doomed: Sequence[LogSegment], now_ms: int, *, move_log_start: bool
    ) -> None:
        """Take segments out of the readable list, then rename their files ``.deleted``.

        Readers still holding them keep reading through open descriptors until
        ``file.delete.delay.ms`` has passed and ``delete_retired_files`` removes them.
        """
        remaining = [segment for segment in self._segments if segment not in doomed]
        self._set_segments(remaining)
        if move_log_start:
            self._move_log_start_locked(remaining[0].base_offset)
        self.producer_state.on_segments_removed(
            [segment.base_offset for segment in doomed],
            [segment.base_offset for segment in remaining],
        )
        due_ms = now_ms + self.config.file_delete_delay_ms
        for segment in doomed:
            segment.deleted = True
            segment.rename_with_suffix(DELETED_SUFFIX)
            self._retired.append((due_ms, segment))

    def delete_retired_files(self, now_ms: int | None = None) -> int:
        """Delete the files of retired segments whose delay has passed; returns how many."""
        now_ms = self.clock_ms() if now_ms is None else now_ms
        with self._lock:
            due = [segment for due_ms, segment in self._retired if due_ms <= now_ms]
            self._retired = [(at, segment) for at, segment in self._retired if at > now_ms]
        for segment in due:
            segment.delete()
        return len(due)

    # -- read -------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        upper_bound_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> LogRead:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``.

        Raises OffsetOutOfRangeError below the log start or past the log end. A read
        that raced the retirement of its segment, or a truncation, is retried on the
        current segments, so it returns whole batches or the clean error.
        """

        def attempt(snapshot: _Snapshot) -> tuple[LogRead, Sequence[LogSegment]]:
            segments, base_offsets = snapshot
            log_end = segments[-1].next_offset
            self._check_in_range(offset, log_end)
            records, visited = self._read_from(
                segments, base_offsets, offset, max_bytes, upper_bound_offset, min_one_batch
            )
            base = visited[-1].base_offset if records else -1
            return LogRead(records, self.log_start_offset, log_end, base), visited

        return self._consistently(attempt, f"offset {offset}")

    def _consistently(
        self, attempt: Callable[[_Snapshot], tuple[_T, Sequence[LogSegment]]], what: str
    ) -> _T:
        """Run a lock-free read on a snapshot of the segments until nothing raced it.

        ``attempt`` returns its answer and the segments it relied on. It raced when one
        of those was retired meanwhile (it may have read nothing from it and moved on)
        or a truncation overlapped it: then it runs again on the current segments.
        """
        for _attempt in range(_READ_ATTEMPTS):
            self._check_not_deleted()
            seen = self._truncations
            if self._await_truncation(seen):
                continue
            snapshot = self._segments_and_bases
            try:
                answer, relied_on = attempt(snapshot)
            except Exception:  # a segment retired or truncated under us fails in any way
                self._check_not_deleted()
                raced = any(s.deleted for s in snapshot[0]) or self._await_truncation(seen)
                if not raced:
                    raise
                continue
            self._check_not_deleted()
            if self._await_truncation(seen):
                continue
            if not any(segment.deleted for segment in relied_on):
                return answer
        raise OffsetOutOfRangeError(f"{what} was deleted while being read")

    def _check_in_range(self, offset: int, log_end: int) -> None:
        if offset > log_end or offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {log_end}]"
            )
        if offset < self._segments[0].base_offset:
            raise OffsetMovedToTieredStorageError(
                f"offset {offset} is below the local log start {self.local_log_start_offset}"
            )

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
        index = self._segment_index(base_offsets, offset)
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

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for one partition.

        ``-2`` earliest, ``-1`` latest, ``-3`` the record with the largest timestamp,
        otherwise the first record whose timestamp is >= ``timestamp``.
        """
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_end_offset)

        def attempt(snapshot: _Snapshot) -> tuple[TimestampAndOffset | None, Sequence[LogSegment]]:
            return self._search_timestamp(snapshot[0], timestamp), snapshot[0]

        return self._consistently(attempt, f"timestamp {timestamp}")

    def _search_timestamp(
        self, segments: Sequence[LogSegment], timestamp: int
    ) -> TimestampAndOffset | None:
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_record(segments)
        for segment in segments:
            if segment.max_timestamp_so_far < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found
        return None

    def _max_timestamp_record(self, segments: Sequence[LogSegment]) -> TimestampAndOffset | None:
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

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )

    # -- compaction support -----------------------------------------------------------
    # The cleaner (cleaner.py) rewrites closed segments; this is what it needs of the log.

    def replace_segments(self, new: Sequence[LogSegment], old: Sequence[LogSegment]) -> bool:
        """Swap cleaned segments in for those they were made from (Kafka's replaceSegments).

        ``new`` are flushed ``.cleaned`` segments holding exactly the offsets of ``old``,
        a run of closed segments of this log, and ending with the same batch. Under the
        lock: ``new`` become ``.swap`` (from here recovery finishes the swap), the segment
        list changes in one step, ``old`` are retired as ``.deleted`` (readers keep them
        until ``file.delete.delay.ms``), and ``new`` take their final names. Returns
        False, changing nothing, when ``old`` are no longer what the log holds (a
        truncation or retention got there first); the caller then deletes ``new``.
        """
        from tierlog.storage.checkpoints import fsync_directory
        from tierlog.storage.recovery import SWAP_SUFFIX

        now_ms = self.clock_ms()
        with self._lock:
            if not self._replaceable(new, old):
                return False
            for segment in new:
                segment.rename_with_suffix(SWAP_SUFFIX)
            fsync_directory(self.directory)
            doomed = {id(segment) for segment in old}
            kept = [segment for segment in self._segments if id(segment) not in doomed]
            self._set_segments(sorted([*kept, *new], key=lambda segment: segment.base_offset))
            self._retire_locked(old, now_ms, move_log_start=False)
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
