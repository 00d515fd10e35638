"""A consumer of many partitions against a real sidecar: one fetch session per broker,
so it neither starves the broker's other clients nor runs a thread per partition."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest

from tierlog.api.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    log_service_pb2,
    log_service_pb2_grpc,
)
from tierlog.client import Consumer, Producer, TopicPartition
from tierlog.client.consumer import ConsumerRecord
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records import V2_HEADER_SIZE, SimpleRecord, build_batch
from tierlog.storage.records.batch import MAGIC_OFFSET

from .conftest import create_topic, poll_until
from .sidecars import LiveSidecar, damage_batch

# What a call of another client may take, the broker not throttling it: far below
# tierlog.queued.max.wait.ms (30 s), which a call waits when the broker is saturated.
OTHER_CLIENT_TIMEOUT_S = 10


def _fill(sidecar: LiveSidecar, topic: str, partitions: int) -> None:
    """One record in each partition, its value naming the partition."""
    create_topic(sidecar.address, topic, partitions=partitions)
    with Producer({"bootstrap.servers": sidecar.address, "linger.ms": 5}) as producer:
        for partition in range(partitions):
            producer.send(topic, b"%d" % partition, partition=partition)
        producer.flush()


def _consumer(sidecar: LiveSidecar, topic: str, partitions: int) -> Consumer:
    consumer = Consumer({"bootstrap.servers": sidecar.address, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    return consumer


def _task_count() -> int:
    """The threads of this process, Python's and gRPC's own."""
    return sum(1 for _ in Path("/proc/self/task").iterdir())


def test_a_consumer_of_600_partitions_leaves_room_for_other_clients(
    sidecar: LiveSidecar,
) -> None:
    """Each partition once held a Subscribe call, and calls counted against
    queued.max.requests (500): a consumer of 600 partitions left no room for anybody's
    produce or list_topics, and 100 of its partitions were never read."""
    _fill(sidecar, "wide", 600)
    with _consumer(sidecar, "wide", 600) as consumer:
        records = poll_until(consumer, 600, timeout_s=60)
        assert sorted(int(r.value or b"") for r in records) == list(range(600))
        assert all(r.value == b"%d" % r.partition for r in records)

        with grpc.insecure_channel(sidecar.address) as channel:  # another client
            batch = build_batch([SimpleRecord(None, b"news", 1_000, ())])
            produced = log_service_pb2_grpc.LogServiceStub(channel).Produce(
                log_service_pb2.ProduceRequest(topic="wide", partition=599, record_batches=batch),
                timeout=OTHER_CLIENT_TIMEOUT_S,
            )
            topics = admin_service_pb2_grpc.AdminServiceStub(channel).ListTopics(
                admin_service_pb2.ListTopicsRequest(), timeout=OTHER_CLIENT_TIMEOUT_S
            )
        assert produced.base_offset == 1
        assert [(t.name, t.partition_count) for t in topics.topics] == [("wide", 600)]
        news = poll_until(consumer, 1, timeout_s=10)
        assert [(r.partition, r.offset, r.value) for r in news] == [(599, 1, b"news")]


def test_a_consumer_of_1000_partitions_runs_a_bounded_number_of_threads(
    sidecar: LiveSidecar,
) -> None:
    """Kafka's consumer runs about 20 threads whatever its partitions; one that ran a
    reader thread per partition ran 1,008 for 1,000 partitions."""
    topics = [f"quarter-{n}" for n in range(4)]  # (one CreateTopics of 1,000 is slow)
    for topic in topics:
        _fill(sidecar, topic, 250)
    python_threads, tasks = threading.active_count(), _task_count()
    consumer = Consumer({"bootstrap.servers": sidecar.address, "auto.offset.reset": "earliest"})
    with consumer:
        consumer.assign([TopicPartition(topic, p) for topic in topics for p in range(250)])
        records = poll_until(consumer, 1000, timeout_s=60)
        assert len({(r.topic, r.partition, r.offset) for r in records}) == 1000
        assert threading.active_count() - python_threads <= 4, threading.enumerate()
        assert _task_count() - tasks <= 8


@pytest.mark.parametrize(
    "damage_at",
    [V2_HEADER_SIZE + 2, MAGIC_OFFSET],
    ids=["found by this CRC check", "found by the sidecar"],
)
def test_a_damaged_partition_costs_the_others_in_its_message_nothing(
    sidecar: LiveSidecar, damage_at: int
) -> None:
    """A session's message holds several partitions: when one raises CorruptRecordError
    from its first batch, the others' batches in the same message are read again from
    their positions, not lost with it."""
    create_topic(sidecar.address, "pair", partitions=2)
    with grpc.insecure_channel(sidecar.address) as channel:
        stub = log_service_pb2_grpc.LogServiceStub(channel)
        for partition in (0, 1):
            for b in range(3):
                records = [SimpleRecord(None, b"%d" % (b * 5 + i)) for i in range(5)]
                stub.Produce(
                    log_service_pb2.ProduceRequest(
                        topic="pair", partition=partition, record_batches=build_batch(records)
                    )
                )
    damage_batch(sidecar.data_dir / "pair-0", 5, damage_at)
    damaged, intact = TopicPartition("pair", 0), TopicPartition("pair", 1)
    read: list[ConsumerRecord] = []
    with Consumer({"bootstrap.servers": sidecar.address}) as consumer:
        consumer.assign([damaged, intact])
        consumer.seek(damaged, 5)  # the damaged batch comes first in its partition's part
        consumer.seek(intact, 0)
        with pytest.raises(CorruptRecordError, match=r"pair-0.* offset 5"):
            while True:  # the intact partition's records may come first
                read += consumer.poll(10_000)
        consumer.assign([intact])
        read += poll_until(consumer, 15 - len(read))
    assert [r.partition for r in read] == [1] * 15
    assert sorted(r.offset for r in read) == list(range(15))
