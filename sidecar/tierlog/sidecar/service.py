"""The data plane: ``tierlog.v1.LogService`` over the log manager.

Produce appends the producer's v2 batches as they came (or one batch the server
builds from plain records); Fetch returns whole batches and long-polls on the
partition's append event; Subscribe tails a partition on the same events, each of
its messages such a long poll; FetchSession does so for many partitions on one
stream (``fetch_session``), each message one long poll over all of them. Offsets below
the local log start come from the remote tier (``tiered_reads``), so Fetch, ListOffsets,
Subscribe and FetchSession cross the boundary without the client noticing. Reads
under read_committed (Kafka's ``FetchIsolation.TXN_COMMITTED``) end at the last stable
offset and list the aborted transactions overlapping the batches returned, local or
tiered, as Kafka's ``UnifiedLog.read`` does; the client drops their records;
InitProducerId hands out producer ids (``producer_ids``) for idempotent produce. Storage
calls that can block (reads, fsyncs by policy, the tier) run in a thread; the event
loop parses requests, routes and waits.  The one exception is an append that cannot
wait for an fsync (``Log.append_waits_for_sync``): it is a validation and a write
into the page cache, tens of microseconds, where a hop to a thread and back costs
the sidecar ~0.3 ms of CPU per request (measured on 64 KiB batches: 1.14 -> 0.81 ms
per Produce), the largest share of a small produce.  A compressed batch is validated
here too unless it decodes to more than a couple of MiB or would wait for the broker's
budget of decoded bytes (``tierlog.validation.max.inflight.decompressed.bytes``): then
the append starts again in a thread (measured, always going to a thread cost lz4
produce 0.82 -> 1.10 ms of sidecar CPU per MiB in 1 MiB batches).  A slow
disk that throttles page-cache writes then stalls the loop as it would stall Kafka's
request handlers.
Errors are raised as types and mapped to a status at the edge (``status.at_the_edge``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import grpc

from tierlog.api.errors import InvalidRequestError, InvalidRequiredAcksError
from tierlog.api.v1 import common_pb2, log_service_pb2, log_service_pb2_grpc
from tierlog.broker.partitions import Partitions
from tierlog.broker.watch import AppendWatch
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC
from tierlog.coordinator.transaction_topic import TRANSACTION_STATE_TOPIC
from tierlog.replication.leader import LeaderPartition
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.sidecar.fetch_session import FetchSessionState, SessionPartition, SessionSettings
from tierlog.sidecar.fetch_wire import (
    AbortedTransaction,
    FetchAnswer,
    PartitionAnswer,
)
from tierlog.sidecar.producer_ids import ProducerIdManager
from tierlog.sidecar.status import as_error, at_the_edge, unexpected
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import (
    InvalidTopicError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    TierlogError,
)
from tierlog.storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    AppendInfo,
    AppendOrigin,
    Log,
)
from tierlog.storage.records import (
    NO_PARTITION_LEADER_EPOCH,
    CompressionType,
    SimpleRecord,
    build_batch,
    iter_batches,
)
from tierlog.storage.records.inflight import ValidationWouldWait
from tierlog.storage.tier import tiered_reads
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["RECORD_BYTES_LISTENER", "Limits", "LogService"]

log = logging.getLogger(__name__)

_Context = grpc.aio.ServicerContext[Any, Any]

# The longest a Fetch may wait, whatever it asks (Kafka caps fetch.max.wait.ms alike).
MAX_WAIT_MS = 60_000
# A long poll answers this long before the caller's deadline, so that the caller gets
# its (possibly empty) answer rather than DEADLINE_EXCEEDED.
DEADLINE_MARGIN_S = 0.05
# Told (topic, size) of the record batches the current call appends or returns (None:
# nobody listens). The metrics interceptor sets it per call, as ``status.ERROR_LISTENER``:
# the sizes are at hand here, while reading a message's bytes field back copies it.
RECORD_BYTES_LISTENER: ContextVar[Callable[[str, int], None] | None] = ContextVar(
    "tierlog_record_bytes_listener", default=None
)
_ACKS = frozenset(log_service_pb2.Acks.values())
_ISOLATION_LEVELS = frozenset(log_service_pb2.IsolationLevel.values())
# Topics only the broker writes (its coordinators' state).
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
_CODECS = {
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


@dataclass(frozen=True)
class Limits:
    fetch_max_bytes: int  # the most a Fetch or Subscribe message carries (bar one big batch)
    max_unacknowledged_appends: int = 64  # acks=0 appends running after their answer
    # How long an acks=all produce waits for the in-sync replicas (Kafka's produce
    # request timeout.ms, 30 s by default): then REQUEST_TIMED_OUT.
    acks_all_timeout_ms: int = 30_000
    # How many of a ProduceStream's requests may be appended ahead of the answer the
    # stream is waiting to send (the follower round trip of an acks=all produce).
    max_pipelined_produces: int = 16


@dataclass(frozen=True)
class _Appended:
    """A produce request in the log, waiting for its answer."""

    log: Log
    info: AppendInfo | None  # None: acks=0, appended (or appending) unacknowledged
    leader: LeaderPartition | None  # set when the answer waits for the in-sync replicas


# A fetch session's partition and what its read found: batches, or why it failed.
_SessionRead = tuple[SessionPartition, FetchAnswer | TierlogError]

# What a ProduceStream answers in its turn: an appended request, or why it was not.
_Pending = _Appended | Exception


class LogService(log_service_pb2_grpc.LogServiceServicer):
    def __init__(
        self,
        partitions: Partitions[ReplicaManager],
        watch: AppendWatch,
        limits: Limits,
        remote: RemoteLogReader | None = None,
    ):
        self.partitions = partitions
        self.watch = watch
        self.limits = limits
        self.remote = remote  # serves offsets below the local log start
        self._unacknowledged: set[asyncio.Task[None]] = set()  # acks=0 appends in flight
        self.producer_ids = ProducerIdManager(
            partitions.manager.config.log_dirs, partitions.ownership.node_id
        )

    # -- produce ----------------------------------------------------------------------

    @at_the_edge
    async def Produce(
        self, request: log_service_pb2.ProduceRequest, context: _Context
    ) -> log_service_pb2.ProduceResponse:
        return await self._produce(request)

    @at_the_edge
    async def ProduceStream(
        self,
        request_iterator: AsyncIterator[log_service_pb2.ProduceStreamRequest],
        context: _Context,
    ) -> AsyncIterator[log_service_pb2.ProduceStreamResponse]:
        # Appends run in the stream's order as the requests come, answers go back in
        # the same order once each is committed: with replication a request no longer
        # waits for the previous one's follower round trip before it is appended, so
        # the followers fetch several requests' batches at once (Kafka gets the same
        # overlap from a producer's batches for many partitions in one request).
        # A stopping broker takes no new request: the stream ends once what it took is
        # answered, so the server's stop does not wait out its grace for a producer that
        # keeps its stream open (Kafka's broker closes its connections); the producer
        # sends the next request again, to the new leader.
        pending: asyncio.Queue[_Pending | None] = asyncio.Queue()
        room = asyncio.Semaphore(self.limits.max_pipelined_produces)
        reader = asyncio.create_task(self._append_stream(request_iterator, pending, room))
        try:
            while (next_answer := await pending.get()) is not None:
                answer = await self._stream_answer(next_answer)
                room.release()
                yield answer
            await reader  # raises what ended the client's side, if it failed
        finally:
            reader.cancel()

    async def _append_stream(
        self,
        request_iterator: AsyncIterator[log_service_pb2.ProduceStreamRequest],
        pending: asyncio.Queue[_Pending | None],
        room: asyncio.Semaphore,
    ) -> None:
        requests = aiter(request_iterator)
        stopping = asyncio.ensure_future(self.watch.until_closed())
        try:
            while (request := await _next_unless(stopping, requests)) is not None:
                await room.acquire()
                try:
                    appended: _Pending = await self._append(request.produce)
                except Exception as error:  # answered in band, in its turn
                    appended = error
                pending.put_nowait(appended)
        finally:
            stopping.cancel()
            pending.put_nowait(None)  # never blocks: ``room`` bounds the queue

    async def _stream_answer(self, appended: _Pending) -> log_service_pb2.ProduceStreamResponse:
        try:
            if isinstance(appended, Exception):
                raise appended
            produced = await self._committed(appended)
        except TierlogError as error:
            return log_service_pb2.ProduceStreamResponse(error=as_error(error))
        except Exception as error:  # answer in band, keep the stream
            failure = unexpected(error, "LogService.ProduceStream")
            return log_service_pb2.ProduceStreamResponse(error=as_error(failure))
        return log_service_pb2.ProduceStreamResponse(produced=produced)

    async def _produce(
        self,
        request: log_service_pb2.ProduceRequest,
        *,
        internal: bool = False,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> log_service_pb2.ProduceResponse:
        return await self._committed(await self._append(request, internal=internal, origin=origin))

    async def _append(
        self,
        request: log_service_pb2.ProduceRequest,
        *,
        internal: bool = False,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> _Appended:
        """Validate and append one produce request; its answer waits in ``_committed``."""
        if request.topic in INTERNAL_TOPICS and not internal:  # as Kafka refuses them
            raise InvalidTopicError(f"cannot append to internal topic {request.topic}")
        if request.acks not in _ACKS:  # proto3 enums are open: any number arrives
            names = ", ".join(log_service_pb2.Acks.keys())
            raise InvalidRequiredAcksError(f"acks {request.acks} is none of {names}")
        tp, partition_log = self.partitions.log(
            request.topic, request.partition, _leader_epoch(request)
        )
        kind = request.WhichOneof("data")
        if kind == "records":
            if not request.records.records:
                raise InvalidRequestError("a produce request without records")
            data = await asyncio.to_thread(_batch_of, request.records.records, partition_log.config)
        elif kind == "record_batches" and request.record_batches:
            data = request.record_batches
        else:
            raise InvalidRequestError("a produce request without records")
        if request.acks == log_service_pb2.ACKS_NONE:
            task = asyncio.create_task(self._append_unacknowledged(tp, partition_log, data))
            self._unacknowledged.add(task)
            task.add_done_callback(self._unacknowledged.discard)
            if len(self._unacknowledged) > self.limits.max_unacknowledged_appends:
                await asyncio.shield(task)  # too many in flight: answer once this one lands
            _report_record_bytes(tp.topic, len(data))
            return _Appended(partition_log, info=None, leader=None)
        leader = self._leadership(tp)
        if leader is not None and request.acks == log_service_pb2.ACKS_ALL:
            leader.check_enough_replicas(partition_log.config.min_insync_replicas)
        try:
            if partition_log.append_waits_for_sync(len(data)):
                info = await asyncio.to_thread(partition_log.append, data, origin=origin)
            else:
                info = await _append_here_unless_it_waits(partition_log, data, origin)
        except KafkaStorageError as error:
            # Nothing was stored and the client retries, but the disk is full or failing:
            # the operator must see it here, as Kafka's broker logs it.
            log.error("append to %s failed: %s", tp, error)
            raise
        if leader is not None:
            leader.advance_high_watermark()  # alone in the ISR, the append is committed
        self.watch.appended(tp)
        _report_record_bytes(tp.topic, len(data))
        waits_for = leader if request.acks == log_service_pb2.ACKS_ALL else None
        return _Appended(partition_log, info, waits_for)

    async def _committed(self, appended: _Appended) -> log_service_pb2.ProduceResponse:
        """The answer to an appended request, once the in-sync replicas have it if asked."""
        info = appended.info
        if info is None:  # acks=0: nothing to say but the log start
            return log_service_pb2.ProduceResponse(
                base_offset=-1,
                last_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=appended.log.log_start_offset,
            )
        if appended.leader is not None:
            await appended.leader.wait_until_committed(
                info.last_offset + 1,
                appended.log.config.min_insync_replicas,
                self.limits.acks_all_timeout_ms / 1000,
            )
        return log_service_pb2.ProduceResponse(
            base_offset=info.first_offset,
            last_offset=info.last_offset,
            log_append_time_ms=info.log_append_time_ms,
            log_start_offset=info.log_start_offset,
            duplicate=info.duplicate,
        )

    async def produce(
        self,
        request: log_service_pb2.ProduceRequest,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> log_service_pb2.ProduceResponse:
        """A produce from inside the broker (the coordinators' writes; a transaction
        coordinator's markers as ``AppendOrigin.COORDINATOR``): a client's checks, append
        and acknowledgement, its errors raised as types; the only way into an internal
        topic."""
        return await self._produce(request, internal=True, origin=origin)

    async def _append_unacknowledged(self, tp: TopicPartition, target: Log, data: bytes) -> None:
        try:
            await asyncio.to_thread(target.append, data)
        except TierlogError as error:
            log.warning("acks=0 produce to %s failed: %s: %s", tp, error.reason, error)
        except Exception as error:  # nobody to answer: log it
            unexpected(error, "an acks=0 produce")
        else:
            leader = self._leadership(tp)
            if leader is not None and leader.log is target:
                leader.advance_high_watermark()
            self.watch.appended(tp)

    async def drain(self) -> None:
        """Wait for the acks=0 appends still in flight (at shutdown)."""
        if self._unacknowledged:
            await asyncio.gather(*self._unacknowledged, return_exceptions=True)

    # -- fetch ------------------------------------------------------------------------

    @at_the_edge
    async def Fetch(  # type: ignore[override]  # answered in wire format: see fetch_wire
        self, request: log_service_pb2.FetchRequest, context: _Context
    ) -> FetchAnswer:
        _check_long_poll(request.max_wait_ms, request.min_bytes)
        tp = TopicPartition(request.topic, request.partition)  # checked by the long poll
        read_committed = _read_committed(request.isolation_level)
        answer = await self._long_poll(
            tp,
            _leader_epoch(request),
            request.offset,
            self._max_bytes(request.max_bytes),
            request.min_bytes,
            _long_poll_s(request.max_wait_ms, context.time_remaining()),
            read_committed,
        )
        _report_record_bytes(tp.topic, len(answer.record_batches))
        return answer

    @at_the_edge
    async def Subscribe(  # type: ignore[override]  # answered in wire format: see fetch_wire
        self, request: log_service_pb2.SubscribeRequest, context: _Context
    ) -> AsyncIterator[FetchAnswer]:
        _check_long_poll(request.max_wait_ms, request.min_bytes)
        read_committed = _read_committed(request.isolation_level)
        epoch = _leader_epoch(request)
        tp, partition_log = self.partitions.log(request.topic, request.partition, epoch)
        max_bytes = self._max_bytes(request.max_bytes)
        # Without max_wait_ms a message waits for batches as long as it takes.
        wait_s = _long_poll_s(request.max_wait_ms, None) if request.max_wait_ms else None
        offset = self._start_offset(tp, partition_log, request.offset, read_committed)
        while not self.watch.closed:
            answer = await self._long_poll(
                tp, epoch, offset, max_bytes, request.min_bytes, wait_s, read_committed
            )
            if answer.record_batches:
                offset = _next_offset(answer.record_batches)
            elif wait_s is None or self.watch.closed:
                continue
            _report_record_bytes(tp.topic, len(answer.record_batches))
            yield answer

    @at_the_edge
    async def FetchSession(  # type: ignore[override]  # answered in wire format: see fetch_wire
        self,
        request_iterator: AsyncIterator[log_service_pb2.FetchSessionRequest],
        context: _Context,
    ) -> AsyncIterator[Sequence[PartitionAnswer]]:
        session = FetchSessionState(self.watch)
        requests = asyncio.create_task(self._take_session_requests(request_iterator, session))
        requests.add_done_callback(lambda _: session.wake.set())
        try:
            while not self.watch.closed:
                while not (session.credits or requests.done() or self.watch.closed):
                    session.wake.clear()
                    await self.watch.wait(session.wake, None)
                if requests.done():  # the client closed its side (or sent a bad request)
                    requests.result()
                    return
                answer = await self._session_answer(session, requests)
                session.credits -= 1
                yield answer
        finally:
            requests.cancel()
            session.close()

    async def _take_session_requests(
        self,
        request_iterator: AsyncIterator[log_service_pb2.FetchSessionRequest],
        session: FetchSessionState,
    ) -> None:
        async for request in request_iterator:
            _check_long_poll(request.max_wait_ms, request.min_bytes)
            settings = SessionSettings(
                request.max_wait_ms,
                request.min_bytes,
                self._max_bytes(request.max_bytes),
                _read_committed(request.isolation_level),
            )
            session.apply(request, settings)

    async def _session_answer(
        self, session: FetchSessionState, requests: asyncio.Task[None]
    ) -> list[PartitionAnswer]:
        """The next message: the batches of the session's partitions once they are
        ``min_bytes`` together (or some partition failed), or what there is when
        ``max_wait_ms`` passed (0: no limit). Sent partitions read on from where their
        batches end; failed ones leave the session."""
        loop = asyncio.get_running_loop()
        max_wait_ms = session.settings.max_wait_ms
        deadline = loop.time() + _long_poll_s(max_wait_ms, None) if max_wait_ms else None
        while True:
            session.wake.clear()
            answers = await self._read_session(session)
            size = sum(
                len(answer.record_batches)
                for _part, answer in answers
                if isinstance(answer, FetchAnswer)
            )
            failed = any(isinstance(answer, TierlogError) for _part, answer in answers)
            remaining_s = None if deadline is None else deadline - loop.time()
            timed_out = remaining_s is not None and remaining_s <= 0
            stop = self.watch.closed or requests.done()
            if size >= max(session.settings.min_bytes, 1) or failed or timed_out or stop:
                return self._sent(session, answers)
            await self.watch.wait(session.wake, remaining_s)

    async def _read_session(self, session: FetchSessionState) -> list[_SessionRead]:
        """Read the partitions that may have news, within the message's byte budget
        (each partition within its own too); those read with batches, and those the budget
        left unread, stay dirty."""
        settings = session.settings
        readable: list[tuple[SessionPartition, Log]] = []
        failed: list[_SessionRead] = []
        for part in session.take_dirty():
            try:  # on the loop: leadership, and where -2 and -1 are
                tp, partition_log = self.partitions.log(
                    part.tp.topic, part.tp.partition, part.leader_epoch
                )
                if part.offset < 0:
                    part.offset = self._start_offset(
                        tp, partition_log, part.offset, settings.read_committed
                    )
            except TierlogError as error:
                failed.append((part, error))
                continue
            readable.append((part, partition_log))

        def read_all() -> list[_SessionRead]:
            answers: list[_SessionRead] = []
            budget = settings.max_bytes
            for part, partition_log in readable:
                if budget <= 0:
                    session.still_dirty(part)  # next message's turn
                    continue
                max_bytes = min(part.max_bytes or budget, budget)
                try:
                    answer = self._read(
                        part.tp, partition_log, part.offset, max_bytes, settings.read_committed
                    )
                except TierlogError as error:
                    answers.append((part, error))
                    continue
                if answer.record_batches:
                    budget -= len(answer.record_batches)
                    answers.append((part, answer))
            return answers

        read = await asyncio.to_thread(read_all)
        for part, answer in read:
            if isinstance(answer, FetchAnswer):
                session.still_dirty(part)  # there may be more
        return failed + read

    def _sent(
        self,
        session: FetchSessionState,
        answers: list[_SessionRead],
    ) -> list[PartitionAnswer]:
        """The message of ``answers``, the session moved past it."""
        message = []
        for part, answer in answers:
            if not session.is_current(part):  # forgotten or sought while it was read
                continue
            tp = part.tp
            if isinstance(answer, TierlogError):
                session.remove(tp)
                error = as_error(answer)
                message.append(
                    PartitionAnswer(tp.topic, tp.partition, part.generation, None, error)
                )
                continue
            session.sent(part, _next_offset(answer.record_batches))
            _report_record_bytes(tp.topic, len(answer.record_batches))
            message.append(PartitionAnswer(tp.topic, tp.partition, part.generation, answer))
        return message

    async def _long_poll(
        self,
        tp: TopicPartition,
        leader_epoch: int,
        offset: int,
        max_bytes: int,
        min_bytes: int,
        wait_s: float | None,
        read_committed: bool,
    ) -> FetchAnswer:
        """The batches from ``offset`` once they are ``min_bytes`` (at least one byte),
        woken by appends; or what there is when ``wait_s`` passed (None: no limit) or the
        sidecar shuts down. Each look checks again that this broker leads ``tp`` in
        ``leader_epoch`` (a change of role wakes it too), so a deposed leader stops
        serving at once, with the reason."""
        loop = asyncio.get_running_loop()
        deadline = None if wait_s is None else loop.time() + wait_s
        while True:
            appended = self.watch.event(tp)
            _tp, partition_log = self.partitions.log(tp.topic, tp.partition, leader_epoch)
            answer = await asyncio.to_thread(
                self._read, tp, partition_log, offset, max_bytes, read_committed
            )
            remaining_s = None if deadline is None else deadline - loop.time()
            timed_out = remaining_s is not None and remaining_s <= 0
            enough = len(answer.record_batches) >= max(min_bytes, 1)
            if enough or timed_out or self.watch.closed:
                return answer
            await self.watch.wait(appended, remaining_s)

    def _read(
        self,
        tp: TopicPartition,
        partition_log: Log,
        offset: int,
        max_bytes: int,
        read_committed: bool,
    ) -> FetchAnswer:
        """Blocking (local files or the tier's GETs): called in a thread. Consumers see
        only what every in-sync replica holds: the log below the high watermark; under
        read_committed only below the last stable offset, with the aborted transactions
        overlapping the batches returned (from the fetched offset, as Kafka lists them)."""
        high_watermark = self.partitions.high_watermark(tp, partition_log)
        # Answered under either level, as Kafka's FetchResponse does: a read_uncommitted
        # reader sees how far the decided records go too.
        last_stable = partition_log.stable_offset_below(high_watermark)
        if not read_committed:
            read = tiered_reads.read(
                tp, partition_log, self.remote, offset, max_bytes, upper_bound_offset=high_watermark
            )
            return FetchAnswer(read.records, high_watermark, read.log_start_offset, last_stable)
        read = tiered_reads.read(
            tp, partition_log, self.remote, offset, max_bytes, upper_bound_offset=last_stable
        )
        aborted = (
            tiered_reads.aborted_transactions(
                tp, partition_log, self.remote, offset, _next_offset(read.records)
            )
            if read.records
            else []
        )
        return FetchAnswer(
            read.records,
            high_watermark,
            read.log_start_offset,
            last_stable,
            [AbortedTransaction(txn.producer_id, txn.first_offset) for txn in aborted],
        )

    def _start_offset(
        self, tp: TopicPartition, partition_log: Log, offset: int, read_committed: bool
    ) -> int:
        """Where a subscription starts: ``offset``, or the log start for -2, the
        fetchable end for -1."""
        if offset == EARLIEST_TIMESTAMP:
            return partition_log.log_start_offset
        if offset == LATEST_TIMESTAMP:
            return self._fetchable_end(tp, partition_log, read_committed)
        if offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset}: use -2 (earliest) or -1 (latest)")
        return offset

    def _fetchable_end(self, tp: TopicPartition, partition_log: Log, read_committed: bool) -> int:
        """Where a consumer's reads end: the last stable offset under read_committed, else
        the high watermark."""
        if read_committed:
            return self.partitions.last_stable_offset(tp, partition_log)
        return self.partitions.high_watermark(tp, partition_log)

    def _leadership(self, tp: TopicPartition) -> LeaderPartition | None:
        """``tp``'s leadership on this broker (None without replication: the owner alone
        holds the log, and what it appended is committed)."""
        replicas = self.partitions.replicas
        return None if replicas is None else replicas.leader(tp)

    def _max_bytes(self, asked: int) -> int:
        if asked < 0:
            raise InvalidRequestError(f"max_bytes {asked} is negative")
        return min(asked or self.limits.fetch_max_bytes, self.limits.fetch_max_bytes)

    # -- offsets ----------------------------------------------------------------------

    @at_the_edge
    async def ListOffsets(
        self, request: log_service_pb2.ListOffsetsRequest, context: _Context
    ) -> log_service_pb2.ListOffsetsResponse:
        if request.timestamp_ms < LATEST_TIERED_TIMESTAMP:
            raise InvalidRequestError(
                f"timestamp {request.timestamp_ms}: use -1, -2, -3, -4, -5 or a time in ms"
            )
        read_committed = _read_committed(request.isolation_level)
        tp, partition_log = self.partitions.log(request.topic, request.partition)
        fetchable_end = self._fetchable_end(tp, partition_log, read_committed)
        if request.timestamp_ms == LATEST_TIMESTAMP:  # what consumers can read up to
            return log_service_pb2.ListOffsetsResponse(offset=fetchable_end, timestamp_ms=-1)
        found = await asyncio.to_thread(
            tiered_reads.offset_for_timestamp,
            tp,
            partition_log,
            self.remote,
            request.timestamp_ms,
        )
        unreadable = (
            request.timestamp_ms >= 0 and found is not None and found.offset >= fetchable_end
        )
        if found is None or unreadable:
            return log_service_pb2.ListOffsetsResponse(offset=-1, timestamp_ms=-1)
        return log_service_pb2.ListOffsetsResponse(
            offset=found.offset, timestamp_ms=found.timestamp
        )

    @at_the_edge
    async def DeleteRecords(
        self, request: log_service_pb2.DeleteRecordsRequest, context: _Context
    ) -> log_service_pb2.DeleteRecordsResponse:
        tp, partition_log = self.partitions.log(request.topic, request.partition)
        high_watermark = self.partitions.high_watermark(tp, partition_log)
        offset = high_watermark if request.offset == -1 else request.offset
        if offset < 0:
            raise OffsetOutOfRangeError(f"offset {request.offset}: use -1 or an offset")
        low_watermark = await asyncio.to_thread(self._delete_records, partition_log, offset)
        return log_service_pb2.DeleteRecordsResponse(low_watermark=low_watermark)

    def _delete_records(self, partition_log: Log, offset: int) -> int:
        low_watermark = partition_log.increment_log_start_offset(offset)
        self.partitions.manager.write_checkpoints()  # the new log start survives a crash
        return low_watermark

    # -- producers --------------------------------------------------------------------

    @at_the_edge
    async def InitProducerId(
        self, request: log_service_pb2.InitProducerIdRequest, context: _Context
    ) -> log_service_pb2.InitProducerIdResponse:
        producer_id, epoch = await asyncio.to_thread(
            self.producer_ids.init_producer_id, request.producer_id, request.producer_epoch
        )
        return log_service_pb2.InitProducerIdResponse(producer_id=producer_id, producer_epoch=epoch)


def _batch_of(records: Sequence[common_pb2.Record], config: LogConfig) -> bytes:
    """One v2 batch of plain records, compressed as the topic's compression.type says."""
    now_ms = int(time.time() * 1000)
    batch = [
        SimpleRecord(
            record.key if record.HasField("key") else None,
            record.value if record.HasField("value") else None,
            record.timestamp_ms if record.HasField("timestamp_ms") else now_ms,
            tuple(
                (header.key, header.value if header.HasField("value") else None)
                for header in record.headers
            ),
        )
        for record in records
    ]
    try:
        return build_batch(
            batch, compression=_CODECS.get(config.compression_type, CompressionType.NONE)
        )
    except ValueError as error:  # a negative timestamp
        raise InvalidRequestError(str(error)) from None


async def _append_here_unless_it_waits(
    partition_log: Log, data: bytes, origin: AppendOrigin
) -> AppendInfo:
    """Append on the event loop, or in a thread if validating ``data`` would wait."""
    try:
        return partition_log.append(data, origin=origin, may_wait=False)
    except ValidationWouldWait:  # a bomb, or a large batch: nothing was appended
        return await asyncio.to_thread(partition_log.append, data, origin=origin)


def _leader_epoch(
    request: log_service_pb2.ProduceRequest
    | log_service_pb2.FetchRequest
    | log_service_pb2.SubscribeRequest,
) -> int:
    """The leader epoch a request names (``NO_PARTITION_LEADER_EPOCH`` if it names none)."""
    if request.HasField("current_leader_epoch"):
        return request.current_leader_epoch
    return NO_PARTITION_LEADER_EPOCH


def _report_record_bytes(topic: str, size: int) -> None:
    listener = RECORD_BYTES_LISTENER.get()
    if listener is not None and size:
        listener(topic, size)


def _next_offset(records: bytes) -> int:
    last = None
    for header in iter_batches(records):
        last = header
    assert last is not None
    return last.next_offset


def _read_committed(isolation_level: int) -> bool:
    """Whether a request's isolation level is read_committed (unset: read_uncommitted)."""
    if isolation_level not in _ISOLATION_LEVELS:  # proto3 enums are open
        names = ", ".join(log_service_pb2.IsolationLevel.keys())
        raise InvalidRequestError(f"isolation_level {isolation_level} is none of {names}")
    return isolation_level == log_service_pb2.ISOLATION_LEVEL_READ_COMMITTED


def _check_long_poll(max_wait_ms: int, min_bytes: int) -> None:
    if max_wait_ms < 0 or min_bytes < 0:
        raise InvalidRequestError("max_wait_ms and min_bytes cannot be negative")


def _long_poll_s(max_wait_ms: int, time_remaining_s: float | None) -> float:
    """How long a Fetch (or a Subscribe message) may wait for data: ``max_wait_ms`` (at
    most ``MAX_WAIT_MS``), cut short of the call's deadline so the answer arrives before
    the caller gives up."""
    wait_s = min(max_wait_ms, MAX_WAIT_MS) / 1000
    if time_remaining_s is None:
        return wait_s
    return max(0.0, min(wait_s, time_remaining_s - DEADLINE_MARGIN_S))


async def _next_unless(
    stopping: asyncio.Future[None],
    requests: AsyncIterator[log_service_pb2.ProduceStreamRequest],
) -> log_service_pb2.ProduceStreamRequest | None:
    """The stream's next request; None once it ends, or once ``stopping`` is done
    first (the read is cancelled: a request it was taking is the client's to send again)."""
    if stopping.done():
        return None
    reading = asyncio.ensure_future(anext(requests, None))
    await asyncio.wait((reading, stopping), return_when=asyncio.FIRST_COMPLETED)
    if reading.done():
        return reading.result()
    reading.cancel()
    return None
