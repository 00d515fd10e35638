"""A member's partitions, as the KIP-848 coordinator reasons about them.

Kafka's coordinator names a partition by its topic's id (a topic deleted and made
again is another topic), so an assignment here is a set of ``TopicIdPartition``: set
algebra is what reconciliation does (kept = current & target, to revoke = current -
target, to assign = target - current). The records carry the same thing grouped by
topic (``TopicPartitions``); ``to_records`` and ``from_records`` convert.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import NamedTuple

from tierlog.coordinator.consumer_group_records import TopicPartitions

__all__ = ["EMPTY_ASSIGNMENT", "Assignment", "TopicIdPartition", "from_records", "to_records"]


class TopicIdPartition(NamedTuple):
    topic_id: uuid.UUID
    partition: int


Assignment = frozenset[TopicIdPartition]
EMPTY_ASSIGNMENT: Assignment = frozenset()


def to_records(assignment: Iterable[TopicIdPartition]) -> tuple[TopicPartitions, ...]:
    """Grouped by topic, topics and partitions in order (one encoding per assignment)."""
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in sorted(assignment):
        by_topic.setdefault(topic_id, []).append(partition)
    return tuple(TopicPartitions(topic_id, tuple(parts)) for topic_id, parts in by_topic.items())


def from_records(topics: Iterable[TopicPartitions]) -> Assignment:
    return frozenset(
        TopicIdPartition(topic.topic_id, partition)
        for topic in topics
        for partition in topic.partitions
    )
