"""Finding what a log dir holds: its partitions, their segments and offset ranges.

A partition directory is ``<topic>-<n>`` (``tierlog.storage.names``); its segments are
the ``<20 digits>.log`` files, so a cleaner's ``.cleaned``/``.swap`` leftovers, files
being deleted and a deleted partition's ``-delete`` directory are never read. A
segment's end is found as the broker finds it: from the offset index's last live
entry, walk the batch headers to the end of the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tierlog.pipeline.segments import LocalSegment, SegmentReader, SegmentRef
from tierlog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT, read_offset_checkpoint_or_warn
from tierlog.storage.names import parse_partition_dir
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "PartitionSegments",
    "SegmentInfo",
    "list_log_dir",
    "segment_info",
]

_SEGMENT_FILE = re.compile(r"(\d{20})\.log")


@dataclass(frozen=True)
class SegmentInfo:
    """One segment and the offsets it holds: ``[base_offset, next_offset)``."""

    ref: SegmentRef
    next_offset: int
    size_bytes: int

    @property
    def base_offset(self) -> int:
        return self.ref.base_offset


@dataclass(frozen=True)
class PartitionSegments:
    """A partition's segments in one place (a log dir or a tier), in offset order."""

    tp: TopicPartition
    segments: tuple[SegmentInfo, ...]
    log_start_offset: int  # the first offset still readable here


def segment_info(reader: SegmentReader) -> SegmentInfo:
    """Measure a segment: where its offsets end, from the index's last entry on."""
    index = reader.offset_index()
    start = index.values[-1] if len(index) else 0
    if not 0 <= start < reader.size_bytes:
        start = 0  # an index pointing past the log: do not trust it
    next_offset = reader.ref.base_offset
    for batch in reader.batches(start):
        next_offset = batch.header.last_offset + 1
    return SegmentInfo(reader.ref, next_offset, reader.size_bytes)


def list_log_dir(log_dir: Path, wanted: Iterable[str] | None = None) -> list[PartitionSegments]:
    """Every partition in ``log_dir`` (only the ``wanted`` topics when given)."""
    topics = None if wanted is None else set(wanted)
    # Garbled, the checkpoint is skipped as the broker skips it: each partition then
    # starts at its first segment, which the broker's retention moves on from anyway.
    starts = read_offset_checkpoint_or_warn(
        log_dir / LOG_START_OFFSET_CHECKPOINT, "each log starts at its first segment"
    )
    partitions = []
    for directory in sorted(log_dir.iterdir()):
        tp = parse_partition_dir(directory.name) if directory.is_dir() else None
        if tp is None or (topics is not None and tp.topic not in topics):
            continue
        segments = tuple(_measure(directory))
        first = segments[0].base_offset if segments else 0
        partitions.append(PartitionSegments(tp, segments, max(first, starts.get(tp, first))))
    return partitions


def _measure(directory: Path) -> list[SegmentInfo]:
    infos = []
    for path in sorted(directory.iterdir()):
        match = _SEGMENT_FILE.fullmatch(path.name)
        if match is None:
            continue
        reader = LocalSegment(SegmentRef(int(match.group(1)), str(path)))
        try:
            infos.append(segment_info(reader))
        finally:
            reader.close()
    return infos
