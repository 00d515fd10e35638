"""Committed offsets through the Kafka listener, over the same group coordinator as
gRPC's GroupService: kafka-python's consumer commits with manual ``assign()`` (no
JoinGroup needed) and reads its ``committed()`` offsets, its admin client
(``list_group_offsets``, kafka-python 3's name for ``list_consumer_group_offsets``, and
``delete_group_offsets``) reads and deletes them, and tierlog's gRPC ``GroupClient``
reads what Kafka committed and the reverse. Every OffsetCommit (v2-v9) and OffsetFetch
(v1-v9) version is read off the wire with kio; ``require_stable`` is
UNSTABLE_OFFSET_COMMIT while a transaction holds a group's offsets."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.structs import OffsetAndMetadata as KafkaOffsetAndMetadata
from kio.schema.errors import ErrorCode

from tests.interop.kafka import kafka_tools
from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar, unique_name
from tests.kafka.wire import KafkaWire
from tests.support.sidecars import Sidecars
from tierlog.client.cluster import Cluster
from tierlog.client.groups import ConsumerGroupMetadata, GroupClient, OffsetAndMetadata
from tierlog.client.producer import Producer
from tierlog.storage.topic_partition import TopicPartition

OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 8, 9, 47
TOPIC = "orders"
CONFIGS = ("offsets.topic.num.partitions=3", "transaction.state.log.num.partitions=3")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        sidecar = start_kafka_sidecar(
            started, tmp_path_factory.mktemp("offsets") / "data", *CONFIGS
        )
        sidecar.create_topic(TOPIC, partitions=2)
        sidecar.load_offsets_topic(3)
        yield sidecar


def _group() -> str:
    return unique_name("group")


def _grpc_committed(broker: KafkaSidecar, group: str) -> dict[TopicPartition, tuple[int, str]]:
    found = GroupClient(Cluster([broker.address]), group).committed()
    return {tp: (o.offset, o.metadata) for tp, o in found.items() if o is not None}


def _commit(
    group: str, offsets: dict[int, int], member: tuple[str, int] = ("", -1)
) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": member[1],
        "member_id": member[0],
        "group_instance_id": None,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": f"m{offset}",
                    }
                    for p, offset in offsets.items()
                ],
            }
        ],
    }


def _fetched(wire: KafkaWire, version: int, group: str, **fields: object) -> dict[int, int]:
    """OffsetFetch at ``version`` of partitions 0 and 1: partition -> offset."""
    topics = [{"name": TOPIC, "partition_indexes": (0, 1)}]
    if version < 8:
        body = wire.call(OFFSET_FETCH, version, {"group_id": group, "topics": topics, **fields})
        assert getattr(body, "error_code", ErrorCode.none) == ErrorCode.none
        answer = body
    else:
        groups = [{"group_id": group, "topics": topics, "member_id": None, "member_epoch": -1}]
        body = wire.call(OFFSET_FETCH, version, {"groups": groups, **fields})
        (answer,) = body.groups
        assert answer.error_code == ErrorCode.none
    return {
        p.partition_index: p.committed_offset
        for t in answer.topics
        for p in t.partitions
        if p.error_code == ErrorCode.none
    }


def test_kafka_python_commits_with_assign_and_grpc_reads_them_and_back(
    broker: KafkaSidecar,
) -> None:
    group = _group()
    tp0, tp1 = KafkaTopicPartition(TOPIC, 0), KafkaTopicPartition(TOPIC, 1)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.kafka_address, group_id=group, enable_auto_commit=False
    )
    try:
        consumer.assign([tp0, tp1])
        consumer.commit(
            {
                tp0: KafkaOffsetAndMetadata(5, "from kafka", -1),
                tp1: KafkaOffsetAndMetadata(7, "", -1),
            }
        )
        assert consumer.committed(tp0) == 5
        assert _grpc_committed(broker, group) == {
            TopicPartition(TOPIC, 0): (5, "from kafka"),
            TopicPartition(TOPIC, 1): (7, ""),
        }

        GroupClient(Cluster([broker.address]), group).commit(
            {TopicPartition(TOPIC, 0): OffsetAndMetadata(11, "from grpc")}
        )
        assert consumer.committed(tp0) == 11
        admin = KafkaAdminClient(bootstrap_servers=broker.kafka_address)
        try:
            listed = admin.list_group_offsets({group: None})[group]
        finally:
            admin.close()
        assert {tp: (o.offset, o.metadata) for tp, o in listed.items()} == {
            tp0: (11, "from grpc"),
            tp1: (7, ""),
        }
    finally:
        consumer.close()


@pytest.mark.parametrize("commit_version", range(2, 10))
def test_every_commit_version_is_read_at_every_fetch_version(
    wire: KafkaWire, commit_version: int
) -> None:
    group = _group()
    committed = wire.call(OFFSET_COMMIT, commit_version, _commit(group, {0: commit_version}))
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in committed.topics] == [(TOPIC, [(0, ErrorCode.none)])]  # fmt: skip
    for fetch_version in range(1, 10):
        assert _fetched(wire, fetch_version, group) == {0: commit_version, 1: -1}


def test_null_topics_fetch_every_offset_and_groups_are_batched(wire: KafkaWire) -> None:
    first, second = _group(), _group()
    wire.call(OFFSET_COMMIT, 9, _commit(first, {0: 3, 1: 4}))
    wire.call(OFFSET_COMMIT, 9, _commit(second, {1: 8}))
    every = wire.call(OFFSET_FETCH, 2, {"group_id": first, "topics": None})
    assert {p.partition_index: p.committed_offset for p in every.topics[0].partitions} == {
        0: 3,
        1: 4,
    }
    batched = wire.call(
        OFFSET_FETCH,
        9,
        {
            "groups": [
                {"group_id": first, "topics": None, "member_id": None, "member_epoch": -1},
                {"group_id": second, "topics": None, "member_id": None, "member_epoch": -1},
            ]
        },
    )
    assert [
        (g.group_id, {p.partition_index: p.committed_offset for p in g.topics[0].partitions})
        for g in batched.groups
    ] == [(first, {0: 3, 1: 4}), (second, {1: 8})]


def test_commit_errors_are_kafkas_codes(wire: KafkaWire) -> None:
    group = _group()
    unknown = _commit(group, {0: 1})
    unknown["topics"][0]["name"] = "no-such-topic"
    refused = wire.call(OFFSET_COMMIT, 9, unknown)
    assert refused.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    # A generation of a group that does not exist: GROUP_ID_NOT_FOUND from v9 (Kafka's
    # compatibility answer below it is ILLEGAL_GENERATION).
    stale = wire.call(OFFSET_COMMIT, 9, _commit(group, {0: 1}, ("", 3)))
    assert stale.topics[0].partitions[0].error_code == ErrorCode.group_id_not_found
    older = wire.call(OFFSET_COMMIT, 8, _commit(group, {0: 1}, ("", 3)))
    assert older.topics[0].partitions[0].error_code == ErrorCode.illegal_generation
    empty = wire.call(OFFSET_COMMIT, 9, _commit("", {0: 1}))
    assert empty.topics[0].partitions[0].error_code == ErrorCode.invalid_group_id


def test_require_stable_waits_for_a_transactions_offsets(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    """Offsets a transaction holds are UNSTABLE_OFFSET_COMMIT to a fetch that requires
    stable ones (the last committed one to one that does not), until the transaction
    commits."""
    group = _group()
    wire.call(OFFSET_COMMIT, 9, _commit(group, {0: 2}))
    config = {"bootstrap.servers": broker.address, "transactional.id": f"tx-{group}"}
    with Producer(config) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {TopicPartition(TOPIC, 0): OffsetAndMetadata(9)}, ConsumerGroupMetadata(group)
        )
        for version in (7, 8, 9):
            assert _fetched(wire, version, group) == {0: 2, 1: -1}
            assert _fetched(wire, version, group, require_stable=True) == {1: -1}
        body = wire.call(
            OFFSET_FETCH,
            7,
            {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": (0,)}],
             "require_stable": True},
        )  # fmt: skip
        assert body.topics[0].partitions[0].error_code == ErrorCode.unstable_offset_commit
        producer.commit_transaction()
    assert _fetched(wire, 9, group, require_stable=True) == {0: 9, 1: -1}


def test_offset_delete_through_kafka_python_and_the_wire(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    group = _group()
    wire.call(OFFSET_COMMIT, 9, _commit(group, {0: 4, 1: 6}))
    admin = KafkaAdminClient(bootstrap_servers=broker.kafka_address)
    try:
        deleted = admin.delete_group_offsets(group, [KafkaTopicPartition(TOPIC, 0)])
    finally:
        admin.close()
    assert [error.errno for error in deleted.values()] == [0]
    assert _fetched(wire, 9, group) == {0: -1, 1: 6}
    assert _grpc_committed(broker, group) == {TopicPartition(TOPIC, 1): (6, "m6")}
    unknown = wire.call(
        OFFSET_DELETE,
        0,
        {"group_id": _group(), "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
    )
    assert unknown.error_code == ErrorCode.group_id_not_found


def test_java_consumer_groups_deletes_offsets(broker: KafkaSidecar, wire: KafkaWire) -> None:
    """``kafka-consumer-groups --delete-offsets`` (Kafka 4.1.1's ConsumerGroupCommand):
    FindCoordinator and OffsetDelete, nothing else of the group protocol."""
    group = _group()
    wire.call(OFFSET_COMMIT, 9, _commit(group, {0: 4, 1: 6}))
    done = subprocess.run(
        kafka_tools().command(
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            *("--bootstrap-server", broker.kafka_address, "--group", group),
            *("--delete-offsets", "--topic", f"{TOPIC}:1"),
        ),
        capture_output=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"{TOPIC}" in done.stdout and "Successful" in done.stdout, done.stdout
    assert _fetched(wire, 9, group) == {0: 4, 1: -1}
