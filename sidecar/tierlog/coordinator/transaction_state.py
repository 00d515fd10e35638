"""The transactions one ``__transaction_state`` partition holds, and their transitions.

The log is the truth: replaying the partition gives the latest ``TransactionLogValue``
per transactional id (a tombstone forgets it), as compaction also keeps. Every change a
call asks for is computed here, as a pure function of the current value and the call,
into the next value to write (or None: nothing to write), or refused with Kafka's error:

    (none) --init--> Empty --add partitions--> Ongoing --end--> PrepareCommit|PrepareAbort
    Prepare* --markers written--> CompleteCommit|CompleteAbort --init/add--> ...
    Ongoing --init by a new producer, or its timeout--> PrepareAbort at epoch + 1 (fenced)

Fencing is a comparison of epochs: a call with another producer id than the id's is
INVALID_PRODUCER_ID_MAPPING, with another epoch PRODUCER_FENCED. A call meeting a
transaction still being completed is CONCURRENT_TRANSACTIONS (retriable). A producer id
whose epoch would run out gets a fresh producer id at epoch 0, the old one remembered
as the previous producer id, as Kafka does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from itertools import groupby

from tierlog.api.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    ProducerFencedError,
)
from tierlog.coordinator.errors import UnknownRecordTypeError
from tierlog.coordinator.loader import log_records
from tierlog.coordinator.transaction_records import (
    NO_PRODUCER_ID,
    TransactionLogRecord,
    TransactionLogValue,
    TransactionPartitions,
    TransactionState,
    decode_transaction_record,
)
from tierlog.storage.errors import InvalidProducerEpochError, InvalidTxnStateError
from tierlog.storage.log import Log
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "MAX_PRODUCER_EPOCH",
    "TransactionsState",
    "add_partitions",
    "check_partition_in_transaction",
    "complete",
    "end_transaction",
    "fence_and_abort",
    "grouped",
    "init_producer",
    "is_retried_rollover",
    "load_transactions",
    "partitions_of",
]

MAX_PRODUCER_EPOCH = 2**15 - 1
NO_START = -1
PREPARED = (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
_COMPLETED = {
    TransactionState.PREPARE_COMMIT: TransactionState.COMPLETE_COMMIT,
    TransactionState.PREPARE_ABORT: TransactionState.COMPLETE_ABORT,
}


class TransactionsState:
    """The latest value of each transactional id of one partition."""

    def __init__(self) -> None:
        self._values: dict[str, TransactionLogValue] = {}

    def get(self, transactional_id: str) -> TransactionLogValue | None:
        return self._values.get(transactional_id)

    def items(self) -> Iterator[tuple[str, TransactionLogValue]]:
        return iter(list(self._values.items()))

    def replay(self, record: TransactionLogRecord) -> None:
        if record.value is None:
            self._values.pop(record.key.transactional_id, None)
        else:
            self._values[record.key.transactional_id] = record.value


def load_transactions(partition_log: Log, end_offset: int) -> TransactionsState:
    """The state of the log's records below ``end_offset`` (blocking)."""
    state = TransactionsState()
    for record in log_records(partition_log, end_offset):
        try:
            state.replay(decode_transaction_record(record.key, record.value))
        except UnknownRecordTypeError:
            continue  # another version's key, as Kafka's loader skips it
    return state


def partitions_of(value: TransactionLogValue) -> set[TopicPartition]:
    return {
        TopicPartition(topic.topic, partition)
        for topic in value.partitions or ()
        for partition in topic.partition_ids
    }


def grouped(tps: Iterable[TopicPartition]) -> tuple[TransactionPartitions, ...]:
    """Partitions grouped by topic, as the record holds them."""
    ordered = sorted(set(tps))
    return tuple(
        TransactionPartitions(topic, tuple(tp.partition for tp in tps_of_topic))
        for topic, tps_of_topic in groupby(ordered, key=lambda tp: tp.topic)
    )


def _check_producer(
    transactional_id: str, value: TransactionLogValue | None, producer_id: int, epoch: int
) -> TransactionLogValue:
    if value is None or value.producer_id != producer_id:
        raise InvalidProducerIdMappingError(
            f"transactional id {transactional_id!r} is not producer {producer_id}: "
            "call InitProducerId"
        )
    if epoch != value.producer_epoch:
        raise ProducerFencedError(
            f"producer {producer_id} of {transactional_id!r} is at epoch "
            f"{value.producer_epoch}, not {epoch}: a newer producer fenced it"
        )
    if value.state in PREPARED:
        raise ConcurrentTransactionsError(
            f"{transactional_id!r}: the previous transaction is being completed; retry"
        )
    return value


def is_retried_rollover(
    transactional_id: str, value: TransactionLogValue | None, producer_id: int, epoch: int
) -> bool:
    """KIP-360: an InitProducerId naming the producer's id and epoch (``producer_id`` -1:
    none named) is let through when it names the id's current producer at its current
    epoch (the epoch is bumped) or when the id is new; it is True when it names the
    producer id a rollover replaced at an exhausted epoch (the call is the retry of that
    rollover: the current id and epoch are its answer). Anything else is a producer a
    newer one fenced: PRODUCER_FENCED. Kafka also takes a retry of a plain bump by the
    epoch before it, which it keeps in memory only; that retry is fenced here."""
    if producer_id < 0 or value is None:
        return False
    if producer_id == value.producer_id and epoch == value.producer_epoch:
        return False
    if producer_id == value.previous_producer_id and epoch >= MAX_PRODUCER_EPOCH - 1:
        return True
    raise ProducerFencedError(
        f"producer {producer_id} epoch {epoch} of {transactional_id!r} is not its current "
        f"producer ({value.producer_id} epoch {value.producer_epoch}): a newer one fenced it"
    )


def init_producer(
    transactional_id: str,
    value: TransactionLogValue | None,
    timeout_ms: int,
    now_ms: int,
    new_producer_id: Callable[[], int],
) -> TransactionLogValue:
    """The Empty value a producer (new, or the next of the id) starts from. An ongoing
    transaction must be aborted first (``fence_and_abort``)."""
    if value is None:
        return TransactionLogValue(
            producer_id=new_producer_id(),
            producer_epoch=0,
            transaction_timeout_ms=timeout_ms,
            state=TransactionState.EMPTY,
            partitions=None,
            last_update_timestamp_ms=now_ms,
            start_timestamp_ms=NO_START,
        )
    if value.state in (*PREPARED, TransactionState.ONGOING):
        raise ConcurrentTransactionsError(
            f"{transactional_id!r}: its transaction is being completed; retry"
        )
    producer_id, previous, epoch = (
        value.producer_id,
        value.previous_producer_id,
        value.producer_epoch + 1,
    )
    if epoch >= MAX_PRODUCER_EPOCH:  # exhausted: a fresh id, as Kafka's coordinator does
        producer_id, previous, epoch = new_producer_id(), value.producer_id, 0
    return dataclasses.replace(
        value,
        producer_id=producer_id,
        previous_producer_id=previous,
        next_producer_id=NO_PRODUCER_ID,
        producer_epoch=epoch,
        transaction_timeout_ms=timeout_ms,
        state=TransactionState.EMPTY,
        partitions=None,
        last_update_timestamp_ms=now_ms,
        start_timestamp_ms=NO_START,
    )


def add_partitions(
    transactional_id: str,
    value: TransactionLogValue | None,
    producer_id: int,
    epoch: int,
    tps: Iterable[TopicPartition],
    now_ms: int,
) -> TransactionLogValue | None:
    """The Ongoing value holding ``tps`` too (None: it already holds them all)."""
    value = _check_producer(transactional_id, value, producer_id, epoch)
    if value.state not in (
        TransactionState.EMPTY,
        TransactionState.ONGOING,
        TransactionState.COMPLETE_COMMIT,
        TransactionState.COMPLETE_ABORT,
    ):
        raise InvalidTxnStateError(f"{transactional_id!r} is {value.state.name}")
    ongoing = value.state is TransactionState.ONGOING
    held = partitions_of(value) if ongoing else set()
    wanted = held | set(tps)
    if ongoing and wanted == held:
        return None
    return dataclasses.replace(
        value,
        state=TransactionState.ONGOING,
        partitions=grouped(wanted),
        last_update_timestamp_ms=now_ms,
        start_timestamp_ms=value.start_timestamp_ms if ongoing else now_ms,
    )


def end_transaction(
    transactional_id: str,
    value: TransactionLogValue | None,
    producer_id: int,
    epoch: int,
    commit: bool,
    now_ms: int,
) -> TransactionLogValue | None:
    """The PrepareCommit or PrepareAbort value (None: the transaction already ended so,
    an EndTxn sent again)."""
    value = _check_producer(transactional_id, value, producer_id, epoch)
    done = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
    if value.state is done:
        return None
    if value.state is not TransactionState.ONGOING:
        verb = "commit" if commit else "abort"
        raise InvalidTxnStateError(
            f"cannot {verb} the transaction of {transactional_id!r}: it is {value.state.name}"
        )
    prepared = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
    return dataclasses.replace(value, state=prepared, last_update_timestamp_ms=now_ms)


def check_partition_in_transaction(
    transactional_id: str,
    value: TransactionLogValue | None,
    producer_id: int,
    epoch: int,
    tp: TopicPartition,
) -> None:
    """A transactional batch may start the producer's transaction on ``tp`` only if
    ``tp`` was added to its ongoing transaction (Kafka's verification, KIP-890): else no
    marker would ever end what it starts there. Refused as a produce is: another
    producer id INVALID_PRODUCER_ID_MAPPING, another epoch INVALID_PRODUCER_EPOCH, a
    transaction being completed CONCURRENT_TRANSACTIONS, a partition not in the
    transaction INVALID_TXN_STATE."""
    if value is None or value.producer_id != producer_id:
        raise InvalidProducerIdMappingError(
            f"transactional id {transactional_id!r} is not producer {producer_id}"
        )
    if epoch != value.producer_epoch:
        raise InvalidProducerEpochError(
            f"producer {producer_id} of {transactional_id!r} is at epoch "
            f"{value.producer_epoch}, not {epoch}"
        )
    if value.state in PREPARED:
        raise ConcurrentTransactionsError(
            f"{transactional_id!r}: its transaction is being completed"
        )
    if value.state is not TransactionState.ONGOING or tp not in partitions_of(value):
        raise InvalidTxnStateError(
            f"{tp} is not in the transaction of {transactional_id!r}: call "
            "AddPartitionsToTxn before producing to it"
        )


def fence_and_abort(value: TransactionLogValue, now_ms: int) -> TransactionLogValue:
    """An Ongoing transaction aborted over its producer's head (a new producer of its id,
    or its timeout): PrepareAbort at the next epoch, which fences the old producer out
    of every partition the abort markers reach."""
    if value.state is not TransactionState.ONGOING:
        raise InvalidTxnStateError(f"only an ongoing transaction is fenced, not {value.state.name}")
    epoch = min(value.producer_epoch + 1, MAX_PRODUCER_EPOCH)
    return dataclasses.replace(
        value,
        producer_epoch=epoch,
        state=TransactionState.PREPARE_ABORT,
        last_update_timestamp_ms=now_ms,
    )


def complete(value: TransactionLogValue, now_ms: int) -> TransactionLogValue:
    """CompleteCommit or CompleteAbort, once every partition has its marker."""
    if value.state not in _COMPLETED:
        raise InvalidTxnStateError(f"only a prepared transaction completes, not {value.state.name}")
    return dataclasses.replace(
        value, state=_COMPLETED[value.state], partitions=(), last_update_timestamp_ms=now_ms
    )
