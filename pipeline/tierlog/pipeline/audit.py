"""Verifying tiered segments: what ``tierlog-spark audit`` runs on each executor.

A segment is checked against its own bytes and against its manifest entry:

- every batch's CRC (``crc_is_valid``: CRC-32C for v2, CRC-32 for v0/v1), and that the
  batches fill the log part exactly (no torn or trailing bytes);
- offsets: batches in increasing order, all inside the entry's ``[base, end)``;
- the offset index: the storage engine's own sanity rules, and every entry names a
  batch boundary whose batch ends at the entry's offset (what Kafka's DumpLogSegments
  verifies); the time index: the storage engine's sanity rules, and no entry beyond
  the batches' timestamps.

Across a partition, the manifest's segments must follow each other without gaps or
overlaps (``continuity_problems``, pure, on the driver).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from tierlog.pipeline.tiered import index_file_columns, open_store
from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.errors import TierlogError
from tierlog.storage.index import (
    OffsetIndex,
    TimeIndex,
    offset_index_problem,
    time_index_problem,
)
from tierlog.storage.records import LOG_OVERHEAD, crc_is_valid, parse_header
from tierlog.storage.tier.manifest import RemoteSegment, SegmentPart
from tierlog.storage.tier.manifest_store import read_part
from tierlog.storage.tier.s3_store import S3Options

__all__ = ["SegmentAudit", "audit_segment", "continuity_problems"]


@dataclass(frozen=True)
class SegmentAudit:
    """One segment's verdict: no problems means it verified."""

    tp: TopicPartition
    segment_id: str
    base_offset: int
    end_offset: int
    batches: int
    size_bytes: int
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


def audit_segment(
    store_url: str, tp: TopicPartition, segment: RemoteSegment, s3: S3Options | None = None
) -> SegmentAudit:
    """Fetch one segment's parts and check them (see the module docstring)."""
    store = open_store(store_url, s3)
    try:
        log = read_part(store, segment, SegmentPart.LOG)
        offset_index = read_part(store, segment, SegmentPart.OFFSET_INDEX)
        time_index = read_part(store, segment, SegmentPart.TIME_INDEX)
    finally:
        store.close()
    problems, batch_ends, max_timestamp = _log_problems(log, segment)
    problems += _index_problems(segment, log, offset_index, time_index, batch_ends, max_timestamp)
    return SegmentAudit(
        tp,
        segment.segment_id,
        segment.base_offset,
        segment.end_offset,
        len(batch_ends),
        len(log),
        tuple(problems),
    )


def _log_problems(log: bytes, segment: RemoteSegment) -> tuple[list[str], dict[int, int], int]:
    """Problems of the log bytes; each batch's position -> last offset; max timestamp."""
    problems: list[str] = []
    batch_ends: dict[int, int] = {}
    max_timestamp = -1
    position = 0
    previous_last = segment.base_offset - 1
    while position < len(log):
        if len(log) - position < LOG_OVERHEAD:
            problems.append(f"{len(log) - position} trailing bytes at {position}")
            break
        try:
            header = parse_header(log, position)
        except TierlogError as error:
            problems.append(f"no batch at {position}: {error}")
            break
        if header.end_position > len(log):
            problems.append(f"batch at {position} is cut off by the end of the segment")
            break
        if not crc_is_valid(log, header):
            problems.append(f"batch at {position} (offsets {header.base_offset}..) fails its CRC")
        if header.last_offset <= previous_last:
            problems.append(f"batch at {position} goes back to offset {header.last_offset}")
        if header.last_offset >= segment.end_offset or header.base_offset < segment.base_offset:
            problems.append(
                f"batch at {position} holds offsets {header.base_offset}-{header.last_offset}, "
                f"outside the manifest's [{segment.base_offset}, {segment.end_offset})"
            )
        batch_ends[position] = header.last_offset
        previous_last = header.last_offset
        max_timestamp = max(max_timestamp, header.max_timestamp)
        position = header.end_position
    return problems, batch_ends, max_timestamp


def _index_problems(
    segment: RemoteSegment,
    log: bytes,
    offset_index: bytes,
    time_index: bytes,
    batch_ends: dict[int, int],
    max_timestamp: int,
) -> list[str]:
    problems: list[str] = []
    base = segment.base_offset
    offsets, positions = index_file_columns(offset_index, OffsetIndex, base)
    found = offset_index_problem(
        base,
        len(offset_index),
        offsets,
        positions,
        log_size_bytes=len(log),
        log_end_offset=segment.end_offset,
    )
    if found:
        problems.append(f"offset index: {found}")
    for offset, position in zip(offsets, positions, strict=True):
        if batch_ends.get(position) != offset:
            problems.append(
                f"offset index entry ({offset}, {position}) names no batch ending there"
            )
            break
    timestamps, time_offsets = index_file_columns(time_index, TimeIndex, base)
    found = time_index_problem(
        base, len(time_index), timestamps, time_offsets, log_size_bytes=len(log)
    )
    if found:
        problems.append(f"time index: {found}")
    if timestamps and timestamps[-1] > max_timestamp:
        problems.append(
            f"time index reaches timestamp {timestamps[-1]}, past the batches' {max_timestamp}"
        )
    return problems


def continuity_problems(segments: Sequence[RemoteSegment]) -> list[str]:
    """Gaps and overlaps between a partition's tiered segments, in manifest order."""
    problems = []
    for before, after in itertools.pairwise(segments):
        if after.base_offset != before.end_offset:
            kind = "gap" if after.base_offset > before.end_offset else "overlap"
            problems.append(
                f"{kind}: segment {before.segment_id} ends at {before.end_offset}, "
                f"{after.segment_id} starts at {after.base_offset}"
            )
    return problems
