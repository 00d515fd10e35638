"""Process faults over real signals, for a pid: ``kill -9``, SIGSTOP/SIGCONT, and waiting
for a process to be gone.

A signal is delivered asynchronously: ``kill`` returns before the target has stopped or
died. So each helper waits, with a deadline, until ``/proc/PID/stat`` shows the state it
asked for; a test then knows the fault is in effect, not merely requested. A killed
child stays a zombie until its parent reaps it; a zombie counts as dead here (it runs no
code and holds no port, file lock or socket), so waiting never needs the parent.

A process stopped while it holds a ``flock`` holds it until it runs again. Pausing a
broker of a cluster whose partition-state store is the file-lock store (``tierlog
cluster up``, the tests) can so also pause the store: every other broker's change of
that document waits, as behind a stopped etcd. That is the file-lock store's limit (the
Kubernetes store takes no lock between processes); a fault meant to pause the broker,
not the store, names the store's directory (``paused(..., outside_locks_under=)``) and
lands between two of the broker's holds of its locks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "ProcessFaultTimeout",
    "holds_lock_under",
    "is_alive",
    "is_stopped",
    "kill_9",
    "paused",
    "state_of",
    "wait_until_dead",
]

_DEAD_STATES = frozenset("ZXx")  # zombie, dead
_POLL_S = 0.005


class ProcessFaultTimeout(AssertionError):
    """A process did not reach the state a fault asked for by its deadline."""


def state_of(pid: int) -> str | None:
    """The one-letter state in ``/proc/PID/stat`` (R, S, D, T, Z...); None once gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    # "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so cut at the last ")".
    return stat.rpartition(")")[2].split()[0]


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is still a process that runs or can run (not gone, not a zombie)."""
    state = state_of(pid)
    return state is not None and state not in _DEAD_STATES


def is_stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped by a signal (SIGSTOP, SIGTSTP...)."""
    return state_of(pid) == "T"


def _wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise ProcessFaultTimeout(f"{what} not reached within {timeout_s} s")
        time.sleep(_POLL_S)


def wait_until_dead(pid: int, timeout_s: float = 10) -> None:
    """Return once ``pid`` is gone or a zombie; ProcessFaultTimeout at the deadline."""
    _wait_until(lambda: not is_alive(pid), timeout_s, f"death of pid {pid} ({state_of(pid)})")


def kill_9(pid: int, timeout_s: float = 10) -> None:
    """SIGKILL, then wait until the process is dead: no handler, no flush, no goodbye."""
    with contextlib.suppress(ProcessLookupError):  # already gone: the fault holds
        os.kill(pid, signal.SIGKILL)
    wait_until_dead(pid, timeout_s)


@contextlib.contextmanager
def paused(
    pid: int, timeout_s: float = 10, *, outside_locks_under: Path | None = None
) -> Iterator[None]:
    """SIGSTOP ``pid`` for the block (entered once it is stopped), and SIGCONT it after,
    however the block ends: a test that fails never leaves a frozen broker behind. With
    ``outside_locks_under``, stopped where it holds no ``flock`` of a file under that
    directory (else resumed and stopped again a moment later; see the module doc)."""
    _stop(pid, timeout_s)
    try:
        if outside_locks_under is not None:
            deadline = time.monotonic() + timeout_s
            while holds_lock_under(pid, outside_locks_under):
                if time.monotonic() > deadline:
                    raise ProcessFaultTimeout(f"pid {pid} held a lock at every stop")
                _resume(pid, timeout_s)
                time.sleep(_POLL_S)
                _stop(pid, timeout_s)
        yield
    finally:
        _resume(pid, timeout_s)


def _stop(pid: int, timeout_s: float) -> None:
    os.kill(pid, signal.SIGSTOP)
    _wait_until(lambda: is_stopped(pid), timeout_s, f"stop of pid {pid}")


def _resume(pid: int, timeout_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):  # killed while stopped: nothing to resume
        os.kill(pid, signal.SIGCONT)
    _wait_until(lambda: not is_stopped(pid), timeout_s, f"resume of pid {pid}")


def holds_lock_under(pid: int, directory: Path) -> bool:
    """Whether ``pid`` holds a ``flock`` on a file under ``directory``, as ``/proc/locks``
    lists them ("N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE ..."; a waiter's line has
    "->" after its number and holds nothing)."""
    device_inodes = set()
    for path in directory.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # a temporary file renamed away
            stat = path.stat()
            device_inodes.add((os.major(stat.st_dev), os.minor(stat.st_dev), stat.st_ino))
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[4] != str(pid):
            continue
        major, minor, inode = fields[5].split(":")
        if (int(major, 16), int(minor, 16), int(inode)) in device_inodes:
            return True
    return False
