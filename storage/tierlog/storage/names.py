"""Topic names by Kafka's rules, and the partition directory names built from them.

A topic name becomes a directory name, so it is checked before it touches a path:
only ``[a-zA-Z0-9._-]``, at most 249 characters, never ``.`` or ``..``. Two topics
whose names differ only in ``.`` against ``_`` cannot both exist (Kafka's
``Topic.hasCollision``): metric names turn ``.`` into ``_``, so their metrics would
be one.

A partition being deleted is first renamed to ``<topic>-<partition>.<id>-delete`` (as
Kafka does), so a crash mid-removal leaves a directory start-up recognises and removes
rather than a partition it would load again. A file name has at most 255 bytes, and
the suffix of a 249-character topic's directory takes it over that, so the topic part
is cut short to fit; the name is never parsed back into a topic.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

from tierlog.storage.errors import InvalidTopicError
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "MAX_TOPIC_NAME_LENGTH",
    "delete_dir_name",
    "is_delete_dir",
    "parse_partition_dir",
    "validate_no_collision",
    "validate_topic_name",
]

MAX_TOPIC_NAME_LENGTH = 249
MAX_FILE_NAME_BYTES = 255  # NAME_MAX of Linux filesystems
DELETE_DIR_SUFFIX = "-delete"
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
# A directory renamed for deletion, by us or by Kafka (the same shape: a UUID's 32 hex
# digits), and nothing looser: start-up removes what matches.
_DELETE_DIR = re.compile(r"[a-zA-Z0-9._-]*-\d+\.[0-9a-f]{32}" + DELETE_DIR_SUFFIX)


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


def validate_no_collision(topic: str, existing: Iterable[str]) -> None:
    """Raise InvalidTopicError if another of the ``existing`` topics collides with
    ``topic`` (the same name once ``.`` is read as ``_``)."""
    metric_name = topic.replace(".", "_")
    for other in sorted(existing):
        if other != topic and other.replace(".", "_") == metric_name:
            raise InvalidTopicError(
                f"topic {topic!r} collides with existing topic {other!r}: "
                "'.' and '_' are the same in metric names"
            )


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


def delete_dir_name(tp: TopicPartition) -> str:
    """A fresh name for ``tp``'s directory while it is removed: ``orders-3.<32 hex>-delete``,
    with the topic cut short so the whole name fits in 255 bytes (names are ASCII)."""
    suffix = f"-{tp.partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return tp.topic[: MAX_FILE_NAME_BYTES - len(suffix)] + suffix


def is_delete_dir(name: str) -> bool:
    """Whether ``name`` is a partition directory renamed for deletion (ours or Kafka's)."""
    return _DELETE_DIR.fullmatch(name) is not None
