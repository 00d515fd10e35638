"""``__consumer_offsets`` and Kafka's rule for which of its partitions holds a group.

A group lives in partition ``abs(groupId.hashCode()) % offsets.topic.num.partitions``,
and its coordinator is that partition's leader, so every broker and client agrees on it
without asking anyone. ``hashCode`` is Java's ``String.hashCode`` (31-fold over UTF-16
code units, wrapping at 32 bits) and ``abs`` Kafka's ``Utils.abs``, which maps
``Integer.MIN_VALUE`` to 0 where Java's ``Math.abs`` would leave it negative. Changing
the partition count moves groups, which is why Kafka fixes it when the topic is made.
"""

from __future__ import annotations

from tierlog.broker.internal_topics import OFFSETS_TOPIC

__all__ = [
    "DEFAULT_OFFSETS_TOPIC_PARTITIONS",
    "OFFSETS_TOPIC",
    "java_string_hash",
    "kafka_abs",
    "partition_for_group",
]

DEFAULT_OFFSETS_TOPIC_PARTITIONS = 50  # offsets.topic.num.partitions
_INT_MIN = -(2**31)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text``: a signed 32-bit int."""
    units = text.encode("utf-16-be", "surrogatepass")
    hash_code = 0
    for i in range(0, len(units), 2):
        hash_code = (31 * hash_code + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return hash_code - (1 << 32) if hash_code >= 1 << 31 else hash_code


def kafka_abs(value: int) -> int:
    """Kafka's ``Utils.abs``: the absolute value, with ``Integer.MIN_VALUE`` as 0."""
    return 0 if value == _INT_MIN else abs(value)


def partition_for_group(
    group_id: str, num_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS
) -> int:
    """The ``__consumer_offsets`` partition that holds ``group_id``."""
    if num_partitions < 1:
        raise ValueError(f"offsets.topic.num.partitions must be at least 1, not {num_partitions}")
    return kafka_abs(java_string_hash(group_id)) % num_partitions
