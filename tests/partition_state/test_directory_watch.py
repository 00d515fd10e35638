"""A call as a named file of a directory is replaced (``directory_watch``): the wake of
the directory store's readers, at no cost while nothing changes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from tierlog.partition_state.directory_watch import watch_replaced

WAIT_S = 5.0


def _replace(path: Path, text: str) -> None:
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(text)
    temp.replace(path)


def test_a_replace_of_a_named_file_calls_and_others_do_not(tmp_path: Path) -> None:
    calls = threading.Semaphore(0)
    stop = watch_replaced(tmp_path, ["changes"], calls.release)
    try:
        _replace(tmp_path / "leases.json", "other")  # not a name watched
        (tmp_path / "changes.lock").touch()  # created, not renamed in
        assert not calls.acquire(timeout=0.3)
        _replace(tmp_path / "changes", "1")
        assert calls.acquire(timeout=WAIT_S)
    finally:
        stop()


def test_another_process_replacing_the_file_is_seen(tmp_path: Path) -> None:
    """As a broker sees the journal another broker's process replaced."""
    calls = threading.Semaphore(0)
    stop = watch_replaced(tmp_path, ["changes"], calls.release)
    try:
        script = (
            "import os, sys; path = sys.argv[1]; "
            "open(path + '.tmp', 'w').write('2'); os.replace(path + '.tmp', path)"
        )
        subprocess.run([sys.executable, "-c", script, str(tmp_path / "changes")], check=True)
        assert calls.acquire(timeout=WAIT_S)
    finally:
        stop()


def test_stop_ends_the_thread_and_closes_the_descriptors(tmp_path: Path) -> None:
    open_before = len(list(Path("/proc/self/fd").iterdir()))
    stop = watch_replaced(tmp_path, ["changes"], lambda: None)
    assert any(thread.name == "state-dir-watch" for thread in threading.enumerate())
    stop()
    assert not any(thread.name == "state-dir-watch" for thread in threading.enumerate())
    assert len(list(Path("/proc/self/fd").iterdir())) == open_before


def test_a_failing_call_leaves_the_watch_running(tmp_path: Path) -> None:
    calls = threading.Semaphore(0)
    failed = threading.Event()

    def replaced() -> None:
        calls.release()
        if not failed.is_set():
            failed.set()
            raise RuntimeError("the caller's loop is closed")

    stop = watch_replaced(tmp_path, ["changes"], replaced)
    try:
        _replace(tmp_path / "changes", "1")
        assert calls.acquire(timeout=WAIT_S)
        _replace(tmp_path / "changes", "2")
        assert calls.acquire(timeout=WAIT_S)
    finally:
        stop()


def test_a_watch_made_past_a_thousand_descriptors_still_calls(tmp_path: Path) -> None:
    """A broker of thousands of partitions holds more descriptors than ``select``
    takes (1,024): its watch, made after its logs are open, must still work."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        calls = threading.Semaphore(0)
        stop = watch_replaced(tmp_path, ["changes"], calls.release)
        try:
            _replace(tmp_path / "changes", "1")
            assert calls.acquire(timeout=WAIT_S)
        finally:
            stop()
    finally:
        for fd in held:
            os.close(fd)
