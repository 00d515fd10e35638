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

__all__ = ["exclusive_lock"]


@contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created if absent), waiting for it."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock
