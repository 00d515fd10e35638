"""ConsumerGroupHeartbeat (KIP-848) on a real sidecar: members split a topic's partitions,
a joining member moves each partition at most once, a silent member is removed after
the session timeout, a ``kill -9`` of the sidecar keeps the group, and Kafka's typed
errors for unknown members, fenced epochs and stale commits."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.api.v1 import group_service_pb2_grpc

from .conftest import Sidecar, SidecarFactory, reason_of

GROUP = "billing"
SESSION_MS = 1500
CONFIGS = (
    "offsets.topic.num.partitions=1",
    f"group.consumer.session.timeout.ms={SESSION_MS}",
    "group.consumer.heartbeat.interval.ms=100",
)

Owned = frozenset[int]  # partitions of "orders"


def _stub(sidecar: Sidecar) -> group_service_pb2_grpc.GroupServiceStub:
    return group_service_pb2_grpc.GroupServiceStub(sidecar.channel)


def _call_loaded(
    sidecar: Sidecar, request: pb.ConsumerGroupHeartbeatRequest
) -> pb.ConsumerGroupHeartbeatResponse:
    """A heartbeat, asked again while the coordinator loads the group's partition."""
    deadline = time.monotonic() + 10
    while True:
        try:
            response: pb.ConsumerGroupHeartbeatResponse = _stub(sidecar).ConsumerGroupHeartbeat(
                request
            )
            return response
        except grpc.RpcError as error:
            if reason_of(error) != "COORDINATOR_LOAD_IN_PROGRESS" or time.monotonic() > deadline:
                raise
            time.sleep(0.02)  # the load runs in the sidecar: look again


@dataclass
class Member:
    """A member driven by hand: it consumes what it was last told to, and says so."""

    member_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    epoch: int = 0
    owned: Owned = frozenset()
    gained: list[int] = field(default_factory=list)

    def heartbeat(self, sidecar: Sidecar) -> pb.ConsumerGroupHeartbeatResponse:
        request = pb.ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id=self.member_id,
            member_epoch=self.epoch,
            rebalance_timeout_ms=-1,
            client_id=f"client-{self.member_id[:4]}",
            owned=pb.OwnedPartitions(
                topics=[pb.TopicPartitions(topic="orders", partitions=sorted(self.owned))]
            ),
        )
        if self.epoch == 0:
            request.subscribed_topic_names.names.append("orders")
        response = _call_loaded(sidecar, request)
        now: Owned = frozenset(
            p for entry in response.assignment if entry.topic == "orders" for p in entry.partitions
        )
        self.gained += sorted(now - self.owned)
        self.epoch, self.owned = response.member_epoch, now
        return response


def _settle(sidecar: Sidecar, members: list[Member], total: int) -> None:
    """Heartbeat every member until all partitions are owned and the group is Stable."""
    for _ in range(50):
        for member in members:
            member.heartbeat(sidecar)
        owned = [p for member in members for p in member.owned]
        assert len(owned) == len(set(owned)), "a partition owned by two members"
        state = _stub(sidecar).DescribeGroups(pb.DescribeGroupsRequest(group_id=GROUP)).state
        if state == "Stable" and len(owned) == total:
            return
    raise AssertionError("the group did not settle")


@pytest.fixture
def sidecar(sidecar_factory: SidecarFactory, tmp_path: Path) -> Sidecar:
    started = sidecar_factory(tmp_path / "data", *CONFIGS)
    started.create_topic("orders", partitions=6)
    return started


def test_two_members_split_six_partitions_and_a_third_moves_each_at_most_once(
    sidecar: Sidecar,
) -> None:
    a, b = Member(), Member()
    first = a.heartbeat(sidecar)
    assert first.heartbeat_interval_ms == 100 and first.session_timeout_ms == SESSION_MS
    _settle(sidecar, [a, b], 6)
    assert sorted([len(a.owned), len(b.owned)]) == [3, 3]
    before = {id(a): a.owned, id(b): b.owned}
    for member in (a, b):
        member.gained.clear()
    c = Member()
    _settle(sidecar, [a, b, c], 6)
    assert [len(m.owned) for m in (a, b, c)] == [2, 2, 2]
    assert a.owned <= before[id(a)] and b.owned <= before[id(b)]
    assert a.gained == [] and b.gained == [] and sorted(c.gained) == sorted(c.owned)

    described = _stub(sidecar).DescribeGroups(pb.DescribeGroupsRequest(group_id=GROUP))
    assert described.protocol_type == "consumer"
    assert sorted(m.member_id for m in described.members) == sorted(m.member_id for m in (a, b, c))
    by_id = {m.member_id: m for m in described.members}
    assert {p.partition for p in by_id[c.member_id].assignment} == c.owned
    assert by_id[c.member_id].host == "/127.0.0.1"
    assert by_id[c.member_id].client_id == f"client-{c.member_id[:4]}"


def test_a_silent_member_is_removed_after_the_session_timeout(sidecar: Sidecar) -> None:
    a, b = Member(), Member()
    _settle(sidecar, [a, b], 6)
    silent_since = time.monotonic()
    # b stops heartbeating; a keeps going until it owns everything.
    while len(a.owned) < 6:
        a.heartbeat(sidecar)
        assert time.monotonic() - silent_since < SESSION_MS / 1000 + 5, "b never expired"
        time.sleep(0.1)  # a heartbeat interval: the member's own pace
    assert time.monotonic() - silent_since >= SESSION_MS / 1000 * 0.9
    with pytest.raises(grpc.RpcError) as gone:
        b.heartbeat(sidecar)
    assert reason_of(gone.value) == "UNKNOWN_MEMBER_ID"


def test_the_group_survives_a_kill_9_of_the_sidecar(sidecar: Sidecar) -> None:
    a, b = Member(), Member()
    _settle(sidecar, [a, b], 6)
    epochs = (a.epoch, b.epoch)
    owned = (a.owned, b.owned)
    sidecar.kill()
    sidecar.start()
    # Same members, same epochs, same partitions: nothing to reconcile.
    a.heartbeat(sidecar)
    b.heartbeat(sidecar)
    assert (a.epoch, b.epoch) == epochs and (a.owned, b.owned) == owned
    described = _stub(sidecar).DescribeGroups(pb.DescribeGroupsRequest(group_id=GROUP))
    assert described.state == "Stable" and len(described.members) == 2


def test_unknown_members_fenced_epochs_and_stale_commits_get_kafkas_errors(
    sidecar: Sidecar,
) -> None:
    a = Member()
    _settle(sidecar, [a], 6)

    def failure(request: pb.ConsumerGroupHeartbeatRequest) -> str:
        with pytest.raises(grpc.RpcError) as caught:
            _stub(sidecar).ConsumerGroupHeartbeat(request)
        return reason_of(caught.value)

    unknown = pb.ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id="nobody", member_epoch=1)
    assert failure(unknown) == "UNKNOWN_MEMBER_ID"
    ahead = pb.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id=a.member_id, member_epoch=a.epoch + 5
    )
    assert failure(ahead) == "FENCED_MEMBER_EPOCH"
    odd_assignor = pb.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id="x", member_epoch=0, server_assignor="sticky"
    )
    odd_assignor.subscribed_topic_names.names.append("orders")
    assert failure(odd_assignor) == "UNSUPPORTED_ASSIGNOR"

    def commit(member_id: str, epoch: int) -> str:
        request = pb.OffsetCommitRequest(
            group_id=GROUP,
            member_id=member_id,
            generation_id=epoch,
            partitions=[pb.OffsetCommitPartition(topic="orders", partition=0, offset=1)],
        )
        try:
            _stub(sidecar).OffsetCommit(request)
        except grpc.RpcError as error:
            return reason_of(error)
        return ""

    assert commit(a.member_id, a.epoch) == ""
    assert commit(a.member_id, a.epoch - 1) == "STALE_MEMBER_EPOCH"
    assert commit("", -1) == "UNKNOWN_MEMBER_ID"  # the group has members
    busy = _stub(sidecar).DeleteGroups(pb.DeleteGroupsRequest(group_ids=[GROUP])).results[0]
    assert busy.error.reason == "NON_EMPTY_GROUP"


def test_a_member_that_leaves_hands_its_partitions_over_and_the_empty_group_can_go(
    sidecar: Sidecar,
) -> None:
    a, b = Member(), Member()
    _settle(sidecar, [a, b], 6)
    left = _call_loaded(
        sidecar,
        pb.ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=b.member_id, member_epoch=-1),
    )
    assert left.member_epoch == -1
    _settle(sidecar, [a], 6)
    assert a.owned == frozenset(range(6))
    _call_loaded(
        sidecar,
        pb.ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=a.member_id, member_epoch=-1),
    )
    described = _stub(sidecar).DescribeGroups(pb.DescribeGroupsRequest(group_id=GROUP))
    assert described.state == "Empty" and list(described.members) == []
    result = _stub(sidecar).DeleteGroups(pb.DeleteGroupsRequest(group_ids=[GROUP])).results[0]
    assert not result.HasField("error")
