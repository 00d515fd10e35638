"""Transactions over the Kafka listener, read off the wire with kio (tests/kafka/wire.py),
sent to a one-broker sidecar, which coordinates every transactional id: InitProducerId
with a transactional id (epochs, KIP-360, fencing by version), AddPartitionsToTxn,
EndTxn, AddOffsetsToTxn and TxnOffsetCommit, a read_committed Fetch stopping at the
last stable offset and listing the aborted transactions, DescribeTransactions,
ListTransactions and DescribeProducers. One sidecar for the module: each test uses its
own topic and transactional ids."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar, unique_name
from tests.kafka.wire import KafkaWire, fetch_committed
from tests.support.sidecars import Sidecars
from tierlog.storage.records import SimpleRecord, build_batch, iter_batches

PRODUCE, FETCH, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN = 0, 1, 22, 24, 25
END_TXN, TXN_OFFSET_COMMIT = 26, 28
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    """The sidecar, once its coordinators have loaded the internal topics their first
    calls create (a client retries COORDINATOR_LOAD_IN_PROGRESS as these waits do)."""
    with Sidecars() as started:
        sidecar = start_kafka_sidecar(
            started,
            tmp_path_factory.mktemp("txn") / "data",
            "transaction.state.log.num.partitions=1",
            "offsets.topic.num.partitions=1",
        )
        connection = KafkaWire(sidecar.kafka_port)
        tid = "warm-up"
        pid = _once_loaded(lambda: _init(connection, tid)).producer_id
        group = {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0}
        _once_loaded(lambda: connection.call(ADD_OFFSETS_TO_TXN, 3, {**group, "group_id": "g"}))
        _once_loaded(lambda: connection.call(TXN_OFFSET_COMMIT, 3, _offsets(group, "g", "t", 0)))
        _end(connection, tid, pid, 0, commit=False)
        connection.close()
        yield sidecar


def _once_loaded(call: Callable[[], Any], timeout_s: float = 60) -> Any:
    """``call``'s answer once it is not COORDINATOR_LOAD_IN_PROGRESS."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = call()
        codes = {getattr(answer, "error_code", None)} | {
            p.error_code for t in getattr(answer, "topics", ()) for p in t.partitions
        }
        if ErrorCode.coordinator_load_in_progress not in codes:
            return answer
        assert time.monotonic() < deadline, "the coordinator never loaded"
        time.sleep(0.05)


def _offsets(producer: dict[str, Any], group: str, topic: str, offset: int) -> dict[str, Any]:
    return {
        **producer,
        "group_id": group,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}
                ],
            }
        ],
    }


def _init(wire: KafkaWire, transactional_id: str, version: int = 4, **named: int) -> Any:
    return wire.call(
        INIT_PRODUCER_ID,
        version,
        {
            "transactional_id": transactional_id,
            "transaction_timeout": TIMEOUT_MS,
            "producer_id": named.get("producer_id", -1),
            "producer_epoch": named.get("producer_epoch", -1),
        },
    )


def _add(
    wire: KafkaWire, tid: str, pid: int, epoch: int, topic: str, version: int = 3
) -> list[tuple[str, int, ErrorCode]]:
    body = wire.call(
        ADD_PARTITIONS_TO_TXN,
        version,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}],
        },
    )
    return [
        (topic.name, result.partition_index, result.partition_error_code)
        for topic in body.results_by_topic_v3_and_below
        for result in topic.results_by_partition
    ]


def _end(
    wire: KafkaWire, tid: str, pid: int, epoch: int, *, commit: bool, version: int = 3
) -> ErrorCode:
    body = wire.call(
        END_TXN,
        version,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
    )
    return ErrorCode(body.error_code)


def _produce(
    wire: KafkaWire, tid: str | None, pid: int, epoch: int, topic: str, sequence: int, value: bytes
) -> Any:
    batch = build_batch(
        [SimpleRecord(b"k", value, int(time.time() * 1000))],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
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
    (topic_answer,) = body.responses
    (partition,) = topic_answer.partition_responses
    return partition


def _describe(wire: KafkaWire, tid: str) -> Any:
    body = wire.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
    (state,) = body.transaction_states
    return state


def test_a_transaction_committed_through_kafka_apis_is_read_committed_after_its_end(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    topic, tid = unique_name("paid"), unique_name("app")
    broker.create_topic(topic)
    init = _init(wire, tid)
    assert (init.error_code, init.producer_epoch) == (ErrorCode.none, 0)
    pid = init.producer_id

    assert _add(wire, tid, pid, 0, topic) == [(topic, 0, ErrorCode.none)]
    assert _produce(wire, tid, pid, 0, topic, 0, b"one").error_code == ErrorCode.none
    assert _produce(wire, tid, pid, 0, topic, 1, b"two").error_code == ErrorCode.none
    open_state = _describe(wire, tid)
    open_read = fetch_committed(wire, topic)

    assert _end(wire, tid, pid, 0, commit=True) == ErrorCode.none
    committed = fetch_committed(wire, topic)

    assert open_state.transaction_state == "Ongoing"
    assert [(t.topic, tuple(t.partitions)) for t in open_state.topics] == [(topic, (0,))]
    # Open: the last stable offset is the transaction's first offset, nothing is read.
    assert (open_read.high_watermark, open_read.last_stable_offset) == (2, 0)
    assert not open_read.records
    assert (committed.high_watermark, committed.last_stable_offset) == (3, 3)
    headers = list(iter_batches(committed.records))
    assert [(h.base_offset, h.is_transactional, h.is_control) for h in headers] == [
        (0, True, False),
        (1, True, False),
        (2, True, True),  # the COMMIT marker
    ]
    assert not committed.aborted_transactions
    assert _describe(wire, tid).transaction_state == "CompleteCommit"


def test_an_aborted_transaction_is_listed_to_a_read_committed_fetch(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    topic, tid = unique_name("refunds"), unique_name("app")
    broker.create_topic(topic)
    pid = _init(wire, tid).producer_id
    _add(wire, tid, pid, 0, topic)
    _produce(wire, tid, pid, 0, topic, 0, b"dropped")

    assert _end(wire, tid, pid, 0, commit=False) == ErrorCode.none
    read = fetch_committed(wire, topic)

    assert (read.high_watermark, read.last_stable_offset) == (2, 2)
    assert [(a.producer_id, a.first_offset) for a in read.aborted_transactions] == [(pid, 0)]
    assert _describe(wire, tid).transaction_state == "CompleteAbort"


def test_a_second_producer_fences_the_first_with_the_error_its_version_knows(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    topic, tid = unique_name("fenced"), unique_name("app")
    broker.create_topic(topic)
    first = _init(wire, tid)
    pid = first.producer_id
    _add(wire, tid, pid, 0, topic)
    _produce(wire, tid, pid, 0, topic, 0, b"zombie")

    second = _init(wire, tid)  # aborts the open transaction over the first's head

    assert second.error_code == ErrorCode.none
    assert second.producer_id == pid
    assert second.producer_epoch == 2  # 1 was the abort's, which fenced the first
    assert fetch_committed(wire, topic).aborted_transactions[0].first_offset == 0
    fenced, old = ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch  # KIP-588
    assert _add(wire, tid, pid, 0, topic, version=3) == [(topic, 0, fenced)]
    assert _add(wire, tid, pid, 0, topic, version=1) == [(topic, 0, old)]
    assert _end(wire, tid, pid, 0, commit=True, version=2) == fenced
    assert _end(wire, tid, pid, 0, commit=True, version=1) == old
    assert _init(wire, tid, 4, producer_id=pid, producer_epoch=0).error_code == fenced
    assert _init(wire, tid, 3, producer_id=pid, producer_epoch=0).error_code == old
    # The partition itself refuses the zombie's batches (the ABORT marker's epoch).
    assert _produce(wire, tid, pid, 0, topic, 1, b"late").error_code == old


def test_a_producer_naming_its_current_id_and_epoch_gets_the_next_epoch_kip_360(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    tid = unique_name("app")
    first = _init(wire, tid)

    again = _init(wire, tid, 3, producer_id=first.producer_id, producer_epoch=0)

    assert (again.error_code, again.producer_id, again.producer_epoch) == (
        ErrorCode.none,
        first.producer_id,
        1,
    )


def test_transaction_calls_refuse_unknown_partitions_and_unknown_producers(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    topic, tid = unique_name("known"), unique_name("app")
    broker.create_topic(topic)
    pid = _init(wire, tid).producer_id
    body = wire.call(
        ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [
                {"name": topic, "partitions": [0]},
                {"name": "missing", "partitions": [0]},
            ],
        },
    )
    codes = {
        (t.name, r.partition_index): r.partition_error_code
        for t in body.results_by_topic_v3_and_below
        for r in t.results_by_partition
    }

    assert codes == {
        (topic, 0): ErrorCode.operation_not_attempted,
        ("missing", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert _add(wire, tid, pid + 1, 0, topic) == [(topic, 0, ErrorCode.invalid_producer_id_mapping)]
    assert _end(wire, tid, pid, 0, commit=True) == ErrorCode.invalid_txn_state  # nothing open
    assert _init(wire, "").error_code == ErrorCode.invalid_request
    too_long = wire.call(
        INIT_PRODUCER_ID,
        4,
        {"transactional_id": tid, "transaction_timeout": 3_600_000},
    )
    assert too_long.error_code == ErrorCode.invalid_transaction_timeout
    assert _describe(wire, unique_name("never")).error_code == ErrorCode.transactional_id_not_found


def test_offsets_sent_in_a_transaction_join_it_and_are_committed_with_it(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    topic, tid, group = unique_name("input"), unique_name("app"), unique_name("group")
    broker.create_topic(topic)
    pid = _init(wire, tid).producer_id
    added = wire.call(
        ADD_OFFSETS_TO_TXN,
        3,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0, "group_id": group},
    )
    producer = {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0}
    committed = wire.call(TXN_OFFSET_COMMIT, 3, _offsets(producer, group, topic, 42))
    state = _describe(wire, tid)

    assert added.error_code == ErrorCode.none
    assert [(p.partition_index, p.error_code) for p in committed.topics[0].partitions] == [
        (0, ErrorCode.none)
    ]
    assert state.transaction_state == "Ongoing"
    assert [t.topic for t in state.topics] == ["__consumer_offsets"]
    assert _end(wire, tid, pid, 0, commit=True) == ErrorCode.none


def test_list_transactions_filters_by_state_producer_and_duration(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    topic, open_id, done_id = unique_name("listed"), unique_name("open"), unique_name("done")
    broker.create_topic(topic)
    open_pid = _init(wire, open_id).producer_id
    _add(wire, open_id, open_pid, 0, topic)
    done_pid = _init(wire, done_id).producer_id

    def listed(version: int = 1, **filters: Any) -> tuple[set[tuple[str, int, str]], Any]:
        body = wire.call(LIST_TRANSACTIONS, version, filters)
        assert body.error_code == ErrorCode.none
        mine = {open_id, done_id}
        return {
            (t.transactional_id, t.producer_id, t.transaction_state)
            for t in body.transaction_states
            if t.transactional_id in mine
        }, tuple(body.unknown_state_filters)

    assert listed(0) == ({(open_id, open_pid, "Ongoing"), (done_id, done_pid, "Empty")}, ())
    assert listed(state_filters=["Ongoing", "Sleeping"]) == (
        {(open_id, open_pid, "Ongoing")},
        ("Sleeping",),
    )
    assert listed(producer_id_filters=[done_pid]) == ({(done_id, done_pid, "Empty")}, ())
    # Open for less than an hour: none; the Empty one counts from -1, as Kafka's does.
    assert listed(duration_filter=3_600_000) == ({(done_id, done_pid, "Empty")}, ())
    _end(wire, open_id, open_pid, 0, commit=False)


def test_describe_producers_shows_an_open_transactions_first_offset(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    topic, tid = unique_name("described"), unique_name("app")
    broker.create_topic(topic)
    pid = _init(wire, tid).producer_id
    _add(wire, tid, pid, 0, topic)
    _produce(wire, tid, pid, 0, topic, 0, b"a")
    _produce(wire, tid, pid, 0, topic, 1, b"b")

    def producers() -> list[tuple[int, int, int, int]]:
        body = wire.call(
            DESCRIBE_PRODUCERS,
            0,
            {"topics": [{"name": topic, "partition_indexes": [0, 7]}]},
        )
        (answer,) = body.topics
        first, missing = answer.partitions
        assert missing.error_code == ErrorCode.unknown_topic_or_partition
        assert first.error_code == ErrorCode.none
        return [
            (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
            for p in first.active_producers
        ]

    assert producers() == [(pid, 0, 1, 0)]
    _end(wire, tid, pid, 0, commit=True)
    assert producers() == [(pid, 0, 1, -1)]


def test_a_transactional_batch_to_a_partition_not_in_the_transaction_is_refused(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    added, skipped, tid = unique_name("added"), unique_name("skipped"), unique_name("app")
    broker.create_topic(added)
    broker.create_topic(skipped)
    pid = _init(wire, tid).producer_id
    _add(wire, tid, pid, 0, added)

    refused = _produce(wire, tid, pid, 0, skipped, 0, b"no AddPartitionsToTxn")
    taken = _produce(wire, tid, pid, 0, added, 0, b"added first")
    assert _end(wire, tid, pid, 0, commit=True) == ErrorCode.none
    # The next transaction: its first batch is checked again, against its own partitions.
    again = _produce(wire, tid, pid, 0, added, 1, b"not added this time")

    # Kafka 3.6+ verifies so too (KIP-890): no transaction is left that no marker ends.
    assert refused.error_code == ErrorCode.invalid_txn_state
    assert taken.error_code == ErrorCode.none
    assert again.error_code == ErrorCode.invalid_txn_state
    nothing = fetch_committed(wire, skipped)
    assert (nothing.high_watermark, nothing.last_stable_offset) == (0, 0)


def test_transactional_batches_without_a_transactional_id_are_refused(
    broker: KafkaSidecar, wire: KafkaWire
) -> None:
    topic, tid = unique_name("anonymous"), unique_name("app")
    broker.create_topic(topic)
    pid = _init(wire, tid).producer_id
    _add(wire, tid, pid, 0, topic)

    refused = _produce(wire, None, pid, 0, topic, 0, b"whose transaction?")

    # Kafka refuses the request so: no coordinator could ever end such a transaction.
    assert refused.error_code == ErrorCode.transactional_id_authorization_failed
    nothing = fetch_committed(wire, topic)
    assert (nothing.high_watermark, nothing.last_stable_offset) == (0, 0)
