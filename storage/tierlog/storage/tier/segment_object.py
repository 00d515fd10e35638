"""What goes into a closed segment's object, staged as one file for a single PUT.

A segment object is its parts back to back (``manifest.SegmentPart`` order): the log
bytes, the trimmed offset and time indexes, the producer-state snapshot at the
segment's end offset, and the leader-epoch entries covering it. The store interface
puts one file or one byte string, so the parts are staged into one file next to the
log dir (``.tier-staging``, removed after the attempt and swept at start-up); the log
bytes are copied in the kernel (``sendfile``), and the page cache usually still holds
them. The segment must be closed: its files no longer change.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tierlog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, read_epoch_checkpoint
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.index import NO_TIMESTAMP
from tierlog.storage.producer_snapshot import snapshot_path
from tierlog.storage.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_path
from tierlog.storage.tier.manifest import ByteRange, SegmentPart, part_ranges

__all__ = [
    "STAGING_DIR",
    "StagedSegment",
    "clear_staging",
    "decode_leader_epochs",
    "encode_leader_epochs",
    "epochs_covering",
    "stage_segment",
]

STAGING_DIR = ".tier-staging"
_OFFSET_ENTRY_BYTES = 8
_TIME_ENTRY_BYTES = 12


@dataclass(frozen=True)
class StagedSegment:
    """A segment's object ready to PUT, with the facts its manifest entry records."""

    path: Path
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


@contextmanager
def stage_segment(segment: LogSegment, staging_dir: Path) -> Iterator[StagedSegment]:
    """Write ``segment``'s object to a file in ``staging_dir``; removed on exit."""
    staging_dir.mkdir(exist_ok=True)
    directory = segment.directory
    base, end = segment.base_offset, segment.next_offset
    log_size = segment.size
    offset_index = _index_bytes(
        segment_path(directory, base, INDEX_SUFFIX),
        segment.offset_index.entries * _OFFSET_ENTRY_BYTES,
    )
    time_index = _index_bytes(
        segment_path(directory, base, TIME_INDEX_SUFFIX),
        segment.time_index.entries * _TIME_ENTRY_BYTES,
    )
    snapshot = _read_if_present(snapshot_path(directory, end))
    epochs = encode_leader_epochs(
        epochs_covering(read_epoch_checkpoint(directory / LEADER_EPOCH_CHECKPOINT), base, end)
    )
    first = segment.log.header_at(0)
    path = staging_dir / f"{directory.name}-{base:020d}.{os.getpid()}.staging"
    try:
        with segment.log.path.open("rb") as source, path.open("wb") as out:
            _copy(source.fileno(), out.fileno(), log_size)
            for part in (offset_index, time_index, snapshot, epochs):
                out.write(part)
        lengths = {
            SegmentPart.LOG: log_size,
            SegmentPart.OFFSET_INDEX: len(offset_index),
            SegmentPart.TIME_INDEX: len(time_index),
            SegmentPart.PRODUCER_SNAPSHOT: len(snapshot),
            SegmentPart.LEADER_EPOCHS: len(epochs),
        }
        yield StagedSegment(
            path=path,
            base_offset=base,
            end_offset=end,
            base_timestamp=first.header.max_timestamp if first else NO_TIMESTAMP,
            max_timestamp=segment.max_timestamp_so_far,
            offset_of_max_timestamp=segment.offset_of_max_timestamp,
            parts=part_ranges(lengths),
        )
    finally:
        path.unlink(missing_ok=True)


def clear_staging(staging_dir: Path) -> None:
    """Remove what a crashed process left staged."""
    shutil.rmtree(staging_dir, ignore_errors=True)


def _index_bytes(path: Path, valid_bytes: int) -> bytes:
    with path.open("rb") as index:
        return index.read(valid_bytes)


def _read_if_present(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _copy(source_fd: int, out_fd: int, count: int) -> None:
    """``count`` bytes from the start of ``source_fd`` onto ``out_fd``, in the kernel."""
    offset = 0
    while offset < count:
        sent = os.sendfile(out_fd, source_fd, offset, count - offset)
        if sent == 0:
            raise CorruptRecordError(f"segment file ended at {offset} of {count} bytes")
        offset += sent
