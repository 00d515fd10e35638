"""Fetch answers and Subscribe messages written straight in protobuf's wire format.

A ``FetchResponse`` carries up to a MiB of record batches, copied once this way (see
``tierlog.api.wire``). The message is the batches (1: bytes), three int64s (2, 3, 4)
and the aborted transactions (5: a repeated message of two int64s), and a
``SubscribeResponse`` is the same fields, so the service answers both with
``FetchAnswer``s and ``encode_fetch_answer`` is registered as the two methods' response
serializer; clients parse the bytes as the messages they are. Measured: the sidecar's
CPU per sequential 1 MiB Fetch went from ~2.3 to ~2.0 ms on a quiet machine. A
``FetchSessionPartitionData`` begins with the same five fields, then names its partition
(and its error, if it has one): ``encode_session_answer`` writes a ``FetchSessionResponse``
of those.

``add_log_service`` registers ``LogService`` as the generated
``add_LogServiceServicer_to_server`` does, with those three serializers replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import grpc

from tierlog.api.v1 import common_pb2, log_service_pb2, log_service_pb2_grpc
from tierlog.api.wire import LENGTH_DELIMITED, LOG_SERVICE, VARINT, field_key, varint
from tierlog.broker.fetch import AbortedTransaction, FetchAnswer

__all__ = ["PartitionAnswer", "add_log_service", "encode_fetch_answer", "encode_session_answer"]

_RECORD_BATCHES = field_key(1, LENGTH_DELIMITED)
_HIGH_WATERMARK = field_key(2, VARINT)
_LOG_START_OFFSET = field_key(3, VARINT)
_LAST_STABLE_OFFSET = field_key(4, VARINT)
_ABORTED_TRANSACTION = field_key(5, LENGTH_DELIMITED)
_PRODUCER_ID = field_key(1, VARINT)
_FIRST_OFFSET = field_key(2, VARINT)
_SESSION_PARTITION = field_key(1, LENGTH_DELIMITED)
_TOPIC = field_key(6, LENGTH_DELIMITED)
_PARTITION = field_key(7, VARINT)
_GENERATION = field_key(8, VARINT)
_ERROR = field_key(9, LENGTH_DELIMITED)


def encode_fetch_answer(answer: FetchAnswer) -> bytes:
    """The ``FetchResponse`` wire bytes of ``answer`` (proto3: zero fields left out)."""
    parts: list[bytes] = []
    if answer.record_batches:
        parts += (_RECORD_BATCHES, varint(len(answer.record_batches)), answer.record_batches)
    if answer.high_watermark:
        parts += (_HIGH_WATERMARK, varint(answer.high_watermark))
    if answer.log_start_offset:
        parts += (_LOG_START_OFFSET, varint(answer.log_start_offset))
    if answer.last_stable_offset:
        parts += (_LAST_STABLE_OFFSET, varint(answer.last_stable_offset))
    for aborted in answer.aborted_transactions:
        body = _encode_aborted(aborted)
        parts += (_ABORTED_TRANSACTION, varint(len(body)), body)
    return b"".join(parts)


class PartitionAnswer(NamedTuple):
    """One partition's part of a fetch session's message: its batches, or its error."""

    topic: str
    partition: int
    generation: int
    answer: FetchAnswer | None
    error: common_pb2.Error | None = None


def encode_session_answer(partitions: Sequence[PartitionAnswer]) -> bytes:
    """The ``FetchSessionResponse`` wire bytes of ``partitions``."""
    parts: list[bytes] = []
    for item in partitions:
        body = _encode_partition(item)
        parts += (_SESSION_PARTITION, varint(len(body)), body)
    return b"".join(parts)


def _encode_partition(item: PartitionAnswer) -> bytes:
    topic = item.topic.encode()
    parts = [encode_fetch_answer(item.answer)] if item.answer is not None else []
    if topic:
        parts += (_TOPIC, varint(len(topic)), topic)
    if item.partition:
        parts += (_PARTITION, varint(item.partition))
    if item.generation:
        parts += (_GENERATION, varint(item.generation))
    if item.error is not None:
        error = item.error.SerializeToString()
        parts += (_ERROR, varint(len(error)), error)
    return b"".join(parts)


def _encode_aborted(aborted: AbortedTransaction) -> bytes:
    parts: list[bytes] = []
    if aborted.producer_id:
        parts += (_PRODUCER_ID, varint(aborted.producer_id))
    if aborted.first_offset:
        parts += (_FIRST_OFFSET, varint(aborted.first_offset))
    return b"".join(parts)


class _Capture:
    """Takes the handlers the generated registration function would add to a server."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass  # the same handlers come to add_registered_method_handlers

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self.handlers = dict(handlers)


def add_log_service(
    servicer: log_service_pb2_grpc.LogServiceServicer, server: grpc.aio.Server
) -> None:
    capture = _Capture()
    log_service_pb2_grpc.add_LogServiceServicer_to_server(servicer, cast(grpc.aio.Server, capture))
    capture.handlers["Fetch"] = grpc.unary_unary_rpc_method_handler(
        servicer.Fetch,
        request_deserializer=log_service_pb2.FetchRequest.FromString,
        response_serializer=encode_fetch_answer,
    )
    capture.handlers["Subscribe"] = grpc.unary_stream_rpc_method_handler(
        servicer.Subscribe,
        request_deserializer=log_service_pb2.SubscribeRequest.FromString,
        response_serializer=encode_fetch_answer,
    )
    capture.handlers["FetchSession"] = grpc.stream_stream_rpc_method_handler(
        servicer.FetchSession,
        request_deserializer=log_service_pb2.FetchSessionRequest.FromString,
        response_serializer=encode_session_answer,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(LOG_SERVICE, capture.handlers),)
    )
    server.add_registered_method_handlers(LOG_SERVICE, capture.handlers)
