"""The transactional producer's side of KIP-98 (Kafka's client ``TransactionManager``).

A producer with a ``transactional.id`` gets its producer id and epoch from the id's
transaction coordinator (``init_transactions``: InitProducerId, which fences any older
producer of the id and aborts its open transaction), then runs one transaction at a
time: ``begin`` opens it locally; before the first batch for a partition is sent, the
sender adds the partition to the transaction (AddPartitionsToTxn); ``send_offsets``
adds a consumer group's offsets to it (AddOffsetsToTxn to the transaction coordinator,
then TxnOffsetCommit to the group's coordinator, with the consumer's member id and
epoch so a zombie consumer's offsets are refused, KIP-447); ``commit`` flushes,
then ends it (EndTxn, answered once every partition has its marker); ``abort`` fails
what is still queued if the transaction failed, flushes and ends it aborted, then, if a
failure left a gap in a partition's sequences, takes the next epoch from the
coordinator (InitProducerId again) to start them over. Every batch it sends has the
transactional bit set.

Errors are Kafka's two kinds. *Fatal*: the producer was fenced (``PRODUCER_FENCED``,
or ``INVALID_PRODUCER_EPOCH`` from a partition whose markers carry a newer epoch) or
its id is no longer its own: every later call raises ``ProducerFencedError`` (or the
error) and the producer must be closed, as with confluent-kafka's and kafka-python's
fencing. *Abortable*: a batch of the transaction failed, or a partition could not be
added: ``commit`` raises it and the transaction must be aborted; the producer then
goes on.

State lives under the producer's lock; the coordinator calls are made outside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import TypeVar

from tierlog.api.errors import ProducerFencedError
from tierlog.api.v1 import group_service_pb2, transaction_service_pb2, transaction_service_pb2_grpc
from tierlog.client.cluster import Cluster
from tierlog.client.config import ProducerConfig
from tierlog.client.coordinator_client import CoordinatorClient
from tierlog.client.errors import IllegalProducerStateError, TierlogError, reason_of
from tierlog.client.groups import ConsumerGroupMetadata, GroupClient, OffsetAndMetadata
from tierlog.client.idempotence import IdempotenceManager
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["FATAL_REASONS", "TransactionManager", "TransactionState"]

_T = TypeVar("_T")
_Stub = transaction_service_pb2_grpc.TransactionServiceStub

# Reasons after which this producer can no longer run transactions: it must be closed.
FATAL_REASONS = frozenset(
    {
        "PRODUCER_FENCED",
        "INVALID_PRODUCER_EPOCH",
        "INVALID_PRODUCER_ID_MAPPING",
        "TRANSACTIONAL_ID_NOT_FOUND",
    }
)
_FENCED = frozenset({"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})


class TransactionState(Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


def _fatal(error: TierlogError) -> TierlogError:
    """Fencing in Kafka's name, whatever reason said it."""
    if reason_of(error) in _FENCED and not isinstance(error, ProducerFencedError):
        return ProducerFencedError(f"this producer was fenced by a newer one: {error}")
    return error


class TransactionManager:
    """One transactional producer's transactions; see the module docstring."""

    def __init__(
        self,
        config: ProducerConfig,
        cluster: Cluster,
        idempotence: IdempotenceManager,
        lock: threading.Condition,
    ) -> None:
        self.transactional_id = config.transactional_id
        self.timeout_ms = config.transaction_timeout_ms
        self.idempotence = idempotence
        self.lock = lock
        self._calls = CoordinatorClient(
            cluster,
            config.transactional_id,
            group_service_pb2.COORDINATOR_TYPE_TRANSACTION,
            timeout_ms=config.max_block_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            wait_reasons=("CONCURRENT_TRANSACTIONS",),
        )
        self.request_timeout_s = config.request_timeout_ms / 1000
        self.cluster = cluster
        self.config = config
        self._group_clients: dict[str, GroupClient] = {}
        self.state = TransactionState.UNINITIALIZED
        self._added: set[TopicPartition] = set()
        self._offsets_added = False  # a group's offsets are in the transaction
        self._error: TierlogError | None = None  # the abortable or fatal error

    # -- the user's calls (not under the lock) ------------------------------------------

    def init(self) -> None:
        with self.lock:
            self._check_not_fatal()
            if self.state is not TransactionState.UNINITIALIZED:
                raise IllegalProducerStateError("init_transactions was called already")
        self._init_producer_id()
        with self.lock:
            self.state = TransactionState.READY

    def _init_producer_id(self) -> None:
        """InitProducerId: the id's next epoch (fencing older producers), every
        partition's sequences from 0 (as KIP-360's bump after an aborted transaction)."""
        request = transaction_service_pb2.TransactionServiceInitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=self.timeout_ms
        )
        response = self._call(lambda stub: stub.InitProducerId(request, timeout=self._timeout()))
        with self.lock:
            self.idempotence.set_producer_id_and_epoch(
                response.producer_id, response.producer_epoch
            )
            self.lock.notify_all()

    def begin(self) -> None:
        with self.lock:
            self._check_not_fatal()
            if self.state is not TransactionState.READY:
                raise IllegalProducerStateError(
                    f"begin_transaction needs a ready producer, not one {self.state.value}"
                )
            self.state = TransactionState.IN_TRANSACTION
            self._added.clear()
            self._offsets_added = False
            self._error = None

    def check_can_send(self) -> None:
        """``send`` is allowed only inside a transaction (the lock is held)."""
        self._check_not_fatal()
        if self.state is TransactionState.ABORTABLE_ERROR:
            assert self._error is not None
            raise self._error
        if self.state is not TransactionState.IN_TRANSACTION:
            raise IllegalProducerStateError(
                "a transactional producer sends only inside a transaction: begin_transaction()"
            )

    def before_commit(self) -> None:
        with self.lock:
            self._check_not_fatal()
            if self.state is TransactionState.ABORTABLE_ERROR:
                assert self._error is not None
                raise self._error
            if self.state is not TransactionState.IN_TRANSACTION:
                raise IllegalProducerStateError(f"no transaction to commit ({self.state.value})")

    def before_abort(self) -> TierlogError | None:
        """Checks an abort may go on; the transaction's abortable error, if any."""
        with self.lock:
            self._check_not_fatal()
            if self.state not in (
                TransactionState.IN_TRANSACTION,
                TransactionState.ABORTABLE_ERROR,
            ):
                raise IllegalProducerStateError(f"no transaction to abort ({self.state.value})")
            return self._error

    def end(self, *, commit: bool) -> None:
        """EndTxn, once the transaction's batches are all answered (the producer flushed)."""
        with self.lock:
            self._check_not_fatal()
            if commit and self._error is not None:
                self.state = TransactionState.ABORTABLE_ERROR
                raise self._error
            added = bool(self._added) or self._offsets_added
            pid_epoch = self.idempotence.producer_id_and_epoch
        if added:  # a transaction that wrote nothing has nothing to end at the coordinator
            request = transaction_service_pb2.EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=pid_epoch.producer_id,
                producer_epoch=pid_epoch.epoch,
                committed=commit,
            )
            self._call(lambda stub: stub.EndTxn(request, timeout=self._timeout()))
        with self.lock:
            needs_new_epoch = self.idempotence.epoch_bump_required
        if needs_new_epoch:  # a gap in some partition's sequences: start them again
            self._init_producer_id()
        with self.lock:
            self.state = TransactionState.READY
            self._added.clear()
            self._offsets_added = False
            self._error = None

    def send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata,
    ) -> None:
        """The consumer's offsets committed with the transaction: AddOffsetsToTxn, then
        TxnOffsetCommit (its refusal is the transaction's abortable error, or fatal)."""
        with self.lock:
            self.check_can_send()
            pid_epoch = self.idempotence.producer_id_and_epoch
        if not offsets:
            return
        request = transaction_service_pb2.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=pid_epoch.producer_id,
            producer_epoch=pid_epoch.epoch,
            group_id=group_metadata.group_id,
        )
        self._call(lambda stub: stub.AddOffsetsToTxn(request, timeout=self._timeout()))
        with self.lock:
            self._offsets_added = True
        try:
            self._group_client(group_metadata.group_id).commit_transactional(
                offsets,
                group_metadata,
                self.transactional_id,
                pid_epoch.producer_id,
                pid_epoch.epoch,
            )
        except TierlogError as error:
            with self.lock:
                self._record(error)
            raise _fatal(error) from None

    def _group_client(self, group_id: str) -> GroupClient:
        client = self._group_clients.get(group_id)
        if client is None:
            client = self._group_clients[group_id] = GroupClient(
                self.cluster,
                group_id,
                timeout_ms=self.config.max_block_ms,
                retry_backoff_ms=self.config.retry_backoff_ms,
                retry_backoff_max_ms=self.config.retry_backoff_max_ms,
            )
        return client

    # -- the sender's (not under the lock) ----------------------------------------------

    def add_partitions(
        self, ready: Iterable[TopicPartition]
    ) -> tuple[frozenset[TopicPartition], dict[TopicPartition, TierlogError]]:
        """Of the partitions with batches ready: those that may be sent (in the
        transaction), and those refused with the error to fail their batches with."""
        ready = set(ready)
        with self.lock:
            error = self._error
            new = ready - self._added
            pid_epoch = self.idempotence.producer_id_and_epoch
        if error is not None:
            return frozenset(ready - new), dict.fromkeys(new, error)
        if not new:
            return frozenset(ready), {}
        request = transaction_service_pb2.AddPartitionsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=pid_epoch.producer_id,
            producer_epoch=pid_epoch.epoch,
            partitions=[
                transaction_service_pb2.TxnPartition(topic=tp.topic, partition=tp.partition)
                for tp in sorted(new)
            ],
        )
        try:
            self._call(lambda stub: stub.AddPartitionsToTxn(request, timeout=self._timeout()))
        except TierlogError as refused:
            return frozenset(ready - new), dict.fromkeys(new, refused)  # recorded by _call
        with self.lock:
            self._added |= new
        return frozenset(ready), {}

    def on_batch_failed(self, error: TierlogError) -> None:
        """A batch of the transaction failed for good (the lock is held)."""
        self._record(error)

    # -- internals ----------------------------------------------------------------------

    def _timeout(self) -> float:
        return self.request_timeout_s

    def _call(self, method: Callable[[_Stub], _T]) -> _T:
        """``method`` at the coordinator (found and retried by ``CoordinatorClient``); a
        refusal is recorded, fatal or abortable, and raised (fencing as fencing)."""
        try:
            return self._calls.call(lambda channel: method(_Stub(channel)))
        except TierlogError as error:
            with self.lock:
                self._record(error)
            raise _fatal(error) from None

    def _check_not_fatal(self) -> None:
        if self.state is TransactionState.FATAL_ERROR:
            assert self._error is not None
            raise self._error

    def _record(self, error: TierlogError) -> None:
        """Keep the first error of the transaction; fatal ones end the producer's."""
        if self.state is TransactionState.FATAL_ERROR:
            return
        if reason_of(error) in FATAL_REASONS:
            self._error = _fatal(error)
            self.state = TransactionState.FATAL_ERROR
            return
        if self._error is None:
            self._error = error
        if self.state is TransactionState.IN_TRANSACTION:
            self.state = TransactionState.ABORTABLE_ERROR
