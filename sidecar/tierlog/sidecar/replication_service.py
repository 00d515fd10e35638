"""The leader's side of replica fetch: ``tierlog.v1.ReplicationService``.

Each request on a follower's stream is answered once some partition has batches for it
(or something else to say: an error, a divergence) or ``max_wait_ms`` passed, woken by
appends as consumers' long polls are. For each partition the leader checks the
follower's leader epoch (older: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH), checks
that the follower's log agrees with its own up to the fetch offset (the epoch of the
follower's last batch must end at or past it here, KIP-320; else the answer is where
that epoch ends, and the follower truncates), and notes how far the follower is, which
moves the high watermark and the ISR.

The stream is a fetch session (``replica_fetch_session``): the leader looks again only
at the partitions the follower named or that changed here, and answers only those with
news, so an idle follower costs a wake-up per ``max_wait_ms`` and nothing per partition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from tierlog.api.v1 import replication_service_pb2 as pb
from tierlog.api.v1 import replication_service_pb2_grpc
from tierlog.broker.watch import AppendWatch
from tierlog.replication.leader import LeaderPartition, SessionClock
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.replication.unclean_recovery import local_log_ends
from tierlog.sidecar.replica_fetch_session import ReplicaFetchSession
from tierlog.sidecar.status import as_error, at_the_edge
from tierlog.storage.errors import (
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    TierlogError,
)
from tierlog.storage.log import LogRead
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["ReplicationService"]

_Context = grpc.aio.ServicerContext[Any, Any]
MAX_WAIT_MS = 60_000
# A bound on what a fetch reads on the loop (``_reads_on_loop``): each offset is at most
# one batch, a few microseconds to find and copy.
TAIL_OFFSETS_READ_ON_LOOP = 64


@dataclass
class _Planned:
    """One partition of a request, checked: where to read, or what to answer instead."""

    tp: TopicPartition
    asked: pb.ReplicaFetchPartition
    leader: LeaderPartition | None = None
    answer: pb.ReplicaFetchPartitionData | None = None  # an error or a divergence


class ReplicationService(replication_service_pb2_grpc.ReplicationServiceServicer):
    def __init__(self, replicas: ReplicaManager, watch: AppendWatch, max_bytes: int):
        self.replicas = replicas
        self.watch = watch
        self.max_bytes = max_bytes

    @at_the_edge
    async def GetReplicaLogInfo(
        self, request: pb.GetReplicaLogInfoRequest, context: _Context
    ) -> pb.GetReplicaLogInfoResponse:
        """How far this broker's logs of the partitions asked go, whoever leads them."""
        asked = [TopicPartition(p.topic, p.partition) for p in request.partitions]
        return local_log_ends(self.replicas.logs, asked)

    @at_the_edge
    async def ReplicaFetch(
        self, request_iterator: AsyncIterator[pb.ReplicaFetchRequest], context: _Context
    ) -> AsyncIterator[pb.ReplicaFetchResponse]:
        session: ReplicaFetchSession | None = None
        try:
            async for request in request_iterator:
                if self.watch.closed:
                    return  # shutting down: the stream ends, its follower re-opens elsewhere
                self.replicas.check_broker_epoch(request.replica_id, request.broker_epoch)
                if session is None:
                    session = self._open_session(request.replica_id)
                yield await self._answer(session, request)
        finally:
            if session is not None:
                session.close()

    def _open_session(self, replica: int) -> ReplicaFetchSession:
        def left(tp: TopicPartition, clock: SessionClock) -> None:
            leader = self.replicas.leaders.get(tp)
            if leader is not None:
                leader.leave_session(replica, clock)

        return ReplicaFetchSession(self.watch, left, _now_ms())

    async def _answer(
        self, session: ReplicaFetchSession, request: pb.ReplicaFetchRequest
    ) -> pb.ReplicaFetchResponse:
        """Record where the follower is for the partitions it named and those whose end
        moved since its last request, then answer what the follower has not been told,
        waiting up to ``max_wait_ms`` for batches; woken, only the dirty partitions are
        looked at again."""
        loop = asyncio.get_running_loop()
        wait_s = min(max(request.max_wait_ms, 0), MAX_WAIT_MS) / 1000
        deadline = loop.time() + wait_s
        max_bytes = min(request.max_bytes or self.max_bytes, self.max_bytes)
        now_ms = _now_ms()
        recorded = session.update(request) | session.take_moved()
        planned = [self._plan(request.replica_id, tp, asked) for tp, asked in session.take_dirty()]
        for item in planned:
            if item.tp in recorded and item.leader is not None and item.answer is None:
                self.replicas.record_fetch(
                    item.leader,
                    request.replica_id,
                    item.asked,
                    now_ms,
                    request.broker_epoch,
                    session.clock,
                )
        session.clock.last_request_ms = now_ms
        session.recheck(self.replicas.leaders, request.replica_id)
        planned_here = {item.tp for item in planned}  # dirty again: its high watermark moved
        planned += [
            self._plan(request.replica_id, tp, asked)
            for tp, asked in session.take_dirty()
            if tp not in planned_here
        ]
        news: dict[TopicPartition, pb.ReplicaFetchPartitionData] = {}
        while True:
            if _reads_on_loop(planned):
                answers = _read_all(planned, max_bytes)
            else:
                answers = await asyncio.to_thread(_read_all, planned, max_bytes)
            for item, data in zip(planned, answers, strict=True):
                if data.record_batches:
                    session.still_dirty(item.tp)
                if session.has_news(item.tp, data):
                    news[item.tp] = data
                else:
                    news.pop(item.tp, None)  # an earlier pass's batches, since re-read
            said = sum(len(a.record_batches) for a in news.values())
            telling = any(
                a.HasField("error") or a.HasField("diverging_epoch") for a in news.values()
            )
            remaining = deadline - loop.time()
            if said >= max(request.min_bytes, 1) or telling or remaining <= 0 or self.watch.closed:
                for data in news.values():
                    session.answered(data)
                return pb.ReplicaFetchResponse(partitions=list(news.values()), session=True)
            await self.watch.wait_any((session.wake,), remaining)
            planned = [
                self._plan(request.replica_id, tp, asked) for tp, asked in session.take_dirty()
            ]

    def _plan(self, replica: int, tp: TopicPartition, asked: pb.ReplicaFetchPartition) -> _Planned:
        item = _Planned(tp, asked)
        try:
            leader = self.replicas.leader_for_follower(tp, replica, asked.current_leader_epoch)
        except TierlogError as error:
            item.answer = _refusal(tp, error)
            return item
        item.leader = leader
        if asked.last_fetched_epoch >= 0:
            log = leader.log
            end = log.leader_epoch_cache.end_offset_for(
                asked.last_fetched_epoch, log.log_end_offset
            )
            if end.epoch < asked.last_fetched_epoch or end.end_offset < asked.fetch_offset:
                item.answer = _offsets(tp, leader, pb.ReplicaFetchPartitionData())
                item.answer.diverging_epoch.epoch = end.epoch
                item.answer.diverging_epoch.end_offset = end.end_offset
        return item


def _reads_on_loop(planned: list[_Planned]) -> bool:
    """Whether the answer is read on the loop rather than in a thread: it reads only
    batches past the high watermark, at most ``TAIL_OFFSETS_READ_ON_LOOP`` offsets in
    all. Those are what acks=all producers wait for, appended since the last commit, moments
    ago: a copy from the page cache, where a hop to a thread and back costs 0.3 to 2 ms on
    a busy machine on every acks=all round trip. A follower catching up from below the
    high watermark may read the disk, and is answered from a thread."""
    tail_offsets = 0
    for item in planned:
        if item.answer is not None or item.leader is None:
            continue
        log = item.leader.log
        fetch_offset = item.asked.fetch_offset
        if fetch_offset < log.local_log_start_offset or fetch_offset > log.log_end_offset:
            continue  # an error, no read
        if fetch_offset < log.high_watermark:
            return False
        tail_offsets += log.log_end_offset - fetch_offset
    return tail_offsets <= TAIL_OFFSETS_READ_ON_LOOP


def _read_all(planned: list[_Planned], max_bytes: int) -> list[pb.ReplicaFetchPartitionData]:
    """Each partition's answer, reading the planned ones from the leader's log (blocking,
    bar ``_reads_on_loop``). The whole answer stays within ``max_bytes`` bar the first
    batch."""
    answers = []
    budget = max_bytes
    for item in planned:
        if item.answer is not None or item.leader is None:
            answers.append(item.answer or pb.ReplicaFetchPartitionData())
            continue
        limit = min(item.asked.partition_max_bytes or budget, budget)
        try:
            read = _read(item.leader, item.asked.fetch_offset, limit, first=budget == max_bytes)
        except TierlogError as error:
            item.answer = _offsets(item.tp, item.leader, _refusal(item.tp, error))
            answers.append(item.answer)
            continue
        budget = max(budget - len(read.records), 0)
        data = _offsets(item.tp, item.leader, pb.ReplicaFetchPartitionData())
        data.record_batches = read.records
        data.segment_base_offset = read.segment_base_offset
        answers.append(data)
    return answers


def _read(leader: LeaderPartition, offset: int, max_bytes: int, *, first: bool) -> LogRead:
    log = leader.log
    if offset > log.log_end_offset or offset < log.log_start_offset:
        raise OffsetOutOfRangeError(
            f"offset {offset} is outside the leader's [{log.log_start_offset}, "
            f"{log.log_end_offset}]"
        )
    if offset < log.local_log_start_offset:
        raise OffsetMovedToTieredStorageError(
            f"offset {offset} is below the leader's local log start {log.local_log_start_offset}"
        )
    if offset == log.log_end_offset or (max_bytes == 0 and not first):
        return LogRead(b"", log.log_start_offset, log.log_end_offset)
    return log.read(offset, max_bytes, min_one_batch=first)


def _offsets(
    tp: TopicPartition, leader: LeaderPartition, data: pb.ReplicaFetchPartitionData
) -> pb.ReplicaFetchPartitionData:
    log = leader.log
    data.topic, data.partition = tp.topic, tp.partition
    data.high_watermark = log.high_watermark
    data.log_start_offset = log.log_start_offset
    data.local_log_start_offset = log.local_log_start_offset
    data.log_end_offset = log.log_end_offset
    data.tiered_end_offset = log.known_tiered_end_offset
    data.segment_base_offset = -1
    return data


def _now_ms() -> int:
    return int(time.time() * 1000)


def _refusal(tp: TopicPartition, error: TierlogError) -> pb.ReplicaFetchPartitionData:
    return pb.ReplicaFetchPartitionData(
        topic=tp.topic,
        partition=tp.partition,
        error=as_error(error),
        segment_base_offset=-1,
        log_end_offset=-1,
    )
