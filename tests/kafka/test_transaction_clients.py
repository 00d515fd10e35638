"""Real transactional clients against the Kafka listener of one sidecar (module-scoped:
each test has its own topic and transactional id): kafka-python 3's KafkaProducer with a
``transactional_id`` (commit, abort, offsets sent to the transaction, fencing by a second
producer), a read_committed KafkaConsumer; Kafka 4.1.1's own transactional producer
(``ProducerPerformance --transactional-id``), read_committed by its ConsoleConsumer, and
``kafka-transactions`` (list, describe, describe-producers); and across the front doors,
a transaction committed through Kafka read by tierlog's gRPC consumer under
read_committed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kafka import KafkaProducer, OffsetAndMetadata
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import ProducerFencedError

from tests.kafka.conftest import (
    KafkaSidecar,
    printed_table,
    read_partition,
    run_java,
    start_kafka_sidecar,
    unique_name,
)
from tests.support.sidecars import Sidecars
from tierlog.client.consumer import Consumer
from tierlog.storage.topic_partition import TopicPartition


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        yield start_kafka_sidecar(
            started,
            tmp_path_factory.mktemp("txn-clients") / "data",
            "transaction.state.log.num.partitions=1",
            "offsets.topic.num.partitions=1",
        )


def _producer(broker: KafkaSidecar, transactional_id: str) -> KafkaProducer:
    producer = KafkaProducer(
        bootstrap_servers=broker.kafka_address, transactional_id=transactional_id
    )
    producer.init_transactions()
    return producer


def test_kafka_python_commits_and_aborts_and_read_committed_sees_only_the_commits(
    broker: KafkaSidecar,
) -> None:
    topic = unique_name("orders")
    broker.create_topic(topic)
    producer = _producer(broker, unique_name("app"))
    producer.begin_transaction()
    producer.send(topic, b"aborted-1")
    producer.send(topic, b"aborted-2")
    producer.flush()  # in the log before the abort (else the abort drops them unsent)
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic, b"committed-1")
    producer.send(topic, b"committed-2")
    producer.commit_transaction()
    producer.close()

    committed = read_partition(broker, topic, "read_committed")
    everything = read_partition(broker, topic, "read_uncommitted")

    # 0-1 aborted, 2 the ABORT marker, 3-4 committed, 5 the COMMIT marker
    assert committed == [(3, b"committed-1"), (4, b"committed-2")]
    assert everything == [
        (0, b"aborted-1"),
        (1, b"aborted-2"),
        (3, b"committed-1"),
        (4, b"committed-2"),
    ]


def test_offsets_sent_to_a_transaction_move_the_group_only_when_it_commits(
    broker: KafkaSidecar,
) -> None:
    topic, group = unique_name("input"), unique_name("group")
    broker.create_topic(topic)
    tp = KafkaTopicPartition(topic, 0)
    producer = _producer(broker, unique_name("app"))
    producer.begin_transaction()
    producer.send_offsets_to_transaction({tp: OffsetAndMetadata(5, "", -1)}, group)
    producer.abort_transaction()
    with Consumer({"bootstrap.servers": broker.address, "group.id": group}) as ours:
        after_abort = ours.committed([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    producer.begin_transaction()
    producer.send(topic, b"output")
    producer.send_offsets_to_transaction({tp: OffsetAndMetadata(7, "m", -1)}, group)
    producer.commit_transaction()
    producer.close()

    with Consumer({"bootstrap.servers": broker.address, "group.id": group}) as ours:
        after_commit = ours.committed([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]

    assert after_abort is None
    assert after_commit is not None
    assert (after_commit.offset, after_commit.metadata) == (7, "m")


def test_a_second_producer_of_the_id_fences_the_first_and_its_transaction_is_aborted(
    broker: KafkaSidecar,
) -> None:
    topic, transactional_id = unique_name("fenced"), unique_name("app")
    broker.create_topic(topic)
    zombie = _producer(broker, transactional_id)
    zombie.begin_transaction()
    zombie.send(topic, b"zombie").get(timeout=30)

    successor = _producer(broker, transactional_id)  # aborts the zombie's transaction
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    zombie.close()
    successor.begin_transaction()
    successor.send(topic, b"successor")
    successor.commit_transaction()
    successor.close()

    assert [value for _offset, value in read_partition(broker, topic, "read_committed")] == [
        b"successor"
    ]


def test_a_transaction_committed_through_kafka_is_read_committed_through_grpc(
    broker: KafkaSidecar,
) -> None:
    topic = unique_name("across")
    broker.create_topic(topic)
    producer = _producer(broker, unique_name("app"))
    producer.begin_transaction()
    producer.send(topic, b"aborted", key=b"a").get(timeout=30)
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic, b"committed", key=b"c")
    producer.commit_transaction()
    producer.close()

    config = {"bootstrap.servers": broker.address, "isolation.level": "read_committed"}
    read: list[tuple[int, bytes | None, bytes | None]] = []
    with Consumer(config) as ours:
        ours.assign([TopicPartition(topic, 0)])
        ours.seek_to_beginning()
        deadline = time.monotonic() + 60
        while ours.position(TopicPartition(topic, 0)) < 4:  # past both markers
            assert time.monotonic() < deadline, "the gRPC consumer never passed the commit"
            read += [(r.offset, r.key, r.value) for r in ours.poll(timeout_ms=1_000)]

    assert read == [(2, b"c", b"committed")]


def test_kafkas_transactional_producer_and_the_kafka_transactions_tool(
    broker: KafkaSidecar,
) -> None:
    topic, transactional_id = unique_name("perf"), unique_name("perf")
    broker.create_topic(topic)
    bootstrap = broker.kafka_address
    run_java(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic,
        "--num-records", "1000",
        "--record-size", "100",
        "--throughput", "-1",
        "--transactional-id", transactional_id,
        "--transaction-duration-ms", "50",
        "--producer-props", f"bootstrap.servers={bootstrap}",
    )  # fmt: skip
    holder = unique_name("holder")  # a transaction left open, for list and describe-producers
    open_producer = _producer(broker, holder)
    open_producer.begin_transaction()
    open_producer.send(topic, b"open").get(timeout=30)
    tool = ("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap)

    listed = {row["TransactionalId"]: row for row in printed_table(run_java(*tool, "list"))}
    (described,) = printed_table(
        run_java(*tool, "describe", "--transactional-id", transactional_id)
    )
    (holding,) = printed_table(run_java(*tool, "describe", "--transactional-id", holder))
    producers = printed_table(
        run_java(*tool, "describe-producers", "--topic", topic, "--partition", "0")
    )
    committed_before_the_open_one = len(read_partition(broker, topic, "read_committed"))
    read_by_java = run_java(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", bootstrap,
        "--topic", topic,
        "--partition", "0",
        "--offset", "earliest",
        "--isolation-level", "read_committed",
        "--max-messages", "1000",
        "--property", "print.offset=true",
        "--property", "print.value=false",
    )  # fmt: skip
    open_producer.abort_transaction()
    open_producer.close()

    assert listed[transactional_id]["TransactionState"] == "CompleteCommit"
    assert listed[holder]["TransactionState"] == "Ongoing"
    assert described["TransactionState"] == "CompleteCommit"
    assert described["ProducerId"] == listed[transactional_id]["ProducerId"]
    assert (holding["TransactionState"], holding["TopicPartitions"]) == ("Ongoing", f"{topic}-0")
    open_offsets = {row["ProducerId"]: row["CurrentTransactionStartOffset"] for row in producers}
    assert open_offsets[listed[transactional_id]["ProducerId"]] == "None"
    assert open_offsets[listed[holder]["ProducerId"]] != "None"
    assert committed_before_the_open_one == 1000  # every record, each transaction whole
    # Kafka's own read_committed consumer reads the same 1,000, skipping the markers.
    java_offsets = [int(line.split(":")[1]) for line in read_by_java.splitlines()]
    assert len(java_offsets) == 1000 and java_offsets == sorted(set(java_offsets))
