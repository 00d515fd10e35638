"""Stopping a command with a real signal, for the CLI tests: send it at a moment the test
can see (the command's main thread asleep in its ``select``, ``StopSignals``' waits),
then time the exit; a command still running after ``WATCHDOG_S`` fails the test with
its threads' stacks (run it with ``PYTHONFAULTHANDLER=1``: ``FAULTHANDLER_ENV``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

__all__ = [
    "FAULTHANDLER_ENV",
    "PROMPT_S",
    "STOPS",
    "WATCHDOG_S",
    "sigint_inherited",
    "stopped",
    "until",
    "waits_in_select",
]

STOPS = pytest.mark.parametrize(
    ("stop", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
PROMPT_S = 15.0  # from the signal to the exit on a loaded machine; far below the waits cut
WATCHDOG_S = 120.0
FAULTHANDLER_ENV = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # SIGABRT prints every stack


@contextlib.contextmanager
def sigint_inherited(ignored: bool) -> Iterator[None]:
    """Children started inside get SIGINT at its default, as from a terminal (this
    process catches it: exec resets a caught signal), or ignored, as a shell without job
    control starts a background command.  Set here, not in a ``preexec_fn``: that makes
    ``subprocess`` fork, and the fork runs gRPC's fork handlers (this process's clients),
    which hung a fork here and aborted a child (``ev_epoll1_linux.cc``)."""
    handler = signal.SIG_IGN if ignored else signal.default_int_handler
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stopped(process: subprocess.Popen[bytes], stop: signal.Signals) -> tuple[float, str, str]:
    """Send ``stop``; the seconds until the process exited, its stdout and its stderr."""
    sent = time.monotonic()
    process.send_signal(stop)
    assert process.stdout is not None and process.stderr is not None
    try:
        process.wait(timeout=WATCHDOG_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        raise AssertionError(f"it hung; its threads:\n{process.stderr.read().decode()}") from None
    elapsed_s = time.monotonic() - sent
    return elapsed_s, process.stdout.read().decode(), process.stderr.read().decode()


def waits_in_select(pid: int) -> bool:
    """The command's main thread sleeps in a ``select`` (a ``StopSignals`` wait; locks and
    the clients' waits sleep in futexes), or in a read of a pipe (an older command's
    read of stdin)."""
    waits_in = Path(f"/proc/{pid}/wchan").read_text()
    return waits_in.startswith("poll_schedule_timeout") or "pipe_read" in waits_in


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WATCHDOG_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.01)
