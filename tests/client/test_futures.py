"""One result per batch, a light future per record: metadata made on demand, callbacks
in record order, and records that follow their batch into the parts of a split."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from tierlog.client.futures import Callback, ProduceRequestResult, RecordFuture, RecordMetadata
from tierlog.client.producer_batch import CompressionRatioEstimator, ProducerBatch
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records import CompressionType
from tierlog.storage.topic_partition import TopicPartition


def result_of(count: int) -> ProduceRequestResult:
    return ProduceRequestResult("t", 3, [1000 + i for i in range(count)])


def test_each_record_reads_its_offset_and_timestamp_from_the_batch() -> None:
    result = result_of(3)
    futures = [RecordFuture(result, i) for i in range(3)]
    assert not any(f.done() for f in futures)
    result.complete(base_offset=40, log_append_time=-1)
    assert [f.result() for f in futures] == [
        RecordMetadata("t", 3, 40 + i, 1000 + i) for i in range(3)
    ]
    assert all(f.done() and f.exception() is None and not f.cancelled() for f in futures)


def test_log_append_time_and_unknown_offsets_are_reported_as_kafka_does() -> None:
    result = result_of(2)
    result.complete(base_offset=-1, log_append_time=5555)  # acks=0, LogAppendTime topic
    assert RecordFuture(result, 1).result() == RecordMetadata("t", 3, -1, 5555)


def test_callbacks_run_once_in_record_order_and_late_ones_at_once() -> None:
    result = result_of(3)
    seen: list[tuple[int, object]] = []

    def remember(index: int) -> Callback:
        return lambda metadata, error: seen.append((index, metadata.offset if metadata else error))

    for index in (2, 0, 1):
        result.add_callback(index, remember(index))
    RecordFuture(result, 0).add_done_callback(lambda f: seen.append((-1, f.result().offset)))
    result.complete(10, -1)
    result.complete(99, -1)  # settled once
    assert seen == [(2, 12), (0, 10), (1, 11), (-1, 10)]
    result.add_callback(1, lambda m, e: seen.append((7, m.offset if m else e)))
    assert seen[-1] == (7, 11)


def test_a_failed_batch_fails_every_record_and_a_raising_callback_harms_none() -> None:
    result = result_of(2)
    failure = CorruptRecordError("stored nowhere")
    errors: list[BaseException | None] = []

    def broken(metadata: RecordMetadata | None, error: BaseException | None) -> None:
        raise RuntimeError("an application bug")

    result.add_callback(0, broken)
    result.add_callback(1, lambda metadata, error: errors.append(error))
    result.complete(-1, -1, failure)
    assert errors == [failure]
    with pytest.raises(CorruptRecordError):
        RecordFuture(result, 0).result()
    assert RecordFuture(result, 1).exception() is failure


def test_result_times_out_and_wakes_when_completed_from_another_thread() -> None:
    result = result_of(1)
    future = RecordFuture(result, 0)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.05)
    threading.Timer(0.05, result.complete, (7, -1)).start()
    assert future.result(timeout=10).offset == 7


def test_records_follow_a_split_into_its_parts() -> None:
    whole, first, second = result_of(5), result_of(2), result_of(3)
    seen: list[tuple[int, int]] = []

    def remember(index: int) -> Callback:
        return lambda metadata, _error: seen.append((index, metadata.offset if metadata else -1))

    for index in range(5):
        whole.add_callback(index, remember(index))
    futures = [RecordFuture(whole, i) for i in range(5)]
    waiter = concurrent.futures.ThreadPoolExecutor(1).submit(futures[4].result, 10)
    whole.chain([(0, first), (2, second)])
    assert [whole.locate(i) for i in range(5)] == [
        (first, 0),
        (first, 1),
        (second, 0),
        (second, 1),
        (second, 2),
    ]
    second.complete(200, -1)
    first.complete(100, -1)
    assert waiter.result(timeout=10).offset == 202  # a waiter before the split follows it
    assert [f.result().offset for f in futures] == [100, 101, 200, 201, 202]
    assert seen == [(2, 200), (3, 201), (4, 202), (0, 100), (1, 101)]


def test_a_producer_batch_completes_its_records_through_its_result() -> None:
    batch = ProducerBatch(
        TopicPartition("t", 0),
        created_ms=0,
        write_limit_bytes=1 << 20,
        reserved_memory_bytes=0,
        compression=CompressionType.NONE,
        ratio=CompressionRatioEstimator(),
    )
    for n in range(3):
        assert batch.try_append(None, b"v%d" % n, 1000 + n) is not None
    futures = [RecordFuture(batch.result, i) for i in range(3)]
    batch.result.complete(7, -1)
    assert [(f.result().offset, f.result().timestamp) for f in futures] == [
        (7, 1000),
        (8, 1001),
        (9, 1002),
    ]


def test_a_record_future_is_a_concurrent_future_for_wait_and_as_completed() -> None:
    """``concurrent.futures.wait`` and ``as_completed`` over records settled from another
    thread while they wait, and over ones settled before."""
    early, late = result_of(2), result_of(3)
    early.complete(0, -1)
    futures: list[concurrent.futures.Future[RecordMetadata]] = []
    futures += [RecordFuture(early, i) for i in range(2)]
    futures += [RecordFuture(late, i) for i in range(3)]
    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    done, pending = concurrent.futures.wait(futures, timeout=0)
    assert (len(done), len(pending)) == (2, 3)
    settler = threading.Timer(0.05, late.complete, (10, -1))
    settler.start()
    done, pending = concurrent.futures.wait(futures, timeout=10)
    settler.join()
    assert (len(done), len(pending)) == (5, 0)
    completed = list(concurrent.futures.as_completed(futures, timeout=10))  # each once
    assert sorted(f.result().offset for f in completed) == [0, 1, 10, 11, 12]
    assert not futures[0].cancel() and not futures[0].cancelled()
    with pytest.raises(RuntimeError):
        futures[0].set_result(futures[0].result())


def test_asyncio_wrap_future_awaits_a_record() -> None:
    result = result_of(1)
    future = RecordFuture(result, 0)

    async def wait_in_a_loop() -> int:
        threading.Timer(0.05, result.complete, (7, -1)).start()
        return (await asyncio.wrap_future(future)).offset

    assert asyncio.run(wait_in_a_loop()) == 7
