"""Kafka 4.1.1 judges tierlog's ``__consumer_offsets`` records, both ways.

- tierlog's codec builds offset commits, tombstones, a classic group and a KIP-848
  group's records into v2 batches, tierlog's Log writes them to ``__consumer_offsets-N``,
  and Kafka's ``DumpLogSegments --offsets-decoder`` decodes every field as we meant it;
- a real broker runs a group of the consumer protocol (``group.protocol=consumer``) and
  ``kafka-consumer-groups --reset-offsets`` for another group; tierlog decodes every
  record the broker wrote to ``__consumer_offsets``, agrees field by field with
  DumpLogSegments, re-encodes each to the very bytes Kafka wrote, and finds both groups
  in the partitions Kafka's rule (and ours) names.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from collections.abc import Iterator
from enum import IntEnum
from pathlib import Path

import pytest

from tierlog.coordinator.classic_group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)
from tierlog.coordinator.consumer_group_records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    MemberState,
    PartitionMetadata,
    TopicMetadata,
    TopicPartitions,
)
from tierlog.coordinator.group_records import CoordinatorRecord, decode_record, encode_record
from tierlog.coordinator.offset_records import OffsetCommitKey, OffsetCommitValue
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for_group
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import SimpleRecord, build_batch, decode_records, iter_batches

from .conftest import BrokerFactory
from .kafka import (
    KafkaBroker,
    KafkaTools,
    ProducerRecord,
    RecordEntry,
    dump_log_segments,
    segment_files,
)

pytestmark = pytest.mark.interop

COMMIT_TIME_MS = 1_700_000_000_123
TOPIC_ID = uuid.UUID("3d1f6a0e-9c2b-4f7e-8a11-5b6c7d8e9f00")


# --- Kafka's JSON view of a record ------------------------------------------------------------


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def as_kafka_json(value: object) -> object:
    """Our value as Kafka's JSON converters print it: camelCase names, ids and bytes in
    base64; a field ``x_ms`` may appear as ``x`` or ``xMs`` (``assert_kafka_agrees``)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            _camel(field.name): as_kafka_json(getattr(value, field.name))
            for field in dataclasses.fields(value)
        }
    if isinstance(value, tuple):
        return [as_kafka_json(item) for item in value]
    if isinstance(value, uuid.UUID):
        return kafka_uuid(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, IntEnum):
        return int(value)
    return value


def assert_kafka_agrees(kafka: object, ours: object, path: str = "") -> None:
    """Every field Kafka printed equals ours (Kafka leaves out fields a version lacks)."""
    if isinstance(kafka, dict):
        assert isinstance(ours, dict), f"{path}: Kafka has {kafka}, we have {ours}"
        for name, kafka_field in kafka.items():
            ours_name = name if name in ours else f"{name}Ms"
            assert ours_name in ours, f"{path}.{name}: Kafka prints a field we do not have"
            assert_kafka_agrees(kafka_field, ours[ours_name], f"{path}.{name}")
    elif isinstance(kafka, list):
        assert isinstance(ours, list) and len(ours) == len(kafka), f"{path}: {kafka} != {ours}"
        for i, (kafka_item, ours_item) in enumerate(zip(kafka, ours, strict=True)):
            assert_kafka_agrees(kafka_item, ours_item, f"{path}[{i}]")
    else:
        assert kafka == ours, f"{path}: Kafka decodes {kafka!r}, we have {ours!r}"


def assert_dump_matches(entry: RecordEntry, record: CoordinatorRecord) -> None:
    """DumpLogSegments' decoding of one record (``--offsets-decoder``) is ``record``."""
    assert entry.key is not None
    key = json.loads(entry.key)
    assert key["type"] == str(record.key.RECORD_TYPE)
    assert_kafka_agrees(key["data"], as_kafka_json(record.key), type(record.key).__name__)
    if record.value is None:
        assert entry.value_size == -1  # printed "<DELETE>"; parse_dump reads no payload
        return
    assert entry.payload is not None
    payload = json.loads(entry.payload)
    if record.value_version is not None:
        assert payload["version"] == str(record.value_version)
    assert_kafka_agrees(payload["data"], as_kafka_json(record.value), type(record.value).__name__)


# --- tierlog writes, Kafka reads ------------------------------------------------------------


def tierlog_group_records(group: str) -> list[CoordinatorRecord]:
    """One of every record, the shapes Kafka 4.1 writes, and some it only reads."""
    member, other = "member-a", "member-b"
    owned = (TopicPartitions(TOPIC_ID, (0, 1)),)
    return [
        CoordinatorRecord(
            OffsetCommitKey(group, "orders", 0),
            OffsetCommitValue(
                offset=42,
                commit_timestamp_ms=COMMIT_TIME_MS,
                metadata="checkpoint-7 ✓",
                leader_epoch=5,
                topic_id=TOPIC_ID,
            ),
        ),
        CoordinatorRecord(
            OffsetCommitKey(group, "orders", 1),
            OffsetCommitValue(offset=7, commit_timestamp_ms=COMMIT_TIME_MS, leader_epoch=-1),
        ),
        CoordinatorRecord(
            OffsetCommitKey(group, "orders", 2),
            OffsetCommitValue(
                offset=9, commit_timestamp_ms=COMMIT_TIME_MS, expire_timestamp_ms=COMMIT_TIME_MS + 1
            ),
        ),
        CoordinatorRecord(OffsetCommitKey(group, "orders", 3), None),
        CoordinatorRecord(
            OffsetCommitKey(group, "orders", 0),
            OffsetCommitValue(offset=3, commit_timestamp_ms=COMMIT_TIME_MS - 5, metadata="old"),
            value_version=3,
        ),
        CoordinatorRecord(
            GroupMetadataKey(f"{group}-classic"),
            GroupMetadataValue(
                protocol_type="consumer",
                generation=4,
                protocol="range",
                leader=member,
                members=(
                    MemberMetadata(
                        member_id=member,
                        client_id="app",
                        client_host="/127.0.0.1",
                        session_timeout_ms=45000,
                        subscription=b"\x00\x01sub",
                        assignment=b"\x00\x02",
                        rebalance_timeout_ms=300000,
                        group_instance_id="pod-0",
                    ),
                ),
                current_state_timestamp_ms=COMMIT_TIME_MS,
            ),
        ),
        CoordinatorRecord(GroupMetadataKey(f"{group}-gone"), None),
        CoordinatorRecord(ConsumerGroupMetadataKey(group), ConsumerGroupMetadataValue(8, -77)),
        CoordinatorRecord(
            ConsumerGroupMemberMetadataKey(group, member),
            ConsumerGroupMemberMetadataValue(
                client_id="app",
                client_host="/10.0.0.7",
                subscribed_topic_names=("orders", "payments"),
                rack_id="zone-a",
                rebalance_timeout_ms=300000,
                server_assignor="uniform",
                classic_member_metadata=None,
            ),
        ),
        CoordinatorRecord(
            ConsumerGroupMemberMetadataKey(group, other),
            ConsumerGroupMemberMetadataValue(
                client_id="legacy",
                client_host="/10.0.0.8",
                subscribed_topic_regex="ord.*",
                instance_id="pod-1",
                classic_member_metadata=ClassicMemberMetadata(
                    45000, (ClassicProtocol("range", b"\x00\x03"),)
                ),
            ),
        ),
        CoordinatorRecord(
            ConsumerGroupTargetAssignmentMetadataKey(group),
            ConsumerGroupTargetAssignmentMetadataValue(8),
        ),
        CoordinatorRecord(
            ConsumerGroupTargetAssignmentMemberKey(group, member),
            ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(TOPIC_ID, (0, 1, 2)),)),
        ),
        CoordinatorRecord(
            ConsumerGroupCurrentMemberAssignmentKey(group, member),
            ConsumerGroupCurrentMemberAssignmentValue(
                member_epoch=8,
                previous_member_epoch=7,
                state=MemberState.UNREVOKED_PARTITIONS,
                assigned_partitions=owned,
                partitions_pending_revocation=(TopicPartitions(TOPIC_ID, (2,)),),
            ),
        ),
        CoordinatorRecord(
            ConsumerGroupRegularExpressionKey(group, "ord.*"),
            ConsumerGroupRegularExpressionValue(("orders",), 12, COMMIT_TIME_MS),
        ),
        CoordinatorRecord(
            ConsumerGroupPartitionMetadataKey(group),
            ConsumerGroupPartitionMetadataValue(
                (TopicMetadata(TOPIC_ID, "orders", 3, (PartitionMetadata(0, ("zone-a",)),)),)
            ),
        ),
        CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(group, other), None),
        CoordinatorRecord(ConsumerGroupMemberMetadataKey(group, other), None),
    ]


def test_kafka_decodes_the_consumer_offsets_records_tierlog_writes(tmp_path: Path) -> None:
    group = "my-group"
    records = tierlog_group_records(group)
    partition_dir = tmp_path / f"{OFFSETS_TOPIC}-{partition_for_group(group)}"
    log = Log.open(partition_dir, LogConfig.from_properties({"cleanup.policy": "compact"}))
    try:
        for start in range(0, len(records), 6):  # a few batches
            chunk = records[start : start + 6]
            log.append(
                build_batch(
                    [
                        SimpleRecord(*encode_record(record), timestamp=COMMIT_TIME_MS + i)
                        for i, record in enumerate(chunk)
                    ]
                )
            )
    finally:
        log.close()
    logs = sorted(partition_dir.glob("*.log"))
    dump = dump_log_segments(logs, "--offsets-decoder")
    assert dump.errors == []
    assert len(dump.records) == len(records)
    for entry, record in zip(dump.records, records, strict=True):
        assert_dump_matches(entry, record)
    # and Kafka's checks of the segment against its indexes find nothing wrong
    files = segment_files(partition_dir)
    assert dump_log_segments(files, "--verify-index-only").errors == []
    indexes = [path for path in files if path.suffix != ".log"]
    assert dump_log_segments(indexes, "--index-sanity-check").errors == []


# --- Kafka writes, tierlog reads --------------------------------------------------------------

CONSUMER_GROUP = "analytics"  # hashCode < 0: abs() and a 31-bit mask disagree (10 vs 38)
RESET_GROUP = "my-group"  # likewise (12 vs 36)
TOPIC = "orders"
PARTITIONS = 3
RECORDS = 12


def read_log_dir(partition_dir: Path) -> Iterator[tuple[bytes | None, bytes | None]]:
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for header in iter_batches(data):
            if header.is_control:
                continue
            for record in decode_records(data, header):
                yield record.key, record.value


def _topic_id(broker: KafkaBroker, topic: str) -> uuid.UUID:
    """The topic id Kafka keeps in ``partition.metadata`` (``topic_id: <base64>``)."""
    text = (broker.partition_dir(topic) / "partition.metadata").read_text()
    (encoded,) = (
        line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("topic_id")
    )
    return uuid.UUID(bytes=base64.urlsafe_b64decode(encoded + "=="))


def _run_group_clients(tools: KafkaTools, broker: KafkaBroker) -> None:
    server = broker.bootstrap_server
    tools.run(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        *("--bootstrap-server", server, "--group", RESET_GROUP, "--topic", TOPIC),
        *("--reset-offsets", "--to-offset", "2", "--execute"),
    )
    tools.run(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        *("--bootstrap-server", server, "--topic", TOPIC, "--group", CONSUMER_GROUP),
        *("--from-beginning", "--max-messages", str(RECORDS), "--timeout-ms", "60000"),
        *("--consumer-property", "group.protocol=consumer"),
        *("--consumer-property", "client.id=tierlog-interop"),
        timeout_s=180,
    )


@pytest.fixture(scope="module")
def kafka_group_log(
    kafka_broker_factory: BrokerFactory, kafka_tools: KafkaTools
) -> tuple[KafkaBroker, uuid.UUID]:
    """A broker's log dir after it ran one group of each kind, then shut down cleanly."""
    broker = kafka_broker_factory("groups")
    broker.create_topic(TOPIC, partitions=PARTITIONS)
    broker.produce(
        TOPIC,
        [
            ProducerRecord(f"k{i}".encode(), f"v{i}".encode(), partition=i % 3)
            for i in range(RECORDS)
        ],
    )
    _run_group_clients(kafka_tools, broker)
    topic_id = _topic_id(broker, TOPIC)
    broker.stop()
    return broker, topic_id


def test_kafka_puts_each_group_in_the_partition_our_rule_names(
    kafka_group_log: tuple[KafkaBroker, uuid.UUID],
) -> None:
    broker, _ = kafka_group_log
    written = {
        int(path.name.rsplit("-", 1)[1])
        for path in broker.log_dir.glob(f"{OFFSETS_TOPIC}-*")
        if any(segment.stat().st_size > 0 for segment in path.glob("*.log"))
    }
    assert written == {partition_for_group(CONSUMER_GROUP), partition_for_group(RESET_GROUP)}
    assert written == {10, 12}


def _kafka_written(broker: KafkaBroker, group: str) -> tuple[Path, list[CoordinatorRecord]]:
    partition_dir = broker.partition_dir(OFFSETS_TOPIC, partition_for_group(group))
    return partition_dir, [decode_record(key, value) for key, value in read_log_dir(partition_dir)]


def test_tierlog_decodes_kafkas_records_to_the_same_bytes_and_fields(
    kafka_group_log: tuple[KafkaBroker, uuid.UUID],
) -> None:
    broker, _ = kafka_group_log
    for group in (CONSUMER_GROUP, RESET_GROUP):
        partition_dir, records = _kafka_written(broker, group)
        raw = list(read_log_dir(partition_dir))
        assert [encode_record(record) for record in records] == raw
        dump = dump_log_segments(sorted(partition_dir.glob("*.log")), "--offsets-decoder")
        assert dump.errors == []
        assert len(dump.records) == len(records)
        for entry, record in zip(dump.records, records, strict=True):
            assert_dump_matches(entry, record)


def test_the_reset_offsets_are_commits_at_the_offset_asked_for(
    kafka_group_log: tuple[KafkaBroker, uuid.UUID],
) -> None:
    broker, _ = kafka_group_log
    _, records = _kafka_written(broker, RESET_GROUP)
    commits = {
        record.key.partition: record.value
        for record in records
        if isinstance(record.key, OffsetCommitKey) and record.key.group == RESET_GROUP
    }
    assert sorted(commits) == list(range(PARTITIONS))
    for value in commits.values():
        assert isinstance(value, OffsetCommitValue)
        assert value.offset == 2
        assert value.metadata == ""
        assert value.commit_timestamp_ms > 0
    assert {record.value_version for record in records} == {4}


def test_the_consumer_groups_membership_and_commits_decode(
    kafka_group_log: tuple[KafkaBroker, uuid.UUID],
) -> None:
    broker, topic_id = kafka_group_log
    _, records = _kafka_written(broker, CONSUMER_GROUP)
    kinds = {type(record.key) for record in records}
    assert {
        OffsetCommitKey,
        ConsumerGroupMetadataKey,
        ConsumerGroupMemberMetadataKey,
        ConsumerGroupTargetAssignmentMetadataKey,
        ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupCurrentMemberAssignmentKey,
    } <= kinds
    members = [
        record.value
        for record in records
        if isinstance(record.value, ConsumerGroupMemberMetadataValue)
    ]
    assert members and all(member.subscribed_topic_names == (TOPIC,) for member in members)
    assert all(member.subscribed_topic_regex == "" for member in members)  # "", not null
    assert all(member.client_id == "tierlog-interop" for member in members)
    assert all(member.classic_member_metadata is None for member in members)
    epochs = [
        record.value for record in records if isinstance(record.value, ConsumerGroupMetadataValue)
    ]
    assert epochs[0].epoch == 1 and epochs[0].metadata_hash != 0  # tagged field 0, KIP-1101
    targets = [
        record.value
        for record in records
        if isinstance(record.value, ConsumerGroupTargetAssignmentMemberValue)
        and record.value.topic_partitions
    ]
    assert targets
    assert targets[-1].topic_partitions == (TopicPartitions(topic_id, (0, 1, 2)),)
    # the member left when the console consumer closed: its records were deleted
    assert any(
        record.is_tombstone and isinstance(record.key, ConsumerGroupMemberMetadataKey)
        for record in records
    )
    last_commit = {
        record.key.partition: record.value.offset
        for record in records
        if isinstance(record.key, OffsetCommitKey) and isinstance(record.value, OffsetCommitValue)
    }
    assert sum(last_commit.values()) == RECORDS  # every record consumed and committed
