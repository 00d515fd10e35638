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
and mixing the two would hide which is the truth (``DataDirNotEmptyError``). The
restore leaves a marker, ``tierlog-restored``, in the first log dir: written
``started`` before the first topic, ``done`` after the last. A start with the flag
that finds ``done`` is a restart of the restored broker and starts as any other (so
the flag may stay on every start of a pod); one that finds ``started`` finishes the
restore a crash interrupted (creating the topics still missing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from tierlog.broker.topics import Topic, TopicStore
from tierlog.storage.checkpoints import atomic_write
from tierlog.storage.errors import DataDirNotEmptyError, UnknownTopicOrPartitionError
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.topic_records import load_topic_records

__all__ = ["RESTORE_MARKER", "check_empty", "restore_topics"]

log = logging.getLogger(__name__)

RESTORE_MARKER = "tierlog-restored"
_STARTED, _DONE = "started", "done"
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
                f"restore from the tier needs empty log dirs, but {log_dir} holds {shown} "
                "and no finished restore of its own"
            )


def restore_topics(log_dirs: Sequence[Path], topics: TopicStore, store: ObjectStore) -> list[Topic]:
    """Put the tier's topics in ``topics`` (blocking); the topics restored (none when
    this broker's restore was done before)."""
    marker = log_dirs[0] / RESTORE_MARKER
    state = marker.read_text().strip() if marker.exists() else None
    if state == _DONE:
        log.info("%s: restored from the tier before; starting as usual", marker)
        return []
    if state != _STARTED:
        check_empty(log_dirs)
        marker.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(marker, f"{_STARTED}\n")
    restored = [
        _restore(topics, record.name, record.partition_count, dict(record.configs), store.url)
        for record in load_topic_records(store)
    ]
    atomic_write(marker, f"{_DONE}\n")
    log.info("restored %d topics from %s", len(restored), store.url)
    return restored


def _restore(
    topics: TopicStore, name: str, partitions: int, configs: dict[str, str], url: str
) -> Topic:
    try:
        return topics.get(name)  # made before a crash interrupted the restore
    except UnknownTopicOrPartitionError:
        pass
    shown = configs or "none"
    log.info(
        "restoring topic %r from %s: %d partitions, overrides %s", name, url, partitions, shown
    )
    return topics.create(name, partitions, configs)
