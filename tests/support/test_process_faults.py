"""Process faults on real child processes: an echo child answers each line it is sent,
so a test sees whether it runs; signals are real, states are read from /proc."""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.process_faults import (
    ProcessFaultTimeout,
    holds_lock_under,
    is_alive,
    is_stopped,
    kill_9,
    paused,
    state_of,
    wait_until_dead,
)

ECHO = (
    "import sys\n"
    "print('ready', flush=True)\n"
    "for line in sys.stdin:\n"
    "    print(line, end='', flush=True)\n"
)
# Holds a lock on the file it is given most of the time, a moment free between holds.
LOCKER = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "    time.sleep(0.02)\n"
    "    fcntl.flock(fd, fcntl.LOCK_UN)\n"
    "    time.sleep(0.002)\n"
)
# How long a stopped child is given to (wrongly) answer. It is known to be stopped
# before the wait starts, so this bounds how hard we look, not a race.
SILENCE_S = 0.3


@pytest.fixture
def echo() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(
        [sys.executable, "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
    )
    try:
        assert _answer(child, 30) == b"ready\n"
        yield child
    finally:
        child.kill()
        child.wait()


def _send(child: subprocess.Popen[bytes], line: bytes) -> None:
    assert child.stdin is not None
    child.stdin.write(line)


def _answer(child: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    """The line the child wrote within ``timeout_s`` (b"" if it wrote nothing)."""
    assert child.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = b""
    while not line.endswith(b"\n"):
        readable, _, _ = select.select([child.stdout], [], [], deadline - time.monotonic())
        if not readable:
            break
        line += os.read(child.stdout.fileno(), 4096)
    return line


def test_kill_9_returns_once_the_process_is_dead(echo: subprocess.Popen[bytes]) -> None:
    assert is_alive(echo.pid)
    kill_9(echo.pid)
    assert not is_alive(echo.pid)
    assert state_of(echo.pid) == "Z"  # dead, not yet reaped by its parent (us)
    assert echo.wait(timeout=10) == -9


def test_a_paused_process_does_not_answer_and_answers_after(
    echo: subprocess.Popen[bytes],
) -> None:
    with paused(echo.pid):
        assert is_stopped(echo.pid)
        _send(echo, b"while stopped\n")
        assert _answer(echo, SILENCE_S) == b""
    assert not is_stopped(echo.pid)
    assert _answer(echo, 30) == b"while stopped\n"


def test_pausing_always_resumes_even_when_the_block_fails(
    echo: subprocess.Popen[bytes],
) -> None:
    with pytest.raises(RuntimeError, match="the test failed"), paused(echo.pid):
        raise RuntimeError("the test failed")
    assert not is_stopped(echo.pid)
    _send(echo, b"still here\n")
    assert _answer(echo, 30) == b"still here\n"


def test_a_paused_process_can_be_killed(echo: subprocess.Popen[bytes]) -> None:
    with paused(echo.pid):
        kill_9(echo.pid)
    assert echo.wait(timeout=10) == -9


def test_waiting_for_a_live_process_to_die_fails_at_the_deadline(
    echo: subprocess.Popen[bytes],
) -> None:
    timeout_s = 0.2
    started = time.monotonic()
    with pytest.raises(ProcessFaultTimeout, match=f"death of pid {echo.pid}"):
        wait_until_dead(echo.pid, timeout_s=timeout_s)
    assert time.monotonic() - started >= timeout_s  # it waited until the deadline
    assert is_alive(echo.pid)


def test_a_process_that_is_not_our_child_is_killed_and_seen_dead() -> None:
    """A broker of ``tierlog cluster up`` is the ``up`` command's child, not the test's:
    no waitpid is possible, /proc alone tells."""
    parent = subprocess.run(
        [sys.executable, "-c",
         "import subprocess\n"
         "child = subprocess.Popen(['sleep', '600'], stdin=subprocess.DEVNULL,\n"
         "                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
         "print(child.pid)\n"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    orphan = int(parent.stdout)
    try:
        assert is_alive(orphan)
        with pytest.raises(ChildProcessError):
            os.waitpid(orphan, os.WNOHANG)
        kill_9(orphan)
        assert not is_alive(orphan)
    finally:
        if is_alive(orphan):
            os.kill(orphan, 9)


def test_a_pause_outside_locks_lands_where_the_process_holds_none(tmp_path: Path) -> None:
    """A child holding a lock under the directory ~90% of the time: every pause that
    names the directory finds it free (another process takes it at once), and the
    lock is seen held once the child runs again."""
    lock = tmp_path / "store" / "topic.json.lock"
    lock.parent.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(lock)], stdout=subprocess.PIPE, bufsize=0
    )
    try:
        assert _answer(child, 30) == b"ready\n"
        fd = os.open(lock, os.O_RDWR)
        try:
            for _ in range(10):
                with paused(child.pid, outside_locks_under=lock.parent):
                    assert not holds_lock_under(child.pid, lock.parent)
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: taken at once
                    fcntl.flock(fd, fcntl.LOCK_UN)
            deadline = time.monotonic() + 10
            while not holds_lock_under(child.pid, lock.parent):
                assert time.monotonic() < deadline, "the running child never held its lock"
                time.sleep(0.001)
        finally:
            os.close(fd)
    finally:
        child.kill()
        child.wait()
