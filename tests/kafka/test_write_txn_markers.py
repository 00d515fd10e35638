"""WriteTxnMarkers over the Kafka listener: what ``kafka-transactions abort`` (Admin's
``abortTransaction``, KIP-664) sends to a partition's leader to end a hanging
transaction, and the partition's own checks of a marker (coordinator epoch, producer
epoch). One sidecar for the module: each test has its own topic and producer.

A hanging transaction is left as Kafka's own tests leave one: the broker's KIP-890
check is turned off (``transaction.partition.verification.enable=false``) and a
transactional producer writes to a partition it never added to its transaction, so its
coordinator will never write the partition's marker and the partition's last stable
offset stays at that batch's offset."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import (
    KafkaSidecar,
    printed_table,
    read_partition,
    run_java,
    start_kafka_sidecar,
    unique_name,
)
from tests.kafka.wire import KafkaWire, fetch_committed
from tests.support.sidecars import Sidecars
from tierlog.storage.records import SimpleRecord, build_batch

PRODUCE, FETCH, INIT_PRODUCER_ID, WRITE_TXN_MARKERS = 0, 1, 22, 27
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        yield start_kafka_sidecar(
            started,
            tmp_path_factory.mktemp("markers") / "data",
            "transaction.partition.verification.enable=false",
            "transaction.state.log.num.partitions=1",
        )


def _transactional_producer(wire: KafkaWire) -> tuple[str, int]:
    """A fresh transactional id and its producer id (epoch 0), once the transaction
    coordinator has loaded ``__transaction_state`` (a client retries as this does)."""
    tid = unique_name("app")
    deadline = time.monotonic() + 60
    while True:
        answer = wire.call(
            INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout": 60_000}
        )
        if answer.error_code != ErrorCode.coordinator_load_in_progress:
            break
        assert time.monotonic() < deadline, "the transaction coordinator never loaded"
        time.sleep(0.05)
    assert answer.error_code == ErrorCode.none
    return tid, int(answer.producer_id)


def _produce(
    wire: KafkaWire,
    topic: str,
    value: bytes,
    producer: tuple[str, int] | None = None,
    epoch: int = -1,
    sequence: int = -1,
) -> None:
    """One record to partition 0; transactional when a producer is given, and never
    added to its transaction (the broker does not check, so this one is taken)."""
    tid, pid = producer if producer is not None else (None, -1)
    batch = build_batch(
        [SimpleRecord(b"k", value, int(time.time() * 1000))],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=pid >= 0,
    )
    body = wire.call(
        PRODUCE,
        11,
        {
            "transactional_id": tid,
            "acks": -1,
            "timeout": 30_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    assert body.responses[0].partition_responses[0].error_code == ErrorCode.none


def _markers(
    wire: KafkaWire,
    pid: int,
    epoch: int,
    coordinator_epoch: int,
    partitions: list[tuple[str, int]],
    *,
    commit: bool = False,
) -> dict[tuple[str, int], ErrorCode]:
    """One marker for ``partitions``; each partition's answer."""
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    body = wire.call(
        WRITE_TXN_MARKERS,
        1,
        {
            "markers": [
                {
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "transaction_result": commit,
                    "topics": [
                        {"name": name, "partition_indexes": indexes}
                        for name, indexes in topics.items()
                    ],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        },
    )
    (marker,) = body.markers
    assert marker.producer_id == pid
    return {
        (topic.name, result.partition_index): ErrorCode(result.error_code)
        for topic in marker.topics
        for result in topic.partitions
    }


def test_kafka_transactions_finds_a_hanging_transaction_and_aborts_it(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    topic = unique_name("stuck")
    broker.create_topic(topic)
    producer = _transactional_producer(wire)
    pid = producer[1]
    _produce(wire, topic, b"hanging", producer, 0, 0)  # offset 0, never ended by a coordinator
    _produce(wire, topic, b"after")  # offset 1, held back by the open transaction
    stuck = fetch_committed(wire, topic)
    tool = (TRANSACTIONS, "--bootstrap-server", broker.kafka_address)

    found = printed_table(
        run_java(*tool, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    )
    (hanging,) = found
    run_java(*tool, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    moved = fetch_committed(wire, topic)
    read = read_partition(broker, topic, "read_committed")

    assert (hanging["Topic"], hanging["Partition"]) == (topic, "0")
    assert (hanging["ProducerId"], hanging["ProducerEpoch"]) == (str(pid), "0")
    assert (hanging["CoordinatorEpoch"], hanging["StartOffset"]) == ("-1", "0")
    assert (stuck.high_watermark, stuck.last_stable_offset) == (2, 0)
    # The ABORT marker at 2: the last stable offset moves to the log end, and the
    # aborted transaction is told to read_committed consumers, which skip it.
    assert (moved.high_watermark, moved.last_stable_offset) == (3, 3)
    assert [(t.producer_id, t.first_offset) for t in moved.aborted_transactions] == [(pid, 0)]
    assert read == [(1, b"after")]


def test_a_marker_from_an_older_coordinator_epoch_or_producer_epoch_is_refused(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    topic = unique_name("fenced")
    broker.create_topic(topic)
    producer = _transactional_producer(wire)
    pid = producer[1]
    here = (topic, 0)
    _produce(wire, topic, b"first", producer, 0, 0)  # offset 0

    ended = _markers(wire, pid, 0, 3, [here])  # the ABORT at 1, coordinator epoch 3
    _produce(wire, topic, b"second", producer, 0, 1)  # offset 2: the next transaction
    fenced = _markers(wire, pid, 0, 2, [here, (topic, 7), ("missing", 0)])
    still_open = fetch_committed(wire, topic)
    committed = _markers(wire, pid, 1, 3, [here], commit=True)  # a new epoch, at 3
    stale_epoch = _markers(wire, pid, 0, 3, [here])
    after = fetch_committed(wire, topic)

    assert ended == {here: ErrorCode.none}
    # Kafka's partition refuses a marker from a coordinator older than its last one.
    assert fenced == {
        here: ErrorCode.transaction_coordinator_fenced,
        (topic, 7): ErrorCode.unknown_topic_or_partition,
        ("missing", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert (still_open.high_watermark, still_open.last_stable_offset) == (3, 2)
    assert committed == {here: ErrorCode.none}
    assert stale_epoch == {here: ErrorCode.invalid_producer_epoch}
    assert (after.high_watermark, after.last_stable_offset) == (4, 4)
    assert [(t.producer_id, t.first_offset) for t in after.aborted_transactions] == [(pid, 0)]
    assert [value for _offset, value in read_partition(broker, topic, "read_committed")] == [
        b"second"
    ]
