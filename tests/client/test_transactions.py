"""The transactional producer against real sidecars: commit and abort put a marker in
every partition the transaction wrote (on whichever broker leads it), a second producer
of the same transactional.id fences the first, a transaction open past its timeout is
aborted over its producer's head, and calls out of turn are refused by type; under
kill -9, a read_committed consumer reads every committed transaction whole and no
aborted one."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.pipeline.read_all import read_table
from tests.support.transaction_markers import Marker, markers
from tierlog.api.errors import InvalidTransactionTimeoutError, ProducerFencedError
from tierlog.client import Consumer, ConsumerRecord, Producer, TopicPartition
from tierlog.client.errors import (
    ConfigError,
    IllegalProducerStateError,
    RecordTooLargeError,
    TierlogError,
)

from .conftest import SidecarStarter, create_topic, two_brokers
from .sidecars import LiveSidecar

TOPIC = "orders"
TXN_PARTITIONS = "transaction.state.log.num.partitions=3"


def _producer(sidecar: LiveSidecar, transactional_id: str = "app", **props: object) -> Producer:
    config: dict[str, object] = {
        "bootstrap.servers": sidecar.address,
        "transactional.id": transactional_id,
        "linger.ms": 0,
    }
    config.update({key.replace("_", "."): value for key, value in props.items()})
    return Producer(config)


def _markers(data_dir: Path, topic: str, partition: int) -> list[Marker]:
    return markers(data_dir / f"{topic}-{partition}")


@pytest.fixture
def sidecar(sidecars: SidecarStarter) -> LiveSidecar:
    sidecar = sidecars("data", TXN_PARTITIONS)
    create_topic(sidecar.address, TOPIC, partitions=3)
    return sidecar


@pytest.mark.parametrize("commit", [True, False])
def test_a_transaction_ends_with_a_marker_in_every_partition_it_wrote(
    sidecar: LiveSidecar, commit: bool
) -> None:
    with _producer(sidecar) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        futures = [producer.send(TOPIC, b"v%d" % p, partition=p) for p in (0, 2) for _ in range(3)]
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
        assert all(future.result().offset >= 0 for future in futures)
        assert producer.idempotence is not None
        pid = producer.idempotence.producer_id_and_epoch
        expected = [Marker(commit, pid.producer_id, pid.epoch)]
        assert _markers(sidecar.data_dir, TOPIC, 0) == expected
        assert _markers(sidecar.data_dir, TOPIC, 2) == expected
        assert _markers(sidecar.data_dir, TOPIC, 1) == []
        # the next transaction goes on under the same producer
        producer.begin_transaction()
        producer.send(TOPIC, b"next", partition=1)
        producer.commit_transaction()
        assert _markers(sidecar.data_dir, TOPIC, 1) == [Marker(True, pid.producer_id, pid.epoch)]


def test_a_transaction_that_sent_nothing_ends_without_a_marker(sidecar: LiveSidecar) -> None:
    with _producer(sidecar) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.commit_transaction()
        producer.begin_transaction()
        producer.abort_transaction()
    assert [_markers(sidecar.data_dir, TOPIC, p) for p in range(3)] == [[], [], []]


def test_a_new_producer_of_the_same_id_fences_the_old_one(sidecar: LiveSidecar) -> None:
    with _producer(sidecar) as old, _producer(sidecar) as new:
        old.init_transactions()
        old.begin_transaction()
        old.send(TOPIC, b"zombie", partition=0).result()
        new.init_transactions()  # aborts the old producer's open transaction
        with pytest.raises(ProducerFencedError):
            old.commit_transaction()
        with pytest.raises(ProducerFencedError):  # and it stays fenced
            old.send(TOPIC, b"more", partition=0)
        new.begin_transaction()
        new.send(TOPIC, b"fresh", partition=0)
        new.commit_transaction()
        assert new.idempotence is not None
        pid = new.idempotence.producer_id_and_epoch
    assert _markers(sidecar.data_dir, TOPIC, 0) == [
        Marker(False, pid.producer_id, pid.epoch - 1),  # the fencing abort
        Marker(True, pid.producer_id, pid.epoch),
    ]


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(
    sidecars: SidecarStarter,
) -> None:
    sidecar = sidecars(
        "data", TXN_PARTITIONS, "transaction.abort.timed.out.transaction.cleanup.interval.ms=100"
    )
    create_topic(sidecar.address, TOPIC, partitions=3)
    with _producer(sidecar, transaction_timeout_ms=300) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, b"slow", partition=1).result()
        deadline = time.monotonic() + 20
        while not _markers(sidecar.data_dir, TOPIC, 1):
            assert time.monotonic() < deadline, "the timed-out transaction was never aborted"
            time.sleep(0.05)  # the coordinator looks for timed-out transactions every 100 ms
        assert not _markers(sidecar.data_dir, TOPIC, 1)[0].committed
        with pytest.raises(ProducerFencedError):
            producer.commit_transaction()


def test_markers_reach_partitions_another_broker_leads(sidecars: SidecarStarter) -> None:
    first, second = two_brokers(sidecars)
    with _producer(first) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for partition in range(6):
            producer.send("spread", b"x", partition=partition)
        producer.commit_transaction()
        assert producer.idempotence is not None
        pid = producer.idempotence.producer_id_and_epoch
    found = {
        partition: _markers(broker.data_dir, "spread", partition)
        for broker in (first, second)
        for partition in range(6)
        if (broker.data_dir / f"spread-{partition}").is_dir()
        and _markers(broker.data_dir, "spread", partition)
    }
    assert found == {p: [Marker(True, pid.producer_id, pid.epoch)] for p in range(6)}


def test_calls_out_of_turn_are_refused(sidecar: LiveSidecar) -> None:
    with _producer(sidecar) as producer:
        with pytest.raises(IllegalProducerStateError):
            producer.begin_transaction()  # before init_transactions
        with pytest.raises(IllegalProducerStateError):
            producer.send(TOPIC, b"x")
        producer.init_transactions()
        with pytest.raises(IllegalProducerStateError):
            producer.init_transactions()
        with pytest.raises(IllegalProducerStateError):
            producer.send(TOPIC, b"x")  # outside a transaction
        with pytest.raises(IllegalProducerStateError):
            producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(IllegalProducerStateError):
            producer.begin_transaction()
    with (
        Producer({"bootstrap.servers": sidecar.address}) as plain,
        pytest.raises(IllegalProducerStateError, match=r"transactional\.id"),
    ):
        plain.init_transactions()
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        Producer(
            {
                "bootstrap.servers": sidecar.address,
                "transactional.id": "app",
                "enable.idempotence": "false",
            }
        )
    with pytest.raises(ConfigError, match="acks"):
        Producer({"bootstrap.servers": sidecar.address, "transactional.id": "app", "acks": "1"})
    with (
        _producer(sidecar, transaction_timeout_ms=3_600_000) as too_long,
        pytest.raises(InvalidTransactionTimeoutError),
    ):
        too_long.init_transactions()


def test_a_coordinator_killed_mid_transaction_takes_the_commit_after_its_restart(
    sidecar: LiveSidecar,
) -> None:
    with _producer(sidecar) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for partition in range(3):
            producer.send(TOPIC, b"before the crash", partition=partition).result()
        sidecar.kill()  # kill -9: the transaction is Ongoing in __transaction_state
        sidecar.start()  # same port: the producer's connections come back
        producer.commit_transaction()
        assert producer.idempotence is not None
        pid = producer.idempotence.producer_id_and_epoch
    committed = [Marker(True, pid.producer_id, pid.epoch)]
    assert [_markers(sidecar.data_dir, TOPIC, p) for p in range(3)] == [committed] * 3


def test_a_record_refused_for_good_aborts_its_transaction_and_the_next_one_commits(
    sidecar: LiveSidecar,
) -> None:
    create_topic(sidecar.address, "small", partitions=1, max_message_bytes="1024")
    with _producer(sidecar) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("small", b"fits", partition=0).result()
        refused = producer.send("small", b"x" * 4096, partition=0)
        with pytest.raises(RecordTooLargeError):
            refused.result()  # MESSAGE_TOO_LARGE: a gap in the partition's sequences
        with pytest.raises(RecordTooLargeError):
            producer.commit_transaction()  # the transaction can only be aborted
        producer.abort_transaction()
        # the producer goes on: under a new epoch from its coordinator, sequences from 0
        producer.begin_transaction()
        producer.send("small", b"after", partition=0).result()
        producer.commit_transaction()
        assert producer.idempotence is not None
        pid = producer.idempotence.producer_id_and_epoch
    assert _markers(sidecar.data_dir, "small", 0) == [
        Marker(False, pid.producer_id, pid.epoch - 1),
        Marker(True, pid.producer_id, pid.epoch),
    ]


@dataclass
class _Writer:
    """One transactional producer's loop, and what it was told of each transaction."""

    sidecar: LiveSidecar
    transactional_id: str
    seed: int
    stop: threading.Event
    outcomes: dict[str, tuple[str, list[bytes]]] = field(default_factory=dict)

    def run(self) -> None:
        rng = random.Random(self.seed)
        producer = self._fresh_producer()
        number = 0
        while not self.stop.is_set():
            name = f"{self.transactional_id}-{number}"
            number += 1
            values = [f"{name}-{k}".encode() for k in range(rng.randint(1, 4))]
            commit = rng.random() < 0.6
            try:
                producer.begin_transaction()
                for value in values:
                    producer.send(TOPIC, value, partition=rng.randrange(3))
                if commit:
                    producer.commit_transaction()
                else:
                    producer.abort_transaction()
                self.outcomes[name] = ("committed" if commit else "aborted", values)
            except TierlogError:
                # The sidecar died under the call: the outcome is unknown, the producer
                # unusable; the next one of the id aborts whatever is left open.
                self.outcomes[name] = ("unknown", values)
                producer.close(timeout_s=0)
                producer = self._fresh_producer()
        producer.close()

    def _fresh_producer(self) -> Producer:
        deadline = time.monotonic() + 60
        while True:
            producer = _producer(
                self.sidecar, self.transactional_id, request_timeout_ms=2000, max_block_ms=20_000
            )
            try:
                producer.init_transactions()
                return producer
            except TierlogError:
                producer.close(timeout_s=0)
                assert time.monotonic() < deadline, "the sidecar never came back"


def test_concurrent_transactions_under_kill_9_are_read_whole_or_not_at_all(
    sidecar: LiveSidecar,
) -> None:
    stop = threading.Event()
    writers = [_Writer(sidecar, f"writer-{i}", seed=i, stop=stop) for i in range(3)]
    threads = [threading.Thread(target=writer.run) for writer in writers]
    for thread in threads:
        thread.start()
    try:
        for _ in range(2):
            _wait_for_outcomes(writers, at_least=len(writers) * 3)
            sidecar.kill()  # kill -9, with transactions in every state
            sidecar.start()
        _wait_for_outcomes(writers, at_least=len(writers) * 3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
    visible = Counter(record.value for record in _read_committed(sidecar))
    assert max(visible.values(), default=1) == 1, "a record was read twice"
    sidecar.stop()
    # The pipeline's read_committed reader, over the same files, sees the same records.
    read = read_table({"path": str(sidecar.data_dir), "subscribe": TOPIC})
    assert Counter(read.column("value").to_pylist()) == visible
    seen: Counter[str] = Counter()
    for writer in writers:
        for name, (outcome, values) in writer.outcomes.items():
            present = [value for value in values if value in visible]
            if outcome == "committed":
                assert present == values, f"{name} committed but reads {present}"
            elif outcome == "aborted":
                assert present == [], f"{name} aborted but reads {present}"
            else:
                assert present in ([], values), f"{name} is read in part: {present}"
            seen[outcome] += 1
    assert seen["committed"] and seen["aborted"]


def _read_committed(sidecar: LiveSidecar) -> list[ConsumerRecord]:
    """Every record a read_committed consumer returns from the topic's three partitions,
    read to their last stable offsets (every transaction has ended by now)."""
    config = {"bootstrap.servers": sidecar.address, "isolation.level": "read_committed"}
    partitions = [TopicPartition(TOPIC, p) for p in range(3)]
    with Consumer(config) as consumer:
        consumer.assign(partitions)
        consumer.seek_to_beginning(partitions)
        ends = consumer.end_offsets(partitions)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, "the consumer never reached the stable end"
            records += consumer.poll(200)
    return records


def _wait_for_outcomes(writers: list[_Writer], at_least: int) -> None:
    """Until the writers have ended ``at_least`` more transactions, one way or another."""
    target = sum(len(writer.outcomes) for writer in writers) + at_least
    deadline = time.monotonic() + 60
    while sum(len(writer.outcomes) for writer in writers) < target:
        assert time.monotonic() < deadline, "the writers made no progress"
        time.sleep(0.05)  # the writer threads are at work: look again
