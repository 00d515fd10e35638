"""The consumer against a real sidecar: positions, seeks by offset and time, resets, long poll."""

from __future__ import annotations

import threading
import time

import pytest

from tierlog.client import Consumer, NoOffsetForPartitionError, Producer, TopicPartition
from tierlog.client.consumer import ConsumerRecord

from .conftest import create_topic
from .sidecars import LiveSidecar

TP = TopicPartition("events", 0)
BASE_MS = 1_700_000_000_000


def _fill(sidecar: LiveSidecar, count: int = 100) -> None:
    create_topic(sidecar.address, "events")
    with Producer({"bootstrap.servers": sidecar.address, "batch.size": 500}) as producer:
        for i in range(count):  # one record each 1000 ms, in batches of a few
            producer.send("events", b"%d" % i, timestamp=BASE_MS + 1000 * i)
        producer.flush()


def _consumer(sidecar: LiveSidecar, **props: object) -> Consumer:
    config: dict[str, object] = {"bootstrap.servers": sidecar.address}
    config.update({key.replace("_", "."): value for key, value in props.items()})
    return Consumer(config)


def _poll_until(consumer: Consumer, count: int, timeout_s: float = 10) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(200)
    return records


def test_seek_by_offset_reads_from_the_middle_of_a_batch(sidecar: LiveSidecar) -> None:
    _fill(sidecar)
    with _consumer(sidecar, max_poll_records=7) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, 42)
        first = consumer.poll(1000)
        assert [r.offset for r in first] == list(range(42, 49))  # max.poll.records
        assert consumer.position(TP) == 49
        rest = _poll_until(consumer, 51)
        assert [r.offset for r in rest] == list(range(49, 100))
        assert [r.value for r in rest] == [b"%d" % i for i in range(49, 100)]


def test_seek_by_timestamp_finds_the_first_record_at_or_after_it(sidecar: LiveSidecar) -> None:
    _fill(sidecar)
    with _consumer(sidecar) as consumer:
        consumer.assign([TP])
        found = consumer.offsets_for_times({TP: BASE_MS + 30_500})[TP]
        assert found is not None and (found.offset, found.timestamp) == (31, BASE_MS + 31_000)
        assert consumer.offsets_for_times({TP: BASE_MS + 10**9})[TP] is None
        consumer.seek_to_timestamp(BASE_MS + 60_000)
        records = _poll_until(consumer, 40)
        assert records[0].offset == 60 and records[0].timestamp == BASE_MS + 60_000
        assert consumer.beginning_offsets([TP]) == {TP: 0}
        assert consumer.end_offsets([TP]) == {TP: 100}


def test_auto_offset_reset_earliest_latest_and_none(sidecar: LiveSidecar) -> None:
    _fill(sidecar, 10)
    with _consumer(sidecar, auto_offset_reset="earliest") as earliest:
        earliest.assign([TP])
        assert len(_poll_until(earliest, 10)) == 10
    with _consumer(sidecar, auto_offset_reset="latest") as latest:
        latest.assign([TP])
        assert latest.poll(100) == [] and latest.position(TP) == 10
    with _consumer(sidecar, auto_offset_reset="none") as strict:
        strict.assign([TP])
        with pytest.raises(NoOffsetForPartitionError):
            strict.poll(100)


def test_a_position_past_the_log_end_is_reset(sidecar: LiveSidecar) -> None:
    _fill(sidecar, 10)
    with _consumer(sidecar, auto_offset_reset="earliest") as consumer:
        consumer.assign([TP])
        consumer.seek(TP, 1_000_000)
        records = _poll_until(consumer, 10)
        assert [r.offset for r in records] == list(range(10))


def test_poll_long_polls_and_wakes_on_a_produce(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "events", partitions=2)
    with _consumer(sidecar, auto_offset_reset="latest") as consumer:
        consumer.subscribe("events")
        assert consumer.poll(0) == []

        def produce_later() -> None:
            time.sleep(0.3)
            with Producer({"bootstrap.servers": sidecar.address}) as producer:
                producer.send("events", b"late", partition=1).result(timeout=10)

        thread = threading.Thread(target=produce_later)
        started = time.monotonic()
        thread.start()
        records = consumer.poll(10_000)
        waited = time.monotonic() - started
        thread.join()
    assert [(r.partition, r.value) for r in records] == [(1, b"late")]
    assert 0.25 < waited < 5


def test_an_empty_poll_returns_after_its_timeout(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "events")
    with _consumer(sidecar, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([TP])
        started = time.monotonic()
        assert consumer.poll(300) == []
        assert 0.25 < time.monotonic() - started < 3


def test_the_next_fetch_is_on_its_way_before_the_records_are_handed_out(
    sidecar: LiveSidecar,
) -> None:
    _fill(sidecar)  # batches of a few records
    with _consumer(sidecar, max_partition_fetch_bytes=1, max_poll_records=1) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, 0)
        [first] = consumer.poll(1000)  # a fetch of one batch: records 0..n-1 buffered
        prefetch = consumer._in_flight[TP]
        batch_end = prefetch.offset
        assert first.offset == 0 and batch_end > 1
        assert [r.offset for r in _poll_until(consumer, batch_end - 1)] == list(range(1, batch_end))
        records = _poll_until(consumer, 100 - batch_end)
        assert [r.offset for r in records] == list(range(batch_end, 100))


def test_records_are_named_tuples_of_the_fetched_fields(sidecar: LiveSidecar) -> None:
    _fill(sidecar, 3)
    with _consumer(sidecar, auto_offset_reset="earliest") as consumer:
        consumer.assign([TP])
        records = _poll_until(consumer, 3)
    assert records[1] == ConsumerRecord("events", 0, 1, BASE_MS + 1000, None, b"1", ())
    assert records[1]._asdict()["value"] == b"1"
