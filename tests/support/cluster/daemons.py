"""The node's daemons as detached processes: started by ``up``, found again by ``down``.

``make cluster`` returns while the node keeps running, so each daemon is started in a
session of its own (a Ctrl-C in the shell that ran ``make`` does not reach it), its
output appended to ``logs/<name>.log`` and its pid written to ``pids/<name>``. ``stop``
signals that pid only if it is still the program that was started (``/proc/PID/exe``),
so a recycled pid is never killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.cluster.layout import Layout

__all__ = ["DaemonError", "is_running", "log_tail", "running_pid", "start", "stop"]


class DaemonError(Exception):
    """A daemon did not start or stop; the message has its log's end."""


def _pid_file(layout: Layout, name: str) -> Path:
    return layout.pids / name


def running_pid(layout: Layout, name: str) -> int | None:
    """The daemon's pid if that process still runs the program it was started with."""
    pid_file = _pid_file(layout, name)
    if not pid_file.is_file():
        return None
    pid_text, _, program = pid_file.read_text().partition("\n")
    try:
        exe = str(Path(f"/proc/{int(pid_text)}/exe").readlink())
    except (OSError, ValueError):
        return None
    return int(pid_text) if exe == program.strip() else None


def is_running(layout: Layout, name: str) -> bool:
    return running_pid(layout, name) is not None


def log_tail(layout: Layout, name: str, lines: int = 40) -> str:
    log = layout.logs / f"{name}.log"
    if not log.is_file():
        return f"(no log {log})"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def start(layout: Layout, name: str, command: Sequence[str | Path]) -> None:
    """Start ``command`` detached unless ``name`` already runs (``up`` is idempotent)."""
    if is_running(layout, name):
        return
    layout.logs.mkdir(parents=True, exist_ok=True)
    layout.pids.mkdir(parents=True, exist_ok=True)
    program = os.path.realpath(command[0])
    with (layout.logs / f"{name}.log").open("ab") as log:
        process = subprocess.Popen(
            [str(part) for part in command],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _pid_file(layout, name).write_text(f"{process.pid}\n{program}\n")


def stop(layout: Layout, name: str, timeout_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``; forget the pid file either way."""
    pid = running_pid(layout, name)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while running_pid(layout, name) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        if running_pid(layout, name) is not None:
            os.kill(pid, signal.SIGKILL)
    _pid_file(layout, name).unlink(missing_ok=True)
