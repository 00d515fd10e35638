"""The follower's replica fetch stream between real brokers: a partition its leader
refuses waits out the back-off while the stream goes on for the others, and holds up
none of them while its own change of role is under way; nor does a partition whose
answer waits, in the answer that carries it; a controlled shutdown waits for no answer
from a leader that is gone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path

import grpc
import pytest

from tests.sidecar.conftest import Sidecar
from tierlog.api.v1 import admin_service_pb2, log_service_pb2
from tierlog.partition_state.model import PartitionState
from tierlog.replication.fetcher import FetchSettings, PartitionAccess, ReplicaFetcher
from tierlog.replication.follower import FetchOutcome
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.topic_partition import TopicPartition

from .conftest import ClusterFactory, wait_for


def _refusals(follower: Sidecar, tp: str) -> int:
    return follower.output.count(f"replica fetch of {tp} from broker 1")


def test_a_partition_the_leader_refuses_is_asked_again_only_after_the_back_off(
    replicated_brokers: ClusterFactory,
) -> None:
    # Broker 1 reads the store only when it starts and after an admin change made
    # through it (no watch, and a poll of 10 minutes): told to lead "b", it will not
    # know it, as a leader a moment behind.
    cluster = replicated_brokers(
        2,
        node_configs={
            0: ("replica.fetch.backoff.ms=1000",),
            1: (
                "tierlog.replication.state.poll.ms=600000",
                "tierlog.replication.state.watch=false",
            ),
        },
    )
    leader, follower = cluster.broker(1), cluster.broker(0)
    cluster.store.create_topic("a", {0: PartitionState.new((1, 0))})
    leader.admin.CreateTopics(  # any change through broker 1 makes it read the store
        admin_service_pb2.CreateTopicsRequest(
            topics=[admin_service_pb2.NewTopic(name="x", num_partitions=1)]
        ),
        timeout=30,
    )
    cluster.store.create_topic("b", {0: PartitionState.new((1, 0))})
    wait_for(lambda: _refusals(follower, "b-0") > 0, "the follower to ask for b-0")
    first = _refusals(follower, "b-0")
    time.sleep(3)  # the span the refusals are counted over, not a wait for a state
    # One refusal per second of back-off, give or take the long polls of "a" between
    # them; without the back-off each of "a"'s answers came back at once with b-0's
    # refusal beside it, hundreds a second.
    assert _refusals(follower, "b-0") - first <= 5
    follower.assert_alive()


def test_a_refused_partition_whose_role_is_changing_holds_up_no_other_partition(
    replicated_brokers: ClusterFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """In a failover the leader refuses the partitions it has not taken yet
    (UNKNOWN_LEADER_EPOCH) while this broker's own change of role holds each one's lock
    (a leader-epoch checkpoint on its way to the disk). The fetcher waited on those
    locks one after the other before it asked again, and for that long fetched no
    partition at all from this leader (a loaded failover at 2,000 partitions: over
    replica.lag.time.max.ms, and the leader dropped the follower from 676 ISRs).
    Broker 0 leads both partitions for broker 1, this process's fetcher; b-0's lock is
    held throughout, and a-0's record must still arrive."""
    caplog.set_level(logging.INFO, logger="tierlog.replication.fetcher")
    cluster = replicated_brokers(1)
    leader = cluster.broker(0)
    for topic in ("a", "b"):
        cluster.create_topic(topic, (0, 1))
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    logs, locks = _follower_logs(tmp_path, (a, b))

    async def follow_while_b_changes_role() -> None:
        settings = FetchSettings(max_wait_ms=100, backoff_ms=100)
        fetcher = _fetcher_of_broker_1(leader.address, _access(logs, locks), settings)
        try:
            async with locks[b]:
                fetcher.follow(b, 1)  # an epoch broker 0 has not taken: refused
                while "replica fetch of b-0 from broker 0" not in caplog.text:
                    await asyncio.sleep(0.01)  # the refusal taken, before a is followed
                fetcher.follow(a, 0)
                await asyncio.to_thread(_produce_one, leader, "a")
                while logs.get_log(a).log_end_offset < 1:
                    await asyncio.sleep(0.01)
        finally:
            await fetcher.close()

    _run_then_close(logs, follow_while_b_changes_role())


def test_a_partition_whose_answer_waits_holds_up_no_other_partition_of_that_answer(
    replicated_brokers: ClusterFactory, tmp_path: Path
) -> None:
    """After a failover each partition's first batch in the new leader epoch waits on
    the disk (the epoch's checkpoint, two fsyncs), or on the partition's lock while its
    change of role holds it. The fetcher applied an answer's partitions one after the
    other: a survivor following 1,000 partitions took seconds before acks=all produce
    went on anywhere. Here the locks of b's 8 partitions are held throughout; a-0's
    record, in the same answer (before or after theirs: the leader's order is a set's),
    is applied all the same."""
    cluster = replicated_brokers(1)
    leader = cluster.broker(0)
    cluster.create_topic("a", (0, 1))
    cluster.create_topic("b", (0, 1), partitions=8)
    a = TopicPartition("a", 0)
    held = [TopicPartition("b", p) for p in range(8)]
    for tp in (a, *held):
        _produce_one(leader, tp.topic, tp.partition)
    logs, locks = _follower_logs(tmp_path, (a, *held))

    async def follow_while_b_changes_role() -> None:
        settings = FetchSettings(max_wait_ms=100)
        fetcher = _fetcher_of_broker_1(leader.address, _access(logs, locks), settings)
        try:
            async with contextlib.AsyncExitStack() as changing_role:
                for tp in held:
                    await changing_role.enter_async_context(locks[tp])
                    fetcher.follow(tp, 0)
                fetcher.follow(a, 0)
                while logs.get_log(a).log_end_offset < 1:
                    await asyncio.sleep(0.01)
                assert all(logs.get_log(tp).log_end_offset == 0 for tp in held)
            while any(logs.get_log(tp).log_end_offset < 1 for tp in held):
                await asyncio.sleep(0.01)  # then applied as their locks are free
        finally:
            await fetcher.close()

    _run_then_close(logs, follow_while_b_changes_role())


def _follower_logs(
    tmp_path: Path, partitions: Sequence[TopicPartition]
) -> tuple[LogManager, dict[TopicPartition, asyncio.Lock]]:
    """Broker 1's logs of ``partitions`` (empty), and a lock for each."""
    (tmp_path / "follower").mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(tmp_path / "follower",)))
    for tp in partitions:
        logs.get_or_create_log(tp)
    return logs, {tp: asyncio.Lock() for tp in partitions}


def _run_then_close(logs: LogManager, following: Coroutine[None, None, None]) -> None:
    """Run ``following`` (in 30 s at most), then close the follower's logs."""
    try:
        asyncio.run(asyncio.wait_for(following, timeout=30))
    finally:
        logs.shutdown()


def _access(logs: LogManager, locks: dict[TopicPartition, asyncio.Lock]) -> PartitionAccess:
    return lambda tp: (locks[tp], logs.get_log(tp))


def _fetcher_of_broker_1(
    leader_address: str, access: PartitionAccess, settings: FetchSettings
) -> ReplicaFetcher:
    """Broker 1's fetcher from broker 0 at ``leader_address`` (this test's event loop runs
    it), telling nobody what it applied."""

    async def applied(tp: TopicPartition, outcome: FetchOutcome) -> None:
        return None

    channel = grpc.aio.insecure_channel(leader_address)
    return ReplicaFetcher(1, lambda: 0, 0, leader_address, channel, (), access, applied, settings)


def _produce_one(broker: Sidecar, topic: str, partition: int = 0) -> None:
    """One record, acks=1 (the leader's alone: this test's follower is no broker)."""
    batch = build_batch([SimpleRecord(None, b"r", int(time.time() * 1000), ())])
    request = log_service_pb2.ProduceRequest(
        topic=topic, partition=partition, acks=log_service_pb2.ACKS_LEADER, record_batches=batch
    )
    broker.log.Produce(request, timeout=10)


def test_a_controlled_shutdown_waits_for_no_answer_from_a_leader_that_is_gone(
    tmp_path: Path,
) -> None:
    """A stopping broker fetches on until each leader has answered once since the signal
    (``ReplicaManager.answered_since``); a leader whose stream fails (stopped too, as in
    ``tierlog cluster down``) will not answer soon, and is not waited for: the wait ends
    at the failure, not at the shutdown's bound."""
    (tmp_path / "follower").mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(tmp_path / "follower",)))
    orders = TopicPartition("orders", 0)
    logs.get_or_create_log(orders)

    async def wait_for_an_answer_from_nobody() -> None:
        fetcher = _fetcher_of_broker_1(
            "127.0.0.1:1",  # nothing listens there
            lambda tp: (asyncio.Lock(), logs.get_log(tp)),
            FetchSettings(backoff_ms=60_000),
        )
        try:
            fetcher.follow(orders, 0)
            await asyncio.wait_for(fetcher.answered(fetcher.answers + 1), timeout=20)
            assert fetcher.answers == 0
        finally:
            await fetcher.close()

    try:
        asyncio.run(wait_for_an_answer_from_nobody())
    finally:
        logs.shutdown()
