"""GroupService on a real sidecar: offsets committed to ``__consumer_offsets``, fetched,
deleted, kept across a ``kill -9``, and Kafka's typed errors for bad requests."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from tests.support.sidecars import free_port
from tierlog.api.v1 import admin_service_pb2, common_pb2, group_service_pb2_grpc, log_service_pb2
from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for_group

from .conftest import Sidecar, SidecarFactory, reason_of

PARTITIONS = "offsets.topic.num.partitions=3"


def _groups(sidecar: Sidecar) -> group_service_pb2_grpc.GroupServiceStub:
    return group_service_pb2_grpc.GroupServiceStub(sidecar.channel)


def _commit(
    sidecar: Sidecar, group: str, offsets: dict[tuple[str, int], int], metadata: str = ""
) -> pb.OffsetCommitResponse:
    response: pb.OffsetCommitResponse = _groups(sidecar).OffsetCommit(
        pb.OffsetCommitRequest(
            group_id=group,
            generation_id=-1,
            partitions=[
                pb.OffsetCommitPartition(
                    topic=topic, partition=p, offset=offset, leader_epoch=-1, metadata=metadata
                )
                for (topic, p), offset in offsets.items()
            ],
        )
    )
    return response


def _fetch(sidecar: Sidecar, group: str) -> dict[tuple[str, int], int]:
    response = _groups(sidecar).OffsetFetch(pb.OffsetFetchRequest(group_id=group))
    return {(o.topic, o.partition): o.offset for o in response.offsets}


def _coordinated(sidecar: Sidecar, group: str) -> pb.FindCoordinatorResponse:
    """FindCoordinator at ``sidecar``; when it is the coordinator, once the group's
    partition is loaded (COORDINATOR_LOAD_IN_PROGRESS is the answer until then)."""
    found: pb.FindCoordinatorResponse = _groups(sidecar).FindCoordinator(
        pb.FindCoordinatorRequest(key=group)
    )
    if found.address != sidecar.address:
        return found
    deadline = time.monotonic() + 10
    while True:
        try:
            _fetch(sidecar, group)
            return found
        except grpc.RpcError as error:
            assert reason_of(error) == "COORDINATOR_LOAD_IN_PROGRESS"
            assert time.monotonic() < deadline, "the group's partition never loaded"
            time.sleep(0.02)  # the load runs in the sidecar: look again


@pytest.fixture
def groups_sidecar(sidecar_factory: SidecarFactory, tmp_path: Path) -> Sidecar:
    sidecar = sidecar_factory(tmp_path / "data", PARTITIONS)
    sidecar.create_topic("orders", partitions=2)
    return sidecar


def test_find_coordinator_creates_the_compacted_offsets_topic(groups_sidecar: Sidecar) -> None:
    found = _coordinated(groups_sidecar, "billing")
    assert found.address == groups_sidecar.address
    partition_dir = groups_sidecar.data_dir / f"{OFFSETS_TOPIC}-{partition_for_group('billing', 3)}"
    assert partition_dir.is_dir()
    described = groups_sidecar.admin.DescribeConfigs(
        admin_service_pb2.DescribeConfigsRequest(topic=OFFSETS_TOPIC)
    )
    configs = {entry.name: entry.value for entry in described.entries}
    assert configs["cleanup.policy"] == "compact"
    assert configs["segment.bytes"] == str(100 * 1024 * 1024)


def test_commits_survive_kill_9(groups_sidecar: Sidecar) -> None:
    _coordinated(groups_sidecar, "billing")
    response = _commit(groups_sidecar, "billing", {("orders", 0): 5, ("orders", 1): 7}, "m")
    assert [r.HasField("error") for r in response.results] == [False, False]
    _commit(groups_sidecar, "billing", {("orders", 0): 9})
    groups_sidecar.kill()  # acknowledged, then kill -9: no flush, no clean shutdown
    groups_sidecar.start()
    _coordinated(groups_sidecar, "billing")
    assert _fetch(groups_sidecar, "billing") == {("orders", 0): 9, ("orders", 1): 7}


def test_fetch_of_named_partitions_answers_minus_one_for_the_uncommitted(
    groups_sidecar: Sidecar,
) -> None:
    _coordinated(groups_sidecar, "g")
    _commit(groups_sidecar, "g", {("orders", 0): 3})
    response = _groups(groups_sidecar).OffsetFetch(
        pb.OffsetFetchRequest(
            group_id="g",
            partitions=[
                pb.TopicPartitionRef(topic="orders", partition=0),
                pb.TopicPartitionRef(topic="orders", partition=1),
            ],
            require_stable=True,
        )
    )
    assert [(o.partition, o.offset) for o in response.offsets] == [(0, 3), (1, -1)]
    assert response.offsets[0].commit_timestamp_ms > 0


def test_offset_delete_and_delete_groups_write_tombstones(groups_sidecar: Sidecar) -> None:
    _coordinated(groups_sidecar, "g")
    _commit(groups_sidecar, "g", {("orders", 0): 3, ("orders", 1): 4})
    _groups(groups_sidecar).OffsetDelete(
        pb.OffsetDeleteRequest(
            group_id="g", partitions=[pb.TopicPartitionRef(topic="orders", partition=0)]
        )
    )
    assert _fetch(groups_sidecar, "g") == {("orders", 1): 4}
    listed = _groups(groups_sidecar).ListGroups(pb.ListGroupsRequest())
    assert [(g.group_id, g.state) for g in listed.groups] == [("g", "Empty")]
    _coordinated(groups_sidecar, "nope")
    deleted = _groups(groups_sidecar).DeleteGroups(pb.DeleteGroupsRequest(group_ids=["g", "nope"]))
    assert [(r.group_id, r.error.reason) for r in deleted.results] == [
        ("g", ""),
        ("nope", "GROUP_ID_NOT_FOUND"),
    ]
    assert _fetch(groups_sidecar, "g") == {}
    groups_sidecar.kill()
    groups_sidecar.start()
    _coordinated(groups_sidecar, "g")
    assert _fetch(groups_sidecar, "g") == {}


def test_typed_errors(groups_sidecar: Sidecar) -> None:
    stub = _groups(groups_sidecar)
    with pytest.raises(grpc.RpcError) as empty:
        stub.FindCoordinator(pb.FindCoordinatorRequest(key=""))
    assert reason_of(empty.value) == "INVALID_GROUP_ID"
    with pytest.raises(grpc.RpcError) as empty_commit:
        _commit(groups_sidecar, "", {("orders", 0): 1})
    assert reason_of(empty_commit.value) == "INVALID_GROUP_ID"
    _coordinated(groups_sidecar, "g")
    response = _commit(groups_sidecar, "g", {("orders", 0): 1, ("orders", 7): 1, ("missing", 0): 1})
    assert [r.error.reason for r in response.results] == [
        "",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "UNKNOWN_TOPIC_OR_PARTITION",
    ]
    too_large = _commit(groups_sidecar, "g", {("orders", 1): 1}, metadata="x" * 4097)
    assert [r.error.reason for r in too_large.results] == ["OFFSET_METADATA_TOO_LARGE"]
    assert _fetch(groups_sidecar, "g") == {("orders", 0): 1}
    _coordinated(groups_sidecar, "nobody")
    with pytest.raises(grpc.RpcError) as unknown:
        stub.DescribeGroups(pb.DescribeGroupsRequest(group_id="nobody"))
    assert reason_of(unknown.value) == "GROUP_ID_NOT_FOUND"
    with pytest.raises(grpc.RpcError) as member:
        stub.OffsetCommit(pb.OffsetCommitRequest(group_id="g", member_id="m-1", generation_id=3))
    assert reason_of(member.value) == "UNKNOWN_MEMBER_ID"


def test_clients_cannot_write_to_the_offsets_topic(groups_sidecar: Sidecar) -> None:
    """Garbage there would stop the group's coordinator from loading: refused, as Kafka
    refuses appends to internal topics, and the group's offsets stay readable."""
    _coordinated(groups_sidecar, "g")
    _commit(groups_sidecar, "g", {("orders", 0): 2})
    junk = log_service_pb2.ProduceRequest(
        topic=OFFSETS_TOPIC,
        partition=partition_for_group("g", 3),
        records=log_service_pb2.RecordList(records=[common_pb2.Record(key=b"junk", value=b"x")]),
    )
    with pytest.raises(grpc.RpcError) as refused:
        groups_sidecar.log.Produce(junk)
    assert reason_of(refused.value) == "INVALID_TOPIC_EXCEPTION"
    streamed = groups_sidecar.log.ProduceStream(
        iter([log_service_pb2.ProduceStreamRequest(produce=junk)])
    )
    assert [answer.error.reason for answer in streamed] == ["INVALID_TOPIC_EXCEPTION"]
    groups_sidecar.kill()
    groups_sidecar.start()
    _coordinated(groups_sidecar, "g")
    assert _fetch(groups_sidecar, "g") == {("orders", 0): 2}


def test_a_broker_that_does_not_lead_the_partition_is_not_coordinator(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """Two brokers split the partitions by the hash of the broker list; a group's calls at
    the broker that does not own its partition get NOT_COORDINATOR, and FindCoordinator
    (at either) names the owner."""
    ports = [free_port(), free_port()]
    brokers = ",".join(f"{i}@127.0.0.1:{port}" for i, port in enumerate(ports))
    sidecars = []
    for node, port in enumerate(ports):
        sidecar = Sidecar(
            tmp_path / f"b{node}",
            (PARTITIONS, f"node.id={node}", f"tierlog.cluster.brokers={brokers}"),
            port=port,
        )
        sidecars.append(sidecar.start())
    try:
        for sidecar in sidecars:
            sidecar.create_topic("orders", partitions=2)
        groups = [f"group-{i}" for i in range(8)]
        owners = {group: _coordinated(sidecars[0], group).node_id for group in groups}
        assert set(owners.values()) == {0, 1}
        for group, owner in owners.items():
            assert _coordinated(sidecars[1], group).node_id == owner
            other = sidecars[1 - owner]
            _coordinated(other, group)
            with pytest.raises(grpc.RpcError) as refused:
                _fetch(other, group)
            assert reason_of(refused.value) == "NOT_COORDINATOR"
    finally:
        for sidecar in sidecars:
            sidecar.kill()
