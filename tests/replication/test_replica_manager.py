"""The replica manager in-process, over a real directory store and real logs: what it
does when passes over the store overlap."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from tierlog.broker.topics import TopicStore
from tierlog.broker.watch import AppendWatch
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState
from tierlog.replication.config import DirectoryStore, ReplicationConfig
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.storage.config import LogConfig
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.topic_partition import TopicPartition


def _no_channel(address: str) -> grpc.aio.Channel:
    raise AssertionError(f"a broker leading every partition dialled {address}")


def test_passes_over_the_store_that_overlap_delete_a_topic_once(tmp_path: Path) -> None:
    store = LocalStateStore(tmp_path / "state")
    data = tmp_path / "data"
    data.mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    replicas = ReplicaManager(
        0,
        lambda: 1,
        store,
        logs,
        TopicStore([data], LogConfig()),
        AppendWatch(),
        dict,
        _no_channel,
        [],
        ReplicationConfig(store=DirectoryStore(tmp_path / "state")),
    )

    async def create_then_delete() -> None:
        store.create_topic("orders", {p: PartitionState.new((0,)) for p in range(3)})
        await replicas.poll_once()
        assert {tp.topic for tp in logs.partitions} == {"orders"}
        store.delete_topic("orders")
        # The admin service's pass after a DeleteTopics, beside the periodic one: both
        # see the topic gone.
        await asyncio.gather(replicas.poll_once(), replicas.poll_once())

    try:
        asyncio.run(create_then_delete())
        assert not list(logs.partitions)
        assert not [path for path in data.iterdir() if path.name.startswith("orders-")]
    finally:
        logs.shutdown()


def test_a_leader_whose_address_changes_is_fetched_from_at_the_new_one(tmp_path: Path) -> None:
    """As when the operator's plan first names a pod by a DNS name the follower cannot
    resolve yet, then by its address: the follower must move its fetches over, not keep
    asking the old address (seen: an acks=all produce waited 20 s for such a follower)."""
    store = LocalStateStore(tmp_path / "state")
    data = tmp_path / "data"
    data.mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    addresses = {1: "shrink-1.shrink-brokers.ns.svc:9092"}
    dialled: list[str] = []

    def channel(address: str) -> grpc.aio.Channel:
        dialled.append(address)
        return grpc.aio.insecure_channel(address)

    replicas = ReplicaManager(
        0,
        lambda: 1,
        store,
        logs,
        TopicStore([data], LogConfig()),
        AppendWatch(),
        lambda: addresses,
        channel,
        [],
        ReplicationConfig(store=DirectoryStore(tmp_path / "state")),
    )
    orders = TopicPartition("orders", 0)

    async def follow_then_move() -> None:
        store.create_topic("orders", {0: PartitionState.new((1, 0))})
        await replicas.poll_once()
        assert dialled == ["shrink-1.shrink-brokers.ns.svc:9092"]
        addresses[1] = "127.0.0.1:1"  # the plan resolved: same broker, same partitions
        await replicas.poll_once()
        assert dialled == ["shrink-1.shrink-brokers.ns.svc:9092", "127.0.0.1:1"]
        assert replicas.fetchers[1].epochs == {orders: 0}
        await replicas.poll_once()  # nothing changed: no new channel
        assert len(dialled) == 2
        await replicas.stop()

    try:
        asyncio.run(follow_then_move())
    finally:
        logs.shutdown()
