"""The data plane: ``tierlog.v1.LogService`` over the broker's produce and fetch cores.

Produce appends the producer's v2 batches as they came (or one batch the server builds
from plain records) through ``broker.produce.Appender``; Fetch returns whole batches and
long-polls on the partition's append event, and Subscribe tails a partition on the same
events, each of its messages such a long poll, through ``broker.fetch.FetchReader``, which
reads the remote tier below the local log start and bounds read_committed reads at the
last stable offset. The Kafka listener (``tierlog.kafka``) calls the same two cores, so a
record written through either door reads the same through the other. InitProducerId
hands out producer ids (``producer_ids``) for idempotent produce. Errors are raised as
types and mapped to a status at the edge (``status.at_the_edge``).
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
from tierlog.broker.fetch import MAX_WAIT_MS, FetchAnswer, FetchReader, PartitionFetch, next_offset
from tierlog.broker.partitions import Partitions
from tierlog.broker.produce import Acks, Appended, Appender, Produced
from tierlog.broker.producer_ids import ProducerIdManager
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.sidecar.status import as_error, at_the_edge, unexpected
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import OffsetOutOfRangeError, TierlogError
from tierlog.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log
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
        try:
            async for request in request_iterator:
                await room.acquire()
                try:
                    appended: _Pending = await self._append(request.produce)
                except Exception as error:  # answered in band, in its turn
                    appended = error
                pending.put_nowait(appended)
        finally:
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
        offset = request.offset
        if offset == EARLIEST_TIMESTAMP:
            offset = partition_log.log_start_offset
        elif offset == LATEST_TIMESTAMP:
            offset = self.reader.fetchable_end(tp, partition_log, read_committed)
        elif offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset}: use -2 (earliest) or -1 (latest)")
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
