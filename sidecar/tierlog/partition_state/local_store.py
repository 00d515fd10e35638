"""The partition-state store for processes on one machine: a directory.

Layout: ``topics/<topic>.json`` (the head of the topic's partitions, ``store``),
``parts/<topic>/<topic id>-<part>.json`` (the parts after it), ``configs/<topic>.json``
(its config overrides, replaced whole), ``leases/<broker>.json`` and
``scram-credentials.json`` (users' SCRAM credentials), each beside a
``.lock`` file, and ``changes``, the journal of the topics changed
(``local_changes``: a broker's poll reads it first, then only the topics it names). A
head written before parts existed (version 1, every partition in one file) reads as it
is: the directory needs no migration. A change takes an exclusive
``flock`` on the lock file, reads, and replaces the JSON file atomically
(``checkpoints.atomic_write``: a crash leaves the old or the new document). The lock
file is never replaced or deleted, so every process locks the same inode; the kernel
drops a dead process's lock, so a ``kill -9`` mid-change blocks nobody. Reads take no
lock: a rename is atomic. A reader may be told as the journal is replaced
(``watch_changes``: inotify) rather than wait for its next poll.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path

from tierlog.broker.scram_credentials import CredentialDocument, FileDocument
from tierlog.file_lock import exclusive_lock
from tierlog.partition_state.change_journal import ChangeCursor, TopicChanges
from tierlog.partition_state.directory_watch import watch_replaced
from tierlog.partition_state.local_changes import LocalChangeJournal
from tierlog.partition_state.model import (
    BrokerLease,
    configs_from_json,
    configs_to_json,
    lease_from_document,
    lease_to_document,
)
from tierlog.partition_state.store import HEAD, LeaseChange, PartChange, PartitionStateStore
from tierlog.storage.checkpoints import atomic_write, fsync_directory
from tierlog.storage.errors import KafkaStorageError
from tierlog.storage.names import validate_topic_name

__all__ = ["LocalStateStore"]

_SUFFIX = ".json"


class LocalStateStore(PartitionStateStore):
    def __init__(self, directory: Path, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self.directory = directory
        self._topics = directory / "topics"
        self._parts = directory / "parts"
        self._configs = directory / "configs"
        self._leases = directory / "leases"
        for folder in (self._topics, self._parts, self._configs, self._leases):
            folder.mkdir(parents=True, exist_ok=True)
        self._changes = LocalChangeJournal(directory)

    def list_topics(self) -> list[str]:
        return sorted(path.name.removesuffix(_SUFFIX) for path in self._topics.glob("*" + _SUFFIX))

    def read_leases(self) -> dict[int, BrokerLease]:
        leases = (self._read_lease(path) for path in self._leases.glob("*" + _SUFFIX))
        return {lease.broker: lease for lease in leases if lease is not None}

    def topic_changes(self, since: ChangeCursor | None) -> TopicChanges:
        return self._changes.since(since)

    def scram_credentials(self) -> CredentialDocument:
        return FileDocument(self.directory / "scram-credentials.json")

    def watch_changes(self, changed: Callable[[], None]) -> Callable[[], None]:
        return watch_replaced(self.directory, [self._changes.path.name], changed)

    def _read_part(self, topic: str, index: int, topic_id: str) -> str | None:
        return _read_text(self._part_path(topic, index, topic_id))

    def _update_part(self, topic: str, index: int, topic_id: str, change: PartChange) -> None:
        self._write_parts(topic, topic_id, {index: change})

    def _update_parts(self, topic: str, topic_id: str, changes: Mapping[int, PartChange]) -> None:
        self._write_parts(topic, topic_id, changes)

    def _write_parts(self, topic: str, topic_id: str, changes: Mapping[int, PartChange]) -> None:
        """Every part's lock held (in ascending order of part, so two writers never
        wait on each other), their changes numbered in one write of the journal, then
        written: a reader waits for the locks of the changes it is told of, so it reads
        all of them or none."""
        paths = {index: self._part_path(topic, index, topic_id) for index in sorted(changes)}
        with contextlib.ExitStack() as held:
            for path in paths.values():
                path.parent.mkdir(exist_ok=True)
                held.enter_context(_locked(path))
            writes: dict[Path, str | None] = {}
            for index, path in paths.items():
                text = _read_text(path)
                after = changes[index](text)
                if after != text:
                    writes[path] = after
            if not writes:
                return
            self._changes.record(topic, [_lock_of(path) for path in writes])
            for path, after in writes.items():
                self.part_writes += 1
                if after is not None:
                    atomic_write(path, after)
                else:
                    path.unlink()
                    fsync_directory(path.parent)

    def _read_configs(self, topic: str) -> dict[str, str] | None:
        path = self._configs / f"{validate_topic_name(topic)}{_SUFFIX}"
        text = _read_text(path)
        return None if text is None else configs_from_json(text, str(path))

    def _write_configs(self, topic: str, configs: dict[str, str] | None) -> None:
        path = self._configs / f"{validate_topic_name(topic)}{_SUFFIX}"
        with _locked(path):
            if configs is None and not path.exists():
                return
            self._changes.record(topic, [_lock_of(path)])
            if configs is not None:
                atomic_write(path, configs_to_json(configs))
            else:
                path.unlink()
                fsync_directory(path.parent)

    def _update_lease(self, broker: int, change: LeaseChange) -> BrokerLease:
        path = self._leases / f"{broker}{_SUFFIX}"
        with _locked(path):
            lease = change(self._read_lease(path))
            atomic_write(path, json.dumps(lease_to_document(lease)))
            return lease

    def _part_path(self, topic: str, index: int, topic_id: str) -> Path:
        name = validate_topic_name(topic)
        if index == HEAD:
            return self._topics / f"{name}{_SUFFIX}"
        return self._parts / name / f"{topic_id}-{index}{_SUFFIX}"

    @staticmethod
    def _read_lease(path: Path) -> BrokerLease | None:
        text = _read_text(path)
        if text is None:
            return None
        try:
            document = json.loads(text)
        except ValueError as error:
            raise KafkaStorageError(f"{path}: not JSON ({error})") from None
        return lease_from_document(document, str(path))


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise KafkaStorageError(f"cannot read {path}: {error}") from error


def _locked(path: Path) -> AbstractContextManager[None]:
    """Hold an exclusive lock on ``path``'s lock file (created once, never replaced)."""
    return exclusive_lock(_lock_of(path))


def _lock_of(path: Path) -> Path:
    return path.with_name(path.name + ".lock")
