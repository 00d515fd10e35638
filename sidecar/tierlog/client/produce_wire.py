"""The producer's ``ProduceStreamRequest``s, written straight in protobuf's wire format.

A request carries up to ``max.request.size`` of built batches; set on a generated
message they would be copied in, and copied again when gRPC serializes it.  Joined
with the few header bytes here they are copied once (see ``tierlog.api.wire``), and
the sidecar parses the bytes as the ``ProduceStreamRequest`` they are.
``produce_stream`` opens the stream with this encoding: its requests are these bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from tierlog.api.v1 import log_service_pb2
from tierlog.api.wire import LENGTH_DELIMITED, LOG_SERVICE, VARINT, field_key, varint
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH

__all__ = ["PRODUCE_STREAM", "ProduceStream", "encode_produce_stream_request", "produce_stream"]

PRODUCE_STREAM = f"/{LOG_SERVICE}/ProduceStream"
ProduceStream = grpc.aio.StreamStreamCall[bytes, log_service_pb2.ProduceStreamResponse]

_PRODUCE = field_key(1, LENGTH_DELIMITED)  # ProduceStreamRequest.produce
_TOPIC = field_key(1, LENGTH_DELIMITED)  # ProduceRequest.topic ...
_PARTITION = field_key(2, VARINT)
_ACKS = field_key(3, VARINT)
_RECORD_BATCHES = field_key(4, LENGTH_DELIMITED)
_CURRENT_LEADER_EPOCH = field_key(6, VARINT)


def encode_produce_stream_request(
    topic: str,
    partition: int,
    acks: int,
    record_batches: Sequence[bytes],
    leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """The wire bytes of a ``ProduceStreamRequest`` of ``record_batches``, back to back,
    for ``topic``'s ``partition`` led in ``leader_epoch`` (proto3: zero fields left out;
    the batches, a oneof member, always written; the epoch, an optional field, written
    when known, after the batches as protobuf orders fields)."""
    tail = (_CURRENT_LEADER_EPOCH, varint(leader_epoch)) if leader_epoch >= 0 else ()
    head: list[bytes] = []
    if topic:
        name = topic.encode("utf-8")
        head += (_TOPIC, varint(len(name)), name)
    if partition:
        head += (_PARTITION, varint(partition))
    if acks:
        head += (_ACKS, varint(acks))
    batches_size = sum(len(batch) for batch in record_batches)
    head += (_RECORD_BATCHES, varint(batches_size))
    produce_size = sum(len(part) for part in (*head, *tail)) + batches_size
    return b"".join((_PRODUCE, varint(produce_size), *head, *record_batches, *tail))


def produce_stream(channel: grpc.aio.Channel, metadata: Sequence[tuple[str, str]]) -> ProduceStream:
    """A ``ProduceStream`` call on ``channel`` whose requests are already encoded."""
    method: grpc.aio.StreamStreamMultiCallable[bytes, log_service_pb2.ProduceStreamResponse] = (
        channel.stream_stream(
            PRODUCE_STREAM,
            request_serializer=None,  # the requests are their wire bytes
            response_deserializer=log_service_pb2.ProduceStreamResponse.FromString,
        )
    )
    return method(metadata=metadata)
