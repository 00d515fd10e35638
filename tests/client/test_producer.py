"""The producer against a real sidecar: partitioning, codecs, retries without duplicates,
routing by Metadata and NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.scrape import METRICS, scrape_sidecar
from tests.support.tcp_fault_proxy import TcpFaultProxy
from tierlog.api.errors import LeaderNotAvailableError
from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.broker.ownership import NO_OWNER
from tierlog.client import (
    AdminClient,
    Consumer,
    Producer,
    RecordMetadata,
    RecordTooLargeError,
    RequestTimedOutError,
    TopicPartition,
    partition_for_key,
)
from tierlog.client.consumer import ConsumerRecord
from tierlog.client.errors import NetworkError
from tierlog.client.producer_batch import ProducerBatch
from tierlog.client.rpc import open_channel
from tierlog.client.sender import Sender
from tierlog.storage.errors import UnknownTopicOrPartitionError

from .conftest import SidecarStarter, create_topic, two_brokers
from .sidecars import LiveSidecar, free_port


def consume_all(
    address: str, topic: str, expected: int, timeout_s: float = 30
) -> list[ConsumerRecord]:
    with Consumer({"bootstrap.servers": address, "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe(topic)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout_s
        while len(records) < expected and time.monotonic() < deadline:
            records += consumer.poll(500)
        records += consumer.poll(200)  # nothing more must come
        return records


def high_watermark(address: str, topic: str, partition: int = 0) -> int:
    channel = open_channel(address)
    try:
        stub = log_service_pb2_grpc.LogServiceStub(channel)
        request = log_service_pb2.FetchRequest(topic=topic, partition=partition, offset=0)
        return stub.Fetch(request, timeout=10).high_watermark
    finally:
        channel.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_keyed_records_land_on_their_murmur2_partition_and_come_back(
    sidecar: LiveSidecar, codec: str
) -> None:
    create_topic(sidecar.address, "orders", partitions=4)
    config = {"bootstrap.servers": sidecar.address, "compression.type": codec, "linger.ms": 5}
    sent: dict[bytes, tuple[int, int]] = {}
    with Producer(config) as producer:
        futures = {
            f"value-{i}".encode(): producer.send(
                "orders", f"value-{i}".encode(), key=f"key-{i % 37}".encode(), headers=[("h", b"x")]
            )
            for i in range(2000)
        }
        producer.flush()
        for value, future in futures.items():
            metadata = future.result(timeout=10)
            sent[value] = (metadata.partition, metadata.offset)
    for i in range(2000):
        key = f"key-{i % 37}".encode()
        assert sent[f"value-{i}".encode()][0] == partition_for_key(key, 4)
    records = consume_all(sidecar.address, "orders", 2000)
    assert len(records) == 2000
    assert {r.value: (r.partition, r.offset) for r in records} == sent
    assert all(r.headers == (("h", b"x"),) for r in records)
    by_partition: dict[int, list[int]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record.offset)
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))  # contiguous, in order


def test_null_keys_stick_to_one_partition_per_batch(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "sticky", partitions=8)
    config = {"bootstrap.servers": sidecar.address, "linger.ms": 1000, "batch.size": 1_000_000}
    with Producer(config) as producer:
        futures = [producer.send("sticky", b"v%d" % i) for i in range(100)]
        producer.flush()
        partitions = {future.result().partition for future in futures}
        offsets = sorted(future.result().offset for future in futures)
    assert len(partitions) == 1
    assert offsets == list(range(100))


def test_explicit_partitions_and_timestamps_are_kept(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "explicit", partitions=3)
    with Producer({"bootstrap.servers": sidecar.address}) as producer:
        metadata = producer.send("explicit", b"v", key=b"k", partition=2, timestamp=1234).result()
    assert (metadata.partition, metadata.offset, metadata.timestamp) == (2, 0, 1234)


def test_an_unknown_topic_is_a_typed_error(sidecar: LiveSidecar) -> None:
    with (
        Producer({"bootstrap.servers": sidecar.address}) as producer,
        pytest.raises(UnknownTopicOrPartitionError),
    ):
        producer.send("nope", b"v")


def test_a_partition_past_the_topics_count_is_a_typed_error_at_once(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "three", partitions=3)
    with (
        Producer({"bootstrap.servers": sidecar.address}) as producer,
        pytest.raises(UnknownTopicOrPartitionError, match="partition 99 of three does not exist"),
    ):
        producer.send("three", b"v", partition=99)


BAD_RECORDS = [
    pytest.param({"value": "a str"}, "value", id="str value"),
    pytest.param({"value": b"v", "key": "a str"}, "key", id="str key"),
    pytest.param({"value": 42}, "value", id="int value"),
    pytest.param({"value": b"v", "headers": [("h", "a str")]}, "header 'h' value", id="str header"),
    pytest.param({"value": b"v", "headers": [(b"h", b"x")]}, "header 0 key", id="bytes header key"),
    pytest.param({"value": b"v", "headers": [("h",)]}, "header 0", id="header not a pair"),
    pytest.param({"value": b"v", "timestamp": 1.5}, "timestamp", id="float timestamp"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_RECORDS)
def test_a_record_of_the_wrong_type_is_refused_whole_and_the_batch_stays_readable(
    sidecar: LiveSidecar, bad: dict[str, object], field: str
) -> None:
    create_topic(sidecar.address, "typed")
    config = {"bootstrap.servers": sidecar.address, "linger.ms": 60_000}
    with Producer(config) as producer:
        first = producer.send("typed", b"good-1", key=b"k")
        with pytest.raises(TypeError, match=field):
            producer.send("typed", **bad)  # type: ignore[arg-type]  # the wrong types
        second = producer.send("typed", b"good-2", key=b"k")
        producer.flush()
        assert (first.result().offset, second.result().offset) == (0, 1)
    records = consume_all(sidecar.address, "typed", 2)
    assert [(r.offset, r.key, r.value) for r in records] == [
        (0, b"k", b"good-1"),
        (1, b"k", b"good-2"),
    ]


def test_bytes_like_fields_are_sent_as_their_bytes(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "buffers")
    wide = memoryview(bytes(range(8))).cast("I")  # len 2: items, not bytes
    with Producer({"bootstrap.servers": sidecar.address}) as producer:
        producer.send(
            "buffers",
            wide,  # type: ignore[arg-type]  # any buffer, as the docstring says
            key=bytearray(b"k"),  # type: ignore[arg-type]
            headers=[("h", memoryview(b"x"))],  # type: ignore[list-item]
        )
        producer.flush()
    [record] = consume_all(sidecar.address, "buffers", 1)
    assert (record.key, record.value, record.headers) == (b"k", bytes(range(8)), (("h", b"x"),))


def test_a_lost_response_is_retried_and_stored_once(sidecars: SidecarStarter) -> None:
    # The client reaches the sidecar only through the proxy (advertised as the owner).
    proxy_port = free_port()
    sidecar = sidecars("data", f"advertised.listeners=127.0.0.1:{proxy_port}")
    with TcpFaultProxy.start({"sidecar": sidecar.address}, {"sidecar": proxy_port}) as proxy:
        create_topic(proxy.address("sidecar"), "retries")
        config = {
            "bootstrap.servers": proxy.address("sidecar"),
            "linger.ms": 0,
            "request.timeout.ms": 5000,
        }
        with Producer(config) as producer:
            assert producer.send("retries", b"first").result(timeout=10).offset == 0
            proxy.lose_answers("sidecar")
            second = producer.send("retries", b"second")
            deadline = time.monotonic() + 10
            while high_watermark(sidecar.address, "retries") < 2:
                assert time.monotonic() < deadline, "the second batch never reached the log"
                time.sleep(0.02)
            assert not second.done()  # stored, but the answer was swallowed
            proxy.cut("sidecar")  # the connection drops: the retry goes on a new one
            proxy.heal("sidecar")
            assert second.result(timeout=20).offset == 1  # the original offset, from the retry
            assert producer.send("retries", b"third").result(timeout=10).offset == 2
        assert high_watermark(sidecar.address, "retries") == 3
        values = [r.value for r in consume_all(sidecar.address, "retries", 3)]
        assert values == [b"first", b"second", b"third"]


def test_each_partition_goes_to_its_owner_and_stale_metadata_is_corrected(
    sidecars: SidecarStarter,
) -> None:
    first, second = two_brokers(sidecars)
    with Producer({"bootstrap.servers": first.address, "linger.ms": 0}) as producer:
        owners = producer.cluster.owners("spread")
        assert set(owners.leaders) == {first.address, second.address}
        # Point every partition at the wrong broker: it answers NOT_LEADER_OR_FOLLOWER,
        # the producer refreshes its metadata and the retry goes to the owner.
        for p in range(6):
            wrong = first.address if owners.leaders[p] == second.address else second.address
            producer.cluster.moved(TopicPartition("spread", p), wrong)
        futures = [producer.send("spread", b"v%d" % p, partition=p) for p in range(6)]
        assert [f.result(timeout=20).offset for f in futures] == [0] * 6
    for p in range(6):
        owner = owners.leaders[p]
        assert high_watermark(owner, "spread", p) == 1
    # A consumer that knows only the other broker finds every record.
    records = consume_all(second.address, "spread", 6)
    assert Counter(r.partition for r in records) == Counter(range(6))


def test_a_partition_without_an_owner_waits_and_then_goes_to_the_owner_named(
    sidecars: SidecarStarter, tmp_path: Path
) -> None:
    """While the operator's plan places a partition on nobody (it moves between brokers),
    one-off calls fail with the retriable LEADER_NOT_AVAILABLE and a produce is retried
    until an owner is named."""
    port = free_port()
    plan = tmp_path / "assignment.json"

    def place(owner: int) -> None:
        document = {
            "version": 1,
            "brokers": {"0": f"127.0.0.1:{port}"},
            "topics": {"moving": [owner]},
        }
        plan.with_suffix(".tmp").write_text(json.dumps(document))
        plan.with_suffix(".tmp").replace(plan)

    place(NO_OWNER)
    broker = sidecars(
        "b0", "node.id=0", f"tierlog.cluster.assignment.file={plan}", METRICS, port=port
    )
    create_topic(broker.address, "moving")
    tp = TopicPartition("moving", 0)
    with AdminClient(broker.address) as admin, pytest.raises(LeaderNotAvailableError):
        admin.delete_records(tp, 0)
    config = {"bootstrap.servers": broker.address, "linger.ms": 0, "retry.backoff.ms": 50}
    with Producer(config) as producer:
        asked = answered(broker, "Metadata")
        future = producer.send("moving", b"waited", partition=0)
        # It asks for the partition's leader again and again: waiting, not failed.
        wait_for_answered(broker, "Metadata", asked + 2)
        assert not future.done()
        place(0)
        assert future.result(timeout=20).offset == 0
    assert high_watermark(broker.address, "moving") == 1


def test_a_slow_link_still_connects_and_the_first_send_waits_for_metadata(
    sidecar: LiveSidecar,
) -> None:
    # Every byte 1.2 s late: the broker's half of a connection's handshake takes over
    # 1 s, as on a loaded machine. Connection attempts once gave up after at most 1 s
    # (100 ms, then the reconnect backoff), so this client never connected.
    create_topic(sidecar.address, "slow")
    with TcpFaultProxy.start({"sidecar": sidecar.address}) as proxy:
        proxy.delay("sidecar", 1200)
        config = {
            "bootstrap.servers": proxy.address("sidecar"),
            "linger.ms": 0,
            "max.block.ms": 20_000,
        }
        with Producer(config) as producer:
            assert producer.send("slow", b"late").result(timeout=30).offset == 0


def test_a_send_waits_up_to_max_block_ms_for_a_broker_to_answer(
    sidecars: SidecarStarter,
) -> None:
    port = free_port()
    first = sidecars("data", port=port)
    create_topic(first.address, "early")
    first.kill()
    config = {"bootstrap.servers": first.address, "linger.ms": 0, "max.block.ms": 60_000}
    with Producer(config) as producer, ThreadPoolExecutor(1) as pool:
        # Sent while no broker answers; the broker comes back on its port, topic and all.
        sent = pool.submit(producer.send, "early", b"v")
        sidecars("data", port=port)
        assert sent.result(timeout=60).result(timeout=30).offset == 0
    short = {**config, "max.block.ms": 300, "bootstrap.servers": f"127.0.0.1:{free_port()}"}
    with Producer(short) as producer:
        started = time.monotonic()
        with pytest.raises(NetworkError):
            producer.send("early", b"v")
        assert time.monotonic() - started >= producer.config.max_block_ms / 1000


def test_producer_ids_differ_between_producers(sidecar: LiveSidecar, tmp_path: Path) -> None:
    create_topic(sidecar.address, "ids")
    ids = set()
    for _ in range(3):
        with Producer({"bootstrap.servers": sidecar.address}) as producer:
            producer.send("ids", b"v").result(timeout=10)
            assert producer.idempotence is not None
            ids.add(producer.idempotence.producer_id_and_epoch.producer_id)
    assert len(ids) == 3


def test_close_with_a_timeout_fails_what_was_not_acknowledged(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "gone")
    producer = Producer({"bootstrap.servers": sidecar.address, "linger.ms": 0})
    producer.send("gone", b"kept").result(timeout=10)
    sidecar.kill()
    lost = producer.send("gone", b"lost")
    started = time.monotonic()
    producer.close(timeout_s=1.0)
    # not waiting out the record's delivery timeout, which would end it otherwise
    assert time.monotonic() - started < producer.config.delivery_timeout_ms / 1000
    with pytest.raises(RequestTimedOutError):
        lost.result(timeout=1)


def test_a_sidecar_that_stops_answering_times_the_batch_out(sidecar: LiveSidecar) -> None:
    """SIGSTOP: the stream stays open and silent.  Each attempt is broken after
    request.timeout.ms, retried on a new stream, and the batch fails for good at
    delivery.timeout.ms with REQUEST_TIMED_OUT; once the sidecar runs again a new
    record goes through."""
    create_topic(sidecar.address, "silent")
    config = {
        "bootstrap.servers": sidecar.address,
        "linger.ms": 0,
        "request.timeout.ms": 800,
        "delivery.timeout.ms": 2500,
        "retry.backoff.ms": 50,
    }
    with Producer(config) as producer:
        assert producer.send("silent", b"first").result(timeout=10).offset == 0
        sidecar.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            lost = producer.send("silent", b"unanswered")
            with pytest.raises(RequestTimedOutError):
                lost.result(timeout=20)
            # at delivery.timeout.ms, the attempt under way then broken at the latest
            delivery_s = producer.config.delivery_timeout_ms / 1000
            request_s = producer.config.request_timeout_ms / 1000
            assert delivery_s <= time.monotonic() - started < delivery_s + request_s
        finally:
            sidecar.process.send_signal(signal.SIGCONT)
        last = producer.send("silent", b"after").result(timeout=20)
    values = [r.value for r in consume_all(sidecar.address, "silent", last.offset + 1)]
    assert values[0] == b"first" and values[-1] == b"after"


def test_full_batches_of_a_partition_share_a_request_and_each_record_gets_its_offset(
    sidecar: LiveSidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without idempotence a partition's full batches go in one request; each batch's
    records are told the offsets they were stored at."""
    create_topic(sidecar.address, "grouped", partitions=2)
    sizes: list[int] = []
    build = Sender._request

    def counted(self: Sender, batches: tuple[ProducerBatch, ...], leader_epoch: int) -> object:
        sizes.append(len(batches))
        return build(self, batches, leader_epoch)

    monkeypatch.setattr(Sender, "_request", counted)
    config = {
        "bootstrap.servers": sidecar.address,
        "acks": "1",
        "batch.size": 2048,
        "linger.ms": 60_000,
    }
    with Producer(config) as producer:
        # Appended while the sender is held off (it drains under the producer's lock),
        # so full batches wait together rather than leave one by one as they fill.
        with producer._lock:
            futures = {
                b"v%04d" % i: producer.send("grouped", b"v%04d" % i, partition=i % 2)
                for i in range(1000)
            }
        producer.flush()
        sent = {value: (f.result().partition, f.result().offset) for value, f in futures.items()}
    assert max(sizes) > 1 and sum(sizes) > len(sizes)
    records = consume_all(sidecar.address, "grouped", 1000)
    assert {r.value: (r.partition, r.offset) for r in records} == sent


def test_a_thousand_concurrent_sends_awaited_from_an_event_loop(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "handlers", partitions=3)

    async def handle(producer: Producer, request: int) -> RecordMetadata:
        # What an aiohttp or FastAPI handler does: send, and await the acknowledgement.
        return await producer.send("handlers", b"request %d" % request, key=b"%d" % request)

    async def serve(producer: Producer) -> list[RecordMetadata]:
        return await asyncio.gather(*(handle(producer, n) for n in range(1000)))

    with Producer({"bootstrap.servers": sidecar.address, "linger.ms": 5}) as producer:
        acknowledged = asyncio.run(serve(producer))
    by_partition = Counter(metadata.partition for metadata in acknowledged)
    assert sum(by_partition.values()) == 1000 and len(by_partition) == 3
    for partition, count in by_partition.items():
        offsets = sorted(m.offset for m in acknowledged if m.partition == partition)
        assert offsets == list(range(count))  # each acknowledged once, no gaps


def test_an_awaited_send_raises_the_records_error(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "small", max_message_bytes="200")

    async def send_too_large(producer: Producer) -> RecordMetadata:
        return await producer.send("small", b"x" * 1000)

    with (
        Producer({"bootstrap.servers": sidecar.address, "linger.ms": 0}) as producer,
        pytest.raises(RecordTooLargeError),
    ):
        asyncio.run(send_too_large(producer))


def answered(broker: LiveSidecar, method: str) -> float:
    """How many calls of ``method`` the broker (started with ``METRICS``) answered."""
    requests = scrape_sidecar(broker).labelled("tierlog_requests_total")
    return sum(n for labels, n in requests.items() if ("method", method) in labels)


def wait_for_answered(
    broker: LiveSidecar, method: str, count: float, timeout_s: float = 30
) -> None:
    deadline = time.monotonic() + timeout_s
    while answered(broker, method) < count:
        assert time.monotonic() < deadline, f"never {count} {method} calls"
        time.sleep(0.05)
