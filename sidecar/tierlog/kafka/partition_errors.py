"""The per-partition answer OffsetCommit and OffsetDelete share: each topic asked, in the
request's order, with each of its partitions' error code."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.coordinator.coordinator import PartitionOutcome
from tierlog.kafka.errors import error_code
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["by_topic", "outcome_codes"]


def outcome_codes(outcomes: Iterable[PartitionOutcome]) -> dict[TopicPartition, ErrorCode]:
    return {tp: ErrorCode.none if error is None else error_code(error) for tp, error in outcomes}


def by_topic(
    asked: Iterable[TopicPartition], codes: Mapping[TopicPartition, ErrorCode]
) -> list[dict[str, Any]]:
    """``[{"name", "partitions": [{"partition_index", "error_code"}]}]`` of ``asked``."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp in asked:
        topics.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": codes[tp]}
        )
    return [{"name": name, "partitions": partitions} for name, partitions in topics.items()]
