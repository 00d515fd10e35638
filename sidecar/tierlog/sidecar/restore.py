"""Starting an empty broker from the tier a lost broker (or cluster) filled.

The bucket keeps each tiered topic's partition count and config overrides
(``topic_records``) beside the partitions' manifests. A restore puts those topics in
the broker's topic store before the logs load; the start then makes their logs as
for any topic whose logs are missing, and each new log of a tiered topic continues
the tier (``RemoteLogManager.attach``): its log start is the tier's start, its next
offset the tier's end, its leader epochs and producer states those the manifest
recorded at that end. So producers go on at the offsets the tier ends at, and
consumers read everything the tier held.

Only on log dirs with nothing in them (``lost+found`` aside, as a fresh volume has
one): a dir that holds logs or a topic store belongs to a broker that is not lost,
and mixing the two would hide which is the truth (``DataDirNotEmptyError``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from tierlog.broker.topics import Topic, TopicStore
from tierlog.storage.errors import DataDirNotEmptyError
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.topic_records import load_topic_records

__all__ = ["check_empty", "restore_topics"]

log = logging.getLogger(__name__)

# What a new, empty volume may hold (mkfs.ext4 makes it).
_EMPTY_VOLUME_ENTRIES = frozenset({"lost+found"})


def check_empty(log_dirs: Sequence[Path]) -> None:
    """``DataDirNotEmptyError`` naming the first log dir that holds anything."""
    for log_dir in log_dirs:
        if not log_dir.exists():
            continue
        found = sorted(p.name for p in log_dir.iterdir() if p.name not in _EMPTY_VOLUME_ENTRIES)
        if found:
            shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
            raise DataDirNotEmptyError(
                f"restore from the tier needs empty log dirs, but {log_dir} holds {shown}"
            )


def restore_topics(log_dirs: Sequence[Path], topics: TopicStore, store: ObjectStore) -> list[Topic]:
    """Put the tier's topics in ``topics`` (blocking); the topics restored."""
    check_empty(log_dirs)
    restored = []
    for record in load_topic_records(store):
        restored.append(topics.create(record.name, record.partition_count, record.configs))
        log.info(
            "restored topic %r from %s: %d partitions, overrides %s",
            record.name,
            store.url,
            record.partition_count,
            dict(record.configs) or "none",
        )
    log.info("restored %d topics from %s", len(restored), store.url)
    return restored
