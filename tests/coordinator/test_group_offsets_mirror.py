"""The groups' offsets of tiered topics follow the coordinator into the bucket (a real
sidecar server and its local-directory tier; failures injected with ``FaultyStore``).

Only offsets of tiered topics go, one object a group; a pass writes only groups whose
tiered offsets changed, deletes the object of a group that has none left (also one
another broker wrote: the coordinator tells the mirror of each deletion, also of each
its partition's log held when it loaded it), and a store
that is down is caught up at the next pass. The server's own mirror writes at the
uploader's pace (``remote.log.manager.task.interval.ms``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc

from tests.coordinator.test_coordinator import AioStub, _reason, _run
from tests.storage.tier.faults import FaultyStore
from tierlog.api.v1 import admin_service_pb2, admin_service_pb2_grpc
from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.coordinator.group_offsets_mirror import GroupOffsetsMirror
from tierlog.sidecar.server import SidecarServer
from tierlog.storage.tier.group_offsets import (
    GroupOffsets,
    TieredOffset,
    load_group_offsets,
    put_group_offsets,
)
from tierlog.storage.topic_partition import TopicPartition

TIERED = TopicPartition("tiered", 0)
LOCAL = TopicPartition("orders", 0)  # made by ``_run``, not tiered
AN_HOUR_MS = 3_600_000
EPOCH = 0  # the commits' leader epoch (the gRPC field left at its default)


async def _make_tiered_topic(server: SidecarServer) -> None:
    async with grpc.aio.insecure_channel(server.address) as channel:
        admin = admin_service_pb2_grpc.AdminServiceStub(channel)
        topic = admin_service_pb2.NewTopic(
            name=TIERED.topic, num_partitions=1, configs={"remote.storage.enable": "true"}
        )
        await admin.CreateTopics(admin_service_pb2.CreateTopicsRequest(topics=[topic]))


async def _commit(stub: AioStub, group: str, offsets: dict[TopicPartition, int]) -> None:
    request = pb.OffsetCommitRequest(
        group_id=group,
        generation_id=-1,
        partitions=[
            pb.OffsetCommitPartition(topic=tp.topic, partition=tp.partition, offset=offset)
            for tp, offset in offsets.items()
        ],
    )
    while await _reason(stub.OffsetCommit(request)) == "COORDINATOR_LOAD_IN_PROGRESS":
        await asyncio.sleep(0.01)  # the load runs on the server's loop: look again


async def _tiered(server: SidecarServer) -> tuple[GroupOffsetsMirror, FaultyStore]:
    """The tiered topic made, and a mirror the test drives pass by pass, told of
    deletions in the place of the server's own (which waits an hour), with the store it
    writes to."""
    assert server.groups is not None
    await _make_tiered_topic(server)
    store = FaultyStore(server.tier_store)
    mirror = GroupOffsetsMirror(
        store,
        server.groups,
        lambda topic: server.topics.log_config(topic).remote_storage_enable,
        AN_HOUR_MS,
    )
    server.groups.on_offsets_deleted = mirror.offsets_deleted
    return mirror, store


def test_only_changed_tiered_offsets_are_written_and_a_deleted_group_goes(
    tmp_path: Path,
) -> None:
    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        assert server.groups is not None
        mirror, _store = await _tiered(server)
        await _commit(stub, "reader", {LOCAL: 3, TIERED: 5})
        await _commit(stub, "local-only", {LOCAL: 1})
        assert await mirror.write_once() == (["reader"], [])
        assert load_group_offsets(server.tier_store) == [
            GroupOffsets("reader", {TIERED: TieredOffset(5, EPOCH)})
        ]

        await _commit(stub, "reader", {LOCAL: 4, TIERED: 5})  # the tiered one as it was
        assert await mirror.write_once() == ([], [])
        await _commit(stub, "reader", {TIERED: 8})
        assert await mirror.write_once() == (["reader"], [])
        [written] = load_group_offsets(server.tier_store)
        assert written.offsets == {TIERED: TieredOffset(8, EPOCH)}

        await server.groups.delete_group("reader")
        assert await mirror.write_once() == ([], ["reader"])
        assert load_group_offsets(server.tier_store) == []

    _run(tmp_path, scenario, {"remote.log.manager.task.interval.ms": str(AN_HOUR_MS)})


def test_a_group_deleted_before_this_broker_wrote_it_loses_the_object_another_wrote(
    tmp_path: Path,
) -> None:
    """The object of the group's previous coordinator (or of this broker before a
    restart) goes with a DeleteGroups here, before this broker's first pass: the server's
    own mirror is told of the deletion."""

    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        assert server.groups is not None and server.group_offsets_mirror is not None
        await _make_tiered_topic(server)
        await _commit(stub, "reader", {TIERED: 5})
        put_group_offsets(server.tier_store, GroupOffsets("reader", {TIERED: TieredOffset(5)}))
        await server.groups.delete_group("reader")
        assert await server.group_offsets_mirror.write_once() == ([], ["reader"])
        assert load_group_offsets(server.tier_store) == []

    _run(tmp_path, scenario, {"remote.log.manager.task.interval.ms": str(AN_HOUR_MS)})


def test_a_deletion_no_pass_followed_here_is_found_in_the_log_by_the_next_coordinator(
    tmp_path: Path,
) -> None:
    """A group deleted by a coordinator that stopped (or lost the partition) before its
    pass: whoever loads the partition next finds the tombstones and deletes the object,
    and a group whose offsets came back after its tombstones keeps its object."""

    async def delete_then_stop(server: SidecarServer, stub: AioStub) -> None:
        assert server.groups is not None
        await _make_tiered_topic(server)
        for group in ("gone", "back"):
            await _commit(stub, group, {TIERED: 5})
            put_group_offsets(server.tier_store, GroupOffsets(group, {TIERED: TieredOffset(5)}))
            await server.groups.delete_group(group)
        await _commit(stub, "back", {TIERED: 9})

    async def load_then_pass(server: SidecarServer, stub: AioStub) -> None:
        assert server.group_offsets_mirror is not None
        await _commit(stub, "other", {LOCAL: 1})  # answered once the partition is loaded
        assert await server.group_offsets_mirror.write_once() == (["back"], ["gone"])
        assert load_group_offsets(server.tier_store) == [
            GroupOffsets("back", {TIERED: TieredOffset(9, EPOCH)})
        ]

    configs = {"remote.log.manager.task.interval.ms": str(AN_HOUR_MS)}
    _run(tmp_path, delete_then_stop, configs)
    _run(tmp_path, load_then_pass, configs)


def test_a_deletion_is_owed_through_an_outage_and_void_once_the_group_commits_again(
    tmp_path: Path,
) -> None:
    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        assert server.groups is not None
        mirror, faulty = await _tiered(server)
        for group in ("gone", "back"):
            await _commit(stub, group, {TIERED: 5})
            put_group_offsets(server.tier_store, GroupOffsets(group, {TIERED: TieredOffset(5)}))
            await server.groups.delete_group(group)
        await _commit(stub, "back", {TIERED: 9})  # the same id in use again
        faulty.outage()
        assert await mirror.write_once() == ([], [])
        faulty.heal()
        assert await mirror.write_once() == (["back"], ["gone"])
        assert load_group_offsets(server.tier_store) == [
            GroupOffsets("back", {TIERED: TieredOffset(9, EPOCH)})
        ]
        assert await mirror.write_once() == ([], [])  # nothing owed any more

    _run(tmp_path, scenario, {"remote.log.manager.task.interval.ms": str(AN_HOUR_MS)})


def test_a_store_that_is_down_is_caught_up_at_the_next_pass(tmp_path: Path) -> None:
    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        mirror, faulty = await _tiered(server)
        await _commit(stub, "reader", {TIERED: 5})
        faulty.outage()
        assert await mirror.write_once() == ([], [])
        faulty.heal()
        assert await mirror.write_once() == (["reader"], [])
        assert load_group_offsets(server.tier_store) == [
            GroupOffsets("reader", {TIERED: TieredOffset(5, EPOCH)})
        ]

    _run(tmp_path, scenario, {"remote.log.manager.task.interval.ms": str(AN_HOUR_MS)})


def test_the_servers_mirror_writes_at_the_uploaders_pace(tmp_path: Path) -> None:
    interval_ms = 100

    async def scenario(server: SidecarServer, stub: AioStub) -> None:
        await _make_tiered_topic(server)
        await _commit(stub, "reader", {TIERED: 5})
        deadline = time.monotonic() + 100 * interval_ms / 1000  # a loaded machine's margin
        while not load_group_offsets(server.tier_store):
            assert time.monotonic() < deadline, "the group's offsets never reached the bucket"
            await asyncio.sleep(interval_ms / 1000)
        assert load_group_offsets(server.tier_store) == [
            GroupOffsets("reader", {TIERED: TieredOffset(5, EPOCH)})
        ]

    _run(tmp_path, scenario, {"remote.log.manager.task.interval.ms": str(interval_ms)})
