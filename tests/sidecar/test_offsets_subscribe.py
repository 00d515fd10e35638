"""Subscribe, ListOffsets and DeleteRecords through a real sidecar."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from tierlog.api.v1 import log_service_pb2
from tierlog.storage.records import SimpleRecord, build_batch, decode_records, iter_batches

from .conftest import Sidecar, reason_of


def _produce(sidecar: Sidecar, topic: str, *timestamps: int) -> None:
    batch = build_batch([SimpleRecord(b"k", b"v%d" % ts, ts, ()) for ts in timestamps])
    sidecar.log.Produce(log_service_pb2.ProduceRequest(topic=topic, record_batches=batch))


def _list(sidecar: Sidecar, topic: str, timestamp_ms: int) -> tuple[int, int]:
    answer = sidecar.log.ListOffsets(
        log_service_pb2.ListOffsetsRequest(topic=topic, timestamp_ms=timestamp_ms)
    )
    return answer.offset, answer.timestamp_ms


def test_subscribe_sends_the_backlog_then_tails_new_appends(sidecar: Sidecar) -> None:
    sidecar.create_topic("tail")
    now = int(time.time() * 1000)
    _produce(sidecar, "tail", now, now + 1)
    stream = sidecar.log.Subscribe(log_service_pb2.SubscribeRequest(topic="tail", offset=-2))
    seen: list[int] = []
    backlog, received = threading.Event(), threading.Event()

    def consume() -> None:
        try:
            for message in stream:
                for header in iter_batches(message.record_batches):
                    seen.extend(r.offset for r in decode_records(message.record_batches, header))
                if len(seen) >= 2:
                    backlog.set()
                if len(seen) >= 5:
                    received.set()
                    return
        except grpc.RpcError:
            pass

    consumer = threading.Thread(target=consume)
    consumer.start()
    try:
        assert backlog.wait(10), f"only {seen} of the backlog arrived"  # now it tails
        _produce(sidecar, "tail", now + 2)
        _produce(sidecar, "tail", now + 3, now + 4)
        assert received.wait(10), f"only {seen} arrived"
    finally:
        stream.cancel()
        consumer.join(10)
    assert seen == [0, 1, 2, 3, 4]


def test_subscribe_from_latest_sees_only_new_records(sidecar: Sidecar) -> None:
    sidecar.create_topic("latest")
    now = int(time.time() * 1000)
    _produce(sidecar, "latest", now)
    request = log_service_pb2.SubscribeRequest(topic="latest", offset=-1, max_wait_ms=100)
    stream = sidecar.log.Subscribe(request)
    quiet = next(stream)  # the stream is at the latest offset: nothing to send yet
    assert (quiet.record_batches, quiet.high_watermark) == (b"", 1)
    _produce(sidecar, "latest", now + 1)
    first = next(stream)
    while not first.record_batches:  # a wait that ended before the produce
        first = next(stream)
    stream.cancel()
    assert [h.base_offset for h in iter_batches(first.record_batches)] == [1]
    assert first.high_watermark == 2


def test_subscribe_messages_are_long_polls_and_a_quiet_one_still_comes(sidecar: Sidecar) -> None:
    """With max_wait_ms each message waits that long for min_bytes, then goes out with
    what there is, even nothing (the high watermark tells where the log ends)."""
    sidecar.create_topic("polls")
    max_wait_ms = 300
    request = log_service_pb2.SubscribeRequest(
        topic="polls", offset=-2, max_wait_ms=max_wait_ms, min_bytes=1 << 20
    )
    # The clock starts before the call: the server's wait begins as the call is made, not
    # at the first next(), and a loaded machine may pause this thread between the two.
    started = time.monotonic()
    stream = sidecar.log.Subscribe(request)
    try:
        quiet = next(stream)
        assert time.monotonic() - started >= max_wait_ms / 1000
        assert (quiet.record_batches, quiet.high_watermark) == (b"", 0)
        _produce(sidecar, "polls", 1, 2)  # far below min_bytes: sent when the wait is over
        carrying = next(stream)
        while not carrying.record_batches:  # a wait that began before the produce
            carrying = next(stream)
    finally:
        stream.cancel()
    assert [h.base_offset for h in iter_batches(carrying.record_batches)] == [0]
    assert carrying.high_watermark == 2


@pytest.mark.parametrize("field", ["max_wait_ms", "min_bytes"])
def test_subscribe_refuses_a_negative_wait_or_size(sidecar: Sidecar, field: str) -> None:
    sidecar.create_topic("negative")
    request = log_service_pb2.SubscribeRequest(topic="negative", offset=-2)
    setattr(request, field, -1)
    with pytest.raises(grpc.RpcError) as refused:
        next(sidecar.log.Subscribe(request))
    assert reason_of(refused.value) == "INVALID_REQUEST"


def test_list_offsets_earliest_latest_max_and_by_time(sidecar: Sidecar) -> None:
    sidecar.create_topic("times")
    assert _list(sidecar, "times", -1) == (0, -1)
    assert _list(sidecar, "times", -3) == (-1, -1)
    _produce(sidecar, "times", 1_000, 5_000, 2_000)
    _produce(sidecar, "times", 3_000)
    assert _list(sidecar, "times", -2) == (0, -1)
    assert _list(sidecar, "times", -1) == (4, -1)
    assert _list(sidecar, "times", -3) == (1, 5_000)
    assert _list(sidecar, "times", 2_500) == (1, 5_000)
    assert _list(sidecar, "times", 4_000) == (1, 5_000)
    assert _list(sidecar, "times", 6_000) == (-1, -1)
    with pytest.raises(grpc.RpcError) as caught:
        _list(sidecar, "times", -7)
    assert reason_of(caught.value) == "INVALID_REQUEST"


def test_delete_records_moves_the_log_start_and_survives_a_restart(
    sidecar: Sidecar, sidecar_factory: object
) -> None:
    sidecar.create_topic("trim")
    for ts in range(10):
        _produce(sidecar, "trim", 1_000 + ts)
    deleted = sidecar.log.DeleteRecords(
        log_service_pb2.DeleteRecordsRequest(topic="trim", offset=4)
    )
    assert deleted.low_watermark == 4
    assert _list(sidecar, "trim", -2) == (4, -1)
    with pytest.raises(grpc.RpcError) as below:
        sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="trim", offset=3))
    assert below.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert reason_of(below.value) == "OFFSET_OUT_OF_RANGE"
    with pytest.raises(grpc.RpcError) as beyond:
        sidecar.log.DeleteRecords(log_service_pb2.DeleteRecordsRequest(topic="trim", offset=11))
    assert reason_of(beyond.value) == "OFFSET_OUT_OF_RANGE"
    everything = sidecar.log.DeleteRecords(
        log_service_pb2.DeleteRecordsRequest(topic="trim", offset=-1)
    )
    assert everything.low_watermark == 10

    assert sidecar.stop() == 0
    assert callable(sidecar_factory)
    again = sidecar_factory(sidecar.data_dir)
    assert _list(again, "trim", -2) == (10, -1)
    assert _list(again, "trim", -1) == (10, -1)
