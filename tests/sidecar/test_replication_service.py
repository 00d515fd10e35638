"""Replica fetch in-process, over a real replica manager, store, logs and gRPC stream:
how an acks=all produce is committed by its followers' fetches."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, cast

import grpc

from tests.replication.test_replica_manager import _replica_manager
from tests.storage.conftest import make_batch
from tierlog.api.v1 import replication_service_pb2 as pb
from tierlog.api.v1.replication_service_pb2_grpc import add_ReplicationServiceServicer_to_server
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState
from tierlog.replication.fetcher import FetchSettings, ReplicaFetcher
from tierlog.replication.follower import FetchOutcome
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.sidecar.replication_service import ReplicationService
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.topic_partition import TopicPartition

ORDERS = TopicPartition("orders", 0)
# A bound on what must happen at once; only reached when the answer waits for a thread.
ANSWER_TIMEOUT_S = 10
MIB = 1024 * 1024


class _Cluster(NamedTuple):
    """Broker 0 leading ``orders-0`` (replicas 0, 1, 2) in-process, and what fetches it."""

    store: LocalStateStore
    replicas: ReplicaManager
    service: ReplicationService
    broker_epochs: dict[int, int]


async def _one_fetch(cluster: _Cluster, replica: int, fetch_offset: int) -> pb.ReplicaFetchResponse:
    """``replica``'s fetch from ``fetch_offset``, answered without waiting (max_wait 0);
    ``ANSWER_TIMEOUT_S`` bounds the wait for the answer."""

    async def requests() -> AsyncIterator[pb.ReplicaFetchRequest]:
        yield pb.ReplicaFetchRequest(
            replica_id=replica,
            broker_epoch=cluster.broker_epochs[replica],
            max_wait_ms=0,
            partitions=[
                pb.ReplicaFetchPartition(
                    topic=ORDERS.topic,
                    partition=ORDERS.partition,
                    current_leader_epoch=0,
                    fetch_offset=fetch_offset,
                    last_fetched_epoch=-1,
                )
            ],
        )

    async def first_answer() -> pb.ReplicaFetchResponse:
        context = cast(grpc.aio.ServicerContext[Any, Any], None)  # only used to abort
        async for response in cluster.service.ReplicaFetch(requests(), context):
            return response
        raise AssertionError("the leader ended the stream")

    return await asyncio.wait_for(first_answer(), ANSWER_TIMEOUT_S)


@contextlib.contextmanager
def _leader_of_orders(tmp_path: Path) -> Iterator[_Cluster]:
    store = LocalStateStore(tmp_path / "state")
    epochs = {b: store.acquire_lease(b, f"broker-{b}", 10.0).broker_epoch for b in (0, 1, 2)}
    store.create_topic(ORDERS.topic, {0: PartitionState.new((0, 1, 2))})
    data = tmp_path / "data"
    data.mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    replicas = _replica_manager(tmp_path, store, logs, broker_epoch=lambda: epochs[0])
    try:
        yield _Cluster(store, replicas, ReplicationService(replicas, replicas.watch, MIB), epochs)
    finally:
        logs.shutdown()


@contextlib.asynccontextmanager
async def _every_thread_busy() -> AsyncIterator[None]:
    """The loop's worker threads all held by a slow job (one thread, blocked) meanwhile."""
    release = threading.Event()
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    busy = loop.run_in_executor(None, release.wait)
    try:
        yield
        assert not busy.done()
    finally:
        release.set()
        await busy


def test_fetches_at_the_log_end_commit_an_acks_all_produce_while_every_thread_is_busy(
    tmp_path: Path,
) -> None:
    """The fetch in which a follower says it holds the new batches is what moves the high
    watermark and answers the producer: it reads nothing, so it must not wait its turn
    for a worker thread (seen: 0.3 to 2 ms per follower on a busy 2-core machine, on
    every acks=all round trip, and as long as a slow read elsewhere lasts)."""

    async def produce_then_fetch() -> None:
        await cluster.replicas.poll_once()
        leader = cluster.replicas.leaders[ORDERS]
        leader.log.append(make_batch(3))
        producer = asyncio.create_task(leader.wait_until_committed(3, 2, ANSWER_TIMEOUT_S))
        async with _every_thread_busy():
            for follower in (1, 2):  # each already holds the 3 records
                answer = await _one_fetch(cluster, follower, 3)
                assert answer.partitions[0].record_batches == b""
            await asyncio.wait_for(producer, ANSWER_TIMEOUT_S)
            assert leader.high_watermark == 3
        await cluster.replicas.stop()

    with _leader_of_orders(tmp_path) as cluster:
        asyncio.run(produce_then_fetch())


def test_followers_fetch_the_batches_an_acks_all_produce_waits_for_while_every_thread_is_busy(
    tmp_path: Path,
) -> None:
    """The batches past the high watermark were appended moments ago: the followers'
    fetches of them are read on the loop, not after a hop to a worker thread (0.3 to 2 ms
    per follower on a busy machine, on every acks=all round trip)."""

    async def produce_then_fetch() -> None:
        await cluster.replicas.poll_once()
        leader = cluster.replicas.leaders[ORDERS]
        batch = make_batch(3)
        leader.log.append(batch)
        async with _every_thread_busy():
            for follower in (1, 2):
                answer = await _one_fetch(cluster, follower, 0)
                assert len(answer.partitions[0].record_batches) == len(batch)
        await cluster.replicas.stop()

    with _leader_of_orders(tmp_path) as cluster:
        asyncio.run(produce_then_fetch())


def test_a_follower_applies_its_leaders_newest_batches_while_every_thread_is_busy(
    tmp_path: Path,
) -> None:
    """A follower's fetcher appends a small answer in its leader's epoch on the loop, as
    the leader appends a producer's batches, not after a hop to a worker thread (0.3 to
    2 ms per follower on a busy machine, on every acks=all round trip). Its first answer
    opens the leader's epoch in its log (a checkpoint written): that one is from a thread."""

    async def follow() -> None:
        await cluster.replicas.poll_once()
        leader = cluster.replicas.leaders[ORDERS]
        leader.log.append(make_batch(3))
        server = grpc.aio.server()
        add_ReplicationServiceServicer_to_server(cluster.service, server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        follower_log = follower_logs.get_or_create_log(ORDERS)
        reached = {end: asyncio.Event() for end in (3, 6)}
        lock = asyncio.Lock()

        async def applied(_tp: TopicPartition, _outcome: FetchOutcome) -> None:
            for end, event in reached.items():
                if follower_log.log_end_offset >= end:
                    event.set()

        fetcher = ReplicaFetcher(
            1,
            lambda: cluster.broker_epochs[1],
            0,
            address,
            grpc.aio.insecure_channel(address),
            (),
            lambda _tp: (lock, follower_log),
            applied,
            FetchSettings(),
        )
        fetcher.follow(ORDERS, leader.leader_epoch)
        try:
            await asyncio.wait_for(reached[3].wait(), ANSWER_TIMEOUT_S)
            async with _every_thread_busy():
                leader.log.append(make_batch(3))
                cluster.replicas.watch.appended(ORDERS)
                await asyncio.wait_for(reached[6].wait(), ANSWER_TIMEOUT_S)
        finally:
            await fetcher.close()
            await server.stop(None)
            await cluster.replicas.stop()

    (tmp_path / "follower").mkdir()
    follower_logs = LogManager(LogManagerConfig(log_dirs=(tmp_path / "follower",)))
    try:
        with _leader_of_orders(tmp_path) as cluster:
            asyncio.run(follow())
    finally:
        follower_logs.shutdown()


IDLE = "idle"
IDLE_PARTITIONS = 8
EXCHANGES_SEEN_IDLE = 3  # exchanges after the follower holds everything, its HW included


class _RecordingService(ReplicationService):
    """The leader's service, keeping every request and answer of its streams in order."""

    def __init__(self, replicas: ReplicaManager) -> None:
        super().__init__(replicas, replicas.watch, MIB)
        self.requests: list[pb.ReplicaFetchRequest] = []
        self.answers: list[pb.ReplicaFetchResponse] = []
        self.exchanged = asyncio.Condition()

    async def ReplicaFetch(  # noqa: N802
        self, request_iterator: AsyncIterator[pb.ReplicaFetchRequest], context: Any
    ) -> AsyncIterator[pb.ReplicaFetchResponse]:
        async def kept() -> AsyncIterator[pb.ReplicaFetchRequest]:
            async for request in request_iterator:
                self.requests.append(request)
                yield request

        async for answer in super().ReplicaFetch(kept(), context):
            self.answers.append(answer)
            async with self.exchanged:
                self.exchanged.notify_all()
            yield answer

    async def wait_exchanges(self, count: int) -> None:
        async with self.exchanged:
            await asyncio.wait_for(
                self.exchanged.wait_for(lambda: len(self.answers) >= count), ANSWER_TIMEOUT_S
            )


def _named(messages: list[Any]) -> set[int]:
    return {part.partition for message in messages for part in message.partitions}


def test_an_idle_fetch_session_names_no_partition_and_a_new_record_only_its_own(
    tmp_path: Path,
) -> None:
    """Seen at 2,000 partitions on 3 brokers: each broker burnt 18% of a core while idle,
    69% of it the leader planning, reading, recording and answering each of the ~667
    partitions a follower's every request named (Kafka's incremental fetch sessions,
    KIP-227, name only what changed). Once the follower holds everything and knows the
    high watermark, its requests and the leader's answers name no partition; a record
    appended to one partition flows, and names that partition alone."""

    async def follow_then_idle() -> None:
        await replicas.poll_once()
        server = grpc.aio.server()
        add_ReplicationServiceServicer_to_server(service, server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        follower_logs = {
            p: follower.get_or_create_log(TopicPartition(IDLE, p)) for p in range(IDLE_PARTITIONS)
        }
        leaders = {p: replicas.leaders[TopicPartition(IDLE, p)] for p in range(IDLE_PARTITIONS)}
        for leader in leaders.values():
            leader.log.append(make_batch(2))
            replicas.watch.appended(leader.tp)
        lock = asyncio.Lock()
        fetcher = ReplicaFetcher(
            1,
            lambda: epochs[1],
            0,
            address,
            grpc.aio.insecure_channel(address),
            (),
            lambda tp: (lock, follower_logs[tp.partition]),
            _nothing_to_do,
            FetchSettings(max_wait_ms=100),
        )

        async def settled(end: int) -> None:
            """Every follower log holds ``end`` offsets... and knows they are committed."""
            while True:
                await service.wait_exchanges(len(service.answers) + 1)
                if all(log.high_watermark == end for log in follower_logs.values()):
                    return

        for partition in range(IDLE_PARTITIONS):
            fetcher.follow(TopicPartition(IDLE, partition), 0)
        try:
            await settled(2)
            idle_from = len(service.answers)
            await service.wait_exchanges(idle_from + EXCHANGES_SEEN_IDLE)
            assert _named(service.requests[idle_from + 1 :]) == set()
            assert _named(service.answers[idle_from + 1 :]) == set()

            busy_from = len(service.answers)
            leaders[3].log.append(make_batch(5))
            replicas.watch.appended(leaders[3].tp)
            await settled_one(follower_logs[3], 7)
            await service.wait_exchanges(len(service.answers) + EXCHANGES_SEEN_IDLE)
            assert _named(service.requests[busy_from + 1 :]) == {3}
            assert _named(service.answers[busy_from:]) == {3}
            assert all(
                follower_logs[p].high_watermark == 2 for p in range(IDLE_PARTITIONS) if p != 3
            )
        finally:
            await fetcher.close()
            await server.stop(None)
            await replicas.stop()

    async def settled_one(log: Any, end: int) -> None:
        while log.high_watermark != end:
            await service.wait_exchanges(len(service.answers) + 1)

    store = LocalStateStore(tmp_path / "state")
    epochs = {b: store.acquire_lease(b, f"broker-{b}", 10.0).broker_epoch for b in (0, 1)}
    store.create_topic(IDLE, dict.fromkeys(range(IDLE_PARTITIONS), PartitionState.new((0, 1))))
    (tmp_path / "data").mkdir()
    (tmp_path / "follower").mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(tmp_path / "data",)))
    follower = LogManager(LogManagerConfig(log_dirs=(tmp_path / "follower",)))
    replicas = _replica_manager(tmp_path, store, logs, broker_epoch=lambda: epochs[0])
    service = _RecordingService(replicas)
    try:
        asyncio.run(follow_then_idle())
    finally:
        follower.shutdown()
        logs.shutdown()


async def _nothing_to_do(_tp: TopicPartition, _outcome: FetchOutcome) -> None:
    return None


def test_a_follower_that_sends_full_requests_is_answered_in_full_each_time(
    tmp_path: Path,
) -> None:
    """A follower that keeps no session (one from before sessions) names every partition
    in each request, ``incremental`` unset: each is a new session's first request, and
    its answer names every partition again, as before."""

    async def two_full_requests() -> None:
        await cluster.replicas.poll_once()
        cluster.replicas.leaders[ORDERS].log.append(make_batch(3))
        full = pb.ReplicaFetchRequest(
            replica_id=1,
            broker_epoch=cluster.broker_epochs[1],
            max_wait_ms=0,
            partitions=[
                pb.ReplicaFetchPartition(
                    topic=ORDERS.topic, partition=ORDERS.partition, fetch_offset=0
                )
            ],
        )

        async def requests() -> AsyncIterator[pb.ReplicaFetchRequest]:
            for _ in range(2):
                yield full

        context = cast(grpc.aio.ServicerContext[Any, Any], None)  # only used to abort
        answers = [a async for a in cluster.service.ReplicaFetch(requests(), context)]
        assert [[p.partition for p in a.partitions] for a in answers] == [[0], [0]]
        assert all(a.partitions[0].record_batches for a in answers)
        await cluster.replicas.stop()

    with _leader_of_orders(tmp_path) as cluster:
        asyncio.run(asyncio.wait_for(two_full_requests(), ANSWER_TIMEOUT_S))
