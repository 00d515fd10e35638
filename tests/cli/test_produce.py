"""``tierlog produce`` stopped by SIGINT or SIGTERM, as Kafka's console producer is: it
stops reading stdin and closes its producer, which sends and waits for every record
sent so far; exit status 130 or 143.  The installed command against a real sidecar,
stdin a pipe the test holds open."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.support.sidecars import SidecarProcess, console_script, start_sidecar
from tierlog.client import AdminClient, Consumer, TopicPartition

STOPS = pytest.mark.parametrize(
    ("stop", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
TP = TopicPartition("t", 0)
PROMPT_S = 15.0  # from the signal to the exit, on a loaded machine; a hang is the watchdog's
WATCHDOG_S = 120.0
LINGER_MS = 60_000  # nothing is sent before a flush: only the close at the stop sends


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[SidecarProcess]:
    started = start_sidecar(tmp_path / "data")
    try:
        with AdminClient(started.address) as admin:
            admin.create_topic(TP.topic, 1)
        yield started
    finally:
        started.kill()


@contextlib.contextmanager
def _producing(sidecar: SidecarProcess, *flags: str) -> Iterator[subprocess.Popen[bytes]]:
    """``tierlog produce`` to ``TP``, its stdin a pipe left open; killed at the end."""
    command = [console_script("tierlog"), "produce", "--server", sidecar.address]
    command += ["--topic", TP.topic, "--partition", str(TP.partition), *flags]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # SIGABRT prints every thread's stack
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def _stopped(process: subprocess.Popen[bytes], stop: signal.Signals) -> tuple[float, str]:
    """Send ``stop``; the seconds until the process exited, and its stderr.  A process
    still there after ``WATCHDOG_S`` fails the test with its threads' stacks."""
    sent = time.monotonic()
    process.send_signal(stop)
    assert process.stderr is not None
    try:
        process.wait(timeout=WATCHDOG_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        raise AssertionError(f"it hung; its threads:\n{process.stderr.read().decode()}") from None
    return time.monotonic() - sent, process.stderr.read().decode()


def _unread_bytes(pipe_fd: int) -> int:
    """What the process has not read yet of what was written to its stdin."""
    answer = fcntl.ioctl(pipe_fd, termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", answer)[0])


def _waiting_for_stdin(pid: int) -> bool:
    """The command's main thread sleeps until stdin has more: in a ``select`` (its one:
    locks and the clients' waits sleep in futexes), or a read of the pipe."""
    waits_in = Path(f"/proc/{pid}/wchan").read_text()
    return waits_in.startswith("poll_schedule_timeout") or "pipe_read" in waits_in


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WATCHDOG_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.01)


def _stored(sidecar: SidecarProcess) -> list[bytes | None]:
    """Every value in ``TP``, in offset order."""
    with Consumer({"bootstrap.servers": sidecar.address}) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, 0)
        end = consumer.end_offsets([TP])[TP]
        values: list[bytes | None] = []
        deadline = time.monotonic() + WATCHDOG_S
        while len(values) < end:
            assert time.monotonic() < deadline, f"read {len(values)} of {end} records"
            values += [record.value for record in consumer.poll(1000)]
    return values


@STOPS
def test_a_stop_sends_every_line_read_before_it_then_exits(
    sidecar: SidecarProcess, stop: signal.Signals, status: int
) -> None:
    """The lines were read and handed to the producer, which holds them for a minute's
    linger: the stop's close sends them at once, and only then does the command end."""
    with _producing(sidecar, "--linger-ms", str(LINGER_MS)) as process:
        stdin = process.stdin
        assert stdin is not None
        _until(lambda: _waiting_for_stdin(process.pid), "the wait for stdin")
        stdin.write(b"a\nb\nc\n")
        stdin.flush()
        _until(lambda: not _unread_bytes(stdin.fileno()), "the read of the lines")
        _until(lambda: _waiting_for_stdin(process.pid), "the wait for more")  # all sent
        elapsed_s, stderr = _stopped(process, stop)
    assert process.returncode == status, stderr
    assert elapsed_s < PROMPT_S
    assert _stored(sidecar) == [b"a", b"b", b"c"]


@STOPS
def test_a_producer_stopped_while_lines_stream_in_keeps_a_prefix_of_them_once_each(
    sidecar: SidecarProcess, stop: signal.Signals, status: int
) -> None:
    """The signal lands while the command sends, the place where an exception raised by
    the handler could leave a lock of the producer or of gRPC held and the close waiting
    on it forever.  The command stops between two lines: the records sent before are
    all stored, in order and once each, and none after."""
    with _producing(sidecar) as process:
        assert process.stdin is not None
        streaming = threading.Thread(target=_stream_lines, args=(process.stdin,), daemon=True)
        streaming.start()
        _until(lambda: _stored_count(sidecar) >= 500, "500 records stored")
        elapsed_s, stderr = _stopped(process, stop)
        streaming.join(WATCHDOG_S)
    assert process.returncode == status, stderr
    assert elapsed_s < PROMPT_S
    stored = _stored(sidecar)
    assert len(stored) >= 500
    assert stored == [str(number).encode() for number in range(len(stored))]


def _stream_lines(stdin: IO[bytes]) -> None:
    """Numbered lines, 100 a write, until the command stops reading."""
    number = 0
    with contextlib.suppress(BrokenPipeError, ValueError):  # it exited; the test closed it
        while True:
            stdin.write(b"".join(b"%d\n" % n for n in range(number, number + 100)))
            stdin.flush()
            number += 100


def _stored_count(sidecar: SidecarProcess) -> int:
    with Consumer({"bootstrap.servers": sidecar.address}) as consumer:
        return consumer.end_offsets([TP])[TP]
