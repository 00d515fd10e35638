"""The change journal of the directory store: ``changes`` (``change_journal``).

Its first line is the journal's incarnation and last change number, so a reader that is
up to date reads that line only; then a line per change kept: its number, its topic and
the lock of the file it changed, tab-separated (a topic name holds no tab).

A writer records its change while it holds the changed file's lock, before it writes
the file; a reader reads the journal (one small file, no lock) and, for each change it
had not seen, waits until nobody holds that file's lock (``wait_for_holder``) before it
reads the topic. So a reader that sees a change number sees the change, or the old
document of a writer that died before writing it; no change is ever numbered after a
reader passed it by. A reader told to read everything waits for the writers of every
change kept, as it will take the journal's last number for its own.

The journal is replaced whole (written aside, renamed over) without ``fsync``: only the
processes running on this machine read it, so a crash of the machine loses their
cursors with it, and a journal the crash left unreadable is started afresh (a new
incarnation: every reader reads everything once).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.file_lock import exclusive_lock, wait_for_holder
from tierlog.partition_state.change_journal import (
    ChangeCursor,
    TopicChanges,
    changes_after,
)
from tierlog.storage.errors import KafkaStorageError

__all__ = ["LocalChangeJournal"]

_HEADER_BYTES = 64  # a hex incarnation, a space, a number
# Fewer than the in-memory journal's: each change rewrites the file (some 80 bytes an
# entry), and a reader polls every 100 ms to 1 s, some writes behind at most, except
# after a pass that wrote hundreds of parts itself (then it reads everything once).
LOCAL_JOURNAL_ENTRIES = 256


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
        self.path = directory / "changes"

    def record(self, topic: str, changed_locks: Sequence[Path]) -> None:
        """Number the changes of ``topic``'s files whose locks ``changed_locks`` the
        caller holds, before it writes them: in one write of the journal, so a reader is
        told of all of them at once."""
        with exclusive_lock(self.path.with_name(self.path.name + ".lock")):
            journal = self._read() or _Journal(uuid.uuid4().hex, 0, [])
            for lock in changed_locks:
                journal.last += 1
                journal.changes.append((journal.last, topic, str(lock.relative_to(self.directory))))
            del journal.changes[:-LOCAL_JOURNAL_ENTRIES]
            self._write(journal)

    def since(self, cursor: ChangeCursor | None) -> TopicChanges:
        header = self._read_header()
        if header is None:
            return changes_after(cursor, "", 0, [], 1)  # nothing was ever changed
        if cursor == ChangeCursor(*header):
            return TopicChanges(cursor, frozenset())  # the idle poll: one line read
        journal = self._read()
        if journal is None:  # unreadable: read everything until a writer starts it afresh
            return TopicChanges(ChangeCursor(uuid.uuid4().hex, 0), None)
        entries = [(number, topic) for number, topic, _ in journal.changes]
        answer = changes_after(
            cursor, journal.incarnation, journal.last, entries, journal.oldest_kept()
        )
        # A reader told to read everything passes by every change kept, too.
        after = cursor.number if answer.topics is not None and cursor is not None else 0
        for lock in sorted({lock for number, _, lock in journal.changes if number > after}):
            wait_for_holder(self.directory / lock)
        return answer

    def _read_header(self) -> tuple[str, int] | None:
        """The first line's incarnation and last number (None: no journal yet; an
        unreadable one reads as an incarnation of its own)."""
        try:
            with self.path.open("rb") as journal:
                line = journal.readline(_HEADER_BYTES)
        except FileNotFoundError:
            return None
        except OSError:
            return (uuid.uuid4().hex, 0)
        incarnation, _, last = line.decode("ascii", "replace").strip().partition(" ")
        return (incarnation, int(last)) if last.isdigit() else (uuid.uuid4().hex, 0)

    def _read(self) -> _Journal | None:
        """The journal (None: absent, or unreadable)."""
        try:
            header, *lines = self.path.read_text(encoding="utf-8").splitlines()
            incarnation, last = header.split(" ")
            changes = []
            for line in lines:
                number, topic, lock = line.split("\t")
                changes.append((int(number), topic, lock))
            return _Journal(incarnation, int(last), changes)
        except (OSError, ValueError):
            return None

    def _write(self, journal: _Journal) -> None:
        lines = [f"{journal.incarnation} {journal.last}"]
        lines += [f"{number}\t{topic}\t{lock}" for number, topic, lock in journal.changes]
        temp = self.path.with_name(self.path.name + ".tmp")
        try:
            temp.write_text("\n".join(lines) + "\n", encoding="utf-8")
            temp.replace(self.path)
        except OSError as error:
            raise KafkaStorageError(f"cannot write {self.path}: {error}") from error
