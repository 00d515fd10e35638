"""The change journal of the directory store: ``changes.json`` (``change_journal``).

A writer records its change while it holds the changed file's lock, before it writes
the file; a reader reads the journal (one small file, no lock) and, for each change it
had not seen, waits until nobody holds that file's lock (``wait_for_holder``) before it
reads the topic. So a reader that sees a change number sees the change, or the old
document of a writer that died before writing it; no change is ever numbered after a
reader passed it by.

The journal is replaced whole (written aside, renamed over) without ``fsync``: only the
processes running on this machine read it, so a crash of the machine loses their
cursors with it, and a journal the crash left unreadable is started afresh (a new
incarnation: every reader reads everything once).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from tierlog.file_lock import exclusive_lock, wait_for_holder
from tierlog.partition_state.change_journal import (
    JOURNAL_ENTRIES,
    ChangeCursor,
    TopicChanges,
    changes_after,
)
from tierlog.storage.errors import KafkaStorageError

__all__ = ["LocalChangeJournal"]


@dataclass
class _Journal:
    incarnation: str
    last: int
    changes: list[tuple[int, str, str]]  # (number, topic, the changed file's lock, relative)

    def oldest_kept(self) -> int:
        return self.changes[0][0] if self.changes else self.last + 1


class LocalChangeJournal:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "changes.json"

    def record(self, topic: str, changed_lock: Path) -> None:
        """Number a change of ``topic``'s file whose lock ``changed_lock`` the caller
        holds, before it writes it."""
        relative = str(changed_lock.relative_to(self.directory))
        with exclusive_lock(self.path.with_name(self.path.name + ".lock")):
            journal = self._read() or _Journal(uuid.uuid4().hex, 0, [])
            journal.last += 1
            journal.changes.append((journal.last, topic, relative))
            del journal.changes[:-JOURNAL_ENTRIES]
            self._write(journal)

    def since(self, cursor: ChangeCursor | None) -> TopicChanges:
        if not self.path.exists():
            return changes_after(cursor, "", 0, [], 1)  # nothing was ever changed
        journal = self._read()
        if journal is None:  # unreadable: read everything until a writer starts it afresh
            return TopicChanges(ChangeCursor(uuid.uuid4().hex, 0), None)
        entries = [(number, topic) for number, topic, _ in journal.changes]
        answer = changes_after(
            cursor, journal.incarnation, journal.last, entries, journal.oldest_kept()
        )
        if answer.topics:
            assert cursor is not None  # a set of topics answers a cursor of this journal
            for lock in sorted({lock for n, _, lock in journal.changes if n > cursor.number}):
                wait_for_holder(self.directory / lock)
        return answer

    def _read(self) -> _Journal | None:
        """The journal (None: absent, or unreadable)."""
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
            changes = [(int(n), str(t), str(lock)) for n, t, lock in document["changes"]]
            return _Journal(str(document["incarnation"]), int(document["last"]), changes)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write(self, journal: _Journal) -> None:
        document = {
            "incarnation": journal.incarnation,
            "last": journal.last,
            "changes": journal.changes,
        }
        temp = self.path.with_name(self.path.name + ".tmp")
        try:
            temp.write_text(json.dumps(document), encoding="utf-8")
            temp.replace(self.path)
        except OSError as error:
            raise KafkaStorageError(f"cannot write {self.path}: {error}") from error
