"""The group coordinator inside a real sidecar server, on a clock the test moves: offsets
expire ``offsets.retention.minutes`` after their commit (tombstones in the log), and a
partition no longer owned here is unloaded (NOT_COORDINATOR) and loaded afresh when it is
owned again; and, on the real clock, a silent member goes when its session ends. Classic
groups: written to the log each generation, loaded back, their commits checked, one id
one kind of group."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest

from tierlog.api.errors import (
    REASON_KEY,
    CoordinatorLoadInProgressError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    NotCoordinatorError,
    UnknownMemberIdError,
)
from tierlog.api.v1 import admin_service_pb2, admin_service_pb2_grpc, group_service_pb2_grpc
from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.broker.ownership import Broker
from tierlog.coordinator.classic_group import (
    ClassicGroup,
    ClassicGroupState,
    JoinAnswer,
    JoinRequest,
)
from tierlog.coordinator.coordinator import GroupCoordinator, ListedGroup, OffsetToCommit
from tierlog.coordinator.loader import load_offsets
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC
from tierlog.sidecar.config import SidecarConfig
from tierlog.sidecar.server import SidecarServer
from tierlog.storage.topic_partition import TopicPartition

START_MS = 1_700_000_000_000
MINUTE_MS = 60_000


# The generated stub's types are the blocking ones; on an aio channel each call awaits.
AioStub = Any


class Clock:
    def __init__(self) -> None:
        self.now_ms = START_MS

    def __call__(self) -> int:
        return self.now_ms


async def _reason(call: Awaitable[object]) -> str:
    """The Kafka error name ``call`` fails with ("" if it succeeds)."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        trailing = dict(error.trailing_metadata() or ())
        return str(trailing[REASON_KEY])
    return ""


async def _commit(stub: AioStub, group: str, offset: int) -> None:
    request = pb.OffsetCommitRequest(
        group_id=group,
        generation_id=-1,
        partitions=[pb.OffsetCommitPartition(topic="orders", partition=0, offset=offset)],
    )
    while await _reason(stub.OffsetCommit(request)) == "COORDINATOR_LOAD_IN_PROGRESS":
        await asyncio.sleep(0.01)  # the load runs on the server's loop: look again


async def _offsets(stub: AioStub, group: str) -> dict[int, int]:
    response = await stub.OffsetFetch(pb.OffsetFetchRequest(group_id=group))
    return {o.partition: o.offset for o in response.offsets}


Scenario = Callable[[SidecarServer, AioStub], Awaitable[None]]


def _run(tmp_path: Path, scenario: Scenario, configs: Mapping[str, str] | None = None) -> None:
    """``scenario`` against a sidecar server started on this test's loop, with a topic
    ``orders`` and ``__consumer_offsets`` (one partition) made."""
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path / "data"),
            "listeners": "127.0.0.1:0",
            "offsets.topic.num.partitions": "1",
            "offsets.retention.minutes": "1",
            **(configs or {}),
        }
    )

    async def run() -> None:
        server = SidecarServer(config)
        await server.start()
        try:
            async with grpc.aio.insecure_channel(server.address) as channel:
                admin = admin_service_pb2_grpc.AdminServiceStub(channel)
                await admin.CreateTopics(
                    admin_service_pb2.CreateTopicsRequest(
                        topics=[admin_service_pb2.NewTopic(name="orders", num_partitions=1)]
                    )
                )
                stub = group_service_pb2_grpc.GroupServiceStub(channel)
                await stub.FindCoordinator(pb.FindCoordinatorRequest(key="g"))
                await scenario(server, stub)
        finally:
            await server.stop()

    asyncio.run(run())


def test_offsets_expire_on_their_commit_time(tmp_path: Path) -> None:
    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        assert server.groups is not None
        clock = Clock()
        server.groups.clock_ms = clock
        await _commit(stub, "old", 4)
        clock.now_ms += MINUTE_MS // 2
        await _commit(stub, "recent", 7)
        clock.now_ms += MINUTE_MS // 2 - 1
        assert await server.groups.expire_once() == 0
        clock.now_ms += 1  # "old" was committed a minute ago
        assert await server.groups.expire_once() == 1
        assert await _offsets(stub, "old") == {}
        assert await _offsets(stub, "recent") == {0: 7}
        partition_log = server.manager.get_log(TopicPartition(OFFSETS_TOPIC, 0))
        replayed = load_offsets(partition_log, partition_log.log_end_offset)
        assert replayed.groups() == ["recent"]  # the log holds the tombstone

    _run(tmp_path, scenario)


def test_a_partition_owned_elsewhere_is_unloaded_and_loaded_again(tmp_path: Path) -> None:
    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        assert server.groups is not None
        await _commit(stub, "g", 3)
        partitions = server.groups.partitions
        mine = partitions.ownership
        elsewhere = dataclasses.replace(
            mine,
            brokers=(*mine.brokers, Broker(9, "127.0.0.1:1")),
            placed={OFFSETS_TOPIC: (9,)},
            generation=mine.generation + 1,
        )
        partitions.ownership = elsewhere
        assert await _reason(stub.OffsetFetch(pb.OffsetFetchRequest(group_id="g"))) == (
            "NOT_COORDINATOR"
        )
        found = await stub.FindCoordinator(pb.FindCoordinatorRequest(key="g"))
        assert (found.node_id, found.address) == (9, "127.0.0.1:1")
        partitions.ownership = dataclasses.replace(mine, generation=mine.generation + 2)
        await _commit(stub, "g", 5)  # waits out the new load, which finds offset 3 first
        assert await _offsets(stub, "g") == {0: 5}

    _run(tmp_path, scenario)


async def _join(
    stub: AioStub,
    member_id: str,
    group: str = "g",
    names: tuple[str, ...] = ("orders",),
    regex: str | None = None,
) -> pb.ConsumerGroupHeartbeatResponse:
    request = pb.ConsumerGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=0)
    request.subscribed_topic_names.names.extend(names)
    if regex is not None:
        request.subscribed_topic_regex = regex
    while True:
        try:
            response: pb.ConsumerGroupHeartbeatResponse = await stub.ConsumerGroupHeartbeat(request)
            return response
        except grpc.aio.AioRpcError as error:
            if dict(error.trailing_metadata() or ())[REASON_KEY] != "COORDINATOR_LOAD_IN_PROGRESS":
                raise
            await asyncio.sleep(0.01)  # the load runs on the server's loop: look again


def test_members_keep_offsets_expire_by_session_and_an_empty_group_goes(tmp_path: Path) -> None:
    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        assert server.groups is not None
        clock = Clock()
        server.groups.clock_ms = clock
        joined = await _join(stub, "m1")
        assert [tp.partitions for tp in joined.assignment] == [[0]]
        commit = pb.OffsetCommitRequest(
            group_id="g",
            member_id="m1",
            generation_id=joined.member_epoch,
            partitions=[pb.OffsetCommitPartition(topic="orders", partition=0, offset=3)],
        )
        await stub.OffsetCommit(commit)
        clock.now_ms += 2 * MINUTE_MS  # past offsets.retention.minutes: a member keeps them
        assert await server.groups.expire_once() == 0
        assert await server.groups.expire_sessions_once() == [("g", "m1")]  # 45 s silent
        described = await stub.DescribeGroups(pb.DescribeGroupsRequest(group_id="g"))
        assert described.state == "Empty" and list(described.members) == []
        assert await server.groups.expire_once() == 1  # now the empty group's offsets go
        assert await _reason(stub.DescribeGroups(pb.DescribeGroupsRequest(group_id="g"))) == (
            "GROUP_ID_NOT_FOUND"
        )
        partition_log = server.manager.get_log(TopicPartition(OFFSETS_TOPIC, 0))
        replayed = load_offsets(partition_log, partition_log.log_end_offset)
        assert replayed.groups() == []  # the log's tombstones say so too

    _run(tmp_path, scenario)


def test_a_silent_member_goes_when_its_session_ends_not_at_the_next_scan(tmp_path: Path) -> None:
    """Kafka times each member's session; a coordinator that only looked every quarter
    session removed a member up to that much late. Five members join a tenth of that
    quarter apart and fall silent: each goes within a fraction of it after its session."""
    session_ms = 2000
    scan_s = session_ms / 4000  # how often sessions used to be looked at

    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        session_ends: dict[str, float] = {}
        for n in range(5):
            member_id = f"m{n}"
            await _join(stub, member_id)
            session_ends[member_id] = time.time() + session_ms / 1000  # answered by now
            await asyncio.sleep(scan_s / 5)
        lateness_s: dict[str, float] = {}
        deadline = time.monotonic() + session_ms / 1000 + 5
        while len(lateness_s) < len(session_ends) and time.monotonic() < deadline:
            described = await stub.DescribeGroups(pb.DescribeGroupsRequest(group_id="g"))
            present = {member.member_id for member in described.members}
            for member_id, ends in session_ends.items():
                if member_id not in present and member_id not in lateness_s:
                    lateness_s[member_id] = time.time() - ends
            await asyncio.sleep(0.01)
        assert sorted(lateness_s) == sorted(session_ends), "a member was never removed"
        assert min(lateness_s.values()) > -0.05  # not before its session ended
        assert max(lateness_s.values()) < scan_s / 2, lateness_s

    _run(tmp_path, scenario, {"group.consumer.session.timeout.ms": str(session_ms)})


_CLASSIC = {
    "group.initial.rebalance.delay.ms": "50",
    "group.min.session.timeout.ms": "100",
}


def _classic_join(member_id: str = "", session_timeout_ms: int = 60_000) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(("range", b"orders"),),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=60_000,
        client_id="c",
    )


async def _classic_member(
    groups: GroupCoordinator, group: str, session_timeout_ms: int = 60_000
) -> JoinAnswer:
    """A member that joined ``group`` alone and synced its assignment ``p0``."""
    while True:
        try:
            await groups.join_group(group, _classic_join())
        except MemberIdRequiredError as required:
            member_id = required.member_id
            break
        except CoordinatorLoadInProgressError:
            await asyncio.sleep(0.01)  # the load runs on the server's loop: look again
    joined = await groups.join_group(group, _classic_join(member_id, session_timeout_ms))
    assignment = {member_id: b"p0"}
    assert await groups.sync_group(group, member_id, joined.generation, assignment) == b"p0"
    return joined


def _loaded_classic(server: SidecarServer, group: str) -> ClassicGroup | None:
    partition_log = server.manager.get_log(TopicPartition(OFFSETS_TOPIC, 0))
    return load_offsets(partition_log, partition_log.log_end_offset).classic_group(group)


def test_a_classic_group_is_in_the_log_each_generation_and_loaded_by_a_new_coordinator(
    tmp_path: Path,
) -> None:
    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        groups = server.groups
        assert groups is not None
        joined = await _classic_member(groups, "c")
        member, generation = joined.member_id, joined.generation
        loaded = _loaded_classic(server, "c")
        assert loaded is not None and loaded.state == ClassicGroupState.STABLE
        assert (loaded.generation, list(loaded.members)) == (generation, [member])
        assert loaded.members[member].assignment == b"p0"
        orders0 = [OffsetToCommit(TopicPartition("orders", 0), 5)]
        with pytest.raises(IllegalGenerationError):
            await groups.commit("c", orders0, member_id=member, generation_id=generation - 1)
        with pytest.raises(UnknownMemberIdError):
            await groups.commit("c", orders0, member_id="stranger", generation_id=generation)
        await groups.commit("c", orders0, member_id=member, generation_id=generation)

        # A second member's join waits for the first to rejoin; the partition moves away.
        with pytest.raises(MemberIdRequiredError) as required:
            await groups.join_group("c", _classic_join())
        second = asyncio.ensure_future(
            groups.join_group("c", _classic_join(required.value.member_id))
        )
        await asyncio.sleep(0.01)
        assert groups.describe("c") == ClassicGroupState.PREPARING_REBALANCE
        partitions = groups.partitions
        mine = partitions.ownership
        partitions.ownership = dataclasses.replace(
            mine,
            brokers=(*mine.brokers, Broker(9, "127.0.0.1:1")),
            placed={OFFSETS_TOPIC: (9,)},
            generation=mine.generation + 1,
        )
        with pytest.raises(NotCoordinatorError):
            groups.classic_heartbeat("c", member, generation)
        with pytest.raises(NotCoordinatorError):  # the long poll is answered, not left hanging
            await asyncio.wait_for(second, 5)

        # Back here: loaded from the log, at the generation it was written at.
        partitions.ownership = dataclasses.replace(mine, generation=mine.generation + 2)
        while True:
            try:
                groups.classic_heartbeat("c", member, generation)
                break
            except CoordinatorLoadInProgressError:
                await asyncio.sleep(0.01)
        await groups.commit("c", orders0, member_id=member, generation_id=generation)
        assert await groups.sync_group("c", member, generation, {}) == b"p0"

    _run(tmp_path, scenario, _CLASSIC)


def test_a_silent_classic_member_goes_at_its_session_timeout_and_the_empty_group_is_written(
    tmp_path: Path,
) -> None:
    session_ms = 300

    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        groups = server.groups
        assert groups is not None
        joined = await _classic_member(groups, "c", session_ms)
        deadline = time.monotonic() + session_ms / 1000 + 5
        while groups.describe("c") != ClassicGroupState.EMPTY:
            assert time.monotonic() < deadline, "the silent member was never removed"
            await asyncio.sleep(0.01)
        loaded = _loaded_classic(server, "c")
        assert loaded is not None and loaded.state == ClassicGroupState.EMPTY
        assert (loaded.generation, loaded.members) == (joined.generation + 1, {})
        listed = [g for g in groups.list_groups() if g.group_id == "c"]
        assert listed == [ListedGroup("c", "Empty", "classic", "consumer")]

    _run(tmp_path, scenario, _CLASSIC)


def test_a_group_id_is_either_a_classic_or_a_consumer_group(tmp_path: Path) -> None:
    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        groups = server.groups
        assert groups is not None
        await _join(stub, "m1")  # KIP-848 group "g"
        with pytest.raises(InconsistentGroupProtocolError):
            await groups.join_group("g", _classic_join())
        await _classic_member(groups, "c")
        heartbeat = pb.ConsumerGroupHeartbeatRequest(group_id="c", member_id="m", member_epoch=0)
        heartbeat.subscribed_topic_names.names.append("orders")
        assert await _reason(stub.ConsumerGroupHeartbeat(heartbeat)) == (
            "INCONSISTENT_GROUP_PROTOCOL"
        )
        described = await stub.DescribeGroups(pb.DescribeGroupsRequest(group_id="c"))
        assert (described.state, described.protocol_type) == ("Stable", "consumer")

    _run(tmp_path, scenario, _CLASSIC)


def test_a_subscription_resolves_to_internal_topics_as_any_other(tmp_path: Path) -> None:
    """As Kafka 4.1's coordinator: a regex is matched against every topic, internal ones
    included, and a subscribed name that exists is assigned (franz-go's
    Test848RegexBrokerResolves expects ``__consumer_offsets`` from its regex)."""

    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        by_regex = await _join(stub, "m1", "by-regex", names=(), regex="__consumer_.*|ord.*")
        by_name = await _join(stub, "m2", "by-name", names=(OFFSETS_TOPIC,))
        assert sorted(tp.topic for tp in by_regex.assignment) == [OFFSETS_TOPIC, "orders"]
        assert [tp.topic for tp in by_name.assignment] == [OFFSETS_TOPIC]

    _run(tmp_path, scenario)
