"""Transactions' series (docs/METRICS.md, "Transactions"), scraped off a real sidecar while
kafka-python's transactional producer commits, aborts, is fenced and times out through the
Kafka listener: transactions by outcome, transactional ids by state (the open one
gauged, and its age), markers by outcome (one dropped for a deleted partition), and the
produce batches KIP-890's verification refused. One sidecar for the module; its tests
end every transaction they open, so each starts with none open."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kafka import KafkaProducer
from kafka.errors import ProducerFencedError
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar, unique_name
from tests.kafka.test_transactions import _add, _end, _init, _produce
from tests.kafka.wire import KafkaWire
from tests.support.scrape import METRICS, Scrape, scrape_sidecar
from tests.support.sidecars import Sidecars
from tierlog.client.admin import AdminClient

ENDED = "tierlog_transactions_total"
IDS = "tierlog_transactional_ids"
OLDEST = "tierlog_transaction_oldest_ongoing_seconds"
MARKERS = "tierlog_transaction_markers_total"
VERIFICATIONS = "tierlog_transaction_verifications_total"
REFUSALS = "tierlog_transaction_verification_refusals_total"
CLEANUP_INTERVAL_MS = 100  # transaction.abort.timed.out.transaction.cleanup.interval.ms


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        yield start_kafka_sidecar(
            started,
            tmp_path_factory.mktemp("txn-metrics") / "data",
            METRICS,
            "transaction.state.log.num.partitions=1",
            f"transaction.abort.timed.out.transaction.cleanup.interval.ms={CLEANUP_INTERVAL_MS}",
        )


def _producer(broker: KafkaSidecar, transactional_id: str, **config: int) -> KafkaProducer:
    producer = KafkaProducer(
        bootstrap_servers=broker.kafka_address, transactional_id=transactional_id, **config
    )
    producer.init_transactions()
    return producer


def _until(
    broker: KafkaSidecar, name: str, value: float, timeout_s: float, **labels: str
) -> Scrape:
    deadline = time.monotonic() + timeout_s
    while (found := scrape_sidecar(broker)).value(name, **labels) != value:
        assert time.monotonic() < deadline, f"{name}{labels}: {found.value(name, **labels)}"
        time.sleep(0.05)
    return found


def test_every_series_is_there_before_the_first_transaction(broker: KafkaSidecar) -> None:
    scraped = scrape_sidecar(broker)
    for outcome in ("committed", "aborted", "timed_out", "fenced"):
        assert (ENDED, frozenset({("outcome", outcome)})) in scraped.samples
    for outcome in ("written", "retried", "dropped", "failed"):
        assert (MARKERS, frozenset({("outcome", outcome)})) in scraped.samples
    assert (REFUSALS, frozenset({("reason", "INVALID_TXN_STATE")})) in scraped.samples
    assert scraped.value(IDS, state="Ongoing") == 0
    assert scraped.value(OLDEST) == 0


def test_a_commit_and_an_abort_are_counted_and_the_open_transaction_gauged(
    broker: KafkaSidecar,
) -> None:
    topic = unique_name("orders")
    broker.create_topic(topic)
    producer = _producer(broker, unique_name("app"))
    before = scrape_sidecar(broker)

    producer.begin_transaction()
    producer.send(topic, b"aborted").get(timeout=30)
    open_one = scrape_sidecar(broker)
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic, b"committed").get(timeout=30)
    producer.commit_transaction()
    producer.close()
    after = scrape_sidecar(broker)

    def count(scraped: Scrape, name: str, **labels: str) -> float:
        return scraped.value(name, **labels) - before.value(name, **labels)

    assert open_one.value(IDS, state="Ongoing") == 1
    assert open_one.value(OLDEST) > 0
    assert after.value(IDS, state="Ongoing") == 0
    assert after.value(IDS, state="CompleteCommit") == before.value(IDS, state="CompleteCommit") + 1
    assert after.value(OLDEST) == 0
    assert count(after, ENDED, outcome="committed") == 1
    assert count(after, ENDED, outcome="aborted") == 1
    assert count(after, MARKERS, outcome="written") == 2  # one partition, two transactions
    # Each transaction's first batch on the partition was verified with the coordinator.
    assert count(after, VERIFICATIONS) == 2
    assert count(after, REFUSALS, reason="INVALID_TXN_STATE") == 0


def test_a_fenced_and_a_timed_out_transaction_are_counted_as_such(broker: KafkaSidecar) -> None:
    topic = unique_name("fenced")
    broker.create_topic(topic)
    before = scrape_sidecar(broker)
    transactional_id = unique_name("app")
    zombie = _producer(broker, transactional_id)
    zombie.begin_transaction()
    zombie.send(topic, b"zombie").get(timeout=30)
    successor = _producer(broker, transactional_id)  # aborts the zombie's transaction
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    zombie.close()
    successor.close()
    fenced = scrape_sidecar(broker)

    timeout_ms = 1_000
    forgotten = _producer(broker, unique_name("slow"), transaction_timeout_ms=timeout_ms)
    forgotten.begin_transaction()
    forgotten.send(topic, b"never ended").get(timeout=30)
    # Aborted at the first cleanup pass after its timeout; a margin for a loaded machine.
    timed_out = before.value(ENDED, outcome="timed_out") + 1
    _until(
        broker,
        ENDED,
        timed_out,
        (timeout_ms + CLEANUP_INTERVAL_MS) / 1000 + 10,
        outcome="timed_out",
    )
    forgotten.close(timeout=1)

    assert fenced.value(ENDED, outcome="fenced") == before.value(ENDED, outcome="fenced") + 1
    assert fenced.value(ENDED, outcome="aborted") == before.value(ENDED, outcome="aborted")
    assert scrape_sidecar(broker).value(IDS, state="Ongoing") == 0


def test_a_marker_for_a_deleted_partition_is_counted_dropped(broker: KafkaSidecar) -> None:
    topic = unique_name("deleted")
    broker.create_topic(topic)
    producer = _producer(broker, unique_name("app"))
    before = scrape_sidecar(broker)
    producer.begin_transaction()
    producer.send(topic, b"orphan").get(timeout=30)
    with AdminClient({"bootstrap.servers": broker.address}) as admin:
        admin.delete_topic(topic)
    producer.commit_transaction()
    producer.close()
    after = scrape_sidecar(broker)

    assert after.value(MARKERS, outcome="dropped") == before.value(MARKERS, outcome="dropped") + 1
    assert after.value(ENDED, outcome="committed") == before.value(ENDED, outcome="committed") + 1


def test_a_batch_for_a_partition_not_in_the_transaction_is_a_refusal(
    broker: KafkaSidecar,
) -> None:
    added, skipped, tid = unique_name("added"), unique_name("skipped"), unique_name("raw")
    broker.create_topic(added)
    broker.create_topic(skipped)
    wire = KafkaWire(broker.kafka_port)
    try:
        pid = _init(wire, tid).producer_id
        assert _add(wire, tid, pid, 0, added) == [(added, 0, ErrorCode.none)]
        before = scrape_sidecar(broker)
        refused = _produce(wire, tid, pid, 0, skipped, 0, b"no AddPartitionsToTxn")
        after = scrape_sidecar(broker)
        assert _end(wire, tid, pid, 0, commit=False) == ErrorCode.none
    finally:
        wire.close()

    assert refused.error_code == ErrorCode.invalid_txn_state
    invalid = "INVALID_TXN_STATE"
    assert after.value(REFUSALS, reason=invalid) == before.value(REFUSALS, reason=invalid) + 1
    assert after.value(VERIFICATIONS) == before.value(VERIFICATIONS) + 1
