"""A call soon after a named file of a directory is replaced: Linux's inotify, by ctypes.

The directory store's readers (each broker) would otherwise learn of a change only at
their next poll of its journal, ``state.poll.ms`` apart: a stopping broker's hand-over
waited for it, 50 ms on average, where Kafka's brokers hear of the controller's records
as they are written (their long poll of the metadata log). A watch costs nothing while
nothing changes: one thread blocked in ``poll`` on the inotify descriptor and a pipe
that stops it. Polling a marker every 10 ms instead cost an idle broker 0.78 s of CPU a
minute (docs/BENCHMARKS.md, "the wake tried and not kept").

The watch only hurries a reader: what it reads is still the journal, and a missed event
(none on another OS, a full inotify queue) only leaves the reader to its poll.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import struct
import threading
from collections.abc import Callable, Collection
from pathlib import Path

from tierlog.partition_state.change_journal import not_watching

__all__ = ["DirectoryWatch", "watch_replaced"]

log = logging.getLogger(__name__)

_IN_MOVED_TO = 0x00000080  # a file renamed into the directory (an atomic replace)
_IN_Q_OVERFLOW = 0x00004000  # events were dropped: any name may have moved
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
_READ_BYTES = 64 * 1024


class DirectoryWatch:
    """Calls ``replaced()`` from a thread of its own each time one of ``names`` is
    renamed into ``directory`` (the atomic replace of ``atomic_write`` and the journal);
    ``stop`` ends it."""

    def __init__(
        self,
        libc: ctypes.CDLL,
        directory: Path,
        names: Collection[str],
        replaced: Callable[[], None],
    ) -> None:
        self._where = directory
        self._names = frozenset(os.fsencode(name) for name in names)
        self._replaced = replaced
        self._fd = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        if libc.inotify_add_watch(self._fd, os.fsencode(directory), _IN_MOVED_TO) < 0:
            error = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(error, f"inotify_add_watch {directory}: {os.strerror(error)}")
        self._stop_read, self._stop_write = os.pipe()
        self._thread = threading.Thread(target=self._watch, name="state-dir-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        os.write(self._stop_write, b"x")
        self._thread.join()
        for fd in (self._fd, self._stop_read, self._stop_write):
            os.close(fd)

    def _watch(self) -> None:
        try:
            self._run()
        except Exception:  # the readers still poll: slower, not wrong
            log.exception("the watch of %s stopped: its changes are seen by polling", self._where)

    def _run(self) -> None:
        # ``poll``, not ``select``: a broker of thousands of partitions holds descriptors
        # past select's 1,024, and the watch made after its logs are open gets one.
        waiting = select.poll()
        waiting.register(self._fd, select.POLLIN)
        waiting.register(self._stop_read, select.POLLIN)
        while True:
            if any(fd == self._stop_read for fd, _ in waiting.poll()):
                return
            try:
                events = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                continue
            if self._names_one(events):
                try:
                    self._replaced()
                except Exception:  # the caller's; the watch goes on
                    log.exception("a directory watch's call failed")

    def _names_one(self, events: bytes) -> bool:
        offset = 0
        while offset < len(events):
            _wd, mask, _cookie, length = _EVENT.unpack_from(events, offset)
            offset += _EVENT.size
            name = events[offset : offset + length].rstrip(b"\0")
            offset += length
            if mask & _IN_Q_OVERFLOW or name in self._names:
                return True
        return False


def watch_replaced(
    directory: Path, names: Collection[str], replaced: Callable[[], None]
) -> Callable[[], None]:
    """A ``DirectoryWatch`` started, and its ``stop``; where inotify is not there (not
    Linux) or refuses (its limit of watches reached), a ``stop`` that does nothing: the
    caller's poll is all it has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the C library the interpreter runs on
        libc.inotify_init1  # noqa: B018 - absent off Linux
        return DirectoryWatch(libc, directory, names, replaced).stop
    except (OSError, AttributeError) as error:
        log.info("no watch of %s (%s): its changes are seen by polling", directory, error)
        return not_watching
