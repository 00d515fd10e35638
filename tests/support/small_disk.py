"""A real, small filesystem to fill up: a tmpfs mounted for one test.

The tests run as root here and in CI, so ``mount -t tmpfs`` works; where it does not,
the test fails (a full disk is a case every store must survive, never skipped).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["fill_leaving", "small_disk_at"]


@contextlib.contextmanager
def small_disk_at(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's syntax: ``256k``, ``8m``) at ``mount_point``."""
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a small tmpfs for a full-disk test: {mounted.stderr!r}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill_leaving(disk: Path, free_bytes: int) -> Path:
    """A file that takes all of ``disk``'s free space but ``free_bytes``; unlink it to
    free the space again."""
    stats = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\x00" * max(0, stats.f_bavail * stats.f_frsize - free_bytes))
    return filler
