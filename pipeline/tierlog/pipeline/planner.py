"""Planning: from a partition's history and the query's bounds to input splits.

A split names one segment, a byte range of it and the offsets to keep. The byte range
comes from the offset index, so a reader starts at (or just before) the first
selected batch and stops soon after the last, instead of scanning the segment:

- start: the index entry at or below the first offset gives a position at or before
  the batch holding it;
- end: an entry points at a batch's *last* offset, so the first entry at or above the
  end offset may still hold selected offsets, but the batch of the entry after it
  starts past them: that entry's position is where reading can stop.

Timestamps resolve to offsets as Kafka's ListOffsets does (the first offset whose
record timestamp is at or after the target), starting from the time index's entry.
``minPartitions`` cuts large byte ranges at offset-index positions, which are batch
boundaries, so every batch is decoded by exactly one split.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tierlog.pipeline.errors import DataLossError
from tierlog.pipeline.history import PartitionHistory, SegmentRange
from tierlog.pipeline.options import EARLIEST, LATEST, OffsetSpec
from tierlog.pipeline.segments import Opener, SegmentReader, SegmentRef
from tierlog.pipeline.transactions import aborted_transactions
from tierlog.storage.records import decode_records
from tierlog.storage.topic_partition import TopicPartition
from tierlog.storage.transaction_index import AbortedTxn

__all__ = [
    "InputSplit",
    "OffsetRange",
    "Opener",
    "find_offset_by_timestamp",
    "plan_partition",
    "resolve_range",
    "split_for_parallelism",
]


@dataclass(frozen=True)
class OffsetRange:
    """The offsets ``[start, end)`` of one partition that a query reads."""

    tp: TopicPartition
    start: int
    end: int


@dataclass(frozen=True)
class InputSplit:
    """Decode ``segment``'s bytes ``[start_position, end_position)``, keeping the
    offsets ``[start_offset, end_offset)`` but the transactional batches of ``aborted``
    transactions."""

    tp: TopicPartition
    segment: SegmentRef
    start_position: int
    end_position: int
    start_offset: int
    end_offset: int
    aborted: tuple[AbortedTxn, ...] = ()

    @property
    def size_bytes(self) -> int:
        return self.end_position - self.start_position


def resolve_range(
    history: PartitionHistory,
    starting: OffsetSpec,
    ending: OffsetSpec,
    open_segment: Opener,
    *,
    fail_on_data_loss: bool,
) -> OffsetRange:
    """The offsets the bounds select in ``history`` (empty when nothing matches)."""
    tp = history.tp
    start = _bound(history, starting, open_segment, tp)
    end = _bound(history, ending, open_segment, tp)
    if start < history.earliest:
        if fail_on_data_loss:
            raise DataLossError(
                f"{tp.topic}-{tp.partition}: offset {start} is gone, the earliest stored is "
                f"{history.earliest} (set failOnDataLoss=false to start there instead)"
            )
        start = history.earliest
    end = min(end, history.latest)
    return OffsetRange(tp, start, max(start, end))


def _bound(
    history: PartitionHistory, spec: OffsetSpec, open_segment: Opener, tp: TopicPartition
) -> int:
    if spec.timestamp_ms is not None:
        found = find_offset_by_timestamp(history, spec.timestamp_ms, open_segment)
        return history.latest if found is None else found
    offset = spec.for_partition(tp)
    if offset == EARLIEST:
        return history.earliest
    if offset == LATEST:
        return history.latest
    return offset


def find_offset_by_timestamp(
    history: PartitionHistory, timestamp_ms: int, open_segment: Opener
) -> int | None:
    """The first offset whose record's timestamp is >= ``timestamp_ms``, if any."""
    last = len(history.ranges) - 1
    for number, segment_range in enumerate(history.ranges):
        reader = open_segment(segment_range.segment.ref)
        try:
            found = _find_in_segment(reader, segment_range, timestamp_ms, sealed=number < last)
        finally:
            reader.close()
        if found is not None:
            return found
    return None


def _find_in_segment(
    reader: SegmentReader, segment_range: SegmentRange, timestamp_ms: int, *, sealed: bool
) -> int | None:
    times = reader.time_index()
    # A sealed segment's last time-index entry is its largest timestamp; the active
    # one may hold larger timestamps than its index has seen yet.
    if sealed and len(times) and times.keys[-1] < timestamp_ms:
        return None
    slot = bisect.bisect_right(times.keys, timestamp_ms) - 1
    from_offset = segment_range.from_offset
    if slot >= 0:
        from_offset = max(from_offset, times.values[slot])
    position = _floor_position(reader, from_offset)
    for batch in reader.batches(position):
        header = batch.header
        if header.base_offset >= segment_range.to_offset:
            return None
        if header.is_control or header.last_offset < segment_range.from_offset:
            continue
        if header.magic > 0 and header.max_timestamp < timestamp_ms:
            continue
        for record in decode_records(batch.buffer, header):
            if (
                record.timestamp >= timestamp_ms
                and segment_range.from_offset <= record.offset < segment_range.to_offset
            ):
                return record.offset
    return None


def _floor_position(reader: SegmentReader, offset: int) -> int:
    index = reader.offset_index()
    slot = bisect.bisect_right(index.keys, offset) - 1
    return index.values[slot] if slot >= 0 else 0


def _end_position(reader: SegmentReader, end_offset: int) -> int:
    index = reader.offset_index()
    slot = bisect.bisect_left(index.keys, end_offset)
    return index.values[slot + 1] if slot + 1 < len(index) else reader.size_bytes


def plan_partition(
    history: PartitionHistory, selected: OffsetRange, open_segment: Opener
) -> Iterator[InputSplit]:
    """One split per segment that holds selected offsets, narrowed by the index, with
    the aborted transactions overlapping its offsets."""
    aborted = aborted_transactions(history, selected.start, selected.end, open_segment)
    for segment_range in history.ranges:
        start = max(segment_range.from_offset, selected.start)
        end = min(segment_range.to_offset, selected.end)
        if start >= end:
            continue
        reader = open_segment(segment_range.segment.ref)
        try:
            yield InputSplit(
                history.tp,
                segment_range.segment.ref,
                _floor_position(reader, start),
                _end_position(reader, end),
                start,
                end,
                tuple(txn for txn in aborted if txn.overlaps(start, end)),
            )
        finally:
            reader.close()


def split_for_parallelism(
    splits: Sequence[InputSplit], min_partitions: int | None, open_segment: Opener
) -> list[InputSplit]:
    """Cut the splits at index positions into at least ``min_partitions`` pieces (as far
    as the index has positions to cut at), each split in proportion to its bytes."""
    if min_partitions is None or len(splits) >= min_partitions:
        return list(splits)
    total = sum(split.size_bytes for split in splits) or 1
    result: list[InputSplit] = []
    for split in splits:
        pieces = math.ceil(split.size_bytes * min_partitions / total)
        if pieces <= 1:
            result.append(split)
            continue
        reader = open_segment(split.segment)
        try:
            positions = reader.offset_index().values
        finally:
            reader.close()
        result.extend(_cut(split, positions, pieces))
    return result


def _cut(split: InputSplit, positions: Sequence[int], pieces: int) -> Iterator[InputSplit]:
    """``pieces`` near-equal byte ranges, each cut at the first index position at or
    after its ideal end (fewer when the index has fewer positions)."""
    start = split.start_position
    for piece in range(1, pieces):
        ideal = split.start_position + split.size_bytes * piece // pieces
        slot = bisect.bisect_left(positions, max(ideal, start + 1))
        if slot == len(positions) or positions[slot] >= split.end_position:
            break
        yield _with_bytes(split, start, positions[slot])
        start = positions[slot]
    yield _with_bytes(split, start, split.end_position)


def _with_bytes(split: InputSplit, start: int, end: int) -> InputSplit:
    return dataclasses.replace(split, start_position=start, end_position=end)
