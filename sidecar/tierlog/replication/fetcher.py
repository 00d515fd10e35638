"""The follower's side of replica fetch: one stream to one leader, many partitions.

A ``ReplicaFetcher`` asks its leader for every partition this broker follows there,
from each log's end and with the epoch of its last batch, applies each answer
(``follower.apply_fetched``) under the partition's lock (so a change of role never
interleaves with an append), and asks again. A small plain append is applied on the
loop (``follower.applies_without_waiting``), anything else in a thread of the replica
manager's pool, side by side with the answer's other partitions. The stream is
re-opened after a failure with a back-off, as Kafka's fetcher threads back off
(``replica.fetch.backoff.ms``), and a partition the leader refused (it does not lead it
yet, a stale epoch) is left out of the requests for that back-off, as Kafka delays a
partition with an error, while the stream goes on for the others.

The stream is a fetch session (KIP-227) once the leader's answer says it keeps one: the
first request names every partition, the next ones only those whose fetch state changed
(``_stale``: followed, unfollowed, answered, or back from a back-off) and those no longer
followed, and answers name only partitions with news. An idle partition costs no work
per request on either side. A partition answered with an error leaves the session on both
sides; a re-opened stream starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import grpc

from tierlog.api.v1 import replication_service_pb2 as pb
from tierlog.replication.follower import (
    STALE_LEADER_REASONS,
    FetchOutcome,
    applies_without_waiting,
    apply_fetched,
)
from tierlog.storage.errors import TierlogError
from tierlog.storage.log import Log
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["FetchSettings", "ReplicaFetcher"]

log = logging.getLogger(__name__)

REPLICA_FETCH = "/tierlog.v1.ReplicationService/ReplicaFetch"
# An answer's partitions applied in threads at once (``_apply``). After a failover every
# partition's first batch in the new leader epoch is a leader-epoch checkpoint (two
# fsyncs, as Kafka's LeaderEpochFileCache.assign writes it), and an answer applied them
# one after the other: a survivor following 1,000 partitions spent seconds on them
# before acks=all produce could go on. Side by side they share the journal's commits.
APPLIES_IN_FLIGHT = 32


@dataclass(frozen=True)
class FetchSettings:
    """Kafka's ``replica.fetch.*`` broker configs."""

    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000


# The partition's lock and log, from the replica manager.
PartitionAccess = Callable[[TopicPartition], tuple[asyncio.Lock, Log]]
Applied = Callable[[TopicPartition, FetchOutcome], Awaitable[None]]


class ReplicaFetcher:
    def __init__(
        self,
        node_id: int,
        broker_epoch: Callable[[], int],
        leader_id: int,
        address: str,
        channel: grpc.aio.Channel,
        metadata: Sequence[tuple[str, str]],
        access: PartitionAccess,
        applied: Applied,
        settings: FetchSettings,
        tier_store: ObjectStore | None = None,
        pool: Executor | None = None,
    ):
        self.node_id = node_id
        self.broker_epoch = broker_epoch
        self.leader_id = leader_id
        self.address = address  # where ``channel`` goes: the leader's host:port then
        self.channel = channel
        self.metadata = tuple(metadata)  # the cluster's bearer token, if it has one
        self.access = access
        self.applied = applied  # told after each partition's answer is applied
        self.settings = settings
        self.pool = pool  # where an answer that waits on the disk is applied (None: asyncio's)
        self.tier_store = tier_store  # where a follower below the leader's local start looks
        self.epochs: dict[TopicPartition, int] = {}  # followed here -> leader epoch
        self._delayed: dict[TopicPartition, float] = {}  # refused: asked again after this
        # The fetch state (leader epoch, fetch offset, last fetched epoch) the leader's
        # session holds for each partition, and the partitions whose state may differ.
        self._sent: dict[TopicPartition, tuple[int, int, int]] = {}
        self._stale: set[TopicPartition] = set()
        self._in_session = False  # the leader keeps this stream's session
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.answers = 0  # the leader's answers applied so far
        self._answer_applied = asyncio.Event()  # set (and replaced) at each one, or a failure
        self._failing = False  # the last stream failed: backing off before the next

    def follow(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.epochs[tp] = leader_epoch
        self._delayed.pop(tp, None)  # what the leader refused may be news to it now
        self._stale.add(tp)
        self._changed.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def unfollow(self, tp: TopicPartition) -> None:
        self.epochs.pop(tp, None)
        self._delayed.pop(tp, None)
        self._stale.add(tp)
        self._changed.set()

    async def answered(self, count: int) -> None:
        """Return once ``count`` answers have been applied (``answers``), or the fetcher
        is closed, or its stream failed (the leader gone: no answer is coming soon)."""
        while (
            self.answers < count
            and not self._failing
            and self._task is not None
            and not self._task.done()
        ):
            await self._answer_applied.wait()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._note_answer()  # those waiting for an answer wait no more
        await self.channel.close()

    def _note_answer(self) -> None:
        applied, self._answer_applied = self._answer_applied, asyncio.Event()
        applied.set()

    async def _run(self) -> None:
        while True:
            while not self.epochs:  # nothing followed here: no stream held open
                self._changed.clear()
                await self._changed.wait()
            try:
                await self._stream()
            except (grpc.aio.AioRpcError, TierlogError, asyncio.InvalidStateError) as error:
                # InvalidStateError: a write into a stream the leader (or the network) had
                # already ended. Either way the stream is opened again after the back-off.
                detail = error.details() if isinstance(error, grpc.aio.AioRpcError) else error
                log.warning("replica fetch from broker %d failed: %s", self.leader_id, detail)
                await self._back_off()
            except Exception:  # a bug; the fetcher must go on, not die unseen
                log.exception("replica fetch from broker %d failed", self.leader_id)
                await self._back_off()

    async def _back_off(self) -> None:
        self._failing = True
        self._note_answer()  # those waiting for an answer wait no more
        await asyncio.sleep(self.settings.backoff_ms / 1000)

    async def _stream(self) -> None:
        method: grpc.aio.StreamStreamMultiCallable[pb.ReplicaFetchRequest, pb.ReplicaFetchResponse]
        method = self.channel.stream_stream(
            REPLICA_FETCH,
            request_serializer=pb.ReplicaFetchRequest.SerializeToString,
            response_deserializer=pb.ReplicaFetchResponse.FromString,
        )
        call = method(metadata=self.metadata)
        self._sent.clear()  # a new stream, a new session: its first request is full
        self._in_session = False
        try:
            while self.epochs:  # a leader that follows nothing here sees its stream end
                self._changed.clear()
                request = self._request()
                if not self._sent and not request.forgotten:
                    # every partition waits out a refusal's back-off
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), self._until_retry_s())
                    continue
                await call.write(request)
                response = await call.read()
                if not isinstance(response, pb.ReplicaFetchResponse):  # the leader ended it
                    await asyncio.sleep(self.settings.backoff_ms / 1000)
                    return
                self._in_session = response.session
                await self._apply(response)
                self._failing = False
                self.answers += 1
                self._note_answer()
        finally:
            call.cancel()

    def _request(self) -> pb.ReplicaFetchRequest:
        """The next request: every partition followed here (not waiting out a back-off)
        until the leader keeps a session, then only what changed since the last one."""
        now = time.monotonic()
        for tp, until in list(self._delayed.items()):
            if until <= now:
                del self._delayed[tp]
                self._stale.add(tp)
        incremental = self._in_session
        if not incremental:
            self._sent.clear()
        candidates = self._stale if incremental else self.epochs.keys()
        partitions = []
        forgotten = []
        for tp in list(candidates):
            epoch = self.epochs.get(tp)
            if epoch is None or tp in self._delayed:
                if self._sent.pop(tp, None) is not None:
                    forgotten.append(pb.ForgottenPartition(topic=tp.topic, partition=tp.partition))
                continue
            _lock, partition_log = self.access(tp)
            state = (
                epoch,
                partition_log.log_end_offset,
                partition_log.leader_epoch_cache.latest_epoch,
            )
            if incremental and self._sent.get(tp) == state:
                continue
            self._sent[tp] = state
            partitions.append(
                pb.ReplicaFetchPartition(
                    topic=tp.topic,
                    partition=tp.partition,
                    current_leader_epoch=state[0],
                    fetch_offset=state[1],
                    last_fetched_epoch=state[2],
                    partition_max_bytes=self.settings.partition_max_bytes,
                )
            )
        self._stale = set()
        return pb.ReplicaFetchRequest(
            replica_id=self.node_id,
            broker_epoch=self.broker_epoch(),
            max_wait_ms=self.settings.max_wait_ms,
            min_bytes=self.settings.min_bytes,
            max_bytes=self.settings.max_bytes,
            partitions=partitions,
            forgotten=forgotten,
            incremental=incremental,
        )

    def _until_retry_s(self) -> float:
        """How long until the first delayed partition may be asked again."""
        first = min(self._delayed.values(), default=time.monotonic())
        return max(0.0, first - time.monotonic())

    async def _apply(self, response: pb.ReplicaFetchResponse) -> None:
        """Apply each partition's answer; a refused partition leaves the session (the
        leader's too) and waits out the back-off. An answer that waits (on the disk, or
        on its partition's lock) is applied side by side with the others
        (``APPLIES_IN_FLIGHT`` at a time), and the next request waits for all of them.

        A refusal for a stale or unknown leader epoch changes nothing here: it takes
        neither the partition's lock nor a thread. Its lock is most likely held by the
        very change of role that refusal is about (a failover's hundreds of them, each
        waiting on the disk), and waiting there, one partition after the other, held up
        the whole stream: no partition fetched from this leader for as long, and the
        leader dropped this broker from the ISRs of those it was writing to."""
        slots = asyncio.Semaphore(APPLIES_IN_FLIGHT)
        waiting: list[asyncio.Task[None]] = []
        for data in response.partitions:
            tp = TopicPartition(data.topic, data.partition)
            sent = self._sent.get(tp)
            if sent is None:
                continue
            self._stale.add(tp)  # its state may change here: the next request says so
            if data.HasField("error"):
                del self._sent[tp]
            if data.HasField("error") and data.error.reason in STALE_LEADER_REASONS:
                if self.epochs.get(tp) == sent[0]:  # else about an epoch no longer followed
                    await self._applied(tp, data, FetchOutcome(error=data.error.reason))
            elif self._applies_now(tp, data):
                await self._apply_one(tp, sent[1], data)  # no wait: done in this turn
            else:
                waiting.append(asyncio.create_task(self._apply_one(tp, sent[1], data, slots)))
        outcomes = await asyncio.gather(*waiting, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    def _applies_now(self, tp: TopicPartition, data: pb.ReplicaFetchPartitionData) -> bool:
        """Whether ``_apply_one`` would apply ``data`` without a wait: its lock is free
        and it is a small plain append (``applies_without_waiting``)."""
        lock, partition_log = self.access(tp)
        epoch = self.epochs.get(tp)
        return (
            not lock.locked()
            and epoch is not None
            and applies_without_waiting(partition_log, data, epoch)
        )

    async def _apply_one(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        data: pb.ReplicaFetchPartitionData,
        slots: asyncio.Semaphore | None = None,
    ) -> None:
        """Apply one partition's answer under its lock (in one of ``slots``, if it may
        wait), unless it is no longer followed here or its log changed since it was asked
        for (then it is asked for again)."""
        async with slots or contextlib.nullcontext():
            lock, partition_log = self.access(tp)
            async with lock:
                if tp not in self.epochs or partition_log.log_end_offset != fetch_offset:
                    return
                if applies_without_waiting(partition_log, data, self.epochs[tp]):
                    outcome = apply_fetched(partition_log, fetch_offset, data, self.tier_store)
                else:
                    outcome = await asyncio.get_running_loop().run_in_executor(
                        self.pool,
                        apply_fetched,
                        partition_log,
                        fetch_offset,
                        data,
                        self.tier_store,
                    )
        await self._applied(tp, data, outcome)

    async def _applied(
        self, tp: TopicPartition, data: pb.ReplicaFetchPartitionData, outcome: FetchOutcome
    ) -> None:
        """A refused partition waits out the back-off; whoever listens is told."""
        if outcome.error is not None:
            self._delayed[tp] = time.monotonic() + self.settings.backoff_ms / 1000
            log.info(
                "replica fetch of %s from broker %d: %s: %s",
                tp,
                self.leader_id,
                outcome.error,
                data.error.message,
            )
        await self.applied(tp, outcome)
