"""kill -9 under load with the per-batch durable policy (``flush.messages=1``).

A producer sends keyed records to three partitions without pause while the sidecar is
killed with SIGKILL and started again on the same port and data dir.  Batches in
flight at the kill fail with a broken stream and are retried, the same bytes under the
same producer id, epoch and sequence; those the dead sidecar had already appended are
recognised from the producer state it recovers.  Afterwards, and after a second kill
-9 once everything was acknowledged: every acknowledged record is where its
acknowledgement said, every partition's offsets are contiguous from 0, and no value
is stored twice.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable

import pytest

from tests.support.producing import Acknowledged, sending_in_background
from tierlog.client import Consumer, ConsumerRecord, Producer, RecordFuture

from .conftest import SidecarStarter, create_topic
from .test_producer import consume_all

PARTITIONS = 3


ACKNOWLEDGED_BETWEEN_FAULTS = 1000


@pytest.mark.slow
def test_kill_9_under_load_loses_no_acknowledged_record_and_stores_none_twice(
    sidecars: SidecarStarter,
) -> None:
    sidecar = sidecars("data")
    create_topic(sidecar.address, "durable", partitions=PARTITIONS, flush_messages="1")
    acknowledged: dict[bytes, tuple[int, int]] = {}
    failures: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()
    config = {
        "bootstrap.servers": sidecar.address,
        "linger.ms": 2,
        "request.timeout.ms": 5000,
        "delivery.timeout.ms": 60_000,
    }
    producer = Producer(config)

    def done_for(value: bytes) -> Callable[[RecordFuture], None]:
        return lambda future: on_done(value, future)

    def on_done(value: bytes, future: RecordFuture) -> None:
        with lock:
            error = future.exception()
            if error is not None:
                failures.append(error)
            else:
                metadata = future.result()
                acknowledged[value] = (metadata.partition, metadata.offset)

    refused: list[BaseException] = []  # send() itself must not fail while it restarts

    def send_forever() -> None:
        i = 0
        while not stop.is_set():
            value = b"%d" % i
            try:
                future = producer.send("durable", value, key=value)
            except Exception as error:
                refused.append(error)
                return
            future.add_done_callback(done_for(value))
            i += 1
            if i % 100 == 0:
                time.sleep(0.002)

    sender = threading.Thread(target=send_forever)
    sender.start()

    def wait_for_acknowledged(count: int) -> None:
        deadline = time.monotonic() + 60
        while len(acknowledged) < count:
            assert time.monotonic() < deadline, f"only {len(acknowledged)} acknowledged"
            time.sleep(0.05)

    try:
        wait_for_acknowledged(ACKNOWLEDGED_BETWEEN_FAULTS)  # under load
        with lock:
            before_kill = len(acknowledged)
        sidecar.kill()
        time.sleep(0.5)  # the time it is down, not a wait for anything
        sidecar.start()
        wait_for_acknowledged(before_kill + ACKNOWLEDGED_BETWEEN_FAULTS)  # load again
    finally:
        stop.set()
        sender.join()
    assert producer.flush(timeout_s=60)
    producer.close()
    assert not failures, failures[:3]
    assert not refused, refused
    assert before_kill > 0 and len(acknowledged) > before_kill

    sidecar.kill()  # everything was acknowledged: it must survive another crash
    sidecar.start()
    records = consume_all(sidecar.address, "durable", len(acknowledged), timeout_s=60)
    stored = {r.value: (r.partition, r.offset) for r in records}
    duplicates = [value for value, n in Counter(r.value for r in records).items() if n > 1]
    assert not duplicates, duplicates[:10]
    missing = [value for value in acknowledged if value not in stored]
    assert not missing, missing[:10]
    assert all(stored[value] == where for value, where in acknowledged.items())
    for p in range(PARTITIONS):
        offsets = sorted(r.offset for r in records if r.partition == p)
        assert offsets == list(range(len(offsets))), f"partition {p} has gaps"
    assert len(records) == len(acknowledged)  # nothing stored that was not acknowledged


def consume_to_end(address: str, topic: str, timeout_s: float = 60) -> list[ConsumerRecord]:
    """Every record of ``topic``, up to the end offsets it has now (duplicates included)."""
    with Consumer({"bootstrap.servers": address, "auto.offset.reset": "earliest"}) as consumer:
        partitions = consumer.subscribe(topic)
        ends = consumer.end_offsets(partitions)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            assert time.monotonic() < deadline, f"not at the end offsets {ends} in time"
            records += consumer.poll(500)
        return records


RESTARTS = 6


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "at-least-once"])
def test_sends_ride_out_sidecar_restarts_within_the_delivery_timeout(
    sidecars: SidecarStarter, idempotent: bool
) -> None:
    """kill -9 and a restart on the same port and data dir, six times, while records go
    out one request at a time (linger.ms 0, so a write is nearly always under way when
    the connection dies): gRPC reports the broken streams as UNAVAILABLE or, for a
    write racing the end, INTERNAL.  Both are a lost connection, retried within
    delivery.timeout.ms as Kafka retries a NetworkException: no send fails.  Idempotent:
    every acknowledged record stored exactly once, in order; otherwise at least once."""
    sidecar = sidecars("data")
    create_topic(sidecar.address, "restarts", partitions=PARTITIONS)
    config = {
        "bootstrap.servers": sidecar.address,
        "linger.ms": 0,
        "enable.idempotence": idempotent,
        "acks": "all",
        "request.timeout.ms": 5000,
        "delivery.timeout.ms": 60_000,
    }
    tally = Acknowledged()
    producer = Producer(config)
    unsettled: deque[RecordFuture] = deque()
    sent = 0

    def send_one() -> None:
        nonlocal sent
        value = b"%d" % sent
        future = producer.send("restarts", value, key=value)
        future.add_done_callback(tally.track(value))
        unsettled.append(future)
        if len(unsettled) > 20_000:  # at most so many records waiting
            unsettled.popleft().exception()
        sent += 1

    with sending_in_background(send_one):
        for restart in range(RESTARTS):
            tally.wait_for((restart + 1) * 300)  # acknowledged since the last
            sidecar.kill()
            sidecar.start()
        tally.wait_for((RESTARTS + 1) * 300)
    assert producer.flush(timeout_s=60)
    producer.close()
    assert not tally.failures, tally.failures[:3]

    acknowledged = tally.where
    records = consume_to_end(sidecar.address, "restarts")
    stored = Counter((r.value, r.partition, r.offset) for r in records)
    missing = [v for v, (p, offset) in acknowledged.items() if (v, p, offset) not in stored]
    assert not missing, missing[:10]  # each where its acknowledgement said
    if idempotent:
        assert len(records) == len(acknowledged)  # and nothing twice
        for p in range(PARTITIONS):
            values = [int(r.value or b"-1") for r in records if r.partition == p]
            assert values == sorted(values), f"partition {p} out of send order"
