"""TransactionService on a real sidecar: a transactional producer's calls, the markers
its commit or abort writes to every partition, fencing by epoch, the timeout's abort,
recovery from ``__transaction_state`` after ``kill -9``, and Kafka's typed errors."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from tests.support.transaction_markers import markers
from tierlog.api.v1 import (
    group_service_pb2,
    group_service_pb2_grpc,
    log_service_pb2,
    transaction_service_pb2_grpc,
)
from tierlog.api.v1 import transaction_service_pb2 as pb
from tierlog.coordinator.loader import log_records
from tierlog.coordinator.transaction_records import (
    TransactionLogKey,
    TransactionLogRecord,
    TransactionState,
    decode_transaction_record,
    encode_transaction_record,
)
from tierlog.coordinator.transaction_topic import (
    TRANSACTION_STATE_TOPIC,
    partition_for_transactional_id,
)
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import (
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    decode_records,
    iter_batches,
)

from .conftest import Sidecar, SidecarFactory, reason_of

T = TypeVar("T")
TXN_PARTITIONS = "transaction.state.log.num.partitions=3"
TOPIC = "orders"


def _txns(sidecar: Sidecar) -> transaction_service_pb2_grpc.TransactionServiceStub:
    return transaction_service_pb2_grpc.TransactionServiceStub(sidecar.channel)


def _retrying(call: Callable[[], T], reasons: tuple[str, ...], timeout_s: float = 20) -> T:
    """``call()``, asked again while it fails with one of the retriable ``reasons`` (the
    coordinator loading its partition, a transaction being completed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except grpc.RpcError as error:
            assert reason_of(error) in reasons, error
            assert time.monotonic() < deadline, f"still {reason_of(error)} after {timeout_s} s"
            time.sleep(0.05)  # the sidecar is loading or completing: ask again


RETRY = ("CONCURRENT_TRANSACTIONS",)


def _refusal(call: Callable[[], None]) -> str:
    """The reason ``call()`` is refused with, but for the retriable ones (raised)."""
    try:
        call()
    except grpc.RpcError as error:
        if reason_of(error) in RETRY:
            raise
        return reason_of(error)
    raise AssertionError("the call was answered")


def _init(sidecar: Sidecar, transactional_id: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    response = _retrying(
        lambda: _txns(sidecar).InitProducerId(
            pb.TransactionServiceInitProducerIdRequest(
                transactional_id=transactional_id, transaction_timeout_ms=timeout_ms
            )
        ),
        ("COORDINATOR_LOAD_IN_PROGRESS", "CONCURRENT_TRANSACTIONS"),
    )
    return response.producer_id, response.producer_epoch


def _add(sidecar: Sidecar, transactional_id: str, producer: tuple[int, int], *parts: int) -> None:
    _txns(sidecar).AddPartitionsToTxn(
        pb.AddPartitionsToTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer[0],
            producer_epoch=producer[1],
            partitions=[pb.TxnPartition(topic=TOPIC, partition=p) for p in parts],
        )
    )


def _end(sidecar: Sidecar, transactional_id: str, producer: tuple[int, int], commit: bool) -> None:
    _txns(sidecar).EndTxn(
        pb.EndTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer[0],
            producer_epoch=producer[1],
            committed=commit,
        )
    )


def _produce(
    sidecar: Sidecar, producer: tuple[int, int], partition: int, sequence: int, value: bytes
) -> None:
    batch = build_batch(
        [SimpleRecord(b"k", value, timestamp=int(time.time() * 1000))],
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=sequence,
        is_transactional=True,
    )
    sidecar.log.Produce(
        log_service_pb2.ProduceRequest(
            topic=TOPIC, partition=partition, acks=log_service_pb2.ACKS_ALL, record_batches=batch
        )
    )


def _markers(sidecar: Sidecar, partition: int) -> list[tuple[bool, int, int]]:
    """(committed, producer id, producer epoch) of each marker in the partition's log."""
    return [
        (marker.committed, marker.producer_id, marker.producer_epoch)
        for marker in markers(sidecar.data_dir / f"{TOPIC}-{partition}")
    ]


def _transaction_states(sidecar: Sidecar, transactional_id: str) -> list[TransactionState]:
    """The states ``__transaction_state`` recorded for the id, in log order."""
    partition = partition_for_transactional_id(transactional_id, 3)
    states = []
    partition_dir = sidecar.data_dir / f"{TRANSACTION_STATE_TOPIC}-{partition}"
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for header in iter_batches(data):
            for record in decode_records(data, header):
                decoded = decode_transaction_record(record.key, record.value)
                if decoded.key.transactional_id == transactional_id and decoded.value:
                    states.append(decoded.value.state)
    return states


@pytest.fixture
def txn_sidecar(sidecar_factory: SidecarFactory, tmp_path: Path) -> Sidecar:
    sidecar = sidecar_factory(tmp_path / "data", TXN_PARTITIONS)
    sidecar.create_topic(TOPIC, partitions=3)
    return sidecar


@pytest.mark.parametrize("commit", [True, False])
def test_ending_a_transaction_writes_a_marker_to_every_partition(
    txn_sidecar: Sidecar, commit: bool
) -> None:
    producer = _init(txn_sidecar, "app-1")
    assert producer[1] == 0
    _add(txn_sidecar, "app-1", producer, 0, 2)
    _produce(txn_sidecar, producer, 0, 0, b"a")
    _produce(txn_sidecar, producer, 2, 0, b"b")
    _end(txn_sidecar, "app-1", producer, commit)
    assert _markers(txn_sidecar, 0) == [(commit, *producer)]
    assert _markers(txn_sidecar, 2) == [(commit, *producer)]
    assert _markers(txn_sidecar, 1) == []
    prepared, completed = (
        (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
        if commit
        else (TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT)
    )
    assert _transaction_states(txn_sidecar, "app-1") == [
        TransactionState.EMPTY,
        TransactionState.ONGOING,
        prepared,
        completed,
    ]
    # the same EndTxn again (a retry) is answered and writes nothing more
    _end(txn_sidecar, "app-1", producer, commit)
    assert len(_markers(txn_sidecar, 0)) == 1


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction(
    txn_sidecar: Sidecar,
) -> None:
    old = _init(txn_sidecar, "app-1")
    _add(txn_sidecar, "app-1", old, 1)
    _produce(txn_sidecar, old, 1, 0, b"zombie")
    new = _init(txn_sidecar, "app-1")
    assert new[0] == old[0] and new[1] > old[1]
    assert _markers(txn_sidecar, 1) == [(False, old[0], old[1] + 1)]
    assert _refusal(lambda: _add(txn_sidecar, "app-1", old, 0)) == "PRODUCER_FENCED"
    assert _refusal(lambda: _end(txn_sidecar, "app-1", old, True)) == "PRODUCER_FENCED"
    # the zombie's writes to the partition are refused by epoch
    with pytest.raises(grpc.RpcError) as refused:
        _produce(txn_sidecar, old, 1, 1, b"late")
    assert reason_of(refused.value) == "INVALID_PRODUCER_EPOCH"
    # and the new producer goes on
    _add(txn_sidecar, "app-1", new, 1)
    _produce(txn_sidecar, new, 1, 0, b"fresh")
    _end(txn_sidecar, "app-1", new, True)
    assert _markers(txn_sidecar, 1)[-1] == (True, *new)


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(
        tmp_path / "data",
        TXN_PARTITIONS,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=100",
    )
    sidecar.create_topic(TOPIC, partitions=3)
    producer = _init(sidecar, "slow", timeout_ms=500)
    _add(sidecar, "slow", producer, 0)
    _produce(sidecar, producer, 0, 0, b"never committed")
    deadline = time.monotonic() + 20
    while not _markers(sidecar, 0):
        assert time.monotonic() < deadline, "the timed-out transaction was never aborted"
        time.sleep(0.05)  # the coordinator's timeout check runs every 100 ms
    assert _markers(sidecar, 0) == [(False, producer[0], producer[1] + 1)]
    assert _retrying(lambda: _refusal(lambda: _end(sidecar, "slow", producer, True)), RETRY) == (
        "PRODUCER_FENCED"
    )


def test_find_coordinator_names_the_transaction_coordinator(txn_sidecar: Sidecar) -> None:
    found = group_service_pb2_grpc.GroupServiceStub(txn_sidecar.channel).FindCoordinator(
        group_service_pb2.FindCoordinatorRequest(
            key="app-1", key_type=group_service_pb2.COORDINATOR_TYPE_TRANSACTION
        )
    )
    assert found.address == txn_sidecar.address
    assert (txn_sidecar.data_dir / f"{TRANSACTION_STATE_TOPIC}-0").is_dir()


@pytest.mark.parametrize(
    ("timeout_ms", "reason"),
    [(0, "INVALID_TRANSACTION_TIMEOUT"), (900_001, "INVALID_TRANSACTION_TIMEOUT")],
)
def test_a_timeout_out_of_range_is_refused(
    txn_sidecar: Sidecar, timeout_ms: int, reason: str
) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        _txns(txn_sidecar).InitProducerId(
            pb.TransactionServiceInitProducerIdRequest(
                transactional_id="t", transaction_timeout_ms=timeout_ms
            )
        )
    assert reason_of(refused.value) == reason


def test_calls_out_of_turn_get_kafkas_errors(txn_sidecar: Sidecar) -> None:
    producer = _init(txn_sidecar, "app-1")
    cases: list[tuple[Callable[[], None], str]] = [
        (lambda: _add(txn_sidecar, "nobody", producer, 0), "INVALID_PRODUCER_ID_MAPPING"),
        (
            lambda: _add(txn_sidecar, "app-1", (producer[0] + 1, 0), 0),
            "INVALID_PRODUCER_ID_MAPPING",
        ),
        (lambda: _end(txn_sidecar, "app-1", producer, True), "INVALID_TXN_STATE"),
        (lambda: _add(txn_sidecar, "", producer, 0), "INVALID_REQUEST"),
    ]
    for call, reason in cases:
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert reason_of(refused.value) == reason
    with pytest.raises(grpc.RpcError) as refused:
        _txns(txn_sidecar).AddPartitionsToTxn(
            pb.AddPartitionsToTxnRequest(
                transactional_id="app-1",
                producer_id=producer[0],
                producer_epoch=producer[1],
                partitions=[pb.TxnPartition(topic="nope", partition=0)],
            )
        )
    assert reason_of(refused.value) == "UNKNOWN_TOPIC_OR_PARTITION"
    # a client cannot write the coordinator's topic
    with pytest.raises(grpc.RpcError) as refused:
        txn_sidecar.log.Produce(
            log_service_pb2.ProduceRequest(
                topic=TRANSACTION_STATE_TOPIC,
                partition=0,
                record_batches=build_batch([SimpleRecord(b"k", b"x", timestamp=0)]),
            )
        )
    assert reason_of(refused.value) == "INVALID_TOPIC_EXCEPTION"


def test_a_coordinator_killed_after_prepare_completes_the_transaction_on_restart(
    txn_sidecar: Sidecar,
) -> None:
    producer = _init(txn_sidecar, "app-1")
    _add(txn_sidecar, "app-1", producer, 0, 1)
    _produce(txn_sidecar, producer, 0, 0, b"a")
    _produce(txn_sidecar, producer, 1, 0, b"b")
    txn_sidecar.kill()  # mid-transaction: Ongoing in __transaction_state
    txn_sidecar.start()
    # the restarted coordinator knows the producer and its open transaction
    _retrying(lambda: _add(txn_sidecar, "app-1", producer, 2), ("COORDINATOR_LOAD_IN_PROGRESS",))
    _end(txn_sidecar, "app-1", producer, True)
    assert [_markers(txn_sidecar, p) for p in range(3)] == [[(True, *producer)]] * 3


def test_a_transaction_prepared_before_a_crash_is_completed_by_the_next_coordinator(
    txn_sidecar: Sidecar,
) -> None:
    producer = _init(txn_sidecar, "app-1")
    _add(txn_sidecar, "app-1", producer, 0, 2)
    _produce(txn_sidecar, producer, 0, 0, b"a")
    _produce(txn_sidecar, producer, 2, 0, b"b")
    txn_sidecar.kill()
    # The crash came right after PrepareCommit was written: append it as the coordinator
    # did, to the log the killed sidecar left.
    partition = partition_for_transactional_id("app-1", 3)
    state_log = Log.open(
        txn_sidecar.data_dir / f"{TRANSACTION_STATE_TOPIC}-{partition}",
        LogConfig.from_properties({"cleanup.policy": "compact"}),
    )
    try:
        ongoing = None
        for record in log_records(state_log, state_log.log_end_offset):
            ongoing = decode_transaction_record(record.key, record.value).value
        assert ongoing is not None and ongoing.state is TransactionState.ONGOING
        prepared = dataclasses.replace(ongoing, state=TransactionState.PREPARE_COMMIT)
        written = TransactionLogRecord(TransactionLogKey("app-1"), prepared)
        state_log.append(build_batch([SimpleRecord(*encode_transaction_record(written), 0)]))
    finally:
        state_log.close()
    txn_sidecar.start()
    deadline = time.monotonic() + 20
    while _transaction_states(txn_sidecar, "app-1")[-1] is not TransactionState.COMPLETE_COMMIT:
        assert time.monotonic() < deadline, "the prepared transaction was never completed"
        time.sleep(0.05)  # the coordinator completes it once its partition is loaded
    assert [_markers(txn_sidecar, p) for p in range(3)] == [
        [(True, *producer)],
        [],
        [(True, *producer)],
    ]


def test_describe_transactions_tells_the_ids_state(txn_sidecar: Sidecar) -> None:
    producer = _init(txn_sidecar, "app-1", timeout_ms=30_000)

    def describe() -> pb.DescribeTransactionsResponse:
        request = pb.DescribeTransactionsRequest(transactional_id="app-1")
        response: pb.DescribeTransactionsResponse = _txns(txn_sidecar).DescribeTransactions(request)
        return response

    empty = describe()
    assert (empty.state, empty.producer_id, empty.producer_epoch) == ("Empty", *producer)
    assert (empty.transaction_timeout_ms, empty.transaction_start_time_ms) == (30_000, -1)
    _add(txn_sidecar, "app-1", producer, 2, 0)
    ongoing = describe()
    assert ongoing.state == "Ongoing" and ongoing.transaction_start_time_ms > 0
    assert [(p.topic, p.partition) for p in ongoing.partitions] == [(TOPIC, 0), (TOPIC, 2)]
    _end(txn_sidecar, "app-1", producer, False)
    assert describe().state == "CompleteAbort"
    with pytest.raises(grpc.RpcError) as refused:
        _txns(txn_sidecar).DescribeTransactions(
            pb.DescribeTransactionsRequest(transactional_id="nobody")
        )
    assert reason_of(refused.value) == "TRANSACTIONAL_ID_NOT_FOUND"


def test_write_txn_markers_appends_one_marker_and_nothing_else(txn_sidecar: Sidecar) -> None:
    producer = _init(txn_sidecar, "app-1")
    _add(txn_sidecar, "app-1", producer, 1)
    _produce(txn_sidecar, producer, 1, 0, b"a")
    marker = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.ABORT, 0),
        producer_id=producer[0],
        producer_epoch=producer[1],
        timestamp_ms=0,
    )
    _txns(txn_sidecar).WriteTxnMarkers(
        pb.WriteTxnMarkersRequest(topic=TOPIC, partition=1, marker_batch=marker)
    )
    assert _markers(txn_sidecar, 1) == [(False, *producer)]
    data = build_batch([SimpleRecord(b"k", b"not a marker", timestamp=0)])
    for batches in (data, marker + marker):
        with pytest.raises(grpc.RpcError) as refused:
            _txns(txn_sidecar).WriteTxnMarkers(
                pb.WriteTxnMarkersRequest(topic=TOPIC, partition=1, marker_batch=batches)
            )
        assert reason_of(refused.value) == "INVALID_REQUEST"
    assert _markers(txn_sidecar, 1) == [(False, *producer)]
