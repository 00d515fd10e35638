"""Idempotent producer state (Kafka's ProducerStateManager, ProducerStateEntry and
ProducerAppendInfo).

Per producer id the log remembers the epoch, the metadata of the producer's last
``NUM_BATCHES_TO_RETAIN`` data batches (first/last sequence, last offset, max
timestamp), the coordinator epoch of its last transaction marker, and the first
offset of its open transaction. Five batches, because Kafka's producer keeps at most
five requests in flight per connection: a retry of any of them is recognised.

The rules of a client append are Kafka 4.1.1's:
- an epoch below the producer's is ``INVALID_PRODUCER_EPOCH``; a higher epoch
  resets the producer, and its first sequence must be 0 (``OUT_OF_ORDER_SEQUENCE_NUMBER``);
- a batch whose epoch and sequence range equal one of the cached batches is a
  duplicate: nothing is written and the append answers with the original offsets;
- within an epoch a batch must start right after the last sequence (wrapping from
  int32 max to 0), else ``OUT_OF_ORDER_SEQUENCE_NUMBER``;
- an unknown producer may start at any sequence: since KIP-360 Kafka accepts it
  (its state may have gone with retention) and never answers ``UNKNOWN_PRODUCER_ID``;
- a transactional batch opens a transaction (``current_txn_first_offset``) unless one
  is open; a non-transactional one while it is open is ``INVALID_TXN_STATE``; a
  COMMIT/ABORT control batch (written by a transaction coordinator, never a client)
  closes it; a marker from an older coordinator epoch is ``TRANSACTION_COORDINATOR_FENCED``.

An ABORT that closes a transaction becomes an entry of the marker segment's
transaction index, with Kafka's last stable offset: the first offset of the earliest
transaction of another producer still open at the marker, else the marker's offset + 1.

Invariant: the map describes the log below ``map_end_offset``, which the log keeps
equal to its end (it updates both under its lock). A snapshot file named N holds the
map for the log below N (producer_snapshot.py); loading takes the newest readable
snapshot at or below the log end and replays the batch headers after it.

Retention: when the log start moves, producers whose last data batch is below it are
dropped (Kafka's ``truncateHead`` before 3.0; Kafka now keeps them until
``producer.id.expiration.ms``). State then depends only on the log from its start, so
a rebuild from the segments gives the same producers as the running map.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from tierlog.storage.checkpoints import fsync_directory
from tierlog.storage.errors import (
    CorruptSnapshotError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from tierlog.storage.producer_snapshot import (
    SnapshotEntry,
    list_snapshot_offsets,
    read_snapshot,
    snapshot_path,
    sync_snapshot,
    write_snapshot,
)
from tierlog.storage.records import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    EndTransactionMarker,
    parse_header,
    read_end_txn_marker,
)
from tierlog.storage.segment import LogSegment
from tierlog.storage.transaction_index import AbortedTxn

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerAppend",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "aborted_entry",
    "first_open_txn_offset",
]

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
# Snapshots kept at or below the recovery point: the newest is what a restart loads;
# one more in case it is unreadable. Those above the recovery point are all kept.
SNAPSHOTS_TO_RETAIN = 2
INT32_MAX = 2**31 - 1


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` on Kafka's sequence ring (0..int32 max)."""
    return (sequence - decrement) % (INT32_MAX + 1)


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


class BatchMetadata(NamedTuple):
    """One data batch of a producer, as the state remembers it."""

    last_seq: int
    last_offset: int
    offset_delta: int  # last offset - first offset (= last seq - first seq)
    timestamp: int  # the batch's max timestamp

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker: its first offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def _batch_cache() -> deque[BatchMetadata]:
    return deque(maxlen=NUM_BATCHES_TO_RETAIN)


@dataclass(slots=True)
class ProducerStateEntry:
    """What the log knows of one producer id; batches oldest first."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(default_factory=_batch_cache)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def update_epoch(self, producer_epoch: int) -> None:
        """A new epoch forgets the batches of the old one."""
        if producer_epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = producer_epoch

    def add_batch(self, producer_epoch: int, batch: BatchMetadata) -> None:
        self.update_epoch(producer_epoch)
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def find_duplicate(
        self, producer_epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def merge(self, later: ProducerStateEntry) -> None:
        """Take on what ``later`` (this producer's next appends) changed."""
        self.update_epoch(later.producer_epoch)
        self.batches.extend(later.batches)
        self.coordinator_epoch = later.coordinator_epoch
        self.current_txn_first_offset = later.current_txn_first_offset
        self.last_timestamp = later.last_timestamp

    def to_snapshot(self) -> SnapshotEntry:
        last = self.batches[-1] if self.batches else None
        return SnapshotEntry(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            last_sequence=last.last_seq if last else NO_SEQUENCE,
            last_offset=last.last_offset if last else -1,
            offset_delta=last.offset_delta if last else 0,
            timestamp=self.last_timestamp,
            coordinator_epoch=self.coordinator_epoch,
            current_txn_first_offset=(
                -1 if self.current_txn_first_offset is None else self.current_txn_first_offset
            ),
        )

    @classmethod
    def from_snapshot(cls, entry: SnapshotEntry) -> ProducerStateEntry:
        state = cls(
            producer_id=entry.producer_id,
            producer_epoch=entry.producer_epoch,
            coordinator_epoch=entry.coordinator_epoch,
            last_timestamp=entry.timestamp,
            current_txn_first_offset=(
                entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else None
            ),
        )
        if entry.last_offset >= 0:
            state.batches.append(
                BatchMetadata(
                    entry.last_sequence, entry.last_offset, entry.offset_delta, entry.timestamp
                )
            )
        return state


class ProducerAppendInfo:
    """One producer's batches in one append, checked against its state as they come.

    ``updated`` starts from the producer's epoch and transaction but no batches, and
    collects this append's; ``ProducerStateManager.update`` merges it once written.
    ``validate`` is for client produce; replaying the log checks nothing (the log is
    what it is, as Kafka's replication origin). ``check_sequences`` is off for a
    coordinator's own transactional writes, which carry no sequence (Kafka checks
    sequences of client batches only).
    """

    def __init__(
        self, current: ProducerStateEntry, *, validate: bool, check_sequences: bool = True
    ):
        self.producer_id = current.producer_id
        self._current = current
        self._validate = validate
        self._check_sequences = check_sequences
        self.updated = ProducerStateEntry(
            current.producer_id,
            current.producer_epoch,
            current.coordinator_epoch,
            current.last_timestamp,
            current.current_txn_first_offset,
        )

    def append_data_batch(
        self,
        header: BatchHeader,
        *,
        first_offset: int,
        last_offset: int,
        timestamp: int,
    ) -> None:
        epoch, first_seq = header.producer_epoch, header.base_sequence
        if self._validate:
            self._check_epoch(epoch, first_offset)
            if self._check_sequences:
                self._check_sequence(epoch, first_seq, first_offset)
        metadata = BatchMetadata(
            header.last_sequence, last_offset, last_offset - first_offset, timestamp
        )
        self.updated.add_batch(epoch, metadata)
        open_txn = self.updated.current_txn_first_offset
        if open_txn is not None and not header.is_transactional:
            if self._validate:
                raise InvalidTxnStateError(
                    f"non-transactional write from producer {self.producer_id} at offset "
                    f"{first_offset} while its transaction from {open_txn} is open"
                )
        elif open_txn is None and header.is_transactional:
            self.updated.current_txn_first_offset = first_offset

    def append_end_txn_marker(
        self, marker: EndTransactionMarker, producer_epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        updated = self.updated
        if self._validate:
            self._check_epoch(producer_epoch, offset)
            if marker.coordinator_epoch < updated.coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"marker for producer {self.producer_id} at offset {offset} comes from "
                    f"coordinator epoch {marker.coordinator_epoch}, below the last seen "
                    f"{updated.coordinator_epoch}"
                )
        updated.update_epoch(producer_epoch)
        updated.coordinator_epoch = marker.coordinator_epoch
        updated.last_timestamp = timestamp
        first_offset, updated.current_txn_first_offset = updated.current_txn_first_offset, None
        if first_offset is None:
            return None
        return CompletedTxn(self.producer_id, first_offset, offset, not marker.committed)

    def _check_epoch(self, epoch: int, offset: int) -> None:
        current = self.updated.producer_epoch
        if epoch < current:
            raise InvalidProducerEpochError(
                f"epoch of producer {self.producer_id} at offset {offset} is {epoch}, "
                f"below the last seen epoch {current}"
            )

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        updated, current = self.updated, self._current
        if epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {self.producer_id} at offset {offset}: new epoch {epoch} "
                    f"starts at sequence {first_seq}, not 0 (current epoch "
                    f"{updated.producer_epoch})"
                )
            return
        if not updated.is_empty:
            last_seq = updated.last_seq
        elif epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # No epoch known (a new producer, or its state went with retention): any sequence.
        # Unlike Kafka (one batch per request), later batches of the same request chain.
        unknown = current.producer_epoch == NO_PRODUCER_EPOCH and updated.is_empty
        if not unknown and not in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {self.producer_id} at offset "
                f"{offset}: {first_seq} (incoming), {last_seq} (current end sequence)"
            )


@dataclass
class ProducerAppend:
    """A request's producer batches, checked: either all duplicates (``duplicates``
    holds the original batches and nothing is to be written) or the updates to apply
    once the batches are written, and the transactions its markers aborted (for the
    transaction index of the segment the batches go to)."""

    updates: dict[int, ProducerAppendInfo]
    duplicates: list[BatchMetadata]
    aborted: list[AbortedTxn] = field(default_factory=list)


def first_open_txn_offset(
    entries: Mapping[int, ProducerStateEntry],
    *,
    overrides: Mapping[int, ProducerAppendInfo] | None = None,
    excluding: int | None = None,
) -> int | None:
    """The first offset of the earliest open transaction among ``entries`` (as changed by
    ``overrides``, an append in progress), leaving out producer ``excluding``."""
    firsts = {pid: entry.current_txn_first_offset for pid, entry in entries.items()}
    firsts.update(
        (pid, info.updated.current_txn_first_offset) for pid, info in (overrides or {}).items()
    )
    if excluding is not None:
        firsts.pop(excluding, None)
    return min((offset for offset in firsts.values() if offset is not None), default=None)


def aborted_entry(completed: CompletedTxn, first_open: int | None) -> AbortedTxn:
    """The transaction index entry of an aborted transaction, given the first offset of
    the transactions other producers still had open at its marker."""
    last_stable = completed.last_offset + 1 if first_open is None else first_open
    return AbortedTxn(
        completed.producer_id, completed.first_offset, completed.last_offset, last_stable
    )


class ProducerStateManager:
    """The producer map of one log, and its snapshot files. Not thread-safe: the log
    calls it under its lock."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        self._snapshots: list[int] = list_snapshot_offsets(directory)
        self._unsynced: set[int] = set()  # snapshot offsets published but not fsynced

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    # -- appends ----------------------------------------------------------------------

    def prepare_append(
        self,
        headers: Sequence[BatchHeader],
        first_offset: int,
        *,
        append_time_ms: int = -1,
        markers: Mapping[int, EndTransactionMarker] | None = None,
        from_coordinator: bool = False,
    ) -> ProducerAppend:
        """Check the producer batches of one request that will start at ``first_offset``.

        ``markers`` are the end-transaction markers of the request's control batches, by
        batch position (a coordinator's append; a client's has none). Raises the typed
        error of the first batch that breaks a rule, and DUPLICATE_SEQUENCE_NUMBER for a
        request that mixes batches already written with new ones. Changes nothing:
        ``update`` applies the result after the write. ``from_coordinator``: the group
        coordinator's transactional offset commits carry no sequence (Kafka's
        NO_SEQUENCE), so neither duplicates nor sequences are looked for in its batches.
        """
        markers = markers or {}
        updates: dict[int, ProducerAppendInfo] = {}
        duplicates: list[BatchMetadata] = []
        aborted: list[AbortedTxn] = []
        new_batches = 0
        offset = first_offset
        for header in headers:
            last_offset = offset + header.last_offset - header.base_offset
            pid = header.producer_id
            if pid < 0:
                new_batches += 1
                offset = last_offset + 1
                continue
            entry = self.producers.get(pid)
            duplicate = (
                entry.find_duplicate(
                    header.producer_epoch, header.base_sequence, header.last_sequence
                )
                if entry is not None and not header.is_control and not from_coordinator
                else None
            )
            if header.is_control:
                info = updates.get(pid)
                if info is None:
                    info = updates[pid] = ProducerAppendInfo(
                        entry or ProducerStateEntry(pid), validate=True
                    )
                timestamp = append_time_ms if append_time_ms >= 0 else header.max_timestamp
                completed = info.append_end_txn_marker(
                    markers[header.position], header.producer_epoch, offset, timestamp
                )
                if completed is not None and completed.is_aborted:
                    first_open = first_open_txn_offset(
                        self.producers, overrides=updates, excluding=pid
                    )
                    aborted.append(aborted_entry(completed, first_open))
                new_batches += 1
            elif duplicate is not None:
                duplicates.append(duplicate)
            else:
                info = updates.get(pid)
                if info is None:
                    info = updates[pid] = ProducerAppendInfo(
                        entry or ProducerStateEntry(pid),
                        validate=True,
                        check_sequences=not from_coordinator,
                    )
                timestamp = append_time_ms if append_time_ms >= 0 else header.max_timestamp
                info.append_data_batch(
                    header, first_offset=offset, last_offset=last_offset, timestamp=timestamp
                )
                new_batches += 1
            offset = last_offset + 1
        if duplicates and new_batches:
            raise DuplicateSequenceError(
                f"{len(duplicates)} batches of this request are already in the log and "
                f"{new_batches} are not: send new batches in a request of their own"
            )
        return ProducerAppend(updates, duplicates, aborted)

    def update(self, info: ProducerAppendInfo) -> None:
        current = self.producers.get(info.producer_id)
        if current is None:
            self.producers[info.producer_id] = info.updated
        else:
            current.merge(info.updated)

    def complete_append(self, append: ProducerAppend, log_end_offset: int) -> None:
        """Apply a written append's updates; the map now describes the log below its end."""
        for info in append.updates.values():
            self.update(info)
        self.map_end_offset = log_end_offset

    # -- rebuilding from the log --------------------------------------------------------

    def load(
        self,
        segments: Sequence[LogSegment],
        *,
        log_start_offset: int,
        log_end_offset: int,
        rebuild_txn_indexes: Mapping[LogSegment, int] | None = None,
    ) -> None:
        """Rebuild the map of the log below ``log_end_offset``: the newest readable snapshot
        at or below it (within the local segments), then the batches after it.

        The transaction indexes of ``rebuild_txn_indexes`` (segments recovery emptied
        from the offset given) are written again on the way, so the snapshot loaded is
        the newest at or below the first of those offsets; the later ones stay (they
        describe data recovery kept)."""
        local_start = max(log_start_offset, segments[0].base_offset)
        load_up_to = min((rebuild_txn_indexes or {}).values(), default=log_end_offset)
        self._remove_stray_snapshots([segment.base_offset for segment in segments])
        self._delete_snapshots(
            lambda offset: offset > log_end_offset or offset < segments[0].base_offset
        )
        self.producers.clear()
        self.map_end_offset = local_start
        for offset in reversed([offset for offset in self._snapshots if offset <= load_up_to]):
            try:
                entries = read_snapshot(snapshot_path(self.directory, offset))
            except CorruptSnapshotError as error:
                log.warning("%s: ignoring producer snapshot: %s", self.directory.name, error)
                self._delete_snapshots({offset}.__contains__)
                continue
            for entry in entries:
                self.producers[entry.producer_id] = ProducerStateEntry.from_snapshot(entry)
            self.map_end_offset = offset
            break
        self.truncate_head(log_start_offset)
        self.map_end_offset = max(self.map_end_offset, local_start)
        self.replay(segments, log_end_offset, rebuild_txn_indexes=rebuild_txn_indexes)
        self.map_end_offset = log_end_offset

    def replay(
        self,
        segments: Sequence[LogSegment],
        end_offset: int,
        *,
        rebuild_txn_indexes: Mapping[LogSegment, int] | None = None,
    ) -> None:
        """Apply the batches in [``map_end_offset``, ``end_offset``) from ``segments``,
        adding the transactions aborted from the offset given to the indexes of
        ``rebuild_txn_indexes``."""
        rebuilding = rebuild_txn_indexes or {}
        start = self.map_end_offset
        for position, segment in enumerate(segments):
            if segment.base_offset >= end_offset:
                break
            if position + 1 < len(segments) and segments[position + 1].base_offset <= start:
                continue
            first = 0
            if start > segment.base_offset:
                found = segment.translate_offset(start)
                if found is None:
                    continue
                first = found.position
                if position + 1 < len(segments):
                    segment.release_indexes()
            for batch in segment.headers(first):
                header = batch.header
                if header.last_offset >= end_offset:
                    break
                if header.last_offset < start or header.producer_id < 0:
                    continue
                completed = self._replay_batch(segment, batch.position, header)
                if (
                    completed is not None
                    and completed.is_aborted
                    and header.base_offset >= rebuilding.get(segment, end_offset)
                ):
                    first_open = first_open_txn_offset(self.producers)
                    segment.txn_index.append(aborted_entry(completed, first_open))
        self.map_end_offset = max(self.map_end_offset, end_offset)

    def _replay_batch(
        self, segment: LogSegment, position: int, header: BatchHeader
    ) -> CompletedTxn | None:
        pid = header.producer_id
        info = ProducerAppendInfo(
            self.producers.get(pid) or ProducerStateEntry(pid), validate=False
        )
        completed = None
        if header.is_control:
            if header.record_count == 0:
                return None  # the cleaner emptied it: the transaction is gone from the log
            whole = segment.log.read(position, header.size)
            try:
                marker = read_end_txn_marker(whole, parse_header(whole, 0))
            except (InvalidRecordError, ValueError) as error:
                log.debug(
                    "control batch at %d is not a transaction marker: %s", header.base_offset, error
                )
                return None
            completed = info.append_end_txn_marker(
                marker, header.producer_epoch, header.base_offset, header.max_timestamp
            )
        else:
            info.append_data_batch(
                header,
                first_offset=header.base_offset,
                last_offset=header.last_offset,
                timestamp=header.max_timestamp,
            )
        self.update(info)
        return completed

    # -- log start and truncation -----------------------------------------------------

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers whose last data batch is below the new log start."""
        gone = [
            pid
            for pid, entry in self.producers.items()
            if entry.last_data_offset < log_start_offset
        ]
        for pid in gone:
            del self.producers[pid]
        self.map_end_offset = max(self.map_end_offset, log_start_offset)

    def on_segments_removed(self, removed: Sequence[int], remaining: Sequence[int]) -> None:
        """Segments with base offsets ``removed`` left the log (retention, a cleaner's
        swap): their snapshots go, and every snapshot below the first remaining one."""
        gone = set(removed).difference(remaining)
        first = min(remaining)
        self._delete_snapshots(lambda offset: offset < first or offset in gone)

    def _remove_stray_snapshots(self, segment_bases: Sequence[int]) -> None:
        """Kafka's removeStraySnapshots: a snapshot belongs to a segment base offset, except
        the newest one above the last segment's base (the one written at clean close)."""
        bases = set(segment_bases)
        strays = [offset for offset in self._snapshots if offset not in bases]
        keep = strays[-1] if strays and strays[-1] > max(bases) else None
        self._delete_snapshots(lambda offset: offset not in bases and offset != keep)

    def truncate_and_reload(
        self, segments: Sequence[LogSegment], *, log_start_offset: int, log_end_offset: int
    ) -> None:
        """After the log was cut to ``log_end_offset``: drop later snapshots, rebuild."""
        self.load(segments, log_start_offset=log_start_offset, log_end_offset=log_end_offset)
        self._sync_directory()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._delete_snapshots(lambda _offset: True)
        self._sync_directory()
        self.producers.clear()
        self.map_end_offset = offset

    # -- snapshots --------------------------------------------------------------------

    def take_snapshot(self, *, sync: bool) -> None:
        """Write the map as ``<map end offset>.snapshot`` unless that file exists.

        Without ``sync`` the file is published but only durable once ``sync_snapshots``
        ran on it (the log does that when it flushes past the offset)."""
        offset = self.map_end_offset
        if offset in self._snapshots or (offset == 0 and not self.producers):
            if sync and offset in self._unsynced:
                self._unsynced.discard(offset)
                self.sync_snapshots([offset])
            return
        path = snapshot_path(self.directory, offset)
        write_snapshot(path, [entry.to_snapshot() for entry in self.producers.values()], sync=sync)
        self._snapshots.append(offset)
        self._snapshots.sort()
        if not sync:
            self._unsynced.add(offset)

    def unsynced_snapshots(self, up_to_offset: int) -> list[int]:
        """Snapshots at or below ``up_to_offset`` not yet fsynced. They count as synced from
        now: the caller passes them to ``sync_snapshots``, which needs no lock."""
        due = sorted(offset for offset in self._unsynced if offset <= up_to_offset)
        self._unsynced.difference_update(due)
        return due

    def sync_snapshots(self, offsets: Sequence[int]) -> None:
        for offset in offsets:
            sync_snapshot(snapshot_path(self.directory, offset))
        if offsets:
            self._sync_directory()

    def prune_snapshots(self, recovery_point: int, *, keep_from: int | None = None) -> None:
        """Keep every snapshot above the recovery point and the newest few at or below it,
        and every one at or above ``keep_from`` (those the tier uploader still needs)."""
        at_or_below = [offset for offset in self._snapshots if offset <= recovery_point]
        doomed = set(at_or_below[:-SNAPSHOTS_TO_RETAIN])
        if keep_from is not None:
            doomed = {offset for offset in doomed if offset < keep_from}
        if doomed:
            self._delete_snapshots(doomed.__contains__)

    def _delete_snapshots(self, doomed: Callable[[int], bool]) -> None:
        kept = []
        for offset in self._snapshots:
            if doomed(offset):
                snapshot_path(self.directory, offset).unlink(missing_ok=True)
                self._unsynced.discard(offset)
            else:
                kept.append(offset)
        self._snapshots = kept

    def _sync_directory(self) -> None:
        try:
            fsync_directory(self.directory)
        except OSError as error:
            raise KafkaStorageError(f"cannot sync {self.directory}: {error}") from error
