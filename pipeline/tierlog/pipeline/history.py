"""A partition's full history from several places: tiered segments plus the local tail.

The same offsets can be in both places (a segment is tiered before local retention
deletes it) and the local copy wins: the tier is read only below the first offset
the local log still holds. Within one place, overlapping segments (two tiers holding
the same segment, or a segment uploaded twice) are read once: each offset comes from
the first segment, in base-offset order, that covers it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tierlog.pipeline.listing import PartitionSegments, SegmentInfo
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["PartitionHistory", "SegmentRange", "merge_history"]


@dataclass(frozen=True)
class SegmentRange:
    """The offsets ``[from_offset, to_offset)`` to take from ``segment``."""

    segment: SegmentInfo
    from_offset: int
    to_offset: int


@dataclass(frozen=True)
class PartitionHistory:
    """A partition's segment ranges in offset order; ``last_stable_offset``, once known
    (``transactions.with_last_stable_offset``), is where a read_committed reader stops."""

    tp: TopicPartition
    ranges: tuple[SegmentRange, ...]
    last_stable_offset: int | None = None

    @property
    def earliest(self) -> int:
        return self.ranges[0].from_offset if self.ranges else 0

    @property
    def end_offset(self) -> int:
        """One past the last offset stored."""
        return self.ranges[-1].to_offset if self.ranges else 0

    @property
    def latest(self) -> int:
        """Where reading stops: the end, or the last stable offset if it is known."""
        if self.last_stable_offset is None:
            return self.end_offset
        return min(self.end_offset, self.last_stable_offset)


def merge_history(tp: TopicPartition, places: Iterable[PartitionSegments]) -> PartitionHistory:
    """One history from the local places (log dirs) and the tiers of ``tp``."""
    local: list[PartitionSegments] = []
    remote: list[PartitionSegments] = []
    for place in places:
        is_remote = any(segment.ref.is_remote for segment in place.segments)
        (remote if is_remote else local).append(place)
    local_ranges = _deduplicate(local, below=None)
    local_start = local_ranges[0].from_offset if local_ranges else None
    remote_ranges = _deduplicate(remote, below=local_start)
    return PartitionHistory(tp, tuple(remote_ranges + local_ranges))


def _deduplicate(places: Sequence[PartitionSegments], below: int | None) -> list[SegmentRange]:
    candidates = sorted(
        (
            SegmentRange(
                segment, max(segment.base_offset, place.log_start_offset), segment.next_offset
            )
            for place in places
            for segment in place.segments
        ),
        key=lambda candidate: (candidate.from_offset, -candidate.to_offset),
    )
    ranges: list[SegmentRange] = []
    covered = -1
    for candidate in candidates:
        start = max(candidate.from_offset, covered)
        end = candidate.to_offset if below is None else min(candidate.to_offset, below)
        if start >= end:
            continue
        ranges.append(SegmentRange(candidate.segment, start, end))
        covered = end
    return ranges
