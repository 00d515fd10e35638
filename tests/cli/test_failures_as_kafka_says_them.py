"""What a Kafka user meets when something is wrong, typed as they type it (``TIERLOG_SERVER``
standing for ``--bootstrap-server``): a partition that does not exist, a consumer stopped
by SIGTERM, a group with live members, a broker gone. Each is said at once, in one line,
in Kafka's words, by the installed command against a real sidecar."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.support.sidecars import SidecarProcess, console_script, start_sidecar
from tierlog.client import Consumer, Producer, TopicPartition
from tierlog.client.groups import ConsumerGroups

from .test_data_commands import ok, tierlog

WATCHDOG_S = 120


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[SidecarProcess]:
    """A sidecar holding t1 (three partitions), five records in each."""
    started = start_sidecar(tmp_path / "data", "offsets.topic.num.partitions=1")
    try:
        ok(tierlog(started.address, "topics", "--create", "--topic", "t1", "--partitions", "3"))
        with Producer({"bootstrap.servers": started.address}) as producer:
            for i in range(15):
                producer.send("t1", b"v%d" % i, partition=i % 3)
            producer.flush()
        yield started
    finally:
        started.kill()


def _typed(sidecar: SidecarProcess, *args: str, stdin: bytes = b"") -> tuple[int, list[str]]:
    """The exit status and stderr lines of ``tierlog ARGS``, the server in the environment."""
    done = tierlog(sidecar.address, *args, stdin=stdin, use_env=True)
    return done.returncode, done.stderr.decode().splitlines()


@contextlib.contextmanager
def _running(sidecar: SidecarProcess, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``tierlog ARGS`` running, killed at the end of the block, or after ``WATCHDOG_S``
    if a read of its output waits for what never comes."""
    env = {**os.environ, "TIERLOG_SERVER": sidecar.address}
    process = subprocess.Popen(
        [console_script("tierlog"), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    watchdog = threading.Timer(WATCHDOG_S, process.kill)
    watchdog.start()
    try:
        yield process
    finally:
        watchdog.cancel()
        process.kill()
        process.communicate()


def _lines(stream: IO[bytes] | None, count: int) -> list[str]:
    assert stream is not None
    return [stream.readline().decode() for _ in range(count)]


def _until_line_with(stream: IO[bytes] | None, text: str) -> str:
    """The first line holding ``text`` (AssertionError at end of output)."""
    assert stream is not None
    for line in iter(stream.readline, b""):
        if text in line.decode():
            return line.decode()
    raise AssertionError(f"no line with {text!r}")


@pytest.mark.parametrize(
    "command",
    [
        ("produce", "--topic", "t1", "--partition", "99"),
        ("consume", "--topic", "t1", "--partition", "99", "--offset", "0"),
        ("consume", "--topic", "t1", "--partition", "99"),
        ("consume", "--topic", "nowhere", "--partition", "0", "--offset", "0"),
    ],
    ids=["produce", "consume --offset", "consume from the end", "consume a missing topic"],
)
def test_a_partition_that_does_not_exist_is_unknown_topic_or_partition_in_one_line(
    sidecar: SidecarProcess, command: tuple[str, ...]
) -> None:
    """Not a traceback, not a silent hang: one line naming the error and exit status 1
    (Kafka's tools' status for an error that ends them); a consume says it before its
    total, as Kafka's console consumer logs its error before it."""
    status, stderr = _typed(sidecar, *command, stdin=b"a\n")
    assert status == 1, stderr
    assert "Traceback" not in "\n".join(stderr)
    errors = [line for line in stderr if "UNKNOWN_TOPIC_OR_PARTITION" in line]
    assert len(errors) == 1, stderr
    assert errors[0].startswith(f"tierlog {command[0]}: UNKNOWN_TOPIC_OR_PARTITION: ")
    assert errors[0].count("UNKNOWN_TOPIC_OR_PARTITION") == 1
    if command[0] == "consume":
        assert stderr[-2:] == [errors[0], "Processed a total of 0 messages"]


def test_an_error_names_its_code_once(sidecar: SidecarProcess) -> None:
    status, stderr = _typed(sidecar, "topics", "--alter", "--topic", "t1", "--partitions", "1")
    assert status == 1
    assert stderr[0].startswith("tierlog topics: INVALID_PARTITIONS: ")
    assert stderr[0].count("INVALID_PARTITIONS") == 1


def test_a_key_separator_keeps_its_spaces(sidecar: SidecarProcess) -> None:
    status, stderr = _typed(
        sidecar,
        "produce",
        "--topic",
        "t1",
        "--partition",
        "0",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator= | ",
        stdin=b"k1 | v1\n",
    )
    assert status == 0, stderr
    with Consumer({"bootstrap.servers": sidecar.address}) as consumer:
        tp = TopicPartition("t1", 0)
        consumer.assign([tp])
        consumer.seek(tp, 5)  # after the fixture's records
        records = consumer.poll(10_000)
    assert [(record.key, record.value) for record in records] == [(b"k1", b"v1")]


def _group_state(sidecar: SidecarProcess, group: str) -> str:
    with Consumer({"bootstrap.servers": sidecar.address}) as admin:
        return ConsumerGroups(admin.cluster).group(group).describe().state


@pytest.mark.parametrize(
    ("stop", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"]
)
def test_a_stopped_group_consumer_leaves_its_group_and_prints_its_total(
    sidecar: SidecarProcess, stop: signal.Signals, status: int
) -> None:
    """As Kafka's console consumer closes in its shutdown hook: the member leaves at
    once (no session timeout to wait out), so the group can be deleted right after."""
    command = ("consume", "--topic", "t1", "--group", "billing", "--from-beginning")
    with _running(sidecar, *command) as consumer:
        assert "" not in _lines(consumer.stdout, 15)  # joined, given every partition
        consumer.send_signal(stop)
        _out, err = consumer.communicate(timeout=WATCHDOG_S)
    assert consumer.returncode == status, err.decode()
    assert err.decode().splitlines()[-1] == "Processed a total of 15 messages"
    assert _group_state(sidecar, "billing") == "Empty"
    deleted, stderr = _typed(sidecar, "consumer-groups", "--delete", "--group", "billing")
    assert deleted == 0, stderr


def test_reset_offsets_of_a_group_with_live_members_is_refused_in_kafkas_words(
    sidecar: SidecarProcess,
) -> None:
    command = ("consume", "--topic", "t1", "--group", "live", "--from-beginning")
    with _running(sidecar, *command) as consumer:
        assert "" not in _lines(consumer.stdout, 15)
        deadline = time.monotonic() + WATCHDOG_S
        while _group_state(sidecar, "live") != "Stable":  # its assignment acknowledged
            assert time.monotonic() < deadline
        for mode in ("--execute", "--dry-run"):
            status, stderr = _typed(
                sidecar,
                "consumer-groups",
                "--reset-offsets",
                "--group",
                "live",
                "--topic",
                "t1",
                "--to-earliest",
                mode,
            )
            assert status == 1
            assert stderr == [
                "Error: Assignments can only be reset if the group 'live' is inactive, "
                "but the current state is Stable."
            ]


def test_a_consumer_whose_broker_went_away_says_so(sidecar: SidecarProcess) -> None:
    command = ("consume", "--topic", "t1", "--partition", "0", "--offset", "0")
    with _running(sidecar, *command) as consumer:
        assert "" not in _lines(consumer.stdout, 5)
        sidecar.kill()
        warning = _until_line_with(consumer.stderr, "does not answer")
    assert f"WARNING broker {sidecar.address} does not answer (NETWORK_EXCEPTION" in warning
