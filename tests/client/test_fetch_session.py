"""A broker's fetch session against a real sidecar: back pressure, errors in band,
answers from before a seek, cancel."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

import grpc
import pytest

from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.client import TopicPartition
from tierlog.client.fetch_session import PREFETCH, Arrival, SessionStream
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


def _session(
    stub: log_service_pb2_grpc.LogServiceStub, arrivals: queue.SimpleQueue[Arrival]
) -> SessionStream:
    # max_bytes 1: one batch a message.
    settings = log_service_pb2.FetchSessionRequest(max_bytes=1)
    return SessionStream("sidecar", stub, settings, arrivals.put)


def _base_offsets(arrival: Arrival) -> list[int]:
    assert arrival.message is not None, arrival
    return [
        header.base_offset
        for data in arrival.message.partitions
        for header in iter_batches(data.record_batches)
    ]


def test_the_session_holds_prefetch_messages_until_they_are_taken(
    stub: log_service_pb2_grpc.LogServiceStub,
) -> None:
    arrivals: queue.SimpleQueue[Arrival] = queue.SimpleQueue()
    session = _session(stub, arrivals)
    try:
        session.add(TP, 0, -1, 0)
        session.flush()
        held = [arrivals.get(timeout=10) for _ in range(PREFETCH)]
        time.sleep(0.5)  # time enough for more, were the broker not held to the credits
        assert arrivals.empty()
        session.release()
        after = arrivals.get(timeout=10)
    finally:
        session.cancel()
        session.join(5)
    assert [_base_offsets(a) for a in (*held, after)] == [[i] for i in range(PREFETCH + 1)]


def test_a_failed_partition_answers_in_band_and_the_session_goes_on(
    stub: log_service_pb2_grpc.LogServiceStub,
) -> None:
    arrivals: queue.SimpleQueue[Arrival] = queue.SimpleQueue()
    session = _session(stub, arrivals)
    missing = TopicPartition("missing", 0)
    try:
        session.add(missing, 0, -1, 0)
        session.flush()
        failed = arrivals.get(timeout=10)
        assert failed.message is not None
        (data,) = failed.message.partitions
        assert session.current(data)
        assert data.error.reason == "UNKNOWN_TOPIC_OR_PARTITION"
        session.left(missing)
        assert session.partitions == frozenset()
        session.release()
        session.add(TP, 3, -1, 0)
        session.flush()
        assert _base_offsets(arrivals.get(timeout=10)) == [3]
    finally:
        session.cancel()
        session.join(5)


def test_answers_to_an_add_replaced_since_are_not_current(
    stub: log_service_pb2_grpc.LogServiceStub,
) -> None:
    arrivals: queue.SimpleQueue[Arrival] = queue.SimpleQueue()
    session = _session(stub, arrivals)
    try:
        session.add(TP, 0, -1, 0)
        session.flush()
        first = arrivals.get(timeout=10)
        session.add(TP, 4, -1, 0)  # a seek, while the next message may be on its way
        session.release()
        stale: list[int] = []
        while True:
            arrival = arrivals.get(timeout=10)
            assert arrival.message is not None
            (data,) = arrival.message.partitions
            if session.current(data):
                break
            stale += _base_offsets(arrival)
    finally:
        session.cancel()
        session.join(5)
    assert first.message is not None and not session.current(first.message.partitions[0])
    assert stale in ([], [1])  # the one sent before the seek reached the broker, if any
    assert _base_offsets(arrival) == [4]


def test_a_cancelled_session_puts_nothing_more_and_its_reader_ends(
    stub: log_service_pb2_grpc.LogServiceStub,
) -> None:
    arrivals: queue.SimpleQueue[Arrival] = queue.SimpleQueue()
    session = _session(stub, arrivals)
    session.add(TP, 0, -1, 0)
    session.flush()
    first = arrivals.get(timeout=10)
    session.cancel()
    session.join(5)
    leftovers = []
    while not arrivals.empty():
        leftovers.append(arrivals.get())
    assert _base_offsets(first) == [0]
    assert all(a.message is not None for a in leftovers)  # no error, no end reported
    assert len(leftovers) < PREFETCH


def test_a_quiet_session_is_stalled_only_past_its_limit(
    stub: log_service_pb2_grpc.LogServiceStub,
) -> None:
    arrivals: queue.SimpleQueue[Arrival] = queue.SimpleQueue()
    session = _session(stub, arrivals)  # no max_wait_ms: nothing comes after the backlog
    try:
        session.add(TP, 0, -1, 0)
        session.flush()
        for _ in range(BATCHES):
            arrivals.get(timeout=10)
            session.release()
        time.sleep(0.4)
        assert session.stalled(0.2)
        assert not session.stalled(30)
    finally:
        session.cancel()
        session.join(5)
