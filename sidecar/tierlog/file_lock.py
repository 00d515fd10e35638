"""Exclusive ``flock``s: how processes on one machine take turns, or pick one of them.

The lock file is created once and never replaced or deleted, so every process locks
the same inode (a lock on a file a rival then replaced would exclude nobody).  The
kernel drops the lock when its holder's descriptor closes, so a holder killed with
``kill -9`` blocks nobody.

``exclusive_lock`` waits and holds the lock for a block (a change to a shared file);
``try_exclusive_lock`` does not wait, and the lock it returns is held until released
(one process of many running a job for the machine, such as the controller).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["HeldLock", "exclusive_lock", "try_exclusive_lock"]


@contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created if absent), waiting for it."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


class HeldLock:
    """An exclusive lock this process holds until ``release`` (or its death)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock
            self._fd = None


def try_exclusive_lock(lock_path: Path) -> HeldLock | None:
    """Take the exclusive lock on ``lock_path`` (created if absent) if nobody holds it;
    ``None`` when another open of the file holds it (in any process, this one too)."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return HeldLock(fd)
