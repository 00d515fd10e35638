"""A real Kafka 4.1.1 broker, started on a log dir whose segments tierlog wrote, serves
every record to Kafka's own Java consumer: same offsets, timestamps, keys, values,
headers and leader epoch, in every codec, across several segments; its ListOffsets
answers (beginning, end, offsetsForTimes) agree with the data.

One broker run creates two topics (so the controller knows them and their topic ids)
and is shut down cleanly; tierlog then rewrites both partitions (keeping Kafka's
``partition.metadata``; writing the leader epoch checkpoint, and the log dir's
recovery point, high watermark and log start checkpoints) and the broker is restarted
on the same dirs without the clean-shutdown marker:

- ``tierlog-trusted`` has its recovery point at the log end, so Kafka recovers only the
  active segment and serves the closed ones through tierlog's own .index/.timeindex;
- ``tierlog-recovered`` has its recovery point at 0, so Kafka re-validates every batch
  and rebuilds every index from the .log.

Neither is truncated, and after the broker's clean shutdown every segment file of both
is still byte for byte what tierlog wrote.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tierlog.storage.checkpoints import (
    read_epoch_checkpoint,
    write_epoch_checkpoint,
    write_offset_checkpoint,
)
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.topic_partition import TopicPartition

from .conftest import BrokerFactory
from .datasets import (
    CODECS,
    INDEX_INTERVAL_BYTES,
    RECORDS_PER_BATCH,
    SEGMENT_BYTES,
    WRITTEN_TOPIC_CONFIGS,
    interop_records,
    tierlog_batches,
)
from .kafka import ConsumedPartition, ConsumedRecord, KafkaBroker, segment_files

pytestmark = pytest.mark.interop

TRUSTED = "tierlog-trusted"
RECOVERED = "tierlog-recovered"
CONFIG = LogConfig.from_properties(
    {"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": INDEX_INTERVAL_BYTES}
)
RECORDS = interop_records()
TIMESTAMPS = [record.timestamp_ms or 0 for record in RECORDS]
# Timestamps to look up: before everything, exact and in-between record timestamps
# (7 is stepped back onto 2's timestamp), codec and segment boundaries, the largest,
# and past the largest (no answer).
LOOKUP_TIMESTAMPS = sorted(
    {TIMESTAMPS[0] - 10**6, max(TIMESTAMPS), max(TIMESTAMPS) + 1}
    | {TIMESTAMPS[i] for i in (0, 2, 7, 99, 100, 101, 375, 777, 1400, 1999)}
    | {TIMESTAMPS[i] + 1 for i in (13, 500, 1234)}
)
# Lines that would mean the broker did not take tierlog's log as it was: truncation,
# invalid batches, corrupt or rebuilt indexes, deleted segments, stray logs, warnings.
SUSPICIOUS = re.compile(
    r"truncat|corrupt|invalid|rebuilding index|delet|stray|out of range|\b(WARN|ERROR)\b",
    re.IGNORECASE,
)
RECOVERING = re.compile(r"partition=(\S+)-0, .*\] Recovering unflushed segment (\d+)\.")


def _write_tierlog(partition_dir: Path, leader_epoch: int) -> int:
    """Replace a broker-made partition's log with tierlog's, keeping its partition.metadata
    (the topic id the controller knows; without it the broker would take the log for a
    stray and delete it).

    25-record batches, one append each except every fifth, which carries three; every
    batch stamped with ``leader_epoch``. Returns the log end offset."""
    for path in partition_dir.iterdir():
        if path.name != "partition.metadata":
            path.unlink()
    batches = iter(tierlog_batches(RECORDS, RECORDS_PER_BATCH))
    log = Log.open(partition_dir, CONFIG)
    log.leader_epoch = leader_epoch
    try:
        for i, batch in enumerate(batches):
            log.append(batch + b"".join(itertools.islice(batches, 2)) if i % 5 == 4 else batch)
        log_end = log.log_end_offset
    finally:
        log.close()
    write_epoch_checkpoint(partition_dir / "leader-epoch-checkpoint", [(leader_epoch, 0)])
    return log_end


@dataclass(frozen=True)
class Served:
    """What the restarted broker made of tierlog's partitions."""

    broker: KafkaBroker
    leader_epoch: int
    log_end: int
    consumed: dict[str, ConsumedPartition]
    tierlog_files: dict[str, dict[str, bytes]]  # topic -> file name -> bytes tierlog wrote
    kafka_files: dict[str, dict[str, bytes]]  # the same after the broker's clean shutdown
    broker_log: str  # what the broker logged while it served tierlog's log


@pytest.fixture(scope="module")
def served(kafka_broker_factory: BrokerFactory) -> Served:
    broker = kafka_broker_factory(
        "serves-tierlog",
        # Log loading and recovery at info: the test reads what the broker did.
        log_levels={"org.apache.kafka.storage.internals.log": "info", "kafka.log": "info"},
    )
    for topic in (TRUSTED, RECOVERED):
        broker.create_topic(topic, WRITTEN_TOPIC_CONFIGS)
    broker.stop()

    # The controller made this broker each partition's leader at epoch 0, from offset 0:
    # tierlog's batches carry that epoch, as a leader's appends would.
    checkpoints = [
        read_epoch_checkpoint(broker.partition_dir(topic) / "leader-epoch-checkpoint")
        for topic in (TRUSTED, RECOVERED)
    ]
    assert checkpoints == [[(0, 0)], [(0, 0)]]
    leader_epoch = 0
    for topic in (TRUSTED, RECOVERED):
        assert _write_tierlog(broker.partition_dir(topic), leader_epoch) == len(RECORDS)
    tierlog_files = {
        topic: {path.name: path.read_bytes() for path in segment_files(broker.partition_dir(topic))}
        for topic in (TRUSTED, RECOVERED)
    }
    trusted, recovered = TopicPartition(TRUSTED, 0), TopicPartition(RECOVERED, 0)
    log_dir = broker.log_dir
    write_offset_checkpoint(
        log_dir / "recovery-point-offset-checkpoint", {trusted: len(RECORDS), recovered: 0}
    )
    # The high watermark: everything tierlog holds is committed.
    write_offset_checkpoint(
        log_dir / "replication-offset-checkpoint", {trusted: len(RECORDS), recovered: len(RECORDS)}
    )
    write_offset_checkpoint(log_dir / "log-start-offset-checkpoint", {trusted: 0, recovered: 0})
    # No clean-shutdown marker: Kafka recovers each log from its recovery point.
    (log_dir / ".kafka_cleanshutdown").unlink()

    broker.start()
    consumed = {
        topic: broker.consume(topic, offsets_for_times=LOOKUP_TIMESTAMPS, timeout_s=60)
        for topic in (TRUSTED, RECOVERED)
    }
    broker.stop()
    kafka_files = {
        topic: {path.name: path.read_bytes() for path in segment_files(broker.partition_dir(topic))}
        for topic in (TRUSTED, RECOVERED)
    }
    return Served(
        broker=broker,
        leader_epoch=leader_epoch,
        log_end=len(RECORDS),
        consumed=consumed,
        tierlog_files=tierlog_files,
        kafka_files=kafka_files,
        broker_log=broker.run_log(),
    )


def _expected(leader_epoch: int) -> list[ConsumedRecord]:
    return [
        ConsumedRecord(
            offset=offset,
            timestamp_ms=TIMESTAMPS[offset],
            timestamp_type="CreateTime",
            leader_epoch=leader_epoch,
            key=record.key,
            value=record.value,
            headers=record.headers,
        )
        for offset, record in enumerate(RECORDS)
    ]


@pytest.mark.parametrize("topic", [TRUSTED, RECOVERED])
def test_kafkas_consumer_reads_every_record_tierlog_wrote(served: Served, topic: str) -> None:
    records = served.consumed[topic].records
    assert len(records) == len(RECORDS)
    assert records == _expected(served.leader_epoch)


@pytest.mark.parametrize("topic", [TRUSTED, RECOVERED])
def test_kafkas_list_offsets_agree_with_the_data(served: Served, topic: str) -> None:
    consumed = served.consumed[topic]
    assert (consumed.beginning_offset, consumed.end_offset) == (0, served.log_end)
    # ListOffsets by timestamp: the first record (in offset order) at or after it.
    expected = {
        target: next(((o, ts) for o, ts in enumerate(TIMESTAMPS) if ts >= target), None)
        for target in LOOKUP_TIMESTAMPS
    }
    assert expected[TIMESTAMPS[7]] == (2, TIMESTAMPS[2])  # out-of-order data is covered
    assert consumed.offsets_for_times == expected


def test_the_data_spans_segments_and_codecs(served: Served) -> None:
    logs = [name for name in served.tierlog_files[TRUSTED] if name.endswith(".log")]
    assert len(logs) >= 5
    assert {r.compression for r in RECORDS} == set(CODECS)


def test_the_broker_took_the_log_as_it_was(served: Served) -> None:
    """Both logs loaded whole (no truncation, invalid batch, corrupt index, deleted
    segment or warning); Kafka recovered exactly the segments it should have."""
    lines = [line for line in served.broker_log.splitlines() if "tierlog-" in line]
    # Recovering a segment, Kafka rebuilds producer state from before it and deletes
    # tierlog's later .snapshot files, as it does its own: that is no complaint.
    complaints = [line for line in lines if "Deleted producer state snapshot" not in line]
    assert [line for line in complaints if SUSPICIOUS.search(line)] == []
    for topic in (TRUSTED, RECOVERED):
        assert any(
            f"topic={topic}, partition=0, " in line and f"logEndOffset={served.log_end})" in line
            for line in lines
            if "Completed load of Log(" in line
        ), topic
    recovered: dict[str, list[int]] = {TRUSTED: [], RECOVERED: []}
    for line in lines:
        if match := RECOVERING.search(line):
            recovered[match[1]].append(int(match[2]))
    bases = sorted(
        int(name.removesuffix(".log"))
        for name in served.tierlog_files[TRUSTED]
        if name.endswith(".log")
    )
    assert recovered == {TRUSTED: bases[-1:], RECOVERED: bases}


@pytest.mark.parametrize("topic", [TRUSTED, RECOVERED])
def test_kafka_leaves_tierlogs_files_as_they_were(served: Served, topic: str) -> None:
    """After loading (recovery rebuilds every index of ``tierlog-recovered`` from the
    .log), serving and a clean shutdown, every .log, .index and .timeindex is still
    byte for byte what tierlog wrote."""
    tierlog, kafka = served.tierlog_files[topic], served.kafka_files[topic]
    assert sorted(kafka) == sorted(tierlog)
    for name, data in tierlog.items():
        assert kafka[name] == data, name


def test_kafka_keeps_tierlogs_leader_epochs(served: Served) -> None:
    """The restarted leader's epoch starts at the log end; tierlog's epoch 0 from 0 stays."""
    for topic in (TRUSTED, RECOVERED):
        checkpoint = served.broker.partition_dir(topic) / "leader-epoch-checkpoint"
        epochs = read_epoch_checkpoint(checkpoint)
        assert epochs[0] == (served.leader_epoch, 0)
        assert len(epochs) == 2
        assert epochs[1][0] > served.leader_epoch
        assert epochs[1][1] == served.log_end
