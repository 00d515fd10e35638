"""A broker restarted on a formatted log dir gives up the partitions it cannot leave.

At start a broker leaves every ISR it can (``controlled_shutdown``), but not one it is
the only member of. When its log dir was formatted at this start (a wiped disk, a new
volume under the same broker id), its replicas hold nothing: leading there would make
every follower truncate to an empty log, losing records they still hold. So for each
such partition with other replicas it asks the live ones how far their logs go
(``GetReplicaLogInfo``) and writes, by compare-and-swap, the one holding the most as
leader with an ISR of itself (``elections.recover``, Kafka's unclean recovery of
KIP-966). A partition none of them answered for goes offline, its ISR kept, and is asked
about again every ``RETRY_INTERVAL_S`` until some replica answers; meanwhile the
controller leads it from its ISR by no broker whose logs were lost (``elections.elect``).
A partition with one replica leads its empty log: nothing else holds its records.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence, Set

import grpc

from tierlog.api.v1 import replication_service_pb2 as pb
from tierlog.api.v1 import replication_service_pb2_grpc
from tierlog.controller.changes import PartitionChange, write_all_decided
from tierlog.controller.elections import ReplicaLogEnd, recover
from tierlog.partition_state.model import NO_LEADER, PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.errors import TierlogError, UnknownTopicOrPartitionError
from tierlog.storage.manager import LogManager
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "CAUSE",
    "RETRY_INTERVAL_S",
    "UncleanRecovery",
    "ask_replica_log_ends",
    "local_log_ends",
]

log = logging.getLogger(__name__)

RETRY_INTERVAL_S = 1.0  # between asks about the partitions no replica answered for

# ``ask(broker, partitions)``: what ``broker`` says its logs of ``partitions`` hold.
Ask = Callable[[int, Sequence[TopicPartition]], Awaitable[Mapping[TopicPartition, ReplicaLogEnd]]]


CAUSE = "unclean recovery: this broker's log dir was formatted at its start"


class UncleanRecovery:
    def __init__(
        self,
        store: PartitionStateStore,
        broker: int,
        ask: Ask,
        live: Callable[[], Set[int]],
        on_recovered: Callable[[], None] = lambda: None,
    ) -> None:
        """``broker`` is this one; ``live()`` the brokers whose leases are current;
        ``on_recovered`` is called for each partition given to another replica."""
        self._store = store
        self._broker = broker
        self._ask = ask
        self._live = live
        self._on_recovered = on_recovered
        self.pending: set[TopicPartition] = set()  # offline, waiting for an answer

    async def start(self) -> None:
        """The first pass, before this broker applies any state: over every partition
        it is the only ISR member of."""
        topics = await asyncio.to_thread(self._store.list_topics)
        await self._pass(set(topics), lambda _tp: True)

    async def run(self) -> None:
        """Ask again about the offline partitions until each is led (or not this
        broker's to recover any more)."""
        while self.pending:
            await asyncio.sleep(RETRY_INTERVAL_S)
            pending = set(self.pending)
            try:
                await self._pass({tp.topic for tp in pending}, pending.__contains__)
            except TierlogError as error:  # the store is away: ask again later
                log.warning("unclean recovery: the partition-state store failed: %s", error)

    async def _pass(self, topics: Set[str], asked: Callable[[TopicPartition], bool]) -> None:
        states = await asyncio.to_thread(self._read, topics)
        mine = {
            tp: state
            for tp, state in states.items()
            if asked(tp) and _alone_in_sync(state, self._broker)
        }
        answers = await self._answers(mine)
        still: set[TopicPartition] = set()
        for topic in sorted({tp.topic for tp in mine}):
            partitions = {tp.partition: s for tp, s in mine.items() if tp.topic == topic}
            decide = functools.partial(self._decide, topic, answers)
            changes = await asyncio.to_thread(
                write_all_decided, self._store, topic, partitions, decide, CAUSE
            )
            for change in changes:
                self._report(change, answers)
            after = {**partitions, **{change.partition: change.after for change in changes}}
            still |= {
                TopicPartition(topic, partition)
                for partition, state in after.items()
                if state.leader == NO_LEADER and _alone_in_sync(state, self._broker)
            }
        self.pending = still

    def _decide(
        self,
        topic: str,
        answers: Mapping[TopicPartition, Mapping[int, ReplicaLogEnd]],
        partition: int,
        state: PartitionState,
    ) -> PartitionState | None:
        return recover(state, self._broker, answers.get(TopicPartition(topic, partition), {}))

    def _report(
        self, change: PartitionChange, answers: Mapping[TopicPartition, Mapping[int, ReplicaLogEnd]]
    ) -> None:
        name = f"{change.topic}-{change.partition}"
        if change.after.leader == NO_LEADER:
            log.warning(
                "%s: broker %d lost its log and was the only in-sync replica; no other "
                "replica answered: offline until one does",
                name, self._broker,
            )  # fmt: skip
            return
        self._on_recovered()
        tp = TopicPartition(change.topic, change.partition)
        log.warning(
            "%s: broker %d lost its log and was the only in-sync replica: unclean recovery "
            "elected replica %d in leader epoch %d, holding the most of the replicas that "
            "answered %s; records only the lost log held are gone",
            name, self._broker, change.after.leader, change.after.leader_epoch,
            dict(sorted(answers[tp].items())),
        )  # fmt: skip

    def _read(self, topics: Set[str]) -> dict[TopicPartition, PartitionState]:
        states = {}
        for topic in topics:
            try:
                partitions = self._store.read_topic(topic)
            except UnknownTopicOrPartitionError:
                continue  # deleted since it was listed
            states.update({TopicPartition(topic, p): s for p, s in partitions.items()})
        return states

    async def _answers(
        self, states: Mapping[TopicPartition, PartitionState]
    ) -> dict[TopicPartition, dict[int, ReplicaLogEnd]]:
        """Each partition's answers, by replica, from the live other replicas (asked side
        by side, one request per broker)."""
        live = await asyncio.to_thread(self._live)  # a read of the store's leases
        asked: dict[int, list[TopicPartition]] = {}
        for tp, state in states.items():
            for replica in state.replicas:
                if replica != self._broker and replica in live:
                    asked.setdefault(replica, []).append(tp)
        brokers = sorted(asked)
        replies = await asyncio.gather(*(self._ask(b, asked[b]) for b in brokers))
        answers: dict[TopicPartition, dict[int, ReplicaLogEnd]] = {}
        for broker, reply in zip(brokers, replies, strict=True):
            for tp, end in reply.items():
                answers.setdefault(tp, {})[broker] = end
        return answers


def _alone_in_sync(state: PartitionState, broker: int) -> bool:
    """``broker`` is the partition's only ISR member, and it has other replicas."""
    return state.isr == (broker,) and len(state.replicas) > 1


async def ask_replica_log_ends(
    channel: grpc.aio.Channel,
    metadata: Sequence[tuple[str, str]],
    partitions: Sequence[TopicPartition],
    timeout_s: float,
) -> dict[TopicPartition, ReplicaLogEnd]:
    """What the broker at the other end of ``channel`` says its logs of ``partitions``
    hold (those it has no log of are left out); nothing when it does not answer in
    ``timeout_s`` (stopped, paused, cut off: a later pass asks again)."""
    request = pb.GetReplicaLogInfoRequest(
        partitions=[
            pb.ReplicaLogPartition(topic=tp.topic, partition=tp.partition) for tp in partitions
        ]
    )
    stub = replication_service_pb2_grpc.ReplicationServiceStub(channel)
    try:
        answer = await stub.GetReplicaLogInfo(request, timeout=timeout_s, metadata=metadata)
    except grpc.aio.AioRpcError as error:
        log.info("unclean recovery: no answer (%s): %s", error.code().name, error.details())
        return {}
    return {
        TopicPartition(info.topic, info.partition): ReplicaLogEnd(
            info.last_written_leader_epoch, info.log_end_offset
        )
        for info in answer.partitions
    }


def local_log_ends(
    logs: LogManager, partitions: Sequence[TopicPartition]
) -> pb.GetReplicaLogInfoResponse:
    """The answer to ``GetReplicaLogInfo``: how far this broker's logs of ``partitions``
    go, whoever leads them."""
    answer = pb.GetReplicaLogInfoResponse()
    for tp in partitions:
        if logs.has_log(tp):
            partition_log = logs.get_log(tp)
            answer.partitions.append(
                pb.ReplicaLogInfo(
                    topic=tp.topic,
                    partition=tp.partition,
                    last_written_leader_epoch=partition_log.leader_epoch_cache.latest_epoch,
                    log_end_offset=partition_log.log_end_offset,
                )
            )
    return answer
