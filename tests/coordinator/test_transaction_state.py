"""A transactional id's transitions, as pure functions: what each call writes next, and
Kafka's error for each call out of turn. (The coordinator that writes them runs in a
real sidecar in tests/sidecar/test_transaction_service.py.)"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from tierlog.api.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    ProducerFencedError,
)
from tierlog.coordinator.transaction_records import (
    TransactionLogValue,
    TransactionPartitions,
    TransactionState,
)
from tierlog.coordinator.transaction_state import (
    MAX_PRODUCER_EPOCH,
    add_partitions,
    check_partition_in_transaction,
    complete,
    end_transaction,
    fence_and_abort,
    grouped,
    init_producer,
    is_retried_rollover,
    partitions_of,
)
from tierlog.storage.errors import InvalidProducerEpochError, InvalidTxnStateError
from tierlog.storage.topic_partition import TopicPartition

A, B, C = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
NOW = 1_000


def _ids() -> itertools.count[int]:
    return itertools.count(100)


def _new() -> TransactionLogValue:
    return init_producer("t", None, 60_000, NOW, _ids().__next__)


def test_a_new_id_gets_a_new_producer_at_epoch_0_and_is_empty() -> None:
    value = _new()
    assert (value.producer_id, value.producer_epoch, value.state) == (
        100,
        0,
        TransactionState.EMPTY,
    )
    assert value.partitions is None and value.start_timestamp_ms == -1


def test_the_next_producer_of_an_id_is_the_same_id_at_the_next_epoch() -> None:
    again = init_producer("t", _new(), 30_000, NOW + 1, _ids().__next__)
    assert (again.producer_id, again.producer_epoch, again.transaction_timeout_ms) == (
        100,
        1,
        30_000,
    )


def test_an_exhausted_epoch_gets_a_fresh_producer_id_remembering_the_old_one() -> None:
    worn = dataclasses.replace(_new(), producer_epoch=MAX_PRODUCER_EPOCH - 1)
    ids = itertools.count(200)
    fresh = init_producer("t", worn, 60_000, NOW, ids.__next__)
    assert (fresh.producer_id, fresh.producer_epoch, fresh.previous_producer_id) == (200, 0, 100)


def test_kip_360_lets_the_current_producer_and_a_retried_rollover_through_and_fences_others() -> (
    None
):
    current = _new()  # producer 100 at epoch 0
    worn = dataclasses.replace(current, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    rolled = init_producer("t", worn, 60_000, NOW, itertools.count(200).__next__)

    assert not is_retried_rollover("t", current, -1, -1)  # nothing named: a plain bump
    assert not is_retried_rollover("t", None, 100, 3)  # a new id: a new producer
    assert not is_retried_rollover("t", current, 100, 0)  # the current one: bumped
    assert is_retried_rollover("t", rolled, 100, MAX_PRODUCER_EPOCH - 1)
    for stale in ((100, 1), (99, 0), (100, 0)):
        against = rolled if stale == (100, 0) else current
        with pytest.raises(ProducerFencedError):
            is_retried_rollover("t", against, *stale)


def test_a_batch_may_open_a_transaction_only_on_a_partition_added_to_it() -> None:
    ongoing = add_partitions("t", _new(), 100, 0, [A], NOW)
    assert ongoing is not None
    prepared = end_transaction("t", ongoing, 100, 0, True, NOW)

    check_partition_in_transaction("t", ongoing, 100, 0, A)  # added: let through
    refusals = [
        (ongoing, 100, 0, B, InvalidTxnStateError),  # not added
        (_new(), 100, 0, A, InvalidTxnStateError),  # no transaction open
        (None, 100, 0, A, InvalidProducerIdMappingError),
        (ongoing, 101, 0, A, InvalidProducerIdMappingError),
        (ongoing, 100, 1, A, InvalidProducerEpochError),
        (prepared, 100, 0, A, ConcurrentTransactionsError),
    ]
    for value, producer_id, epoch, tp, refusal in refusals:
        with pytest.raises(refusal):
            check_partition_in_transaction("t", value, producer_id, epoch, tp)


def test_a_transaction_begins_with_its_first_partitions_and_grows() -> None:
    ongoing = add_partitions("t", _new(), 100, 0, [A], NOW + 5)
    assert ongoing is not None
    assert ongoing.state is TransactionState.ONGOING and ongoing.start_timestamp_ms == NOW + 5
    grown = add_partitions("t", ongoing, 100, 0, [C, B], NOW + 9)
    assert grown is not None and partitions_of(grown) == {A, B, C}
    assert grown.start_timestamp_ms == NOW + 5
    assert grown.partitions == (
        TransactionPartitions("a", (0, 1)),
        TransactionPartitions("b", (0,)),
    )
    assert add_partitions("t", grown, 100, 0, [A], NOW + 10) is None  # nothing new to write


@pytest.mark.parametrize("commit", [True, False])
def test_ending_prepares_then_completes_and_a_retry_writes_nothing(commit: bool) -> None:
    ongoing = add_partitions("t", _new(), 100, 0, [A], NOW)
    prepared = end_transaction("t", ongoing, 100, 0, commit, NOW + 1)
    assert prepared is not None
    assert prepared.state is (
        TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
    )
    with pytest.raises(ConcurrentTransactionsError):
        end_transaction("t", prepared, 100, 0, commit, NOW + 2)
    done = complete(prepared, NOW + 3)
    assert done.state is (
        TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
    )
    assert done.partitions == ()
    assert end_transaction("t", done, 100, 0, commit, NOW + 4) is None
    with pytest.raises(InvalidTxnStateError):
        end_transaction("t", done, 100, 0, not commit, NOW + 4)
    assert add_partitions("t", done, 100, 0, [B], NOW + 5) is not None  # the next one


def test_fencing_aborts_at_the_next_epoch() -> None:
    ongoing = add_partitions("t", _new(), 100, 0, [A], NOW)
    assert ongoing is not None
    fenced = fence_and_abort(ongoing, NOW + 1)
    assert (fenced.state, fenced.producer_epoch) == (TransactionState.PREPARE_ABORT, 1)
    with pytest.raises(InvalidTxnStateError):
        fence_and_abort(fenced, NOW + 2)


def test_calls_out_of_turn_get_kafkas_errors() -> None:
    empty = _new()
    with pytest.raises(InvalidProducerIdMappingError):
        add_partitions("t", None, 100, 0, [A], NOW)
    with pytest.raises(InvalidProducerIdMappingError):
        add_partitions("t", empty, 101, 0, [A], NOW)
    with pytest.raises(ProducerFencedError):
        add_partitions("t", empty, 100, 1, [A], NOW)
    with pytest.raises(InvalidTxnStateError):
        end_transaction("t", empty, 100, 0, True, NOW)
    ongoing = add_partitions("t", empty, 100, 0, [A], NOW)
    with pytest.raises(ConcurrentTransactionsError):
        init_producer("t", ongoing, 60_000, NOW, _ids().__next__)
    with pytest.raises(InvalidTxnStateError):
        complete(empty, NOW)


def test_grouping_is_by_topic_in_order_without_duplicates() -> None:
    assert grouped([C, B, A, A]) == (
        TransactionPartitions("a", (0, 1)),
        TransactionPartitions("b", (0,)),
    )
