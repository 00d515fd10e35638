"""Row bounds from pushed-down filters: what a query's WHERE clause lets planning skip.

Topic, partition and offset bounds are applied exactly (planning cuts the offset
ranges, decoding keeps only offsets inside them), so Spark need not evaluate those
filters again. A lower timestamp bound only moves the start offset forward (to the
first record at or after it, found through the time index); record timestamps are
not ordered, so the filter itself stays with Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tierlog.storage.topic_partition import TopicPartition

__all__ = ["RowBounds"]


@dataclass(frozen=True)
class RowBounds:
    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    min_offset: int = 0  # inclusive
    max_offset: int | None = None  # exclusive
    min_timestamp_ms: int | None = None  # inclusive; prunes only

    def admits(self, tp: TopicPartition) -> bool:
        if self.topics is not None and tp.topic not in self.topics:
            return False
        return self.partitions is None or tp.partition in self.partitions

    def narrow_offsets(self, start: int, end: int) -> tuple[int, int]:
        start = max(start, self.min_offset)
        if self.max_offset is not None:
            end = min(end, self.max_offset)
        return start, max(start, end)

    def with_topics(self, topics: frozenset[str]) -> RowBounds:
        return replace(self, topics=topics if self.topics is None else self.topics & topics)

    def with_partitions(self, partitions: frozenset[int]) -> RowBounds:
        both = partitions if self.partitions is None else self.partitions & partitions
        return replace(self, partitions=both)

    def with_min_offset(self, offset: int) -> RowBounds:
        return replace(self, min_offset=max(self.min_offset, offset))

    def with_max_offset(self, offset: int) -> RowBounds:
        bound = offset if self.max_offset is None else min(self.max_offset, offset)
        return replace(self, max_offset=bound)

    def with_min_timestamp(self, timestamp_ms: int) -> RowBounds:
        current = self.min_timestamp_ms
        return replace(
            self, min_timestamp_ms=timestamp_ms if current is None else max(current, timestamp_ms)
        )
