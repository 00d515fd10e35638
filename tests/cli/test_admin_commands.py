"""``tierlog configs``, ``get-offsets`` and ``delete-records`` as Kafka's kafka-configs,
kafka-get-offsets and kafka-delete-records users run them, against a real sidecar."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest

from tests.client.sidecars import produce_batches
from tierlog.cli.configs import parse_config_list
from tierlog.cli.delete_records import OffsetFileError, read_offset_file
from tierlog.cli.get_offsets import offset_time

from .test_data_commands import ok, tierlog


def test_configs_describe_and_alter_a_topic_as_kafka_configs_does(server: str) -> None:
    ok(tierlog(server, "topics", "create", "orders", "--config", "retention.ms=60000"))
    topic = ("--entity-type", "topics", "--entity-name", "orders")
    assert ok(tierlog(server, "configs", "--describe", *topic)).splitlines() == [
        "Dynamic configs for topic orders are:",
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}",
    ]
    altered = tierlog(
        server,
        "configs",
        "--alter",
        *topic,
        "--add-config",
        "cleanup.policy=[compact,delete],segment.ms=3600000",
    )
    assert ok(altered) == "Completed updating config for topic orders.\n"
    ok(tierlog(server, "configs", "--alter", *topic, "--delete-config", "retention.ms"))
    described = ok(tierlog(server, "configs", "--describe", *topic)).splitlines()
    assert [line.split()[0] for line in described[1:]] == [
        "cleanup.policy=compact,delete",
        "segment.ms=3600000",
    ]
    everything = ok(tierlog(server, "configs", "--describe", "--all", *topic))
    assert everything.startswith("All configs for topic orders are:\n")
    assert "  retention.ms=604800000 sensitive=false synonyms={DEFAULT_CONFIG:" in everything
    bad = tierlog(server, "configs", "--alter", *topic, "--add-config", "retention.ms=soon")
    assert bad.returncode == 1 and b"INVALID_CONFIG" in bad.stderr
    brokers = tierlog(server, "configs", "--describe", "--entity-type", "brokers")
    assert brokers.returncode == 1 and b"no dynamic broker configs" in brokers.stderr


def test_get_offsets_prints_each_partition_at_the_time_asked(server: str) -> None:
    ok(tierlog(server, "topics", "create", "clicks", "--partitions", "2"))
    before = int(time.time() * 1000) - 1
    lines = b"".join(b"click %d\n" % i for i in range(12))
    ok(tierlog(server, "produce", "clicks", "--partition", "0", stdin=lines))
    assert ok(tierlog(server, "get-offsets", "--topic", "clicks")).splitlines() == [
        "clicks:0:12",
        "clicks:1:0",
    ]
    earliest = ("get-offsets", "--topic", "clicks", "--partitions", "0", "--time", "earliest")
    assert ok(tierlog(server, *earliest)) == "clicks:0:0\n"
    assert ok(tierlog(server, "get-offsets", "--topic", "clicks", "--time", str(before))) == (
        "clicks:0:0\nclicks:1:\n"
    )
    missing = tierlog(server, "get-offsets", "--topic", "nope")
    assert missing.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    past = tierlog(server, "get-offsets", "--topic", "clicks", "--partitions", "7")
    assert past.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in past.stderr


def test_delete_records_moves_the_log_start_and_fails_loudly(server: str, tmp_path: Path) -> None:
    ok(tierlog(server, "topics", "create", "logs"))
    produce_batches(server, "logs", batches=2, per_batch=5)
    plan = tmp_path / "offsets.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": "logs", "partition": 0, "offset": 4},
                    {"topic": "logs", "partition": 3, "offset": 1},
                ],
            }
        )
    )
    result = tierlog(server, "delete-records", "--offset-json-file", str(plan))
    assert result.returncode == 1
    lines = result.stdout.decode().splitlines()
    assert lines[:3] == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: logs-0\tlow_watermark: 4",
    ]
    assert lines[3].startswith("partition: logs-3\terror: UNKNOWN_TOPIC_OR_PARTITION: ")
    assert len(lines) == 4
    earliest = ("get-offsets", "--topic", "logs", "--time", "-2")
    assert ok(tierlog(server, *earliest)) == "logs:0:4\n"


def test_the_argument_formats_are_kafkas() -> None:
    assert parse_config_list("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    for bad in ("a", "=1", "a=[1,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_config_list(bad)
    assert [offset_time(t) for t in ("latest", "earliest", "-3", "latest-tiered", "17")] == [
        -1,
        -2,
        -3,
        -5,
        17,
    ]
    for bad in ("-6", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            offset_time(bad)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('{"partitions": 3}', "expected"),
        ('{"version": 2, "partitions": []}', "version 2 is not 1"),
        ('{"partitions": [{"topic": "t", "partition": 0}]}', "needs a topic, a partition"),
        ('{"partitions": [{"topic": "t", "partition": -1, "offset": 0}]}', "out of range"),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
            ' {"topic": "t", "partition": 0, "offset": 2}]}',
            "t-0 is listed twice",
        ),
    ],
)
def test_an_offset_file_not_in_kafkas_format_is_refused(text: str, message: str) -> None:
    with pytest.raises(OffsetFileError, match=message):
        read_offset_file(text)
