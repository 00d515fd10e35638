"""A partition's Subscribe stream against a real sidecar: back pressure, its end, cancel."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

import grpc
import pytest

from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.client import TopicPartition
from tierlog.client.partition_stream import PREFETCH, Arrival, PartitionStream
from tierlog.storage.errors import UnknownTopicOrPartitionError
from tierlog.storage.records import SimpleRecord, build_batch, iter_batches

from .conftest import create_topic
from .sidecars import LiveSidecar

TP = TopicPartition("stream", 0)
BATCHES = 5


@pytest.fixture
def stub(sidecar: LiveSidecar) -> Iterator[log_service_pb2_grpc.LogServiceStub]:
    """A stub of the sidecar, whose topic holds ``BATCHES`` one-record batches."""
    create_topic(sidecar.address, TP.topic)
    with grpc.insecure_channel(sidecar.address) as channel:
        stub = log_service_pb2_grpc.LogServiceStub(channel)
        for i in range(BATCHES):
            batch = build_batch([SimpleRecord(None, b"%d" % i)])
            stub.Produce(log_service_pb2.ProduceRequest(topic=TP.topic, record_batches=batch))
        yield stub


def _subscribe(
    stub: log_service_pb2_grpc.LogServiceStub, arrivals: queue.SimpleQueue[Arrival], **fields: int
) -> PartitionStream:
    # max_bytes 1: one batch a message.
    request = log_service_pb2.SubscribeRequest(topic=TP.topic, partition=TP.partition, max_bytes=1)
    for name, value in fields.items():
        setattr(request, name, value)
    return PartitionStream(TP, stub, request, arrivals)


def _base_offset(arrival: Arrival) -> int:
    assert arrival.message is not None, arrival
    return next(iter_batches(arrival.message.record_batches)).base_offset


def test_the_reader_holds_prefetch_messages_until_they_are_taken(
    stub: log_service_pb2_grpc.LogServiceStub,
) -> None:
    arrivals: queue.SimpleQueue[Arrival] = queue.SimpleQueue()
    stream = _subscribe(stub, arrivals)
    try:
        held = [arrivals.get(timeout=10) for _ in range(PREFETCH)]
        time.sleep(0.5)  # time enough for more, were the reader not held back
        assert arrivals.empty()
        stream.release()
        after = arrivals.get(timeout=10)
    finally:
        stream.cancel()
        stream.join(5)
    assert [_base_offset(a) for a in (*held, after)] == list(range(PREFETCH + 1))


def test_a_cancelled_stream_puts_nothing_more_and_its_reader_ends(
    stub: log_service_pb2_grpc.LogServiceStub,
) -> None:
    arrivals: queue.SimpleQueue[Arrival] = queue.SimpleQueue()
    stream = _subscribe(stub, arrivals)
    first = arrivals.get(timeout=10)
    stream.cancel()
    stream.join(5)
    for _ in range(BATCHES):
        stream.release()
    time.sleep(0.3)
    leftovers = []
    while not arrivals.empty():
        leftovers.append(arrivals.get())
    assert _base_offset(first) == 0
    assert all(a.message is not None for a in leftovers)  # no error, no end reported
    assert len(leftovers) < PREFETCH


def test_a_failed_stream_ends_with_its_typed_error(
    stub: log_service_pb2_grpc.LogServiceStub,
) -> None:
    arrivals: queue.SimpleQueue[Arrival] = queue.SimpleQueue()
    request = log_service_pb2.SubscribeRequest(topic="missing", partition=0, offset=0)
    PartitionStream(TopicPartition("missing", 0), stub, request, arrivals)
    ended = arrivals.get(timeout=10)
    assert ended.message is None
    assert isinstance(ended.error, UnknownTopicOrPartitionError)


def test_a_quiet_stream_is_stalled_only_past_its_limit(
    stub: log_service_pb2_grpc.LogServiceStub,
) -> None:
    arrivals: queue.SimpleQueue[Arrival] = queue.SimpleQueue()
    stream = _subscribe(stub, arrivals)  # no max_wait_ms: nothing comes after the backlog
    try:
        for _ in range(BATCHES):
            arrivals.get(timeout=10)
            stream.release()
        time.sleep(0.4)
        assert stream.stalled(0.2)
        assert not stream.stalled(30)
    finally:
        stream.cancel()
        stream.join(5)
