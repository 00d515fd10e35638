"""The data plane: ``tierlog.v1.LogService`` over the broker's produce and fetch cores.

Produce appends the producer's v2 batches as they came (or one batch the server builds
from plain records) through ``broker.produce.Appender``; Fetch returns whole batches and
long-polls on the partition's append event, and Subscribe tails a partition on the same
events, each of its messages such a long poll, through ``broker.fetch.FetchReader``, which
reads the remote tier below the local log start and bounds read_committed reads at the
last stable offset; FetchSession reads many partitions on one stream through the same
reader (``fetch_session``), each message one long poll over all of them. The Kafka
listener (``tierlog.kafka``) calls the same two cores, so a record written through either
door reads the same through the other. InitProducerId hands out producer ids
(``producer_ids``) for idempotent produce. Errors are raised as types and mapped to a
status at the edge (``status.at_the_edge``).
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
from tierlog.broker.delete_records import delete_records
from tierlog.broker.fetch import MAX_WAIT_MS, FetchAnswer, FetchReader, PartitionFetch, next_offset
from tierlog.broker.partitions import Partitions
from tierlog.broker.produce import Acks, Appended, Appender, Produced
from tierlog.broker.producer_ids import ProducerIdManager
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.sidecar.fetch_session import FetchSessionState, SessionPartition, SessionSettings
from tierlog.sidecar.fetch_wire import PartitionAnswer
from tierlog.sidecar.status import as_error, at_the_edge, unexpected
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import TierlogError
from tierlog.storage.records import (
    NO_PARTITION_LEADER_EPOCH,
    CompressionType,
    SimpleRecord,
    build_batch,
)
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["RECORD_BYTES_LISTENER", "Limits", "LogService"]

log = logging.getLogger(__name__)

_Context = grpc.aio.ServicerContext[Any, Any]

# A long poll answers this long before the caller's deadline, so that the caller gets
# its (possibly empty) answer rather than DEADLINE_EXCEEDED.
DEADLINE_MARGIN_S = 0.05
# Told (topic, size) of the record batches the current call appends or returns (None:
# nobody listens). The metrics interceptor sets it per call, as ``status.ERROR_LISTENER``:
# the sizes are at hand here, while reading a message's bytes field back copies it.
RECORD_BYTES_LISTENER: ContextVar[Callable[[str, int], None] | None] = ContextVar(
    "tierlog_record_bytes_listener", default=None
)
# The API's acks as Kafka's (unset: the leader's, as the .proto says).
_KAFKA_ACKS = {
    log_service_pb2.ACKS_UNSPECIFIED: Acks.LEADER,
    log_service_pb2.ACKS_NONE: Acks.NONE,
    log_service_pb2.ACKS_LEADER: Acks.LEADER,
    log_service_pb2.ACKS_ALL: Acks.ALL,
}
_ISOLATION_LEVELS = frozenset(log_service_pb2.IsolationLevel.values())
_CODECS = {
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


@dataclass(frozen=True)
class Limits:
    fetch_max_bytes: int  # the most a Fetch or Subscribe message carries (bar one big batch)
    # How many of a ProduceStream's requests may be appended ahead of the answer the
    # stream is waiting to send (the follower round trip of an acks=all produce).
    max_pipelined_produces: int = 16


# A fetch session's partition and what its read found: batches, or why it failed.
_SessionRead = tuple[SessionPartition, FetchAnswer | TierlogError]

# What a ProduceStream answers in its turn: an appended request, or why it was not.
_Pending = Appended | Exception


class LogService(log_service_pb2_grpc.LogServiceServicer):
    def __init__(
        self,
        partitions: Partitions[ReplicaManager],
        appender: Appender,
        reader: FetchReader,
        producer_ids: ProducerIdManager,
        limits: Limits,
    ):
        self.partitions = partitions
        self.appender = appender
        self.reader = reader
        self.watch = reader.watch
        self.limits = limits
        self.producer_ids = producer_ids

    # -- produce ----------------------------------------------------------------------

    @at_the_edge
    async def Produce(
        self, request: log_service_pb2.ProduceRequest, context: _Context
    ) -> log_service_pb2.ProduceResponse:
        return _produce_response(await self.appender.committed(await self._append(request)))

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
            produced = _produce_response(await self.appender.committed(appended))
        except TierlogError as error:
            return log_service_pb2.ProduceStreamResponse(error=as_error(error))
        except Exception as error:  # answer in band, keep the stream
            failure = unexpected(error, "LogService.ProduceStream")
            return log_service_pb2.ProduceStreamResponse(error=as_error(failure))
        return log_service_pb2.ProduceStreamResponse(produced=produced)

    async def _append(self, request: log_service_pb2.ProduceRequest) -> Appended:
        """Check and append one produce request; its answer waits in ``committed``."""
        if request.acks not in _KAFKA_ACKS:  # proto3 enums are open: any number arrives
            names = ", ".join(log_service_pb2.Acks.keys())
            raise InvalidRequiredAcksError(f"acks {request.acks} is none of {names}")
        acks = _KAFKA_ACKS[request.acks]
        tp, partition_log = self.appender.target(
            request.topic, request.partition, _leader_epoch(request), acks
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
        appended = await self.appender.append(tp, partition_log, data, acks)
        _report_record_bytes(tp.topic, len(data))
        return appended

    # -- fetch ------------------------------------------------------------------------

    @at_the_edge
    async def Fetch(  # type: ignore[override]  # answered in wire format: see fetch_wire
        self, request: log_service_pb2.FetchRequest, context: _Context
    ) -> FetchAnswer:
        _check_long_poll(request.max_wait_ms, request.min_bytes)
        tp = TopicPartition(request.topic, request.partition)  # checked by the long poll
        answer = await self._long_poll(
            PartitionFetch(
                tp, request.offset, self._max_bytes(request.max_bytes), _leader_epoch(request)
            ),
            request.min_bytes,
            _long_poll_s(request.max_wait_ms, context.time_remaining()),
            _read_committed(request.isolation_level),
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
        offset = self.reader.start_offset(tp, partition_log, request.offset, read_committed)
        while not self.watch.closed:
            answer = await self._long_poll(
                PartitionFetch(tp, offset, max_bytes, epoch),
                request.min_bytes,
                wait_s,
                read_committed,
            )
            if answer.record_batches:
                offset = next_offset(answer.record_batches)
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
                message = self._sent(session, answers)
                if message or timed_out or stop:
                    return message
                # Every answer went stale (its partition sought or forgotten while it was
                # read): no empty message, which would spend a credit; read again.
                continue
            await self.watch.wait(session.wake, remaining_s)

    async def _read_session(self, session: FetchSessionState) -> list[_SessionRead]:
        """Read the partitions that may have news (``FetchReader.read_many``) within the
        message's byte budget, each within its own too; those read with batches stay
        dirty, and so do all read empty once the budget is spent (it may not have reached
        them). Only batches and errors are answered."""
        settings = session.settings
        parts: list[SessionPartition] = []
        failed: list[_SessionRead] = []
        for part in session.take_dirty():
            if part.offset < 0:
                try:  # on the loop: where -2 and -1 are, as of this first read
                    tp, partition_log = self.partitions.log(
                        part.tp.topic, part.tp.partition, part.leader_epoch
                    )
                    part.offset = self.reader.start_offset(
                        tp, partition_log, part.offset, settings.read_committed
                    )
                except TierlogError as error:
                    failed.append((part, error))
                    continue
            parts.append(part)
        fetches = [
            PartitionFetch(
                part.tp, part.offset, part.max_bytes or settings.max_bytes, part.leader_epoch
            )
            for part in parts
        ]
        answers = await asyncio.to_thread(
            self.reader.read_many, fetches, settings.max_bytes, settings.read_committed
        )
        spent = settings.max_bytes <= sum(
            len(answer.record_batches) for answer in answers if isinstance(answer, FetchAnswer)
        )
        read: list[_SessionRead] = []
        for part, answer in zip(parts, answers, strict=True):
            if isinstance(answer, TierlogError):
                read.append((part, answer))
                continue
            if answer.record_batches or spent:
                session.still_dirty(part)  # there may be more, or the budget left it unread
            if answer.record_batches:
                read.append((part, answer))
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
            session.sent(part, next_offset(answer.record_batches))
            _report_record_bytes(tp.topic, len(answer.record_batches))
            message.append(PartitionAnswer(tp.topic, tp.partition, part.generation, answer))
        return message

    async def _long_poll(
        self, fetch: PartitionFetch, min_bytes: int, wait_s: float | None, read_committed: bool
    ) -> FetchAnswer:
        """One partition's long poll (``FetchReader.long_poll``), its error raised."""
        (answer,) = await self.reader.long_poll(
            (fetch,), fetch.max_bytes, min_bytes, wait_s, read_committed
        )
        if isinstance(answer, TierlogError):
            raise answer
        return answer

    def _max_bytes(self, asked: int) -> int:
        if asked < 0:
            raise InvalidRequestError(f"max_bytes {asked} is negative")
        return min(asked or self.limits.fetch_max_bytes, self.limits.fetch_max_bytes)

    # -- offsets ----------------------------------------------------------------------

    @at_the_edge
    async def ListOffsets(
        self, request: log_service_pb2.ListOffsetsRequest, context: _Context
    ) -> log_service_pb2.ListOffsetsResponse:
        read_committed = _read_committed(request.isolation_level)
        tp, partition_log = self.partitions.log(request.topic, request.partition)
        listed = await self.reader.list_offset(
            tp, partition_log, request.timestamp_ms, read_committed
        )
        return log_service_pb2.ListOffsetsResponse(
            offset=listed.offset, timestamp_ms=listed.timestamp_ms
        )

    @at_the_edge
    async def DeleteRecords(
        self, request: log_service_pb2.DeleteRecordsRequest, context: _Context
    ) -> log_service_pb2.DeleteRecordsResponse:
        low_watermark = await delete_records(
            self.partitions, request.topic, request.partition, request.offset
        )
        return log_service_pb2.DeleteRecordsResponse(low_watermark=low_watermark)

    # -- producers --------------------------------------------------------------------

    @at_the_edge
    async def InitProducerId(
        self, request: log_service_pb2.InitProducerIdRequest, context: _Context
    ) -> log_service_pb2.InitProducerIdResponse:
        producer_id, epoch = await asyncio.to_thread(
            self.producer_ids.init_producer_id, request.producer_id, request.producer_epoch
        )
        return log_service_pb2.InitProducerIdResponse(producer_id=producer_id, producer_epoch=epoch)


def _produce_response(produced: Produced) -> log_service_pb2.ProduceResponse:
    return log_service_pb2.ProduceResponse(
        base_offset=produced.base_offset,
        last_offset=produced.last_offset,
        log_append_time_ms=produced.log_append_time_ms,
        log_start_offset=produced.log_start_offset,
        duplicate=produced.duplicate,
    )


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
