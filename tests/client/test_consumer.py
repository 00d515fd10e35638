"""The consumer against a real sidecar: positions, seeks by offset and time, resets, long poll."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import pytest

from tests.support.tcp_fault_proxy import TcpFaultProxy
from tierlog.client import (
    Consumer,
    NoOffsetForPartitionError,
    Producer,
    TopicPartition,
    WakeupError,
)
from tierlog.client.consumer import ConsumerRecord
from tierlog.storage.errors import CorruptRecordError, UnknownTopicOrPartitionError
from tierlog.storage.records import V2_HEADER_SIZE
from tierlog.storage.records.batch import ATTRIBUTES_OFFSET, LENGTH_OFFSET, MAGIC_OFFSET

from .conftest import SidecarStarter, create_topic, poll_until, two_brokers
from .sidecars import LiveSidecar, damage_batch, free_port, produce_batches

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


def _poll_during(
    consumer: Consumer, meanwhile: Callable[[], None], timeout_ms: int
) -> tuple[list[ConsumerRecord], float]:
    """One ``poll(timeout_ms)`` while ``meanwhile`` runs in a thread; its records and the
    seconds it took."""
    thread = threading.Thread(target=meanwhile)
    started = time.monotonic()
    thread.start()
    records = consumer.poll(timeout_ms)
    waited = time.monotonic() - started
    thread.join()
    return records, waited


def test_seek_by_offset_reads_from_the_middle_of_a_batch(sidecar: LiveSidecar) -> None:
    _fill(sidecar)
    with _consumer(sidecar, max_poll_records=7) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, 42)
        first = consumer.poll(1000)
        assert [r.offset for r in first] == list(range(42, 49))  # max.poll.records
        assert consumer.position(TP) == 49
        rest = poll_until(consumer, 51)
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
        records = poll_until(consumer, 40)
        assert records[0].offset == 60 and records[0].timestamp == BASE_MS + 60_000
        assert consumer.beginning_offsets([TP]) == {TP: 0}
        assert consumer.end_offsets([TP]) == {TP: 100}


def test_auto_offset_reset_earliest_latest_and_none(sidecar: LiveSidecar) -> None:
    _fill(sidecar, 10)
    with _consumer(sidecar, auto_offset_reset="earliest") as earliest:
        earliest.assign([TP])
        assert len(poll_until(earliest, 10)) == 10
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
        records = poll_until(consumer, 10)
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

        records, waited = _poll_during(consumer, produce_later, 10_000)
    assert [(r.partition, r.value) for r in records] == [(1, b"late")]
    assert 0.25 < waited < 5


def test_an_empty_poll_returns_after_its_timeout(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "events")
    with _consumer(sidecar, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([TP])
        started = time.monotonic()
        assert consumer.poll(300) == []
        assert 0.25 < time.monotonic() - started < 3


def test_wakeup_ends_the_poll_under_way_or_else_the_next_one_once(sidecar: LiveSidecar) -> None:
    """As Kafka's ``wakeup``: the poll waiting raises at once; called between polls, the
    next poll raises; either way only once, and records are read after it."""
    _fill(sidecar, count=3)
    with _consumer(sidecar, auto_offset_reset="latest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([TP])

        waker = threading.Timer(0.3, consumer.wakeup)
        started = time.monotonic()
        waker.start()
        with pytest.raises(WakeupError):
            consumer.poll(30_000)
        assert 0.25 < time.monotonic() - started < 5
        waker.join()
        consumer.wakeup()
        with pytest.raises(WakeupError):
            consumer.poll(30_000)
        started = time.monotonic()
        assert consumer.poll(300) == []  # the mark each wake-up left woke nothing more
        assert time.monotonic() - started >= 0.25
        consumer.seek(TP, 0)
        records = poll_until(consumer, 3)
    assert [r.value for r in records] == [b"0", b"1", b"2"]


def _produce_batches(sidecar: LiveSidecar, batches: int, per_batch: int) -> None:
    """``batches`` batches of ``per_batch`` records each, sent as they are."""
    create_topic(sidecar.address, "events")
    produce_batches(sidecar.address, "events", batches, per_batch)


def test_the_stream_runs_ahead_of_the_records_handed_out(sidecar: LiveSidecar) -> None:
    """Messages after the one being returned are already here: with the sidecar
    stopped, the records of the next batches still come (one batch a message)."""
    _produce_batches(sidecar, batches=3, per_batch=5)
    with _consumer(sidecar, max_partition_fetch_bytes=1, max_poll_records=1) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, 0)
        [first] = consumer.poll(5000)
        time.sleep(0.5)  # time for the next messages to come
        sidecar.process.send_signal(signal.SIGSTOP)
        try:
            ahead = poll_until(consumer, 9, timeout_s=3)
        finally:
            sidecar.process.send_signal(signal.SIGCONT)
        rest = poll_until(consumer, 15 - 1 - len(ahead))
    assert first.offset == 0 and [r.offset for r in ahead] == list(range(1, 10))
    assert [r.value for r in (first, *ahead, *rest)] == [b"%d" % i for i in range(15)]


def test_a_stream_the_sidecar_stopped_answering_times_out_and_starts_again(
    sidecar: LiveSidecar,
) -> None:
    """A quiet partition's stream still gets a message each fetch.max.wait.ms; none for
    request.timeout.ms longer and the consumer drops it, then subscribes again."""
    create_topic(sidecar.address, "events")
    props = {"request_timeout_ms": 300, "fetch_max_wait_ms": 100, "auto_offset_reset": "earliest"}
    with _consumer(sidecar, **props) as consumer:
        consumer.assign([TP])
        assert consumer.poll(1500) == []  # quiet, and the stream stays: it hears from the sidecar
        quiet_stream = consumer._streams[TP]
        sidecar.process.send_signal(signal.SIGSTOP)
        try:
            assert consumer.poll(2500) == []
            assert TP not in consumer._streams  # timed out, not yet back
        finally:
            sidecar.process.send_signal(signal.SIGCONT)
        with Producer({"bootstrap.servers": sidecar.address}) as producer:
            producer.send("events", b"after").result(timeout=10)
        assert [r.value for r in poll_until(consumer, 1)] == [b"after"]
        assert consumer._streams[TP] is not quiet_stream


def test_the_consumer_goes_on_from_its_position_across_a_sidecar_restart(
    sidecar: LiveSidecar,
) -> None:
    """The sidecar ends its streams as it shuts down; the consumer subscribes again
    from where it was once the sidecar is back: no record lost, none twice."""
    _produce_batches(sidecar, batches=4, per_batch=5)
    with _consumer(sidecar, max_partition_fetch_bytes=1, max_poll_records=3) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, 0)
        before = poll_until(consumer, 7)
        assert sidecar.stop() == 0
        sidecar.start()
        after = poll_until(consumer, 20 - len(before), timeout_s=20)
    assert [r.offset for r in before + after] == list(range(20))


def test_a_broken_stream_is_opened_again_within_one_long_poll(sidecars: SidecarStarter) -> None:
    """The connection drops while a poll waits: the stream fails, and after
    retry.backoff.ms the same poll subscribes again and returns the next record."""
    # The client reaches the sidecar only through the proxy (advertised as the owner).
    proxy_port = free_port()
    sidecar = sidecars("data", f"advertised.listeners=127.0.0.1:{proxy_port}")
    _produce_batches(sidecar, batches=1, per_batch=1)
    with (
        TcpFaultProxy.start({"sidecar": sidecar.address}, {"sidecar": proxy_port}) as proxy,
        Consumer({"bootstrap.servers": proxy.address("sidecar")}) as consumer,
    ):
        consumer.assign([TP])
        consumer.seek(TP, 0)
        assert [r.offset for r in poll_until(consumer, 1)] == [0]

        def cut_then_produce() -> None:
            time.sleep(0.3)
            proxy.cut("sidecar")  # the connection drops; new ones pass again
            proxy.heal("sidecar")
            time.sleep(0.5)
            with Producer({"bootstrap.servers": sidecar.address}) as producer:
                producer.send("events", b"after the cut").result(timeout=10)

        records, waited = _poll_during(consumer, cut_then_produce, 20_000)
    assert [(r.offset, r.value) for r in records] == [(1, b"after the cut")]
    assert waited < 10


@pytest.mark.parametrize("fetch_bytes", [1, 1 << 20], ids=["a batch a message", "one message"])
@pytest.mark.parametrize(
    ("damage_at", "found_by"),
    [
        (MAGIC_OFFSET, "the sidecar: CORRUPT_MESSAGE"),
        (V2_HEADER_SIZE + 2, "this CRC check"),
        (LENGTH_OFFSET, "the sidecar: CORRUPT_MESSAGE"),
        (LENGTH_OFFSET + 1, "the sidecar: CORRUPT_MESSAGE"),
        (ATTRIBUTES_OFFSET + 1, "the sidecar: CORRUPT_MESSAGE"),
    ],
    ids=[
        "header",
        "record body",
        "length below a header",
        "length past the segment's end",
        "codec id",
    ],
)
def test_a_corrupt_batch_raises_from_poll_naming_partition_and_offset(
    sidecar: LiveSidecar, damage_at: int, found_by: str, fetch_bytes: int
) -> None:
    """A damaged batch on disk is never retried as a passing fault (it would spin, each
    poll empty), nor stepped over: every poll raises CORRUPT_MESSAGE with where, after
    the records before it, as Kafka's consumer raises a CorruptRecordException. Those
    records come first whoever finds the damage (``found_by``), even when the damaged
    batch came in the same message as they did."""
    _produce_batches(sidecar, batches=3, per_batch=5)
    damage_batch(sidecar.data_dir / "events-0", 5, damage_at)
    with _consumer(sidecar, max_partition_fetch_bytes=fetch_bytes) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, 0)
        assert [r.offset for r in poll_until(consumer, 5)] == list(range(5))
        for _ in range(2):
            with pytest.raises(CorruptRecordError, match=r"events-0.* offset 5"):
                consumer.poll(10_000)
        assert consumer.position(TP) == 5


@pytest.mark.parametrize(
    ("tp", "seek"),
    [(TopicPartition("events", 7), True), (TopicPartition("nowhere", 0), False)],
    ids=["a partition past the count, sought", "a topic that does not exist"],
)
def test_an_assigned_partition_that_does_not_exist_raises_from_poll(
    sidecar: LiveSidecar, tp: TopicPartition, seek: bool
) -> None:
    """Not [] from every poll for ever: once fresh metadata has agreed it does not exist
    for retry.backoff.max.ms (1 s), the poll raises UNKNOWN_TOPIC_OR_PARTITION."""
    create_topic(sidecar.address, "events")
    with _consumer(sidecar) as consumer:
        consumer.assign([tp])
        if seek:
            consumer.seek(tp, 0)
        with pytest.raises(UnknownTopicOrPartitionError, match=tp.topic):
            consumer.poll(5000)


def test_records_are_named_tuples_of_the_fetched_fields(sidecar: LiveSidecar) -> None:
    _fill(sidecar, 3)
    with _consumer(sidecar, auto_offset_reset="earliest") as consumer:
        consumer.assign([TP])
        records = poll_until(consumer, 3)
    assert records[1] == ConsumerRecord("events", 0, 1, BASE_MS + 1000, None, b"1", ())
    assert records[1]._asdict()["value"] == b"1"


def test_a_dead_broker_stalls_none_of_the_partitions_the_others_lead(
    sidecars: SidecarStarter,
) -> None:
    first, second = two_brokers(sidecars)
    with Producer({"bootstrap.servers": first.address, "linger.ms": 0}) as producer:
        for partition in range(6):
            producer.send("spread", b"%d" % partition, partition=partition)
        assert producer.flush(30)
    consumer = Consumer(
        {
            "bootstrap.servers": first.address,
            "auto.offset.reset": "earliest",
            "request.timeout.ms": 2000,
        }
    )
    try:
        consumer.subscribe("spread")  # metadata while both answer
        owners = consumer.cluster.owners("spread")
        alive = {p for p in range(6) if owners.leaders[p] == first.address}
        assert 0 < len(alive) < 6
        second.kill()
        # No position can be had for the dead broker's partitions: the live ones are
        # read all the same, poll after poll, without an error.
        read = poll_until(consumer, len(alive))
        assert {record.partition for record in read} == alive
        assert consumer.poll(500) == []
    finally:
        consumer.close()
