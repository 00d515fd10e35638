"""``LocalSidecar``: the child a command starts is never left running by a Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tierlog.cli.local_sidecar import LocalSidecar

TraceFunction = Any  # sys.settrace's callback type is private to typeshed


@contextlib.contextmanager
def _sigint_as_popen_returns(pids: list[int]) -> Iterator[None]:
    """A real SIGINT to this process the moment ``subprocess.Popen`` has started a child
    (its pid goes to ``pids``): the window between the fork and the caller taking the
    child in hand, which a Ctrl-C at the terminal can hit."""

    def on_return(frame: FrameType, event: str, _arg: object) -> TraceFunction:
        if event == "return" and not pids:
            pids.append(frame.f_locals["self"].pid)
            signal.raise_signal(signal.SIGINT)
        return on_return

    def on_call(frame: FrameType, event: str, _arg: object) -> TraceFunction:
        if event == "call" and frame.f_code is subprocess.Popen.__init__.__code__:
            return on_return
        return None

    # As at a terminal, whatever the test runner inherited (a background job ignores it).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.settrace(on_call)
    try:
        yield
    finally:
        sys.settrace(None)
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_as_the_child_starts_stops_it(tmp_path: Path) -> None:
    pids: list[int] = []
    try:
        with pytest.raises(KeyboardInterrupt), _sigint_as_popen_returns(pids):
            LocalSidecar.start(tmp_path / "data")
        (pid,) = pids
        with pytest.raises(ProcessLookupError):  # stopped, and reaped
            os.kill(pid, 0)
    finally:
        for pid in pids:  # before the fix: still running, in a session of its own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
