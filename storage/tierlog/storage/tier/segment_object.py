"""What goes into a closed segment's object: its parts, uploaded as one body.

A segment object is its parts back to back (``manifest.SegmentPart`` order): the log
bytes, the trimmed offset and time indexes, the producer-state snapshot at the
segment's end offset, the leader-epoch entries covering it, and the transaction index
(its whole entries; empty when the segment aborted no transaction). The body is a
``Concatenation`` of the ``.log`` file itself (pinned: a file the cleaner swapped in
under its name since fails the put) and the small parts read into memory, so the log
bytes go from the file to the store without a staged copy. The segment
must be closed: its files no longer change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, read_epoch_checkpoint
from tierlog.storage.errors import CorruptRecordError, KafkaStorageError
from tierlog.storage.index import NO_TIMESTAMP
from tierlog.storage.producer_snapshot import snapshot_path
from tierlog.storage.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_path
from tierlog.storage.tier.manifest import ByteRange, SegmentPart, part_ranges
from tierlog.storage.tier.store import Concatenation, PinnedFile
from tierlog.storage.transaction_index import encode_entries

__all__ = [
    "SegmentObject",
    "assemble_segment_object",
    "decode_leader_epochs",
    "encode_leader_epochs",
    "epochs_covering",
    "segment_object",
]

_OFFSET_ENTRY_BYTES = 8
_TIME_ENTRY_BYTES = 12


@dataclass(frozen=True)
class SegmentObject:
    """A segment's object ready to PUT, with the facts its manifest entry records."""

    body: Concatenation
    base_offset: int
    end_offset: int
    base_timestamp: int
    max_timestamp: int
    offset_of_max_timestamp: int
    parts: tuple[ByteRange, ...]

    @property
    def size_bytes(self) -> int:
        return self.parts[-1].end


def encode_leader_epochs(entries: Sequence[tuple[int, int]]) -> bytes:
    """(epoch, start offset) pairs in ``leader-epoch-checkpoint``'s text form."""
    lines = ["0", str(len(entries)), *(f"{epoch} {start}" for epoch, start in entries)]
    return ("\n".join(lines) + "\n").encode()


def decode_leader_epochs(data: bytes) -> list[tuple[int, int]]:
    if not data:
        return []
    try:
        lines = data.decode().splitlines()
        if lines[0] != "0":
            raise ValueError(f"version {lines[0]!r}")
        count = int(lines[1])
        rows = [line.split() for line in lines[2 : 2 + count]]
        entries = [(int(epoch), int(start)) for epoch, start in rows]
    except (ValueError, IndexError, UnicodeDecodeError) as error:
        raise CorruptRecordError(f"leader epochs part is malformed: {error}") from error
    if len(entries) != count:
        raise CorruptRecordError(f"leader epochs part lists {len(entries)} of {count} entries")
    return entries


def epochs_covering(
    entries: Sequence[tuple[int, int]], base_offset: int, end_offset: int
) -> list[tuple[int, int]]:
    """The epoch entries in force in ``[base_offset, end_offset)``: the last one starting
    at or before the base, then each starting inside the range."""
    before = [entry for entry in entries if entry[1] <= base_offset]
    inside = [entry for entry in entries if base_offset < entry[1] < end_offset]
    return before[-1:] + inside


def segment_object(segment: LogSegment) -> SegmentObject:
    """``segment``'s object: the body to PUT and the facts its manifest entry records,
    with the producer snapshot and leader epochs its log directory holds."""
    directory = segment.directory
    base, end = segment.base_offset, segment.next_offset
    snapshot = _read_if_present(snapshot_path(directory, end))
    epochs = read_epoch_checkpoint(directory / LEADER_EPOCH_CHECKPOINT)
    return assemble_segment_object(segment, snapshot, epochs_covering(epochs, base, end))


def assemble_segment_object(
    segment: LogSegment, producer_snapshot: bytes, leader_epochs: Sequence[tuple[int, int]]
) -> SegmentObject:
    """The object of closed ``segment`` with the given producer snapshot (at its end
    offset) and the leader epochs in force inside it (a cleaned tiered segment takes
    both from the segments it replaces)."""
    directory = segment.directory
    base = segment.base_offset
    log_file, log_size = PinnedFile.of(segment.log.path), segment.size
    if log_file.size != log_size:
        raise KafkaStorageError(f"{log_file.path} is not a closed segment of {log_size} bytes")
    offset_index = _index_bytes(
        segment_path(directory, base, INDEX_SUFFIX),
        segment.offset_index.entries * _OFFSET_ENTRY_BYTES,
    )
    time_index = _index_bytes(
        segment_path(directory, base, TIME_INDEX_SUFFIX),
        segment.time_index.entries * _TIME_ENTRY_BYTES,
    )
    txn_index = encode_entries(segment.txn_index.entries())
    epochs = encode_leader_epochs(leader_epochs)
    first = segment.log.header_at(0)
    lengths = {
        SegmentPart.LOG: log_size,
        SegmentPart.OFFSET_INDEX: len(offset_index),
        SegmentPart.TIME_INDEX: len(time_index),
        SegmentPart.PRODUCER_SNAPSHOT: len(producer_snapshot),
        SegmentPart.LEADER_EPOCHS: len(epochs),
        SegmentPart.TXN_INDEX: len(txn_index),
    }
    return SegmentObject(
        body=Concatenation(
            (log_file, offset_index, time_index, producer_snapshot, epochs, txn_index)
        ),
        base_offset=base,
        end_offset=segment.next_offset,
        base_timestamp=first.header.max_timestamp if first else NO_TIMESTAMP,
        max_timestamp=segment.max_timestamp_so_far,
        offset_of_max_timestamp=segment.offset_of_max_timestamp,
        parts=part_ranges(lengths),
    )


def _index_bytes(path: Path, valid_bytes: int) -> bytes:
    with path.open("rb") as index:
        return index.read(valid_bytes)


def _read_if_present(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
