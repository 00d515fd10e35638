"""``StopSignals``: real SIGINT and SIGTERM sent to this process, never raised where they
land; recorded, waking what waits, and raised only at the safe points asked for."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from tierlog.cli.stop_signals import Stopped, StopSignals

SIGNALS = pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
PROMPT_S = 2.0  # a wait ended by a signal ends well within this; each wait asked is 30 s


def _signal_soon(signum: int, after_s: float = 0.2) -> threading.Timer:
    """``signum`` to this process from another thread while the main thread waits."""
    timer = threading.Timer(after_s, os.kill, (os.getpid(), signum))
    timer.start()
    return timer


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    os.close(read_fd)
    os.close(write_fd)


@SIGNALS
def test_a_signal_is_recorded_and_wakes_but_raises_nothing_where_it_lands(
    signum: int, status: int
) -> None:
    woken: list[str] = []
    with StopSignals() as stops:
        stops.on_stop(lambda: woken.append("first"))
        assert (stops.received, stops.exit_status) == (None, None)  # (a tuple: not narrowed)
        signal.raise_signal(signum)  # handled before the next line: no exception here
        assert stops.received == signum
        assert stops.exit_status == status
        assert woken == ["first"]
        stops.on_stop(lambda: woken.append("given after"))  # woken at once
        assert woken == ["first", "given after"]


def test_the_handlers_before_are_back_after_it() -> None:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    with StopSignals():
        pass
    after = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    assert after == before


def test_sigint_inherited_as_ignored_is_taken_all_the_same() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job of a script
    try:
        with StopSignals() as stops:
            signal.raise_signal(signal.SIGINT)
            assert stops.received == signal.SIGINT
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@SIGNALS
def test_pause_raises_stopped_as_soon_as_a_signal_comes_and_once_for_each(
    signum: int, status: int
) -> None:
    with StopSignals() as stops:
        _signal_soon(signum)
        started = time.monotonic()
        with pytest.raises(Stopped) as stopped:
            stops.pause(30)
        assert time.monotonic() - started < PROMPT_S
        assert stopped.value.exit_status == status
        stops.check()  # that signal was raised: nothing more
        started = time.monotonic()
        stops.pause(0.2)  # and a pause sleeps again
        assert time.monotonic() - started >= 0.2
        signal.raise_signal(signal.SIGINT)  # a second signal, as a second Ctrl-C
        with pytest.raises(Stopped) as again:
            stops.check()
        assert again.value.exit_status == status  # the first signal's status still


@SIGNALS
def test_sleep_ends_at_a_signal_and_no_longer_sleeps_after_it(signum: int, status: int) -> None:
    with StopSignals() as stops:
        assert stops.sleep(0.01)
        _signal_soon(signum)
        started = time.monotonic()
        assert not stops.sleep(30)
        assert time.monotonic() - started < PROMPT_S
        started = time.monotonic()
        assert not stops.sleep(30)
        assert time.monotonic() - started < PROMPT_S
        assert stops.exit_status == status


@SIGNALS
def test_wait_readable_ends_at_a_signal_while_nothing_comes(
    pipe: tuple[int, int], signum: int, status: int
) -> None:
    read_fd, write_fd = pipe
    with StopSignals() as stops:
        os.write(write_fd, b"line\n")
        assert stops.wait_readable(read_fd)
        assert os.read(read_fd, 100) == b"line\n"
        _signal_soon(signum)
        started = time.monotonic()
        assert not stops.wait_readable(read_fd)  # nothing was written: the stop ended it
        assert time.monotonic() - started < PROMPT_S
        os.write(write_fd, b"more\n")
        assert not stops.wait_readable(read_fd)  # stopped stays stopped
        assert stops.exit_status == status


def _signal_another_thread_soon(signum: int, after_s: float = 0.2) -> threading.Timer:
    """``signum`` to the timer's own thread, as the kernel may choose for a signal sent
    to the process: the main thread's wait gets no EINTR and runs no Python handler."""
    timer = threading.Timer(after_s, lambda: signal.pthread_kill(threading.get_ident(), signum))
    timer.start()
    return timer


@SIGNALS
def test_a_signal_that_lands_on_another_thread_ends_each_wait(
    pipe: tuple[int, int], signum: int, status: int
) -> None:
    """Without the interpreter's wakeup byte each wait would sleep on: its watchdog, a
    signal to the main thread 10 s on, would end it, too late for ``PROMPT_S``."""
    read_fd, _ = pipe

    def paused(stops: StopSignals) -> bool:
        with pytest.raises(Stopped) as stopped:
            stops.pause(30)
        return stopped.value.exit_status == status

    waits = [
        lambda stops: not stops.wait_readable(read_fd),
        lambda stops: not stops.sleep(30),
        paused,
    ]
    for wait in waits:
        with StopSignals() as stops:
            timers = [_signal_soon(signum, after_s=10), _signal_another_thread_soon(signum)]
            try:
                started = time.monotonic()
                assert wait(stops)
                assert time.monotonic() - started < PROMPT_S
                assert stops.exit_status == status
            finally:  # no signal may come after the handlers are put back: it would end pytest
                for timer in timers:
                    timer.cancel()
                    timer.join()
