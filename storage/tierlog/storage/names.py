"""Topic names by Kafka's rules, and the partition directory names built from them.

A topic name becomes a directory name, so it is checked before it touches a path:
only ``[a-zA-Z0-9._-]``, at most 249 characters, never ``.`` or ``..``.
"""

from __future__ import annotations

import re

from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.errors import InvalidTopicError

__all__ = ["MAX_TOPIC_NAME_LENGTH", "parse_partition_dir", "validate_topic_name"]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(topic: str) -> str:
    """Return ``topic`` unchanged, or raise InvalidTopicError saying what is wrong."""
    if not topic:
        raise InvalidTopicError("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(topic)} characters, more than {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL.fullmatch(topic):
        raise InvalidTopicError(f"topic name {topic!r} has characters outside [a-zA-Z0-9._-]")
    return topic


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``orders-3`` -> ("orders", 3); None for anything that is not a partition dir."""
    topic, dash, number = name.rpartition("-")
    if not dash or not number.isdigit():
        return None
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return None
    return TopicPartition(topic, int(number))
