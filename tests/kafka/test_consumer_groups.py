"""KIP-848 consumer groups through the Kafka listener, over the same coordinator as the
gRPC GroupService: Kafka's own Java consumer (4.1.1, ``group.protocol=consumer``) reads
and commits in a group that ``kafka-consumer-groups --describe`` then shows, and a raw
heartbeat round read off the wire with kio, because kafka-python 3 (the Python client
in the venv) speaks only the classic protocol: join, assignment by the topic ids
Metadata reports, ConsumerGroupDescribe, the member epoch checked by OffsetCommit v9 and
OffsetFetch v9, and leaving."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import KafkaSidecar, run_java, start_kafka_sidecar
from tests.kafka.wire import KafkaWire
from tests.support.sidecars import Sidecars
from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.api.v1 import group_service_pb2_grpc
from tierlog.client.cluster import Cluster
from tierlog.client.groups import GroupClient
from tierlog.client.rpc import open_channel
from tierlog.storage.topic_partition import TopicPartition

METADATA, OFFSET_COMMIT, OFFSET_FETCH = 3, 8, 9
HEARTBEAT, DESCRIBE, OFFSET_DELETE = 68, 69, 47
TOPIC = "events"
CONFIGS = ("offsets.topic.num.partitions=3", "group.consumer.heartbeat.interval.ms=500")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        sidecar = start_kafka_sidecar(started, tmp_path_factory.mktemp("cg") / "data", *CONFIGS)
        sidecar.create_topic(TOPIC, partitions=2)
        sidecar.load_offsets_topic(3)
        yield sidecar


def _heartbeat(group: str, member_id: str, epoch: int, **fields: Any) -> dict[str, Any]:
    return {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": epoch,
        "rebalance_timeout": 30_000,
        "topic_partitions": None,
        **fields,
    }


def _partitions(assignment: Any) -> dict[uuid.UUID, tuple[int, ...]]:
    return {t.topic_id: tuple(t.partitions) for t in assignment.topic_partitions}


def _commit(group: str, member: str, epoch: int) -> dict[str, Any]:
    partition = {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
    return {
        "group_id": group,
        "generation_id_or_member_epoch": epoch,
        "member_id": member,
        "topics": [{"name": TOPIC, "partitions": [partition]}],
    }


def _fetch(group: str, member: str | None, epoch: int) -> dict[str, Any]:
    topics = [{"name": TOPIC, "partition_indexes": (0,)}]
    return {
        "groups": [
            {"group_id": group, "member_id": member, "member_epoch": epoch, "topics": topics}
        ]
    }


@pytest.mark.parametrize("version", [0, 1])
def test_a_kip848_member_round_on_the_wire(
    broker: KafkaSidecar, wire: KafkaWire, version: int
) -> None:
    group, member = f"wire-{version}", uuid.uuid4().hex
    topic_ids = {
        t.name: t.topic_id
        for t in wire.call(
            METADATA,
            12,
            {"topics": None, "allow_auto_topic_creation": False,
             "include_topic_authorized_operations": False},
        ).topics
    }  # fmt: skip
    joined = wire.call(
        HEARTBEAT,
        version,
        _heartbeat(group, member, 0, subscribed_topic_names=(TOPIC,), topic_partitions=()),
    )
    assert joined.error_code == ErrorCode.none, joined.error_message
    assert joined.member_id == member
    assert joined.heartbeat_interval.total_seconds() == 0.5
    epoch = joined.member_epoch
    assert epoch >= 1
    assert _partitions(joined.assignment) == {topic_ids[TOPIC]: (0, 1)}

    steady = wire.call(
        HEARTBEAT,
        version,
        _heartbeat(
            group,
            member,
            epoch,
            topic_partitions=[{"topic_id": topic_ids[TOPIC], "partitions": (0, 1)}],
        ),
    )
    assert (steady.error_code, steady.member_epoch) == (ErrorCode.none, epoch)

    for describe_version in (0, 1):
        (described,) = wire.call(
            DESCRIBE,
            describe_version,
            {"group_ids": (group,), "include_authorized_operations": False},
        ).groups
        assert (described.error_code, described.group_state) == (ErrorCode.none, "Stable")
        assert (described.group_epoch, described.assignment_epoch) == (epoch, epoch)
        (described_member,) = described.members
        assert described_member.member_id == member
        assert (described_member.client_id, described_member.client_host) == (
            "tests",
            "/127.0.0.1",
        )
        assert described_member.subscribed_topic_names == (TOPIC,)
        assert [
            (t.topic_id, t.topic_name, tuple(t.partitions))
            for t in described_member.assignment.topic_partitions
        ] == [(topic_ids[TOPIC], TOPIC, (0, 1))]
        assert getattr(described_member, "member_type", 1) == 1

    # The member commits at v9 and at its epoch; below v9, or behind its epoch, it is
    # refused as Kafka refuses it; OffsetFetch v9 checks it too.
    codes = [
        wire.call(OFFSET_COMMIT, v, _commit(group, member, e)).topics[0].partitions[0].error_code
        for v, e in ((8, epoch), (9, epoch - 1), (9, epoch))
    ]
    assert codes == [
        ErrorCode.unsupported_version,
        ErrorCode.stale_member_epoch,
        ErrorCode.none,
    ]
    fetched = {
        name: wire.call(OFFSET_FETCH, 9, _fetch(group, m, e)).groups[0]
        for name, m, e in (
            ("member", member, epoch),
            ("stale", member, epoch - 1),
            ("stranger", "nobody", epoch),
            ("admin", None, -1),
        )
    }
    assert {name: g.error_code for name, g in fetched.items()} == {
        "member": ErrorCode.none,
        "stale": ErrorCode.stale_member_epoch,
        "stranger": ErrorCode.unknown_member_id,
        "admin": ErrorCode.none,
    }
    assert fetched["member"].topics[0].partitions[0].committed_offset == 1

    # The gRPC door sees the same member.
    with open_channel(broker.address) as channel:
        grpc_view = group_service_pb2_grpc.GroupServiceStub(channel).DescribeGroups(
            pb.DescribeGroupsRequest(group_id=group)
        )
    assert [m.member_id for m in grpc_view.members] == [member]

    left = wire.call(HEARTBEAT, version, _heartbeat(group, member, -1))
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
    (empty,) = wire.call(
        DESCRIBE, 1, {"group_ids": (group,), "include_authorized_operations": False}
    ).groups
    assert (empty.group_state, empty.members) == ("Empty", ())


def test_member_ids_and_unknown_groups(wire: KafkaWire) -> None:
    """v1 needs the consumer's own member id (KIP-1082), v0 is given one; describing a
    group that does not exist is GROUP_ID_NOT_FOUND."""
    refused = wire.call(HEARTBEAT, 1, _heartbeat("ids", "", 0, subscribed_topic_names=(TOPIC,)))
    assert refused.error_code == ErrorCode.invalid_request
    given = wire.call(HEARTBEAT, 0, _heartbeat("ids", "", 0, subscribed_topic_names=(TOPIC,)))
    assert given.error_code == ErrorCode.none and given.member_id
    wire.call(HEARTBEAT, 0, _heartbeat("ids", given.member_id, -1))
    (unknown,) = wire.call(
        DESCRIBE, 1, {"group_ids": ("no-such-group",), "include_authorized_operations": False}
    ).groups
    assert unknown.error_code == ErrorCode.group_id_not_found


def test_the_java_consumer_reads_and_commits_in_a_kip848_group(broker: KafkaSidecar) -> None:
    """Kafka's console consumer with ``group.protocol=consumer`` joins through
    ConsumerGroupHeartbeat, reads every record and commits; ``kafka-consumer-groups
    --describe`` (ConsumerGroupDescribe, OffsetFetch, ListOffsets) shows lag 0 and
    tierlog's gRPC client reads the same offsets."""
    group, count = "java-848", 10
    producer = KafkaProducer(bootstrap_servers=broker.kafka_address, acks="all")
    for i in range(count):
        producer.send(TOPIC, value=f"v{i}".encode(), partition=i % 2)
    producer.flush()
    producer.close()

    printed = run_java(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        *("--bootstrap-server", broker.kafka_address, "--topic", TOPIC, "--group", group),
        *("--from-beginning", "--max-messages", str(count), "--timeout-ms", "60000"),
        *("--consumer-property", "group.protocol=consumer"),
    )
    assert sorted(printed.split()) == sorted(f"v{i}" for i in range(count))

    described = run_java(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        *("--bootstrap-server", broker.kafka_address, "--describe", "--group", group),
    )
    rows = [line.split() for line in described.splitlines() if line.startswith(group)]
    assert sorted((row[1], row[2], row[3], row[5]) for row in rows) == [
        (TOPIC, "0", "5", "0"),
        (TOPIC, "1", "5", "0"),
    ], described
    committed = GroupClient(Cluster([broker.address]), group).committed()
    assert {tp: o.offset for tp, o in committed.items() if o is not None} == {
        TopicPartition(TOPIC, 0): 5,
        TopicPartition(TOPIC, 1): 5,
    }


def test_offsets_of_a_topic_the_group_subscribes_to_are_not_deleted(wire: KafkaWire) -> None:
    """OffsetDelete of a topic a member subscribes to is GROUP_SUBSCRIBED_TO_TOPIC and
    keeps the offset, as Kafka refuses it (``kafka-consumer-groups --delete-offsets``
    on a live group); once the member left it is deleted."""
    group, member = "subscribed", uuid.uuid4().hex
    joined = wire.call(HEARTBEAT, 1, _heartbeat(group, member, 0, subscribed_topic_names=(TOPIC,)))
    wire.call(OFFSET_COMMIT, 9, _commit(group, member, joined.member_epoch))
    delete = {
        "group_id": group,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}],
    }
    refused = wire.call(OFFSET_DELETE, 0, delete)
    assert refused.error_code == ErrorCode.none
    assert refused.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
    kept = wire.call(OFFSET_FETCH, 9, _fetch(group, None, -1)).groups[0]
    assert kept.topics[0].partitions[0].committed_offset == 1

    wire.call(HEARTBEAT, 1, _heartbeat(group, member, -1))
    deleted = wire.call(OFFSET_DELETE, 0, delete)
    assert deleted.topics[0].partitions[0].error_code == ErrorCode.none
    gone = wire.call(OFFSET_FETCH, 9, _fetch(group, None, -1)).groups[0]
    assert gone.topics[0].partitions[0].committed_offset == -1
