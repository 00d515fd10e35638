"""The machine-wide locks: a try that does not wait, and a killed holder freeing it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tierlog.file_lock import try_exclusive_lock


def test_a_held_lock_is_refused_to_a_second_try_until_released(tmp_path: Path) -> None:
    lock_path = tmp_path / "controller.lock"
    first = try_exclusive_lock(lock_path)
    assert first is not None
    assert try_exclusive_lock(lock_path) is None  # another open, even in this process

    first.release()
    first.release()  # releasing twice is harmless
    second = try_exclusive_lock(lock_path)
    assert second is not None
    second.release()


def test_a_holder_killed_with_sigkill_frees_the_lock(tmp_path: Path) -> None:
    lock_path = tmp_path / "controller.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from pathlib import Path\n"
         "from tierlog.file_lock import try_exclusive_lock\n"
         "held = try_exclusive_lock(Path(sys.argv[1]))\n"
         "assert held is not None\n"
         "print('held', flush=True)\n"
         "time.sleep(600)\n",
         str(lock_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert try_exclusive_lock(lock_path) is None
        os.kill(holder.pid, signal.SIGKILL)
    finally:
        holder.wait(timeout=30)

    taken = try_exclusive_lock(lock_path)
    assert taken is not None
    taken.release()
