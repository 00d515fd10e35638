"""The groups' offsets a restore from the tier found, kept until their coordinator
commits them again (``group_offsets``; docs/STORAGE.md, "Group offsets in the bucket").

The restore writes ``tierlog-restored-groups.json`` in the first log dir before it marks
itself done: each group's offsets already clamped to what its restored partitions hold.
A coordinator that loads the ``__consumer_offsets`` partition a kept group hashes to
commits them if the group has no offsets there yet, then drops it; until then that
group's calls wait (COORDINATOR_LOAD_IN_PROGRESS), so a consumer never reads "no
offset" and resets. With replication every restoring broker keeps the list and the
leader of each partition applies its part; a broker that never leads it keeps it
until ``offsets.retention.minutes`` after the restore, then drops it, so a group
deleted since is not brought back by a later leadership. The file is replaced whole
(``atomic_write``) at each drop.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from tierlog.storage.checkpoints import atomic_write
from tierlog.storage.errors import KafkaStorageError
from tierlog.storage.tier.group_offsets import (
    CorruptGroupOffsetsError,
    GroupOffsets,
    decode_group_offsets,
    encode_group_offsets,
)
from tierlog.storage.tier.json_fields import whole_number

__all__ = ["RESTORED_GROUPS_FILE", "RestoredGroups", "save_restored_groups"]

log = logging.getLogger(__name__)

RESTORED_GROUPS_FILE = "tierlog-restored-groups.json"
_VERSION = 1


def save_restored_groups(log_dir: Path, groups: Sequence[GroupOffsets], now_ms: int) -> None:
    """Keep what a restore found, for the coordinators (blocking); no file for none."""
    path = log_dir / RESTORED_GROUPS_FILE
    if groups:
        _write(path, groups, now_ms)
    else:
        path.unlink(missing_ok=True)  # one a restore a crash interrupted had kept


class RestoredGroups:
    """The kept groups of one broker, by id (empty when it restored nothing)."""

    def __init__(self, log_dir: Path, retention_ms: int, now_ms: int) -> None:
        """Read at start (blocking); a list kept ``retention_ms`` before ``now_ms`` is
        dropped."""
        self.path = log_dir / RESTORED_GROUPS_FILE
        self._lock = threading.Lock()
        self._groups: dict[str, GroupOffsets] = {}
        self._restored_ms = 0
        if self.path.exists():
            self._load()
            if now_ms >= self._restored_ms + retention_ms:
                log.info("%s: kept past offsets.retention.minutes; dropping it", self.path)
                self.drop(list(self._groups))

    def _load(self) -> None:
        try:
            document = json.loads(self.path.read_text())
            if document["version"] != _VERSION:
                raise ValueError(f"unknown version {document['version']!r}")
            self._restored_ms = whole_number(document["restored_ms"])
            groups = [decode_group_offsets(group) for group in document["groups"]]
        except (OSError, ValueError, KeyError, TypeError, CorruptGroupOffsetsError) as error:
            raise KafkaStorageError(f"{self.path} is unreadable: {error}") from None
        self._groups = {group.group_id: group for group in groups}

    def pending(self, group: str) -> GroupOffsets | None:
        return self._groups.get(group)

    def of_partition(self, partition_of: Callable[[str], int], partition: int) -> list[str]:
        return sorted(g for g in self._groups if partition_of(g) == partition)

    def drop(self, groups: Sequence[str]) -> None:
        """Forget ``groups`` (committed, or found committed), here and on disk
        (blocking); the file goes with the last."""
        with self._lock:
            for group in groups:
                self._groups.pop(group, None)
            if self._groups:
                _write(self.path, list(self._groups.values()), self._restored_ms)
            else:
                self.path.unlink(missing_ok=True)


def _write(path: Path, groups: Sequence[GroupOffsets], restored_ms: int) -> None:
    document = {
        "version": _VERSION,
        "restored_ms": restored_ms,
        "groups": [encode_group_offsets(group) for group in groups],
    }
    atomic_write(path, json.dumps(document, indent=2) + "\n")
