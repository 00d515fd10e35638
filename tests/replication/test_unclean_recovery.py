"""A broker whose logs were lost gives up what it alone was in sync for, over a real
store: to the replica that answers with the most, or offline until one answers. The
replicas' answers are scripted here (the RPC that carries them runs in
tests/replication/test_failover.py against real brokers)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

from tierlog.controller.elections import ReplicaLogEnd
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import NO_LEADER, PartitionState
from tierlog.replication import unclean_recovery
from tierlog.replication.unclean_recovery import UncleanRecovery
from tierlog.storage.topic_partition import TopicPartition

ALONE = PartitionState((0, 1, 2), leader=0, leader_epoch=3, isr=(0,))


class Replicas:
    """What each broker says when asked (none: it does not answer), and who was asked."""

    def __init__(self) -> None:
        self.ends: dict[int, dict[TopicPartition, ReplicaLogEnd]] = {}
        self.asked: list[tuple[int, tuple[TopicPartition, ...]]] = []

    async def ask(
        self, broker: int, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, ReplicaLogEnd]:
        self.asked.append((broker, tuple(partitions)))
        known = self.ends.get(broker, {})
        return {tp: known[tp] for tp in partitions if tp in known}


def test_the_replica_holding_the_most_leads_and_the_others_are_left_alone(
    tmp_path: Path,
) -> None:
    """Only partitions broker 0 alone is in sync for, with other replicas, are decided;
    only live replicas are asked."""
    store = LocalStateStore(tmp_path)
    shared = PartitionState((0, 1, 2), leader=1, leader_epoch=3, isr=(1, 0))
    single = PartitionState((0,), leader=0, leader_epoch=3, isr=(0,))
    store.create_topic("orders", {0: ALONE, 1: shared, 2: single})
    replicas = Replicas()
    orders0 = TopicPartition("orders", 0)
    replicas.ends = {1: {orders0: ReplicaLogEnd(3, 10)}, 2: {orders0: ReplicaLogEnd(3, 12)}}
    recovered: list[int] = []
    recovery = UncleanRecovery(
        store, 0, replicas.ask, lambda: {0, 1, 2}, lambda: recovered.append(1)
    )

    asyncio.run(recovery.start())

    after = store.read_topic("orders")
    assert (after[0].leader, after[0].leader_epoch, after[0].isr) == (2, 4, (2,))
    assert (after[1], after[2]) == (shared, single)
    assert sorted(replicas.asked) == [(1, (orders0,)), (2, (orders0,))]
    assert recovery.pending == set() and recovered == [1]


def test_with_no_answer_the_partition_waits_offline_and_is_recovered_once_one_comes(
    tmp_path: Path,
) -> None:
    store = LocalStateStore(tmp_path)
    store.create_topic("orders", {0: ALONE})
    replicas = Replicas()
    orders0 = TopicPartition("orders", 0)
    live = {0, 1}  # broker 2 is down: never asked
    recovery = UncleanRecovery(store, 0, replicas.ask, lambda: live)

    async def scenario() -> None:
        await recovery.start()
        offline = store.read_topic("orders")[0]
        assert (offline.leader, offline.leader_epoch, offline.isr) == (NO_LEADER, 4, (0,))
        assert recovery.pending == {orders0}
        running = asyncio.create_task(recovery.run())
        await asyncio.sleep(unclean_recovery.RETRY_INTERVAL_S * 1.5)
        assert not running.done()  # broker 1 still says nothing
        replicas.ends = {1: {orders0: ReplicaLogEnd(3, 10)}}
        await asyncio.wait_for(running, unclean_recovery.RETRY_INTERVAL_S * 3)

    asyncio.run(scenario())

    recovered = store.read_topic("orders")[0]
    assert (recovered.leader, recovered.leader_epoch, recovered.isr) == (1, 5, (1,))
    assert recovery.pending == set()
    assert {broker for broker, _ in replicas.asked} == {1}
