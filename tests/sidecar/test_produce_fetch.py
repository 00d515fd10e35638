"""Produce and Fetch through a real sidecar: batches stored as sent, read back whole."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from tests.support.scrape import METRICS, wait_for_calls_in_flight
from tests.support.small_disk import fill_leaving, small_disk_at
from tierlog.api.v1 import common_pb2, log_service_pb2
from tierlog.storage.records import (
    CompressionType,
    Record,
    SimpleRecord,
    build_batch,
    decode_records,
    iter_batches,
)

from .conftest import Sidecar, SidecarFactory, reason_of


def _now_ms() -> int:
    return int(time.time() * 1000)


def _batch(values: list[bytes], compression: CompressionType = CompressionType.NONE) -> bytes:
    now = _now_ms()
    return build_batch(
        [SimpleRecord(b"k%d" % i, value, now, ()) for i, value in enumerate(values)],
        compression=compression,
    )


def _records(data: bytes) -> list[Record]:
    return [record for header in iter_batches(data) for record in decode_records(data, header)]


def _produce(
    sidecar: Sidecar, topic: str, data: bytes, partition: int = 0
) -> log_service_pb2.ProduceResponse:
    response: log_service_pb2.ProduceResponse = sidecar.log.Produce(
        log_service_pb2.ProduceRequest(topic=topic, partition=partition, record_batches=data)
    )
    return response


def test_batches_come_back_whole_with_their_offsets(sidecar: Sidecar) -> None:
    sidecar.create_topic("orders", partitions=2)
    first = _batch([b"a", b"b", b"c"])
    second = _batch([b"d", b"e"], CompressionType.ZSTD)
    one = _produce(sidecar, "orders", first + second)
    assert (one.base_offset, one.last_offset, one.log_start_offset) == (0, 4, 0)
    assert one.log_append_time_ms == -1
    two = _produce(sidecar, "orders", _batch([b"f"], CompressionType.LZ4))
    assert (two.base_offset, two.last_offset) == (5, 5)

    fetched = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="orders", offset=0))
    assert (fetched.high_watermark, fetched.log_start_offset) == (6, 0)
    headers = list(iter_batches(fetched.record_batches))
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 4), (5, 5)]
    assert fetched.record_batches[61:][: len(first) - 61] == first[61:]  # bytes as sent
    assert [r.value for r in _records(fetched.record_batches)] == [
        b"a",
        b"b",
        b"c",
        b"d",
        b"e",
        b"f",
    ]

    # From the middle of a batch: the whole batch that holds the offset.
    middle = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="orders", offset=4))
    assert [h.base_offset for h in iter_batches(middle.record_batches)] == [3, 5]
    # At the log end: nothing yet, at once.
    end = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="orders", offset=6))
    assert end.record_batches == b"" and end.high_watermark == 6
    # The other partition is its own log.
    other = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="orders", partition=1, offset=0))
    assert other.record_batches == b"" and other.high_watermark == 0


def test_max_bytes_cuts_at_whole_batches_but_returns_at_least_one(sidecar: Sidecar) -> None:
    sidecar.create_topic("big")
    batch = _batch([b"x" * 1000])
    for _ in range(5):
        _produce(sidecar, "big", batch)
    small = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="big", offset=0, max_bytes=10))
    assert len(list(iter_batches(small.record_batches))) == 1
    two = sidecar.log.Fetch(
        log_service_pb2.FetchRequest(topic="big", offset=0, max_bytes=2 * len(batch) + 10)
    )
    assert [h.base_offset for h in iter_batches(two.record_batches)] == [0, 1]


def test_plain_records_are_batched_by_the_server(sidecar: Sidecar) -> None:
    sidecar.create_topic("plain", compression_type="gzip")
    response = sidecar.log.Produce(
        log_service_pb2.ProduceRequest(
            topic="plain",
            records=log_service_pb2.RecordList(
                records=[
                    common_pb2.Record(key=b"k", value=b"v", timestamp_ms=1_700_000_000_000),
                    common_pb2.Record(value=b"no key"),
                    common_pb2.Record(
                        key=b"t",
                        headers=[
                            common_pb2.RecordHeader(key="h", value=b"1"),
                            common_pb2.RecordHeader(key="null"),
                        ],
                    ),
                ]
            ),
        )
    )
    assert (response.base_offset, response.last_offset) == (0, 2)
    fetched = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="plain", offset=0))
    (header,) = iter_batches(fetched.record_batches)
    assert header.compression is CompressionType.GZIP
    records = _records(fetched.record_batches)
    assert [(r.key, r.value) for r in records] == [(b"k", b"v"), (None, b"no key"), (b"t", None)]
    assert records[0].timestamp == 1_700_000_000_000
    assert abs(records[1].timestamp - _now_ms()) < 60_000
    assert records[2].headers == (("h", b"1"), ("null", None))


def test_log_append_time_topics_answer_the_broker_time(sidecar: Sidecar) -> None:
    sidecar.create_topic("stamped", message_timestamp_type="LogAppendTime")
    before = _now_ms()
    response = _produce(sidecar, "stamped", _batch([b"a"]))
    assert before <= response.log_append_time_ms <= _now_ms()


def test_a_long_poll_fetch_wakes_on_a_produce(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(tmp_path / "data", METRICS)
    sidecar.create_topic("poll")
    max_wait_ms = 20_000
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            sidecar.log.Fetch,
            log_service_pb2.FetchRequest(
                topic="poll", offset=0, max_wait_ms=max_wait_ms, min_bytes=1
            ),
        )
        wait_for_calls_in_flight(sidecar, "Fetch", 1)  # the server holds it
        assert not waiting.done()
        _produce(sidecar, "poll", _batch([b"wake up"]))
        fetched = waiting.result(timeout=max_wait_ms / 1000)
    assert time.monotonic() - started < max_wait_ms / 1000  # the produce, not max_wait
    assert [r.value for r in _records(fetched.record_batches)] == [b"wake up"]


def test_a_long_poll_answers_before_the_callers_deadline(sidecar: Sidecar) -> None:
    sidecar.create_topic("hurried")
    fetched = sidecar.log.Fetch(  # DEADLINE_EXCEEDED, were it to wait out max_wait
        log_service_pb2.FetchRequest(topic="hurried", offset=0, max_wait_ms=20_000, min_bytes=1),
        timeout=1.0,
    )
    assert fetched.record_batches == b""  # an empty answer


def test_a_long_poll_waits_for_min_bytes_or_max_wait(sidecar: Sidecar) -> None:
    sidecar.create_topic("min")
    batch = _batch([b"y" * 100])
    _produce(sidecar, "min", batch)
    max_wait_ms = 300
    started = time.monotonic()
    fetched = sidecar.log.Fetch(  # fewer bytes than min_bytes ever: max_wait ends it
        log_service_pb2.FetchRequest(
            topic="min", offset=0, max_wait_ms=max_wait_ms, min_bytes=10_000
        )
    )
    assert time.monotonic() - started >= max_wait_ms / 1000  # waited out max_wait
    assert (
        fetched.record_batches
        == sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="min", offset=0)).record_batches
    )

    def keep_producing(stop: threading.Event) -> None:
        while not stop.is_set():
            _produce(sidecar, "min", batch)
            time.sleep(0.01)

    stop = threading.Event()
    producer = threading.Thread(target=keep_producing, args=(stop,))
    producer.start()
    try:
        filled = sidecar.log.Fetch(
            log_service_pb2.FetchRequest(topic="min", offset=0, max_wait_ms=20_000, min_bytes=2000)
        )
    finally:
        stop.set()
        producer.join()
    assert len(filled.record_batches) >= 2000


def test_produce_stream_answers_each_request_in_order(sidecar: Sidecar) -> None:
    sidecar.create_topic("piped")
    requests = [
        log_service_pb2.ProduceStreamRequest(
            produce=log_service_pb2.ProduceRequest(
                topic="piped", record_batches=_batch([b"%d" % i])
            )
        )
        for i in range(20)
    ]
    requests.insert(
        5,
        log_service_pb2.ProduceStreamRequest(
            produce=log_service_pb2.ProduceRequest(topic="nowhere", record_batches=_batch([b"-"]))
        ),
    )
    requests.insert(
        9,
        log_service_pb2.ProduceStreamRequest(
            produce=log_service_pb2.ProduceRequest(
                topic="piped", acks=log_service_pb2.Acks.ValueType(9), record_batches=_batch([b"-"])
            )
        ),
    )
    answers = list(sidecar.log.ProduceStream(iter(requests)))
    assert len(answers) == 22
    assert answers[5].error.reason == "UNKNOWN_TOPIC_OR_PARTITION"
    assert answers[9].error.reason == "INVALID_REQUIRED_ACKS"
    produced = [a.produced.base_offset for a in answers if a.HasField("produced")]
    assert produced == list(range(20))


def test_acks_none_answers_at_once_and_still_appends(sidecar: Sidecar) -> None:
    sidecar.create_topic("fire")
    response = sidecar.log.Produce(
        log_service_pb2.ProduceRequest(
            topic="fire", acks=log_service_pb2.ACKS_NONE, record_batches=_batch([b"z"])
        )
    )
    assert response.base_offset == -1
    fetched = sidecar.log.Fetch(
        log_service_pb2.FetchRequest(topic="fire", offset=0, max_wait_ms=10_000)
    )
    assert [r.value for r in _records(fetched.record_batches)] == [b"z"]


def test_an_unknown_partition_is_named(sidecar: Sidecar) -> None:
    sidecar.create_topic("two", partitions=2)
    with pytest.raises(grpc.RpcError) as caught:
        _produce(sidecar, "two", _batch([b"a"]), partition=2)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert reason_of(caught.value) == "UNKNOWN_TOPIC_OR_PARTITION"


def test_a_full_disk_fails_a_produce_with_a_logged_storage_error_until_space_is_freed(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    with small_disk_at(tmp_path / "disk", "8m") as disk:
        sidecar = sidecar_factory(disk / "data", "log.index.size.max.bytes=4096")
        sidecar.create_topic("orders")
        stored = _produce(sidecar, "orders", _batch([b"before"]))
        filler = fill_leaving(disk, 16 * 1024)
        big = _batch([bytes(1024)] * 64)  # 64 KiB: more than is left
        with pytest.raises(grpc.RpcError) as refused:
            _produce(sidecar, "orders", big)
        assert reason_of(refused.value) == "KAFKA_STORAGE_ERROR"
        assert "append to orders-0 failed: no space left" in sidecar.output

        filler.unlink()
        after = _produce(sidecar, "orders", big)
        assert after.base_offset == stored.last_offset + 1  # the failed append left no trace
        fetched = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="orders", offset=0))
        values = [record.value for record in _records(fetched.record_batches)]
        assert values == [b"before"] + [bytes(1024)] * 64
        sidecar.stop()
