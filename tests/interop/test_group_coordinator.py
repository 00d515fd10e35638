"""Kafka 4.1.1 reads the ``__consumer_offsets`` a running sidecar's group coordinator wrote.

Commits go through the client to a real sidecar; Kafka's ``DumpLogSegments
--offsets-decoder`` decodes its segments to the same groups, partitions, offsets,
leader epochs and metadata, and a deleted group's tombstones. With small segments and a
cleaner that runs at once, compaction keeps the latest commit of each key and no commit
of a deleted one, and a restarted sidecar rebuilt from the compacted log answers the same.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.sidecars import SidecarProcess, start_sidecar
from tierlog.client import AdminClient, Cluster, Consumer, Producer, TopicPartition
from tierlog.client.groups import (
    ConsumerGroupMetadata,
    ConsumerGroups,
    GroupClient,
    OffsetAndMetadata,
)
from tierlog.coordinator.consumer_group_records import ConsumerGroupCurrentMemberAssignmentValue
from tierlog.coordinator.group_records import decode_record
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for_group
from tierlog.storage.checkpoints import read_offset_checkpoint
from tierlog.storage.topic_partition import TopicPartition as StoredPartition

from .kafka import RecordEntry, dump_log_segments
from .test_consumer_offsets import assert_dump_matches, read_log_dir
from .test_kafka_reads_cleaned import kafka_findings

pytestmark = pytest.mark.interop

# A record's key and value as Kafka prints them (JSON objects; None: a tombstone).
Decoded = tuple[dict[str, Any], dict[str, Any] | None]

PARTITIONS = 3
# Two groups in one __consumer_offsets partition (our rule, and Kafka's).
KEPT, DELETED = "billing", "audit"
COMPACTING = (
    f"offsets.topic.num.partitions={PARTITIONS}",
    "offsets.topic.segment.bytes=1024",  # a segment every few commits: something to clean
    "log.cleaner.backoff.ms=100",
    "log.cleaner.min.cleanable.ratio=0.01",
    "log.cleaner.delete.retention.ms=0",
)


def _decoded(partition_dir: Path, *, below: int | None = None) -> list[Decoded]:
    """Each record's key and value as DumpLogSegments decodes them (value None: a
    tombstone), in log order; only those of segments ending at or below ``below``."""
    logs = sorted(partition_dir.glob("*.log"))
    if below is not None:
        bases = [int(path.stem) for path in logs] + [below + 1]
        logs = [path for path, nxt in zip(logs, bases[1:], strict=False) if nxt <= below]
    dump = dump_log_segments(logs, "--offsets-decoder")
    assert kafka_findings(dump) == []  # gaps in offsets are compaction's, by design
    return [_key_and_value(entry) for entry in dump.records]


def _key_and_value(entry: RecordEntry) -> Decoded:
    assert entry.key is not None
    key = json.loads(entry.key)
    if entry.value_size == -1:
        return key, None
    assert entry.payload is not None
    return key, json.loads(entry.payload)


def _commits(records: list[Decoded]) -> list[tuple[str, int, int | None]]:
    """(group, partition, offset or None for a tombstone) of the offset commit records."""
    return [
        (
            key["data"]["group"],
            key["data"]["partition"],
            None if value is None else value["data"]["offset"],
        )
        for key, value in records
        if key["type"] == "1"
    ]


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[SidecarProcess]:
    started = start_sidecar(tmp_path / "data", *COMPACTING)
    try:
        with AdminClient({"bootstrap.servers": started.address}) as admin:
            admin.create_topic("orders", 2)
        yield started
    finally:  # the one started here, or the test's restart of it
        started.kill()


def test_kafka_decodes_the_commits_a_sidecar_wrote(sidecar: SidecarProcess) -> None:
    groups = ConsumerGroups(_cluster(sidecar))
    kept = groups.group(KEPT)
    kept.commit({TopicPartition("orders", 0): OffsetAndMetadata(41, "checkpoint-a", 3)})
    kept.commit({TopicPartition("orders", 1): OffsetAndMetadata(7)})
    sidecar.kill()
    partition_dir = sidecar.data_dir / f"{OFFSETS_TOPIC}-{partition_for_group(KEPT, PARTITIONS)}"
    records = _decoded(partition_dir)
    assert len(records) == 2
    (key, value), _second = records
    assert key == {
        "type": "1",
        "data": {"group": KEPT, "topic": "orders", "partition": 0},
    }
    assert value is not None and value["version"] == "4"
    assert value["data"]["offset"] == 41
    assert value["data"]["leaderEpoch"] == 3
    assert value["data"]["metadata"] == "checkpoint-a"
    assert _commits(records) == [(KEPT, 0, 41), (KEPT, 1, 7)]


def test_compaction_keeps_the_latest_commit_per_key(sidecar: SidecarProcess) -> None:
    kept_name, deleted_name = KEPT, DELETED
    assert partition_for_group(KEPT, PARTITIONS) == partition_for_group(DELETED, PARTITIONS)
    cluster = _cluster(sidecar)
    kept, deleted = GroupClient(cluster, kept_name), GroupClient(cluster, deleted_name)
    for round_ in range(40):
        for partition in (0, 1):
            kept.commit(
                {TopicPartition("orders", partition): OffsetAndMetadata(round_ * 10 + partition)}
            )
        deleted.commit({TopicPartition("orders", 0): OffsetAndMetadata(round_)})
    deleted.delete()
    for round_ in range(40, 60):  # more dirty data behind the tombstones, to clean again
        kept.commit({TopicPartition("orders", 0): OffsetAndMetadata(round_ * 10)})
    latest = {TopicPartition("orders", 0): 590, TopicPartition("orders", 1): 391}
    tp = StoredPartition(OFFSETS_TOPIC, partition_for_group(kept_name, PARTITIONS))
    cleaned_to = _cleaned_past(sidecar, tp, 121)  # past the deletion (offsets 120, 121)
    # A graceful stop joins the cleaner: a running one swaps segments under DumpLogSegments.
    assert sidecar.stop() == 0
    partition_dir = sidecar.data_dir / f"{tp.topic}-{tp.partition}"
    cleaned = _commits(_decoded(partition_dir, below=cleaned_to))
    kept_keys = [(p, offset) for group, p, offset in cleaned if group == kept_name]
    assert len(kept_keys) == len({p for p, _ in kept_keys}), f"duplicates kept: {kept_keys}"
    assert all(offset is None for group, _p, offset in cleaned if group == deleted_name)
    last: dict[tuple[str, int], int | None] = {}
    for group, p, offset in _commits(_decoded(partition_dir)):
        last[(group, p)] = offset
    assert {key: offset for key, offset in last.items() if offset is not None} == {
        (kept_name, 0): 590,
        (kept_name, 1): 391,
    }
    sidecar.start()
    again = GroupClient(_cluster(sidecar), kept_name)
    assert {tp: o.offset for tp, o in again.committed().items() if o} == latest
    assert GroupClient(_cluster(sidecar), deleted_name).committed() == {}


def _cleaned_past(sidecar: SidecarProcess, tp: StoredPartition, offset: int) -> int:
    """Wait for the cleaner to have cleaned ``tp`` past ``offset``; where it got to."""
    checkpoint = sidecar.data_dir / "cleaner-offset-checkpoint"
    deadline = time.monotonic() + 60
    while True:
        if checkpoint.exists():
            cleaned = read_offset_checkpoint(checkpoint).get(tp, 0)
            if cleaned > offset:
                return cleaned
        assert time.monotonic() < deadline, "the cleaner never cleaned __consumer_offsets"
        time.sleep(0.1)  # the cleaner runs every log.cleaner.backoff.ms: look again


def _cluster(sidecar: SidecarProcess) -> Cluster:
    return Cluster([sidecar.address])


def test_kafka_decodes_the_membership_a_running_coordinator_wrote(
    sidecar: SidecarProcess,
) -> None:
    """Two members join (KIP-848) and commit; every record the coordinator wrote, group
    epochs, subscriptions, targets, current assignments and commits, is one Kafka's
    ``DumpLogSegments`` decodes field by field to what tierlog reads in it."""
    config = {"bootstrap.servers": sidecar.address, "group.id": KEPT, "client.id": "app"}
    members = [Consumer(config), Consumer(config)]
    try:
        for member in members:
            member.subscribe(["orders"])
        deadline = time.monotonic() + 30
        while sorted(len(member.assignment()) for member in members) != [1, 1]:
            for member in members:
                member.poll(50)
            assert time.monotonic() < deadline, "the two members never split the topic"
        for member in members:
            member.commit()
    finally:
        for member in members:
            member.close()
    sidecar.kill()
    partition_dir = sidecar.data_dir / f"{OFFSETS_TOPIC}-{partition_for_group(KEPT, PARTITIONS)}"
    ours = [decode_record(key, value) for key, value in read_log_dir(partition_dir)]
    dump = dump_log_segments(sorted(partition_dir.glob("*.log")), "--offsets-decoder")
    assert len(dump.records) == len(ours)
    for entry, record in zip(dump.records, ours, strict=True):
        assert_dump_matches(entry, record)
    kinds = {int(record.key.RECORD_TYPE) for record in ours}
    assert kinds >= {1, 3, 5, 6, 7, 8}  # commits, epoch, member, target, current
    epochs = [
        record.value.member_epoch
        for record in ours
        if isinstance(record.value, ConsumerGroupCurrentMemberAssignmentValue)
    ]
    assert max(epochs) >= 2  # the second member's join moved the group to epoch 2


def test_kafka_decodes_transactional_offset_commits_and_their_markers(
    sidecar: SidecarProcess,
) -> None:
    """``send_offsets_to_transaction`` once committed, once aborted: Kafka reads the two
    transactional offset commit batches (the producer's id and epoch, no sequence) and
    their COMMIT and ABORT markers in the group's ``__consumer_offsets`` partition."""
    tp = TopicPartition("orders", 0)
    with Producer(
        {"bootstrap.servers": sidecar.address, "transactional.id": "etl", "linger.ms": 0}
    ) as producer:
        producer.init_transactions()
        for offset, commit in ((6, True), (9, False)):
            producer.begin_transaction()
            producer.send_offsets_to_transaction(
                {tp: OffsetAndMetadata(offset)}, ConsumerGroupMetadata(KEPT)
            )
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
        assert producer.idempotence is not None
        pid = producer.idempotence.producer_id_and_epoch
    found = GroupClient(_cluster(sidecar), KEPT).committed([tp])[tp]
    assert found is not None and found.offset == 6
    sidecar.kill()
    partition_dir = sidecar.data_dir / f"{OFFSETS_TOPIC}-{partition_for_group(KEPT, PARTITIONS)}"
    dump = dump_log_segments(sorted(partition_dir.glob("*.log")), "--offsets-decoder")
    assert dump.errors == []
    kinds = [(batch.is_transactional, batch.is_control) for batch in dump.batches]
    assert kinds == [(True, False), (True, True), (True, False), (True, True)]
    assert {(batch.producer_id, batch.producer_epoch) for batch in dump.batches} == {
        (pid.producer_id, pid.epoch)
    }
    assert {batch.base_sequence for batch in dump.batches} == {-1}  # Kafka's NO_SEQUENCE
    markers = [line for line in dump.stdout.splitlines() if "endTxnMarker" in line]
    assert [("COMMIT" in line, "ABORT" in line) for line in markers] == [
        (True, False),
        (False, True),
    ]
    commits = [entry for entry in dump.records if entry.key is not None and "group" in entry.key]
    assert _commits([_key_and_value(entry) for entry in commits]) == [(KEPT, 0, 6), (KEPT, 0, 9)]
