"""FetchSession through a real sidecar: many partitions on one stream, each partition's
error in band, seeks by generation, and the client's credits."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import grpc
import pytest

from tierlog.api.v1 import log_service_pb2
from tierlog.storage.records import SimpleRecord, build_batch, decode_records, iter_batches

from .conftest import Sidecar, reason_of

_END = log_service_pb2.FetchSessionRequest()  # put last: the client closes its side


class Session:
    """A FetchSession call fed from a queue of requests."""

    def __init__(self, sidecar: Sidecar) -> None:
        self._requests: queue.SimpleQueue[log_service_pb2.FetchSessionRequest] = queue.SimpleQueue()
        self.call = sidecar.log.FetchSession(self._feed(), timeout=30)

    def _feed(self) -> Iterator[log_service_pb2.FetchSessionRequest]:
        while (request := self._requests.get()) is not _END:
            yield request

    def send(self, request: log_service_pb2.FetchSessionRequest) -> None:
        self._requests.put(request)

    def next(self) -> log_service_pb2.FetchSessionResponse:
        message: log_service_pb2.FetchSessionResponse = next(self.call)
        return message

    def close(self) -> None:
        self._requests.put(_END)
        self.call.cancel()


def _produce(sidecar: Sidecar, topic: str, partition: int, *values: bytes) -> None:
    batch = build_batch([SimpleRecord(None, value, 1_000, ()) for value in values])
    sidecar.log.Produce(
        log_service_pb2.ProduceRequest(topic=topic, partition=partition, record_batches=batch)
    )


def _values(data: log_service_pb2.FetchSessionPartitionData) -> list[bytes]:
    batches = data.record_batches
    return [
        record.value or b""
        for header in iter_batches(batches)
        for record in decode_records(batches, header)
    ]


def _add(
    topic: str, partition: int, offset: int = -2, generation: int = 1
) -> log_service_pb2.FetchSessionPartition:
    return log_service_pb2.FetchSessionPartition(
        topic=topic, partition=partition, offset=offset, generation=generation
    )


def test_one_stream_reads_many_partitions_then_tails_them(sidecar: Sidecar) -> None:
    sidecar.create_topic("many", partitions=40)
    for partition in range(40):
        _produce(sidecar, "many", partition, b"old-%d" % partition)
    session = Session(sidecar)
    try:
        session.send(
            log_service_pb2.FetchSessionRequest(
                add=[_add("many", p) for p in range(40)], credits=1_000, max_wait_ms=500
            )
        )
        seen: dict[int, list[bytes]] = {p: [] for p in range(40)}
        while sum(map(len, seen.values())) < 40:
            for data in session.next().partitions:
                assert (data.topic, data.generation) == ("many", 1)
                assert not data.HasField("error")
                assert data.high_watermark == 1 and data.last_stable_offset == 1
                seen[data.partition] += _values(data)
        assert seen == {p: [b"old-%d" % p] for p in range(40)}
        _produce(sidecar, "many", 17, b"new")  # the session tails every partition
        news = [data for data in session.next().partitions if data.record_batches]
        while not news:  # a quiet message (max_wait_ms) that left before the produce
            news = [data for data in session.next().partitions if data.record_batches]
        assert [(data.partition, _values(data), data.high_watermark) for data in news] == [
            (17, [b"new"], 2)
        ]
    finally:
        session.close()


def test_a_partition_that_fails_leaves_the_session_and_the_others_go_on(
    sidecar: Sidecar,
) -> None:
    sidecar.create_topic("good")
    sidecar.create_topic("later")
    _produce(sidecar, "good", 0, b"a")
    session = Session(sidecar)
    try:
        from_the_future = _add("later", 0)
        from_the_future.current_leader_epoch = 99  # an epoch this broker has not seen
        session.send(
            log_service_pb2.FetchSessionRequest(
                add=[_add("missing", 0), _add("good", 0, offset=5), from_the_future],
                credits=10,
            )
        )
        errors: dict[str, str] = {}
        while len(errors) < 3:
            for data in session.next().partitions:
                errors[data.topic] = data.error.reason
        assert errors == {
            "missing": "UNKNOWN_TOPIC_OR_PARTITION",
            "good": "OFFSET_OUT_OF_RANGE",  # past the log end
            "later": "UNKNOWN_LEADER_EPOCH",
        }
        session.send(log_service_pb2.FetchSessionRequest(add=[_add("good", 0, 0, generation=2)]))
        (data,) = session.next().partitions
        assert (data.topic, data.generation, _values(data)) == ("good", 2, [b"a"])
    finally:
        session.close()


def test_a_seek_reads_again_under_the_new_generation(sidecar: Sidecar) -> None:
    sidecar.create_topic("seek")
    _produce(sidecar, "seek", 0, b"a", b"b", b"c")
    session = Session(sidecar)
    try:
        session.send(log_service_pb2.FetchSessionRequest(add=[_add("seek", 0, 0)], credits=1))
        (first,) = session.next().partitions
        assert _values(first) == [b"a", b"b", b"c"]
        session.send(
            log_service_pb2.FetchSessionRequest(add=[_add("seek", 0, 1, generation=7)], credits=1)
        )
        (again,) = session.next().partitions
        assert (again.generation, _values(again)) == (7, [b"a", b"b", b"c"])  # whole batches
    finally:
        session.close()


def test_a_bad_session_request_ends_the_stream_with_its_reason(sidecar: Sidecar) -> None:
    session = Session(sidecar)
    session.send(log_service_pb2.FetchSessionRequest(credits=-1))
    with pytest.raises(grpc.RpcError) as refused:
        session.next()
    assert reason_of(refused.value) == "INVALID_REQUEST"
    session.close()
