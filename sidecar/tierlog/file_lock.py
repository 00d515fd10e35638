"""An exclusive ``flock`` held for a block: how processes on one machine take turns.

The lock file is created once and never replaced or deleted, so every process locks
the same inode (a lock on a file a rival then replaced would exclude nobody).  The
kernel drops the lock when its holder's descriptor closes, so a holder killed with
``kill -9`` blocks nobody.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["exclusive_lock", "wait_for_holder"]


@contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created if absent), waiting for it."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def wait_for_holder(lock_path: Path) -> None:
    """Return once nobody holds ``lock_path`` exclusively (at once if the file is
    absent: then nobody ever locked it): a reader's barrier behind a writer's change."""
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)
