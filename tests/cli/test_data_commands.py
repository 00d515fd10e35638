"""``tierlog topics``, ``produce``, ``consume`` and ``perf`` as users run them: processes,
stdin and stdout, ``--server`` or ``TIERLOG_SERVER``, against a real sidecar."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.client.sidecars import damage_batch, produce_batches
from tests.support.sidecars import start_sidecar
from tests.support.transaction_logs import transactions_in
from tierlog.cli.perf import Summary, Throttle, percentile
from tierlog.client import Consumer, TopicPartition, partition_for_key
from tierlog.storage.records import V2_HEADER_SIZE
from tierlog.storage.records.batch import LENGTH_OFFSET, MAGIC_OFFSET

from .conftest import console_script


def tierlog(
    server: str, *args: str, stdin: bytes = b"", use_env: bool = False
) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    command = [console_script("tierlog"), *args]
    if use_env:
        env["TIERLOG_SERVER"] = server
    else:
        command += ["--server", server]
    env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT prints every thread's stack
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as process:
        try:
            out, err = process.communicate(stdin, timeout=120)
        except subprocess.TimeoutExpired:
            # A command that hangs says where: its threads' stacks (one consume hung once
            # under a heavily loaded machine and was not seen again).
            process.send_signal(signal.SIGABRT)
            out, err = process.communicate()
            raise AssertionError(f"{command} hung; its threads:\n{err.decode()}") from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def test_topics_create_list_describe_delete(server: str) -> None:
    created = tierlog(
        server, "topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=60000"
    )
    assert "Created topic orders." in ok(created)
    assert ok(tierlog(server, "topics", "list", use_env=True)).split() == ["orders"]
    described = ok(tierlog(server, "topics", "describe", "orders"))
    assert "PartitionCount: 3" in described and "retention.ms=60000" in described
    assert len(re.findall(r"Partition: \d", described)) == 3
    again = tierlog(server, "topics", "create", "orders")
    assert again.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in again.stderr
    assert "Deleted topic orders." in ok(tierlog(server, "topics", "delete", "orders"))
    missing = tierlog(server, "topics", "describe", "orders")
    assert missing.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


def test_topics_describe_prints_leader_replicas_and_isr_as_kafka_topics_does(
    server: str,
) -> None:
    created = tierlog(
        server,
        "topics",
        "create",
        "orders",
        "--partitions",
        "2",
        "--replication-factor",
        "1",
        "--config",
        "min.insync.replicas=1",
        "--config",
        "unclean.leader.election.enable=true",
    )
    assert "Created topic orders." in ok(created)
    header, *partitions = ok(tierlog(server, "topics", "describe", "orders")).splitlines()
    assert header == (
        "Topic: orders\tPartitionCount: 2\tReplicationFactor: 1"
        "\tConfigs: min.insync.replicas=1,unclean.leader.election.enable=true"
    )
    for p, line in enumerate(partitions):
        assert line.startswith(
            f"\tTopic: orders\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0\tLogStartOffset: 0"
        )


def test_topics_create_with_more_replicas_than_the_broker_holds_names_what_is_missing(
    server: str,
) -> None:
    refused = tierlog(server, "topics", "create", "orders", "--replication-factor", "3")
    assert refused.returncode == 1
    stderr = refused.stderr.decode()
    assert "INVALID_REPLICATION_FACTOR" in stderr and "replication factor 3" in stderr
    assert "tierlog.replication.state.dir" in stderr
    assert ok(tierlog(server, "topics", "list")).split() == []


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_produce_stdin_lines_and_consume_them_back(server: str, codec: str) -> None:
    ok(tierlog(server, "topics", "create", "lines", "--partitions", "2"))
    lines = [f"key{i % 5}:value {i}" for i in range(200)]
    produced = tierlog(
        server,
        "produce",
        "lines",
        "--key-separator",
        ":",
        "--compression-type",
        codec,
        stdin="\n".join(lines).encode() + b"\n",
    )
    ok(produced)
    consumed = tierlog(
        server,
        "consume",
        "lines",
        "--from-beginning",
        "--max-messages",
        "200",
        "--timeout-ms",
        "5000",
        "--print-key",
        "--key-separator",
        "=",
    )
    out = ok(consumed).splitlines()
    assert sorted(out) == sorted(line.replace(":", "=", 1) for line in lines)
    assert b"Processed a total of 200 messages" in consumed.stderr
    # Keys went to their murmur2 partitions, in order within each.
    for partition in (0, 1):
        values = ok(
            tierlog(
                server,
                "consume",
                "lines",
                "--partition",
                str(partition),
                "--offset",
                "0",
                "--timeout-ms",
                "1000",
            )
        ).splitlines()
        expected = [
            line.split(":", 1)[1]
            for line in lines
            if partition_for_key(line.split(":", 1)[0].encode(), 2) == partition
        ]
        assert values == expected


def test_consume_from_an_offset_and_by_default_from_the_end(server: str) -> None:
    ok(tierlog(server, "topics", "create", "tail"))
    ok(tierlog(server, "produce", "tail", stdin=b"a\nb\nc\n"))
    from_one = ok(tierlog(server, "consume", "tail", "--offset", "1", "--timeout-ms", "1000"))
    assert from_one.splitlines() == ["b", "c"]
    from_end = tierlog(server, "consume", "tail", "--timeout-ms", "500")
    assert ok(from_end) == "" and b"Processed a total of 0 messages" in from_end.stderr


def assert_stopped_at_damage(consumed: subprocess.CompletedProcess[bytes], offset: int) -> None:
    """``consume`` printed every record before the damaged batch at ``offset`` of
    ``t-0`` (their values are their offsets), then named it and exited 1."""
    assert consumed.returncode == 1, consumed.stderr.decode()
    assert consumed.stdout.decode().splitlines() == [str(i) for i in range(offset)]
    where = rb"tierlog consume: CORRUPT_MESSAGE: t-0: .*offset %d" % offset
    assert re.search(where, consumed.stderr)
    assert b"Processed a total of %d messages" % offset in consumed.stderr


@pytest.mark.parametrize(
    ("damage_at", "restart"),
    [(MAGIC_OFFSET, False), (V2_HEADER_SIZE + 2, True)],
    ids=["header the sidecar cannot parse", "record body whose CRC fails, after a clean stop"],
)
def test_consume_stops_at_a_corrupt_batch_with_its_partition_and_offset(
    tmp_path: Path, damage_at: int, restart: bool
) -> None:
    """Not a silent exit 0 with part of the topic: the records before the damage, then
    the error naming partition and offset on stderr, exit status 1."""
    sidecar = start_sidecar(tmp_path / "data")
    try:
        ok(tierlog(sidecar.address, "topics", "create", "t"))
        produce_batches(sidecar.address, "t", batches=3, per_batch=5)
        if restart:
            assert sidecar.stop() == 0
        damage_batch(sidecar.data_dir / "t-0", 5, damage_at)
        if restart:
            sidecar.start()
        consumed = tierlog(
            sidecar.address,
            "consume",
            "t",
            "--from-beginning",
            "--timeout-ms",
            "5000",
            "--consumer-property",
            "max.partition.fetch.bytes=1",  # a batch a message: those before come first
        )
    finally:
        sidecar.kill()
    assert_stopped_at_damage(consumed, offset=5)


@pytest.mark.parametrize(
    "length_byte", [LENGTH_OFFSET, LENGTH_OFFSET + 1], ids=["below a header", "past the end"]
)
def test_consume_stops_at_a_length_flipped_under_the_running_sidecar(
    tmp_path: Path, length_byte: int
) -> None:
    """The trial: a flipped byte in a batch's length field, in a closed segment of a
    running sidecar, and ``consume`` with its default fetch sizes. It printed the records
    of the other segments and exited 0 (35 of 60), or none at all: now every record
    before the damage, then the partition and offset, exit status 1."""
    sidecar = start_sidecar(tmp_path / "data")
    try:
        ok(tierlog(sidecar.address, "topics", "create", "t", "--config", "segment.bytes=600"))
        produce_batches(sidecar.address, "t", batches=12, per_batch=5)
        partition = sidecar.data_dir / "t-0"
        assert len(list(partition.glob("*.log"))) >= 3
        damage_batch(partition, 30, length_byte)  # the second batch of a closed segment
        consumed = tierlog(
            sidecar.address, "consume", "t", "--from-beginning", "--timeout-ms", "5000"
        )
    finally:
        sidecar.kill()
    assert_stopped_at_damage(consumed, offset=30)


def test_a_line_without_the_separator_is_refused(server: str) -> None:
    ok(tierlog(server, "topics", "create", "strict"))
    result = tierlog(server, "produce", "strict", "--key-separator", ":", stdin=b"k:v\nnokey\n")
    assert result.returncode == 1 and b"no key separator found on line number 2" in result.stderr


def test_producing_to_a_missing_topic_names_the_reason(server: str) -> None:
    result = tierlog(server, "produce", "missing", stdin=b"x\n")
    assert result.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in result.stderr


def test_perf_produce_and_consume_print_their_figures(server: str) -> None:
    ok(tierlog(server, "topics", "create", "perf", "--partitions", "2"))
    produced = ok(
        tierlog(
            server,
            "perf",
            "produce",
            "perf",
            "--num-records",
            "2000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
        )
    )
    figures = re.search(
        r"2000 records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), [\d.]+ ms avg latency, "
        r"[\d.]+ ms max latency, ([\d.]+) ms 50th, [\d.]+ ms 95th, ([\d.]+) ms 99th, "
        r"([\d.]+) ms 99.9th\.",
        produced,
    )
    assert figures is not None, produced
    assert float(figures.group(1)) > 0 and float(figures.group(2)) > 0
    assert float(figures.group(3)) <= float(figures.group(4)) <= float(figures.group(5))
    consumed = ok(tierlog(server, "perf", "consume", "perf", "--num-records", "2000"))
    assert consumed.splitlines()[1].split(", ")[4] == "2000"  # Kafka's CSV: nMsg


def test_perf_throttled_produce_keeps_to_its_rate(server: str) -> None:
    ok(tierlog(server, "topics", "create", "slow"))
    produced = ok(
        tierlog(
            server,
            "perf",
            "produce",
            "slow",
            "--num-records",
            "100",
            "--record-size",
            "10",
            "--throughput",
            "200",
        )
    )
    rate = float(re.search(r"([\d.]+) records/sec", produced).group(1))  # type: ignore[union-attr]
    assert 100 < rate < 260


def test_the_arithmetic_of_perf_and_produce() -> None:
    values = tuple(float(v) for v in range(1, 1001))
    assert (percentile(values, 0.5), percentile(values, 0.99), percentile(values, 0.999)) == (
        500.0,
        990.0,
        999.0,
    )
    assert percentile((), 0.5) == 0.0
    summary = Summary(1000, 1024 * 1024, 2.0, values)
    assert (summary.records_per_s, summary.mb_per_s) == (500.0, 0.5)
    throttle = Throttle(100, start_s=0.0)
    assert throttle.delay_s(50, now_s=0.2) == pytest.approx(0.3)
    assert Throttle(-1, 0.0).delay_s(10**6, 0.0) == 0.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--partitions", "0"], "argument --partitions: a topic has at least 1 partition, not 0"),
        (
            ["--config", "segment.bytes=1_000_000"],
            "argument --config: INVALID_CONFIG: invalid value '1_000_000' for segment.bytes",
        ),
        (
            ["--config", "retention.ms=\u0661\u0662\u0663"],
            "INVALID_CONFIG: invalid value '\u0661\u0662\u0663' for retention.ms",
        ),
        (
            ["--config", "min.cleanable.dirty.ratio=nan"],
            "INVALID_CONFIG: invalid value 'nan' for min.cleanable.dirty.ratio",
        ),
        (
            ["--replication-factor", "0"],
            "argument --replication-factor: INVALID_REPLICATION_FACTOR: a partition has at "
            "least 1 replica, not 0",
        ),
        (
            ["--config", "min.insync.replicas=0"],
            "INVALID_CONFIG: min.insync.replicas=0 is below its minimum 1",
        ),
    ],
)
def test_topics_create_refuses_what_kafka_would_not_take(
    server: str, args: list[str], message: str
) -> None:
    result = tierlog(server, "topics", "create", "odd", *args)
    assert result.returncode == 2, result.stderr.decode()
    assert message in result.stderr.decode()
    assert ok(tierlog(server, "topics", "list")).split() == []


def test_consume_refuses_a_negative_offset(server: str) -> None:
    ok(tierlog(server, "topics", "create", "tail"))
    result = tierlog(server, "consume", "tail", "--offset", "-5", "--timeout-ms", "500")
    assert result.returncode == 2
    assert "argument --offset: an offset is 0 or more, not -5" in result.stderr.decode()
    assert "a negative offset is refused" in ok(tierlog(server, "consume", "--help"))


def test_kafkas_flags_properties_files_and_line_format(server: str, tmp_path: Path) -> None:
    admin_config = tmp_path / "admin.properties"
    admin_config.write_text(f"# Kafka's --command-config\nbootstrap.servers={server}\n")
    producer_config = tmp_path / "producer.properties"
    producer_config.write_text("acks=all\nlinger.ms: 0\n")
    env = {**os.environ, "TIERLOG_SERVER": "127.0.0.1:1"}  # the file's servers win over it
    created = subprocess.run(
        [
            console_script("tierlog"),
            "topics",
            "create",
            "kafka-flags",
            "--command-config",
            str(admin_config),
        ],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert "Created topic kafka-flags." in ok(created)
    produced = subprocess.run(
        [
            *(console_script("tierlog"), "produce", "--bootstrap-server", server),
            *("--topic", "kafka-flags", "--producer.config", str(producer_config)),
            *("--property", "parse.key=true", "--property", "parse.headers=true"),
            *("--property", "null.marker=NULL"),
        ],
        input=b"source:cli,trace:NULL\tk1\tfirst\nempty:\tNULL\tsecond\n",
        capture_output=True,
        timeout=120,
    )
    ok(produced)
    consumer = Consumer({"bootstrap.servers": server, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("kafka-flags", 0)])
        records = consumer.poll(5000)
    finally:
        consumer.close()
    assert [(r.headers, r.key, r.value) for r in records] == [
        ((("source", b"cli"), ("trace", None)), b"k1", b"first"),
        ((("empty", b""),), None, b"second"),
    ]
    twice = tierlog(server, "produce", "one", "--topic", "two", stdin=b"x\n")
    assert twice.returncode == 1 and b"two different topics given" in twice.stderr
    unknown = tierlog(server, "produce", "kafka-flags", "--property", "parse.keys=true")
    assert unknown.returncode == 2 and b"unknown property 'parse.keys'" in unknown.stderr


def test_kafka_topics_form_alter_and_the_if_flags(server: str) -> None:
    kafka_create = ("topics", "--create", "--topic", "events", "--partitions", "2")
    assert "Created topic events." in ok(tierlog(server, *kafka_create))
    again = tierlog(server, *kafka_create)
    assert again.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in again.stderr
    assert ok(tierlog(server, *kafka_create, "--if-not-exists")) == ""
    altered = ok(tierlog(server, "topics", "--alter", "--topic", "events", "--partitions", "5"))
    assert altered == "Topic events now has 5 partitions.\n"
    described = ok(tierlog(server, "topics", "--describe", "--topic", "events"))
    assert "PartitionCount: 5" in described
    lower = tierlog(server, "topics", "alter", "events", "--partitions", "3")
    assert lower.returncode == 1 and b"INVALID_PARTITIONS" in lower.stderr
    assert ok(tierlog(server, "topics", "--list")).split() == ["events"]
    assert "Deleted topic events." in ok(tierlog(server, "topics", "--delete", "--topic", "events"))
    missing = tierlog(server, "topics", "--delete", "--topic", "events")
    assert missing.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    assert ok(tierlog(server, "topics", "--delete", "--topic", "events", "--if-exists")) == ""
    assert (
        ok(tierlog(server, "topics", "alter", "events", "--partitions", "9", "--if-exists")) == ""
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topics", "--list", "--create"], "not allowed with argument"),
        (["topics", "list", "--create"], "two actions given"),
        (["topics"], "give one action: create, delete, describe, list, alter"),
        (["topics", "create", "a", "--topic", "b"], "two different topics given"),
        (["topics", "--alter", "--topic", "a"], "alter: --partitions is needed"),
        (["topics", "--delete"], "delete: a topic NAME (or --topic) is needed"),
    ],
)
def test_kafka_topics_form_refuses_what_is_ambiguous(
    server: str, args: list[str], message: str
) -> None:
    refused = tierlog(server, *args)
    assert refused.returncode != 0 and message in refused.stderr.decode()


def test_a_wrong_flag_prints_its_subcommands_usage_and_version_prints_the_version() -> None:
    wrong = subprocess.run(
        [console_script("tierlog"), "topics", "list", "--bogus"], capture_output=True, timeout=60
    )
    assert wrong.returncode == 2
    assert wrong.stderr.decode().startswith("usage: tierlog topics")
    assert "tierlog topics: error: unrecognized arguments: --bogus" in wrong.stderr.decode()
    version = subprocess.run(
        [console_script("tierlog"), "--version"], capture_output=True, timeout=60
    )
    assert re.fullmatch(r"tierlog \d+\.\d+\.\d+\n", version.stdout.decode())


def test_consume_prints_what_kafkas_properties_ask_for_or_json(server: str) -> None:
    ok(tierlog(server, "topics", "create", "printed"))
    ok(
        tierlog(
            server,
            *("produce", "--topic", "printed", "--property", "parse.headers=true"),
            *("--property", "parse.key=true"),
            stdin=b"trace:1\tk1\tfirst\n",
        )
    )
    common = ("consume", "--topic", "printed", "--from-beginning", "--max-messages", "1")
    props = [("--property", f"print.{field}=true") for field in ("offset", "headers", "key")]
    printed = ok(tierlog(server, *common, *(part for pair in props for part in pair)))
    assert printed == "Offset:0\ttrace:1\tk1\tfirst\n"
    as_json = json.loads(ok(tierlog(server, *common, "--formatter", "json")))
    assert (as_json["offset"], as_json["headers"], as_json["key"], as_json["value"]) == (
        0,
        [["trace", "1"]],
        "k1",
        "first",
    )


@pytest.mark.parametrize(
    "flag",
    [
        ("--isolation-level", "read_committed"),
        ("--consumer-property", "isolation.level=read_committed"),
    ],
    ids=["kafka-flag", "consumer-property"],
)
def test_consume_read_committed_prints_only_committed_transactions(
    tmp_path: Path, flag: tuple[str, str]
) -> None:
    sidecar = start_sidecar(tmp_path / "data")
    try:
        ok(tierlog(sidecar.address, "topics", "create", "t"))
        sidecar.stop()
        with transactions_in(sidecar.data_dir, "t") as writer:
            writer.send(1)
            writer.send_plain()
            writer.send(2)
            writer.end(1, commit=False)
            writer.end(2, commit=True)
            writer.send(3)  # open: the read_committed end
        sidecar.start()
        printed = ok(
            tierlog(
                sidecar.address,
                "consume",
                "t",
                "--from-beginning",
                "--timeout-ms",
                "2000",
                "--property",
                "print.offset=true",
                *flag,
            )
        )
        everything = ok(
            tierlog(sidecar.address, "consume", "t", "--from-beginning", "--timeout-ms", "2000")
        )
    finally:
        sidecar.kill()
    offsets = [int(line.split()[0].removeprefix("Offset:")) for line in printed.splitlines()]
    assert offsets == sorted(writer.committed)
    assert len(everything.splitlines()) == 7  # every data record, markers left out
