"""Streaming offsets as JSON, in the Kafka source's shape: ``{"topic": {"0": 42}}``.

Each value is the next offset to read in that partition; a micro-batch reads
``[start, end)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tierlog.pipeline.errors import InvalidOptionError
from tierlog.pipeline.history import PartitionHistory
from tierlog.pipeline.options import EARLIEST, LATEST, SourceOptions
from tierlog.pipeline.planner import find_offset_by_timestamp
from tierlog.pipeline.readers import open_segment
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["initial_offsets", "offsets_from_json", "offsets_to_json"]


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, Any]:
    result: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return result


def offsets_from_json(offsets: Mapping[str, Any]) -> dict[TopicPartition, int]:
    try:
        return {
            TopicPartition(topic, int(number)): int(offset)
            for topic, partitions in offsets.items()
            for number, offset in partitions.items()
        }
    except (AttributeError, TypeError, ValueError) as error:
        raise InvalidOptionError(f"not a streaming offset of this source: {offsets}") from error


def initial_offsets(
    histories: Iterable[PartitionHistory], options: SourceOptions
) -> dict[TopicPartition, int]:
    """Where a new query starts in each partition (startingOffsets / startingTimestamp)."""
    starting = options.starting
    result = {}
    for history in histories:
        if starting.timestamp_ms is not None:
            found = find_offset_by_timestamp(history, starting.timestamp_ms, open_segment)
            result[history.tp] = history.latest if found is None else found
            continue
        offset = starting.for_partition(history.tp)
        if offset == EARLIEST:
            offset = history.earliest
        elif offset == LATEST:
            offset = history.latest
        result[history.tp] = offset
    return result
