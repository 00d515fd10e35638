"""``sidelined``: a rival cluster's processes at the lowest CPU priority, then as they were."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.benchmarks.side_by_side import autogroup_of, parse_autogroup, sidelined

THREADS = 3


@pytest.fixture
def rival() -> Iterator[subprocess.Popen[bytes]]:
    """A process of several threads in a session of its own, as each broker runs."""
    code = (
        "import threading, time\n"
        f"for _ in range({THREADS - 1}): threading.Thread(target=time.sleep, args=(60,)).start()\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    assert process.stdout is not None and process.stdout.readline() == b"up\n"
    yield process
    process.kill()
    process.wait()


def policies(pid: int) -> set[int]:
    return {os.sched_getscheduler(int(task.name)) for task in Path(f"/proc/{pid}/task").iterdir()}


def test_every_thread_and_the_autogroup_are_sidelined_then_put_back(
    rival: subprocess.Popen[bytes],
) -> None:
    """Where the rival is in no autogroup (this machine's CI on 2026-12-02) only the
    threads' policy is set, and nothing is written to its autogroup file."""
    own, before = autogroup_of(os.getpid()), autogroup_of(rival.pid)
    assert len(list(Path(f"/proc/{rival.pid}/task").iterdir())) == THREADS
    with sidelined([rival.pid]):
        assert policies(rival.pid) == {os.SCHED_IDLE}
        assert autogroup_of(rival.pid) == (None if before is None else (before[0], 19))
        assert autogroup_of(os.getpid()) == own  # the benchmark's own session untouched
    assert policies(rival.pid) == {os.SCHED_OTHER}
    assert autogroup_of(rival.pid) == before


def test_a_process_of_the_benchmarks_own_autogroup_is_refused() -> None:
    """Its nice value would be the benchmark's own; a process in no autogroup, as the
    benchmark may be too, is not refused: the policy alone sidelines it."""
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as child:
        try:
            own = autogroup_of(os.getpid())
            if own is None:
                with sidelined([child.pid]):
                    assert policies(child.pid) == {os.SCHED_IDLE}
            else:
                with pytest.raises(RuntimeError, match="own autogroup"), sidelined([child.pid]):
                    pass
            assert autogroup_of(os.getpid()) == own
            assert policies(child.pid) == {os.SCHED_OTHER}
        finally:
            child.kill()


def test_the_autogroup_file_is_read_and_an_empty_one_is_none() -> None:
    assert parse_autogroup("/autogroup-25 nice -3\n") == ("/autogroup-25", -3)
    assert parse_autogroup("") is None
