"""One partition's log as its users see it (Kafka's ``UnifiedLog``): appends, reads,
offset lookups, and the state above the segment files.

It owns a ``LocalLog`` (``local_log.py``: the segments, roll, read, truncate, flush
of the files, the log end) and keeps, under the one lock both share:

- ``log_start_offset`` <= ``high_watermark`` <= the log end; a tiered log may start
  below its first local segment (``local_log_start_offset``): the tier holds the rest.
- The leader-epoch cache and the producer state describe exactly the offsets in
  [log start, log end): every truncation, retention pass or restart cuts them too.
- Nothing is appended below the log start, and every append is stamped with the
  current ``leader_epoch`` (a follower's with its leader's).

Append validates a produced buffer at the batch level
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

import logging
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import NamedTuple

from tierlog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT
from tierlog.storage.config import LogConfig, TimestampType
from tierlog.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaStorageError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from tierlog.storage.file_records import Buffer
from tierlog.storage.leader_epoch_cache import LeaderEpochCache
from tierlog.storage.local_log import LocalLog
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
    AppendedBatch,
    LogSegment,
    TimestampAndOffset,
)
from tierlog.storage.transaction_index import AbortedTxn
from tierlog.storage.verification_guards import VerificationGuard, VerificationGuards

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "UNKNOWN_TIERED_END_OFFSET",
    "AppendInfo",
    "AppendOrigin",
    "Log",
    "LogRead",
]

# ListOffsets' special timestamps, as Kafka numbers them (-4 and -5: KIP-1005).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

# A tier's end not known yet (``Log.known_tiered_end_offset``).
UNKNOWN_TIERED_END_OFFSET = -1

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
    """One topic partition in a directory ``<topic>-<partition>``: its ``LocalLog`` of
    segments and the offsets, epochs and producers above them."""

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
        recovered: Mapping[LogSegment, int] | None = None,
    ):
        """``recovered`` are segments recovery rebuilt, each with the offset from which
        their transaction indexes are written again while the producer state is loaded."""
        self.directory = directory
        self.clock_ms = clock_ms
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.local = LocalLog(
            directory,
            config,
            segments,
            recovery_point=recovery_point,
            clock_ms=clock_ms,
            lock=self._lock,
        )
        # A tiered log may start below its first local segment: the tier holds the rest
        # (``continue_tier`` settles it once the tier's view is known).
        local_start = segments[0].base_offset
        self.log_start_offset = (
            log_start_offset if config.remote_storage_enable else max(log_start_offset, local_start)
        )
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
        # Whether this broker has learnt the tier's end since the log was opened (its
        # claim of the tier: ``continue_tier``; or a leader's word). Until then the 0
        # above frees nothing locally, as it should, but is no floor for the local
        # cleaner, which must not rewrite local copies of tiered segments
        # (``cleaner.local_cleaning_floor`` waits): ``known_tiered_end_offset``.
        self.tier_end_known = False
        self.flush_hook: FlushHook = Log.flush
        # The broker's bound on what validations hold decoded at once (its log manager's).
        self.decompression_budget: DecompressedBytesBudget = NO_BUDGET
        self.producer_state = ProducerStateManager(directory)
        self._verification_guards = VerificationGuards()
        self.producer_state.load(
            segments,
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

    # -- the local log's state, as callers read it ------------------------------------

    @property
    def config(self) -> LogConfig:
        return self.local.config

    @property
    def segments(self) -> list[LogSegment]:
        return self.local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self.local.active_segment

    @property
    def log_end_offset(self) -> int:
        return self.local.log_end_offset

    @property
    def size_bytes(self) -> int:
        return self.local.size_bytes

    @property
    def recovery_point(self) -> int:
        return self.local.recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self.local.unflushed_messages

    @property
    def last_flush_ms(self) -> int:
        return self.local.last_flush_ms

    @property
    def deleted(self) -> bool:
        return self.local.deleted

    @property
    def known_tiered_end_offset(self) -> int:
        """``tiered_end_offset`` once known here, else ``UNKNOWN_TIERED_END_OFFSET``: what
        a leader tells its followers, who keep what they knew until it knows."""
        return self.tiered_end_offset if self.tier_end_known else UNKNOWN_TIERED_END_OFFSET

    def learn_tiered_end_offset(self, offset: int) -> None:
        """The tier's end as the partition's leader knows it (taken as it comes, even
        lower: its claim is the truth); ``UNKNOWN_TIERED_END_OFFSET`` changes nothing."""
        if offset != UNKNOWN_TIERED_END_OFFSET:
            self.tiered_end_offset = offset
            self.tier_end_known = True

    @property
    def local_log_start_offset(self) -> int:
        """The first offset still on local disk (below it, only the tier has the data)."""
        return max(self.log_start_offset, self.local.first_segment_base_offset)

    # -- append -----------------------------------------------------------------------

    def append(
        self,
        records: Buffer,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        may_wait: bool = True,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendInfo:
        """Validate a produced buffer of v2 batches, assign offsets and append it.

        Raises a typed error (and leaves the log unchanged) when any batch is invalid,
        including an idempotent producer's epoch or sequence. A request whose producer
        batches are all already in the log writes nothing and answers with their offsets.
        Only a COORDINATOR may write control batches, each one transaction marker.
        Unless ``may_wait``, a compressed batch that would wait for the broker's budget
        of decoded bytes, or decode long, raises ``ValidationWouldWait`` and nothing is
        appended (an event loop's caller retries in a thread). A batch that would open
        its producer's transaction here, given the ``verification_guard`` its leader took
        before asking the coordinator, is refused (INVALID_TXN_STATE) once that guard is
        gone: a marker for the producer came in between (``verification_guards``).
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
            self.local.check_not_deleted()  # never write through a closed (or reused) descriptor
            if verification_guard is not None:
                self._check_still_verified(headers[0], verification_guard)
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
                for header in headers:  # a transaction opened or ended: its guard is done
                    if header.is_transactional:
                        self._verification_guards.drop(header.producer_id)
            # A retry answered as a duplicate syncs too while its first copy may be unsynced
            # (that append's flush may be running now): it is acknowledged no sooner.
            needs_flush = (
                info.last_offset >= self.recovery_point
                and self.unflushed_messages >= config.flush_messages
            )
        if needs_flush:
            self.flush_hook(self)
        return info

    def verification_guard(self, producer_id: int) -> VerificationGuard:
        """The guard a leader takes for ``producer_id`` before asking the coordinator
        whether this partition is in its transaction (``verification_guards``)."""
        with self._lock:
            return self._verification_guards.take(producer_id)

    def _check_still_verified(self, header: BatchHeader, guard: VerificationGuard) -> None:
        if not header.is_transactional or header.is_control:
            return
        entry = self.producer_state.last_entry(header.producer_id)
        if entry is not None and entry.current_txn_first_offset is not None:
            return  # its transaction is open here: the guard is no longer needed
        if not self._verification_guards.holds(header.producer_id, guard):
            raise InvalidTxnStateError(
                f"producer {header.producer_id}'s transaction here ended (or this broker "
                "stopped leading) while its batch was verified"
            )

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
            self.local.check_not_deleted()
            self._verification_guards.clear()  # a follower verifies nothing
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
                self.local.segments,
                self.log_end_offset,
                rebuild_txn_indexes={segment: first_offset},
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
        if roll is None:
            roll = self.local.should_roll(batches, max_timestamp, now_ms)
        if roll:
            self._roll_locked()
        # Written ahead of the batches: an epoch entry at or past the log end (the append
        # failed, or a crash came first) is dropped at the next open.
        for epoch, start_offset in epochs:
            self.leader_epoch_cache.assign(epoch, start_offset)
        return self.local.append(pieces, batches, first_offset)

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

    def has_open_transaction(self, producer_id: int) -> bool:
        """Whether ``producer_id`` has a transaction open in this log (its batches since
        its last marker were transactional)."""
        with self._lock:
            entry = self.producer_state.last_entry(producer_id)
            return entry is not None and entry.current_txn_first_offset is not None

    def active_producers(self) -> list[SnapshotEntry]:
        """Each producer the log keeps state for, as its snapshot would hold it: what
        Kafka's DescribeProducers answers (its open transaction's first offset included)."""
        with self._lock:
            return [entry.to_snapshot() for entry in self.producer_state.producers.values()]

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``, from
        the transaction indexes of the segment holding ``start_offset`` onwards."""
        return self.local.collect_aborted_transactions(start_offset, upper_bound_offset)

    # -- roll, flush, truncate --------------------------------------------------------

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (a no-op if the active one is empty)."""
        with self._lock:
            return self._roll_locked()

    def _roll_locked(self) -> LogSegment:
        old = self.local.active_segment
        segment = self.local.roll()
        if segment is not old:
            # Kafka's roll-time snapshot: the producers of the log below the new segment.
            self.producer_state.take_snapshot(sync=False)
            self.producer_state.prune_snapshots(
                self.recovery_point,
                keep_from=self.tiered_end_offset if self.config.remote_storage_enable else None,
            )
        return segment

    def roll_at_tier_end(self) -> None:
        """Roll if the active segment began below the tier's end and ends there: the
        leader that uploaded the tier's last segment rolled there (for the tier's bound,
        with no record after it yet to say so), and records appended from here on belong
        in a segment of their own; in one spanning both, a new leader would upload the
        tier's offsets again."""
        with self._lock:
            active = self.local.active_segment
            if active.base_offset < self.tiered_end_offset == self.log_end_offset:
                self._roll_locked()

    def flush(self, up_to_offset: int | None = None) -> None:
        """Make every batch below ``up_to_offset`` (default: the log end) durable.

        Data is synced before the indexes that point into it; appends go on meanwhile.
        """
        with self._flush_lock:
            with self._lock:
                target = self.log_end_offset if up_to_offset is None else up_to_offset
                pending = self.local.segments_to_flush(target)
                flushed_messages = self.local.unflushed_messages
                snapshots = self.producer_state.unsynced_snapshots(target)
            for segment in pending:
                segment.flush()
            self.producer_state.sync_snapshots(snapshots)
            with self._lock:
                self.local.mark_flushed(target, flushed_messages)

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
            with self.local.truncating():
                self._truncate_to_locked(offset)

    def _truncate_to_locked(self, offset: int) -> None:
        if offset < self.local.first_segment_base_offset:
            self._truncate_fully_locked(offset)
            return
        self.local.truncate_to(offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.producer_state.truncate_and_reload(
            self.local.segments,
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
        )

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything and continue at ``offset`` (e.g. a replica far behind)."""
        with self._lock, self.local.truncating():
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        self.local.truncate_fully_and_start_at(offset)
        self.log_start_offset = offset
        self.high_watermark = offset
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
        with self._lock, self.local.truncating():
            recorded_start = self.log_start_offset
            restarted = self.log_end_offset < tier_end_offset
            if restarted:
                self._truncate_fully_locked(tier_end_offset)
            self.tiered_end_offset = max(self.tiered_end_offset, tier_end_offset)
            self.tier_end_known = True
            local_start = self.local.first_segment_base_offset
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
        later appends are stamped with it, and the checkpoint says where it starts.
        Verifications made in an earlier epoch are void (``verification_guards``)."""
        with self._lock:
            self._verification_guards.clear()
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
            self.local.segments, log_start_offset=self.log_start_offset, log_end_offset=offset
        )

    def update_config(self, config: LogConfig) -> None:
        """The topic's config changed (Kafka's ``UnifiedLog.updateConfig``): later appends,
        rolls, flushes and retention passes follow it; existing segments stay as they are.

        A log whose tiering is turned off (KIP-950: its tier is being deleted) goes on
        as a local log: it starts at its first local segment from now on, so a read
        below gets OFFSET_OUT_OF_RANGE rather than a tier on its way out (a restart
        starts it there too: see ``__init__``)."""
        with self._lock:
            turned_off = self.config.remote_storage_enable and not config.remote_storage_enable
            self.local.update_config(config)
            if not turned_off:
                return
            local_start = self.local.first_segment_base_offset
            if self.log_start_offset < local_start:
                log.info(
                    "%s: tiering turned off: log start %d -> %d (the first local offset)",
                    self,
                    self.log_start_offset,
                    local_start,
                )
                self._move_log_start_locked(local_start)
            # Nothing is in the tier any more: turned on again, it gets every segment.
            self.tiered_end_offset = self.log_start_offset

    def close(self, *, sync: bool = True) -> None:
        """Flush and close every segment; the active one keeps its closing index entries.

        ``sync=False`` writes everything and syncs nothing, for a caller that syncs the
        whole filesystem at once (``sync_filesystem``, the log manager's shutdown) and
        only then records the recovery point, which this sets to the log end."""
        if sync:
            self.flush()
        with self._lock:
            self.producer_state.take_snapshot(sync=sync)
            self.local.close()

    def close_deleted(self) -> None:
        """Close the log of a partition being deleted: reads under way or to come raise
        UNKNOWN_TOPIC_OR_PARTITION."""
        self.local.deleted = True
        self.close()

    # -- retention --------------------------------------------------------------------

    def delete_old_segments(
        self,
        *,
        now_ms: int | None = None,
        is_tiered: Callable[[LogSegment], bool] | None = None,
    ) -> int:
        """Apply retention (time, size, log start offset); returns segments retired.

        With ``remote.storage.enable`` the local budgets apply and a segment's local
        copy goes only once ``is_tiered`` confirms it is safely in the tier; without a
        tier to ask, nothing past the log start offset is deleted locally. A tier that
        takes no more uploads (``remote.log.copy.disable``) frees nothing locally: the
        total budgets apply, as to a log without a tier, and move the log start (Kafka's
        KIP-950; the tier's own retention deletes what the tier holds below it).
        """
        now_ms = self.clock_ms() if now_ms is None else now_ms
        tiered = self.config.copies_to_tier
        budget = (
            RetentionBudget.local(self.config) if tiered else RetentionBudget.total(self.config)
        )
        tier_check = (is_tiered or _nothing_is_tiered) if tiered else None
        retired = 0
        while True:
            with self._lock:
                segments = self.local.segments
                count, reason = deletable_segments(
                    segments,
                    budget,
                    now_ms=now_ms,
                    log_start_offset=self.log_start_offset,
                    # A tiered copy's local budgets free disk, never data: they apply
                    # to a compacted topic too (its tier is cleaned instead).
                    delete_policy=tiered or "delete" in self.config.cleanup_policy,
                    is_tiered=tier_check,
                )
                if not count:
                    return retired
                if count == len(segments):
                    self._roll_locked()  # the log end lives on in a new, empty segment
                log.info("%s: retiring %d segments (%s)", self, count, reason)
                if not tiered:  # first, so a reader below it gets a clean out of range
                    self._move_log_start_locked(self.local.segments[count].base_offset)
                self.local.retire(segments[:count], now_ms)
                self._forget_removed_segments_locked(segments[:count])
            retired += count

    def _forget_removed_segments_locked(self, removed: Sequence[LogSegment]) -> None:
        """Drop the producer snapshots of segments that left the local log."""
        self.producer_state.on_segments_removed(
            [segment.base_offset for segment in removed],
            [segment.base_offset for segment in self.local.segments],
        )

    def delete_retired_files(self, now_ms: int | None = None) -> int:
        """Delete the files of retired segments whose delay has passed; returns how many."""
        return self.local.delete_retired_files(self.clock_ms() if now_ms is None else now_ms)

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

        Raises OffsetOutOfRangeError below the log start or past the log end, and
        OffsetMovedToTieredStorageError below the local log start. A read that raced
        the retirement of its segment, or a truncation, is retried on the current
        segments, so it returns whole batches or the clean error.
        """
        found = self.local.read(
            offset,
            max_bytes,
            upper_bound_offset=upper_bound_offset,
            min_one_batch=min_one_batch,
            check_range=self._check_in_range,
        )
        return LogRead(
            found.records, self.log_start_offset, found.log_end_offset, found.segment_base_offset
        )

    def _check_in_range(self, offset: int, log_end: int) -> None:
        if offset > log_end or offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {log_end}]"
            )
        if offset < self.local.first_segment_base_offset:
            raise OffsetMovedToTieredStorageError(
                f"offset {offset} is below the local log start {self.local_log_start_offset}"
            )

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for one partition.

        ``-2`` earliest, ``-1`` latest, ``-3`` the record with the largest timestamp,
        otherwise the first record whose timestamp is >= ``timestamp``.
        """
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_end_offset)
        if timestamp == MAX_TIMESTAMP:
            return self.local.max_timestamp_record()
        return self.local.find_offset_by_timestamp(
            timestamp, first_offset=lambda: self.log_start_offset
        )

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self.local.segments)})"
        )

    # -- compaction support -----------------------------------------------------------
    # The cleaner (cleaner.py) rewrites closed segments; this is what it needs of the log.

    def replace_segments(self, new: Sequence[LogSegment], old: Sequence[LogSegment]) -> bool:
        """Swap cleaned segments in for those they were made from (``LocalLog``'s
        ``replace_segments`` under the log's lock), then drop the producer snapshots of
        base offsets no segment has any more. Returns False, changing nothing, when
        ``old`` are no longer what the log holds; the caller then deletes ``new``.
        """
        with self._lock:
            if not self.local.replace_segments(new, old):
                return False
            self._forget_removed_segments_locked(old)
            return True
