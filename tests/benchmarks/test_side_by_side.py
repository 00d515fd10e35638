"""``sidelined``: a rival cluster's processes at the lowest CPU priority, then as they were."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.benchmarks.side_by_side import sidelined

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


def autogroup_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def test_every_thread_and_the_autogroup_are_sidelined_then_put_back(
    rival: subprocess.Popen[bytes],
) -> None:
    assert len(list(Path(f"/proc/{rival.pid}/task").iterdir())) == THREADS
    with sidelined([rival.pid]):
        assert policies(rival.pid) == {os.SCHED_IDLE}
        assert autogroup_nice(rival.pid) == 19
        assert autogroup_nice(os.getpid()) == 0  # the benchmark's own session untouched
    assert policies(rival.pid) == {os.SCHED_OTHER}
    assert autogroup_nice(rival.pid) == 0


def test_a_process_of_the_benchmarks_own_session_is_refused() -> None:
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as child:
        try:
            with pytest.raises(RuntimeError, match="own autogroup"), sidelined([child.pid]):
                pass
            assert autogroup_nice(os.getpid()) == 0
        finally:
            child.kill()
