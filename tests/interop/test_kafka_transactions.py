"""Transactions, judged by Kafka 4.1.1: real transactional producers (several, their
transactions interleaved) commit and abort into a real broker; tierlog, appending the
same batches (data as a client, markers as the coordinator), writes the very same
``.txnindex`` bytes, rebuilds them the same after a crash, and Kafka's DumpLogSegments
reads ours as tierlog's dump-log does; the pipeline, and tierlog's read_committed
consumer through a sidecar serving a copy of Kafka's log dir, read what Kafka's
read_committed consumer reads (the pipeline from a tier tierlog filled with its
segments too)."""

from __future__ import annotations

import base64
import json
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.pipeline.read_all import read_table
from tests.pipeline.tiering import tier_closed_segments
from tests.support.sidecars import start_sidecar
from tierlog.client import Consumer
from tierlog.client import TopicPartition as ClientTopicPartition
from tierlog.client.admin import AdminClient
from tierlog.storage.log import AppendOrigin, Log
from tierlog.storage.records import iter_batches
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.topic_partition import TopicPartition
from tierlog.storage.transaction_index import TransactionIndex
from tierlog.tools.dump_log import DumpOptions, DumpReport, dump_files

from .conftest import BrokerFactory
from .datasets import BASE_TIMESTAMP_MS, WRITTEN_TOPIC_CONFIGS
from .kafka import KafkaBroker, dump_log_segments, segment_files
from .test_kafka_reads_tierlog import CONFIG, _as_produced

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "transactions"
PRODUCERS = "abc"


@dataclass(frozen=True)
class Sent:
    producer: str
    offset: int
    value: bytes
    committed: bool


@dataclass(frozen=True)
class KafkaTxnLog:
    """A partition a broker wrote through interleaved transactions, what was sent to it,
    and what Kafka's read_committed consumer read from it."""

    partition_dir: Path
    sent: list[Sent]
    read_committed: list[tuple[int, bytes | None]]  # (offset, value)
    end_offset: int


def transaction_plan(rounds: int = 60, seed: int = 7) -> list[dict[str, Any]]:
    """Steps of three producers whose transactions overlap: each round one producer sends
    1-3 records (one batch each) and sometimes ends its transaction, mostly aborting."""
    rng = random.Random(seed)
    steps: list[dict[str, Any]] = []
    open_txns: set[str] = set()
    for number in range(rounds):
        name = rng.choice(PRODUCERS)
        if name not in open_txns:
            steps.append({"producer": name, "action": "begin"})
            open_txns.add(name)
        for record in range(rng.randint(1, 3)):
            value = f"{name}-{number}-{record}-{'x' * rng.randint(100, 400)}".encode()
            steps.append(
                {
                    "producer": name,
                    "action": "send",
                    "key": base64.b64encode(f"{name}-{number}".encode()).decode(),
                    "value": base64.b64encode(value).decode(),
                    "timestamp": BASE_TIMESTAMP_MS + number * 1000 + record,
                }
            )
        if rng.random() < 0.4:
            steps.append({"producer": name, "action": rng.choice(["commit", "abort", "abort"])})
            open_txns.discard(name)
    steps += [{"producer": name, "action": "abort"} for name in sorted(open_txns)]
    return steps


def _sent(steps: list[dict[str, Any]], acks: list[dict[str, Any]]) -> list[Sent]:
    """Each sent record with its offset and whether its transaction committed."""
    ends: dict[int, bool] = {}
    pending: dict[str, list[int]] = {}
    sends = [step for step in steps if step["action"] == "send"]
    number = 0
    for step in steps:
        if step["action"] == "send":
            pending.setdefault(step["producer"], []).append(number)
            number += 1
        elif step["action"] in ("commit", "abort"):
            for index in pending.pop(step["producer"], []):
                ends[index] = step["action"] == "commit"
    return [
        Sent(ack["producer"], ack["offset"], base64.b64decode(step["value"]), ends[index])
        for index, (step, ack) in enumerate(zip(sends, acks, strict=True))
    ]


def _run_transactions(broker: KafkaBroker, steps: list[dict[str, Any]]) -> list[Sent]:
    with tempfile.NamedTemporaryFile(
        "w", suffix=".jsonl", dir=broker.workdir, delete=False
    ) as plan:
        plan.write("".join(json.dumps(step) + "\n" for step in steps))
    try:
        output = broker.tools.run(
            "ProduceTransactions",
            "--bootstrap-server",
            broker.bootstrap_server,
            "--topic",
            TOPIC,
            "--plan",
            plan.name,
            timeout_s=300,
        )
    finally:
        Path(plan.name).unlink()
    acks = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return _sent(steps, acks)


def _wait_for_markers(broker: KafkaBroker, timeout_s: float = 60) -> int:
    """Markers are written after a transaction ends: wait until the last stable offset
    (the read_committed end offset) reaches the high watermark; returns it."""
    deadline = time.monotonic() + timeout_s
    while True:
        committed = broker.consume(TOPIC, consumer_configs={"isolation.level": "read_committed"})
        end = broker.consume(TOPIC).end_offset
        if committed.end_offset == end or time.monotonic() > deadline:
            return committed.end_offset
        time.sleep(1)


@pytest.fixture(scope="module")
def kafka_txn_log(kafka_broker_factory: BrokerFactory) -> KafkaTxnLog:
    broker = kafka_broker_factory("transactions")
    broker.create_topic(TOPIC, WRITTEN_TOPIC_CONFIGS)
    sent = _run_transactions(broker, transaction_plan())
    end_offset = _wait_for_markers(broker)
    consumed = broker.consume(TOPIC, consumer_configs={"isolation.level": "read_committed"})
    broker.stop()
    return KafkaTxnLog(
        partition_dir=broker.partition_dir(TOPIC),
        sent=sent,
        read_committed=[(record.offset, record.value) for record in consumed.records],
        end_offset=end_offset,
    )


def txn_indexes(partition_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(partition_dir.glob("*.txnindex"))}


def append_as_kafka_did(source_dir: Path, target_dir: Path) -> None:
    """Every batch of ``source_dir``'s segments, appended in order: data batches as the
    producers sent them, control batches as the coordinator's markers."""
    log = Log.open(target_dir, CONFIG)
    try:
        for log_file in (path for path in segment_files(source_dir) if path.suffix == ".log"):
            data = log_file.read_bytes()
            for header in iter_batches(data):
                batch = _as_produced(data[header.position : header.position + header.size])
                origin = AppendOrigin.COORDINATOR if header.is_control else AppendOrigin.CLIENT
                log.append(batch, origin=origin)
    finally:
        log.close()


def test_kafka_read_committed_skips_exactly_the_aborted_records(
    kafka_txn_log: KafkaTxnLog,
) -> None:
    """The data set is what it should be: several aborts, spanning segments."""
    committed = [(sent.offset, sent.value) for sent in kafka_txn_log.sent if sent.committed]
    assert kafka_txn_log.read_committed == committed
    assert sum(not sent.committed for sent in kafka_txn_log.sent) > 10
    assert len(txn_indexes(kafka_txn_log.partition_dir)) >= 2
    assert len(list(kafka_txn_log.partition_dir.glob("*.log"))) >= 3


def test_tierlog_writes_kafkas_txnindex_bytes(kafka_txn_log: KafkaTxnLog, tmp_path: Path) -> None:
    ours_dir = tmp_path / f"{TOPIC}-0"
    append_as_kafka_did(kafka_txn_log.partition_dir, ours_dir)
    assert txn_indexes(ours_dir) == txn_indexes(kafka_txn_log.partition_dir)
    kafka_files = segment_files(kafka_txn_log.partition_dir)
    ours = segment_files(ours_dir)
    assert [path.name for path in ours] == [path.name for path in kafka_files]
    for kafka_file, our_file in zip(kafka_files, ours, strict=True):
        assert our_file.read_bytes() == kafka_file.read_bytes(), our_file.name


def test_recovery_rebuilds_kafkas_txnindex_bytes(
    kafka_txn_log: KafkaTxnLog, tmp_path: Path
) -> None:
    copy = tmp_path / f"{TOPIC}-0"
    shutil.copytree(kafka_txn_log.partition_dir, copy)
    for path in copy.glob("*.txnindex"):
        path.unlink()
    for path in copy.glob("*.snapshot"):
        path.unlink()  # replay from the start of the log
    log = Log.open(copy, CONFIG, recovery_point=0, clean_shutdown=False)
    log.close()
    assert txn_indexes(copy) == txn_indexes(kafka_txn_log.partition_dir)


def test_kafka_dumps_our_txnindex_as_tierlog_does(
    kafka_txn_log: KafkaTxnLog, tmp_path: Path
) -> None:
    ours_dir = tmp_path / f"{TOPIC}-0"
    append_as_kafka_did(kafka_txn_log.partition_dir, ours_dir)
    files = sorted(ours_dir.glob("*.txnindex"))
    kafka_dump = dump_log_segments(files)
    assert kafka_dump.errors == []
    report = DumpReport()
    ours = [
        line for line in dump_files(files, DumpOptions(), report) if not line.startswith("Dumping ")
    ]
    assert report.errors == []
    kafka_lines = [line for dump in kafka_dump.files for line in dump.other_lines]
    assert kafka_lines == ours
    entries = [entry for path in files for entry in TransactionIndex(path, 0).entries()]
    assert len(kafka_lines) == len(entries) > 0
    assert len({entry.producer_id for entry in entries}) >= 2


def test_the_pipeline_reads_what_kafkas_read_committed_consumer_reads(
    kafka_txn_log: KafkaTxnLog, tmp_path: Path
) -> None:
    """Kafka's own log dir, and the same segments tiered by tierlog to a file:// tier."""
    log_dir = kafka_txn_log.partition_dir.parent
    local = read_table({"path": str(log_dir), "subscribe": TOPIC})
    assert _rows(local) == kafka_txn_log.read_committed

    copy = tmp_path / "data" / kafka_txn_log.partition_dir.name
    shutil.copytree(kafka_txn_log.partition_dir, copy)
    log = Log.open(copy, CONFIG, clean_shutdown=True)
    log.roll()
    store = LocalDirectoryStore(tmp_path / "tier")
    tier_closed_segments(store, TopicPartition(TOPIC, 0), log)
    log.close()
    tiered = read_table({"path": store.url, "subscribe": TOPIC})
    assert _rows(tiered) == kafka_txn_log.read_committed


def _rows(table: pa.Table) -> list[tuple[object, object]]:
    return list(
        zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True)
    )


def _consume_all(address: str, isolation_level: str, end_offset: int) -> list[tuple[int, bytes]]:
    """Every record tierlog's consumer returns from offset 0 until its position reaches
    ``end_offset`` (the last stable offset, past the last markers)."""
    tp = ClientTopicPartition(TOPIC, 0)
    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "isolation.level": isolation_level,
            "auto.offset.reset": "earliest",
        }
    )
    records: list[tuple[int, bytes]] = []
    try:
        consumer.assign([tp])
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end_offset and time.monotonic() < deadline:
            records += [(record.offset, record.value or b"") for record in consumer.poll(500)]
    finally:
        consumer.close()
    return records


@pytest.mark.parametrize("tiered", [False, True], ids=["local", "tiered"])
def test_tierlogs_read_committed_consumer_reads_what_kafkas_reads(
    kafka_txn_log: KafkaTxnLog, tmp_path: Path, tiered: bool
) -> None:
    """A sidecar serves a copy of Kafka's log dir (tiered: its closed segments uploaded to
    the sidecar's tier and deleted locally first): read_committed returns Kafka's
    read_committed records exactly, read_uncommitted every record sent."""
    partition_dir = kafka_txn_log.partition_dir
    data_dir = tmp_path / "data"
    shutil.copytree(partition_dir, data_dir / partition_dir.name)
    sidecar = start_sidecar(data_dir, *SERVING)
    try:
        if tiered:
            _tier_locally_closed_segments(sidecar.address, data_dir / partition_dir.name)
        committed = _consume_all(sidecar.address, "read_committed", kafka_txn_log.end_offset)
        everything = _consume_all(sidecar.address, "read_uncommitted", kafka_txn_log.end_offset)
    finally:
        sidecar.kill()
    assert committed == kafka_txn_log.read_committed
    assert everything == sorted((sent.offset, sent.value) for sent in kafka_txn_log.sent)


# The records are years old (BASE_TIMESTAMP_MS): no time retention, tier tasks often.
SERVING = (
    "log.retention.ms=-1",
    "remote.log.manager.task.interval.ms=200",
    "log.retention.check.interval.ms=200",
)


def _tier_locally_closed_segments(address: str, partition_dir: Path) -> None:
    """Turn on the topic's tier with no local retention, and wait until every closed
    segment is uploaded and gone from disk (the active one stays)."""
    closed = len(list(partition_dir.glob("*.log"))) - 1
    assert closed >= 2
    with AdminClient(address) as admin:
        admin.alter_configs(
            TOPIC,
            {
                "remote.storage.enable": "true",
                "local.retention.bytes": "0",
                "file.delete.delay.ms": "0",
            },
        )
    deadline = time.monotonic() + 60
    while len(list(partition_dir.glob("*.log"))) > 1:
        assert time.monotonic() < deadline, "the closed segments were not tiered"
        time.sleep(0.2)
