"""``tierlog consume --group`` and ``tierlog consumer-groups`` as users run them, against a
real sidecar: a group resumes where it left off, and the tool prints Kafka's tables."""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.sidecars import start_sidecar
from tierlog.cli.consumer_groups import duration_ms
from tierlog.client import Consumer, Producer

from .test_data_commands import ok, tierlog

TIMESTAMP_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A sidecar with a small ``__consumer_offsets`` and a topic of two partitions holding
    five records each, one second apart from ``TIMESTAMP_MS``."""
    sidecar = start_sidecar(tmp_path / "data", "offsets.topic.num.partitions=3")
    try:
        ok(tierlog(sidecar.address, "topics", "create", "events", "--partitions", "2"))
        with Producer({"bootstrap.servers": sidecar.address}) as producer:
            for i in range(10):
                producer.send(
                    "events", b"v%d" % i, partition=i % 2, timestamp=TIMESTAMP_MS + 1000 * (i // 2)
                )
            producer.flush()
        yield sidecar.address
    finally:
        sidecar.kill()


def _consume(server: str, *args: str) -> list[str]:
    return ok(
        tierlog(server, "consume", "events", "--timeout-ms", "1500", "--group", "g", *args)
    ).split()


def _rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines()]


def test_consume_with_a_group_resumes_where_it_left_off(server: str) -> None:
    first = _consume(server, "--from-beginning", "--partition", "0", "--max-messages", "3")
    assert first == ["v0", "v2", "v4"]
    rest = _consume(server, "--from-beginning", "--partition", "0")
    assert rest == ["v6", "v8"]
    assert _consume(server, "--partition", "0") == []
    assert sorted(_consume(server)) == []  # partition 1: no commit, from the end
    refused = tierlog(server, "consume", "events", "--group", "g", "--offset", "1")
    assert refused.returncode != 0 and b"--offset cannot be used with --group" in refused.stderr


def test_consume_with_a_group_commits_every_assigned_partition_as_kafka_does(
    server: str,
) -> None:
    """A partition the group was given but found nothing in is committed at its position,
    as Kafka's consumer commits every assigned partition: ``--describe`` lists it with
    LAG 0. A poll cut short by ``--max-messages`` commits only what was printed."""
    ok(tierlog(server, "topics", "create", "billing", "--partitions", "3"))
    with Producer({"bootstrap.servers": server}) as producer:
        for i in range(4):
            producer.send("billing", b"b%d" % i, partition=1)
        producer.flush()

    def consume(*args: str) -> list[str]:
        command = ("consume", "billing", "--timeout-ms", "1500", "--group", "billing")
        return ok(tierlog(server, *command, "--from-beginning", *args)).split()

    def described() -> list[list[str]]:
        rows = _rows(ok(tierlog(server, "consumer-groups", "--describe", "--group", "billing")))
        header = next(i for i, row in enumerate(rows) if row[:1] == ["GROUP"])
        return [row[2:6] for row in rows[header + 1 :]]

    assert consume("--max-messages", "3") == ["b0", "b1", "b2"]
    assert described() == [["0", "0", "0", "0"], ["1", "3", "4", "1"], ["2", "0", "0", "0"]]
    assert consume() == ["b3"]
    assert described() == [["0", "0", "0", "0"], ["1", "4", "4", "0"], ["2", "0", "0", "0"]]


def test_list_describe_and_delete(server: str) -> None:
    _consume(server, "--from-beginning", "--partition", "0", "--max-messages", "3")
    assert ok(tierlog(server, "consumer-groups", "--list")).split() == ["g"]
    described = ok(tierlog(server, "consumer-groups", "--describe", "--group", "g"))
    assert "Consumer group 'g' has no active members." in described
    table = described.strip().splitlines()[-2:]
    assert table[0].split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    assert table[1].split() == ["g", "events", "0", "3", "5", "2", "-", "-", "-"]
    # Kafka's layout: PARTITION starts where its header does, columns 10/15 wide.
    assert table[1].index(" 0 ") + 1 == table[0].index("PARTITION")
    assert table[0].index("LOG-END-OFFSET") - table[0].index("CURRENT-OFFSET") == 16
    deleted = ok(tierlog(server, "consumer-groups", "--delete", "--group", "g"))
    assert deleted.strip() == "Deletion of requested consumer groups ('g') was successful."
    assert ok(tierlog(server, "consumer-groups", "--list")).split() == []
    missing = tierlog(server, "consumer-groups", "--describe", "--group", "g")
    assert missing.returncode == 1 and b"GROUP_ID_NOT_FOUND" in missing.stderr


def test_consume_with_a_group_joins_it_and_describe_shows_the_members(server: str) -> None:
    """Without --partition, ``consume --group`` is a member: it gets both partitions and
    prints everything; a live member shows in --describe with Kafka's columns."""
    assert sorted(_consume(server, "--from-beginning")) == sorted(f"v{i}" for i in range(10))
    with Consumer(
        {"bootstrap.servers": server, "group.id": "g", "client.id": "reader-1"}
    ) as member:
        member.subscribe(["events"])
        for _ in range(100):
            member.poll(100)
            if len(member.assignment()) == 2:
                break
        assert len(member.assignment()) == 2
        described = ok(tierlog(server, "consumer-groups", "--describe", "--group", "g"))
        assert "has no active members" not in described
        rows = _rows(described)
        assert rows[0][6:] == ["CONSUMER-ID", "HOST", "CLIENT-ID"]
        member_id = rows[1][6]
        assert [row[2:] for row in rows[1:]] == [
            ["0", "5", "5", "0", member_id, "/127.0.0.1", "reader-1"],
            ["1", "5", "5", "0", member_id, "/127.0.0.1", "reader-1"],
        ]
    described = ok(tierlog(server, "consumer-groups", "--describe", "--group", "g"))
    assert "Consumer group 'g' has no active members." in described


def _reset(server: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return tierlog(
        server, "consumer-groups", "--reset-offsets", "--group", "g", "--topic", "events", *args
    )


def _new_offsets(output: str) -> list[int]:
    rows = _rows(output)
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    return [int(row[3]) for row in rows[1:]]


def test_reset_offsets(server: str) -> None:
    dry = _reset(server, "--to-offset", "4")
    assert _new_offsets(ok(dry)) == [4, 4]
    assert b"WARN: No action will be performed" in dry.stderr
    assert ok(tierlog(server, "consumer-groups", "--list")).split() == []  # nothing stored
    assert _new_offsets(ok(_reset(server, "--to-offset", "3", "--execute"))) == [3, 3]
    assert _new_offsets(ok(_reset(server, "--shift-by", "-2", "--dry-run"))) == [1, 1]
    assert _new_offsets(ok(_reset(server, "--shift-by", "9", "--dry-run"))) == [5, 5]  # clamped
    assert _new_offsets(ok(_reset(server, "--to-earliest", "--dry-run"))) == [0, 0]
    assert _new_offsets(ok(_reset(server, "--to-latest", "--dry-run"))) == [5, 5]
    moment = datetime.fromtimestamp((TIMESTAMP_MS + 2500) / 1000, UTC).isoformat()
    assert _new_offsets(ok(_reset(server, "--to-datetime", moment, "--dry-run"))) == [3, 3]
    one = tierlog(
        server,
        "consumer-groups",
        "--reset-offsets",
        "--group",
        "g",
        "--topic",
        "events:1",
        "--to-earliest",
        "--execute",
    )
    assert _new_offsets(ok(one)) == [0]
    described = ok(tierlog(server, "consumer-groups", "--describe", "--group", "g"))
    rows = [row for row in _rows(described) if row and row[0] == "g"]
    assert [(row[2], row[3], row[5]) for row in rows] == [("0", "3", "2"), ("1", "0", "5")]
    assert re.search(r"^GROUP +TOPIC +PARTITION +NEW-OFFSET$", ok(one), re.MULTILINE)
    assert _consume(server, "--partition", "1") == ["v1", "v3", "v5", "v7", "v9"]


# -- Kafka's other flags (issue 34, item 3) ------------------------------------------


def _member_of(server: str, group: str, client_id: str) -> Consumer:
    """A consumer of ``events`` in ``group`` once it holds both partitions."""
    member = Consumer({"bootstrap.servers": server, "group.id": group, "client.id": client_id})
    member.subscribe(["events"])
    for _ in range(100):
        member.poll(100)
        if len(member.assignment()) == 2:
            return member
    member.close()
    raise AssertionError(f"{client_id} was not given both partitions")


def test_describe_all_groups_members_state_and_offsets_as_kafka_does(server: str) -> None:
    _consume(server, "--from-beginning", "--partition", "0", "--max-messages", "3")
    every = ok(tierlog(server, "consumer-groups", "--describe", "--all-groups"))
    assert [row[:4] for row in _rows(every) if row and row[0] == "g"] == [["g", "events", "0", "3"]]
    with _member_of(server, "g", "reader-1") as member:
        member_id = member.group_metadata().member_id
        members = _rows(ok(tierlog(server, "consumer-groups", "--describe", "--group", "g",
                                   "--members")))  # fmt: skip
        assert members == [
            ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
            ["g", member_id, "/127.0.0.1", "reader-1", "2"],
        ]
        verbose = ok(tierlog(server, "consumer-groups", "--describe", "--group", "g",
                             "--members", "--verbose"))  # fmt: skip
        assert verbose.rstrip().endswith(" 2               events(0,1)")
        assert _rows(verbose)[0][-1] == "ASSIGNMENT"
        state = ok(tierlog(server, "consumer-groups", "--describe", "--group", "g", "--state"))
        header, row = state.strip().splitlines()
        assert header.split("  ")[0] == "GROUP" and "COORDINATOR (ID)" in header
        assert row.split() == ["g", server, "(0)", "uniform", "Stable", "1"]
        assert header.index("STATE") == row.index("Stable")
        offsets = ok(tierlog(server, "consumer-groups", "--describe", "--group", "g", "--offsets"))
        assert [row[2:7] for row in _rows(offsets)[1:]] == [
            ["0", "3", "5", "2", member_id],
            ["1", "-", "5", "-", member_id],
        ]


def test_reset_offsets_all_topics_to_current_and_by_duration(server: str) -> None:
    _consume(server, "--from-beginning", "--partition", "0", "--max-messages", "3")
    reset = ("consumer-groups", "--reset-offsets", "--group", "g")
    current = ok(tierlog(server, *reset, "--all-topics", "--to-current", "--dry-run"))
    assert _new_offsets(current) == [3]  # only what the group committed
    assert _new_offsets(ok(tierlog(server, *reset, "--topic", "events", "--to-current"))) == [
        3,
        5,  # never committed: from the log end, as Kafka's --to-current
    ]
    now_ms = int(time.time() * 1000)
    ok(tierlog(server, "topics", "create", "recent"))
    with Producer({"bootstrap.servers": server}) as producer:
        for minutes_ago in (180, 120, 30, 10):
            producer.send("recent", b"v", timestamp=now_ms - minutes_ago * 60_000)
        producer.flush()
    hour = ok(tierlog(server, *reset, "--topic", "recent", "--by-duration", "PT1H", "--execute"))
    assert _new_offsets(hour) == [2]  # the first record at most an hour old
    assert _new_offsets(ok(tierlog(server, *reset, "--all-topics", "--to-earliest"))) == [0, 0]


def test_by_duration_reads_iso_8601_as_java_does() -> None:
    assert duration_ms("PT1H") == 3_600_000
    assert duration_ms("P1DT30M") == 86_400_000 + 1_800_000
    assert duration_ms("pt0.5s") == 500
    for bad in ("1H", "P", "PT", "P1DT", "PT1X"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration_ms(bad)
