"""``tierlog produce`` stopped by SIGINT or SIGTERM, as Kafka's console producer is: it
stops reading stdin and closes its producer, which sends and waits for every record
sent so far; exit status 130 or 143.  The installed command against a real sidecar,
stdin a pipe the test holds open."""

from __future__ import annotations

import contextlib
import fcntl
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.support.sidecars import SidecarProcess, console_script, start_sidecar
from tierlog.client import AdminClient, Consumer, TopicPartition

from .stopping import (
    FAULTHANDLER_ENV,
    PROMPT_S,
    STOPS,
    WATCHDOG_S,
    sigint_inherited,
    stopped,
    until,
    waits_in_select,
)

TP = TopicPartition("t", 0)
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
def _producing(
    sidecar: SidecarProcess, *flags: str, sigint_ignored: bool = False
) -> Iterator[subprocess.Popen[bytes]]:
    """``tierlog produce`` to ``TP``, its stdin a pipe left open, SIGINT as a terminal
    leaves it (or ignored: ``sigint_inherited``); killed at the end."""
    command = [console_script("tierlog"), "produce", "--server", sidecar.address]
    command += ["--topic", TP.topic, "--partition", str(TP.partition), *flags]
    with sigint_inherited(sigint_ignored):
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=FAULTHANDLER_ENV,
        )
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def _unread_bytes(pipe_fd: int) -> int:
    """What the process has not read yet of what was written to its stdin."""
    answer = fcntl.ioctl(pipe_fd, termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", answer)[0])


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


@pytest.mark.parametrize(
    ("stop", "status", "sigint_ignored"),
    [(signal.SIGINT, 130, False), (signal.SIGTERM, 143, False), (signal.SIGINT, 130, True)],
    ids=["SIGINT", "SIGTERM", "SIGINT-inherited-as-ignored"],
)
def test_a_stop_sends_every_line_read_before_it_then_exits(
    sidecar: SidecarProcess, stop: signal.Signals, status: int, sigint_ignored: bool
) -> None:
    """The lines were read and handed to the producer, which holds them for a minute's
    linger: the stop's close sends them at once, and only then does the command end.
    A Ctrl-C counts even where SIGINT was inherited as ignored (Python leaves it so, and
    the command ran on: a ``kill -INT`` of a script's background ``tierlog produce``)."""
    linger = ("--linger-ms", str(LINGER_MS))
    with _producing(sidecar, *linger, sigint_ignored=sigint_ignored) as process:
        stdin = process.stdin
        assert stdin is not None
        until(lambda: waits_in_select(process.pid), "the wait for stdin")
        stdin.write(b"a\nb\nc\n")
        stdin.flush()
        until(lambda: not _unread_bytes(stdin.fileno()), "the read of the lines")
        until(lambda: waits_in_select(process.pid), "the wait for more")  # sent
        elapsed_s, _out, stderr = stopped(process, stop)
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
        until(lambda: _stored_count(sidecar) >= 500, "500 records stored")
        elapsed_s, _out, stderr = stopped(process, stop)
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
