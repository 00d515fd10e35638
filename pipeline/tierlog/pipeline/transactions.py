"""What a read_committed reader must know of a partition's transactions.

Two facts, both read with the storage engine's own formats:

- the **aborted transactions** overlapping the offsets a query reads, from the
  segments' transaction indexes (``.txnindex`` files, or the tier's ``txn_index``
  parts), searched from the segment holding the first offset on, as Kafka's broker
  searches them for a read_committed fetch; decoding drops the transactional batches
  of a producer that lie inside one of its aborted ranges (``AbortedRanges``);
- the **last stable offset**: the first offset of the earliest transaction still open
  at the end of the data. Records at or past it are undecided and are not returned
  yet, as Kafka's read_committed consumer does not see them. It is found from the
  newest producer snapshot a segment has at its end (a ``.snapshot`` file, or the
  tier's ``producer_snapshot`` part), whose entries name the producers' open
  transactions, then the batch headers after it (markers close them, transactional
  batches open them); with no snapshot anywhere, from the start of the data.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Iterator

from tierlog.pipeline.history import PartitionHistory, SegmentRange
from tierlog.pipeline.segments import Opener, SegmentReader
from tierlog.storage.errors import CorruptSnapshotError, InvalidRecordError
from tierlog.storage.file_records import FileBatch
from tierlog.storage.producer_snapshot import decode_snapshot
from tierlog.storage.records import BatchHeader, read_end_txn_marker
from tierlog.storage.transaction_index import AbortedTxn, collect_aborted

__all__ = [
    "AbortedRanges",
    "aborted_transactions",
    "last_stable_offset",
    "with_last_stable_offset",
]


class AbortedRanges:
    """Answers "is this batch aborted data?" for one split's aborted transactions."""

    def __init__(self, aborted: Iterable[AbortedTxn]):
        by_producer: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for txn in aborted:
            by_producer[txn.producer_id].append((txn.first_offset, txn.last_offset))
        self._ranges = {pid: sorted(ranges) for pid, ranges in by_producer.items()}

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def holds(self, header: BatchHeader) -> bool:
        """Whether ``header`` is a transactional batch inside an aborted transaction of
        its producer (a producer has one transaction at a time, so its batches between
        the transaction's first offset and its ABORT marker are that transaction's)."""
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._ranges.get(header.producer_id)
        if not ranges:
            return False
        slot = bisect.bisect_right(ranges, (header.base_offset, 2**63)) - 1
        return slot >= 0 and header.base_offset <= ranges[slot][1]


def _ranges_from(history: PartitionHistory, offset: int) -> list[SegmentRange]:
    return [segment_range for segment_range in history.ranges if segment_range.to_offset > offset]


def aborted_transactions(
    history: PartitionHistory, start: int, end: int, open_segment: Opener
) -> tuple[AbortedTxn, ...]:
    """The aborted transactions overlapping ``[start, end)`` (each once, though a local
    copy and a tiered copy of a segment may both list it)."""
    if start >= end:
        return ()

    def indexes() -> Iterator[list[AbortedTxn]]:
        for segment_range in _ranges_from(history, start):
            if not segment_range.segment.ref.has_txn_index:
                continue
            reader = open_segment(segment_range.segment.ref)
            try:
                yield reader.aborted_transactions()
            finally:
                reader.close()

    return tuple(dict.fromkeys(collect_aborted(indexes(), start, end)))


def last_stable_offset(history: PartitionHistory, open_segment: Opener) -> int:
    """The first offset of the earliest transaction open at the end of ``history``
    (never below its earliest offset), else its end."""
    ranges = history.ranges
    open_txns: dict[int, int] = {}
    scan_from = history.earliest
    for segment_range in reversed(ranges):
        info = segment_range.segment
        reader = open_segment(info.ref)
        try:
            entries = decode_snapshot(reader.producer_snapshot(info.next_offset))
        except CorruptSnapshotError:  # none stored (empty), or unreadable: an older one
            continue
        finally:
            reader.close()
        open_txns = {
            entry.producer_id: entry.current_txn_first_offset
            for entry in entries
            if entry.current_txn_first_offset >= 0
        }
        scan_from = info.next_offset
        break
    for segment_range in _ranges_from(history, scan_from):
        _replay(segment_range, scan_from, open_txns, open_segment)
    end = history.end_offset
    first_open = min(open_txns.values(), default=end)
    return max(min(first_open, end), history.earliest)


def _replay(
    segment_range: SegmentRange, scan_from: int, open_txns: dict[int, int], open_segment: Opener
) -> None:
    """Open and close transactions with the batches of ``segment_range`` from
    ``scan_from`` on (producer batches' headers; markers are read whole and decoded)."""
    reader = open_segment(segment_range.segment.ref)
    try:
        for batch in reader.headers():
            header = batch.header
            if header.base_offset >= segment_range.to_offset:
                break
            if header.last_offset < max(scan_from, segment_range.from_offset):
                continue
            if header.producer_id < 0:
                continue
            if header.is_control:
                if header.record_count > 0 and _is_end_marker(reader, batch):
                    open_txns.pop(header.producer_id, None)
            elif header.is_transactional:
                open_txns.setdefault(header.producer_id, header.base_offset)
    finally:
        reader.close()


def _is_end_marker(reader: SegmentReader, batch: FileBatch) -> bool:
    whole = next(reader.batches(batch.position, batch.end), None)
    if whole is None:
        return False
    try:
        read_end_txn_marker(whole.buffer, whole.header)
    except (InvalidRecordError, ValueError):
        return False
    return True


def with_last_stable_offset(history: PartitionHistory, open_segment: Opener) -> PartitionHistory:
    """``history`` ending at its last stable offset (its ``latest``)."""
    return dataclasses.replace(
        history, last_stable_offset=last_stable_offset(history, open_segment)
    )
