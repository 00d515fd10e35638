"""A stop signal (SIGINT, SIGTERM) asks a command to stop at a safe point.

Python's own handlers raise ``KeyboardInterrupt`` (or, set so, ``SystemExit``) wherever
the main thread happens to be.  Raised inside ``threading.Condition.__enter__`` (Python
code: the interpreter looks for signals after the C ``acquire`` returns and before
``__enter__`` does) the exception leaves the lock held with no ``__exit__`` to release it;
gRPC's channel and the producer take their conditions so, and the close on the way out
then waits for that lock forever.  Raised in the middle of any other code it can leave
half-made state behind.  So while ``StopSignals`` is entered, its handler only records
the signal and wakes whoever waits, which is safe from a signal handler:

- ``received`` (the first signal's number) is set, and ``exit_status`` is then 128 plus
  it, as a shell reports a process the signal ended (130 for SIGINT, 143 for SIGTERM);
- each wake given to ``on_stop`` is called (``Consumer.wakeup``: a flag and a mark on a
  ``SimpleQueue``);
- the signal's number is written, a byte per signal, into a pipe of its own:
  ``wait_readable`` (a file such as stdin is readable, or a stop came), ``sleep`` and
  ``pause`` ``select`` on it, so a blocking wait stays wakeable.

The byte is written by the interpreter's own C handler (``signal.set_wakeup_fd``), on
whichever thread the kernel gave the signal to, not by the Python handler: that one runs
only on the main thread, between two of its bytecodes, so a main thread asleep in
``select`` while the signal landed on another thread (gRPC's, the producer's sender)
would sleep on, never running it.  CI saw a ``tierlog produce`` hang so on 2026-12-02.

The command decides where a stop takes effect.  A loop checks ``received`` between its
steps (or ``sleep`` says so) and leaves them (``consume``, ``produce``, ``perf``), then
closes its clients as it does at its end.  A narrative (``demo``, ``cluster up``) calls
``check`` between steps and ``pause`` in its waits: either raises ``Stopped`` once for
each signal, from that known place, and the command unwinds through its ``finally``
blocks, stopping what it started (a second signal during that unwind raises again where
the next ``pause`` waits, so a stop that waits on a child's grace can give up at once).

Both signals are set explicitly, not inherited: a shell without job control starts a
background command with SIGINT ignored, and Python then leaves it ignored.  Only the
main thread may set signal handlers; ``StopSignals`` is entered there.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

__all__ = ["STOP_SIGNALS", "Pause", "StopSignals", "Stopped"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

Pause = Callable[[float], None]  # sleep up to that many seconds (``StopSignals.pause``)
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Stopped(BaseException):
    """A stop signal came, raised at a safe point (``StopSignals.check`` or ``pause``).
    A ``BaseException``, as ``KeyboardInterrupt`` is, so ``except Exception`` lets it
    through to the command, which exits with ``exit_status``."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class StopSignals:
    """While entered, SIGINT and SIGTERM are recorded, wake what was given to
    ``on_stop`` and end ``pause`` and ``wait_readable``; nothing is raised where they
    land (see the module's docstring)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._wakes: list[Callable[[], None]] = []
        self._previous: dict[int, _Handler] = {}
        self._read_fd = self._write_fd = self._previous_wakeup_fd = -1
        self._unraised = 0  # signals read from the pipe that ``pause`` has not raised yet

    def __enter__(self) -> StopSignals:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)  # read what is there, never wait for more
        os.set_blocking(self._write_fd, False)  # a flood of signals never blocks the handler
        # A pipe full of earlier signals' bytes has woken every wait already: no warning.
        self._previous_wakeup_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_wakeup_fd)
        os.close(self._read_fd)
        os.close(self._write_fd)

    @property
    def exit_status(self) -> int | None:
        """128 plus the first signal's number, None while none came."""
        return None if self.received is None else 128 + self.received

    def on_stop(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` at a stop, from the handler, so it must be safe there (set a
        flag, put on a ``SimpleQueue``: ``Consumer.wakeup``); at once if one came."""
        self._wakes.append(wake)
        if self.received is not None:
            wake()

    def pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``; ``Stopped`` as soon as a stop signal comes (or at
        once for one that came since the last ``Stopped``)."""
        if not self._unraised:
            select.select([self._read_fd], [], [], max(seconds, 0.0))
            self._read_signals()
        if self._unraised:
            self._unraised -= 1
            assert self.received is not None
            raise Stopped(self.received)

    def check(self) -> None:
        """A safe point: ``Stopped`` if a stop signal came since the last ``Stopped``."""
        self.pause(0.0)

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, less if a stop signal comes (none if one came); False
        once one came.  For a loop that leaves at a stop rather than unwinding."""
        if self.received is None:
            select.select([self._read_fd], [], [], max(seconds, 0.0))
            self._read_signals()
        return self.received is None

    def wait_readable(self, fd: int) -> bool:
        """Wait until ``fd`` can be read without blocking (True) or a stop signal came
        (False, and every later call too)."""
        if self.received is None:
            select.select([fd, self._read_fd], [], [])
            self._read_signals()
        return self.received is None

    def _read_signals(self) -> None:
        """Take the bytes the C handler wrote: the first stop is ``received`` even where
        the Python handler has yet to run (it runs at the main thread's next bytecode)."""
        with contextlib.suppress(BlockingIOError):
            for signum in os.read(self._read_fd, 4096):
                if signum in STOP_SIGNALS:  # a byte of another handler's signal is not a stop
                    self._unraised += 1
                    if self.received is None:
                        self.received = signum

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        for wake in self._wakes:
            wake()
