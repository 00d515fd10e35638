"""What changed in the partition-state store since a reader last looked: which topics.

A broker (and the controller) keeps a view of the whole store and must not read it all
again to learn that nothing moved. Each store keeps a journal of the topics whose
partitions or configs were written, numbered in the order they were written, and a
reader asks for the topics after the last number it saw (``TopicChanges``): one small
read when the cluster is idle, the changed topics' parts otherwise.

A journal keeps its last changes (``JOURNAL_ENTRIES`` in memory, fewer in a file). A
reader further behind, or one whose journal was started afresh (another
``incarnation``: a store's watch relisted, a journal file lost), is told that anything
may have changed (``topics is None``) and reads everything, as it did before any
journal.

The journal only says where to look: what a reader then reads is the store's own
document, and every change is still the store's compare-and-swap.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "JOURNAL_ENTRIES",
    "ChangeCursor",
    "ChangeJournal",
    "TopicChanges",
    "changes_after",
    "not_watching",
]

JOURNAL_ENTRIES = 1000


@dataclass(frozen=True)
class ChangeCursor:
    """Where a reader is in a journal: its incarnation and the last change seen."""

    incarnation: str
    number: int


@dataclass(frozen=True)
class TopicChanges:
    """The topics changed after a cursor (None: anything may have, read everything),
    and the cursor to ask from next time."""

    cursor: ChangeCursor
    topics: frozenset[str] | None


def changes_after(
    since: ChangeCursor | None,
    incarnation: str,
    last: int,
    entries: Iterable[tuple[int, str]],
    oldest_kept: int,
) -> TopicChanges:
    """The answer of a journal (``incarnation``, its ``last`` number, ``entries`` of
    (number, topic), numbered from ``oldest_kept``) to a reader at ``since``."""
    cursor = ChangeCursor(incarnation, last)
    if since is None or since.incarnation != incarnation:
        return TopicChanges(cursor, None)
    if since.number < oldest_kept - 1 or since.number > last:
        return TopicChanges(cursor, None)  # fell behind what is kept, or from another run
    return TopicChanges(cursor, frozenset(t for n, t in entries if n > since.number))


class ChangeJournal:
    """A journal in memory, for a store whose changes arrive in one process (a watch of
    the API server, and the store's own writes). Thread-safe. It starts lost: until
    ``start_afresh``, every reader is told to read everything, every time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._incarnation: str | None = None  # None: lost track of the changes
        self._last = 0
        self._entries: deque[tuple[int, str]] = deque(maxlen=JOURNAL_ENTRIES)
        self._listeners: list[Callable[[], None]] = []  # told of each move (``listen``)

    def listen(self, moved: Callable[[], None]) -> Callable[[], None]:
        """Have ``moved()`` called after each change of what ``since`` answers, in the
        thread that made it; the function that stops the calls."""
        with self._lock:
            self._listeners.append(moved)

        def stop() -> None:
            with self._lock:
                self._listeners.remove(moved)

        return stop

    def record(self, topic: str) -> None:
        with self._lock:
            self._last += 1
            self._entries.append((self._last, topic))
        self._moved()

    def lose_track(self) -> None:
        """Changes may be missed from now on (a watch broke): readers read everything."""
        with self._lock:
            self._incarnation = None
        self._moved()

    def start_afresh(self) -> None:
        """Follow changes from now on, forgetting those before: each reader reads
        everything once more, then only what it is told."""
        with self._lock:
            self._incarnation = uuid.uuid4().hex
            self._last = 0
            self._entries.clear()
        self._moved()

    def _moved(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for moved in listeners:
            moved()

    def since(self, cursor: ChangeCursor | None) -> TopicChanges:
        with self._lock:
            if self._incarnation is None:
                return TopicChanges(ChangeCursor(uuid.uuid4().hex, 0), None)
            oldest = self._entries[0][0] if self._entries else self._last + 1
            return changes_after(cursor, self._incarnation, self._last, self._entries, oldest)


def not_watching() -> None:
    """The stop of a watch that tells nothing (``watch_changes`` of a store that cannot
    tell, or turned off): its reader polls."""
